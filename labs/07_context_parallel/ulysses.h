/* Lab 07: context parallelism, Ulysses (DeepSpeed-Ulysses, Jacobs et al.
 * 2023).
 *
 * The other repair for attention across a split sequence: instead of
 * moving keys and values around a ring, swap the split. Before attention
 * every rank holds T = Tg / cp positions (its contiguous chunk, layout.h)
 * of every head; one all-to-all over the CP group turns that into all Tg
 * positions of NH / cp heads. Attention per head needs nothing else, so it
 * runs locally, whole (lab 00's kernels, causal mask and all, or under
 * --attention fused lab 05's), and a second
 * all-to-all turns its output back into "my positions, all heads".
 *
 * - Rank j gets heads [j NH/cp, (j+1) NH/cp): the column slice j of each of
 *   q, k and v (w = C / cp columns each); what rank i sends is its T rows
 *   of those columns, which land at positions [i T, (i+1) T) of each
 *   sequence.
 * - The degree is capped by the heads: cp must divide NH (after tensor
 *   parallelism's split; gpt_context_problem).
 * - Traffic per all-to-all: (cp - 1) / cp of the rank's slice crosses the
 *   wire, whatever cp; four per layer forward (q, k, v and the output) and
 *   as many backward. The probabilities stay whole: B (NH/cp) Tg^2 per
 *   rank, still quadratic in the sequence, unless attention is fused.
 *
 * Shapes as model.h's ContextParallelOps: B sequences, T local positions,
 * C = l->attn_width, NH = l->n_head. keep (model.h): qkv of all positions
 * of this rank's heads (B,Tg,3w), then what attention keeps of them
 * (gpt_attention_whole_keep_floats: their probabilities (B,NH/cp,Tg,Tg), or
 * fused, their lse), and fused, their output (B,Tg,w).
 */
#ifndef ULYSSES_H
#define ULYSSES_H

#include "model.h"

void ulysses_attention_forward(const GPTLayout *l, float *out, float *keep, const float *qkv,
                               int B, int T);
/* scratch: the probabilities' gradient (B,NH/cp,Tg,Tg), or fused, D (B,NH/cp,Tg) */
void ulysses_attention_backward(const GPTLayout *l, float *dqkv, float *scratch,
                                const float *dout, const float *qkv, const float *out,
                                const float *keep, int B, int T);

#endif
