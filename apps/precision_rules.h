/* precision_rules.h: fp32 -> bf16 and fp32 -> fp16 rounding checked on all
 * 2^32 fp32 bit patterns against rules written another way than the
 * conversions under test (precision.h's, in tests/c/test_precision.c; a
 * student's, in apps/check_precision.c, lab 11):
 *   bf16: the two bf16 neighbours of x, their exact distances to x in
 *         double, the nearer (the even one at a tie); past the largest
 *         finite value, the next one up is 2^128 (infinity);
 *   fp16: the compiler's _Float16 conversion (libgcc's routine, or F16C's
 *         vcvtps2ph under -march=native), round to nearest even too;
 * NaN must stay NaN with its sign, whatever the payload; each negative
 * pattern must round to its positive twin with the sign bit set. The
 * sweep runs on OpenMP threads: a few seconds.
 *
 * PRECISION_SWEEP(name, to_bf16, to_fp16) defines
 *   static PrecisionSweep name(void)
 * sweeping the two functions given (as a macro, so that they inline). */
#ifndef PRECISION_RULES_H
#define PRECISION_RULES_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float rules_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline int bf16_is_nan(uint16_t h) { return (h & 0x7F80u) == 0x7F80u && (h & 0x7Fu); }
static inline int fp16_is_nan(uint16_t h) { return (h & 0x7C00u) == 0x7C00u && (h & 0x3FFu); }

/* The bf16 nearest x (finite, not NaN), by distances: lo is x with its low
 * 16 bits cleared (toward zero), hi the next bf16 away from zero, whose
 * distance from lo is the spacing of lo's binade, 2^(E - 127 - 7) for its
 * exponent field E (E = 0, the subnormals, spaced like E = 1) */
static inline uint16_t bf16_by_distance(uint32_t u) {
    const uint16_t lo = (uint16_t)(u >> 16), sign = lo & 0x8000u;
    const int E = (lo >> 7) & 0xFF;
    const uint64_t spacing_bits = (uint64_t)((E ? E : 1) - 127 - 7 + 1023) << 52;  /* 2^(E-134) */
    double spacing;
    memcpy(&spacing, &spacing_bits, sizeof spacing);
    const double x = fabs((double)rules_from_bits(u));
    const double vlo = fabs((double)rules_from_bits((uint32_t)lo << 16));
    const double dlo = x - vlo, dhi = vlo + spacing - x;
    if (dlo < dhi || (dlo == dhi && !(lo & 1u))) return lo;
    const uint16_t hi = (uint16_t)(lo + 1u);  /* 0x7F7F + 1 = 0x7F80: infinity */
    return (uint16_t)(hi | sign);
}

static inline uint16_t fp16_by_compiler(float x) {
    const _Float16 h = (_Float16)x;
    uint16_t r;
    memcpy(&r, &h, sizeof r);
    return r;
}

/* How many of the 2^31 pairs +-x a sweep found wrong, and one of the
 * first (racy among threads, but a real one) */
typedef struct {
    long bad_bf16, bad_fp16;
    uint32_t first_bf16, first_fp16;
} PrecisionSweep;

#define PRECISION_SWEEP(name, to_bf16, to_fp16)                                                  \
    static PrecisionSweep name(void) {                                                           \
        long bad_b = 0, bad_h = 0;                                                               \
        uint32_t first_b = 0, first_h = 0;                                                       \
        _Pragma("omp parallel for schedule(static) reduction(+ : bad_b, bad_h)")                 \
        for (int64_t i = 0; i <= (int64_t)INT32_MAX; i++) {                                      \
            const uint32_t u = (uint32_t)i;                                                      \
            const float x = rules_from_bits(u), neg = rules_from_bits(u | 0x80000000u);          \
            const uint16_t b = to_bf16(x), h = to_fp16(x), nb = to_bf16(neg), nh = to_fp16(neg); \
            int ok_b, ok_h;                                                                      \
            if (isnan(x)) {                                                                      \
                ok_b = bf16_is_nan(b) && !(b >> 15) && bf16_is_nan(nb) && (nb >> 15);            \
                ok_h = fp16_is_nan(h) && !(h >> 15) && fp16_is_nan(nh) && (nh >> 15);            \
            } else {                                                                             \
                ok_b = (isinf(x) ? b == (uint16_t)(u >> 16) : b == bf16_by_distance(u)) &&       \
                       nb == (b | 0x8000u);                                                      \
                ok_h = h == fp16_by_compiler(x) && nh == (h | 0x8000u);                          \
            }                                                                                    \
            if (!ok_b && bad_b++ == 0) first_b = u;                                              \
            if (!ok_h && bad_h++ == 0) first_h = u;                                              \
        }                                                                                        \
        return (PrecisionSweep){bad_b, bad_h, first_b, first_h};                                 \
    }

#endif
