/* fused_attention_ops.h: the CPU forward pass of fused attention a program
 * is built with, which it hands to the library (TrainProgram.fused_forward,
 * kernels.h's kernels_set_cpu_fused_forward). Two definitions, one per
 * build:
 *   apps/fused_attention_ops.c  lab 05's extension (labs/05_activation_memory/
 *                               activation_memory.h), linked with its object;
 *   apps/no_fused_attention.c   none (NULL): a program built without lab 05
 *                               runs materialized attention only. */
#ifndef FUSED_ATTENTION_OPS_H
#define FUSED_ATTENTION_OPS_H

#include "kernels.h"

CpuFusedForward program_fused_attention(void);

/* What a program without it answers --attention fused */
#define PROGRAM_NO_FUSED_ATTENTION \
    "it is lab 05's extension (build/labs/05_activation_memory/ once that lab is yours)"

#endif
