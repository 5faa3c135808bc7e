/* kernels_cpu.c: the CPU backend of kernels.h (kernels.c picks the backend).
 * GEMMs go to OpenBLAS; row-wise loops are split over OpenMP threads with a
 * static schedule, so the result does not depend on timing (determinism). */
#include "kernels_backend.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

#include "half_gemm.h"
#include "math_shared.h"
#include "precision.h"

static unsigned long long g_sgemm_madds;

unsigned long long sgemm_madds_cpu(void) {
    unsigned long long n;
#pragma omp atomic read
    n = g_sgemm_madds;
    return n;
}

void sgemm_rowmajor_cpu(int trans_a, int trans_b, int M, int N, int K, float alpha,
                    const float *A, int lda, const float *Bm, int ldb, float beta,
                    float *Cm, int ldc) {
#pragma omp atomic
    g_sgemm_madds += (unsigned long long)M * N * K;
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, Bm, ldb,
                beta, Cm, ldc);
}

void encoder_forward_cpu(float *out, const int *tokens, const float *wte, const float *wpe,
                     int B, int T, int C) {
#pragma omp parallel for schedule(static)
    for (int bt = 0; bt < B * T; bt++) {
        const float *te = wte + (size_t)tokens[bt] * C;
        const float *pe = wpe + (size_t)(bt % T) * C;
        float *o = out + (size_t)bt * C;
        for (int i = 0; i < C; i++) o[i] = te[i] + pe[i];
    }
}

void encoder_backward_cpu(float *dwte, float *dwpe, const float *dout, const int *tokens,
                      int B, int T, int C) {
    /* Several positions can hold the same token: serial, so no two threads
     * add into one wte row. */
    for (int bt = 0; bt < B * T; bt++) {
        const float *d = dout + (size_t)bt * C;
        float *te = dwte + (size_t)tokens[bt] * C;
        float *pe = dwpe + (size_t)(bt % T) * C;
        for (int i = 0; i < C; i++) {
            te[i] += d[i];
            pe[i] += d[i];
        }
    }
}

/* sum of (x - m)^2 over the row, in math_shared.h's REDUCE_LANES partial
 * sums like row_sum */
static float row_sum_sq_dev(const float *x, float m, int n) {
    float acc[REDUCE_LANES] = {0}, s = 0.0f;
    int j = 0;
    for (; j + REDUCE_LANES <= n; j += REDUCE_LANES)
        for (int l = 0; l < REDUCE_LANES; l++) acc[l] += (x[j + l] - m) * (x[j + l] - m);
    for (; j < n; j++) s += (x[j] - m) * (x[j] - m);
    for (int l = 0; l < REDUCE_LANES; l++) s += acc[l];
    return s;
}

void layernorm_forward_cpu(float *out, float *mean, float *rstd, const float *inp,
                       const float *w, const float *b, int N, int C) {
    const float eps = 1e-5f;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float m = row_sum(x, C) / C;
        float var = row_sum_sq_dev(x, m, C) / C;
        float s = 1.0f / sqrtf(var + eps);
        float *o = out + (size_t)n * C;
        for (int i = 0; i < C; i++) o[i] = (x[i] - m) * s * w[i] + b[i];
        mean[n] = m;
        rstd[n] = s;
    }
}

/* C (M,N) = op(A) op(B) + beta C of contiguous operands, in precision */
static void linear_gemm(int precision, int trans_a, int trans_b, int M, int N, int K,
                        const float *A, const float *B, float beta, float *C) {
    if (precision != PRECISION_FP32) {
        half_gemm(precision, trans_a, trans_b, M, N, K, A, B, beta, C);
        return;
    }
    sgemm_rowmajor_cpu(trans_a, trans_b, M, N, K, 1.0f, A, trans_a ? M : K, B, trans_b ? K : N,
                       beta, C, N);
}

void matmul_forward_cpu(float *out, const float *inp, const float *w, const float *bias,
                    int N, int IC, int OC, int precision) {
    if (bias) {
#pragma omp parallel for schedule(static)
        for (int n = 0; n < N; n++) memcpy(out + (size_t)n * OC, bias, sizeof(float) * OC);
    }
    linear_gemm(precision, 0, 1, N, OC, IC, inp, w, bias ? 1.0f : 0.0f, out);
}

