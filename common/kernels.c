/* kernels.c: each kernel of kernels.h runs on the backend of the current
 * device (device.h). The backends share signatures (kernels_backend.h), so
 * picking one is picking a function: BACKEND(gelu_forward) is gelu_forward_cuda
 * when the process runs on a GPU, gelu_forward_cpu otherwise. A build without
 * CUDA (no KIT_CUDA) has only the CPU backend, and device.c never selects
 * another. */
#include "kernels.h"

#include "device.h"
#include "kernels_backend.h"

#ifdef KIT_CUDA
#define BACKEND(name) (device_current() == DEVICE_CUDA ? name##_cuda : name##_cpu)
#else
#define BACKEND(name) name##_cpu
#endif

void encoder_forward(float *out, const int *tokens, const float *wte, const float *wpe,
                     int B, int T, int C) {
    BACKEND(encoder_forward)(out, tokens, wte, wpe, B, T, C);
}

void encoder_backward(float *dwte, float *dwpe, const float *dout, const int *tokens,
                      int B, int T, int C) {
    BACKEND(encoder_backward)(dwte, dwpe, dout, tokens, B, T, C);
}

void layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                       const float *w, const float *b, int N, int C) {
    BACKEND(layernorm_forward)(out, mean, rstd, inp, w, b, N, C);
}

void layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                        const float *inp, const float *w, const float *mean,
                        const float *rstd, int N, int C) {
    BACKEND(layernorm_backward)(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
}

void matmul_forward(float *out, const float *inp, const float *w, const float *bias,
                    int N, int IC, int OC) {
    BACKEND(matmul_forward)(out, inp, w, bias, N, IC, OC);
}

void matmul_backward(float *dinp, float *dw, float *dbias, const float *dout,
                     const float *inp, const float *w, int N, int IC, int OC) {
    BACKEND(matmul_backward)(dinp, dw, dbias, dout, inp, w, N, IC, OC);
}

void attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH) {
    BACKEND(attention_forward)(out, att, qkv, B, T, C, NH);
}

void attention_backward(float *dqkv, float *datt, const float *dout, const float *qkv,
                        const float *att, int B, int T, int C, int NH) {
    BACKEND(attention_backward)(dqkv, datt, dout, qkv, att, B, T, C, NH);
}

void gelu_forward(float *out, const float *inp, size_t n) { BACKEND(gelu_forward)(out, inp, n); }

void gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    BACKEND(gelu_backward)(dinp, inp, dout, n);
}

void residual_forward(float *out, const float *a, const float *b, size_t n) {
    BACKEND(residual_forward)(out, a, b, n);
}

void residual_backward(float *dinp, const float *dout, size_t n) {
    BACKEND(residual_backward)(dinp, dout, n);
}

float crossentropy_forward(float *losses, float *probs, const float *logits,
                           const int *targets, int N, int V) {
    return BACKEND(crossentropy_forward)(losses, probs, logits, targets, N, V);
}

void crossentropy_backward(float *probs_to_dlogits, const int *targets, float dloss,
                           int N, int V) {
    BACKEND(crossentropy_backward)(probs_to_dlogits, targets, dloss, N, V);
}

void adamw_update(float *params, const float *grads, float *m, float *v, size_t n,
                  float lr, float beta1, float beta2, float eps, float weight_decay, int t) {
    BACKEND(adamw_update)(params, grads, m, v, n, lr, beta1, beta2, eps, weight_decay, t);
}

double sum_squares(const float *x, size_t n) { return BACKEND(sum_squares)(x, n); }
void scale_inplace(float *x, float s, size_t n) { BACKEND(scale_inplace)(x, s, n); }
void add_inplace(float *x, const float *y, size_t n) { BACKEND(add_inplace)(x, y, n); }
void set_zero(float *x, size_t n) { BACKEND(set_zero)(x, n); }

void sgemm_rowmajor(int trans_a, int trans_b, int M, int N, int K, float alpha,
                    const float *A, int lda, const float *Bm, int ldb, float beta,
                    float *Cm, int ldc) {
    BACKEND(sgemm_rowmajor)(trans_a, trans_b, M, N, K, alpha, A, lda, Bm, ldb, beta, Cm, ldc);
}
