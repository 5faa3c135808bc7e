#include "traffic.h"

#include <stdio.h>

double train_print_traffic(const char *program, const char *what, const TrainOptions *o,
                           const Comm *group, const TrafficRow *rows, int n) {
    const size_t passes = train_forward_passes(o), steps = (size_t)train_steps_run(o);
    const size_t backwards = (size_t)o->grad_accum * steps;
    double wire = 0;
    for (int i = 0; i < n; i++) {
        const TrafficRow *r = &rows[i];
        const size_t calls = r->per_forward.calls * passes + r->per_backward.calls * backwards +
                             r->per_step.calls * steps;
        const size_t bytes = r->per_forward.bytes * passes + r->per_backward.bytes * backwards +
                             r->per_step.bytes * steps;
        const CommOpStats s = comm_op_stats(group, r->op);
        wire += r->wire * (double)s.bytes;
        if (calls == 0 && s.calls == 0) continue;
        printf("%s: %s %s per rank, predicted vs measured: per forward %zu calls %zu bytes, "
               "per backward %zu calls %zu bytes; run: %zu calls %zu bytes vs %llu calls %llu "
               "bytes  %s\n",
               program, what, r->name, r->per_forward.calls, r->per_forward.bytes,
               r->per_backward.calls, r->per_backward.bytes, calls, bytes,
               (unsigned long long)s.calls, (unsigned long long)s.bytes,
               s.calls == calls && s.bytes == bytes ? "ok" : "DIFFERENT");
    }
    return wire;
}

void train_print_tp_traffic(const char *program, const TrainOptions *o, const MemLayout *ml,
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

void train_print_cp_traffic(const char *program, const TrainOptions *o, const MemLayout *ml,
                            const Comm *cp) {
    if (cp->size == 1) return;
    CpTraffic fwd, bwd;
    memplan_cp_comm(&o->model, ml, &fwd, &bwd);
    const double p = cp->size;
    const TrafficRow rows[] = {
        {OP_SEND, "ring sends", fwd.send, bwd.send, {0, 0}, 1.0},
        {OP_ALLTOALL, "all-to-alls", fwd.alltoall, bwd.alltoall, {0, 0}, (p - 1) / p},
        {OP_ALLREDUCE, "loss all-reduces", fwd.allreduce, bwd.allreduce, {0, 0}, 2.0 * (p - 1) / p},
    };
    const double wire = train_print_traffic(program, "CP", o, cp, rows, 3);
    printf("%s: CP traffic leaving each rank per step: %.0f bytes\n", program, wire / train_steps_run(o));
}
