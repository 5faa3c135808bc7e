/* kernels.c: each kernel of kernels.h runs on the backend of the current
 * device (device.h). The backends share signatures (kernels_backend.h), so
 * picking one is picking a function: BACKEND(gelu_forward) is gelu_forward_cuda
 * when the process runs on a GPU, gelu_forward_cpu otherwise. A build without
 * CUDA (no KIT_CUDA) has only the CPU backend, and device.c never selects
 * another.
 *
 * KERNEL(name, flops, bytes, args...) calls the kernel between
 * device_kernel_begin() and device_kernel_end() (device.h): two empty calls
 * in a real build, the moments when the pretend GPU of tests/fake_gpu lets
 * the host touch its memory. Around them the profiler (profile.h) times the
 * call, when --profile asked for it, and adds the FLOPs and bytes the call
 * asks for: the formulas are the arguments flops and bytes (F(x) floats:
 * 4x bytes), evaluated only then. The two kernels that return a value do
 * the same by hand. */
#include "kernels.h"

#include "check.h"
#include "device.h"
#include "kernels_backend.h"
#include "math_shared.h"
#include "precision.h"
#include "profile.h"
#include "trace.h"

/* The CPU backward passes the program handed over (kernels.h): NULL until
 * it does, so that a program without them stops with a message, not a
 * crash. Programs with no backward pass (the planner, most unit tests)
 * never hand any. */
static const CpuBackwardKernels *g_cpu_backward;

void kernels_set_cpu_backward(const CpuBackwardKernels *k) { g_cpu_backward = k; }

static const CpuBackwardKernels *cpu_backward(void) {
    CHECK(g_cpu_backward != NULL,
          "the CPU backward passes were not handed to the kernels (kernels_set_cpu_backward): "
          "link the program with its lab's backward kernels");
    return g_cpu_backward;
}

static CpuFusedForward g_cpu_fused_forward;

void kernels_set_cpu_fused_forward(CpuFusedForward f) { g_cpu_fused_forward = f; }

static CpuFusedForward cpu_fused_forward(void) {
    CHECK(g_cpu_fused_forward != NULL,
          "fused attention's CPU forward pass was not handed to the kernels "
          "(kernels_set_cpu_fused_forward): it is lab 05's extension");
    return g_cpu_fused_forward;
}

/* HANDED_BACKEND(name): the same choice for the two kernels whose CPU
 * version the program handed over (cpu_backward), read only on the CPU;
 * FUSED_FORWARD_BACKEND: for fused attention's forward pass */
#ifdef KIT_CUDA
#define BACKEND(name) (device_current() == DEVICE_CUDA ? name##_cuda : name##_cpu)
/* the optimizer's kernels follow their data (kernels.h): host memory, the CPU's */
#define DATA_BACKEND(name, ptr) (device_is_gpu_pointer(ptr) ? name##_cuda : name##_cpu)
#define HANDED_BACKEND(name) (device_current() == DEVICE_CUDA ? name##_cuda : cpu_backward()->name)
#define FUSED_FORWARD_BACKEND \
    (device_current() == DEVICE_CUDA ? attention_fused_forward_cuda : cpu_fused_forward())
#else
#define BACKEND(name) name##_cpu
#define DATA_BACKEND(name, ptr) name##_cpu
#define HANDED_BACKEND(name) cpu_backward()->name
#define FUSED_FORWARD_BACKEND cpu_fused_forward()
#endif

#define TIMED(name, flops, bytes, call)                          \
    do {                                                         \
        double t0_ = profile_begin();                            \
        device_kernel_begin();                                   \
        call;                                                    \
        device_kernel_end();                                     \
        if (t0_ > 0.0) profile_end(name, t0_, (flops), (bytes)); \
    } while (0)
