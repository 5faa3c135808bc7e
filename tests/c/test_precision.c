/* precision.h's rounding of fp32 into bf16 and fp16, on all 2^32 fp32 bit
 * patterns: the 2^31 non-negative ones against rules written another way,
 * each negative one against its positive twin (the sign bit set):
 *   bf16: the two bf16 neighbours of x, their exact distances to x in
 *         double, the nearer (the even one at a tie); past the largest
 *         finite value, the next one up is 2^128 (infinity);
 *   fp16: the compiler's _Float16 conversion (libgcc's routine, or F16C's
 *         vcvtps2ph under -march=native), round to nearest even too;
 * NaN must stay NaN with its sign, whatever the payload. Then widening
 * every 2-byte pattern back is exact (bf16: the 16 bits shifted; fp16:
 * _Float16's widening), and narrowing a widened value gives it back. The
 * sweep runs on OpenMP threads: a few seconds. */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "precision.h"
#include "unit.h"

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static int bf16_is_nan(uint16_t h) { return (h & 0x7F80u) == 0x7F80u && (h & 0x7Fu); }
static int fp16_is_nan(uint16_t h) { return (h & 0x7C00u) == 0x7C00u && (h & 0x3FFu); }

/* ULP[E]: the spacing of bf16 values whose exponent field is E (E = 0,
 * the subnormals, spaced like E = 1) */
static double ULP[256];

/* The bf16 nearest x (finite, not NaN), by distances: lo is x with its low
 * 16 bits cleared (toward zero), hi the next bf16 away from zero */
static uint16_t bf16_by_distance(uint32_t u) {
    const uint16_t lo = (uint16_t)(u >> 16), sign = lo & 0x8000u;
    const double x = fabs((double)from_bits(u));
    const double vlo = fabs((double)from_bits((uint32_t)lo << 16));
    const double dlo = x - vlo, dhi = vlo + ULP[(lo >> 7) & 0xFFu] - x;
    if (dlo < dhi || (dlo == dhi && !(lo & 1u))) return lo;
    const uint16_t hi = (uint16_t)(lo + 1u);  /* 0x7F7F + 1 = 0x7F80: infinity */
    return (uint16_t)(hi | sign);
}

int main(void) {
    for (int e = 0; e < 256; e++) ULP[e] = ldexp(1.0, (e ? e : 1) - 127 - 7);
    long bad_bf16 = 0, bad_fp16 = 0;
    uint32_t first_bf16 = 0, first_fp16 = 0;
    /* the rules on the 2^31 non-negative patterns; each negative one must
     * round to its positive twin with the sign bit set (NaN: a NaN with it) */
#pragma omp parallel for schedule(static) reduction(+ : bad_bf16, bad_fp16)
    for (int64_t i = 0; i <= (int64_t)INT32_MAX; i++) {
        const uint32_t u = (uint32_t)i;
        const float x = from_bits(u), neg = from_bits(u | 0x80000000u);
        const uint16_t b = float_to_bf16(x), h = float_to_fp16(x);
        const uint16_t nb = float_to_bf16(neg), nh = float_to_fp16(neg);
        int ok_b, ok_h;
        if (isnan(x)) {
            ok_b = bf16_is_nan(b) && !(b >> 15) && bf16_is_nan(nb) && (nb >> 15);
            ok_h = fp16_is_nan(h) && !(h >> 15) && fp16_is_nan(nh) && (nh >> 15);
        } else {
            ok_b = (isinf(x) ? b == (uint16_t)(u >> 16) : b == bf16_by_distance(u)) &&
                   nb == (b | 0x8000u);
            _Float16 ref = (_Float16)x;
            uint16_t r;
            memcpy(&r, &ref, sizeof r);
            ok_h = h == r && nh == (h | 0x8000u);
        }
        if (!ok_b && bad_bf16++ == 0) first_bf16 = u;  /* one of the first, racy but fine */
        if (!ok_h && bad_fp16++ == 0) first_fp16 = u;
    }
    EXPECT(bad_bf16 == 0, "%ld fp32 values +-x round to the wrong bf16, e.g. 0x%08x -> 0x%04x", bad_bf16,
           first_bf16, float_to_bf16(from_bits(first_bf16)));
    EXPECT(bad_fp16 == 0, "%ld fp32 values +-x round to the wrong fp16, e.g. 0x%08x -> 0x%04x", bad_fp16,
           first_fp16, float_to_fp16(from_bits(first_fp16)));

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
