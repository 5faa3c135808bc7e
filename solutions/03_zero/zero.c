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
    /* BEGIN SOLUTION */
    const ZeroUnit *x = &z->units[u];
    /* in place: rank r's sum lands on its own slice [r S, (r+1) S) */
    void *mine = comm_at(unit_grads, z->grad_dtype, (size_t)z->dp->rank * x->shard);
    comm_reduce_scatter(z->dp, unit_grads, mine, (size_t)z->dp->size * x->shard, z->grad_dtype,
                        COMM_SUM);
    if (z->stage >= 2) add_inplace_as(owned_grads(z, u), mine, x->shard, grad_format(z));
    /* END SOLUTION */
}

void zero_grads_begin(Zero *z, int u) {
    if (z->overlap_rs) zero_rs_progress(z, u);  /* the extension */
    /* BEGIN SOLUTION */
    const ZeroUnit *x = &z->units[u];
    /* zeroed (mem_alloc), padded to N S_u so the reduce-scatter splits evenly */
    z->grad_work[u] = mem_alloc(MEM_GRADS, (size_t)z->dp->size * x->shard * sizeof(float));
    gpt_unit_view(z->layout, u, z->grad_work[u], &z->g);
    /* END SOLUTION */
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
    /* BEGIN SOLUTION */
    void *unit = zero_take_unit_grads(z, u);
    zero_reduce_scatter_grads(z, u, unit);
    mem_free(unit);
    /* END SOLUTION */
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
    /* BEGIN SOLUTION */
    if (z->stage == 1)
        for (int u = 0; u < z->nunits; u++)
            zero_reduce_scatter_grads(z, u, comm_at(z->grads_full, z->grad_dtype,
                                                    z->units[u].padded_offset));
    if (z->replicate) zero_hsdp_average(z);  /* the second extension */
    /* the same two divisions, in the same order, as DDP and the loop */
    double sumsq = 0.0;
    const int gf = grad_format(z);
    for (int u = 0; u < z->nunits; u++) {
        void *g = zero_step_grads(z, u);
        scale_inplace_as(g, 1.0f / (float)z->dp->size, z->units[u].shard, gf);
        if (micro_batches > 1) scale_inplace_as(g, 1.0f / micro_batches, z->units[u].shard, gf);
        sumsq += sum_squares_as(g, z->units[u].shard, gf);
    }
    /* each rank has the squares of its shard only */
    comm_allreduce(z->metrics, &sumsq, &sumsq, 1, COMM_DOUBLE, COMM_SUM);
    return sumsq;
    /* END SOLUTION */
}

/* ---- the extension: the reduce-scatter behind the backward pass ---------- *
 * (--overlap-rs; zero.h says when the hooks call these.) One in-place
 * reduce-scatter in flight per group, or several out of place into buffers
 * of your own: say here which, and why. */

void zero_rs_start(Zero *z, int u) {
    /* BEGIN SOLUTION */
    /* One reduce-scatter in flight, in place, rather than several out of
     * place: this first completes the previous unit's, then starts u's.
     *   - Memory. A working buffer now lives until its sum has arrived, so
     *     at worst the embeddings', the unit in flight and the unit being
     *     computed are alive: P_0 + P_(u+1) + P_u (memplan.h). Out of
     *     place, each transfer also needs an S_u receive buffer (MEM_COMM),
     *     and letting k fly keeps k + 1 whole unit gradients alive: ZeRO-2
     *     exists to keep the gradient small, and every unit in flight gives
     *     back part of that.
     *   - Time. The wait for unit u+1 comes after unit u's whole backward
     *     computation: a transfer shorter than one unit's compute is hidden
     *     entirely, and a longer one is not helped by a second in flight on
     *     the same link (it stays busy either way). Without a progress
     *     thread (Open MPI here) a transfer moves only inside MPI calls,
     *     at the hooks, whatever the depth.
     *   - Determinism. Where each buffer is freed depends only on the order
     *     of the hooks, never on when a comm_test happens to succeed, so
     *     memory.csv is the same on every run (the grader compares it
     *     exactly).
     * comm.h's one scratch buffer per group serves it, as it serves the
     * blocking version: the comm category does not grow. */
    zero_rs_finish(z);  /* the previous unit's: it travelled during u's backward */
    const ZeroUnit *x = &z->units[u];
    void *unit = zero_take_unit_grads(z, u);  /* the transfer owns it now */
    z->reduced[u] = unit;
    comm_ireduce_scatter(z->dp, unit, comm_at(unit, z->grad_dtype, (size_t)z->dp->rank * x->shard),
                         (size_t)z->dp->size * x->shard, z->grad_dtype, COMM_SUM,
                         &z->reducing[u]);
    /* END SOLUTION */
}

