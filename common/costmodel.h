/* costmodel.h: predict the time of one training step of a composed layout
 * (dp x tp x cp x pp, with SP, recomputation, a pipeline schedule, EP and
 * ZeRO-1) on a cluster, before running anything. memplan.h says whether a
 * layout fits; this says how fast it goes, and memplan --advise ranks the
 * layouts that fit by it.
 *
 * The cluster: G GPUs per node, each F FLOP/s, and two links, each an
 * alpha-beta pair (alpha: seconds a message, beta: seconds a byte, 1/beta
 * the bandwidth a rank sees): inside a node and between nodes. A group of
 * ranks (mesh.h's order, rank = tp + T (cp + C (dp + D pp)), node = rank /
 * G) uses the intra-node link when all its ranks are on one node, else the
 * inter-node one: the slowest member link sets a ring's pace.
 *
 * Compute, per rank and micro-batch of N = rows x T tokens (T = a rank's
 * positions, Tg = cp T the sequence), forward FLOPs:
 *   linear layers  2 N (4C^2 + 8C^2) / tp per dense block (weights only:
 *                  biases and layernorms are O(C), left out); an MoE
 *                  block's experts are not split by TP (layout.h): 2 N
 *                  (4C^2 / tp + k 8C^2 + E C) (k experts and the router)
 *   attention      4 rows T Tg C / tp per block (QK^T and AV over the whole
 *                  T x Tg square, masked half included, as config.h's
 *                  gpt_flops_per_token counts it; Ulysses' whole
 *                  sequences of NH / (tp cp) heads give the same number)
 *   LM head        2 N (V / tp) C on the last stage (the embedding lookup
 *                  of the first stage costs nothing)
 * backward = 2 x forward; full recomputation adds each block's forward
 * again, selective the attention term again. Time = FLOPs / F.
 *
 * Communication, alpha-beta with each algorithm's factors for a group of
 * p ranks and S bytes (the whole tensor, as comm.h counts it), k calls:
 *   ring all-reduce                     2 (p-1) k alpha + 2 (p-1)/p S beta
 *   reduce-scatter, all-gather,
 *     all-to-all                        (p-1) k alpha + (p-1)/p S beta
 *   point-to-point sends                k alpha + S beta
 * The bytes and calls come from the planner (memplan.h), exact per stage:
 *   TP  memplan_tp_comm per micro-batch, memplan_tp_step_comm per step;
 *   CP  memplan_cp_comm per micro-batch (ring sends or Ulysses' all-to-alls);
 *   PP  one message of gpt_stage_io_floats (B T C floats) per micro-batch
 *       per stage boundary, each way;
 *   DP  the rank's gradients, 4 Phi_rank bytes, over the dp x cp group
 *       (the ranks that hold the same parameters), in buckets of
 *       bucket_bytes: a ring all-reduce per bucket, or under ZeRO-1 a
 *       reduce-scatter and an all-gather, the same time.
 *
 * What overlaps (and what does not):
 *   - TP and CP collectives are on the critical path: each forward and
 *     backward waits for them (the kit's layers call them blocking; a
 *     ring could hide its sends under the block's compute, which this
 *     model does not credit);
 *   - the pipeline: lab 06's simulator (schedule_simulate) runs the
 *     schedule with per-chunk costs t_f = (forward compute + TP + CP of a
 *     micro-batch) / v, t_b likewise, ZB-H1's backward split into its
 *     input half (attention's backward, recomputation, half the linear
 *     layers' backward) and its weight half, and one message of PP
 *     traffic as `send`. It takes one cost for every stage: the busiest
 *     rank's (the last, with the LM head), so stages of unequal cost give
 *     an upper bound. Its makespan includes the bubble; without a
 *     pipeline the makespan is m (t_f + t_b);
 *   - DP: with dp_overlap (lab 02's overlapped bucketed DDP), the gradient
 *     traffic runs behind the last micro-batch's backward: exposed =
 *     max(t_dp - t_b, t_last_bucket); without it (train_4d: buckets after
 *     the backward pass) all of t_dp is exposed;
 *   - the optimizer step, the gradient norm and the loss's reductions
 *     (a few values) are left out.
 * step = makespan + TP's per-step collectives + exposed DP.
 *
 * On a CPU, ranks share cores: give F as the per-core rate times
 * min(1, cores / ranks), every rank's share. */
