/* train.h: the training loop, on one device or on many ranks in any
 * parallel layout (TrainParallel: the groups, the layout, the model states
 * or the gradient sync, the pipeline schedule).
 *
 * Every layout must reproduce the loss curve the single-device run writes
 * for the same seed, global batch and config (docs/ARCHITECTURE.md: the
 * correctness principle). Its pieces have their own modules, which this
 * header brings along for the trainers: the options (train_options.h),
 * the model states (model_states.h), the traffic checks (traffic.h).
 */
#ifndef TRAIN_H
#define TRAIN_H

#include "comm.h"
#include "model_states.h"
#include "traffic.h"
#include "train_options.h"

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
    /* pipeline parallelism, else NULL: every step runs this
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
 * losses alone cannot show (the grader's consistency check). With --resume
 * it sets o->first_step, the loaded checkpoint's steps done, which the
 * program's checks after the run count from (train_steps_run). */
void train_run_parallel(TrainOptions *o, const TrainParallel *par);

/* Train as o says on one device; writes o->out_dir/{metrics.csv,
 * memory.csv, run.json}. Like train_run_parallel, only after preflight_run
 * (preflight.h) has passed; sets o->first_step. */
void train_run(TrainOptions *o);

#endif
