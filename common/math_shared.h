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

#endif