void zero_rs_progress(Zero *z, int u) {
    /* BEGIN SOLUTION */
    /* the previous micro-batch's last unit (the embeddings) may still be in
     * flight: its buffer must be gone before u gets a new one, and its sum
     * added before this micro-batch's */
    if (z->reduced[u]) zero_rs_finish(z);
    for (int v = 0; v < z->nunits; v++)
        if (z->reducing[v].active) comm_test(&z->reducing[v]);
    /* END SOLUTION */
}

void zero_rs_finish(Zero *z) {
    /* BEGIN SOLUTION */
    /* a comm_test may have completed the transfer already; the sum is added
     * and the buffer freed here, at a point fixed by the hook order */
    for (int v = 0; v < z->nunits; v++) {
        if (!z->reduced[v]) continue;
        const ZeroUnit *x = &z->units[v];
        comm_wait(&z->reducing[v]);
        const void *mine = comm_at(z->reduced[v], z->grad_dtype, (size_t)z->dp->rank * x->shard);
        add_inplace_as(owned_grads(z, v), mine, x->shard, grad_format(z));
        mem_free(z->reduced[v]);
        z->reduced[v] = NULL;
    }
    /* END SOLUTION */
}

/* ---- the second extension: hybrid sharding -------------------------------- */

void zero_hsdp_groups(Comm *dp, int shard_ranks, Comm **shard, Comm **replicate) {
    /* BEGIN SOLUTION */
    /* shard group g = ranks g K .. g K + K - 1, one node's; the replicate
     * group of the i-th rank of every shard group strides by K, one rank
     * per node. Its rank order is the groups' order, so the ring of the
     * all-reduce visits the nodes in turn. */
    *shard = comm_split(dp, dp->rank / shard_ranks, dp->rank % shard_ranks, "shard");
    *replicate = comm_split(dp, dp->rank % shard_ranks, dp->rank / shard_ranks, "replicate");
    /* END SOLUTION */
}

void zero_hsdp_average(Zero *z) {
    /* BEGIN SOLUTION */
    /* per unit, as the shards lie (ZeRO-1's in the full buffer). Every
     * replica must get the same bits, or their AdamW steps drift apart:
     * the all-reduce returns one result to all its ranks (the run's
     * params_checksum.csv shows it held) */
    const int R = z->replicate->size;
    for (int u = 0; u < z->nunits; u++) {
        if (z->units[u].count == 0) continue;  /* lab 10: another stage's unit */
        void *g = owned_grads(z, u);
        comm_allreduce(z->replicate, g, g, z->units[u].shard, z->grad_dtype, COMM_SUM);
        scale_inplace_as(g, 1.0f / (float)R, z->units[u].shard, grad_format(z));
    }
    /* END SOLUTION */
}

/* ---- the third extension: ZeRO-Offload ------------------------------------ */

void zero_offload_grads(Zero *z, int u) {
    /* BEGIN SOLUTION */
    /* on the communication stream, after the reduce-scatter's kernels: the
     * units before u in the backward order compute meanwhile */
    const ZeroUnit *x = &z->units[u];
    device_comm_copy(zero_step_grads(z, u), owned_grads(z, u),
                     x->shard * comm_dtype_size(z->grad_dtype));
    /* END SOLUTION */
}

