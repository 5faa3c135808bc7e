#include "tp_layers.h"

#include "tensor_parallel.h"

const TensorParallelOps tp_layers = {
    column_parallel_forward,             column_parallel_backward,
    row_parallel_forward,                row_parallel_backward,
    vocab_parallel_embedding_forward,    vocab_parallel_embedding_backward,
    vocab_parallel_crossentropy_forward, vocab_parallel_crossentropy_backward,
};
