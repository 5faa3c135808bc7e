/* Lab 05: activation memory. Read activation_memory.h first, then
 * README.md. You write the sequence-parallel collectives and layers, with
 * the kernels of common/kernels.h and the collectives of common/comm.h:
 *   comm_allgather(l->tp_group, send, recv, n, dtype)
 *   comm_reduce_scatter(l->tp_group, send, recv, n, dtype, COMM_SUM)
 *   comm_allreduce(l->tp_group, send, recv, n, dtype, COMM_SUM)
 * (n is the whole buffer; rank r's part is elements [r n/p, (r+1) n/p);
 * dtype: activations as comm_act_dtype(l->cfg.precision), 2 bytes on the
 * wire in mixed precision as in lab 04; the layernorms' gradients as
 * COMM_FLOAT, fp32 units in mixed precision, widened.h), and the two
 * recomputations. Lab 04's layers are the model you start from:
 * solutions/04_tensor_parallel/tensor_parallel.c, once released, or yours.
 * The fused-attention extension computes on the host: sgemm_rowmajor_cpu
 * (kernels_backend.h) on strided tiles, exp_nonpositive, row_max and
 * row_sum (math_shared.h) on their rows.
 *
 * Check your work: make check LAB=05 (check_act: the layernorm sum on a
 * pipeline's stages), then make grade LAB=05 runs your train_tp --sp and
 * --recompute in the grader's cases against the references;
 *   mpirun -np 2 ./build/labs/05_activation_memory/train_tp --tp 2 --sp --steps 20
 */
#include "activation_memory.h"

#include <math.h>

#include "check.h"
#include "comm.h"
#include "kernels.h"
#include "kernels_backend.h"
#include "math_shared.h"

void seq_all_gather(const GPTLayout *l, const float *mine, float *full, int N, int C) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

void seq_reduce_scatter(const GPTLayout *l, const float *full, float *mine, int N, int C) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

/* Lab 04's column layer with the all-gather in f's place: the input rows
 * must be whole before the GEMM, and dX = sum over ranks of dY_r A_r is
 * wanted on each rank's rows only, a reduce-scatter (the gather's conjugate). */
void sp_column_parallel_forward(const GPTLayout *l, float *out, float *inp, const float *w,
                                const float *b, int N, int IC, int OC) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

void sp_column_parallel_backward(const GPTLayout *l, float *dinp, float *dw, float *db,
                                 const float *dout, const float *inp, const float *w, float *full,
                                 int N, int IC, int OC) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

/* Lab 04's row layer with a reduce-scatter in g's place: each rank keeps
 * its rows of the sum, and adds the bias to them (once per row, as before).
 * Backward: the GEMMs need dZ on every row, an all-gather. */
void sp_row_parallel_forward(const GPTLayout *l, float *out, const float *inp, const float *w,
                             const float *b, float *full, int N, int IC, int OC) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

void sp_row_parallel_backward(const GPTLayout *l, float *dinp, float *dw, float *db,
                              const float *dout, const float *inp, const float *w, float *full,
                              int N, int IC, int OC) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

/* Every rank looks up the rows of the vocabulary it holds for every token
 * (zeros for the others); the reduce-scatter sums them and leaves each rank
 * its rows, to which it adds their positions. Backward: every rank needs
 * every row's gradient for its vocabulary rows: an all-gather. */
void sp_vocab_embedding_forward(const GPTLayout *l, float *out, const int *tokens,
                                const float *wte, const float *wpe, float *full, int B, int T) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

void sp_vocab_embedding_backward(const GPTLayout *l, float *dwte, float *dwpe, const float *dout,
                                 const int *tokens, float *full, int B, int T) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

/* The extension: the all-gather happens again in the backward pass, into
 * scratch, instead of its result living from the forward pass to the
 * backward pass. */
void sp_column_parallel_forward_regather(const GPTLayout *l, float *out, const float *inp,
                                         const float *w, const float *b, float *full, int N,
                                         int IC, int OC) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

void sp_column_parallel_backward_regather(const GPTLayout *l, float *dinp, float *dw, float *db,
                                          const float *dout, const float *inp, const float *w,
                                          float *full, float *full2, int N, int IC, int OC) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

void sp_sum_layernorm_grads(const GPTLayout *l, const GPTParams *g) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

void recompute_block_forward(const GPTLayout *l, const BlockParams *p, BlockActs *a,
                             const float *x, int B, int T) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

void recompute_attention_probs(const GPTLayout *l, BlockActs *a, int B, int T) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

void attention_fused_forward_cpu(float *out, float *lse, const float *qkv, int B, int T, int C,
                                 int NH) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}
