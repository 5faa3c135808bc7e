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
    /* BEGIN SOLUTION */
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        const float *dy = dout + (size_t)n * C;
        float *dx = dinp + (size_t)n * C;
        float m = mean[n], s = rstd[n];
        float mean_g = 0.0f, mean_gx = 0.0f;
        for (int i = 0; i < C; i++) {
            float xhat = (x[i] - m) * s;
            float g = dy[i] * w[i];
            mean_g += g;
            mean_gx += g * xhat;
        }
        mean_g /= C;
        mean_gx /= C;
        for (int i = 0; i < C; i++) {
            float xhat = (x[i] - m) * s;
            db[i] += dy[i];
            dw[i] += dy[i] * xhat;
            dx[i] += s * (dy[i] * w[i] - mean_g - xhat * mean_gx);
        }
    }
    /* END SOLUTION */
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
    /* BEGIN SOLUTION */
    const int hs = C / NH;
    const float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * NH; bh++) {
        int b = bh / NH, h = bh % NH;
        size_t qkv_off = (size_t)b * T * 3 * C + h * hs;
        const float *q = qkv + qkv_off, *k = q + C, *v = q + 2 * C;
        float *dq = dqkv + qkv_off, *dk = dq + C, *dv = dq + 2 * C;
        const float *dy = dout + (size_t)b * T * C + h * hs;
        const float *p = att + (size_t)bh * T * T;
        float *dp = datt + (size_t)bh * T * T;

        sgemm_rowmajor_cpu(0, 1, T, T, hs, 1.0f, dy, C, v, 3 * C, 0.0f, dp, T);      /* dP = dy v^T */
        sgemm_rowmajor_cpu(1, 0, T, hs, T, 1.0f, p, T, dy, C, 1.0f, dv, 3 * C);      /* dv += P^T dy */
        for (int i = 0; i < T; i++) {                                            /* dP -> dS */
            float *dpi = dp + (size_t)i * T;
            const float *pi = p + (size_t)i * T;
            float dot = 0.0f;
            for (int j = 0; j <= i; j++) dot += pi[j] * dpi[j];
            for (int j = 0; j <= i; j++) dpi[j] = pi[j] * (dpi[j] - dot);
            for (int j = i + 1; j < T; j++) dpi[j] = 0.0f;
        }
        sgemm_rowmajor_cpu(0, 0, T, hs, T, scale, dp, T, k, 3 * C, 1.0f, dq, 3 * C); /* dq += dS k */
        sgemm_rowmajor_cpu(1, 0, T, hs, T, scale, dp, T, q, 3 * C, 1.0f, dk, 3 * C); /* dk += dS^T q */
    }
    /* END SOLUTION */
}