#define RUN_KERNEL(fn, name, flops, bytes, ...) TIMED(name, flops, bytes, (fn)(__VA_ARGS__))
#define KERNEL(name, flops, bytes, ...) RUN_KERNEL(BACKEND(name), #name, flops, bytes, __VA_ARGS__)
/* a kernel that runs where its first pointer's memory is */
#define DATA_KERNEL(name, flops, bytes, ptr, ...) \
    RUN_KERNEL(DATA_BACKEND(name, ptr), #name, flops, bytes, ptr, __VA_ARGS__)
#define DATA_VALUE_KERNEL(out, name, flops, bytes, ptr, ...) \
    TIMED(#name, flops, bytes, (out) = DATA_BACKEND(name, ptr)(ptr, __VA_ARGS__))
/* the kernels that return a value: out = it */
#define VALUE_KERNEL(out, name, flops, bytes, ...) \
    TIMED(#name, flops, bytes, (out) = BACKEND(name)(__VA_ARGS__))
#define HANDED_KERNEL(name, flops, bytes, ...) \
    RUN_KERNEL(HANDED_BACKEND(name), #name, flops, bytes, __VA_ARGS__)

#define F(x) (4.0 * (double)(x))  /* bytes of x floats */

/* Operations per element of the elementwise kernels, as math_shared.h
 * writes them (a fused multiply-add counts 2): GELU's tanh through
 * exp_nonpositive is about 30 of the forward's 38; AdamW's update has a
 * square root and a division among its 15. */
enum { GELU_FWD_OPS = 38, GELU_BWD_OPS = 50, ADAMW_OPS = 15, EXP_OPS = 24 };

void encoder_forward(float *out, const int *tokens, const float *wte, const float *wpe,
                     int B, int T, int C) {
    KERNEL(encoder_forward, (double)B * T * C, F(3.0 * B * T * C + B * T), out, tokens, wte, wpe, B, T, C);
}

void encoder_backward(float *dwte, float *dwpe, const float *dout, const int *tokens,
                      int B, int T, int C) {
    KERNEL(encoder_backward, 2.0 * B * T * C, F(5.0 * B * T * C + B * T), dwte, dwpe, dout, tokens, B, T, C);
}

void layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                       const float *w, const float *b, int N, int C) {
    KERNEL(layernorm_forward, 8.0 * N * C, F(2.0 * N * C + 2.0 * C + 2.0 * N), out, mean, rstd, inp, w, b, N, C);
}

void layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                        const float *inp, const float *w, const float *mean,
                        const float *rstd, int N, int C) {
    HANDED_KERNEL(layernorm_backward, 14.0 * N * C, F(4.0 * N * C + 5.0 * C + 2.0 * N), dinp, dw, db, dout, inp, w, mean, rstd, N, C);
}

/* The format the GEMMs read their inputs in (kernels_set_precision) */
static int g_precision = PRECISION_FP32;

void kernels_set_precision(int precision) { g_precision = precision; }

void matmul_forward(float *out, const float *inp, const float *w, const float *bias,
                    int N, int IC, int OC) {
    KERNEL(matmul_forward, 2.0 * N * IC * OC + (bias ? (double)N * OC : 0.0),
           F((double)N * IC + (double)OC * IC + (double)N * OC + (bias ? OC : 0)), out, inp, w, bias, N, IC, OC,
           g_precision);
}

void matmul_backward(float *dinp, float *dw, float *dbias, const float *dout,
                     const float *inp, const float *w, int N, int IC, int OC) {
    /* each of the two GEMMs 2 N IC OC FLOPs (zero-bubble runs them apart) */
    const double gemms = (dinp != NULL) + (dw != NULL);
    KERNEL(matmul_backward, gemms * 2.0 * N * IC * OC + (dbias ? (double)N * OC : 0.0),
           F((double)N * OC + gemms * 1.5 * (OC * IC + (double)N * IC) + (dbias ? 2 * OC : 0)),
           dinp, dw, dbias, dout, inp, w, N, IC, OC, g_precision);
}

/* (query, key) pairs the causal mask keeps: B NH T (T + 1) / 2 */
static double attention_pairs(int B, int T, int NH) { return (double)B * NH * T * (T + 1) / 2.0; }

void attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH) {
    KERNEL(attention_forward, attention_pairs(B, T, NH) * (4.0 * (C / NH) + EXP_OPS + 4),
           F(4.0 * B * T * C + (double)B * NH * T * T), out, att, qkv, B, T, C, NH);
}

/* the scores and the softmax of attention_forward, without P v */
void attention_probs_forward(float *att, const float *qkv, int B, int T, int C, int NH) {
    KERNEL(attention_probs_forward, attention_pairs(B, T, NH) * (2.0 * (C / NH) + EXP_OPS + 4),
           F(2.0 * B * T * C + (double)B * NH * T * T), att, qkv, B, T, C, NH);
}

void attention_backward(float *dqkv, float *datt, const float *dout, const float *qkv,
                        const float *att, int B, int T, int C, int NH) {
    HANDED_KERNEL(attention_backward, attention_pairs(B, T, NH) * (8.0 * (C / NH) + 4),
                  F(10.0 * B * T * C + 3.0 * B * NH * T * T), dqkv, datt, dout, qkv, att, B, T, C, NH);
}

/* Fused attention: the materialized pass's arithmetic, but no T x T
 * traffic (q, k, v, out and the lse); the backward pass rebuilds the scores
 * (2 hs a pair more than attention_backward) and starts with D. */
void attention_fused_forward(float *out, float *lse, const float *qkv, int B, int T, int C,
                             int NH) {
    RUN_KERNEL(FUSED_FORWARD_BACKEND, "attention_fused_forward",
               attention_pairs(B, T, NH) * (4.0 * (C / NH) + EXP_OPS + 4),
               F(4.0 * B * T * C + (double)B * NH * T), out, lse, qkv, B, T, C, NH);
}

void attention_fused_backward(float *dqkv, float *D, const float *dout, const float *qkv,
                              const float *out, const float *lse, int B, int T, int C, int NH) {
    KERNEL(attention_fused_backward,
           attention_pairs(B, T, NH) * (10.0 * (C / NH) + EXP_OPS + 4) + 2.0 * B * T * C,
           F(12.0 * B * T * C + 2.0 * B * NH * T), dqkv, D, dout, qkv, out, lse, B, T, C, NH);
}

/* Ring attention's blocks: n (n + 1) / 2 or n^2 pairs per head, each a
 * dot product twice and a row of P v forward (6 hs, two exps), the dot
 * products and four row updates backward (10 hs, one exp). Each call adds
 * its pairs and its time to this rank's totals and draws a "compute" bar
 * in the trace (the timeline's overlap with the ring's transfers). The time
 * is the host's: on a GPU, where kernels are queued, only the launch. */
static unsigned long long g_block_pairs;
static double g_block_seconds;
static double block_pairs(int B, int NH, int n, int mask) {
    const double seen = mask == ATTN_CAUSAL          ? n * (n + 1.0) / 2.0
                        : mask == ATTN_CAUSAL_STRICT ? n * (n - 1.0) / 2.0
                                                     : (double)n * n;
    double pairs = (double)B * NH * seen;
    g_block_pairs += (unsigned long long)pairs;
    return pairs;
}
static void block_done(const char *name, double t0) {
    const double t1 = trace_now();
    g_block_seconds += t1 - t0;
    trace_event("compute", name, NULL, t0, t1, 0);
}
void attention_block_stats(unsigned long long *pairs, double *seconds) {
    *pairs = g_block_pairs;
    *seconds = g_block_seconds;
}

void attention_block_forward(float *out, float *lse, const float *qkv, const float *kv, int B,
                             int T, int C, int NH, int q0, int k0, int n, int mask) {
    const double pairs = block_pairs(B, NH, n, mask), t0 = trace_now();
    KERNEL(attention_block_forward, pairs * (6.0 * (C / NH) + 2 * EXP_OPS),
           F((double)B * n * (3.0 * C + 2.0 * NH)), out, lse, qkv, kv, B, T, C, NH, q0, k0, n,
           mask);
    block_done("attention block forward", t0);
}

void attention_merge(float *out, float *lse, const float *out_b, const float *lse_b, int B,
                     int T, int C, int NH, int q0, int n) {
    KERNEL(attention_merge, (double)B * n * (3.0 * C + NH * (3.0 * EXP_OPS)),
           F((double)B * n * (3.0 * C + 3.0 * NH)), out, lse, out_b, lse_b, B, T, C, NH, q0, n);
}

void attention_row_dot(float *D, const float *dout, const float *out, int B, int T, int C,
                       int NH) {
    KERNEL(attention_row_dot, 2.0 * B * T * C, F((double)B * T * (2.0 * C + NH)), D, dout, out,
           B, T, C, NH);
}

void attention_block_backward(float *dqkv, float *dkv, const float *dout, const float *qkv,
                              const float *kv, const float *lse, const float *D, int B, int T,
                              int C, int NH, int q0, int k0, int n, int mask) {
    const double pairs = block_pairs(B, NH, n, mask), t0 = trace_now();
    KERNEL(attention_block_backward, pairs * (10.0 * (C / NH) + EXP_OPS),
           F((double)B * n * (9.0 * C + 2.0 * NH)), dqkv, dkv, dout, qkv, kv, lse, D, B, T, C,
           NH, q0, k0, n, mask);
    block_done("attention block backward", t0);
}

void copy_strided(float *dst, int dst_stride, const float *src, int src_stride, int rows,
                  int cols, int accumulate) {
    KERNEL(copy_strided, accumulate ? (double)rows * cols : 0.0,
           F((2.0 + accumulate) * rows * cols), dst, dst_stride, src, src_stride, rows, cols,
           accumulate);
}

void fill_value(float *x, float value, size_t n) { KERNEL(fill_value, 0.0, F(n), x, value, n); }

void gelu_forward(float *out, const float *inp, size_t n) { KERNEL(gelu_forward, (double)GELU_FWD_OPS * n, F(2.0 * n), out, inp, n); }

void gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    KERNEL(gelu_backward, (double)GELU_BWD_OPS * n, F(4.0 * n), dinp, inp, dout, n);
}

