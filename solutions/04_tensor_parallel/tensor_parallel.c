/* Lab 04: tensor parallelism (Megatron-LM). Read tensor_parallel.h first,
 * then README.md. You write where the ranks of a TP group talk, with the
 * kernels of common/kernels.h and the collectives of common/comm.h:
 *   comm_allreduce(l->tp_group, send, recv, n, dtype, COMM_SUM or COMM_MAX)
 * (send may equal recv: in place). Activations and their gradients travel
 * as comm_act_dtype(l->cfg.precision): fp32's COMM_FLOAT, or in mixed
 * precision the run's 2-byte format on the wire, as a bf16 trainer sends
 * them; the softmax's statistics stay COMM_FLOAT. The whole model at
 * tp = 1 is the same code with a group of one.
 *
 * Check your work: make grade LAB=04 runs your train_tp in the grader's
 * cases against the references (losses, memory, every collective);
 *   mpirun -np 2 ./build/labs/04_tensor_parallel/train_tp --tp 2 --steps 20
 */
#include "tensor_parallel.h"

#include "check.h"
#include "comm.h"
#include "kernels.h"

void tp_copy_to_region_backward(const GPTLayout *l, float *dx, size_t n) {
    /* BEGIN SOLUTION */
    comm_allreduce(l->tp_group, dx, dx, n, comm_act_dtype(l->cfg.precision), COMM_SUM);
    /* END SOLUTION */
}

void tp_reduce_from_region_forward(const GPTLayout *l, float *x, size_t n) {
    /* BEGIN SOLUTION */
    comm_allreduce(l->tp_group, x, x, n, comm_act_dtype(l->cfg.precision), COMM_SUM);
    /* END SOLUTION */
}

void column_parallel_forward(const GPTLayout *l, float *out, const float *inp, const float *w,
                             const float *b, int N, int IC, int OC) {
    /* BEGIN SOLUTION */
    /* f, then the rank's columns: Y_r = X A_r^T + b_r. Backward: dX = sum
     * over ranks of dY_r A_r (each rank's term is partial), dA_r and db_r
     * local. */
    (void)l;  /* f's forward: the identity */
    matmul_forward(out, inp, w, b, N, IC, OC);
    /* END SOLUTION */
}

void column_parallel_backward(const GPTLayout *l, float *dinp, float *dw, float *db,
                              const float *dout, const float *inp, const float *w, int N, int IC,
                              int OC) {
    /* BEGIN SOLUTION */
    matmul_backward(dinp, dw, db, dout, inp, w, N, IC, OC);
    tp_copy_to_region_backward(l, dinp, (size_t)N * IC);
    /* END SOLUTION */
}

void row_parallel_forward(const GPTLayout *l, float *out, const float *inp, const float *w,
                          const float *b, int N, int IC, int OC) {
    /* BEGIN SOLUTION */
    /* The rank's partial product Z_r = Y_r B_r^T, g (the sum), then the
     * bias: once, after the sum (added before it, it would count tp times).
     * Backward: dZ is whole on every rank, so dY_r = dZ B_r and dB_r are
     * local, and the bias gradient, the same on every rank, keeps the
     * replicas equal. */
    matmul_forward(out, inp, w, NULL, N, IC, OC);
    tp_reduce_from_region_forward(l, out, (size_t)N * OC);
    if (b) bias_forward(out, b, N, OC);
    /* END SOLUTION */
}

void row_parallel_backward(const GPTLayout *l, float *dinp, float *dw, float *db,
                           const float *dout, const float *inp, const float *w, int N, int IC,
                           int OC) {
    /* BEGIN SOLUTION */
    (void)l;  /* g's backward: the identity */
    matmul_backward(dinp, dw, db, dout, inp, w, N, IC, OC);
    /* END SOLUTION */
}

