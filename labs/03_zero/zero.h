/* Lab 03: ZeRO, the Zero Redundancy Optimizer. DDP keeps 16 bytes per
 * parameter on EVERY rank (4 weights, 4 gradients, 8 AdamW moments), N
 * identical copies. ZeRO keeps each byte on one rank only, in three stages:
 *
 *   ZeRO-1  the moments are sharded: rank r updates only its shard of the
 *           parameters, from its shard of the gradients (reduce-scatter
 *           instead of all-reduce), then the shards are all-gathered.
 *   ZeRO-2  the gradients too: each unit's gradient is reduce-scattered as
 *           soon as the backward pass has finished it, and only the shard
 *           is kept.
 *   ZeRO-3  the parameters too: a unit is all-gathered just before the
 *           forward (and again the backward) pass reads it and freed right
 *           after; the next unit's gather can run while one computes.
 *
 * Everything is sharded unit by unit (layout.h: embeddings, each block,
 * final layernorm), with memplan.h's padding: unit u (n_u elements) is
 * padded to N S_u, S_u = ceil(n_u / N), and rank r owns [r S_u, (r+1) S_u)
 * of it. This rank's shards of all units sit one after another in the
 * shard buffers (grads_shard, adam_m, adam_v, and ZeRO-3's params_shard):
 * unit u's at shard_offset[u]. Full-size buffers (ZeRO-1/2's parameters,
 * ZeRO-1's gradients) keep every unit padded: unit u at padded_offset[u].
 *
 * Who owns what, per rank (Phi counted with padding):
 *             params          grads           moments
 *   ZeRO-1    full            full            shard
 *   ZeRO-2    full            shard (+ 1 unit while it is being computed)
 *   ZeRO-3    shard (+ the gathered units)    shard   shard
 *
 * Mixed precision (--precision bf16|fp16, lab 11): the parameters the
 * passes read and the collectives move are a 2-byte compute copy (dtype),
 * the gradients 2 bytes too (grad_dtype; fp32 with --fp32-grads), and the
 * optimizer's shard holds fp32 master weights beside the moments (master:
 * 12 bytes an owned element, the ZeRO paper's K). Buffers of elements are
 * void *: element i of a buffer of dtype t is comm_at(buf, t, i), and the
 * _as kernels (kernels.h) compute on any format. In fp32 dtype and
 * grad_dtype are COMM_FLOAT and master is NULL: the owned parameters are
 * the master. Bytes per parameter:
 *             fp32                  mixed precision
 *   ZeRO-1    4 + 4 + 8/N           2 + 2 + 12/N
 *   ZeRO-2    4 + 4/N + 8/N         2 + 2/N + 12/N
 *   ZeRO-3    (4 + 4 + 8)/N         (2 + 2 + 12)/N
 */
#ifndef ZERO_H
#define ZERO_H

#include <stddef.h>

#include "comm.h"
#include "model.h"
#include "train.h"
#include "widened.h"

typedef struct {
    size_t offset, count;   /* the unit's range in the flat buffer (layout.h) */
    size_t shard;           /* S_u: elements per rank; the unit is padded to N S_u */
    size_t padded_offset;   /* where the unit starts in a full padded buffer */
    size_t shard_offset;    /* where this rank's S_u start in a shard buffer */
} ZeroUnit;

/* Where rank r's slice [r S_u, (r+1) S_u) of unit x starts among the
 * unit's real elements, clamped to its count: the real part of the slice
 * is [zero_slice_start(x, r), zero_slice_start(x, r + 1)), empty for a
 * rank whose slice is all padding. */
static inline size_t zero_slice_start(const ZeroUnit *x, size_t r) {
    return r * x->shard < x->count ? r * x->shard : x->count;
}