void matmul_backward_cpu(float *dinp, float *dw, float *dbias, const float *dout,
                     const float *inp, const float *w, int N, int IC, int OC, int precision) {
    if (dinp) linear_gemm(precision, 0, 0, N, IC, OC, dout, w, 1.0f, dinp);  /* += dout W */
    if (dw) linear_gemm(precision, 1, 0, OC, IC, N, dout, inp, 1.0f, dw);    /* += dout^T inp */
    if (dbias) {
        /* dbias[o] += sum_n dout[n][o], by blocks of columns: each thread
         * walks whole rows of its block (contiguous, vector-wide), and each
         * column still adds its rows in order n = 0, 1, ...: the same bits
         * as a column-by-column loop, at memory speed instead of one float
         * per cache line. */
        enum { COLS = 64 };
#pragma omp parallel for schedule(static)
        for (int o0 = 0; o0 < OC; o0 += COLS) {
            const int w = OC - o0 < COLS ? OC - o0 : COLS;
            float s[COLS] = {0};
            for (int n = 0; n < N; n++) {
                const float *d = dout + (size_t)n * OC + o0;
                for (int j = 0; j < w; j++) s[j] += d[j];
            }
            for (int j = 0; j < w; j++) dbias[o0 + j] += s[j];
        }
    }
}

/* Row t of P: softmax of row[0..t], zeros after it (the causal mask).
 * Every entry is e^(s - max) with s - max <= 0: exp_nonpositive, which
 * vectorizes where libm's expf is a call per element. */
static void softmax_causal_row(float *row, int t, int T) {
    float mx = row_max(row, t + 1);
    for (int j = 0; j <= t; j++) row[j] = exp_nonpositive(row[j] - mx);
    float inv = 1.0f / row_sum(row, t + 1);
    for (int j = 0; j <= t; j++) row[j] *= inv;
    for (int j = t + 1; j < T; j++) row[j] = 0.0f;
}

enum { ATT_ROWS = 64 };  /* query rows per block of attention_forward_cpu */

/* Attention of head bh = b NH + h by blocks of ATT_ROWS query rows
 * I = [t0, n): P_I = softmax(scale q_I k^T), then, when out is not NULL,
 * y_I = P_I v. The mask zeroes every key j >= n, so both products stop
 * there (lab 00's extension does the same in the backward pass). */
static void attention_head_cpu(float *out, float *att, const float *qkv, int bh, int T, int C,
                               int NH) {
    const int hs = C / NH, b = bh / NH, h = bh % NH;
    const float scale = 1.0f / sqrtf((float)hs);
    const float *q = qkv + (size_t)b * T * 3 * C + h * hs;
    const float *k = q + C;
    const float *v = q + 2 * C;
    float *p = att + (size_t)bh * T * T;
    for (int t0 = 0; t0 < T; t0 += ATT_ROWS) {
        const int m = T - t0 < ATT_ROWS ? T - t0 : ATT_ROWS, n = t0 + m;
        float *pI = p + (size_t)t0 * T;
        /* scores S_I = scale q_I k^T, (m, n); rows of q, k are 3C apart */
        sgemm_rowmajor_cpu(0, 1, m, n, hs, scale, q + (size_t)t0 * 3 * C, 3 * C, k, 3 * C, 0.0f,
                           pI, T);
        for (int t = t0; t < n; t++) softmax_causal_row(p + (size_t)t * T, t, T);
        if (!out) continue;
        /* y_I = P_I v, into this head's columns of out (row stride C) */
        float *y = out + (size_t)b * T * C + h * hs;
        sgemm_rowmajor_cpu(0, 0, m, hs, n, 1.0f, pI, T, v, 3 * C, 0.0f, y + (size_t)t0 * C, C);
    }
}

void attention_forward_cpu(float *out, float *att, const float *qkv, int B, int T, int C, int NH) {
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * NH; bh++) attention_head_cpu(out, att, qkv, bh, T, C, NH);
}

