/* pipe_exec.h: running a schedule (schedule.h) on one rank, one step.
 *
 * The training loop (train.c) runs every step as a schedule: lab 00's loop
 * is the trivial one (F0 B0 F1 B1 ... on one rank: forward and backward of
 * each micro-batch in turn), a pipeline (lab 06) one of GPipe, 1F1B,
 * interleaved 1F1B or ZB-H1 over pp ranks. The executor walks this rank's
 * list in order:
 *   RA, RG   post a non-blocking receive (comm_irecv) of the chunk's input
 *            activation or of its output gradient, each into a buffer of
 *            its own, and go on: the message moves while the rank computes;
 *   SA, SG   post a non-blocking send of the chunk's output (the last
 *            block's res2) or of its input gradient, and go on;
 *   F, B, I, W  wait for the op's own receive if it is still in flight
 *            (F: its RA, B and I: their RG), then call the stage's op
 *            (PipeStageOps, below): the pipeline's arithmetic;
 *   a batch  (schedule.h) post every member, then wait for all of them.
 * Messages are tagged with (activation or gradient, receiving stage,
 * micro-batch), so a receive takes exactly its own message (the validator
 * assumes so). Sends finish before the buffer they read is reused or
 * freed, and every request before the step returns.
 *
 * Activations are kept per (micro-batch, chunk) in flight: the forward
 * takes a set from a pool of this chunk's (and copies the received input
 * into it), and the stage's op gives it back
 * (pipe_acts_release) once no backward needs it. The pool grows to the
 * most sets in flight at once, allocated as MEM_ACTIVATIONS (alloc.h): the
 * run's memory.csv shows each stage's peak, to compare with the schedule's
 * peak_activations (schedule_simulate) and the planner. With `poison` a
 * released set is filled with NaN, so a backward that reads activations
 * given back too early gives a NaN loss instead of a plausible one.
 * Received inputs and gradients and sent gradients live in MEM_COMM
 * buffers of one (R, C) each, freed when used (received), or (sent) at the
 * rank's next backward or the step's end, after waiting for the send:
 * fixed points, so that the peak is the schedule's, the same in every run.
 */
#ifndef PIPE_EXEC_H
#define PIPE_EXEC_H

#include "model.h"
#include "schedule.h"

typedef struct PipeRank PipeRank;
typedef struct Comm Comm;

/* The arithmetic of each compute op, for micro-batch `micro` on local
 * chunk `chunk` (every buffer it needs through the functions below):
 *   forward           the stage's forward, the loss added to x->loss_sum
 *                     on the last stage;
 *   backward          the stage's backward, then the activations released;
 *   backward_input,   zero-bubble's split backward (ZB-H1): the input
 *   backward_weight   gradient first, the weight gradients later (NULL
 *                     when the program runs no split schedule).
 * dloss_scaled: whether backward weights each micro-batch's loss by 1/m
 * (the pipeline's way, Megatron-LM's), so that the step's gradients are
 * final when the schedule ends; 0: each backward is of its own mean loss
 * and the model states divide the sum by m (the loop's own, labs 00-05).
 * names: the functions' common prefix, for the executor's errors
 * ("pipeline_": "pipeline_backward_weight returned with ...").
 * B and W read their micro-batch's activations last: each gives them back
 * (pipe_acts_release) before it returns, else the executor stops with an
 * error naming the op. */
typedef struct PipeStageOps {
    void (*forward)(PipeRank *x, int micro, int chunk);
    void (*backward)(PipeRank *x, int micro, int chunk);
    void (*backward_input)(PipeRank *x, int micro, int chunk);
    void (*backward_weight)(PipeRank *x, int micro, int chunk);
    int dloss_scaled;
    const char *names;
} PipeStageOps;

/* Fills a micro-batch's token ids (inputs and targets, on a stage that
 * reads them: the first and the last) */
typedef void (*PipeLoadFn)(void *ctx, int micro, GPTActs *a);

struct PipeRank {
    /* for the stage's ops */
    const GPTLayout *layout;   /* this rank's chunks (layout.h) */
    const GPTParams *params;
    GPTParams *grads;
    const ModelHooks *hooks;   /* may be NULL */
    BackwardScratch scratch;   /* one block's backward at a time, shared */
    int micro_batches;         /* m of the running schedule */
    double loss_sum;           /* the last stage's losses of the running step */
    /* the executor's own */
    int rows, seq;             /* a micro-batch: rows sequences of seq tokens */
    Comm *pp_group;            /* NULL at pp = 1 */
    int poison;
    const Schedule *schedule;  /* running, or NULL */
    int forward_only;          /* the running schedule has no backward */
    PipeLoadFn load;
    void *load_ctx;
    PipeOpTime *times;         /* [i]: when the rank's op i of the last schedule ran
                                  (trace_now; a communication op: posted, completed) */
    int times_cap;
    struct PipeSlot *slot;     /* [chunk * m + micro] of the running schedule */
    struct PipePool *pool;     /* [chunk]: activation sets not in use */
    int slots_cap;
};

