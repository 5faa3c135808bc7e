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
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

void tp_reduce_from_region_forward(const GPTLayout *l, float *x, size_t n) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

void column_parallel_forward(const GPTLayout *l, float *out, const float *inp, const float *w,
                             const float *b, int N, int IC, int OC) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

void column_parallel_backward(const GPTLayout *l, float *dinp, float *dw, float *db,
                              const float *dout, const float *inp, const float *w, int N, int IC,
                              int OC) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

void row_parallel_forward(const GPTLayout *l, float *out, const float *inp, const float *w,
                          const float *b, int N, int IC, int OC) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

void row_parallel_backward(const GPTLayout *l, float *dinp, float *dw, float *db,
                           const float *dout, const float *inp, const float *w, int N, int IC,
                           int OC) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

void vocab_parallel_embedding_forward(const GPTLayout *l, float *out, const int *tokens,
                                      const float *wte, const float *wpe, int B, int T) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

void vocab_parallel_embedding_backward(const GPTLayout *l, float *dwte, float *dwpe,
                                       const float *dout, const int *tokens, int B, int T) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

float vocab_parallel_crossentropy_forward(const GPTLayout *l, float *losses, float *probs,
                                          float *stats, const int *targets, int N) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

float vocab_parallel_crossentropy_forward_fused(const GPTLayout *l, float *losses, float *probs,
                                                float *stats, const int *targets, int N) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

void vocab_parallel_crossentropy_backward(const GPTLayout *l, float *probs, const int *targets,
                                          float dloss, int N) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}
