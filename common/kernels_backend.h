/* kernels_backend.h: the two implementations behind kernels.h.
 *
 * Every kernel of kernels.h exists twice, with the same signature and the
 * same contract: name_cpu (kernels_cpu.c) works on host memory, name_cuda
 * (kernels_cuda.cu) on the current GPU's memory, queued on the compute
 * stream (the default stream; see device.h). kernels.c forwards each
 * kernels.h call to one of them by device_current(). Tests call both
 * directly to compare them.
 *
 * Three have only their GPU version here: the CPU backward passes of
 * layernorm and attention are the first lab's, which the program hands to
 * the kernels (kernels.h: kernels_set_cpu_backward), and the CPU forward
 * pass of fused attention is lab 05's (kernels_set_cpu_fused_forward).
 */
#ifndef KERNELS_BACKEND_H
#define KERNELS_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DECLARE_KERNELS(SUFFIX)                                                              \
    void encoder_forward##SUFFIX(float *out, const int *tokens, const float *wte,            \
                                 const float *wpe, int B, int T, int C);                     \
    void encoder_backward##SUFFIX(float *dwte, float *dwpe, const float *dout,               \
                                  const int *tokens, int B, int T, int C);                   \
    void layernorm_forward##SUFFIX(float *out, float *mean, float *rstd, const float *inp,   \
                                   const float *w, const float *b, int N, int C);            \
    void matmul_forward##SUFFIX(float *out, const float *inp, const float *w,                \
                                const float *bias, int N, int IC, int OC, int precision);    \
    void matmul_backward##SUFFIX(float *dinp, float *dw, float *dbias, const float *dout,    \
                                 const float *inp, const float *w, int N, int IC, int OC,    \
                                 int precision);                                             \
    void attention_forward##SUFFIX(float *out, float *att, const float *qkv, int B, int T,   \
                                   int C, int NH);                                           \
    void attention_probs_forward##SUFFIX(float *att, const float *qkv, int B, int T, int C,  \
                                         int NH);                                            \
    void attention_block_forward##SUFFIX(float *out, float *lse, const float *qkv,           \
                                         const float *kv, int B, int T, int C, int NH,       \
                                         int q0, int k0, int n, int mask);                 \
    void attention_merge##SUFFIX(float *out, float *lse, const float *out_b,                 \
                                 const float *lse_b, int B, int T, int C, int NH, int q0,    \
                                 int n);                                                     \
    void attention_fused_backward##SUFFIX(float *dqkv, float *D, const float *dout,          \
                                          const float *qkv, const float *out,                \
                                          const float *lse, int B, int T, int C, int NH);    \
    void attention_row_dot##SUFFIX(float *D, const float *dout, const float *out, int B,     \
                                   int T, int C, int NH);                                    \
    void attention_block_backward##SUFFIX(float *dqkv, float *dkv, const float *dout,        \
                                          const float *qkv, const float *kv,                 \
                                          const float *lse, const float *D, int B, int T,    \
                                          int C, int NH, int q0, int k0, int n, int mask); \
    void copy_strided##SUFFIX(float *dst, int dst_stride, const float *src, int src_stride,  \
                              int rows, int cols, int accumulate);                           \
    void fill_value##SUFFIX(float *x, float value, size_t n);                                \
    void gelu_forward##SUFFIX(float *out, const float *inp, size_t n);                       \
    void gelu_backward##SUFFIX(float *dinp, const float *inp, const float *dout, size_t n);  \
    void residual_forward##SUFFIX(float *out, const float *a, const float *b, size_t n);     \
    void residual_backward##SUFFIX(float *dinp, const float *dout, size_t n);                \
    float crossentropy_forward##SUFFIX(float *losses, float *probs, const float *logits,     \
                                       const int *targets, int N, int V);                    \
    void crossentropy_backward##SUFFIX(float *probs_to_dlogits, const int *targets,          \
                                       float dloss, int N, int V);                           \
    void vocab_embedding_forward##SUFFIX(float *out, const int *tokens, const float *wte,    \
                                         int first, int rows, int N, int C);                 \
    void vocab_embedding_backward##SUFFIX(float *dwte, const float *dout, const int *tokens, \
                                          int first, int rows, int N, int C);                \
    void position_forward##SUFFIX(float *out, const float *wpe, int first_row, int N, int T, \
                                  int C);                                                    \
    void position_backward##SUFFIX(float *dwpe, const float *dout, int B, int T, int C);     \
    void bias_forward##SUFFIX(float *out, const float *bias, int N, int OC);                 \
    void vocab_logits_max##SUFFIX(float *maxes, const float *logits, int N, int V,           \
                                  int valid);                                                \
    void vocab_target_logit##SUFFIX(float *out, const float *logits, const int *targets,     \
                                    int first, int N, int V);                                \
    void vocab_softmax_exp##SUFFIX(float *probs, float *sums, const float *logits,           \
                                   const float *maxes, int N, int V, int valid);             \
    float vocab_crossentropy_finish##SUFFIX(float *losses, float *probs, const float *sums,  \
                                            const float *maxes, const float *target_logits,  \
                                            int N, int V);                                   \
    void vocab_crossentropy_backward##SUFFIX(float *probs_to_dlogits, const int *targets,    \
                                             float dloss, int first, int N, int V);          \
    void adamw_update##SUFFIX(float *params, const float *grads, float *m, float *v,          \
                              size_t n, float lr, float beta1, float beta2, float eps,       \
                              float weight_decay, int t);                                    \
    double sum_squares##SUFFIX(const float *x, size_t n);                                    \
    void scale_inplace##SUFFIX(float *x, float s, size_t n);                                 \
    void add_inplace##SUFFIX(float *x, const float *y, size_t n);                            \
    void set_zero##SUFFIX(float *x, size_t n);                                               \
    void round_inplace##SUFFIX(float *x, size_t n, int precision);                           \
    void narrow_to_half##SUFFIX(uint16_t *dst, const float *src, size_t n, int precision);   \
    void widen_from_half##SUFFIX(float *dst, const uint16_t *src, size_t n, int precision);  \
    void quantize_int8##SUFFIX(void *packed, const float *x, size_t n);                      \
    void dequantize_int8##SUFFIX(float *x, const void *packed, size_t n, int accumulate);    \
    void scale_half_inplace##SUFFIX(uint16_t *x, float s, size_t n, int precision);          \
    void add_half_inplace##SUFFIX(uint16_t *x, const uint16_t *y, size_t n, int precision);  \
    double sum_squares_half##SUFFIX(const uint16_t *x, size_t n, int precision);             \
    void adamw_update_half##SUFFIX(float *params, const uint16_t *grads, float grad_scale,    \
                                   float *m, float *v, size_t n, int precision, float lr,    \
                                   float beta1, float beta2, float eps, float weight_decay,  \
                                   int t);                                                   \
    void sgemm_rowmajor##SUFFIX(int trans_a, int trans_b, int M, int N, int K, float alpha,  \
                                const float *A, int lda, const float *Bm, int ldb,           \
                                float beta, float *Cm, int ldc);                            \
    void gather_rows##SUFFIX(float *dst, const float *src, const int *idx,                   \
                             const float *weight, int n, int C);                             \
    void gather_sum_rows##SUFFIX(float *dst, const float *src, const int *slots,             \
                                 const float *weight, int N, int k, int C, int accumulate);  \
    void gather_row_dot##SUFFIX(float *out, const float *a, const float *b, const int *idx,  \
                                int n, int C);                                               \
    void softmax_rows_forward##SUFFIX(float *probs, const float *logits, int N, int E);      \
    void softmax_rows_backward##SUFFIX(float *dprobs_to_dlogits, const float *probs, int N,  \
                                       int E);

DECLARE_KERNELS(_cpu)
DECLARE_KERNELS(_cuda)
void layernorm_backward_cuda(float *dinp, float *dw, float *db, const float *dout,
                             const float *inp, const float *w, const float *mean,
                             const float *rstd, int N, int C);
void attention_backward_cuda(float *dqkv, float *datt, const float *dout, const float *qkv,
                             const float *att, int B, int T, int C, int NH);
void attention_fused_forward_cuda(float *out, float *lse, const float *qkv, int B, int T, int C,
                                  int NH);

/* Multiply-adds (M N K per call) sgemm_rowmajor_cpu has done since the
 * program started, over all threads: the arithmetic a pass asks of the
 * GEMMs, counted exactly where its timing is noise (gradcheck --time). */
unsigned long long sgemm_madds_cpu(void);

/* GEMMs in TF32 on tensor cores (Ampere and newer) instead of full fp32:
 * about 8x the throughput for a 10-bit mantissa in the products. Off by
 * default so GPU runs match the CPU baseline; KIT_TF32=1 turns it on. */
void kernels_cuda_set_tf32(int on);

#ifdef __cplusplus
}
#endif

#endif
