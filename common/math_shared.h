/* math_shared.h: per-element math written once for the CPU and the GPU.
 *
 * Every function here is `static inline` and marked HD, which means
 * __host__ __device__ under nvcc and nothing under a C compiler. The CPU
 * kernels call them in loops, the CUDA kernels call them per thread, so what
 * the CPU tests check is the same arithmetic the GPU runs.
 */
#ifndef MATH_SHARED_H
#define MATH_SHARED_H

#include <math.h>
#include <string.h>

#ifdef __CUDACC__
#define HD __host__ __device__
#else
#define HD
#endif

/* The bits of a float as an int, and back (a reinterpretation, no
 * conversion: memcpy is the portable spelling, and vectorizes). */
static inline HD int float_bits(float f) {
#ifdef __CUDA_ARCH__
    return __float_as_int(f);
#else
    int i;
    memcpy(&i, &f, sizeof i);
    return i;
#endif
}

static inline HD float bits_float(int i) {
#ifdef __CUDA_ARCH__
    return __int_as_float(i);
#else
    float f;
    memcpy(&f, &i, sizeof f);
    return f;
#endif
}

/* e^x for x <= 0, in plain arithmetic so that a CPU loop calling it
 * vectorizes (libm's expf/tanhf are scalar calls, and were a third of a
 * training step). Range reduction x = k ln2 + r with |r| <= ln2/2, then a
 * degree-7 Taylor polynomial for e^r: the truncation error r^8/8! is below
 * 6e-9, so the result is within a few float ulps of expf. x < -87 gives 0.
 * k comes without a float-to-int conversion (which, after the clamp, keeps
 * GCC from vectorizing the loop): adding 1.5 x 2^23 rounds x / ln2 to an
 * integer held in the sum's low mantissa bits, so the sum's bits minus
 * ROUND's are k, and (k + 127) << 23 are the bits of 2^k. */
static inline HD float exp_nonpositive(float x) {
    const float LN2_HI = 0.693145752f, LN2_LO = 1.42860677e-6f; /* ln2 = HI + LO */
    const float ROUND = 12582912.0f;                            /* 1.5 x 2^23 */
    x = x > -87.0f ? x : -87.0f;  /* not fmaxf: without -ffast-math that is a libm call */
    float t = x * 1.44269504f + ROUND;
    float kf = t - ROUND;                                       /* round(x / ln2) */
    float r = (x - kf * LN2_HI) - kf * LN2_LO;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    float two_k = bits_float((float_bits(t) - float_bits(ROUND) + 127) << 23);
    return x <= -87.0f ? 0.0f : p * two_k;
}

/* Row reductions in REDUCE_LANES interleaved partial results, combined in
 * a fixed order at the end: a single running float sum is a chain the
 * compiler may not reorder (so it stays scalar), REDUCE_LANES of them are
 * one vector add per REDUCE_LANES elements. The order depends on n alone,
 * never on the threads. row_max needs n >= 1. */
enum { REDUCE_LANES = 16 };

static inline HD float row_sum(const float *x, int n) {
    float acc[REDUCE_LANES] = {0}, s = 0.0f;
    int j = 0;
    for (; j + REDUCE_LANES <= n; j += REDUCE_LANES)
        for (int l = 0; l < REDUCE_LANES; l++) acc[l] += x[j + l];
    for (; j < n; j++) s += x[j];
    for (int l = 0; l < REDUCE_LANES; l++) s += acc[l];
    return s;
}

static inline HD float row_max(const float *x, int n) {
    float acc[REDUCE_LANES], mx = x[0];
    for (int l = 0; l < REDUCE_LANES; l++) acc[l] = x[0];
    int j = 0;
    for (; j + REDUCE_LANES <= n; j += REDUCE_LANES)
        for (int l = 0; l < REDUCE_LANES; l++) acc[l] = x[j + l] > acc[l] ? x[j + l] : acc[l];
    for (; j < n; j++) mx = x[j] > mx ? x[j] : mx;
    for (int l = 0; l < REDUCE_LANES; l++) mx = acc[l] > mx ? acc[l] : mx;
    return mx;
}

/* tanh u = sign(u) (1 - e) / (1 + e), e = e^{-2|u|} <= 1: no overflow for
 * any u, absolute error about one float ulp of 1 (what 1 + tanh needs). */
static inline HD float tanh_fast(float u) {
    float e = exp_nonpositive(-2.0f * fabsf(u));
    return copysignf((1.0f - e) / (1.0f + e), u);
}

/* GELU, tanh form (GPT-2): 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3). */
#define GELU_SCALE 0.7978845608028654f   /* sqrt(2/pi) */

static inline HD float gelu_tanh(float x) {
    float u = GELU_SCALE * (x + 0.044715f * x * x * x);
    return 0.5f * x * (1.0f + tanh_fast(u));
}

/* d/dx gelu = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) du/dx,
 * du/dx = sqrt(2/pi) (1 + 3 * 0.044715 x^2). */