/* An executor for this rank of l (its chunks; rows x seq tokens per
 * micro-batch). Allocates the scratch. */
void pipe_rank_init(PipeRank *x, const GPTLayout *l, const GPTParams *params, GPTParams *grads,
                    const ModelHooks *hooks, int rows, int seq, Comm *pp_group, int poison);
void pipe_rank_free(PipeRank *x);

/* Run this rank's list of s (validated: schedule_validate) with ops;
 * load fills the tokens. before_backward (may be NULL) is called before
 * every B and I with last = 1 on the rank's last one (the model states'
 * begin_backward: DDP communicates on the last micro-batch only). Returns
 * the sum of this rank's losses (0 but on the last stage). */
double pipe_run(PipeRank *x, const Schedule *s, const PipeStageOps *ops, PipeLoadFn load,
                void *load_ctx, void (*before_backward)(void *ctx, int last), void *bb_ctx);

/* For the stage's ops: micro-batch `micro` on local chunk `chunk` of the
 * running schedule:
 *   pipe_acts          its activations (taken from the pool on first use);
 *   pipe_acts_release  give them back (after the last backward op that
 *                      reads them; a later pipe_acts is an error);
 *   pipe_grad_out      d(loss)/d(output) of the stage: the received
 *                      gradient (NULL on the last stage, which starts from
 *                      the loss);
 *   pipe_grad_in       where the stage writes d(loss)/d(input), for the
 *                      previous stage (NULL on the first). */
GPTActs *pipe_acts(PipeRank *x, int micro, int chunk);
void pipe_acts_release(PipeRank *x, int micro, int chunk);
const float *pipe_grad_out(PipeRank *x, int micro, int chunk);
float *pipe_grad_in(PipeRank *x, int micro, int chunk);

/* MEM_ACTIVATIONS's peak on this rank (l->pp_rank) when it runs s with
 * rows x seq micro-batches, walking the list as pipe_run does: a set of
 * activations taken at the micro-batch's F, back in the chunk's pool
 * at its B or W, the pool growing to the most in use at once; the split
 * backward's kept gradients from I to W. What memory.csv must show. */
size_t pipe_activation_peak_bytes(const GPTLayout *l, const Schedule *s, int rows, int seq);
/* MEM_COMM's: a received input from its RA to its F, a received gradient
 * from its RG's post to the end of its backward, a gradient to send from
 * its backward until the rank's next backward (or the step's end) waits
 * for its send; in mixed precision the messages in 2 bytes, a gradient to
 * send also narrowed (as long), an output narrowed from its SA until its
 * send is done (its batch's end, or alone when its activations go back at
 * B or W), and a received gradient widened during its backward; plus, during each
 * forward and each backward (or backward-input), the forward_extra and
 * backward_extra bytes those ops hold inside themselves (context
 * parallelism's transfers, memplan_cp_transient; 0 without). */
size_t pipe_comm_peak_bytes(const GPTLayout *l, const Schedule *s, int rows, int seq,
                            size_t forward_extra, size_t backward_extra);

/* After a run's last step (collective over x's pp group): world rank 0
 * (the first pipeline's first stage) writes dir/pipeline.csv, every op
 * of the last schedule run, as measured (rank,index,label,kind,micro,
 * chunk,start,end, seconds from the step's first compute op; a
 * communication op from its post to its completion), and
 * dir/pipeline_sim.csv, the simulator's timeline of the same schedule with
 * the measured mean cost of each compute kind; and prints the measured,
 * simulated and formula bubble fractions (ZB-H1 with m < p: no formula). */
void pipe_report_timeline(const PipeRank *x, const Schedule *s, Comm *world, const char *dir,
                          const char *program);

/* The loop's own stage ops (labs 00-05): forward, and backward of each
 * micro-batch's own mean loss (dloss_scaled 0). */
extern const PipeStageOps pipe_plain_ops;

/* Schedules the loop makes itself:
 *   pipe_schedule_trivial       one rank, m micro-batches: F0 B0 F1 B1 ...
 *   pipe_schedule_forward_only  every rank's forwards of m micro-batches,
 *                               in order, with their messages (evaluation:
 *                               no backward; not for schedule_validate,
 *                               which asks for backwards), in the
 *                               training schedule's placement (dual:
 *                               DualPipe's, v = 2) */
Schedule *pipe_schedule_trivial(int m);
Schedule *pipe_schedule_forward_only(int p, int m, int v, int dual);

#endif
