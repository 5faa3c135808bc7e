/* composed_zero1.h: the loop's ModelStates (train.h) for lab 10's ZeRO-1
 * inside a composed layout (composed.h's ComposedZero1), for train_4d
 * --zero 1. A rank's layout is its TP shard of its pipeline stage; lab
 * 03's Zero shards its AdamW moments over the group given (lab 10's
 * groups.zero): unit u padded to N S_u, rank r of the group owning
 * [r S_u, (r+1) S_u). Per rank, Phi its layout's parameters (with ZeRO's
 * padding): params 4 Phi, grads 4 Phi, moments 8 Phi / N; in mixed
 * precision params 2 Phi (the compute copy), grads 2 Phi (4 with
 * --fp32-grads), the fp32 master beside the moments 12 Phi / N, the passes
 * reading widened units (lab 03's zero_view_params, zero_view_grads). The
 * step's gradient is lab 10's composed_zero1_finish_grads; the update lab
 * 03's zero_update (AdamW on the owned slices, then each unit
 * all-gathered); fp16's loss scale around both (zero_scaled.h). Not with
 * experts: lab 08 averages dense and expert gradients over two different
 * groups (dp and edp). */
#ifndef COMPOSED_ZERO1_H
#define COMPOSED_ZERO1_H

#include "composed.h"
#include "train_options.h"
#include "zero_scaled.h"

/* lab 10's ZeRO-1, and fp16's loss scale around it */
typedef struct {
    ComposedZero1 c;
    ZeroScaled scaled;
} ComposedZero1Run;

/* Lay out the states of layout over group and initialize the parameters
 * (the same values as one device) in o's precision; r->c.states is then
 * ready for the loop. Collective over world (fp16's overflow group). */
void composed_zero1_init(ComposedZero1Run *r, const GPTLayout *layout, Comm *group,
                         const TrainOptions *o, Comm *world);
void composed_zero1_free(ComposedZero1Run *r);

#endif
