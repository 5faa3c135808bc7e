/* Fused attention (kernels.h; the forward pass lab 05's, handed over as the
 * trainers do) against lab 00's materialized attention on the same qkv: the
 * output, each row's log-sum-exp (in double, from the scores), and the
 * backward pass's dq, dk, dv, at lengths around the tiles' 128 queries and
 * 256 keys (one tile, a partial last one, several) and with scores large
 * enough that a later key tile raises a row's max by far: the case an
 * online softmax that forgets to rescale its running sum gets wrong. Skips
 * (77) in a build without lab 05's solution. */
#include <math.h>
#include <stdlib.h>

#include "backward_kernels.h"
#include "fused_attention_ops.h"
#include "kernels.h"
#include "rng.h"
#include "unit.h"

static float *randn(size_t n, uint32_t tag, float scale) {
    float *x = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = scale * rng_normal(11, RNG_STREAM_TEST, i, tag);
    return x;
}

/* max |a - b| / (1 + |b|) over n, NaN counted as infinite */
static double max_rel(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        const double e = fabs((double)a[i] - b[i]) / (1.0 + fabs(b[i]));
        m = fmax(m, isfinite(e) ? e : INFINITY);
    }
    return m;
}

/* qkv's scale grows the scores (their spread ~ scale^2 sqrt(hs)) */
static void check_shape(int B, int T, int C, int NH, float scale) {
    const int hs = C / NH;
    const size_t n3 = (size_t)B * T * 3 * C, n1 = (size_t)B * T * C, nr = (size_t)B * NH * T;
    float *qkv = randn(n3, 1, scale), *dout = randn(n1, 2, 1.0f);
    float *out = calloc(n1, 4), *att = calloc(nr * T, 4), *datt = calloc(nr * T, 4);
    float *dqkv = calloc(n3, 4), *fout = calloc(n1, 4), *lse = calloc(nr, 4);
    float *D = calloc(nr, 4), *fdqkv = calloc(n3, 4), *lse_ref = calloc(nr, 4);
    attention_forward(out, att, qkv, B, T, C, NH);
    attention_backward(dqkv, datt, dout, qkv, att, B, T, C, NH);
    attention_fused_forward(fout, lse, qkv, B, T, C, NH);
    attention_fused_backward(fdqkv, D, dout, qkv, fout, lse, B, T, C, NH);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float *q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
                double m = -INFINITY, sum = 0, *s = malloc((t + 1) * sizeof(double));
                for (int j = 0; j <= t; j++) {
                    const float *k = qkv + ((size_t)b * T + j) * 3 * C + C + h * hs;
                    s[j] = 0;
                    for (int d = 0; d < hs; d++) s[j] += (double)q[d] * k[d];
                    m = fmax(m, s[j] /= sqrt((double)hs));
                }
                for (int j = 0; j <= t; j++) sum += exp(s[j] - m);
                lse_ref[((size_t)b * NH + h) * T + t] = (float)(m + log(sum));
                free(s);
            }
    const double e_out = max_rel(fout, out, n1), e_lse = max_rel(lse, lse_ref, nr);
    const double e_grad = max_rel(fdqkv, dqkv, n3);
    EXPECT(e_out < 1e-4, "B %d T %d C %d NH %d scale %g: output off by %.3g", B, T, C, NH, scale,
           e_out);
    EXPECT(e_lse < 2e-5, "B %d T %d C %d NH %d scale %g: lse off by %.3g", B, T, C, NH, scale,
           e_lse);
    EXPECT(e_grad < 5e-4, "B %d T %d C %d NH %d scale %g: dqkv off by %.3g", B, T, C, NH, scale,
           e_grad);
    printf("  B %d T %3d C %3d NH %d scale %4.1f: output %.2g, lse %.2g, dqkv %.2g\n", B, T, C, NH,
           scale, e_out, e_lse, e_grad);
    free(qkv), free(dout), free(out), free(att), free(datt), free(dqkv), free(fout), free(lse);
    free(D), free(fdqkv), free(lse_ref);
}

int main(void) {
    if (!program_fused_attention()) {
        printf("test_fused_attention: skipped: this build has no fused attention (lab 05)\n");
        return 77;
    }
    kernels_set_cpu_backward(program_backward_kernels());
    kernels_set_cpu_fused_forward(program_fused_attention());
    const int T[] = {1, 127, 128, 129, 300};
    for (size_t i = 0; i < sizeof T / sizeof *T; i++) check_shape(2, T[i], 64, 4, 1.0f);
    check_shape(1, 257, 96, 3, 1.0f);
    check_shape(1, 600, 32, 2, 3.0f);  /* scores spread over tens: the max moves by far */
    return unit_report("test_fused_attention");
}
