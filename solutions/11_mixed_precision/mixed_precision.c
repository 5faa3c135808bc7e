/* Lab 11: mixed precision's numbers and step (mixed_precision.h). */
#include "mixed_precision.h"

#include <math.h>
#include <string.h>

#include "device.h"
#include "kernels.h"

/* SOLUTION ONLY BEGIN */
static uint32_t bits_of(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

/* Round to nearest, ties to even, when `dropped` low bits are cut off:
 * up when they are more than half of the last kept bit's weight, or
 * exactly half and the kept value is odd */
static uint32_t round_kept(uint32_t kept, uint32_t dropped, uint32_t half) {
    return kept + (dropped > half || (dropped == half && (kept & 1u)));
}
/* SOLUTION ONLY END */

uint16_t mp_float_to_bf16(float x) {
    /* BEGIN SOLUTION */
    const uint32_t u = bits_of(x);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x0040u);  /* quiet NaN */
    /* the top 16 bits, rounded on the 16 dropped: a carry out of the
     * mantissa raises the exponent, which is the right number (the next
     * binade, or infinity from the largest finite value) */
    return (uint16_t)round_kept(u >> 16, u & 0xFFFFu, 0x8000u);
    /* END SOLUTION */
}

uint16_t mp_float_to_fp16(float x) {
    /* BEGIN SOLUTION */
    const uint32_t u = bits_of(x), a = u & 0x7FFFFFFFu;  /* |x| */
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    if (a > 0x7F800000u) return sign | 0x7E00u;          /* NaN, quiet */
    /* 65520 = 65504 + half an ulp (16) ties between 65504 (odd mantissa)
     * and 65536: even, so infinity, as is everything above */
    if (a >= 0x477FF000u) return sign | 0x7C00u;
    if (a >= 0x38800000u)  /* 2^-14 and up: normal; exponent bias 127 -> 15 */
        return sign | (uint16_t)round_kept((a - 0x38000000u) >> 13, a & 0x1FFFu, 0x1000u);
    /* below 2^-14: a multiple m of 2^-24. |x| = s 2^(e - 150) with s the
     * 24-bit significand (no hidden bit, and e taken as 1, when x is an
     * fp32 subnormal), so m = s / 2^(126 - e), rounded */
    const int e = (int)(a >> 23);
    const uint32_t s = e ? (a & 0x7FFFFFu) | 0x800000u : a;
    const int shift = 126 - (e ? e : 1);
    if (shift > 24) return sign;  /* below half of 2^-24: s < 2^24 = the half */
    /* rounding up from 1023 gives 1024, 2^-14's bits: the smallest normal */
    return sign | (uint16_t)round_kept(s >> shift, s & ((1u << shift) - 1u), 1u << (shift - 1));
    /* END SOLUTION */
}

void mp_scaler_after_step(LossScaler *s) {
    /* BEGIN SOLUTION */
    s->skipped += s->overflowed;
    if (s->interval == 0) return;  /* a fixed scale */
    if (s->overflowed) {
        s->scale *= 0.5f;
        s->clean = 0;
    } else if (++s->clean == s->interval) {
        s->scale *= 2.0f;
        s->clean = 0;
    }
    /* END SOLUTION */
}

int mp_found_overflow(const void *grads, size_t n, int format, Comm *group) {
    /* BEGIN SOLUTION */
    /* an infinity or a NaN anywhere makes the sum of squares non-finite,
     * and nothing else does: the largest finite fp32 squared, 1.2e77 in
     * double, leaves room for any count of them */
    int found = !isfinite(sum_squares_as(grads, n, format));
    /* one rank's overflow is every rank's: otherwise the ranks that skip
     * and the ones that step would hold different models */
    if (group) comm_allreduce(group, &found, &found, 1, COMM_INT32, COMM_MAX);
    return found;
    /* END SOLUTION */
}

void mp_master_step(const MasterStep *m, const AdamWStep *s) {
    /* BEGIN SOLUTION */
    if (!m->scaler->overflowed) {
        /* unscale and clip inside AdamW, in fp32: scaling the 2-byte
         * gradients in place would round them a second time */
        adamw_update_as(m->master, m->grads, s->clip / m->unscale, m->adam_m, m->adam_v, m->n,
                        m->grad_format, s->lr, s->beta1, s->beta2, s->eps, s->weight_decay,
                        s->t);
        narrow_to_half(m->compute, m->master, m->n, m->format);  /* what the passes read */
    }
    mp_scaler_after_step(m->scaler);
    /* END SOLUTION */
}

/* ---- the extension ------------------------------------------------------- */

size_t mp_count_flushed(const float *x, size_t n, int format) {
    /* BEGIN SOLUTION */
    /* the values (possibly GPU memory) read in blocks on the host; flushed
     * means a nonzero value whose rounding has no bit but the sign */
    enum { BLOCK = 4096 };
    float host[BLOCK];
    size_t flushed = 0;
    for (size_t i = 0; i < n; i += BLOCK) {
        const size_t m = n - i < BLOCK ? n - i : BLOCK;
        device_copy(host, x + i, m * sizeof(float));
        for (size_t j = 0; j < m; j++) {
            const uint16_t h = format == PRECISION_BF16 ? mp_float_to_bf16(host[j])
                                                        : mp_float_to_fp16(host[j]);
            flushed += host[j] != 0.0f && (h & 0x7FFFu) == 0;
        }
    }
    return flushed;
    /* END SOLUTION */
}
