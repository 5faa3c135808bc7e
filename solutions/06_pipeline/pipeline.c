/* Lab 06: pipeline parallelism. Read pipeline.h and schedules.h first,
 * then README.md. Here: what each compute op of a schedule does on its
 * stage, and the tied embedding's gradient. The model's stage functions
 * (common/model.h) do the arithmetic:
 *   gpt_stage_forward(l, params, acts, hooks)                 -> loss (last stage)
 *   gpt_stage_backward(l, params, grads, acts, scratch, dout, dinput, dloss, hooks)
 *   gpt_stage_backward_input(...), gpt_stage_backward_weight(...)   (ZB-H1)
 * and the executor (common/pipe_exec.h) the buffers:
 *   pipe_acts, pipe_acts_release, pipe_grad_out, pipe_grad_in.
 *
 * Check your work: make check LAB=06 (your generators), then make grade
 * LAB=06 runs your train_pp with every schedule against the references;
 *   mpirun -np 2 ./build/labs/06_pipeline/train_pp --pp 2 --schedule 1f1b --micro-batches 4
 */
#include "pipeline.h"

#include "check.h"
#include "comm.h"

void pipeline_forward(PipeRank *x, int micro, int chunk) {
    /* BEGIN SOLUTION */
    GPTActs *a = pipe_acts(x, micro, chunk);
    float loss = gpt_stage_forward(x->layout, x->params, a, x->hooks);
    if (a->stage.head) x->loss_sum += loss;
    /* END SOLUTION */
}

/* The objective is the mean of the m micro-batches' mean losses: the last
 * stage starts each backward from d(objective)/d(loss_i) = 1/m. */
void pipeline_backward(PipeRank *x, int micro, int chunk) {
    /* BEGIN SOLUTION */
    gpt_stage_backward(x->layout, x->params, x->grads, pipe_acts(x, micro, chunk), &x->scratch,
                       pipe_grad_out(x, micro, chunk), pipe_grad_in(x, micro, chunk),
                       1.0f / x->micro_batches, x->hooks);
    pipe_acts_release(x, micro, chunk);
    /* END SOLUTION */
}

void pipeline_backward_input(PipeRank *x, int micro, int chunk) {
    /* BEGIN SOLUTION */
    gpt_stage_backward_input(x->layout, x->params, x->grads, pipe_acts(x, micro, chunk),
                             &x->scratch, pipe_grad_out(x, micro, chunk),
                             pipe_grad_in(x, micro, chunk), 1.0f / x->micro_batches, x->hooks);
    /* END SOLUTION */
}

/* The activations (the layers' inputs) and what backward_input kept (their
 * output gradients) are read here for the last time. */
void pipeline_backward_weight(PipeRank *x, int micro, int chunk) {
    /* BEGIN SOLUTION */
    gpt_stage_backward_weight(x->layout, x->grads, pipe_acts(x, micro, chunk));
    pipe_acts_release(x, micro, chunk);
    /* END SOLUTION */
}

/* The second extension: under DualPipe ranks r and p - 1 - r hold the same
 * two stages, and each copy's gradient has only its own direction's
 * micro-batches: the stage's gradient is their sum. Both hold the same
 * units in the same order, so the whole buffer is summed at once. */
void pipeline_sum_dual_copies(const GPTLayout *l, void *grads) {
    /* BEGIN SOLUTION */
    const CommDtype dtype = comm_dtype_of(gpt_grad_precision(&l->cfg));
    comm_allreduce(l->dual_group, grads, grads, l->num_params, dtype, COMM_SUM);
    /* END SOLUTION */
}

void pipeline_sum_tied_embedding(const GPTLayout *l, void *grads) {
    /* BEGIN SOLUTION */
    if (l->pp == 1 || (l->pp_rank != 0 && l->pp_rank != l->pp - 1)) return;
    const size_t n = (size_t)l->vocab_rows * l->cfg.n_embd;
    const CommDtype dtype = comm_dtype_of(gpt_grad_precision(&l->cfg));
    comm_allreduce(l->embed_group, grads, grads, n, dtype, COMM_SUM);
    /* END SOLUTION */
}
