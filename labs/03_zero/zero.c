/* Lab 03: ZeRO stages 1, 2 and 3. See zero.h for who owns what and
 * labs/03_zero/README.md for the memory and communication formulas. */
#include "zero.h"

#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "check.h"
#include "device.h"
#include "kernels.h"
#include "math_shared.h"
#include "memplan.h"

/* The formats (precision.h) of the parameters and of the gradients */
static int format(const Zero *z) { return comm_dtype_precision(z->dtype); }
static int grad_format(const Zero *z) { return comm_dtype_precision(z->grad_dtype); }

/* This rank's slice of unit u in a full padded buffer of dtype t, and its
 * shards. */
static void *owned_in_full(const Zero *z, void *full, CommDtype t, int u) {
    return comm_at(full, t, z->units[u].padded_offset + (size_t)z->dp->rank * z->units[u].shard);
}
static void *owned_params(const Zero *z, int u) {
    return z->stage == 3 ? comm_at(z->params_shard, z->dtype, z->units[u].shard_offset)
                         : owned_in_full(z, z->params_full, z->dtype, u);
}
static void *owned_grads(const Zero *z, int u) {
    return z->stage == 1 ? owned_in_full(z, z->grads_full, z->grad_dtype, u)
                         : comm_at(z->grads_shard, z->grad_dtype, z->units[u].shard_offset);
}

void zero_init(Zero *z, int stage, int prefetch, int offload, Comm *dp, Comm *metrics,
               const GPTLayout *layout, unsigned long long seed) {
    memset(z, 0, sizeof *z);
    z->stage = stage;
    z->prefetch = prefetch;
    z->offload = offload;
    z->dp = dp;
    z->metrics = metrics;
    z->layout = layout;
    z->nunits = gpt_num_units(layout);
    z->units = calloc((size_t)z->nunits, sizeof *z->units);
    z->grad_work = calloc((size_t)z->nunits, sizeof *z->grad_work);
    z->gathered = calloc((size_t)z->nunits, sizeof *z->gathered);
    z->gathering = calloc((size_t)z->nunits, sizeof *z->gathering);
    z->reducing = calloc((size_t)z->nunits, sizeof *z->reducing);
    z->reduced = calloc((size_t)z->nunits, sizeof *z->reduced);
    z->shard_runs = calloc((size_t)z->nunits, sizeof *z->shard_runs);
    z->whole_runs = calloc((size_t)z->nunits, sizeof *z->whole_runs);
    z->packed = calloc((size_t)z->nunits, sizeof *z->packed);
    z->secondary = calloc((size_t)z->nunits, sizeof *z->secondary);
    CHECK(z->units && z->grad_work && z->gathered && z->gathering && z->reducing && z->reduced &&
              z->shard_runs && z->whole_runs && z->packed && z->secondary,
          "out of memory");
    const int N = dp->size, r = dp->rank;
    for (int u = 0; u < z->nunits; u++) {
        ZeroUnit *x = &z->units[u];
        gpt_unit_range(layout, u, &x->offset, &x->count);
        x->shard = unit_shard_size(x->count, N);
        x->padded_offset = z->padded_total;
        x->shard_offset = z->shard_total;
        z->padded_total += (size_t)N * x->shard;
        z->shard_total += x->shard;
    }
    const size_t F = sizeof(float);
    const int mixed = layout->cfg.precision != PRECISION_FP32;
    z->dtype = comm_dtype_of(layout->cfg.precision);
    z->grad_dtype = comm_dtype_of(gpt_grad_precision(&layout->cfg));
    const size_t P = comm_dtype_size(z->dtype), G = comm_dtype_size(z->grad_dtype);
    gpt_params_view(layout, NULL, &z->p);
    gpt_params_view(layout, NULL, &z->g);
    if (mixed) widened_init(&z->weights, layout, layout->cfg.precision, MEM_WORKSPACE);
    if (stage <= 2) {
        z->params_full = mem_alloc(MEM_PARAMS, z->padded_total * P);
        for (int u = 0; u < z->nunits; u++) {
            const ZeroUnit *x = &z->units[u];
            void *unit = comm_at(z->params_full, z->dtype, x->padded_offset);
            if (mixed) {  /* made whole in fp32 (a widened copy's room), then rounded */
                float *whole = u == GPT_UNIT_EMBED ? z->weights.embed : z->weights.other;
                gpt_init_params(layout, seed, x->offset, x->count, whole);
                narrow_to_half(unit, whole, x->count, layout->cfg.precision);
                continue;
            }
            gpt_init_params(layout, seed, x->offset, x->count, unit);
            /* a unit another pipeline stage holds keeps NULL views */
            if (x->count) gpt_unit_view(layout, u, unit, &z->p);
        }
    } else {
        z->params_shard = mem_alloc(MEM_PARAMS, z->shard_total * P);
    }
    /* the fp32 weights AdamW updates: each rank makes exactly its shard,
     * the real elements among [r S, (r+1) S) of each unit; the padding
     * stays zero (ZeRO-1/2 in fp32 made them whole above). With offload
     * they and the moments are host memory, an fp32 master even in fp32
     * (the device's copy is the one the passes read) */
    void *(*optimizer_alloc)(MemCategory, size_t) = offload ? mem_alloc_host : mem_alloc;
    if (mixed || offload) z->master = optimizer_alloc(MEM_OPTIMIZER, z->shard_total * F);
    for (int u = 0; u < z->nunits && (z->master || stage == 3); u++) {
        const ZeroUnit *x = &z->units[u];
        const size_t lo = zero_slice_start(x, (size_t)r), hi = zero_slice_start(x, (size_t)r + 1);
        gpt_init_params(layout, seed, x->offset + lo, hi - lo, zero_owned_master(z, u));
    }
    if (stage == 1) {
        z->grads_full = mem_alloc(MEM_GRADS, z->padded_total * G);
        for (int u = 0; u < z->nunits && z->grad_dtype == COMM_FLOAT; u++)
            if (z->units[u].count)
                gpt_unit_view(layout, u, comm_at(z->grads_full, COMM_FLOAT,
                                                 z->units[u].padded_offset), &z->g);
    } else {
        z->grads_shard = mem_alloc(MEM_GRADS, z->shard_total * G);
    }
    z->adam_m = optimizer_alloc(MEM_OPTIMIZER, z->shard_total * F);
    z->adam_v = optimizer_alloc(MEM_OPTIMIZER, z->shard_total * F);
    if (offload) z->host_grads = mem_alloc_host(MEM_GRADS, z->shard_total * G);
    if (stage == 1 && z->grad_dtype != COMM_FLOAT)
        widened_init(&z->grad_units, layout, gpt_grad_precision(&layout->cfg), MEM_WORKSPACE);
    if (stage == 3) zero_copy_down(z);  /* the compute shards from the master */
}