void residual_forward(float *out, const float *a, const float *b, size_t n) {
    KERNEL(residual_forward, (double)n, F(3.0 * n), out, a, b, n);
}

void residual_backward(float *dinp, const float *dout, size_t n) {
    KERNEL(residual_backward, (double)n, F(3.0 * n), dinp, dout, n);
}

float crossentropy_forward(float *losses, float *probs, const float *logits,
                           const int *targets, int N, int V) {
    float loss;
    VALUE_KERNEL(loss, crossentropy_forward, (double)N * V * (EXP_OPS + 4),
                 F(2.0 * N * V + 2.0 * N), losses, probs, logits, targets, N, V);
    return loss;
}

void crossentropy_backward(float *probs_to_dlogits, const int *targets, float dloss,
                           int N, int V) {
    KERNEL(crossentropy_backward, (double)N * V, F(2.0 * N * V + N), probs_to_dlogits, targets, dloss, N, V);
}

void vocab_embedding_forward(float *out, const int *tokens, const float *wte, int first,
                             int rows, int N, int C) {
    KERNEL(vocab_embedding_forward, 0.0, F(2.0 * N * C + N), out, tokens, wte, first, rows, N, C);
}

void vocab_embedding_backward(float *dwte, const float *dout, const int *tokens, int first,
                              int rows, int N, int C) {
    KERNEL(vocab_embedding_backward, (double)N * C, F(3.0 * N * C + N), dwte, dout, tokens, first, rows, N, C);
}