void attention_probs_forward_cpu(float *att, const float *qkv, int B, int T, int C, int NH) {
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * NH; bh++) attention_head_cpu(NULL, att, qkv, bh, T, C, NH);
}

/* Fused attention's backward pass (kernels.h) for head bh = b NH + h, by
 * tiles of FUSED_QT query rows I = [i0, i0 + m) against key tiles
 * J = [j0, j0 + n) of up to FUSED_KT rows, from 0 to I's last query (row i
 * sees keys j <= i0 + i). Each tile's P and dS live in two buffers that
 * stay in cache and five small GEMMs do the arithmetic, so T x T never
 * exists. The exponent s - lse is <= 0 (lse >= the row's max) up to
 * rounding, which exp_nonpositive takes. One thread owns the head: dk, dv
 * add up over the query tiles without races. */
enum { FUSED_QT = 128, FUSED_KT = 256 };
static void fused_backward_head_cpu(float *dqkv, const float *dout, const float *qkv,
                                    const float *lse, const float *D, int bh, int T, int C,
                                    int NH) {
    const int hs = C / NH, b = bh / NH, h = bh % NH, rs = 3 * C;
    const float scale = 1.0f / sqrtf((float)hs);
    const size_t off = (size_t)b * T * rs + h * hs;
    const float *q = qkv + off, *k = q + C, *v = q + 2 * C;
    float *dq = dqkv + off, *dk = dq + C, *dv = dq + 2 * C;
    const float *dy = dout + (size_t)b * T * C + h * hs;
    const float *lse_h = lse + (size_t)bh * T, *D_h = D + (size_t)bh * T;
    float P[FUSED_QT * FUSED_KT], dS[FUSED_QT * FUSED_KT];
    for (int i0 = 0; i0 < T; i0 += FUSED_QT) {
        const int m = T - i0 < FUSED_QT ? T - i0 : FUSED_QT;
        const float *qI = q + (size_t)i0 * rs, *dyI = dy + (size_t)i0 * C;
        for (int j0 = 0; j0 < i0 + m; j0 += FUSED_KT) {
            const int n = i0 + m - j0 < FUSED_KT ? i0 + m - j0 : FUSED_KT;
            const size_t J = (size_t)j0 * rs;
            /* P = e^(scale q_I k_J^T - lse), zero where key j > query i */
            sgemm_rowmajor_cpu(0, 1, m, n, hs, scale, qI, rs, k + J, rs, 0.0f, P, FUSED_KT);
            for (int i = 0; i < m; i++) {
                float *p = P + i * FUSED_KT;
                int seen = i0 + i - j0 + 1;
                seen = seen < 0 ? 0 : seen > n ? n : seen;
                const float l = lse_h[i0 + i];
                for (int j = 0; j < seen; j++) p[j] = exp_nonpositive(p[j] - l);
                for (int j = seen; j < n; j++) p[j] = 0.0f;
            }
            sgemm_rowmajor_cpu(1, 0, n, hs, m, 1.0f, P, FUSED_KT, dyI, C, 1.0f, dv + J, rs);
            sgemm_rowmajor_cpu(0, 1, m, n, hs, 1.0f, dyI, C, v + J, rs, 0.0f, dS, FUSED_KT);
            for (int i = 0; i < m; i++) {  /* dS = P o (dP - D) */
                float *ds = dS + i * FUSED_KT;
                const float *p = P + i * FUSED_KT, d = D_h[i0 + i];
                for (int j = 0; j < n; j++) ds[j] = p[j] * (ds[j] - d);
            }
            sgemm_rowmajor_cpu(0, 0, m, hs, n, scale, dS, FUSED_KT, k + J, rs, 1.0f,
                               dq + (size_t)i0 * rs, rs);
            sgemm_rowmajor_cpu(1, 0, n, hs, m, scale, dS, FUSED_KT, qI, rs, 1.0f, dk + J, rs);
        }
    }
}

