/* zero_scaled.h: fp16's dynamic loss scale around lab 03's Zero, for the
 * programs whose states are ZeRO's (train_zero, train_4d --zero 1), with
 * lab 11's ops (model_states.h's MixedPrecisionOps): the scale the
 * backward pass starts from (ModelHooks.loss_scale), the overflow check
 * every rank of the job agrees on, the skipped step, the scale's growth and
 * backoff. ZeRO's own update runs with the scale divided out of
 * AdamWStep.clip, the factor its gradients are multiplied by. bf16 and
 * fp32 need none: every call below then passes through. */
#ifndef ZERO_SCALED_H
#define ZERO_SCALED_H

#include "train_options.h"
#include "zero.h"

typedef struct {
    LossScaler scaler;
    const MixedPrecisionOps *mixed;  /* NULL but under fp16 */
    Comm *overflow;                  /* the world's copy the overflow check sums over */
    int count_flushed;               /* --count-flushed (lab 11's extension) */
} ZeroScaled;

/* From the run's options; under fp16 the overflow group is split from
 * world (collective over it) */
void zero_scaled_init(ZeroScaled *s, const TrainOptions *o, Comm *world);
void zero_scaled_free(ZeroScaled *s);
/* The loop's scale (ModelHooks.loss_scale, ModelStates.scaler), NULL in
 * bf16 and fp32 */
float *zero_scaled_scale(ZeroScaled *s);
LossScaler *zero_scaled_scaler(ZeroScaled *s);
/* After ZeRO's finish_grads returned sumsq (of scaled gradients): the
 * overflow check on the gradients this rank holds, the flushed count;
 * returns sumsq unscaled */
double zero_scaled_finish(ZeroScaled *s, const Zero *z, double sumsq);
/* ZeRO's update unless the step overflowed, then the scale's rule */
void zero_scaled_update(ZeroScaled *s, Zero *z, const AdamWStep *step);

#endif
