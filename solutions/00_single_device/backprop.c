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
    /* The causal mask makes P_ij = dS_ij = 0 for j > i, so the work goes
     * by blocks of ATT_BLOCK query rows I = [i0, i1), each against the keys
     * j < i1 only: the four T x T GEMMs shrink to the blocks on or below
     * the diagonal. With nb = T / ATT_BLOCK blocks that is (nb + 1) / (2 nb)
     * of the full multiply-adds (0.56 at T = 256, 0.53 at T = 512). */
    enum { ATT_BLOCK = 32 };
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

        for (int i0 = 0; i0 < T; i0 += ATT_BLOCK) {
            const int m = T - i0 < ATT_BLOCK ? T - i0 : ATT_BLOCK, n = i0 + m;  /* keys j < n */
            const float *pI = p + (size_t)i0 * T, *dyI = dy + (size_t)i0 * C;
            float *dpI = dp + (size_t)i0 * T;
            sgemm_rowmajor_cpu(0, 1, m, n, hs, 1.0f, dyI, C, v, 3 * C, 0.0f, dpI, T);   /* dP_I = dy_I v^T */
            sgemm_rowmajor_cpu(1, 0, n, hs, m, 1.0f, pI, T, dyI, C, 1.0f, dv, 3 * C);   /* dv += P_I^T dy_I */
            for (int i = i0; i < n; i++) {                                          /* dP -> dS */
                float *dpi = dp + (size_t)i * T;
                const float *pi = p + (size_t)i * T;
                float dot = 0.0f;
                for (int j = 0; j <= i; j++) dot += pi[j] * dpi[j];
                for (int j = 0; j <= i; j++) dpi[j] = pi[j] * (dpi[j] - dot);
                for (int j = i + 1; j < n; j++) dpi[j] = 0.0f;
            }
            sgemm_rowmajor_cpu(0, 0, m, hs, n, scale, dpI, T, k, 3 * C, 1.0f, dq + (size_t)i0 * 3 * C,
                               3 * C);                                                  /* dq_I += dS_I k */
            sgemm_rowmajor_cpu(1, 0, n, hs, m, scale, dpI, T, q + (size_t)i0 * 3 * C, 3 * C, 1.0f, dk,
                               3 * C);                                                  /* dk += dS_I^T q_I */
        }
    }
    /* END SOLUTION */
}
