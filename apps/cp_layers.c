#include "cp_layers.h"

#include "ring_attention.h"
#include "ulysses.h"

const ContextParallelOps cp_ring_layers = {ring_attention_forward, ring_attention_backward,
                                           context_parallel_loss_mean};
const ContextParallelOps cp_ulysses_layers = {ulysses_attention_forward,
                                              ulysses_attention_backward,
                                              context_parallel_loss_mean};

const ContextParallelOps *cp_layers_of(CpAlgo algo) {
    return algo == CP_ULYSSES ? &cp_ulysses_layers : &cp_ring_layers;
}