void position_forward(float *out, const float *wpe, int first_row, int N, int T, int C) {
    KERNEL(position_forward, (double)N * C, F(3.0 * N * C), out, wpe, first_row, N, T, C);
}

void position_backward(float *dwpe, const float *dout, int B, int T, int C) {
    KERNEL(position_backward, (double)B * T * C, F(3.0 * B * T * C), dwpe, dout, B, T, C);
}

void bias_forward(float *out, const float *bias, int N, int OC) {
    KERNEL(bias_forward, (double)N * OC, F(2.0 * N * OC + OC), out, bias, N, OC);
}

void vocab_logits_max(float *maxes, const float *logits, int N, int V, int valid) {
    KERNEL(vocab_logits_max, (double)N * valid, F((double)N * valid + N), maxes, logits, N, V, valid);
}

void vocab_target_logit(float *out, const float *logits, const int *targets, int first, int N,
                        int V) {
    KERNEL(vocab_target_logit, 0.0, F(3.0 * N), out, logits, targets, first, N, V);
}

void vocab_softmax_exp(float *probs, float *sums, const float *logits, const float *maxes,
                       int N, int V, int valid) {
    KERNEL(vocab_softmax_exp, (double)N * valid * (EXP_OPS + 2), F(2.0 * N * V + 2.0 * N), probs, sums, logits, maxes, N, V, valid);
}

