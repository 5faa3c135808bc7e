/* no_fused_attention.c: a program built without lab 05's fused attention
 * (fused_attention_ops.h), e.g. in a student handout before lab 05: its
 * trainers refuse --attention fused with one error before any work
 * (PROGRAM_NO_FUSED_ATTENTION says where it comes from). */
#include "fused_attention_ops.h"

CpuFusedForward program_fused_attention(void) { return NULL; }