void attention_fused_backward_cpu(float *dqkv, float *D, const float *dout, const float *qkv,
                                  const float *out, const float *lse, int B, int T, int C,
                                  int NH) {
    attention_row_dot_cpu(D, dout, out, B, T, C, NH);
#pragma omp parallel for schedule(dynamic)
    for (int bh = 0; bh < B * NH; bh++)
        fused_backward_head_cpu(dqkv, dout, qkv, lse, D, bh, T, C, NH);
}

/* Ring attention's blocks (kernels.h): the per-row math is math_shared.h's,
 * one query row per iteration forward, one (sequence, head) per iteration
 * backward (its rows add into the same dk, dv rows). */
void attention_block_forward_cpu(float *out, float *lse, const float *qkv, const float *kv,
                                 int B, int T, int C, int NH, int q0, int k0, int n,
                                 int mask) {
    const int hs = C / NH;
    const float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for schedule(static)
    for (int r = 0; r < B * NH * n; r++) {
        const int b = r / (NH * n), h = r / n % NH, i = r % n;
        const float *q = qkv + ((size_t)b * T + q0 + i) * 3 * C + h * hs;
        const float *k = kv + ((size_t)b * T + k0) * 2 * C + h * hs;
        lse[((size_t)b * NH + h) * T + q0 + i] = attention_row_forward(
            out + ((size_t)b * T + q0 + i) * C + h * hs, q, k, k + C, 2 * C,
            attention_keys_seen(i, n, mask), hs, scale);
    }
}

void attention_merge_cpu(float *out, float *lse, const float *out_b, const float *lse_b, int B,
                         int T, int C, int NH, int q0, int n) {
    const int hs = C / NH;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < B * NH * n; r++) {
        const int b = r / (NH * n), h = r / n % NH, i = r % n;
        const size_t row = (size_t)b * T + q0 + i, l = ((size_t)b * NH + h) * T + q0 + i;
        lse[l] = lse_merge_row(out + row * C + h * hs, lse[l], out_b + row * C + h * hs,
                               lse_b[l], hs);
    }
}

void attention_row_dot_cpu(float *D, const float *dout, const float *out, int B, int T, int C,
                           int NH) {
    const int hs = C / NH;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < B * NH * T; r++) {
        const int b = r / (NH * T), h = r / T % NH, t = r % T;
        const size_t o = ((size_t)b * T + t) * C + h * hs;
        float dot = 0.0f;
        for (int d = 0; d < hs; d++) dot += dout[o + d] * out[o + d];
        D[r] = dot;
    }
}

void attention_block_backward_cpu(float *dqkv, float *dkv, const float *dout, const float *qkv,
                                  const float *kv, const float *lse, const float *D, int B,
                                  int T, int C, int NH, int q0, int k0, int n, int mask) {
    const int hs = C / NH;
    const float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * NH; bh++) {
        const int b = bh / NH, h = bh % NH;
        const size_t kr = ((size_t)b * T + k0) * 2 * C + h * hs;
        for (int i = 0; i < n; i++) {
            const size_t row = (size_t)b * T + q0 + i, l = (size_t)bh * T + q0 + i;
            attention_row_backward(dqkv + row * 3 * C + h * hs, dkv + kr, dkv + kr + C, 2 * C,
                                   qkv + row * 3 * C + h * hs, kv + kr, kv + kr + C, 2 * C,
                                   dout + row * C + h * hs, lse[l], D[l], attention_keys_seen(i, n, mask),
                                   hs, scale);
        }
    }
}

void copy_strided_cpu(float *dst, int dst_stride, const float *src, int src_stride, int rows,
                      int cols, int accumulate) {
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        float *d = dst + (size_t)r * dst_stride;
        const float *s = src + (size_t)r * src_stride;
        if (accumulate)
            for (int c = 0; c < cols; c++) d[c] += s[c];
        else memcpy(d, s, (size_t)cols * sizeof(float));
    }
}

void fill_value_cpu(float *x, float value, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = value;
}

void gelu_forward_cpu(float *out, const float *inp, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = gelu_tanh(inp[i]);
}

void gelu_backward_cpu(float *dinp, const float *inp, const float *dout, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) dinp[i] += gelu_tanh_grad(inp[i]) * dout[i];
}