float vocab_crossentropy_finish(float *losses, float *probs, const float *sums,
                                const float *maxes, const float *target_logits, int N, int V) {
    float loss;
    VALUE_KERNEL(loss, vocab_crossentropy_finish, (double)N * V, F(2.0 * N * V + 4.0 * N), losses,
                 probs, sums, maxes, target_logits, N, V);
    return loss;
}

void vocab_crossentropy_backward(float *probs_to_dlogits, const int *targets, float dloss,
                                 int first, int N, int V) {
    KERNEL(vocab_crossentropy_backward, (double)N * V, F(2.0 * N * V + N), probs_to_dlogits, targets, dloss, first, N, V);
}

void adamw_update(float *params, const float *grads, float *m, float *v, size_t n,
                  float lr, float beta1, float beta2, float eps, float weight_decay, int t) {
    DATA_KERNEL(adamw_update, (double)ADAMW_OPS * n, F(7.0 * n), params, grads, m, v, n, lr, beta1, beta2, eps, weight_decay, t);
}

double sum_squares(const float *x, size_t n) {
    double sum;
    DATA_VALUE_KERNEL(sum, sum_squares, 2.0 * n, F(n), x, n);
    return sum;
}
void round_inplace(float *x, size_t n, int precision) {
    KERNEL(round_inplace, 0.0, F(2.0 * n), x, n, precision);
}
void narrow_to_half(uint16_t *dst, const float *src, size_t n, int precision) {
    DATA_KERNEL(narrow_to_half, 0.0, F(1.5 * n), dst, src, n, precision);
}
void widen_from_half(float *dst, const uint16_t *src, size_t n, int precision) {
    KERNEL(widen_from_half, 0.0, F(1.5 * n), dst, src, n, precision);
}

/* a scale and a rounding per value; each value read and written once */
void quantize_int8(void *packed, const float *x, size_t n) {
    KERNEL(quantize_int8, 3.0 * n, F(n) + (double)quant_packed_bytes(n), packed, x, n);
}
void dequantize_int8(float *x, const void *packed, size_t n, int accumulate) {
    KERNEL(dequantize_int8, (accumulate ? 2.0 : 1.0) * n,
           (double)quant_packed_bytes(n) + F((accumulate ? 2.0 : 1.0) * n), x, packed, n,
           accumulate);
}

