/* Lab 06: pipeline parallelism, the stage's side of the executor.
 *
 * The model is cut into stages (layout.h: pp ranks x v chunks, stage
 * r + c pp on rank r); a schedule (schedules.h, yours too) says in which
 * order each rank runs forward and backward of which micro-batch on which
 * chunk, and the executor (common/pipe_exec.h) walks it: it posts the
 * sends and receives, waits for an op's input, and calls these functions
 * for the arithmetic. What they must get right:
 *
 * - The objective is the mean loss over the step's m micro-batches, so
 *   each micro-batch's loss is weighted by 1/m where its backward starts
 *   (the last stage): the gradients are final when the schedule ends, with
 *   no division afterwards (PipeStageOps.dloss_scaled). Forget it and every
 *   gradient is m times too large: AdamW, which divides by the gradient's
 *   own scale, still trains, and the loss curve looks fine. The gradient
 *   norm and the clipping do not.
 * - A micro-batch's activations live from its forward to its backward
 *   (pipe_acts takes them from the chunk's pool, pipe_acts_release gives
 *   them back): how many are held at once is the schedule's memory
 *   (GPipe m, 1F1B at most p - r on rank r). Give them back after the
 *   backward that reads them, not before, and not never.
 * - ZB-H1 splits each backward in two: backward_input computes d(input)
 *   (which the previous stage is waiting for) and keeps what the weight
 *   gradients need; backward_weight computes those later, in what would
 *   otherwise be the bubble, and only then are the activations free.
 * - wte is both the first stage's embedding and the last stage's LM head:
 *   each stage's copy gets only its own part of the gradient, so the two
 *   are summed before the update (pipeline_sum_tied_embedding), or the
 *   copies drift apart.
 * - DualPipe (the second extension) holds every stage twice, at ranks r
 *   and p - 1 - r, each copy seeing one direction's micro-batches: the
 *   same sum, over the whole buffer (pipeline_sum_dual_copies).
 */
#ifndef PIPELINE_H
#define PIPELINE_H

#include "pipe_exec.h"

/* PipeStageOps (pipe_exec.h), for micro-batch `micro` on local chunk
 * `chunk` of the running schedule (x->micro_batches of them): x->layout,
 * x->params, x->grads, x->hooks and x->scratch are what model.h's stage
 * functions take; pipe_acts, pipe_grad_out and pipe_grad_in give the
 * buffers. */
void pipeline_forward(PipeRank *x, int micro, int chunk);
void pipeline_backward(PipeRank *x, int micro, int chunk);
void pipeline_backward_input(PipeRank *x, int micro, int chunk);
void pipeline_backward_weight(PipeRank *x, int micro, int chunk);

/* At pp > 1, once per step after the backward passes, on the ranks of the
 * first and the last stage (l->embed_group, which the program built): sum
 * the gradient of wte over the group. grads is this rank's flat buffer;
 * wte comes first in it, (l->vocab_rows, C) elements on both stages, of
 * l's gradient format (comm_dtype_of(gpt_grad_precision(&l->cfg)): fp32,
 * or mixed precision's 2 bytes). */
void pipeline_sum_tied_embedding(const GPTLayout *l, void *grads);

/* The second extension, under DualPipe's placement (l->dual), in place of
 * the above, once per step after the backward passes, on every rank: sum
 * the gradients over l->dual_group, ranks r and p - 1 - r of the
 * pipeline, which hold the same units in the same order (l->num_params
 * elements of the same format). */
void pipeline_sum_dual_copies(const GPTLayout *l, void *grads);

#endif
