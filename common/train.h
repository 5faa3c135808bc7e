/* train.h: the single-device training loop, lab 00's reference trainer.
 *
 * Every later layout must reproduce the loss curve this loop writes for the
 * same seed, global batch and config (docs/ARCHITECTURE.md: the correctness
 * principle). The pieces later labs reuse are exposed: the LR schedule, the
 * gradient clipping, the options parser.
 */
#ifndef TRAIN_H
#define TRAIN_H

#include "checkpoint.h"
#include "comm.h"
#include "memplan.h"
#include "model.h"

/* --progress: how rank 0 shows the run on the console (runlog.h) */
typedef enum { PROGRESS_AUTO, PROGRESS_LINES, PROGRESS_BAR } ProgressMode;

typedef struct {
    char config_name[32];
    GPTConfig model;            /* the named config, with any overrides applied */
    char data_path[512];
    char out_dir[512];
    char dump_params[512];      /* final parameters as raw float32, or "" */
    /* checkpoints (checkpoint.h): into save (or ""), every save_every steps
     * and at the end, keeping the newest keep (0: all); resume: a
     * checkpoint or a directory of them (its newest), or ""; save_async:
     * write them while training goes on (checkpoint.h's ckpt_save_async) */
    char save[512], resume[512];
    int save_every, keep, save_async;
    const CkptOps *checkpoints;  /* the program's (TrainProgram): not NULL when saving or resuming */
    char device[8];             /* "cpu" or "cuda" (device.h) */
    char lab[32];               /* names the default run directory runs/LAB-CONFIG */
    int steps, batch, seq;      /* global batch of `batch` sequences of `seq` tokens */
    int grad_accum;             /* micro-batches per rank and step (>= 1) */
    int warmup;                 /* linear warmup steps */
    int eval_every, eval_batches, log_every, threads;
    ProgressMode progress;      /* 0: auto */
    int profile;                /* --profile: per-kernel table (profile.h) */
    double lr, min_lr_frac;     /* cosine decays lr to lr * min_lr_frac */
    double weight_decay, beta1, beta2, eps, grad_clip, val_fraction;
    unsigned long long seed;
} TrainOptions;

/* A trainer's own long option (without the dashes; help is its line in
 * --help), handed to the program's on_extra(ctx, i, arg) for extra[i],
 * which validates it (USER_ERROR) */
typedef struct {
    const char *name;
    int has_arg;
    const char *help;
} ExtraOption;
typedef void (*ExtraOptionFn)(void *ctx, int index, const char *arg);

/* A trainer as it declares itself to the options parser */
typedef struct {
    const char *lab;   /* names the default run directory runs/LAB-CONFIG */
    const char *what;  /* --help's one-line description */
    const ExtraOption *extra;  /* its own options, n_extra of them (may be none) */
    int n_extra;
    ExtraOptionFn on_extra;
    void *ctx;
    /* the checkpoint ops it was built with (checkpoint.h), or NULL: then
     * every checkpoint flag is one error, which adds no_checkpoints (where
     * checkpoints are to be had) */
    const CkptOps *checkpoints;
    const char *no_checkpoints;
} TrainProgram;

/* Parse and validate argv for program p; prints --help and exits 0, or
 * exits 2 with one clear line on any bad option or impossible config. */
void train_options_parse(int argc, char **argv, TrainOptions *o, const TrainProgram *p);

/* Sequences per micro-batch on one of `ranks` data-parallel ranks:
 * batch / (ranks x grad_accum), or a user error when that does not divide. */
int train_micro_batch_rows(const TrainOptions *o, int ranks);

/* A pipeline's options as train_pp and train_4d take them: *chunks 0 (not
 * given) becomes 2 for the interleaved schedule, else 1; --micro-batches
 * (0: not given) takes --grad-accum's place, since a pipeline's
 * micro-batches are its accumulation steps: both given and different is
 * one clear error. */
void train_pipeline_options(TrainOptions *o, const char *schedule, int micro_batches,
                            int *chunks);

/* Learning rate at step (0-based): warmup from lr/warmup to lr, then cosine
 * down to lr * min_lr_frac at the last step. */
float lr_at_step(const TrainOptions *o, int step);

