#include "act_layers.h"

#include "activation_memory.h"

const SequenceParallelOps sp_layers = {
    sp_column_parallel_forward, sp_column_parallel_backward, sp_row_parallel_forward,
    sp_row_parallel_backward,   sp_vocab_embedding_forward,  sp_vocab_embedding_backward,
    sp_sum_layernorm_grads,     sp_column_parallel_forward_regather,
    sp_column_parallel_backward_regather,
};

const RecomputeOps recompute_layers = {recompute_block_forward, recompute_attention_probs};