void scale_inplace_as(void *x, float s, size_t n, int precision) {
    if (precision == PRECISION_FP32) scale_inplace(x, s, n);
    else DATA_KERNEL(scale_half_inplace, (double)n, 4.0 * n, x, s, n, precision);
}
void add_inplace_as(void *x, const void *y, size_t n, int precision) {
    if (precision == PRECISION_FP32) add_inplace(x, y, n);
    else KERNEL(add_half_inplace, (double)n, 6.0 * n, x, y, n, precision);
}
double sum_squares_as(const void *x, size_t n, int precision) {
    if (precision == PRECISION_FP32) return sum_squares(x, n);
    double sum;
    DATA_VALUE_KERNEL(sum, sum_squares_half, 2.0 * n, 2.0 * n, x, n, precision);
    return sum;
}
void adamw_update_as(float *params, void *grads, float grad_scale, float *m, float *v, size_t n,
                     int precision, float lr, float beta1, float beta2, float eps,
                     float weight_decay, int t) {
    if (precision == PRECISION_FP32) {
        if (grad_scale != 1.0f) scale_inplace(grads, grad_scale, n);
        adamw_update(params, grads, m, v, n, lr, beta1, beta2, eps, weight_decay, t);
        return;
    }
    DATA_KERNEL(adamw_update_half, (double)(ADAMW_OPS + 1) * n, 14.0 * n, params, grads, grad_scale,
                m, v, n, precision, lr, beta1, beta2, eps, weight_decay, t);
}

void scale_inplace(float *x, float s, size_t n) { DATA_KERNEL(scale_inplace, (double)n, F(2.0 * n), x, s, n); }
void add_inplace(float *x, const float *y, size_t n) { KERNEL(add_inplace, (double)n, F(3.0 * n), x, y, n); }
void set_zero(float *x, size_t n) { KERNEL(set_zero, 0.0, F(n), x, n); }

void sgemm_rowmajor(int trans_a, int trans_b, int M, int N, int K, float alpha,
                    const float *A, int lda, const float *Bm, int ldb, float beta,
                    float *Cm, int ldc) {
    KERNEL(sgemm_rowmajor, 2.0 * M * N * K,
           F((double)M * K + (double)K * N + (beta != 0.0f ? 2.0 : 1.0) * M * N), trans_a, trans_b, M, N, K, alpha, A, lda, Bm, ldb, beta, Cm, ldc);
}

/* The row movers count the slots of an index list as rows read and written
 * (a gather_sum_rows slot of -1 reads nothing: an upper bound). */
void gather_rows(float *dst, const float *src, const int *idx, const float *weight, int n,
                 int C) {
    KERNEL(gather_rows, weight ? (double)n * C : 0.0, F(2.0 * n * C + (weight ? 2.0 : 1.0) * n),
           dst, src, idx, weight, n, C);
}

void gather_sum_rows(float *dst, const float *src, const int *slots, const float *weight, int N,
                     int k, int C, int accumulate) {
    KERNEL(gather_sum_rows, (weight ? 2.0 : 1.0) * N * k * C,
           F((double)N * k * C + (1.0 + accumulate) * N * C + (weight ? 2.0 : 1.0) * N * k), dst,
           src, slots, weight, N, k, C, accumulate);
}

void gather_row_dot(float *out, const float *a, const float *b, const int *idx, int n, int C) {
    KERNEL(gather_row_dot, 2.0 * n * C, F(2.0 * n * C + 2.0 * n), out, a, b, idx, n, C);
}

void softmax_rows_forward(float *probs, const float *logits, int N, int E) {
    KERNEL(softmax_rows_forward, (double)N * E * (EXP_OPS + 3), F(2.0 * N * E), probs, logits, N,
           E);
}

void softmax_rows_backward(float *dprobs_to_dlogits, const float *probs, int N, int E) {
    KERNEL(softmax_rows_backward, 4.0 * N * E, F(3.0 * N * E), dprobs_to_dlogits, probs, N, E);
}
