/* plugins.h: what every trainer hands the library from the labs that plug
 * into all of them, each as its build has it: lab 05's fused attention
 * (fused_attention_ops.h), lab 09's checkpoints (checkpoints.h) and lab
 * 11's mixed precision (mixed_precision_ops.h), or, where a build lacks
 * the lab, where they are. TrainProgram's fields:
 *   const TrainProgram program = {..., PROGRAM_PLUGINS};
 * A lab that plugs into every trainer adds its two fields here. */
#ifndef PLUGINS_H
#define PLUGINS_H

#include "checkpoints.h"
#include "fused_attention_ops.h"
#include "mixed_precision_ops.h"

#define PROGRAM_PLUGINS                                                                    \
    .checkpoints = program_checkpoints(), .no_checkpoints = PROGRAM_NO_CHECKPOINTS,        \
    .mixed = program_mixed_precision(), .no_mixed = PROGRAM_NO_MIXED,                      \
    .fused_forward = program_fused_attention(), .no_fused = PROGRAM_NO_FUSED_ATTENTION

#endif
