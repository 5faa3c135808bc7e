#include "tp_layers.h"

#include <stdio.h>

#include "tensor_parallel.h"

const TensorParallelOps tp_layers = {
    column_parallel_forward,             column_parallel_backward,
    row_parallel_forward,                row_parallel_backward,
    vocab_parallel_embedding_forward,    vocab_parallel_embedding_backward,
    vocab_parallel_crossentropy_forward, vocab_parallel_crossentropy_backward,
};

void tp_print_traffic(const char *program, const TrainOptions *o, const MemLayout *ml,
                      const Comm *tp, int fused_ce) {
    if (tp->size == 1) return;
    TpTraffic fwd, bwd;
    memplan_tp_comm(&o->model, ml, &fwd, &bwd);
    fwd.allreduce.calls -= fused_ce;  /* the same bytes in one all-reduce fewer */
    const double p = tp->size;
    const TrafficRow rows[] = {
        {OP_ALLREDUCE, "all-reduces", fwd.allreduce, bwd.allreduce,
         memplan_tp_step_comm(&o->model, ml), 2.0 * (p - 1) / p},
        {OP_REDUCE_SCATTER, "reduce-scatters", fwd.reduce_scatter, bwd.reduce_scatter, {0, 0},
         (p - 1) / p},
        {OP_ALLGATHER, "all-gathers", fwd.allgather, bwd.allgather, {0, 0}, (p - 1) / p},
    };
    const double wire = train_print_traffic(program, "TP", o, tp, rows, 3);
    printf("%s: TP traffic on the wire per rank (ring: all-reduce 2(p-1)/p, "
           "reduce-scatter and all-gather (p-1)/p of the bytes): %.0f bytes\n", program, wire);
}
