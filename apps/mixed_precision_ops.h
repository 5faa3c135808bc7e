/* mixed_precision_ops.h: the mixed-precision ops a program is built with,
 * which it hands to the library (TrainProgram.mixed, model_states.h's
 * MixedPrecisionOps). Two definitions, one per build:
 *   apps/mixed_precision_ops.c  lab 11's functions (labs/11_mixed_precision/
 *                               mixed_precision.h), linked with its object;
 *   apps/no_mixed_precision.c   none (NULL): a program built without lab 11
 *                               trains fp32 only. */
#ifndef MIXED_PRECISION_OPS_H
#define MIXED_PRECISION_OPS_H

#include "model_states.h"

const MixedPrecisionOps *program_mixed_precision(void);

/* What a program without them answers --precision bf16|fp16 */
#define PROGRAM_NO_MIXED \
    "it comes with lab 11 (its programs are build/labs/11_mixed_precision/train_*)"

#endif
