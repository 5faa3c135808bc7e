/* precision.h's rounding of fp32 into bf16 and fp16, on all 2^32 fp32 bit
 * patterns against rules written another way (apps/precision_rules.h, the
 * same rules lab 11's check_precision holds a student's conversions to).
 * Then widening every 2-byte pattern back is exact (bf16: the 16 bits
 * shifted; fp16: _Float16's widening), and narrowing a widened value gives
 * it back. Last, the CPU kernels of mixed precision (kernels_backend.h: one
 * vectorized loop per format) against precision.h on every 251st fp32
 * pattern and every 2-byte one, and half_gemm.h's GEMMs (each transpose, C
 * written and accumulated) against sums in double of the rounded inputs. */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "half_gemm.h"
#include "kernels_backend.h"
#include "precision.h"
#include "precision_rules.h"
#include "unit.h"

#define from_bits rules_from_bits

PRECISION_SWEEP(sweep_precision_h, float_to_bf16, float_to_fp16)

/* round_inplace_cpu, narrow_to_half_cpu, widen_from_half_cpu and
 * scale_half_inplace_cpu give precision.h's values, bit for bit (a NaN: a
 * NaN) */
static void check_kernels(void) {
    enum { STRIDE = 251 };
    const size_t n = (size_t)(UINT32_MAX / STRIDE) + 1;
    float *x = malloc(n * sizeof(float)), *r = malloc(n * sizeof(float));
    uint16_t *h = malloc(n * sizeof(uint16_t)), *all = malloc(65536 * sizeof(uint16_t));
    float *wide = malloc(65536 * sizeof(float));
    EXPECT(x && r && h && all && wide, "out of memory");
    for (size_t i = 0; i < n; i++) x[i] = from_bits((uint32_t)(i * STRIDE));
    for (uint32_t i = 0; i < 65536; i++) all[i] = (uint16_t)i;
    for (int p = PRECISION_BF16; p <= PRECISION_FP16; p++) {
        long bad = 0;
        memcpy(r, x, n * sizeof(float));
        round_inplace_cpu(r, n, p);
        narrow_to_half_cpu(h, x, n, p);
#pragma omp parallel for schedule(static) reduction(+ : bad)
        for (size_t i = 0; i < n; i++) {
            const float want = round_to_precision(x[i], p);
            const uint16_t bits = float_to_half(x[i], p);
            if (isnan(want)) bad += !isnan(r[i]) || !isnan(half_to_float(h[i], p));
            else bad += float_bits(r[i]) != float_bits(want) || h[i] != bits;
        }
        widen_from_half_cpu(wide, all, 65536, p);
        for (uint32_t i = 0; i < 65536; i++) {
            const float want = half_to_float((uint16_t)i, p);
            bad += isnan(want) ? !isnan(wide[i]) : float_bits(wide[i]) != float_bits(want);
        }
        /* every 2-byte value times factors that round, overflow and underflow */
        static const float factors[] = {1.0f / 3, 0.5f, 3.0f, 1e-3f, 7e4f};
        for (int f = 0; f < 5; f++) {
            for (uint32_t i = 0; i < 65536; i++) all[i] = (uint16_t)i;
            scale_half_inplace_cpu(all, factors[f], 65536, p);
            for (uint32_t i = 0; i < 65536; i++) {
                const float want = half_to_float(float_to_half(half_to_float((uint16_t)i, p) *
                                                               factors[f], p), p);
                const float got = half_to_float(all[i], p);
                bad += isnan(want) ? !isnan(got) : float_bits(got) != float_bits(want);
            }
        }
        for (uint32_t i = 0; i < 65536; i++) all[i] = (uint16_t)i;
        EXPECT(bad == 0, "%s: %ld values of the CPU kernels differ from precision.h's",
               precision_name((Precision)p), bad);
    }
    free(x), free(r), free(h), free(all), free(wide);
}

/* C = op(A) op(B) + beta C for odd shapes: within fp32's summation error
 * of the exact sum of the rounded inputs' products, K 2^-24 sum |a b| */
