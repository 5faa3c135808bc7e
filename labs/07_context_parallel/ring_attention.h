/* Lab 07: context parallelism, ring attention.
 *
 * Long sequences make attention the problem: its probabilities are T^2 per
 * head and sequence, its work grows as T^2. Context parallelism splits
 * every sequence's positions over the cp ranks of a CP group (layout.h:
 * rank r holds T = Tg / cp of them, contiguous, zigzag or striped:
 * math_shared.h's placements). Every layer but attention works position by position,
 * so it runs on the rank's positions unchanged; attention needs, for each
 * query, the keys and values of every earlier position, which live on other
 * ranks. Ring attention brings them:
 *
 * - K and V travel around the ring: at step s (0..cp-1) rank r holds the
 *   keys and values of rank r - s (mod cp), computes its queries against
 *   them, and meanwhile passes them on to r + 1 (non-blocking: the next
 *   block's transfer hides under this block's compute).
 * - Each block gives a partial softmax over its keys: its output and its
 *   log-sum-exp per query row. Partial results merge exactly by the
 *   log-sum-exp rule (kernels.h attention_merge, math_shared.h
 *   lse_merge_row). Only the output and the per-row lse are kept for the
 *   backward pass, never a T x T matrix.
 * - Causality by chunks: keys of a later chunk than the queries' are all
 *   masked (skip the block), of the same chunk causally masked, of an
 *   earlier chunk all visible.
 * - Backward: K and V travel around again; each rank adds its queries'
 *   part of dK and dV of the block it holds into an accumulator that
 *   travels on a second ring with the block, and arrives, complete, at the
 *   block's owner after cp steps; dQ stays local. D = rowsum(dO . O) makes
 *   every block's softmax backward local (kernels.h).
 * - The loss is the mean over the whole sequences' tokens: each rank has
 *   the mean over its own; the group's mean of means is the mean (every rank
 *   holds as many tokens).
 *
 * Shapes as model.h's ContextParallelOps: B sequences, T local positions,
 * C = l->attn_width, NH = l->n_head (after tensor parallelism's split).
 */
#ifndef RING_ATTENTION_H
#define RING_ATTENTION_H

#include "model.h"

/* The global chunk (of 2 cp under zigzag, else cp) that rank `rank` holds
 * as its local chunk j (0, or 0 and 1 under zigzag): it must agree with
 * the placement the data was loaded with (math_shared.h) */
int ring_global_chunk(const GPTLayout *l, int rank, int j);

/* Which of rank src's keys rank `rank`'s queries see, for its local chunk
 * i of queries and src's local chunk j of keys: RING_SKIP (none: every key
 * is later than every query) or the block kernels' mask (math_shared.h:
 * ATTN_FULL, ATTN_CAUSAL). Under striping (the extension: chunk 0 is all of
 * a rank's positions), ring_striped_mask's. */
enum { RING_SKIP = -1 };
int ring_block_mask(const GPTLayout *l, int rank, int i, int src, int j);
/* Extension (README): the striped placement (math_shared.h: rank r holds
 * positions r, r + cp, r + 2 cp...): the mask of rank src's keys for rank
 * `rank`'s queries, ATTN_CAUSAL or ATTN_CAUSAL_STRICT */
int ring_striped_mask(const GPTLayout *l, int rank, int src);

/* out (B,T,C), lse (B,NH,T) (kept for the backward pass) from qkv (B,T,3C) */
void ring_attention_forward(const GPTLayout *l, float *out, float *lse, const float *qkv, int B,
                            int T);
/* dqkv (B,T,3C) += d(loss)/d(qkv) from dout (B,T,C); scratch unused (the
 * ring keeps no probabilities to differentiate) */
void ring_attention_backward(const GPTLayout *l, float *dqkv, float *scratch, const float *dout,
                             const float *qkv, const float *out, const float *lse, int B, int T);

/* The mean loss over the CP group's tokens, given this rank's mean */
float context_parallel_loss_mean(const GPTLayout *l, float loss);

#endif