#ifndef COSTMODEL_H
#define COSTMODEL_H

#include <stddef.h>

#include "config.h"
#include "memplan.h"
#include "mesh.h"

typedef struct {
    double alpha;  /* seconds per message */
    double beta;   /* seconds per byte (1 / bandwidth) */
} CostLink;

typedef struct {
    int gpus_per_node, nodes;
    double flops;        /* FLOP/s per device (what a rank achieves) */
    double mem_bytes;    /* memory per device */
    CostLink intra, inter;
} CostCluster;

/* A layout to cost: mem as memplan reads it (rows x seq per rank and
 * micro-batch, seq = Tg / cp; tp 0 or 1 for none; schedule set when
 * pp > 1, its micro-batches m; pp_rank is ignored: every stage is
 * costed), plus the degrees memplan does not hold. */
typedef struct {
    MemLayout mem;
    int dp;               /* data-parallel degree (ep splits it) */
    int micro_batches;    /* m: per step (the schedule's, under a pipeline) */
    size_t bucket_bytes;  /* DP gradient buckets */
    int dp_overlap;       /* 1: DP traffic behind the last backward (above) */
} CostLayout;

typedef struct {
    double flops;           /* per step on the busiest rank, recomputation included */
    double compute;         /* flops / F */
    double tp, cp;          /* per step, seconds on the critical path */
    double pp_send;         /* one stage-to-stage message */
    double makespan;        /* the pipeline's (or m micro-batches') time */
    double bubble_fraction; /* the simulator's idle share (0 without a pipeline) */
    double dp, dp_exposed;  /* gradient traffic, and its part not hidden */
    double step;            /* seconds */
    int tp_intra, cp_intra, dp_intra, pp_intra;  /* 1: the group's link is intra-node */
} StepCost;

/* The alpha-beta times above (0 for a group of one) */
double cost_allreduce(CostLink link, int p, double calls, double bytes);
double cost_scatter_gather(CostLink link, int p, double calls, double bytes);  /* RS, AG, all-to-all */
double cost_sends(CostLink link, double calls, double bytes);

/* Forward FLOPs of one micro-batch on the rank pp_rank of l (all its
 * chunks), in the three parts recomputation and ZB-H1 treat differently:
 * the blocks' linear layers, attention's square term, the LM head. */
void cost_forward_flops(const GPTConfig *cfg, const MemLayout *l, int pp_rank, double *blocks,
                        double *attention, double *head);

/* ZeRO-Offload (lab 03's third extension) on the host link, per step and
 * rank: S = owned elements (the sum of S_u over U units), S_last those of
 * the unit the backward pass finishes last (the embeddings'). Each unit's
 * gradient shard goes down as the backward pass finishes it (G bytes an
 * element, a copy per unit), the CPU runs AdamW over S elements at
 * adam_rate a second, and the parameters come back up (P bytes an element,
 * a copy per unit) before the next forward:
 *   down = U alpha + G S beta        cpu = S / adam_rate
 *   up   = U alpha + P S beta        exposed = alpha + G S_last beta + cpu + up
 * The copies down but the last unit's hide behind the backward pass (this
 * assumes it is the longer); nothing hides the CPU's step and the copies
 * up, which DeepSpeed's one-step delayed update would. host: the link's
 * alpha-beta, one direction at a time. */
typedef struct {
    double down, cpu, up, exposed;  /* seconds */
} OffloadCost;
void cost_offload(int units, size_t owned, size_t owned_last, size_t grad_bytes,
                  size_t param_bytes, CostLink host, double adam_rate, OffloadCost *out);

/* Fill out with the step's prediction (the model above). */
void cost_step(const GPTConfig *cfg, const CostLayout *layout, const CostCluster *cluster,
               StepCost *out);

#endif
