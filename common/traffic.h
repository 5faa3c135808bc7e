/* traffic.h: the parallel programs' check of their communication: each
 * collective as the memory planner predicts it (memplan.h), over the run's
 * passes and steps (train_options.h), next to what the communicator
 * counted (comm.h), one line each, "ok" or "DIFFERENT".
 */
#ifndef TRAFFIC_H
#define TRAFFIC_H

#include "comm.h"
#include "memplan.h"
#include "train_options.h"

/* One collective of a parallel layout, as the planner predicts it: calls
 * and bytes per forward pass, per backward pass and per step, and the bytes
 * a rank puts on the wire per byte counted (a ring all-reduce 2(p-1)/p). */
typedef struct {
    CommOp op;
    const char *name;
    CommCount per_forward, per_backward, per_step;
    double wire;
} TrafficRow;

/* The check the parallel programs print from rank 0: each row's prediction
 * over the run (train_forward_passes forwards, grad_accum x steps
 * backwards, train_steps_run steps) next to group's measured comm.h
 * statistics, one line each, "ok" or "DIFFERENT" (rows with nothing
 * predicted or measured left out). Returns the bytes on the wire. */
double train_print_traffic(const char *program, const char *what, const TrainOptions *o,
                           const Comm *group, const TrafficRow *rows, int n);

/* Rank 0's checks of a stage's TP collectives (tp's statistics) against
 * memplan_tp_comm per pass and memplan_tp_step_comm per step, and of its
 * CP transfers against memplan_cp_comm, one line each ("ok" or
 * "DIFFERENT"), and the bytes on the wire per rank (the ring algorithms'
 * share). fused_ce: the forward ran the fused vocabulary-parallel
 * cross-entropy (one all-reduce fewer). Each prints nothing when its group is one rank. */
void train_print_tp_traffic(const char *program, const TrainOptions *o, const MemLayout *ml,
                            const Comm *tp, int fused_ce);
void train_print_cp_traffic(const char *program, const TrainOptions *o, const MemLayout *ml,
                            const Comm *cp);

#endif
