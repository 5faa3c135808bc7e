/* Lab 03: ZeRO stages 1, 2 and 3. See zero.h for who owns what and
 * labs/03_zero/README.md for the memory and communication formulas. */
#include "zero.h"

#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "check.h"
#include "device.h"
#include "kernels.h"
#include "memplan.h"

/* This rank's slice of unit u in a full padded buffer, and its shards. */
static float *owned_in_full(const Zero *z, float *full, int u) {
    return full + z->units[u].padded_offset + (size_t)z->dp->rank * z->units[u].shard;
}
static float *owned_params(const Zero *z, int u) {
    return z->stage == 3 ? z->params_shard + z->units[u].shard_offset
                         : owned_in_full(z, z->params_full, u);
}
static float *owned_grads(const Zero *z, int u) {
    return z->stage == 1 ? owned_in_full(z, z->grads_full, u)
                         : z->grads_shard + z->units[u].shard_offset;
}

void zero_init(Zero *z, int stage, int prefetch, Comm *dp, Comm *metrics, const GPTLayout *layout,
               unsigned long long seed) {
    memset(z, 0, sizeof *z);
    z->stage = stage;
    z->prefetch = prefetch;
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
    CHECK(z->units && z->grad_work && z->gathered && z->gathering && z->reducing && z->reduced &&
              z->shard_runs && z->whole_runs,
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
    gpt_params_view(layout, NULL, &z->p);
    gpt_params_view(layout, NULL, &z->g);
    if (stage <= 2) {
        z->params_full = mem_alloc(MEM_PARAMS, z->padded_total * F);
        for (int u = 0; u < z->nunits; u++) {
            const ZeroUnit *x = &z->units[u];
            gpt_init_params(layout, seed, x->offset, x->count, z->params_full + x->padded_offset);
            /* a unit another pipeline stage holds keeps NULL views */
            if (x->count) gpt_unit_view(layout, u, z->params_full + x->padded_offset, &z->p);
        }
    } else {
        /* each rank makes exactly its shard: the real elements among
         * [r S, (r+1) S) of the unit; the padding stays zero */
        z->params_shard = mem_alloc(MEM_PARAMS, z->shard_total * F);
        for (int u = 0; u < z->nunits; u++) {
            const ZeroUnit *x = &z->units[u];
            size_t first = (size_t)r * x->shard;
            size_t real = first >= x->count ? 0
                        : (x->count - first < x->shard ? x->count - first : x->shard);
            gpt_init_params(layout, seed, x->offset + first, real, z->params_shard + x->shard_offset);
        }
    }
    if (stage == 1) {
        z->grads_full = mem_alloc(MEM_GRADS, z->padded_total * F);
        for (int u = 0; u < z->nunits; u++)
            if (z->units[u].count)
                gpt_unit_view(layout, u, z->grads_full + z->units[u].padded_offset, &z->g);
    } else {
        z->grads_shard = mem_alloc(MEM_GRADS, z->shard_total * F);
    }
    z->adam_m = mem_alloc(MEM_OPTIMIZER, z->shard_total * F);
    z->adam_v = mem_alloc(MEM_OPTIMIZER, z->shard_total * F);
}

void zero_free(Zero *z) {
    for (int u = 0; u < z->nunits; u++) {
        CHECK(!z->grad_work[u] && !z->gathered[u] && !z->gathering[u].active && !z->reduced[u] &&
                  !z->reducing[u].active,
              "unit %d still holds a working buffer at the end", u);
    }
    mem_free(z->params_full);
    mem_free(z->grads_full);
    mem_free(z->params_shard);
    mem_free(z->grads_shard);
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

void zero_reduce_scatter_grads(Zero *z, int u, float *unit_grads) {
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
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

double zero_finish_grads(Zero *z, int micro_batches) {
    if (z->overlap_rs) zero_rs_finish(z);  /* the extension: what is still in flight */
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

/* Start gathering unit u into a fresh padded buffer. */
static void start_gather(Zero *z, int u) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

void zero3_params_needed(Zero *z, int u, int backward) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

void zero3_params_done(Zero *z, int u) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

/* Given: for --dump-params, after training and after memory.csv (so the
 * staging buffer is plain malloc, outside the training's accounting). */
void zero_gather_params(Zero *z, float *out) {
    const int is_root = z->dp->rank == 0;
    for (int u = 0; u < z->nunits; u++) {
        const ZeroUnit *x = &z->units[u];
        float *unit = z->stage <= 2 ? z->params_full + x->padded_offset : NULL;
        if (z->stage == 3) {
            unit = malloc((size_t)z->dp->size * x->shard * sizeof(float));
            CHECK(unit != NULL, "out of memory");
            comm_allgather(z->dp, z->params_shard + x->shard_offset, unit,
                           (size_t)z->dp->size * x->shard, COMM_FLOAT);
        }
        if (is_root) device_copy(out + x->offset, unit, x->count * sizeof(float));
        if (z->stage == 3) free(unit);
    }
}

/* Given (zero.h); set_zero is a kernel: with --device cuda the gradients
 * are GPU memory */
void zero_begin_step(Zero *z) {
    if (z->stage == 1) set_zero(z->grads_full, z->padded_total);
    else set_zero(z->grads_shard, z->shard_total);
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
    const int s3 = z->stage == 3;
    *h = (CkptHeld){{s3 ? z->params_shard : z->params_full, z->adam_m, z->adam_v},
                    {s3 ? z->shard_runs : z->whole_runs, z->shard_runs, z->shard_runs},
                    {z->nunits, z->nunits, z->nunits},
                    {!s3, 0, 0},
                    s3 ? "ZeRO-3 shards" : z->stage == 2 ? "ZeRO-2 shards" : "ZeRO-1 shards"};
}