void residual_forward_cpu(float *out, const float *a, const float *b, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void residual_backward_cpu(float *dinp, const float *dout, size_t n) {
    add_inplace_cpu(dinp, dout, n);
}

void add_inplace_cpu(float *x, const float *y, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) x[i] += y[i];
}

float crossentropy_forward_cpu(float *losses, float *probs, const float *logits,
                           const int *targets, int N, int V) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *z = logits + (size_t)n * V;
        float *p = probs + (size_t)n * V;
        float zt = z[targets[n]];  /* read before p (which may alias z) is written */
        float mx = row_max(z, V);
        for (int i = 0; i < V; i++) p[i] = exp_nonpositive(z[i] - mx);  /* z - max <= 0 */
        float sum = row_sum(p, V);
        float inv = 1.0f / sum;
        for (int i = 0; i < V; i++) p[i] *= inv;
        /* -log p[target] = log(sum) - (z_t - max), exact even when p_t underflows */
        losses[n] = logf(sum) - (zt - mx);
    }
    double total = 0.0;
    for (int n = 0; n < N; n++) total += losses[n];
    return (float)(total / N);
}

void crossentropy_backward_cpu(float *probs_to_dlogits, const int *targets, float dloss,
                           int N, int V) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *d = probs_to_dlogits + (size_t)n * V;
        for (int i = 0; i < V; i++) d[i] *= dloss;
        d[targets[n]] -= dloss;
    }
}

/* ------------------------------------------------------------------------ */
/* The pieces of the vocabulary-parallel layers (lab 04): each rank holds    */
/* rows [first, first + rows) of the (padded) vocabulary; the lab joins the  */
/* ranks' results with all-reduces between these kernels.                    */

void vocab_embedding_forward_cpu(float *out, const int *tokens, const float *wte, int first,
                                 int rows, int N, int C) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *o = out + (size_t)n * C;
        int r = tokens[n] - first;
        if (r >= 0 && r < rows) memcpy(o, wte + (size_t)r * C, (size_t)C * sizeof(float));
        else memset(o, 0, (size_t)C * sizeof(float));
    }
}

void vocab_embedding_backward_cpu(float *dwte, const float *dout, const int *tokens, int first,
                                  int rows, int N, int C) {
    /* serial: several positions can hold the same token (encoder_backward) */
    for (int n = 0; n < N; n++) {
        int r = tokens[n] - first;
        if (r < 0 || r >= rows) continue;
        const float *d = dout + (size_t)n * C;
        float *te = dwte + (size_t)r * C;
        for (int i = 0; i < C; i++) te[i] += d[i];
    }
}

void position_forward_cpu(float *out, const float *wpe, int first_row, int N, int T, int C) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const float *pe = wpe + (size_t)((first_row + i) % T) * C;
        float *o = out + (size_t)i * C;
        for (int i = 0; i < C; i++) o[i] += pe[i];
    }
}

void position_backward_cpu(float *dwpe, const float *dout, int B, int T, int C) {
    for (int bt = 0; bt < B * T; bt++) {  /* in encoder_backward's order */
        const float *d = dout + (size_t)bt * C;
        float *pe = dwpe + (size_t)(bt % T) * C;
        for (int i = 0; i < C; i++) pe[i] += d[i];
    }
}

void bias_forward_cpu(float *out, const float *bias, int N, int OC) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) out[(size_t)n * OC + o] += bias[o];
}

void vocab_logits_max_cpu(float *maxes, const float *logits, int N, int V, int valid) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        maxes[n] = valid > 0 ? row_max(logits + (size_t)n * V, valid) : -INFINITY;
}

void vocab_target_logit_cpu(float *out, const float *logits, const int *targets, int first,
                            int N, int V) {
    for (int n = 0; n < N; n++) {
        int j = targets[n] - first;
        out[n] = j >= 0 && j < V ? logits[(size_t)n * V + j] : 0.0f;
    }
}

void vocab_softmax_exp_cpu(float *probs, float *sums, const float *logits, const float *maxes,
                           int N, int V, int valid) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *z = logits + (size_t)n * V;
        float *p = probs + (size_t)n * V;
        for (int i = 0; i < valid; i++) p[i] = exp_nonpositive(z[i] - maxes[n]);
        for (int i = valid; i < V; i++) p[i] = 0.0f;  /* padding: probability 0 */
        sums[n] = row_sum(p, V);
    }
}

