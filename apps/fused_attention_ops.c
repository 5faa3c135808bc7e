#include "fused_attention_ops.h"

#include "activation_memory.h"

CpuFusedForward program_fused_attention(void) { return attention_fused_forward_cpu; }