static void check_half_gemm(void) {
    enum { M = 37, N = 29, K = 53 };
    static float A[M * K], B[K * N], C[M * N], C0[M * N];
    unsigned s = 12345;
    for (int i = 0; i < M * K; i++) A[i] = (float)((s = s * 1103515245u + 12345u) >> 8) / 16777216.0f - 0.5f;
    for (int i = 0; i < K * N; i++) B[i] = (float)((s = s * 1103515245u + 12345u) >> 8) / 16777216.0f - 0.5f;
    for (int i = 0; i < M * N; i++) C0[i] = (float)i / (M * N);
    for (int p = PRECISION_BF16; p <= PRECISION_FP16; p++)
        for (int t = 0; t < 8; t++) {
            const int ta = t & 1, tb = (t >> 1) & 1, acc = t >> 2;
            memcpy(C, C0, sizeof C);
            half_gemm(p, ta, tb, M, N, K, A, B, acc ? 1.0f : 0.0f, C);
            double worst = 0.0;
            for (int i = 0; i < M; i++)
                for (int j = 0; j < N; j++) {
                    double sum = acc ? C0[i * N + j] : 0.0, mag = fabs(sum);
                    for (int k = 0; k < K; k++) {
                        const double a = round_to_precision(ta ? A[k * M + i] : A[i * K + k], p);
                        const double b = round_to_precision(tb ? B[j * K + k] : B[k * N + j], p);
                        sum += a * b, mag += fabs(a * b);
                    }
                    const double err = fabs(C[i * N + j] - sum) / (mag * K * 0x1p-24 + 1e-30);
                    if (err > worst) worst = err;
                }
            EXPECT(worst <= 1.0, "half_gemm %s (%s, trans %d %d, beta %d): %.3g times the bound",
                   precision_name((Precision)p), half_gemm_backend(p), ta, tb, acc, worst);
        }
}

int main(void) {
    const PrecisionSweep s = sweep_precision_h();
    EXPECT(s.bad_bf16 == 0, "%ld fp32 values +-x round to the wrong bf16, e.g. 0x%08x -> 0x%04x",
           s.bad_bf16, s.first_bf16, float_to_bf16(from_bits(s.first_bf16)));
    EXPECT(s.bad_fp16 == 0, "%ld fp32 values +-x round to the wrong fp16, e.g. 0x%08x -> 0x%04x",
           s.bad_fp16, s.first_fp16, float_to_fp16(from_bits(s.first_fp16)));

    /* widening is exact, and narrowing gives the pattern back (NaN: a NaN) */
    int bad_wide = 0;
    for (uint32_t p = 0; p <= 0xFFFFu; p++) {
        const uint16_t h = (uint16_t)p;
        _Float16 ref;
        memcpy(&ref, &h, sizeof ref);
        const float wf = fp16_to_float(h), wb = bf16_to_float(h);
        uint32_t wb_bits;
        memcpy(&wb_bits, &wb, sizeof wb_bits);
        if (fp16_is_nan(h)) bad_wide += !isnan(wf) || !fp16_is_nan(float_to_fp16(wf));
        else bad_wide += wf != (float)ref || float_to_fp16(wf) != h;
        if (bf16_is_nan(h)) bad_wide += !isnan(wb) || !bf16_is_nan(float_to_bf16(wb));
        else bad_wide += wb_bits != p << 16 || float_to_bf16(wb) != h;
    }
    EXPECT(bad_wide == 0, "%d 2-byte patterns widen or come back wrong", bad_wide);

    check_kernels();
    check_half_gemm();

    /* the table's landmarks */
    EXPECT(fp16_to_float(float_to_fp16(65504.0f)) == 65504.0f, "fp16's largest finite value");
    EXPECT(float_to_fp16(65520.0f) == 0x7C00u, "65520 rounds to infinity (a tie, to even)");
    EXPECT(float_to_fp16(65519.996f) == 0x7BFFu, "just below 65520: 65504");
    EXPECT(float_to_fp16(0x1p-24f) == 0x0001u, "fp16's smallest subnormal");
    EXPECT(float_to_fp16(0x1p-25f) == 0x0000u, "2^-25: a tie between 0 and 2^-24, to the even 0");
    EXPECT(float_to_fp16(0x1.8p-25f) == 0x0001u, "1.5 2^-25 rounds up to 2^-24");
    EXPECT(float_to_bf16(1.0f + 0x1p-8f) == 0x3F80u, "1 + 2^-8: a tie, to the even 1");
    EXPECT(float_to_bf16(1.0f + 0x1.8p-8f) == 0x3F81u, "1 + 1.5 2^-8 rounds up");
    EXPECT(float_to_bf16(3.4028235e38f) == 0x7F80u, "fp32's largest value rounds to bf16's infinity");
    return unit_report("test_precision");
}
