/* kernels.c: each kernel of kernels.h runs on the backend of the current
 * device (device.h). The backends share signatures (kernels_backend.h), so
 * picking one is picking a function: BACKEND(gelu_forward) is gelu_forward_cuda
 * when the process runs on a GPU, gelu_forward_cpu otherwise. A build without
 * CUDA (no KIT_CUDA) has only the CPU backend, and device.c never selects
 * another.
 *
 * KERNEL(name, args...) calls the kernel between device_kernel_begin() and
 * device_kernel_end() (device.h): two empty calls in a real build, the
 * moments when the pretend GPU of tests/fake_gpu lets the host touch its
 * memory. The two kernels that return a value do the same by hand. */
#include "kernels.h"

#include "device.h"
#include "kernels_backend.h"

#ifdef KIT_CUDA
#define BACKEND(name) (device_current() == DEVICE_CUDA ? name##_cuda : name##_cpu)
#else
#define BACKEND(name) name##_cpu
#endif

#define KERNEL(name, ...)           \
    do {                            \
        device_kernel_begin();      \
        BACKEND(name)(__VA_ARGS__); \
        device_kernel_end();        \
    } while (0)

void encoder_forward(float *out, const int *tokens, const float *wte, const float *wpe,
                     int B, int T, int C) {
    KERNEL(encoder_forward, out, tokens, wte, wpe, B, T, C);
}

void encoder_backward(float *dwte, float *dwpe, const float *dout, const int *tokens,
                      int B, int T, int C) {
    KERNEL(encoder_backward, dwte, dwpe, dout, tokens, B, T, C);
}

void layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                       const float *w, const float *b, int N, int C) {
    KERNEL(layernorm_forward, out, mean, rstd, inp, w, b, N, C);
}

void layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                        const float *inp, const float *w, const float *mean,
                        const float *rstd, int N, int C) {
    KERNEL(layernorm_backward, dinp, dw, db, dout, inp, w, mean, rstd, N, C);
}

void matmul_forward(float *out, const float *inp, const float *w, const float *bias,
                    int N, int IC, int OC) {
    KERNEL(matmul_forward, out, inp, w, bias, N, IC, OC);
}

void matmul_backward(float *dinp, float *dw, float *dbias, const float *dout,
                     const float *inp, const float *w, int N, int IC, int OC) {
    KERNEL(matmul_backward, dinp, dw, dbias, dout, inp, w, N, IC, OC);
}

void attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH) {
    KERNEL(attention_forward, out, att, qkv, B, T, C, NH);
}

void attention_backward(float *dqkv, float *datt, const float *dout, const float *qkv,
                        const float *att, int B, int T, int C, int NH) {
    KERNEL(attention_backward, dqkv, datt, dout, qkv, att, B, T, C, NH);
}

void gelu_forward(float *out, const float *inp, size_t n) { KERNEL(gelu_forward, out, inp, n); }

void gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    KERNEL(gelu_backward, dinp, inp, dout, n);
}

void residual_forward(float *out, const float *a, const float *b, size_t n) {
    KERNEL(residual_forward, out, a, b, n);
}

void residual_backward(float *dinp, const float *dout, size_t n) {
    KERNEL(residual_backward, dinp, dout, n);
}

float crossentropy_forward(float *losses, float *probs, const float *logits,
                           const int *targets, int N, int V) {
    device_kernel_begin();
    float loss = BACKEND(crossentropy_forward)(losses, probs, logits, targets, N, V);
    device_kernel_end();
    return loss;
}

void crossentropy_backward(float *probs_to_dlogits, const int *targets, float dloss,
                           int N, int V) {
    KERNEL(crossentropy_backward, probs_to_dlogits, targets, dloss, N, V);
}

void adamw_update(float *params, const float *grads, float *m, float *v, size_t n,
                  float lr, float beta1, float beta2, float eps, float weight_decay, int t) {
    KERNEL(adamw_update, params, grads, m, v, n, lr, beta1, beta2, eps, weight_decay, t);
}

double sum_squares(const float *x, size_t n) {
    device_kernel_begin();
    double sum = BACKEND(sum_squares)(x, n);
    device_kernel_end();
    return sum;
}
void scale_inplace(float *x, float s, size_t n) { KERNEL(scale_inplace, x, s, n); }
void add_inplace(float *x, const float *y, size_t n) { KERNEL(add_inplace, x, y, n); }
void set_zero(float *x, size_t n) { KERNEL(set_zero, x, n); }

void sgemm_rowmajor(int trans_a, int trans_b, int M, int N, int K, float alpha,
                    const float *A, int lda, const float *Bm, int ldb, float beta,
                    float *Cm, int ldc) {
    KERNEL(sgemm_rowmajor, trans_a, trans_b, M, N, K, alpha, A, lda, Bm, ldb, beta, Cm, ldc);
}