/* Whether the loop measures the held-out loss before step (0-based): every
 * eval_every steps (none but the last when 0) and at the last step. */
int train_evaluates_at(const TrainOptions *o, int step);

/* The steps this run trains: --steps, less those a --resume checkpoint had
 * done (known once train_run_parallel has loaded it). */
int train_steps_run(const TrainOptions *o);
/* Forward passes in the run (from its first step): --grad-accum per step,
 * and as many per held-out batch at each evaluation (the planners' traffic
 * per run). */
size_t train_forward_passes(const TrainOptions *o);

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
 * share). fused_ce: the forward ran lab 04's extension cross-entropy (one
 * all-reduce fewer). Each prints nothing when its group is one rank. */
void train_print_tp_traffic(const char *program, const TrainOptions *o, const MemLayout *ml,
                            const Comm *tp, int fused_ce);
void train_print_cp_traffic(const char *program, const TrainOptions *o, const MemLayout *ml,
                            const Comm *cp);

/* ---- the whole model from a layout's pieces ----
 * The gradient norm counts each distinct parameter once:
 * layout_counted_sum_squares sums the squares of the elements [first,
 * first + n) of this rank's flat buffer (layout.h), which lie at g, of the
 * tensors this rank counts: a tensor split over TP or EP on every rank, one
 * whole on every TP (EP) rank, the same gradient, on TP (EP) rank 0 only,
 * the last stage's tied copy of wte never (the first stage's stands for
 * it); t is the layout's tensor table. layout_model_sum then adds x over
 * the ranks that hold the other parts of the same model copy (the TP,
 * pipeline and EP groups). Replicated states count their whole buffer;
 * ZeRO's owners count their shards, summed over the sharding group first. */
double layout_counted_sum_squares(const GPTLayout *l, const TensorInfo *t, size_t first,
                                  size_t n, const float *g);
double layout_model_sum(const GPTLayout *l, double x);

/* The whole model in the standard layout (host memory, gpt_num_params
 * floats; the caller frees it), assembled from the local buffers of every
 * rank of this one's TP group and EP group (the EP group's first, then
 * those of the TP group: tp x ep buffers, their tensors split over TP or
 * EP each from its owner), then every pipeline stage's (a collective over
 * those groups, kept out of comm.csv). Where copies of a tensor could
 * differ (one held whole by several ranks), the copy of TP and EP rank 0
 * wins, and wte's of the first stage; or, when mine, this rank's own
 * wherever it holds the tensor (its view of the model, for the
 * consistency checksum): those buffers are copied last. */
float *layout_gather_standard(const GPTLayout *l, const float *local, int mine);

/* Clip to max_norm given the global norm: returns the factor applied
 * (min(1, max_norm / norm); 1 when max_norm <= 0 means no clipping). */
float grad_clip_factor(double norm, double max_norm);

/* Train as o says on one device; writes o->out_dir/{metrics.csv,
 * memory.csv, run.json}. Like train_run_parallel, only after preflight_run
 * (preflight.h) has passed. */
void train_run(const TrainOptions *o);

/* Data parallelism (lab 02): how a trainer makes every rank's gradients the
 * mean over all ranks. The loop calls, for each step:
 *   for each micro-batch k: forward; begin_backward(ctx, grads, last);
 *       backward, calling grads_ready(ctx, offset, count) as ranges of the
 *       flat gradient buffer become final for this micro-batch (last = 1 on
 *       the final micro-batch: the earlier ones only accumulate, and the
 *       sync must not communicate for them);
 *   finish(ctx, grads, n): complete the communication, leave the mean over
 *       the data-parallel ranks in grads (the time spent here is the
 *       communication the backward pass did not hide).
 * begin_backward and grads_ready may be NULL. */
typedef void (*GradsReadyFn)(void *ctx, size_t offset, size_t count);
typedef struct {
    void *ctx;
    void (*begin_backward)(void *ctx, float *grads, int last);
    GradsReadyFn grads_ready;
    void (*finish)(void *ctx, float *grads, size_t n);
} GradSync;

/* One AdamW step as the loop hands it to whoever holds the moments. */
typedef struct {
    float lr, beta1, beta2, eps, weight_decay;
    float clip;  /* scale the gradients by this first (grad_clip_factor) */
    int t;       /* 1-based step, for the bias corrections */
} AdamWStep;

