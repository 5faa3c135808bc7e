/* memplan.h: predict each rank's memory, per category, before running.
 *
 * The prediction comes from the formulas alone (sizes of the model, the
 * layout, the batch), never from a run; tests then compare it with the
 * peaks a run measured (memory.csv), byte for byte. Later labs add their
 * layouts here.
 *
 * Model states, fp32 AdamW, Phi parameters, N data-parallel ranks:
 *                 params   grads    moments (m, v)   total
 *   replicated    4 Phi    4 Phi    8 Phi            16 Phi     (one device, DDP)
 *   ZeRO-1        4 Phi    4 Phi    8 Phi / N        8 Phi + 8 Phi / N
 *   ZeRO-2        4 Phi    4 Phi/N  8 Phi / N        4 Phi + 12 Phi / N
 *   ZeRO-3        4 Phi/N  4 Phi/N  8 Phi / N        16 Phi / N
 * with Phi counted with ZeRO's padding (unit_shard_size below).
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
 *     shard: 4 max_u S_u bytes of MEM_COMM;
 *   activations and backward scratch: model.h's formulas for B x T.
 */
#ifndef MEMPLAN_H
#define MEMPLAN_H

#include <stddef.h>

#include "alloc.h"
#include "model.h"

/* ZeRO's partition of one unit (model.h) of n elements over N ranks: the
 * unit is padded with zeros to N S elements, S = ceil(n / N), and rank r
 * owns elements [r S, (r + 1) S) of it, so every rank holds S elements and
 * the collectives move equal shards (what NCCL's reduce-scatter and
 * all-gather require). The padding, N S - n < N elements per unit, is
 * stored and communicated like real parameters and always stays zero. */
static inline size_t unit_shard_size(size_t n, int N) { return (n + (size_t)N - 1) / (size_t)N; }

typedef struct {
    int zero_stage;  /* 0: replicated states (one device, DDP); 1, 2 or 3 */
    int ranks;       /* N, the data-parallel group */
    int prefetch;    /* ZeRO-3: the next unit is gathered while one computes */
    int rows, seq;   /* one micro-batch on one rank: rows sequences of seq tokens */
} MemLayout;

typedef struct {
    size_t padded_params;                 /* sum over units of N S_u (Phi when stage 0) */
    size_t padding;                       /* padded_params - Phi */
    size_t states[MEM_NUM_CATEGORIES];    /* model states, held all the time */
    size_t peak[MEM_NUM_CATEGORIES];      /* states + the working set's peak */
} MemPlan;

/* Predict the per-rank peak bytes of every category (identical on every
 * rank: every rank holds S_u of each unit). Fills plan. */
void memplan_predict(const GPTConfig *cfg, const MemLayout *layout, MemPlan *plan);

/* Model-state bytes per rank for a model of phi parameters, from the table
 * above without padding: for back-of-the-envelope sizes (the README's 7B). */
double memplan_states_bytes(double phi, int zero_stage, int ranks);

#endif
