/* precision.h: the 2-byte number formats of mixed precision, and rounding
 * fp32 into them, written once for the CPU and the GPU (HD, as in
 * math_shared.h: the CPU tests check the arithmetic the GPU runs).
 *
 *            sign  exponent  mantissa  largest finite   smallest normal  unit roundoff
 *   fp32       1      8         23     3.40e38          1.18e-38         2^-24 = 6.0e-8
 *   bf16       1      8          7     3.39e38          1.18e-38         2^-8  = 3.9e-3
 *   fp16       1      5         10     65504            6.10e-5          2^-11 = 4.9e-4
 *
 * bf16 is fp32 with the low 16 mantissa bits dropped: the same range, so
 * gradients neither overflow nor underflow where fp32's do not, and
 * widening back is a shift. fp16 keeps 3 more mantissa bits but a range
 * of 2^-24 (its smallest subnormal) to 65504: small gradients flush to
 * zero and large activations overflow, hence loss scaling.
 *
 * Rounding is IEEE 754's default, to nearest with ties to even: of the two
 * neighbours of x in the format, the nearer; at a tie, the one whose last
 * mantissa bit is 0. Values at or past the largest finite value plus half
 * an ulp become infinity, fp32's infinities stay infinite, NaN stays NaN
 * (made quiet, sign kept), and below fp16's normal range the result is a
 * subnormal, rounded the same way, or zero. Widening (2 bytes -> fp32) is
 * exact. tests/c/test_precision.c checks all 2^32 fp32 bit patterns
 * against rules written differently (exact distances in double for bf16,
 * the compiler's _Float16 for fp16).
 */
#ifndef PRECISION_H
#define PRECISION_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "math_shared.h"

/* What a run stores its compute weights, saved activations and activation
 * gradients in (--precision; model.h says where it rounds): fp32 is the
 * kit's original trainer, bit for bit; bf16 and fp16 are mixed precision,
 * with fp32 master weights, moments, statistics and loss. */
typedef enum { PRECISION_FP32, PRECISION_BF16, PRECISION_FP16, PRECISION_NUM } Precision;

static inline const char *precision_name(Precision p) {
    static const char *const names[PRECISION_NUM] = {"fp32", "bf16", "fp16"};
    return p >= 0 && p < PRECISION_NUM ? names[p] : "?";
}
/* 0 and *p set, or -1 for a name that is none of them */
static inline int precision_parse(const char *name, Precision *p) {
    for (int i = 0; i < PRECISION_NUM; i++)
        if (strcmp(name, precision_name((Precision)i)) == 0) {
            *p = (Precision)i;
            return 0;
        }
    return -1;
}
/* bytes of one stored element */
static inline size_t precision_bytes(Precision p) { return p == PRECISION_FP32 ? 4 : 2; }

/* fp32 -> bf16: keep the top 16 bits, rounded. Adding 0x7FFF plus the
 * last kept bit carries into the kept bits exactly when the dropped ones
 * are above half, or at half with the last kept bit odd; a carry out of
 * the mantissa raises the exponent, and out of the largest finite value
 * gives infinity (0x7F80), as it should. */
static inline HD uint16_t float_to_bf16(float x) {
    uint32_t u = (uint32_t)float_bits(x);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u)
        return (uint16_t)((u >> 16) | 0x0040u); /* NaN: quiet, sign and top payload kept */
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline HD float bf16_to_float(uint16_t h) { return bits_float((int)((uint32_t)h << 16)); }

/* fp32 -> fp16. With e the fp32 biased exponent (bias 127) and m the
 * 24-bit significand (the implicit 1 included), |x| = m 2^(e - 150):
 *   |x| >= 65520 (65504 + half an ulp of 32): infinity;
 *   |x| >= 2^-14: normal, exponent e - 112 (bias 15), mantissa m's top 10
 *       fraction bits rounded on the 13 dropped (a carry may raise the
 *       exponent; it cannot reach infinity below 65520);
 *   below: subnormal k 2^-24 with k = m 2^(e - 126) rounded, shift
 *       126 - e >= 14 (k = 1024 is the smallest normal, bits 0x0400:
 *       right); 2^-25 and below round to zero (at 2^-25 exactly, a tie,
 *       to the even 0). */
static inline HD uint16_t float_to_fp16(float x) {
    const uint32_t u = (uint32_t)float_bits(x);
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    const uint32_t a = u & 0x7FFFFFFFu, e = a >> 23;
    if (a > 0x7F800000u) return (uint16_t)(sign | 0x7E00u | ((a >> 13) & 0x3FFu)); /* NaN */
    if (a >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u); /* infinity, or rounds to it */
    if (a >= 0x38800000u) {                                  /* normal */
        uint32_t h = ((e - 112u) << 10) | ((a & 0x7FFFFFu) >> 13);
        const uint32_t rest = a & 0x1FFFu;
        if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++;
        return (uint16_t)(sign | h);
    }
    if (e < 102u) return sign; /* below 2^-25: nearer to 0 than to 2^-24 */
    const uint32_t m = (a & 0x7FFFFFu) | 0x800000u, shift = 126u - e;
    uint32_t k = m >> shift;
    const uint32_t rest = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rest > half || (rest == half && (k & 1u))) k++;
    return (uint16_t)(sign | k);
}

/* fp16 -> fp32, exact: infinities and NaN (payload kept) map to fp32's,
 * subnormals k 2^-24 become normal fp32 values */
static inline HD float fp16_to_float(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
    if (e == 0x1Fu) return bits_float((int)(sign | 0x7F800000u | (m << 13)));
    if (e == 0u) {
        const float v = (float)m * 0x1p-24f; /* exact: m < 2^10 */
        return sign ? -v : v;
    }
    return bits_float((int)(sign | ((e + 112u) << 23) | (m << 13)));
}

/* The 2-byte format of p (bf16 or fp16), both ways, and x rounded to p
 * as an fp32 value (widen(narrow(x)): exact in fp32, so a buffer of such
 * values holds p's numbers; fp32: x itself) */
static inline HD uint16_t float_to_half(float x, int p) {
    return p == PRECISION_FP16 ? float_to_fp16(x) : float_to_bf16(x);
}
static inline HD float half_to_float(uint16_t h, int p) {
    return p == PRECISION_FP16 ? fp16_to_float(h) : bf16_to_float(h);
}
static inline HD float round_to_precision(float x, int p) {
    return p == PRECISION_FP32 ? x : half_to_float(float_to_half(x, p), p);
}

#endif