typedef struct {
    int stage;              /* 1, 2 or 3 */
    int prefetch;           /* ZeRO-3: gather the next unit while this one computes */
    Comm *dp;               /* the group the states are sharded over: the
                               data-parallel group, or with hybrid sharding
                               (--dp-shard) this rank's shard group */
    Comm *metrics;          /* the gradient norm's sum over dp's ranks (kept
                               out of dp's counts) */
    Comm *replicate;        /* hybrid sharding: the ranks holding the same
                               shard, one per shard group (set by the
                               trainer after zero_init); NULL: none */
    /* ZeRO-Offload (the third extension, zero_init's offload): master,
     * adam_m and adam_v are host memory (mem_alloc_host), and so is
     * host_grads, the owned gradient shard copied off the device (S_u
     * elements of grad_dtype per unit, at shard_offset[u]) while the last
     * micro-batch's backward pass goes on; last_micro says that pass is
     * running (set by the trainer's begin_backward). */
    int offload, last_micro;
    void *host_grads;
    /* ZeRO++ (the fourth extension, ZeRO-3 in fp32; set by the trainer
     * after zero_init, see below): qwz, hpz, qgz switch its three parts
     * on; node is this rank's K consecutive ranks of dp (one node), across
     * the ranks of its index in every node. Per unit: packed, a quantized
     * gather's bytes in flight; secondary, hpZ's copy of this rank's 1/K of
     * the unit, kept from its forward to its backward. */
    int qwz, hpz, qgz;
    Comm *node, *across;
    void **packed;
    float **secondary;
    const GPTLayout *layout; /* the model on this rank (layout.h): its units */
    int nunits;
    ZeroUnit *units;
    size_t shard_total;     /* sum of S_u: what this rank owns */
    size_t padded_total;    /* sum of N S_u */
    CommDtype dtype;        /* the parameters' elements (params_full, params_shard) */
    CommDtype grad_dtype;   /* the gradients' (grads_full, grads_shard) */

    void *params_full;      /* ZeRO-1/2: every unit, padded */
    void *grads_full;       /* ZeRO-1: every unit, padded */
    void *params_shard;     /* ZeRO-3 */
    void *grads_shard;      /* ZeRO-2/3 */
    float *master;          /* mixed precision: the owned fp32 weights, in shard layout */
    float *adam_m, *adam_v; /* the moments of this rank's shard */
    GPTParams p, g;         /* the views the passes read (fp32) */
    /* mixed precision: the units the passes read and write, widened to
     * fp32 (zero_view_params, zero_view_grads) */
    WidenedUnits weights, grad_units;

    /* ZeRO-2/3 during a backward pass: a unit's whole (padded) gradient,
     * fp32 (the passes accumulate in fp32) */
    float **grad_work;      /* per unit, NULL when not being computed */
    /* ZeRO-3: per unit, the gathered (padded) parameters or NULL; a gather
     * in flight has its request active */
    void **gathered;
    CommRequest *gathering;

    /* The extension (--overlap-rs, ZeRO-2/3): zero_grads_ready starts a
     * unit's reduce-scatter instead of waiting for it. Per unit: the
     * reduce-scatter in flight, and the buffer its sum arrives in (the
     * working buffer itself when in place, your own receive buffer when
     * not), NULL once that sum has been added into grads_shard and the
     * buffers freed. Set by the trainer after zero_init. */
    int overlap_rs;
    CommRequest *reducing;
    void **reduced;

    /* for checkpoints (zero_held): per unit, the run of this rank's shard
     * and the run of the whole unit */
    CkptRun *shard_runs, *whole_runs;
} Zero;

/* Lay out and allocate the states, initialize this rank's parameters (the
 * same values as one device: layout.h's init is counter-based). offload
 * (ZeRO-2/3): the optimizer's states in host memory (above). */
void zero_init(Zero *z, int stage, int prefetch, int offload, Comm *dp, Comm *metrics,
               const GPTLayout *layout, unsigned long long seed);
void zero_free(Zero *z);

/* Before a step's first micro-batch: zero the gradients it accumulates
 * into (ZeRO-1's full buffer, ZeRO-2/3's shards). */
void zero_begin_step(Zero *z);

/* ---- gradients ----
 * reduce-scatter unit u's padded gradient `unit_grads` (N S_u elements of
 * grad_dtype, this rank's micro-batch gradient): sum over the ranks into
 * this rank's shard. ZeRO-1: in place in grads_full (the sum lands on the
 * owned slice); ZeRO-2/3: in place in the working buffer, then added to
 * grads_shard (the shard accumulates over micro-batches). */
void zero_reduce_scatter_grads(Zero *z, int u, void *unit_grads);