float vocab_crossentropy_finish_cpu(float *losses, float *probs, const float *sums,
                                    const float *maxes, const float *target_logits, int N,
                                    int V) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float inv = 1.0f / sums[n], *p = probs + (size_t)n * V;
        for (int i = 0; i < V; i++) p[i] *= inv;
        losses[n] = logf(sums[n]) - (target_logits[n] - maxes[n]);
    }
    double total = 0.0;
    for (int n = 0; n < N; n++) total += losses[n];
    return (float)(total / N);
}

void vocab_crossentropy_backward_cpu(float *probs_to_dlogits, const int *targets, float dloss,
                                     int first, int N, int V) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *d = probs_to_dlogits + (size_t)n * V;
        for (int i = 0; i < V; i++) d[i] *= dloss;
        int j = targets[n] - first;
        if (j >= 0 && j < V) d[j] -= dloss;
    }
}

void adamw_update_cpu(float *params, const float *grads, float *m, float *v, size_t n,
                  float lr, float beta1, float beta2, float eps, float weight_decay, int t) {
    float c1 = 1.0f - powf(beta1, (float)t);
    float c2 = 1.0f - powf(beta2, (float)t);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++)
        adamw_update_element(&params[i], &m[i], &v[i], grads[i], lr, beta1, beta2, eps,
                             weight_decay, c1, c2);
}

double sum_squares_cpu(const float *x, size_t n) {
    /* Serial, in index order: the same bits whatever the thread count. */
    double total = 0.0;
    for (size_t i = 0; i < n; i++) total += (double)x[i] * x[i];
    return total;
}

void scale_inplace_cpu(float *x, float s, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) x[i] *= s;
}

void set_zero_cpu(float *x, size_t n) { memset(x, 0, n * sizeof(float)); }

/* One loop per format, so that each vectorizes. fp16 goes through the
 * compiler's _Float16 where it has one (F16C's conversions on x86): the
 * same values as precision.h's, which tests/c/test_precision.c checks
 * against it on all 2^32 patterns (a NaN's payload aside), at vector speed
 * where precision.h's branches do not vectorize. */
#ifdef __FLT16_MAX__
static inline uint16_t fp16_bits(float x) {
    const _Float16 h = (_Float16)x;
    uint16_t bits;
    memcpy(&bits, &h, sizeof bits);
    return bits;
}
static inline float fp16_value(uint16_t bits) {
    _Float16 h;
    memcpy(&h, &bits, sizeof h);
    return (float)h;
}
#else
static inline uint16_t fp16_bits(float x) { return float_to_fp16(x); }
static inline float fp16_value(uint16_t bits) { return fp16_to_float(bits); }
#endif

void round_inplace_cpu(float *x, size_t n, int precision) {
    if (precision == PRECISION_BF16) {
#pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++) x[i] = bf16_to_float(float_to_bf16(x[i]));
    } else if (precision == PRECISION_FP16) {
#pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++) x[i] = fp16_value(fp16_bits(x[i]));
    }
}

void narrow_to_half_cpu(uint16_t *dst, const float *src, size_t n, int precision) {
    if (precision == PRECISION_BF16) {
#pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++) dst[i] = float_to_bf16(src[i]);
    } else {
#pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++) dst[i] = fp16_bits(src[i]);
    }
}

void quantize_int8_cpu(void *packed, const float *x, size_t n) {
    float *scales = packed;
    signed char *q = (signed char *)packed + 4 * quant_blocks(n);
#pragma omp parallel for schedule(static)
    for (size_t b = 0; b < quant_blocks(n); b++) {
        const size_t lo = b * QUANT_BLOCK, hi = lo + QUANT_BLOCK < n ? lo + QUANT_BLOCK : n;
        const float scale = scales[b] = quant_scale(x + lo, hi - lo);
        for (size_t i = lo; i < hi; i++) q[i] = quant_value(x[i], scale);
    }
}

