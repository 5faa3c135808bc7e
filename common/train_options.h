/* train_options.h: a trainer's command line. The options every trainer
 * takes (the model, the data, the optimizer, the schedule of evaluations
 * and checkpoints), parsed and validated into TrainOptions, and what they
 * say about the run: the learning rate at a step, the steps and forward
 * passes it runs, the rows of a micro-batch. A trainer declares itself
 * (TrainProgram): the parallel dimensions whose flags it takes (their one
 * parser: parallel_flags.h), its own options, its checkpoint ops.
 */
#ifndef TRAIN_OPTIONS_H
#define TRAIN_OPTIONS_H

#include <stddef.h>

#include "checkpoint.h"
#include "kernels.h"
#include "model.h"
#include "model_states.h"
#include "parallel_flags.h"

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
    const MixedPrecisionOps *mixed; /* the program's (TrainProgram): not NULL under --precision bf16|fp16 */
    /* the steps --resume's checkpoint had done, where the run starts:
     * train_run_parallel sets it when it loads the checkpoint (0 before,
     * and for a fresh run) */
    int first_step;
    char device[8];             /* "cpu" or "cuda" (device.h) */
    char lab[32];               /* names the default run directory runs/LAB-CONFIG */
    int steps, batch, seq;      /* global batch of `batch` sequences of `seq` tokens */
    int grad_accum;             /* micro-batches per rank and step (>= 1) */
    int warmup;                 /* linear warmup steps */
    int eval_every, eval_batches, log_every, threads;
    ProgressMode progress;      /* 0: auto */
    int profile;                /* --profile: per-kernel table (profile.h) */
    /* fp16's dynamic loss scale (model.precision, fp32_grads: the model's
     * storage, config.h): the start, and the clean steps before it doubles
     * (0: fixed); 1 and 0 outside fp16 */
    double loss_scale;
    int loss_scale_interval;
    int count_flushed;          /* --count-flushed (lab 11's extension; runlog.h) */
    double lr, min_lr_frac;     /* cosine decays lr to lr * min_lr_frac */
    double weight_decay, beta1, beta2, eps, grad_clip, val_fraction;
    unsigned long long seed;
    /* the layout's flags (the dimensions the program exposes; the others
     * at their defaults); a pipeline's chunks resolved (2 for the
     * interleaved schedule, else 1) and its --micro-batches made
     * --grad-accum, which a pipeline's micro-batches are */
    ParallelFlags parallel;
} TrainOptions;

/* A trainer's own long option (without the dashes; help is its line in
 * --help), handed by name to the program's on_extra(ctx, name, arg),
 * which validates it (USER_ERROR) */
typedef struct {
    const char *name;
    int has_arg;
    const char *help;
} ExtraOption;
typedef void (*ExtraOptionFn)(void *ctx, const char *name, const char *arg);

/* A trainer as it declares itself to the options parser */
typedef struct {
    const char *lab;   /* names the default run directory runs/LAB-CONFIG */
    const char *what;  /* --help's one-line description */
    /* --help's example: the program run with these options, under mpirun
     * on example_ranks ranks (0: alone) */
    int example_ranks;
    const char *example;
    unsigned parallel;  /* the ParallelDim bits whose flags it takes (parallel_flags.h) */
    const ExtraOption *extra;  /* its own options, n_extra of them (may be none) */
    int n_extra;
    ExtraOptionFn on_extra;
    void *ctx;
    /* the checkpoint ops it was built with (checkpoint.h), or NULL: then
     * every checkpoint flag is one error, which adds no_checkpoints (where
     * checkpoints are to be had) */
    const CkptOps *checkpoints;
    const char *no_checkpoints;
    /* mixed precision's ops (model_states.h), or NULL: then --precision
     * bf16|fp16 is one error, which adds no_mixed (where they are) */
    const MixedPrecisionOps *mixed;
    const char *no_mixed;
    /* fused attention's CPU forward pass (kernels.h), or NULL: then
     * --attention fused is one error, which adds no_fused (where it is) */
    CpuFusedForward fused_forward;
    const char *no_fused;
} TrainProgram;

/* Parse and validate argv for program p; prints --help and exits 0, or
 * exits 2 with one clear line on any bad option or impossible config. */
void train_options_parse(int argc, char **argv, TrainOptions *o, const TrainProgram *p);

/* Sequences per micro-batch on one of `ranks` data-parallel ranks:
 * batch / (ranks x grad_accum), or a user error when that does not divide. */
int train_micro_batch_rows(const TrainOptions *o, int ranks);

/* Learning rate at step (0-based): warmup from lr/warmup to lr, then cosine
 * down to lr * min_lr_frac at the last step. */
float lr_at_step(const TrainOptions *o, int step);

/* Whether the loop measures the held-out loss before step (0-based): every
 * eval_every steps (none but the last when 0) and at the last step. */
int train_evaluates_at(const TrainOptions *o, int step);

/* The steps this run trains: --steps, less o->first_step (those a --resume
 * checkpoint had done, known once train_run_parallel has loaded it). */
int train_steps_run(const TrainOptions *o);
/* Forward passes in the run (from its first step): --grad-accum per step,
 * and as many per held-out batch at each evaluation (the planners' traffic
 * per run). */
size_t train_forward_passes(const TrainOptions *o);

#endif