/* ZeRO-2/3, the backward pass's hooks: unit u's gradient is about to be
 * computed (give it a zeroed working buffer of N S_u floats, MEM_GRADS, and
 * point the gradient views at it) / is final (take it in the gradients'
 * format, zero_take_unit_grads; reduce-scatter it; free it). */
void zero_grads_begin(Zero *z, int u);
void zero_grads_ready(Zero *z, int u);

/* Given: unit u's finished working gradient in the format it travels in:
 * in fp32 grad_work[u] itself; in 2 bytes a new buffer (MEM_GRADS) with
 * the fp32 one rounded into it and freed. grad_work[u] is NULL after; the
 * caller frees what it gets (mem_free). */
void *zero_take_unit_grads(Zero *z, int u);

/* ---- the extension: the reduce-scatter behind the backward pass ----
 * With z->overlap_rs set, the hooks above call these (ZeRO-2/3):
 *   zero_grads_ready(u)  -> zero_rs_start(u): unit u's gradient is final;
 *                           start its reduce-scatter (comm_ireduce_scatter)
 *                           and return; its buffer lives until the sum has
 *                           arrived;
 *   zero_grads_begin(u)  -> zero_rs_progress(u) first: keep what is in
 *                           flight moving (comm_test: MPI progresses only
 *                           inside MPI calls); a reduce-scatter of unit u
 *                           itself (the previous micro-batch's) must be
 *                           complete before u gets a new working buffer;
 *   zero_finish_grads    -> zero_rs_finish first: wait for everything in
 *                           flight, add each arrived slice into grads_shard
 *                           and free its buffers.
 * Losses, parameters and comm.csv must equal the blocking version's. */
void zero_rs_start(Zero *z, int u);
void zero_rs_progress(Zero *z, int u);
void zero_rs_finish(Zero *z);

/* ---- the second extension: hybrid sharding (HSDP, --dp-shard K) ----
 * ZeRO-3 over all N data-parallel ranks puts every all-gather and
 * reduce-scatter on the slowest link the group spans. Hybrid sharding
 * splits the N ranks into N / K shard groups of K ranks, one group per
 * node: the states are sharded inside the group (z->dp is the shard
 * group, 16 Phi / K bytes per rank), and the R = N / K ranks that hold
 * the same shard, one in each group, form a replicate group. What crosses
 * the nodes is then one all-reduce per step of each rank's gradient shard
 * (Phi / K elements), where plain ZeRO-3 sends 3 Phi (N - 1) / N.
 *
 * zero_hsdp_groups: split dp (N ranks) into this rank's shard group
 * (named "shard") and replicate group ("replicate"), for K dividing N,
 * with each shard group K consecutive ranks (consecutive ranks share a
 * node, mesh.h). K = N leaves one shard group, and a replicate group of one.
 * zero_hsdp_average: all-reduce each owned gradient slice over
 * z->replicate and divide it by R: every replica then holds the same
 * mean, and AdamW makes the same update on each. Lab 10 calls it too, on
 * a pipeline stage's layout, where the other stages' units hold nothing
 * (count 0): it skips them. */
void zero_hsdp_groups(Comm *dp, int shard_ranks, Comm **shard, Comm **replicate);
void zero_hsdp_average(Zero *z);

/* ---- the third extension: ZeRO-Offload (--offload, ZeRO-2/3) ----
 * The optimizer's 12 bytes per owned parameter (fp32 master, m, v) leave
 * the device for host memory, and AdamW runs on the CPU. What crosses the
 * host link per step is this rank's gradient shard down (G Phi / N bytes)
 * and its updated parameters up (P Phi / N). The gradient shard of a unit
 * is final once the last micro-batch has reduce-scattered it; its copy
 * then runs while the backward pass computes the units before it.
 *
 *   zero_offload_grads(u)  from zero_grads_ready during the last micro-
 *                          batch (z->last_micro), after unit u's reduce-
 *                          scatter: start copying its owned shard into
 *                          host_grads (device_comm_copy: asynchronous);
 *   zero_offload_wait      from zero_finish_grads, first: every copy has
 *                          arrived (device_comm_synchronize). From then on
 *                          the step reads the host copy (zero_step_grads);
 *   zero_offload_params    from zero_copy_down (zero_update's, after
 *                          AdamW; zero_init's): the updated master up
 *                          into the owned parameters on the device (fp32: a copy; 2 bytes: rounded on the
 *                          host first, into host_grads' room, which the
 *                          step no longer needs), before ZeRO-2's gather.
 * The optimizer's kernels follow their data (kernels.h): given host
 * buffers they run on the CPU, threaded. Losses, parameters and comm.csv
 * equal ZeRO's without offload, bit for bit. */
