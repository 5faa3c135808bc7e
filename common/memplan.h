/* memplan.h: predict each rank's memory, per category, before running.
 *
 * The prediction comes from the formulas alone (sizes of the model, the
 * layout, the batch), never from a run; tests then compare it with the
 * peaks a run measured (memory.csv), byte for byte. Later labs add their
 * layouts here.
 *
 * Model states, fp32 AdamW, Phi parameters per rank (the whole model, or
 * under tensor parallelism its shard: layout.h num_params), N data-parallel
 * ranks:
 *                 params   grads    moments (m, v)   total
 *   replicated    4 Phi    4 Phi    8 Phi            16 Phi     (one device, DDP)
 *   ZeRO-1        4 Phi    4 Phi    8 Phi / N        8 Phi + 8 Phi / N
 *   ZeRO-2        4 Phi    4 Phi/N  8 Phi / N        4 Phi + 12 Phi / N
 *   ZeRO-3        4 Phi/N  4 Phi/N  8 Phi / N        16 Phi / N
 * with Phi counted with ZeRO's padding (unit_shard_size below). Mixed
 * precision (cfg->precision bf16 or fp16) holds the weights the passes
 * read and the gradients in 2 bytes (fp32 gradients with fp32_grads) and
 * an fp32 master beside the moments, the optimizer's 12 bytes (the ZeRO
 * paper's K):
 *                 params   grads    optimizer        total
 *   replicated    2 Phi    2 Phi    12 Phi           16 Phi
 *   ZeRO-1        2 Phi    2 Phi    12 Phi / N       4 Phi + 12 Phi / N
 *   ZeRO-2        2 Phi    2 Phi/N  12 Phi / N       2 Phi + 14 Phi / N
 *   ZeRO-3        2 Phi/N  2 Phi/N  12 Phi / N       16 Phi / N
 * and widens units to fp32 for the passes (widened.h: P_0 + max_u P_u
 * floats of MEM_WORKSPACE for the weights; as much again for the
 * gradients where 2-byte ones are accumulated whole, replicated and
 * ZeRO-1). ZeRO-2/3 round a unit's fp32 working gradient into a 2-byte
 * buffer of its own before the reduce-scatter moves it, so that buffer
 * joins the working set below (2 P_u beside 4 P_u, and it is the one in
 * flight when overlapped); the collectives and the scratch move 2 bytes.
 *
 * On top of the states, what a step needs for a while (the working set):
 *   ZeRO-2/3 gradients: a unit's gradient is accumulated whole, then
 *     reduce-scattered and dropped; the embedding unit's lives through the
 *     whole backward pass (the tied LM head writes it first, the encoder
 *     last), so the peak is 4 (P_0 + max_u P_u) bytes, P_u = N S_u;
 *   ZeRO-3 parameters: the embeddings stay gathered through the forward
 *     pass (read at both ends), one block at a time besides them, two with
 *     prefetch: 4 (P_0 + max_u (P_u + P_{u+1})) bytes;
 *   ZeRO-1/2/3: the in-place reduce-scatter's scratch (comm.h), one unit's
 *     shard: 4 max_u S_u bytes of MEM_COMM, kept from the first step's
 *     reduce-scatters on (so beside a pipeline's messages from the second
 *     step on);
 *   activations and backward scratch: model.h's formulas for B x T.
 *
 * ZeRO-2/3 with the reduce-scatter behind the backward pass (overlap_rs,
 * ZeRO's extension; one reduce-scatter in flight, in place): a unit's
 * working buffer lives until its sum has arrived. ready(u) completes the
 * transfer in flight (the unit before u in the backward order), frees its
 * buffer and starts u's. Alive after each hook of one backward pass
 * (model.h's order; unit L+1 is lnf, L..1 the blocks, 0 the embeddings):
 *   begin(0)                        P_0   (unit 0 still in flight from the
 *                                          previous micro-batch completes first)
 *   begin(L+1)                      P_0 + P_(L+1)
 *   ready(L+1): start L+1           P_0 + P_(L+1)
 *   begin(u), u = L..1              P_0 + P_(u+1) + P_u
 *   ready(u): finish u+1, start u   P_0 + P_u
 *   ready(0): finish 1, start 0     P_0   (zero_finish_grads, or the next
 *                                          micro-batch's begin(0), waits for it)
 * so the peak is at a begin(u): the embeddings, the unit in flight and the
 * unit being computed,
 *   grads peak = 4 (sum_u S_u + P_0 + max_{1 <= u <= L} (P_u + P_(u+1))) bytes,
 * the same pairs of consecutive units as ZeRO-3's prefetch (for tiny: two
 * blocks). MEM_COMM does not change: one in-place reduce-scatter at a time
 * uses comm.h's scratch, as the blocking version does.
 */
#ifndef MEMPLAN_H
#define MEMPLAN_H

#include <stddef.h>

#include "alloc.h"
#include "config.h"
#include "layout.h"