static inline HD float gelu_tanh_grad(float x) {
    float u = GELU_SCALE * (x + 0.044715f * x * x * x);
    float t = tanh_fast(u);
    float du = GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
}

/* One AdamW step on one element (Loshchilov & Hutter: decoupled decay).
 *   m = b1 m + (1-b1) g          v = b2 v + (1-b2) g^2
 *   p -= lr * ( (m / c1) / (sqrt(v / c2) + eps) + wd p )
 * with the bias corrections c1 = 1 - b1^t, c2 = 1 - b2^t computed once per
 * step by the caller. */
static inline HD void adamw_update_element(float *p, float *m, float *v, float g,
                                           float lr, float b1, float b2, float eps,
                                           float wd, float c1, float c2) {
    float mi = b1 * *m + (1.0f - b1) * g;
    float vi = b2 * *v + (1.0f - b2) * g * g;
    *m = mi;
    *v = vi;
    *p -= lr * ((mi / c1) / (sqrtf(vi / c2) + eps) + wd * *p);
}

/* Online softmax merge (used by ring attention and fused kernels): two partial
 * results over disjoint key sets, each with its running max and sum of exps,
 * combine into the result over the union:
 *   m = max(ma, mb), s = sa e^(ma-m) + sb e^(mb-m). */
static inline HD void softmax_merge(float *m, float *s, float mb, float sb) {
    float mn = fmaxf(*m, mb);
    *s = *s * expf(*m - mn) + sb * expf(mb - mn);
    *m = mn;
}

/* ---- context parallelism (lab 07) ------------------------------------------
 * Placement: rank r of cp holds T / cp of every sequence's T positions:
 *   CP_PLACE_CONTIGUOUS  chunk r of cp chunks;
 *   CP_PLACE_ZIGZAG      chunks r and 2 cp - 1 - r of 2 cp, an early one and
 *                        a late one, so that every rank has as many (query,
 *                        key) pairs under the causal mask;
 *   CP_PLACE_STRIPED     every cp-th position from r: r, r + cp, r + 2 cp...
 *                        (Brandon et al. 2023, striped attention).
 * A rank's rows of a sequence are its positions in increasing order; under
 * zigzag local position t is in local chunk t / c, c = T / (2 cp). */
enum { CP_PLACE_CONTIGUOUS, CP_PLACE_ZIGZAG, CP_PLACE_STRIPED };

static inline HD int cp_global_chunk(int local_chunk, int cp, int rank, int zigzag) {
    return zigzag && local_chunk == 1 ? 2 * cp - 1 - rank : rank;
}

/* The global position of local position t of a sequence (Tl = T / cp
 * local positions; cp = 1: t itself). */
static inline HD int cp_global_position(int t, int Tl, int cp, int rank, int placement) {
    if (placement == CP_PLACE_STRIPED) return t * cp + rank;
    const int zigzag = placement == CP_PLACE_ZIGZAG, c = zigzag ? Tl / 2 : Tl;
    return cp_global_chunk(t / c, cp, rank, zigzag) * c + t % c;
}

/* The masks of ring attention's blocks (kernels.h), and how many of a
 * block's n keys query row i sees under each: all, j <= i, j < i. */
enum { ATTN_FULL, ATTN_CAUSAL, ATTN_CAUSAL_STRICT };
static inline HD int attention_keys_seen(int i, int n, int mask) {
    return mask == ATTN_CAUSAL ? i + 1 : mask == ATTN_CAUSAL_STRICT ? i : n;
}

/* Attention of one query row against n keys, with the softmax statistics
 * the ring needs (no probability is stored): keys and values are rows kv_rs
 * floats apart, hs wide.
 *   s_j = scale q . k_j,  lse = log sum_j e^(s_j),  y = sum_j e^(s_j - lse) v_j
 * Two passes: the running max m and sum s of e^(s_j - m) (softmax_merge, one
 * key at a time), then y. Returns lse (-inf when n = 0, and y = 0). */
static inline HD float attention_row_forward(float *y, const float *q, const float *k,
                                             const float *v, int kv_rs, int n, int hs,
                                             float scale) {
    float m = -INFINITY, s = 0.0f;
    for (int j = 0; j < n; j++) {
        float dot = 0.0f;
        for (int d = 0; d < hs; d++) dot += q[d] * k[(size_t)j * kv_rs + d];
        softmax_merge(&m, &s, dot * scale, 1.0f);
    }
    for (int d = 0; d < hs; d++) y[d] = 0.0f;
    if (n == 0) return -INFINITY;
    const float lse = m + logf(s);
    for (int j = 0; j < n; j++) {
        float dot = 0.0f;
        for (int d = 0; d < hs; d++) dot += q[d] * k[(size_t)j * kv_rs + d];
        const float p = expf(dot * scale - lse);
        for (int d = 0; d < hs; d++) y[d] += p * v[(size_t)j * kv_rs + d];
    }
    return lse;
}

