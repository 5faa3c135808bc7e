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

/* Layernorm backward, N rows of C channels.
 * Forward (layernorm_forward_cpu): per row, xhat = (x - mean) * rstd and
 * y = xhat * w + b, with mean and rstd (N each) saved for this pass.
 * In:   dout (N,C) = dL/dy; inp (N,C) = x; w (C); mean, rstd (N).
 * Out:  dinp (N,C) += dL/dx, dw (C) += dL/dw, db (C) += dL/db: ADDED to
 *       what the buffers hold, never assigned (gradcheck pre-fills them).
 * dw and db collect every row. A row's dL/dx depends on the whole row of
 * dout, because every x_j moves that row's mean and rstd: derive it (README,
 * task 1). Reads only its inputs; writes only dinp, dw and db. */
void layernorm_backward_cpu(float *dinp, float *dw, float *db, const float *dout,
                            const float *inp, const float *w, const float *mean,
                            const float *rstd, int N, int C) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

/* Causal self-attention backward, per batch element b and head h (hs = C/NH).
 * Forward (attention_forward_cpu): S = q k^T / sqrt(hs), P = row softmax of
 * S over j <= i (P_ij = 0 for j > i), y = P v.
 * In:   dout (B,T,C) = dL/dy, head h in columns h*hs.. (rows C apart);
 *       qkv (B,T,3C) = [q | k | v], head h in columns h*hs.. of each C-wide
 *       part (rows 3C apart); att (B,NH,T,T) = P as the forward pass saved it.
 * Out:  dqkv (B,T,3C), laid out as qkv: dq, dk, dv ADDED (+=) to what it holds.
 * Scratch: datt (B,NH,T,T), yours to overwrite; its contents on entry are
 *       unspecified (gradcheck fills it with garbage).
 * sgemm_rowmajor_cpu (kernels_backend.h) takes these strides directly. */
void attention_backward_cpu(float *dqkv, float *datt, const float *dout, const float *qkv,
                            const float *att, int B, int T, int C, int NH) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}
