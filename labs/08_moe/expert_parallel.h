/* Lab 08: mixture of experts, expert parallelism.
 *
 * A mixture-of-experts layer (common/moe.h) has E expert MLPs, and each
 * token uses only k of them: the parameters grow with E, the work per
 * token does not. Expert parallelism keeps that true per rank: the ep ranks
 * of an expert-parallel group (mesh.h: ep consecutive data-parallel ranks)
 * hold E / ep experts each (layout.h: rank r experts [r E/ep, (r+1) E/ep)),
 * and every token travels to the rank that holds its expert and back:
 *
 * - Route and dispatch locally (moe_route, moe_dispatch): xd holds this
 *   rank's kept assignments' rows, expert by expert, so the rows for rank
 *   j's experts are one contiguous block of xd.
 * - Exchange the counts first: an all-to-all of ints tells every owner how
 *   many rows of each of its experts each source sends (a.peer_counts), so
 *   that both sides know the all-to-all-v's counts and offsets.
 * - Dispatch: an all-to-all-v of the rows. The owner receives them block by
 *   source, expert by expert within (xr), and runs its experts on each
 *   source's block (moe_experts_forward: the local tensors' expert 0 is
 *   global expert ep_rank E/ep).
 * - Combine: the outputs go back by the reverse all-to-all-v (the counts
 *   swapped), arriving in xd's order (eo), and moe_combine adds each
 *   token's weighted outputs as on one device.
 * - Backward mirrors it: d eo rows to the owners, the experts' backward
 *   per source block (accumulating the local experts' weight gradients over
 *   every source's rows), d xd back, then the local dispatch's and router's
 *   backward. The routing never moves: it depends only on each sequence's
 *   tokens (moe.h), so every rank routes exactly as one device does.
 * - Gradients: the router and every dense tensor are replicated on all dp
 *   ranks (averaged over DP as lab 02 does); an expert lives on the dp /
 *   ep ranks of its EDP group, and its gradient there already sums the
 *   contributions of the ep ranks whose tokens it served (ep_sync_grads).
 *
 * - Bytes: the rows are activations and their gradients, so they travel
 *   as comm_act_dtype(l->cfg.precision) (comm.h: 2 bytes on the wire in
 *   mixed precision, half fp32's); the counts as COMM_INT32.
 *
 * Shapes as model.h's ExpertParallelOps: N = B T tokens of C channels on
 * this rank, E experts, El = E / ep of them here, p and g this rank's views.
 */
#ifndef EXPERT_PARALLEL_H
#define EXPERT_PARALLEL_H

#include "model.h"

typedef struct Comm Comm;

/* y (N, C) = the MoE layer on x (N, C), the experts on their owners */
void ep_moe_forward(const GPTLayout *l, float *y, MoEActs *a, const MoEParams *p, const float *x);
/* The extension: the same layer, the rows' exchange as point-to-point
 * messages on l->ep_group that overlap the experts (README, "Extension").
 * After the counts' all-to-all, per peer j != ep_rank, each sent even when
 * empty: the dispatch, xd's block for j out and j's block into xr, posted
 * together (tag 1); the own block runs first, then at step i = 1 .. ep-1
 * source ep_rank - i's block (mod ep) as it arrives, its outputs sent back
 * (tag 2) in one batch with the receive of rank ep_rank + i's outputs for
 * this rank's rows into eo. Per call: 2 (ep - 1) sends and as many
 * receives on group ep, the all-to-all-v's' rows less the own block's */
void ep_moe_forward_overlapped(const GPTLayout *l, float *y, MoEActs *a, const MoEParams *p,
                               const float *x);
/* dx += , g += from dy (N, C) (model.h ExpertParallelOps) */
void ep_moe_backward(const GPTLayout *l, float *dx, const MoEParams *g, const float *dy,
                     MoEActs *a, const MoEScratch *sc, const MoEParams *p, const float *x,
                     float daux);

/* The gradient of the step's mean loss in grads (this rank's flat buffer,
 * its tensors t: gpt_tensor_table of l) from each rank's gradient of its
 * own mean loss: tensors whole on every rank averaged over dp, the
 * expert-split ones (TensorInfo.expert_split) over the edp group of the
 * ranks that hold the same experts. grads holds l's gradient format
 * (comm_dtype_of(gpt_grad_precision(&l->cfg)): fp32, or mixed precision's
 * 2 bytes); offsets are in elements (comm_at). */
void ep_sync_grads(const GPTLayout *l, Comm *dp, Comm *edp, const TensorInfo *t, void *grads);

#endif