/* Model states: who holds the parameters, gradients and AdamW moments. The
 * loop's own implementation keeps them whole on every rank (lab 00, and DDP
 * through a GradSync); ZeRO (lab 03) brings one that shards them. The loop
 * asks, each step:
 *   begin_step            zero the gradients this rank accumulates into;
 *   for each micro-batch: forward (with hooks), begin_backward(last),
 *                         backward (with hooks);
 *   finish_grads(K)       complete the communication; leave, in what this
 *                         rank owns, the gradient of the step's mean loss
 *                         (mean over ranks and K micro-batches); return its
 *                         global sum of squares (for clipping);
 *   update(step)          clip and AdamW on what this rank owns, and make
 *                         the parameters whole again where the layout
 *                         keeps them whole.
 * gather_params writes all parameters, in the standard layout, to out on
 * world rank 0 (a collective; out may be NULL elsewhere).
 * local_params (may be NULL) writes, on every rank, this rank's own copy of
 * all parameters in the standard layout, as its forward pass reads them (a
 * collective where the layout shards them); the loop checksums it at the
 * end of a run (params_checksum.csv).
 * held describes, for --save and --resume, the buffers of the parameters
 * and moments this rank holds and which runs of its layout's flat buffer
 * they are (the buffers stay the states' own: a load writes into them).
 * params and grads are the views the passes read; hooks (may be NULL)
 * repoint them around each unit (model.h). */
typedef struct {
    void *ctx;
    GPTParams *params, *grads;
    const ModelHooks *hooks;
    void (*begin_step)(void *ctx);
    void (*begin_backward)(void *ctx, int last);
    double (*finish_grads)(void *ctx, int micro_batches);
    void (*update)(void *ctx, const AdamWStep *step);
    void (*gather_params)(void *ctx, float *out);
    void (*local_params)(void *ctx, float *out);
    /* what this rank holds of the parameters and the moments, for
     * checkpoints (checkpoint.h's CkptHeld) */
    void (*held)(void *ctx, CkptHeld *out);
} ModelStates;

typedef struct Comm Comm;
typedef struct Schedule Schedule;          /* schedule.h */
typedef struct PipeStageOps PipeStageOps;  /* pipe_exec.h */
typedef struct {
    Comm *world;     /* every rank: outputs are gathered here */
    Comm *dp;        /* the data-parallel group: which rows of the batch (and,
                        but under context parallelism, whose gradients the
                        sync averages: there the dp x cp group's, the
                        program's GradSync) */
    Comm *metrics;   /* the same ranks as dp, for loss sums, so that the
                        gradient traffic in comm.csv is the gradients' alone */
    /* the model on this rank (layout.h); NULL: the whole model. Ranks of one
     * TP group take the same rows of the batch (the dp group's slice) */
    const GPTLayout *layout;
    /* exactly one of: */
    const GradSync *sync;         /* replicated states (DDP) */
    const ModelStates *states;    /* the layout's own states (ZeRO) */
    /* pipeline parallelism (lab 06), else NULL: every step runs this
     * schedule (of --grad-accum micro-batches) with these stage ops
     * (pipe_exec.h) over layout->pp_group; metrics must then span the
     * pipeline too (the loss is on its last stage) */
    const Schedule *schedule;
    const PipeStageOps *stage_ops;
    /* optional, replicated states only: after each optimizer step (e.g. a
     * consistency check) */
    void (*after_step)(void *ctx, int step, const float *params, size_t n);
    void *after_step_ctx;
} TrainParallel;

/* Data-parallel training: rank r of N takes rows [r B/N, (r+1) B/N) of the
 * global batch (in --grad-accum micro-batches), so with the same seed the
 * run follows train_run's loss curve. Rank 0 writes metrics.csv and run.json;
 * memory.csv has every rank; comm.csv, trace.json and trace.csv too. Last,
 * params_checksum.csv ("rank,checksum") has, per rank, the FNV-1a 64 of
 * the bits of that rank's copy of the parameters (ModelStates.local_params):
 * ranks that hold the same model must agree bit for bit, which rank 0's
 * losses alone cannot show (the grader's consistency check). */
void train_run_parallel(const TrainOptions *o, const TrainParallel *par);

#endif