void zero_free(Zero *z) {
    for (int u = 0; u < z->nunits; u++) {
        CHECK(!z->grad_work[u] && !z->gathered[u] && !z->gathering[u].active && !z->reduced[u] &&
                  !z->reducing[u].active && !z->packed[u],
              "unit %d still holds a working buffer at the end", u);
        mem_free(z->secondary[u]);  /* hpZ: the last evaluation's forward kept it */
    }
    free(z->packed);
    free(z->secondary);
    mem_free(z->params_full);
    mem_free(z->grads_full);
    mem_free(z->params_shard);
    mem_free(z->grads_shard);
    mem_free(z->master);
    mem_free(z->host_grads);
    widened_free(&z->weights);
    widened_free(&z->grad_units);
    mem_free(z->adam_m);
    mem_free(z->adam_v);
    gpt_params_view_free(&z->p);
    gpt_params_view_free(&z->g);
    free(z->units);
    free(z->grad_work);
    free(z->gathered);
    free(z->gathering);
    free(z->reducing);
    free(z->reduced);
    free(z->shard_runs);
    free(z->whole_runs);
}

/* ---- gradients ------------------------------------------------------------ */

void zero_reduce_scatter_grads(Zero *z, int u, void *unit_grads) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

void zero_grads_begin(Zero *z, int u) {
    if (z->overlap_rs) zero_rs_progress(z, u);  /* the extension */
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

void zero_grads_ready(Zero *z, int u) {
    if (z->overlap_rs) {  /* the extension: start it, complete it later */
        zero_rs_start(z, u);
        return;
    }
    if (z->qgz) {  /* the fourth: through two quantized all-to-alls */
        float *unit = zero_take_unit_grads(z, u);
        zero_qgz_reduce(z, u, unit);
        mem_free(unit);
        return;
    }
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
    if (z->offload && z->last_micro) zero_offload_grads(z, u);  /* the third extension */
}

void *zero_take_unit_grads(Zero *z, int u) {
    float *work = z->grad_work[u];
    z->grad_work[u] = NULL;
    if (z->grad_dtype == COMM_FLOAT) return work;
    const size_t n = (size_t)z->dp->size * z->units[u].shard;
    uint16_t *unit = mem_alloc(MEM_GRADS, n * sizeof(uint16_t));
    narrow_to_half(unit, work, n, grad_format(z));
    mem_free(work);
    return unit;
}

double zero_finish_grads(Zero *z, int micro_batches) {
    if (z->overlap_rs) zero_rs_finish(z);  /* the extension: what is still in flight */
    if (z->offload) zero_offload_wait(z);  /* the third: the shards on the host */
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

/* ---- the extension: the reduce-scatter behind the backward pass ---------- *
 * (--overlap-rs; zero.h says when the hooks call these.) One in-place
 * reduce-scatter in flight per group, or several out of place into buffers
 * of your own: say here which, and why. */

void zero_rs_start(Zero *z, int u) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

void zero_rs_progress(Zero *z, int u) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

void zero_rs_finish(Zero *z) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

/* ---- the second extension: hybrid sharding -------------------------------- */

void zero_hsdp_groups(Comm *dp, int shard_ranks, Comm **shard, Comm **replicate) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

void zero_hsdp_average(Zero *z) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

/* ---- the third extension: ZeRO-Offload ------------------------------------ */

void zero_offload_grads(Zero *z, int u) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

void zero_offload_wait(Zero *z) {
    (void)z;
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

void zero_offload_params(Zero *z) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

void *zero_step_grads(const Zero *z, int u) {
    return z->offload ? comm_at(z->host_grads, z->grad_dtype, z->units[u].shard_offset)
                      : owned_grads(z, u);
}

/* ---- the step ------------------------------------------------------------- */

void zero_update(Zero *z, const AdamWStep *s) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

/* ---- ZeRO-3 parameters ---------------------------------------------------- */

int zero3_next_unit(const Zero *z, int u, int backward) {
    const int last = z->nunits - 1;  /* the final layernorm */
    if (!backward) return u < last ? u + 1 : -1;
    if (u == GPT_UNIT_EMBED) return last;
    return u > 1 ? u - 1 : -1;
}

/* Start gathering unit u into a fresh padded buffer: ZeRO++'s gathers
 * where the fourth extension is on (a backward's from hpZ's secondary
 * copy, else quantized) */
static void start_gather(Zero *z, int u, int backward) {
    if (backward && z->hpz && z->secondary[u]) {
        zero_hpz_gather_start(z, u);
        return;
    }
    if (z->qwz) {
        zero_qwz_gather_start(z, u);
        return;
    }
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

/* Given (zero.h) */
void zero3_wait_gather(Zero *z, int u, int backward) {
    comm_wait(&z->gathering[u]);
    if (z->packed[u]) zero_qwz_gather_finish(z, u);
    if (backward && z->secondary[u]) {
        mem_free(z->secondary[u]);
        z->secondary[u] = NULL;
    }
    if (!backward && z->hpz && u == GPT_UNIT_EMBED)  /* a forward starts: an evaluation's */
        for (int v = 0; v < z->nunits; v++) {       /* copies (it had no backward) go */
            mem_free(z->secondary[v]);
            z->secondary[v] = NULL;
        }
    if (!backward && z->hpz) zero_hpz_keep(z, u);
}

void zero3_params_needed(Zero *z, int u, int backward) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

void zero3_params_done(Zero *z, int u) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

/* ---- the fourth extension: ZeRO++ ----------------------------------------- */

void zero_qwz_gather_start(Zero *z, int u) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

void zero_qwz_gather_finish(Zero *z, int u) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

void zero_hpz_keep(Zero *z, int u) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

void zero_hpz_gather_start(Zero *z, int u) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

void zero_qgz_reduce(Zero *z, int u, float *grads) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

/* Given: for --dump-params, after training and after memory.csv (so the
 * staging buffer is plain malloc, outside the training's accounting). */
void zero_gather_params(Zero *z, float *out) {
    const int whole = z->stage <= 2 && !z->master;
    for (int u = 0; u < z->nunits; u++) {
        const ZeroUnit *x = &z->units[u];
        float *unit = whole ? comm_at(z->params_full, COMM_FLOAT, x->padded_offset) : NULL;
        if (!whole) {  /* the fp32 shards (ZeRO-3's, or the master) */
            unit = malloc((size_t)z->dp->size * x->shard * sizeof(float));
            CHECK(unit != NULL, "out of memory");
            comm_allgather(z->dp, zero_owned_master(z, u), unit, (size_t)z->dp->size * x->shard,
                           COMM_FLOAT);
        }
        if (out) device_copy(out + x->offset, unit, x->count * sizeof(float));
        if (!whole) free(unit);
    }
}

/* Given (zero.h); set_zero is a kernel: with --device cuda the gradients
 * are GPU memory */
void zero_begin_step(Zero *z) {
    const size_t G = comm_dtype_size(z->grad_dtype);  /* +0 is all zero bits in every format */
    if (z->stage == 1) device_zero(z->grads_full, z->padded_total * G);
    else device_zero(z->grads_shard, z->shard_total * G);
}

/* ---- mixed precision (given) ----------------------------------------------- */

float *zero_owned_master(const Zero *z, int u) {
    return z->master ? z->master + z->units[u].shard_offset : owned_params(z, u);
}

void zero_copy_down(Zero *z) {
    if (z->offload) zero_offload_params(z);  /* the third extension: host to device */
    else if (z->master)
        for (int u = 0; u < z->nunits; u++)
            narrow_to_half(owned_params(z, u), zero_owned_master(z, u), z->units[u].shard,
                           format(z));
}

void zero_view_params(Zero *z, int u, const void *unit) {
    if (z->dtype != COMM_FLOAT) widened_open(&z->weights, u, unit, &z->p);
    else gpt_unit_view(z->layout, u, (float *)unit, &z->p);
}

void zero_unview_params(Zero *z, int u) {
    if (z->dtype != COMM_FLOAT) widened_close(&z->weights, u, NULL);
}

static uint16_t *full_grads_unit(Zero *z, int u) {
    return comm_at(z->grads_full, z->grad_dtype, z->units[u].padded_offset);
}
void zero_view_grads(Zero *z, int u) { widened_open(&z->grad_units, u, full_grads_unit(z, u), &z->g); }
void zero_unview_grads(Zero *z, int u) { widened_close(&z->grad_units, u, full_grads_unit(z, u)); }

void zero_sum_layernorm_grads(Zero *z) {
    if (z->grad_dtype == COMM_FLOAT) {
        z->layout->sp_ops->sum_layernorm_grads(z->layout, &z->g);
        return;
    }
    uint16_t *starts[z->nunits];
    for (int u = 0; u < z->nunits; u++) starts[u] = full_grads_unit(z, u);
    widened_sum_layernorm_grads(&z->grad_units, starts);
}

void zero_loaded(Zero *z) {
    if (!z->master) return;  /* fp32: what was loaded is what the passes read */
    zero_copy_down(z);
    for (int u = 0; u < z->nunits && z->stage <= 2; u++)
        comm_allgather(z->dp, owned_params(z, u),
                                comm_at(z->params_full, z->dtype, z->units[u].padded_offset),
                                (size_t)z->dp->size * z->units[u].shard, z->dtype);
}

/* Given: the checkpoint's view of the states (zero.h) */
void zero_held(Zero *z, CkptHeld *h) {
    const size_t r = (size_t)z->dp->rank;
    for (int u = 0; u < z->nunits; u++) {
        const ZeroUnit *x = &z->units[u];
        const size_t lo = zero_slice_start(x, r), hi = zero_slice_start(x, r + 1);
        z->shard_runs[u] = (CkptRun){x->offset + lo, hi - lo, x->shard_offset};
        z->whole_runs[u] = (CkptRun){x->offset, x->count, x->padded_offset};
    }
    /* fp32 weights: ZeRO-1/2's whole in fp32; ZeRO-3's, and the master in
     * mixed precision, this rank's shards */
    const int sharded = z->stage == 3 || z->master;
    float *weights = z->master ? z->master : z->stage == 3 ? z->params_shard : z->params_full;
    *h = (CkptHeld){{weights, z->adam_m, z->adam_v},
                    {sharded ? z->shard_runs : z->whole_runs, z->shard_runs, z->shard_runs},
                    {z->nunits, z->nunits, z->nunits},
                    {!sharded, 0, 0},
                    z->stage == 3 ? "ZeRO-3 shards" : z->stage == 2 ? "ZeRO-2 shards" : "ZeRO-1 shards",
                    {0}};
    if (z->replicate)  /* hybrid sharding: replica 0's shard group writes the shards */
        h->hybrid = (CkptHybrid){z->replicate->rank, z->replicate->size};
}
