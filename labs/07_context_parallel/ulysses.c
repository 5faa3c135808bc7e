/* Lab 07: Ulysses all-to-all attention. Read ulysses.h first, then
 * README.md. Tools: comm_alltoall(l->cp_group, send, recv, n, dtype)
 * (block j of n floats goes to rank j; dtype for activations and their
 * gradients: comm_act_dtype(l->cfg.precision), 2 bytes on the wire in
 * mixed precision), copy_strided (kernels.h) to pack a slice of columns
 * and unpack it, device_copy for whole rows, and attention on the rank's
 * heads as --attention runs it: gpt_attention_whole_forward / _backward
 * (model.h; lab 00's kernels, or lab 05's fused ones).
 *
 * Check your work: make check LAB=07 (Ulysses against the whole
 * sequence's attention), then make grade LAB=07 (train_cp --cp-algo
 * ulysses in the grader's cases);
 *   mpirun -np 2 ./build/labs/07_context_parallel/train_cp --cp 2 --cp-algo ulysses
 */
#include "ulysses.h"

#include "alloc.h"
#include "comm.h"
#include "device.h"
#include "kernels.h"

void ulysses_attention_forward(const GPTLayout *l, float *out, float *keep, const float *qkv,
                               int B, int T) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

void ulysses_attention_backward(const GPTLayout *l, float *dqkv, float *scratch,
                                const float *dout, const float *qkv, const float *out,
                                const float *keep, int B, int T) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}
