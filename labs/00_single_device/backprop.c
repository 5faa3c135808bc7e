/* Lab 00: backpropagation through layernorm and causal self-attention.
 *
 * The forward passes are in common/kernels_cpu.c; read them first. Here you
 * write the two backward passes, for the CPU backend (hence the _cpu names;
 * with --device cuda the GPU versions in common/kernels_cuda.cu run instead).
 * Conventions (common/kernels.h): row-major, and every gradient is
 * ACCUMULATED (+=), never overwritten.
 *
 * Check your work with the gradient checker before training:
 *   ./build/labs/00_single_device/gradcheck --layer layernorm
 *   ./build/labs/00_single_device/gradcheck --layer attention
 */
#include <math.h>

#include "check.h"
#include "kernels_backend.h"

/* Layernorm over rows of C channels, N rows.
 * Forward:  xhat = (x - mean) * rstd,  y = xhat * w + b,
 *           mean = (1/C) sum_i x_i,  rstd = 1 / sqrt(var + eps).
 * Backward, per row, with g = dy * w (the gradient reaching xhat):
 *   db_i += dy_i
 *   dw_i += dy_i * xhat_i
 *   dx_i += rstd * ( g_i - mean_j(g_j) - xhat_i * mean_j(g_j * xhat_j) )
 * The two means come from mean and rstd depending on every x_j of the row.
 * Shapes: dinp, dout, inp (N,C); dw, db, w (C); mean, rstd (N). */
void layernorm_backward_cpu(float *dinp, float *dw, float *db, const float *dout,
                            const float *inp, const float *w, const float *mean,
                            const float *rstd, int N, int C) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

/* Causal self-attention, per batch element b and head h (hs = C/NH):
 * Forward:  S = q k^T / sqrt(hs)       (T,T)
 *           P = softmax_row(S), with P_ij = 0 for j > i (the causal mask)
 *           y = P v                    (T,hs)
 * Backward, given dy (T,hs):
 *   dP = dy v^T                        dv += P^T dy
 *   dS_ij = P_ij (dP_ij - sum_k P_ik dP_ik)     (softmax backward, row-wise;
 *                                                zero where P is masked)
 *   dq += dS k / sqrt(hs)              dk += dS^T q / sqrt(hs)
 * Layout: q, k, v of head h are columns h*hs.. of the three C-wide parts of
 * qkv (B,T,3C), so rows are 3C floats apart; dqkv has the same layout. y and
 * dy (B,T,C) hold head h in columns h*hs.. with rows C apart.
 * att holds P (B,NH,T,T) from the forward pass; datt (same shape) is scratch
 * for dP and dS. sgemm_rowmajor_cpu (kernels_backend.h) takes these strides
 * directly. */
void attention_backward_cpu(float *dqkv, float *datt, const float *dout, const float *qkv,
                            const float *att, int B, int T, int C, int NH) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}