void dequantize_int8_cpu(float *x, const void *packed, size_t n, int accumulate) {
    const float *scales = packed;
    const signed char *q = (const signed char *)packed + 4 * quant_blocks(n);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        const float v = q[i] * scales[i / QUANT_BLOCK];
        x[i] = accumulate ? x[i] + v : v;
    }
}

void widen_from_half_cpu(float *dst, const uint16_t *src, size_t n, int precision) {
    if (precision == PRECISION_BF16) {
#pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++) dst[i] = bf16_to_float(src[i]);
    } else {
#pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++) dst[i] = fp16_value(src[i]);
    }
}

void scale_half_inplace_cpu(uint16_t *x, float s, size_t n, int precision) {
    if (precision == PRECISION_BF16) {
#pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++) x[i] = float_to_bf16(bf16_to_float(x[i]) * s);
    } else {
#pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++) x[i] = fp16_bits(fp16_value(x[i]) * s);
    }
}

void add_half_inplace_cpu(uint16_t *x, const uint16_t *y, size_t n, int precision) {
    if (precision == PRECISION_BF16) {
#pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++) x[i] = float_to_bf16(bf16_to_float(x[i]) + bf16_to_float(y[i]));
    } else {
#pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++) x[i] = fp16_bits(fp16_value(x[i]) + fp16_value(y[i]));
    }
}

double sum_squares_half_cpu(const uint16_t *x, size_t n, int precision) {
    double total = 0.0;  /* serial, in index order, as sum_squares_cpu */
    for (size_t i = 0; i < n; i++) {
        const double xi = half_to_float(x[i], precision);
        total += xi * xi;
    }
    return total;
}

void adamw_update_half_cpu(float *params, const uint16_t *grads, float grad_scale, float *m,
                           float *v, size_t n, int precision, float lr, float beta1, float beta2,
                           float eps, float weight_decay, int t) {
    float c1 = 1.0f - powf(beta1, (float)t);
    float c2 = 1.0f - powf(beta2, (float)t);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++)
        adamw_update_element(&params[i], &m[i], &v[i], half_to_float(grads[i], precision) * grad_scale,
                             lr, beta1, beta2, eps, weight_decay, c1, c2);
}

/* ---- mixture of experts: one destination row per iteration, so no two
 * threads write one row and each row's sums run in a fixed order. */
void gather_rows_cpu(float *dst, const float *src, const int *idx, const float *weight, int n,
                     int C) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < n; i++) {
        const float *s = src + (size_t)idx[i] * C;
        float *d = dst + (size_t)i * C;
        const float w = weight ? weight[i] : 1.0f;
        for (int c = 0; c < C; c++) d[c] = w * s[c];
    }
}

void gather_sum_rows_cpu(float *dst, const float *src, const int *slots, const float *weight,
                         int N, int k, int C, int accumulate) {
#pragma omp parallel for schedule(static)
    for (int t = 0; t < N; t++) {
        float *d = dst + (size_t)t * C;
        if (!accumulate) memset(d, 0, (size_t)C * sizeof(float));
        for (int j = 0; j < k; j++) {
            const int s = slots[(size_t)t * k + j];
            if (s < 0) continue;
            const float w = weight ? weight[s] : 1.0f, *r = src + (size_t)s * C;
            for (int c = 0; c < C; c++) d[c] += w * r[c];
        }
    }
}

void gather_row_dot_cpu(float *out, const float *a, const float *b, const int *idx, int n,
                        int C) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < n; i++) {
        const float *x = a + (size_t)i * C, *y = b + (size_t)idx[i] * C;
        float dot = 0.0f;
        for (int c = 0; c < C; c++) dot += x[c] * y[c];
        out[i] = dot;
    }
}

void softmax_rows_forward_cpu(float *probs, const float *logits, int N, int E) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        softmax_row_forward(probs + (size_t)n * E, logits + (size_t)n * E, E);
}

void softmax_rows_backward_cpu(float *dprobs_to_dlogits, const float *probs, int N, int E) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        softmax_row_backward(dprobs_to_dlogits + (size_t)n * E, probs + (size_t)n * E, E);
}