void zero_offload_grads(Zero *z, int u);
void zero_offload_wait(Zero *z);
void zero_offload_params(Zero *z);

/* ---- the fourth extension: ZeRO++ (Wang et al. 2023; ZeRO-3, fp32) ----
 * ZeRO-3 moves 3 Phi per step, all of it across the nodes when dp spans
 * them: the forward's all-gather, the backward's, the gradients'
 * reduce-scatter. ZeRO++ cuts what crosses:
 *   qwZ (--qwz)    the all-gathers over dp move blockwise int8 (kernels.h's
 *                  quantize_int8: a scale per QUANT_BLOCK values) instead of
 *                  fp32, about a quarter of the bytes; every rank then runs
 *                  on the dequantized weights, its own slice's too, so the
 *                  ranks compute with the same model;
 *   hpZ (--hpz K)  the forward keeps this rank's 1/K of each gathered unit
 *                  (secondary[u], N S_u / K floats, MEM_PARAMS) and the
 *                  backward all-gathers those over node, K ranks of one
 *                  node: nothing crosses the nodes there, for Phi / K more
 *                  floats held from the forward to the backward;
 *   qgZ (--qgz K)  a unit's gradient reaches its owners through two int8
 *                  all-to-alls, not a reduce-scatter: over node, each rank
 *                  receives its node's K quantized contributions to the M =
 *                  N / K shards it stands for (those of its index in every
 *                  node), dequantizes and sums them in fp32; over across,
 *                  those M partial sums, quantized again, go to their
 *                  owners, which dequantize and add them to the shard. Each
 *                  value is quantized twice whatever N is; a ring reduce-
 *                  scatter on int8 would round again at each of its N - 1
 *                  hops.
 * Quantization makes the run no longer bit for bit ZeRO-3's: the losses
 * follow it within the tolerance README.md states, measured.
 *
 *   zero_qwz_gather_start(u)  quantize the owned shard into its slice of
 *                             packed[u] (N slices of quant_packed_bytes(S_u)
 *                             bytes, MEM_COMM) and start the all-gather of
 *                             those bytes (COMM_BYTE) over dp into it;
 *                             gathered[u] (N S_u floats, MEM_PARAMS) is
 *                             allocated too;
 *   zero_qwz_gather_finish(u) after the gather's wait: every slice
 *                             dequantized into gathered[u]; packed[u] freed;
 *   zero_hpz_keep(u)          after a forward's gather: copy this rank's
 *                             (node->rank's) 1/K of gathered[u] into a new
 *                             secondary[u] (freeing an older one: an
 *                             evaluation's forward has no backward);
 *   zero_hpz_gather_start(u)  a backward's gather: gathered[u] allocated and
 *                             the all-gather of secondary[u] over node
 *                             started; secondary[u] is freed after the wait;
 *   zero_qgz_reduce(u, grads) unit u's gradient (N S_u floats) added into
 *                             this rank's shard through the two all-to-alls
 *                             (COMM_BYTE), their buffers MEM_COMM.
 * zero3_params_needed's gathers (zero.c's start_gather) and
 * zero3_wait_gather, and zero_grads_ready, call them. */
void zero_qwz_gather_start(Zero *z, int u);
void zero_qwz_gather_finish(Zero *z, int u);
void zero_hpz_keep(Zero *z, int u);
void zero_hpz_gather_start(Zero *z, int u);
void zero_qgz_reduce(Zero *z, int u, float *grads);

/* Given: the gradient shard of unit u the step reads: the owned shard on
 * the device, or with offload its host copy */
void *zero_step_grads(const Zero *z, int u);