/* ZeRO's partition of one unit (layout.h) of n elements over N ranks: the
 * unit is padded with zeros to N S elements, S = ceil(n / N), and rank r
 * owns elements [r S, (r + 1) S) of it, so every rank holds S elements and
 * the collectives move equal shards (what NCCL's reduce-scatter and
 * all-gather require). The padding, N S - n < N elements per unit, is
 * stored and communicated like real parameters and always stays zero. */
static inline size_t unit_shard_size(size_t n, int N) { return (n + (size_t)N - 1) / (size_t)N; }

typedef struct {
    int zero_stage;  /* 0: replicated states (one device, DDP); 1, 2 or 3 */
    int ranks;       /* N, the group ZeRO shards over: the data-parallel
                        group, or dp x cp in a composed layout (train_4d) */
    int prefetch;    /* ZeRO-3: the next unit is gathered while one computes */
    int rows, seq;   /* one micro-batch on one rank: rows sequences of seq tokens */
    int overlap_rs;  /* ZeRO-2/3: the reduce-scatter behind the backward pass (above) */
    int qwz, hpz, qgz; /* ZeRO++ on ZeRO-3 in fp32 (zero.h's fourth extension):
                        qwz the gathers in int8, hpz K / qgz K (0: off) the
                        secondary copies and the quantized all-to-alls over
                        nodes of K ranks; their buffers as memplan.c replays
                        a forward and a backward pass */
    int offload;     /* ZeRO-2/3 with the optimizer in host memory (ZeRO-Offload):
                        the device holds no optimizer bytes; the host holds
                        the fp32 master and moments of the rank's shard
                        (host_states[MEM_OPTIMIZER] = 12 S bytes, S = sum S_u,
                        in fp32 too) and the shard's gradients copied off
                        the device (host_states[MEM_GRADS] = G S) */
    int tp;          /* tensor parallelism (>= 1 where the layers are split, as
                        parallel_mem_layout sets it; 0: the whole model's
                        layers): Phi and the activations are the rank's
                        shard's (layout.h, model.h) */
    int sp;          /* sequence parallelism (needs tp >= 1) */
    int sp_regather; /* and the layernorm outputs gathered again (an extension) */
    Recompute recompute; /* what the activations keep (layout.h) */
    /* pipeline parallelism (pp 0 or 1: none): the stage of rank
     * pp_rank of pp, chunks per rank, and the step's schedule, whose order
     * decides how many micro-batches' activations are held at once
     * (pipe_exec.h's peaks); states hold only the rank's units (dual:
     * DualPipe's placement, two stages per rank, so twice the units) */
    int pp, pp_rank, chunks, dual;
    const struct Schedule *schedule;
    /* context parallelism (cp 0 or 1: none): seq is then a rank's
     * T = Tg / cp positions; attention keeps what cp_algo keeps (model.h),
     * and its transfers need, at their peak (memplan_cp_transient):
     *   ring     MEM_COMM 5 blocks of B T 2C' (backward: K V, the next K V,
     *            and dK dV computed, leaving and arriving), MEM_WORKSPACE
     *            B T C' + B NH' T (forward: a block's output and lse);
     *   Ulysses  MEM_COMM 2 B T 3C' (the all-to-all's send and receive),
     *            MEM_WORKSPACE 4 B T C' (backward: dO and dqkv of all
     *            positions of the rank's heads);
     *   mixed precision adds, while K V or the all-to-all travel, their
     *   wire buffers (comm.h), a send's and a receive's of 2 bytes. */
    int cp;
    CpAlgo cp_algo;
    /* expert parallelism (ep 0 or 1: none): the rank holds E / ep
     * experts of each MoE block (layout.h), and its MoE activations and
     * scratch the rows its experts receive (moe.h's R_max); in mixed
     * precision the ep group's reserved wire (model.h's
     * gpt_ep_wire_elements), twice as large with ep_overlap */
    int ep, ep_overlap;
} MemLayout;

typedef struct {
    size_t padded_params;                 /* sum over units of N S_u (Phi when stage 0) */
    size_t padding;                       /* padded_params - Phi */
    size_t states[MEM_NUM_CATEGORIES];    /* model states, held all the time */
    size_t peak[MEM_NUM_CATEGORIES];      /* states + the working set's peak */
    size_t host_states[MEM_NUM_CATEGORIES];  /* host memory (offload): held all the time */
} MemPlan;

/* The model on one rank of this layout (layout.h), as the formulas read
 * it: its TP shard (rank 0's: every rank holds as much), split layers when
 * tp >= 1, SP and recomputation as given. */
GPTLayout memplan_model_layout(const GPTConfig *cfg, const MemLayout *layout);

/* Predict the per-rank peak bytes of every category (identical on every
 * rank: every rank holds S_u of each unit). Fills plan. */
void memplan_predict(const GPTConfig *cfg, const MemLayout *layout, MemPlan *plan);

