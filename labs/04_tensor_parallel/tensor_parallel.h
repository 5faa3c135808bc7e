/* Lab 04: tensor parallelism (Megatron-LM), the layers a TP rank runs.
 *
 * tp ranks hold one block's weights between them (common/layout.h's table:
 * attention by heads, the MLP by its 4C columns, the vocabulary by rows),
 * and run every layer together, each on its shard. The layers' math is the
 * kernels' (kernels.h); what this file adds is where the ranks must talk:
 *
 *   f  "copy to the TP region":     forward identity, backward all-reduce
 *   g  "reduce from the TP region": forward all-reduce, backward identity
 *
 * f and g are conjugate: each one's backward is the other's forward. A
 * column-parallel linear layer (f, then Y_r = X A_r) followed by a
 * row-parallel one (Z = sum_r Y_r B_r, then g) needs exactly one all-reduce
 * each way: the nonlinearity between them (gelu, or attention per head)
 * works on Y_r alone. README.md derives it.
 *
 * Every function runs on every rank of the TP group (layout->tp_group),
 * which calls it with the same arguments but its own shards. Shapes and
 * conventions are common/model.h's TensorParallelOps (the model calls these
 * through it): backward passes ACCUMULATE, as every kernel.
 */
#ifndef TENSOR_PARALLEL_H
#define TENSOR_PARALLEL_H

#include <stddef.h>

#include "model.h"

/* f's backward: dx (n floats, this rank's partial gradient) becomes the
 * sum over the TP group. (f's forward is the identity: nothing to write.) */
void tp_copy_to_region_backward(const GPTLayout *l, float *dx, size_t n);
/* g's forward: x (n floats, this rank's partial sum) becomes the sum over
 * the TP group. (g's backward is the identity.) */
void tp_reduce_from_region_forward(const GPTLayout *l, float *x, size_t n);

/* Column-parallel linear: w (OC, IC) and b (OC) are this rank's OC rows of
 * the whole weight and bias; inp (N, IC) is whole on every rank, out (N, OC)
 * this rank's columns of the output. dinp holds zeros on entry. */
void column_parallel_forward(const GPTLayout *l, float *out, const float *inp, const float *w,
                             const float *b, int N, int IC, int OC);
void column_parallel_backward(const GPTLayout *l, float *dinp, float *dw, float *db,
                              const float *dout, const float *inp, const float *w, int N, int IC,
                              int OC);

/* Row-parallel linear: w (OC, IC) is this rank's IC columns of the whole
 * weight, inp (N, IC) this rank's columns of the input; out (N, OC) is the
 * whole output on every rank, b (OC) whole on every rank and added once. */
void row_parallel_forward(const GPTLayout *l, float *out, const float *inp, const float *w,
                          const float *b, int N, int IC, int OC);
void row_parallel_backward(const GPTLayout *l, float *dinp, float *dw, float *db,
                           const float *dout, const float *inp, const float *w, int N, int IC,
                           int OC);

/* Vocab-parallel embedding: wte holds rows [vocab_first, + vocab_rows) of
 * the padded vocabulary, wpe is whole. out (B,T,C) = wte[token] + wpe[t],
 * whole on every rank. */
void vocab_parallel_embedding_forward(const GPTLayout *l, float *out, const int *tokens,
                                      const float *wte, const float *wpe, int B, int T);
void vocab_parallel_embedding_backward(const GPTLayout *l, float *dwte, float *dwpe,
                                       const float *dout, const int *tokens, int B, int T);

/* Vocab-parallel cross-entropy: probs (N, vocab_rows) holds this rank's
 * logits on entry and its columns of the softmax on return; of its columns
 * only the first vocab_real are real (the rest: padding, probability 0).
 * stats (3N floats) is scratch. losses (N) and the returned mean loss are
 * the whole vocabulary's, on every rank. Backward: probs becomes
 * dloss (probs - onehot(target)) on this rank's columns. */
float vocab_parallel_crossentropy_forward(const GPTLayout *l, float *losses, float *probs,
                                          float *stats, const int *targets, int N);
/* Extension: the same forward with two all-reduces instead of three
 * (train_tp --fused-ce): the same losses and bytes, one call fewer, and no
 * copy. stats holds the row maxima at [0, N), the sums of exponentials at
 * [N, 2N) and the target logits at [2N, 3N). */
float vocab_parallel_crossentropy_forward_fused(const GPTLayout *l, float *losses, float *probs,
                                                float *stats, const int *targets, int N);
void vocab_parallel_crossentropy_backward(const GPTLayout *l, float *probs, const int *targets,
                                          float dloss, int N);

#endif
