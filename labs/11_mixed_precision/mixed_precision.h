/* Lab 11: mixed precision. The trainers store the weights the passes read,
 * the activations and the gradients in 2 bytes (bf16 or fp16) and keep
 * fp32 master weights and AdamW moments (model_states.h); this lab writes
 * the numbers and the step that make that work:
 *
 *   conversions      fp32 -> bf16 and fp32 -> fp16, rounded to nearest
 *                    with ties to even, overflowing to infinity, fp16's
 *                    subnormals, NaN kept NaN (precision.h's table)
 *   loss scaler      fp16's dynamic loss scale: halve and skip on an
 *                    overflow, double after `interval` clean steps
 *   overflow check   found by any rank means found by every rank, so
 *                    that every rank skips the same steps
 *   master step      unscale, clip and AdamW on the fp32 master weights,
 *                    then the 2-byte copy the passes read made from them
 *
 * The library calls the last three (ZeRO's states run the scaler's rule
 * around lab 03's update; the replicated ones through the master step) and
 * the extension's count through MixedPrecisionOps (model_states.h)
 * for every trainer's --precision bf16|fp16 (apps/mixed_precision_ops.c
 * hands them over); check_precision grades the conversions on all 2^32
 * fp32 bit patterns. Course order: after lab 03 (README.md).
 */
#ifndef MIXED_PRECISION_H
#define MIXED_PRECISION_H

#include <stddef.h>
#include <stdint.h>

#include "comm.h"
#include "model_states.h"

/* x rounded to the nearest bf16 (the top 16 bits of an fp32) / fp16
 * (1 sign, 5 exponent, 10 mantissa bits), ties to the even neighbour;
 * beyond the largest finite value (plus half an ulp) infinity of x's sign;
 * fp16: below 2^-14 a subnormal (a multiple of 2^-24), or a signed zero;
 * NaN: a quiet NaN of x's sign. */
uint16_t mp_float_to_bf16(float x);
uint16_t mp_float_to_fp16(float x);

/* After a step (model_states.h's LossScaler): count it in skipped when it
 * overflowed; with interval 0 the scale stays; else an overflow halves the
 * scale and restarts the count of clean steps, and the interval-th clean
 * step in a row doubles it (and restarts the count). */
void mp_scaler_after_step(LossScaler *s);

/* 1 on every rank of group (NULL: this rank alone) when any rank's n
 * gradients (grads, in format: a Precision) hold an infinity or a NaN,
 * else 0 on every rank. */
int mp_found_overflow(const void *grads, size_t n, int format, Comm *group);

/* The master-weight step (MasterStep, model_states.h) of this AdamW step:
 * when the scaler says the gradients overflowed, skip it (the master and
 * the moments stay); else AdamW on the master from the gradients divided
 * by the loss scale and the micro-batches (m->unscale) and times the clip
 * factor, then the compute copy made from the master. The scaler's rule
 * runs after either. */
void mp_master_step(const MasterStep *m, const AdamWStep *s);

/* The extension: how many of the n fp32 values x are nonzero and finite
 * yet round to zero (+0 or -0) in format (a Precision: bf16 or fp16). The
 * trainers' --count-flushed (fp16 with fp32 gradients) counts the
 * gradients fp16 storage would lose, each step, in metrics.csv. */
size_t mp_count_flushed(const float *x, size_t n, int format);

#endif
