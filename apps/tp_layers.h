/* tp_layers.h: lab 04's split layers as the model calls them (model.h's
 * TensorParallelOps), for the programs that run tensor parallelism inside
 * another lab's layout (train_pp, train_cp, train_moe; train_tp builds its
 * own table: it also offers the extension's cross-entropy), and the check
 * every program that runs them prints: its TP traffic against the planner's. */
#ifndef TP_LAYERS_H
#define TP_LAYERS_H

#include "comm.h"
#include "memplan.h"
#include "model.h"
#include "train.h"

extern const TensorParallelOps tp_layers;

/* Rank 0's TP collectives of the run (tp's comm.h statistics) next to
 * memplan_tp_comm's per pass and memplan_tp_step_comm's per step, one line
 * each ("ok" or "DIFFERENT"), and the bytes on the wire per rank (the ring
 * algorithms' share). fused_ce: the forward ran the extension's
 * cross-entropy (one all-reduce fewer). Prints nothing at tp 1. */
void tp_print_traffic(const char *program, const TrainOptions *o, const MemLayout *ml,
                      const Comm *tp, int fused_ce);

#endif