void zero_offload_wait(Zero *z) {
    (void)z;
    /* BEGIN SOLUTION */
    device_comm_synchronize();
    /* END SOLUTION */
}

void zero_offload_params(Zero *z) {
    /* BEGIN SOLUTION */
    /* up the host link: the 2-byte compute copy is rounded on the host, in
     * the room of the gradient shard the step has used up (2 bytes an
     * element or more), so only P bytes an element cross */
    for (int u = 0; u < z->nunits; u++) {
        const ZeroUnit *x = &z->units[u];
        const float *master = zero_owned_master(z, u);
        const void *up = master;
        if (z->dtype != COMM_FLOAT) {
            up = comm_at(z->host_grads, z->dtype, x->shard_offset);
            narrow_to_half((uint16_t *)up, master, x->shard, format(z));
        }
        device_copy(owned_params(z, u), up, x->shard * comm_dtype_size(z->dtype));
    }
    /* END SOLUTION */
}

void *zero_step_grads(const Zero *z, int u) {
    return z->offload ? comm_at(z->host_grads, z->grad_dtype, z->units[u].shard_offset)
                      : owned_grads(z, u);
}

/* ---- the step ------------------------------------------------------------- */

void zero_update(Zero *z, const AdamWStep *s) {
    /* BEGIN SOLUTION */
    for (int u = 0; u < z->nunits; u++) {
        const ZeroUnit *x = &z->units[u];
        adamw_update_as(zero_owned_master(z, u), zero_step_grads(z, u), s->clip,
                        z->adam_m + x->shard_offset, z->adam_v + x->shard_offset, x->shard,
                        grad_format(z), s->lr, s->beta1, s->beta2, s->eps, s->weight_decay, s->t);
    }
    zero_copy_down(z);
    if (z->stage == 3) return;  /* parameters stay sharded until a pass needs them */
    for (int u = 0; u < z->nunits; u++) {
        void *unit = comm_at(z->params_full, z->dtype, z->units[u].padded_offset);
        comm_allgather(z->dp, owned_params(z, u), unit, (size_t)z->dp->size * z->units[u].shard,
                       z->dtype);
    }
    /* END SOLUTION */
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
    /* BEGIN SOLUTION */
    const ZeroUnit *x = &z->units[u];
    const size_t n = (size_t)z->dp->size * x->shard;
    z->gathered[u] = mem_alloc(MEM_PARAMS, n * comm_dtype_size(z->dtype));
    comm_iallgather(z->dp, owned_params(z, u), z->gathered[u], n, z->dtype, &z->gathering[u]);
    /* END SOLUTION */
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
    /* BEGIN SOLUTION */
    if (!z->gathered[u]) start_gather(z, u, backward);  /* not prefetched: gather now */
    zero3_wait_gather(z, u, backward);
    zero_view_params(z, u, z->gathered[u]);
    int next = z->prefetch ? zero3_next_unit(z, u, backward) : -1;
    if (next >= 0 && !z->gathered[next]) start_gather(z, next, backward);
    /* END SOLUTION */
}

void zero3_params_done(Zero *z, int u) {
    /* BEGIN SOLUTION */
    mem_free(z->gathered[u]);
    z->gathered[u] = NULL;
    /* MPI moves the prefetch in flight forward only inside MPI calls */
    for (int v = 0; v < z->nunits; v++)
        if (z->gathering[v].active) comm_test(&z->gathering[v]);
    /* END SOLUTION */
}

/* ---- the fourth extension: ZeRO++ ----------------------------------------- */