void vocab_parallel_embedding_forward(const GPTLayout *l, float *out, const int *tokens,
                                      const float *wte, const float *wpe, int B, int T) {
    /* BEGIN SOLUTION */
    /* Each token's row lives on exactly one rank: every rank looks up the
     * rows it holds (zeros for the others), and the all-reduce assembles
     * the whole embedding; positions are added after it, once. Backward:
     * dout is whole on every rank, so each rank adds into its own rows,
     * with no communication. */
    const int C = l->cfg.n_embd;
    vocab_embedding_forward(out, tokens, wte, l->vocab_first, l->vocab_rows, B * T, C);
    tp_reduce_from_region_forward(l, out, (size_t)B * T * C);
    position_forward(out, wpe, 0, B * T, T, C);
    /* END SOLUTION */
}

void vocab_parallel_embedding_backward(const GPTLayout *l, float *dwte, float *dwpe,
                                       const float *dout, const int *tokens, int B, int T) {
    /* BEGIN SOLUTION */
    const int C = l->cfg.n_embd;
    position_backward(dwpe, dout, B, T, C);
    vocab_embedding_backward(dwte, dout, tokens, l->vocab_first, l->vocab_rows, B * T, C);
    /* END SOLUTION */
}

float vocab_parallel_crossentropy_forward(const GPTLayout *l, float *losses, float *probs,
                                          float *stats, const int *targets, int N) {
    /* BEGIN SOLUTION */
    /* softmax(z)_j = e^(z_j - m) / sum_k e^(z_k - m) with m = max_k z_k
     * over the WHOLE vocabulary, and loss = log(sum) - (z_target - m): each
     * of the three row quantities is a reduction over columns that the
     * ranks hold in parts, so each is one all-reduce of N floats (max,
     * then two sums; the target logit read before the exponentials
     * overwrite it). The logits themselves (N x V) never travel. */
    const int V = l->vocab_rows;
    float *maxes = stats, *sums = stats + N, *target_logits = stats + 2 * (size_t)N;
    vocab_logits_max(maxes, probs, N, V, l->vocab_real);
    comm_allreduce(l->tp_group, maxes, maxes, (size_t)N, COMM_FLOAT, COMM_MAX);
    vocab_target_logit(target_logits, probs, targets, l->vocab_first, N, V);
    comm_allreduce(l->tp_group, target_logits, target_logits, (size_t)N, COMM_FLOAT, COMM_SUM);
    vocab_softmax_exp(probs, sums, probs, maxes, N, V, l->vocab_real);
    comm_allreduce(l->tp_group, sums, sums, (size_t)N, COMM_FLOAT, COMM_SUM);
    return vocab_crossentropy_finish(losses, probs, sums, maxes, target_logits, N, V);
    /* END SOLUTION */
}

float vocab_parallel_crossentropy_forward_fused(const GPTLayout *l, float *losses, float *probs,
                                                float *stats, const int *targets, int N) {
    /* BEGIN SOLUTION */
    const int V = l->vocab_rows;
    float *maxes = stats, *sums = stats + N, *target_logits = stats + 2 * (size_t)N;
    vocab_logits_max(maxes, probs, N, V, l->vocab_real);
    comm_allreduce(l->tp_group, maxes, maxes, (size_t)N, COMM_FLOAT, COMM_MAX);
    vocab_target_logit(target_logits, probs, targets, l->vocab_first, N, V);
    vocab_softmax_exp(probs, sums, probs, maxes, N, V, l->vocab_real);
    comm_allreduce(l->tp_group, sums, sums, 2 * (size_t)N, COMM_FLOAT, COMM_SUM);
    return vocab_crossentropy_finish(losses, probs, sums, maxes, target_logits, N, V);
    /* END SOLUTION */
}

void vocab_parallel_crossentropy_backward(const GPTLayout *l, float *probs, const int *targets,
                                          float dloss, int N) {
    /* BEGIN SOLUTION */
    vocab_crossentropy_backward(probs, targets, dloss, l->vocab_first, N, l->vocab_rows);
    /* END SOLUTION */
}
