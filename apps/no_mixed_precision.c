/* no_mixed_precision.c: a program built without mixed precision's ops
 * (mixed_precision_ops.h). A build of the programs without lab 11, e.g. in
 * a student handout that lacks lab 11's solution, trains fp32 only: its
 * trainers refuse --precision bf16|fp16 with one error before any work
 * (PROGRAM_NO_MIXED says where the ops are). */
#include "mixed_precision_ops.h"

const MixedPrecisionOps *program_mixed_precision(void) { return NULL; }