void zero_qwz_gather_start(Zero *z, int u) {
    /* BEGIN SOLUTION */
    const ZeroUnit *x = &z->units[u];
    const size_t N = (size_t)z->dp->size, Q = quant_packed_bytes(x->shard);
    z->gathered[u] = mem_alloc(MEM_PARAMS, N * x->shard * sizeof(float));
    z->packed[u] = mem_alloc(MEM_COMM, N * Q);
    /* in place: this rank's bytes are its slice of the buffer */
    char *mine = (char *)z->packed[u] + (size_t)z->dp->rank * Q;
    quantize_int8(mine, owned_params(z, u), x->shard);
    comm_iallgather(z->dp, mine, z->packed[u], N * Q, COMM_BYTE, &z->gathering[u]);
    /* END SOLUTION */
}

void zero_qwz_gather_finish(Zero *z, int u) {
    /* BEGIN SOLUTION */
    const ZeroUnit *x = &z->units[u];
    const size_t Q = quant_packed_bytes(x->shard);
    float *unit = z->gathered[u];
    for (int r = 0; r < z->dp->size; r++)  /* each slice has its own blocks */
        dequantize_int8(unit + (size_t)r * x->shard, (char *)z->packed[u] + (size_t)r * Q,
                        x->shard, 0);
    mem_free(z->packed[u]);
    z->packed[u] = NULL;
    /* END SOLUTION */
}

void zero_hpz_keep(Zero *z, int u) {
    /* BEGIN SOLUTION */
    const size_t part = (size_t)z->dp->size * z->units[u].shard / (size_t)z->node->size;
    mem_free(z->secondary[u]);
    z->secondary[u] = mem_alloc(MEM_PARAMS, part * sizeof(float));
    device_copy(z->secondary[u], (float *)z->gathered[u] + (size_t)z->node->rank * part,
                part * sizeof(float));
    /* END SOLUTION */
}

void zero_hpz_gather_start(Zero *z, int u) {
    /* BEGIN SOLUTION */
    const size_t n = (size_t)z->dp->size * z->units[u].shard;
    z->gathered[u] = mem_alloc(MEM_PARAMS, n * sizeof(float));
    comm_iallgather(z->node, z->secondary[u], z->gathered[u], n, COMM_FLOAT, &z->gathering[u]);
    /* END SOLUTION */
}

void zero_qgz_reduce(Zero *z, int u, float *grads) {
    /* BEGIN SOLUTION */
    const size_t S = z->units[u].shard, Q = quant_packed_bytes(S);
    const int K = z->node->size, M = z->across->size;
    /* 1: shard s = n K + i belongs to rank s, which is local rank i of node
     * n; what goes to local rank i is the M shards n K + i, node order */
    char *send = mem_alloc(MEM_COMM, (size_t)K * M * Q), *recv = mem_alloc(MEM_COMM, (size_t)K * M * Q);
    for (int i = 0; i < K; i++)
        for (int n = 0; n < M; n++)
            quantize_int8(send + ((size_t)i * M + n) * Q, grads + ((size_t)n * K + i) * S, S);
    comm_alltoall(z->node, send, recv, (size_t)M * Q, COMM_BYTE);
    mem_free(send);
    /* the node's K contributions to my M shards, summed in fp32 */
    float *partial = mem_alloc(MEM_COMM, (size_t)M * S * sizeof(float));  /* zeroed */
    for (int from = 0; from < K; from++)
        for (int n = 0; n < M; n++)
            dequantize_int8(partial + (size_t)n * S, recv + ((size_t)from * M + n) * Q, S, 1);
    mem_free(recv);
    /* 2: partial sum n goes to node n's rank of my index: across's rank n */
    char *send2 = mem_alloc(MEM_COMM, (size_t)M * Q);
    for (int n = 0; n < M; n++) quantize_int8(send2 + (size_t)n * Q, partial + (size_t)n * S, S);
    mem_free(partial);
    char *recv2 = mem_alloc(MEM_COMM, (size_t)M * Q);
    comm_alltoall(z->across, send2, recv2, Q, COMM_BYTE);
    mem_free(send2);
    for (int n = 0; n < M; n++)  /* into the shard, which accumulates micro-batches */
        dequantize_int8(owned_grads(z, u), recv2 + (size_t)n * Q, S, 1);
    mem_free(recv2);
    /* END SOLUTION */
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
