/* Lab 07: ring attention. Read ring_attention.h first, then README.md.
 * The kernels (common/kernels.h) do the arithmetic of one block:
 *   attention_block_forward(out_b, lse_b, qkv, kv, B, T, C, NH, q0, k0, n, causal)
 *   attention_merge(out, lse, out_b, lse_b, B, T, C, NH, q0, n)
 *   attention_row_dot(D, dout, out, B, T, C, NH)
 *   attention_block_backward(dqkv, dkv, dout, qkv, kv, lse, D, B, T, C, NH, q0, k0, n, causal)
 * with kv (B,T,2C) = [k | v] packed (copy_strided), and the ring's
 * transfers are comm.h's comm_isend / comm_irecv on l->cp_group, posted
 * between comm_batch_begin and comm_batch_end. K and V travel as
 * comm_act_dtype(l->cfg.precision) (2 bytes in mixed precision, as the
 * activations they are); the partial sums of dK and dV as COMM_FLOAT,
 * accumulated in fp32 over the ring as fused ring kernels keep them, so
 * cp - 1 roundings do not pile up. Which blocks to compute,
 * under which mask (kernels.h ATTN_FULL, ATTN_CAUSAL, ATTN_CAUSAL_STRICT),
 * is ring_block_mask's: the rest of the ring does not depend on the
 * placement.
 *
 * Check your work: make check LAB=07 (check_ring_attention: each placement
 * against the whole sequence's attention and finite differences, on 2, 3
 * and 4 ranks), then make grade LAB=07 runs your train_cp in the grader's
 * cases;
 *   mpirun -np 2 ./build/labs/07_context_parallel/train_cp --cp 2 --cp-algo zigzag
 */
#include "ring_attention.h"

#include <math.h>

#include "alloc.h"
#include "comm.h"
#include "kernels.h"

enum { TAG_KV = 7001, TAG_DKV = 7002 };

int ring_global_chunk(const GPTLayout *l, int rank, int j) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

int ring_block_mask(const GPTLayout *l, int rank, int i, int src, int j) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

/* Striped: query t of rank r is position t cp + r, key t' of rank src
 * position t' cp + src. */
int ring_striped_mask(const GPTLayout *l, int rank, int src) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

void ring_attention_forward(const GPTLayout *l, float *out, float *lse, const float *qkv, int B,
                            int T) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

void ring_attention_backward(const GPTLayout *l, float *dqkv, float *scratch, const float *dout,
                             const float *qkv, const float *out, const float *lse, int B, int T) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

float context_parallel_loss_mean(const GPTLayout *l, float loss) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}