/* The collectives over the TP group in one forward and one backward pass
 * of a micro-batch of N = rows x seq tokens (payload bytes as comm.h counts
 * them: the whole tensor, whatever the group's size). Tensor parallelism,
 * all-reduces:
 *   forward   per block 2 x N C floats (g after attention's and the MLP's
 *             row-parallel layers), the embedding's N C, and the loss's
 *             three of N (row max, sum of exps, target logit): 2L + 4 calls;
 *   backward  per block 2 x N C (f before the qkv and fc layers), the LM
 *             head's f: N C: 2L + 1 calls.
 * Sequence parallelism turns each N C all-reduce into a
 * reduce-scatter and adds an all-gather where the rows are needed whole:
 *   forward   reduce-scatters 2L + 1 (row layers, embedding), all-gathers
 *             2L + 1 (before qkv, fc and the LM head), all-reduces the
 *             loss's 3 of N;
 *   backward  reduce-scatters 2L + 1 (column layers' dX), all-gathers
 *             2L + 1 (row layers' dY, the embedding's).
 * With sp_regather, each backward pass all-gathers the column layers'
 * inputs again: 2L + 1 more all-gathers of N C.
 * On a ring, an all-reduce moves 2 (p-1)/p of its bytes per rank and a
 * reduce-scatter or all-gather (p-1)/p: the same traffic either way.
 * Full recomputation runs each block's forward again in the backward pass:
 * its 2L collectives of N C once more.
 * A mixture of experts' block has only its attention split: its
 * experts run whole on every TP rank (layout.h), so of each pass's 2 per
 * block it makes 1, and 2L above is 2L - M for M MoE blocks.
 * Under a pipeline (layout->pp > 1) the counts are one stage's: L is its
 * L / pp blocks, the embedding's +1 is the first stage's, the LM head's
 * +1 and the loss the last stage's. In mixed precision the N C
 * collectives move 2 bytes an element (comm.h's comm_act_dtype), the
 * loss's stay fp32; their wire buffers are MEM_COMM during the call (N C
 * in place, N C + N C / tp under sequence parallelism). */
typedef struct {
    size_t calls, bytes;
} CommCount;
typedef struct {
    CommCount allreduce, reduce_scatter, allgather;
} TpTraffic;
void memplan_tp_comm(const GPTConfig *cfg, const MemLayout *layout, TpTraffic *forward,
                     TpTraffic *backward);
/* Per step, besides the passes: the gradient norm's sum over the TP group
 * (one double) and, under sequence parallelism, the layernorms' gradients
 * (4L + 2 all-reduces of C floats). */
CommCount memplan_tp_step_comm(const GPTConfig *cfg, const MemLayout *layout);

/* Bytes of context parallelism's transient buffers at their peak
 * (MemLayout above): in MEM_COMM during a forward (ring: K V and the next;
 * Ulysses: send and receive) and during a backward, and in
 * MEM_WORKSPACE. */
void memplan_cp_transient(const GPTLayout *m, int B, int T, size_t *comm_forward,
                          size_t *comm_backward, size_t *work);
/* The traffic over the CP group in one forward and one backward pass of a
 * micro-batch (payload bytes as comm.h counts them), per rank, L blocks,
 * kv = B T 2C' floats a rank's keys and values:
 *   ring     sends: forward (cp - 1) kv per block (the ring passes every
 *            block on but its last), backward (cp - 1) kv + cp kv (dK dV
 *            go all the way round, back to their owner); receives as many;
 *   Ulysses  all-to-alls: forward 2 per block, of B T 3C' (q, k, v) and
 *            B T C' (the output) floats, backward the same two; comm.h
 *            counts the whole send buffer, (cp - 1) / cp of it leaves the
 *            rank;
 *   both     the loss's mean: one all-reduce of a float per forward.
 * In mixed precision K V and the all-to-alls move 2 bytes an element,
 * dK dV and the loss 4.
 * Full recomputation runs each block's forward, and its transfers, again
 * in the backward pass. Under a pipeline the counts are one stage's (its
 * L / pp blocks; the loss on the last stage). */
typedef struct {
    CommCount send, alltoall, allreduce;
} CpTraffic;
void memplan_cp_comm(const GPTConfig *cfg, const MemLayout *layout, CpTraffic *forward,
                     CpTraffic *backward);

/* Print, for rank 0 of a trainer, the planner's peak bytes per category
 * next to this rank's measured peaks (alloc.h), "ok" or "DIFFERENT". A
 * run of no step (resumed at its --steps) reached no step's peak: says so. */
void memplan_print_check(const char *program, const GPTConfig *cfg, const MemLayout *layout,
                         int steps_run);

/* Model-state bytes per rank for a model of phi parameters, from the tables
 * above without padding (precision a Precision; fp32_grads as GPTConfig's):
 * for back-of-the-envelope sizes (docs/PLANNER.md's 7B). */
double memplan_states_bytes(double phi, int zero_stage, int ranks, int precision,
                            int fp32_grads);

#endif
