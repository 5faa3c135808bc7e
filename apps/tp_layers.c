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
    const CommCount step = memplan_tp_step_comm(&o->model, ml);
    const size_t passes = train_forward_passes(o), backwards = (size_t)o->grad_accum * train_steps_run(o);
    const struct {
        CommOp op;
        const char *name;
        CommCount f, b, per_step;
        double wire;  /* bytes on the wire per payload byte, per rank */
    } ops[] = {
        {OP_ALLREDUCE, "all-reduces", fwd.allreduce, bwd.allreduce, step,
         2.0 * (tp->size - 1) / tp->size},
        {OP_REDUCE_SCATTER, "reduce-scatters", fwd.reduce_scatter, bwd.reduce_scatter, {0, 0},
         (tp->size - 1.0) / tp->size},
        {OP_ALLGATHER, "all-gathers", fwd.allgather, bwd.allgather, {0, 0},
         (tp->size - 1.0) / tp->size},
    };
    double wire = 0;
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        size_t calls = ops[i].f.calls * passes + ops[i].b.calls * backwards +
                       ops[i].per_step.calls * train_steps_run(o);
        size_t bytes = ops[i].f.bytes * passes + ops[i].b.bytes * backwards +
                       ops[i].per_step.bytes * train_steps_run(o);
        const CommOpStats *s = &tp->stats[ops[i].op];
        wire += ops[i].wire * (double)s->bytes;
        if (calls == 0 && s->calls == 0) continue;
        printf("%s: TP %s per rank, predicted vs measured: per forward %zu calls %zu "
               "bytes, per backward %zu calls %zu bytes; run: %zu calls %zu bytes vs %llu "
               "calls %llu bytes  %s\n",
               program, ops[i].name, ops[i].f.calls, ops[i].f.bytes, ops[i].b.calls, ops[i].b.bytes,
               calls, bytes, (unsigned long long)s->calls, (unsigned long long)s->bytes,
               s->calls == calls && s->bytes == bytes ? "ok" : "DIFFERENT");
    }
    printf("%s: TP traffic on the wire per rank (ring: all-reduce 2(p-1)/p, "
           "reduce-scatter and all-gather (p-1)/p of the bytes): %.0f bytes\n", program, wire);
}