/* The same row's backward, from the forward's lse (over ALL of the row's
 * keys, not only these n) and D = dy . y (y the row's whole output): with
 * p_j = e^(s_j - lse) the row's final probabilities,
 *   dv_j += p_j dy,   dp_j = dy . v_j,   ds_j = p_j (dp_j - D),
 *   dq += scale sum_j ds_j k_j,   dk_j += scale ds_j q.
 * (sum_j p_j dp_j = dy . y = D: the softmax backward's row sum, known
 * before any block is seen.) dk and dv rows are dkv_rs apart. */
static inline HD void attention_row_backward(float *dq, float *dk, float *dv, int dkv_rs,
                                             const float *q, const float *k, const float *v,
                                             int kv_rs, const float *dy, float lse, float D,
                                             int n, int hs, float scale) {
    for (int j = 0; j < n; j++) {
        const float *kj = k + (size_t)j * kv_rs, *vj = v + (size_t)j * kv_rs;
        float dot = 0.0f, dp = 0.0f;
        for (int d = 0; d < hs; d++) {
            dot += q[d] * kj[d];
            dp += dy[d] * vj[d];
        }
        const float p = expf(dot * scale - lse), ds = p * (dp - D) * scale;
        float *dkj = dk + (size_t)j * dkv_rs, *dvj = dv + (size_t)j * dkv_rs;
        for (int d = 0; d < hs; d++) {
            dq[d] += ds * kj[d];
            dkj[d] += ds * q[d];
            dvj[d] += p * dy[d];
        }
    }
}

/* Merge a partial result over more keys into a row's running one, by the
 * log-sum-exp rule: lse' = log(e^lse + e^lse_b), shifted by the larger of
 * the two so that no exponential overflows (both may be large: scores are
 * not bounded),
 *   lse' = mx + log(e^(lse - mx) + e^(lse_b - mx)),  mx = max(lse, lse_b),
 *   y'   = e^(lse - lse') y + e^(lse_b - lse') y_b.
 * lse = -inf (nothing yet) takes y_b and lse_b as they are. Returns lse'. */
static inline HD float lse_merge_row(float *y, float lse, const float *y_b, float lse_b, int hs) {
    if (lse_b == -INFINITY) return lse;
    const float mx = fmaxf(lse, lse_b);
    const float merged = mx + logf(expf(lse - mx) + expf(lse_b - mx));
    const float wa = expf(lse - merged), wb = expf(lse_b - merged);
    for (int d = 0; d < hs; d++) y[d] = wa * y[d] + wb * y_b[d];
    return merged;
}

/* ---- mixture of experts (lab 08) -------------------------------------------
 * The router's softmax over E expert logits, one row; p may alias z. E is
 * small (tens), so a row is one thread's serial loop on both backends, and
 * the GPU's probabilities are the CPU's bit for bit (FMA contraction aside).
 *   p_i = e^(z_i - max) / sum_j e^(z_j - max) */
static inline HD void softmax_row_forward(float *p, const float *z, int n) {
    float mx = z[0];
    for (int i = 1; i < n; i++) mx = z[i] > mx ? z[i] : mx;
    float sum = 0.0f;
    for (int i = 0; i < n; i++) {
        p[i] = exp_nonpositive(z[i] - mx);
        sum += p[i];
    }
    const float inv = 1.0f / sum;
    for (int i = 0; i < n; i++) p[i] *= inv;
}

/* Its backward, in place: dp becomes dz = p (dp - sum_j p_j dp_j), the
 * Jacobian of the softmax, diag(p) - p p^T, applied to dp. */
static inline HD void softmax_row_backward(float *d, const float *p, int n) {
    float dot = 0.0f;
    for (int i = 0; i < n; i++) dot += p[i] * d[i];
    for (int i = 0; i < n; i++) d[i] = p[i] * (d[i] - dot);
}

/* Blockwise int8 (ZeRO++, Wang et al. 2023): a block of up to
 * QUANT_BLOCK floats travels as one fp32 scale, absmax / 127, and one int8
 * per value, round(x / scale), in [-127, 127]; back, q scale. The error
 * of a value is at most scale / 2 = absmax / 254 of its block's largest
 * magnitude; an all-zero block has scale 0 and comes back zero. Packed, n
 * values are the ceil(n / QUANT_BLOCK) scales, then the n int8
 * (quant_packed_bytes). */
#define QUANT_BLOCK 256
static inline HD size_t quant_blocks(size_t n) { return (n + QUANT_BLOCK - 1) / QUANT_BLOCK; }
static inline HD size_t quant_packed_bytes(size_t n) { return quant_blocks(n) * 4 + n; }
static inline HD float quant_scale(const float *x, size_t n) {
    float most = 0.0f;
    for (size_t i = 0; i < n; i++) {
        const float a = x[i] < 0 ? -x[i] : x[i];
        most = a > most ? a : most;
    }
    return most / 127.0f;
}
static inline HD signed char quant_value(float x, float scale) {
    if (scale == 0.0f) return 0;
    float q = x / scale;
    q = q > 127.0f ? 127.0f : q < -127.0f ? -127.0f : q;
    return (signed char)(q < 0 ? q - 0.5f : q + 0.5f);  /* to nearest, half away from 0 */
}

#endif
