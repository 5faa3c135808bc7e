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

#ifdef __CUDACC__
#define HD __host__ __device__
#else
#define HD
#endif

/* GELU, tanh form (GPT-2): 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3). */
#define GELU_SCALE 0.7978845608028654f   /* sqrt(2/pi) */

static inline HD float gelu_tanh(float x) {
    float u = GELU_SCALE * (x + 0.044715f * x * x * x);
    return 0.5f * x * (1.0f + tanhf(u));
}

/* d/dx gelu = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) du/dx,
 * du/dx = sqrt(2/pi) (1 + 3 * 0.044715 x^2). */
static inline HD float gelu_tanh_grad(float x) {
    float u = GELU_SCALE * (x + 0.044715f * x * x * x);
    float t = tanhf(u);
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
