/* Lab 05: activation memory. After ZeRO (lab 03) and tensor parallelism
 * (lab 04), what is left on every rank is the activations the forward pass
 * keeps for the backward pass, and they grow with the batch and the
 * sequence (T^2 for attention). Two ways to keep fewer of them:
 *
 * Sequence parallelism (Megatron-LM; Korthikanti et al. 2022). Between
 * TP's split layers every rank holds the same N x C residual stream, and
 * runs the same layernorms and residual adds on it: tp copies of work and
 * memory. Split those rows too: rank r keeps rows [r N/tp, (r+1) N/tp) of
 * the N = B T tokens. Each all-reduce of lab 04 becomes its two halves:
 *
 *   before a column-parallel layer   all-gather the rows  (its input whole)
 *   after a row-parallel layer       reduce-scatter       (the sum, by rows)
 *
 * and the backward pass swaps them: an all-gather's backward is a
 * reduce-scatter and vice versa (they are conjugate, like lab 04's f and g).
 * The same bytes travel as with TP alone. The layernorms' weights stay
 * whole on every rank, but each rank's gradient now comes from its own rows
 * only: sum it over the TP group once per step.
 *
 * Activation recomputation. Keep less, and rebuild the rest in the
 * backward pass (layout.h's Recompute; the library decides what is kept,
 * common/model.c, and calls these just before each block's backward pass):
 *   full       keeps each block's input only: run the block's forward again;
 *   selective  keeps all but the attention probabilities (B NH T^2 per
 *              block): rebuild them from the kept q, k, v.
 * A rebuild must give the very bits the forward pass computed (same
 * kernels, same inputs, same order): the loss curve does not change.
 *
 * Every function runs on every rank of the TP group (l->tp_group) with the
 * same arguments but its own shards. Shapes and conventions are
 * common/model.h's SequenceParallelOps and RecomputeOps (the model calls
 * these through them): R = N/tp is a rank's rows, starting at global row
 * l->tp_rank * R; full is (N, C) scratch.
 */
#ifndef ACTIVATION_MEMORY_H
#define ACTIVATION_MEMORY_H

#include "model.h"

/* The sequence-parallel pair, on N rows of C floats.
 * seq_all_gather: mine (R, C) is this rank's rows; full (N, C) gets every
 * rank's (mine may be full's own rows: in place). Its backward is
 * seq_reduce_scatter. */
void seq_all_gather(const GPTLayout *l, const float *mine, float *full, int N, int C);
/* seq_reduce_scatter: full (N, C) is this rank's partial sum of every row;
 * mine (R, C) gets this rank's rows of the sum over the group. Its backward
 * is seq_all_gather. */
void seq_reduce_scatter(const GPTLayout *l, const float *full, float *mine, int N, int C);

/* Column-parallel linear under SP: inp (N, IC) holds this rank's rows on
 * entry and every row on return (kept for the backward pass); out (N, OC)
 * = inp W^T + b, this rank's OC columns. Backward: dinp (R, IC) is written
 * with this rank's rows of the sum over ranks. */
void sp_column_parallel_forward(const GPTLayout *l, float *out, float *inp, const float *w,
                                const float *b, int N, int IC, int OC);
void sp_column_parallel_backward(const GPTLayout *l, float *dinp, float *dw, float *db,
                                 const float *dout, const float *inp, const float *w, float *full,
                                 int N, int IC, int OC);

/* Row-parallel linear under SP: inp (N, IC) this rank's IC columns; out
 * (R, OC) this rank's rows of the sum over ranks of inp W^T, plus b.
 * Backward: dout (R, OC) this rank's rows; dinp (N, IC), dw, db accumulate. */
void sp_row_parallel_forward(const GPTLayout *l, float *out, const float *inp, const float *w,
                             const float *b, float *full, int N, int IC, int OC);
void sp_row_parallel_backward(const GPTLayout *l, float *dinp, float *dw, float *db,
                              const float *dout, const float *inp, const float *w, float *full,
                              int N, int IC, int OC);

/* Vocab-parallel embedding under SP: out (R, C) is this rank's rows of
 * wte[token] + wpe[t] (t = the row's position in its sequence). Backward:
 * dout (R, C); dwte this rank's vocabulary rows, dwpe whole. */
void sp_vocab_embedding_forward(const GPTLayout *l, float *out, const int *tokens,
                                const float *wte, const float *wpe, float *full, int B, int T);
void sp_vocab_embedding_backward(const GPTLayout *l, float *dwte, float *dwpe, const float *dout,
                                 const int *tokens, float *full, int B, int T);

/* Extension (train_tp --sp-regather): the column layers keep only this
 * rank's rows of their input, inp (R, IC), and gather them again in the
 * backward pass, as Megatron-LM does: the gathered layernorm outputs (2C
 * floats per token per block) stop being whole on every rank, for one more
 * all-gather per column layer in each backward pass. full and full2 are
 * (N, IC) scratch; the rest as sp_column_parallel_forward/backward. */
void sp_column_parallel_forward_regather(const GPTLayout *l, float *out, const float *inp,
                                         const float *w, const float *b, float *full, int N,
                                         int IC, int OC);
void sp_column_parallel_backward_regather(const GPTLayout *l, float *dinp, float *dw, float *db,
                                          const float *dout, const float *inp, const float *w,
                                          float *full, float *full2, int N, int IC, int OC);

/* Once per step (g: the views of this rank's gradients, layout.h;
 * replicated states or ZeRO's padded buffers alike): every layernorm's
 * weight and bias gradient this rank holds summed over the TP group. Under
 * a pipeline (train_4d, the composed trainer) a rank holds only its
 * stage's blocks, and lnf only on the last stage: the views of the others
 * are NULL (gpt_params_view). */
void sp_sum_layernorm_grads(const GPTLayout *l, const GPTParams *g);

/* Full recomputation: rebuild every activation of block a (whose buffers
 * the blocks share, but for a->res2) from its input x. */
void recompute_block_forward(const GPTLayout *l, const BlockParams *p, BlockActs *a,
                             const float *x, int B, int T);
/* Selective recomputation: rebuild a->att (shared by the blocks) from the
 * block's kept a->qkv. */
void recompute_attention_probs(const GPTLayout *l, BlockActs *a, int B, int T);

/* Extension (every trainer's --attention fused; README "Attention that
 * never stores T x T"): kernels.h's attention_fused_forward on the CPU.
 * From qkv (B,T,3C) as attention_forward's, out (B,T,C) = softmax(q k^T /
 * sqrt(hs)) v under the causal mask, by tiles of query rows against tiles
 * of key rows with an online softmax: per query row a running max m and a
 * running sum s of e^(score - m), each rescaled by e^(m_old - m_new) when a
 * tile raises the max, the output rescaled alike. lse (B,NH,T) gets each
 * row's m + log s, from which the library's backward pass rebuilds the
 * probabilities. No T x T buffer: a tile of scores at a time. */
void attention_fused_forward_cpu(float *out, float *lse, const float *qkv, int B, int T, int C,
                                 int NH);

#endif