/* After the last micro-batch: ZeRO-1 reduce-scatters every unit now. Then
 * the owned gradient is divided by N (mean over ranks) and by K
 * (micro-batches): zero_step_grads' shards, the host copies with offload.
 * Returns the global sum of squares of the gradient: each
 * rank's own, summed over the ranks on `metrics` (never on `dp`, whose
 * calls and bytes are the gradients' and parameters' alone). With hybrid
 * sharding (z->replicate set) the owned gradient is first averaged over
 * the replicas (zero_hsdp_average), once every shard holds its group's
 * sum, so that N = dp's size completes the mean over every rank. */
double zero_finish_grads(Zero *z, int micro_batches);

/* ---- the step ----
 * Clip and AdamW on this rank's shard of every unit (zero_owned_master: the
 * fp32 weights AdamW updates, from zero_step_grads' gradients), make the owned parameters the master's
 * (zero_copy_down), then, for ZeRO-1/2, all-gather the updated shards so
 * every rank has all parameters again. */
void zero_update(Zero *z, const AdamWStep *step);

/* Given: this rank's fp32 weights of unit u (S_u floats): the master in
 * mixed precision or with offload (host memory then), else the owned
 * parameters themselves; and, after they were updated, the owned
 * parameters made theirs (offload: zero_offload_params; mixed precision:
 * rounded into the compute copy's owned slices; fp32: nothing to do). */
float *zero_owned_master(const Zero *z, int u);
void zero_copy_down(Zero *z);

/* ---- ZeRO-3 parameters ----
 * needed: make unit u's parameters whole (wait for its prefetch, or gather
 * now) in a buffer of N S_u elements of dtype, MEM_PARAMS, waiting with
 * zero3_wait_gather (below); point the views at them (zero_view_params),
 * and with prefetch start gathering the unit the pass reads next. done:
 * free them. */
void zero3_params_needed(Zero *z, int u, int backward);
void zero3_params_done(Zero *z, int u);

/* Given: wait for unit u's gather (started by the pass reading it now,
 * backward or not) and complete it: with ZeRO++ on (the fourth extension)
 * dequantize a quantized gather, free the secondary copy a backward
 * gathered from, keep one from a forward's; else the wait alone. */
void zero3_wait_gather(Zero *z, int u, int backward);

/* Given: point unit u's parameter views at `unit` (its N S_u elements of
 * dtype): the buffer itself in fp32, a widened copy in mixed precision
 * (z->weights, closed again by zero_unview_params); and the same for the
 * gradient views of ZeRO-1's grads_full (z->grad_units: widened at begin,
 * rounded back at ready). The hooks of train_zero call them. */
void zero_view_params(Zero *z, int u, const void *unit);
void zero_unview_params(Zero *z, int u);
void zero_view_grads(Zero *z, int u);
void zero_unview_grads(Zero *z, int u);

/* Given, for lab 10 (ZeRO-1 beside sequence parallelism): the layout's SP
 * layernorm sums (sp_ops) on the gradients ZeRO-1 holds whole, fp32 as
 * they are, 2-byte ones a unit at a time widened (widened.h) */
void zero_sum_layernorm_grads(Zero *z);

/* Given: after a checkpoint was loaded into what zero_held describes (the
 * master in mixed precision), make the parameters the passes read again */
void zero_loaded(Zero *z);

/* All parameters in the standard layout into out, on the rank that passes
 * one (NULL on the others; every rank of dp takes part): for --dump-params. */
void zero_gather_params(Zero *z, float *out);

/* What this rank holds, for --save and --resume (train.h's
 * ModelStates.held): the moments (and ZeRO-3's parameters) are its shard
 * of each unit, dp_rank S_u .. (dp_rank + 1) S_u of the unit's range, the
 * real elements of it (padding is not saved); ZeRO-1/2's parameters are
 * every unit whole, as on every rank of dp, in fp32; in mixed precision
 * the fp32 master's shards stand for the parameters at every stage
 * (zero_loaded makes the compute copy after a load). */
void zero_held(Zero *z, CkptHeld *out);

/* The unit a pass reads after u (model.h's order), or -1: forward 0, 1,
 * ..., L+1; backward 0, L+1, L, ..., 1. */
int zero3_next_unit(const Zero *z, int u, int backward);

#endif
