/* runlog.h: what a run leaves behind, in stable column names (docs/TRAINER.md).
 *
 *   metrics.csv  step,loss,val_loss,lr,grad_norm,tokens_per_s,step_ms
 *                (val_loss empty on steps without evaluation; losses with %.9g
 *                so two runs can be compared bit for bit); under
 *                --precision fp16 also loss_scale,skipped: the scale this
 *                step's backward used, and 1 when its gradients overflowed
 *                and the step was skipped (model_states.h's LossScaler);
 *                with --count-flushed also flushed: how many of rank 0's
 *                nonzero fp32 gradients (times the scale) fp16 would have
 *                rounded to zero (lab 11's extension)
 *   memory.csv   rank,category,current_bytes,peak_bytes   (alloc.h)
 *   moe.csv      a mixture of experts' (config.h) per step, over its MoE
 *                blocks, micro-batches and data-parallel ranks:
 *                step,aux_loss,dropped,load_0,...,load_{E-1} (aux_loss the
 *                objective's aux term, the mean over micro-batches and
 *                ranks; dropped and load_e the assignments dropped over
 *                capacity and kept by expert e, summed)
 *   run.json     the resolved options, model, world layout, git revision,
 *                backend
 * Plus rank 0's console, by --progress (train.h's ProgressMode):
 *   lines  "step 10/300 | loss 4.1234 | lr 1.00e-03 | 12.3k tok/s | 45.6 ms
 *          | ETA 0:42" for the first step, every log_every-th, each with a
 *          held-out loss (" | val 4.2000" after the loss) and the last: for
 *          files, pipes and CI logs, which keep every line they are given;
 *   bar    the same line redrawn in place ('\r') every step, for a person at
 *          a terminal; lines with a held-out loss and the last one stay;
 *   auto   bar when a person watches stdout, else lines. Open MPI gives each
 *          rank a pseudo-terminal whatever mpirun's own stdout is, so under
 *          mpirun the terminal that counts is mpirun's stdout.
 * The ETA is the pace of this run's steps so far (a resumed run's own).
 */
#ifndef RUNLOG_H
#define RUNLOG_H

#include <stdio.h>

#include "train.h"

typedef struct {
    FILE *metrics;     /* written row by row and flushed: a crashed run keeps its rows */
    char path[1100];   /* of metrics.csv, for error messages */
    FILE *moe;         /* moe.csv of a mixture of experts, else NULL */
    char moe_path[1100];
    int experts;
    int scaled;        /* fp16: metrics.csv has the loss scale's columns */
    int flush_counted; /* --count-flushed: and the flushed column */
    int bar;           /* --progress bar, or auto resolved to it */
    int log_every, total_steps;
    int first_step;    /* of this run (a resumed one starts later), -1 before it */
    double t_start;    /* seconds, when the first step started: the ETA's clock */
} RunLog;

double wall_seconds(void);

/* Sorts n timings in place, smallest first: x[n / 2] is then their median
 * and x[0], x[n - 1] their spread (the benchmarks' repeated timings). */
void timings_sort(double *x, size_t n);

/* --progress's value: auto, lines or bar; anything else is a user error. */
ProgressMode runlog_progress_by_name(const char *name);

void runlog_open(RunLog *r, const TrainOptions *o);
/* a row of moe.csv (load: the config's n_experts counts) */
void runlog_moe_step(RunLog *r, int step, double aux_loss, double dropped, const double *load);
/* val_loss < 0 means "not evaluated this step"; scaler (NULL outside fp16:
 * its scale, overflowed and flushed as the step's backward left them)
 * are written under fp16 only */
void runlog_step(RunLog *r, int step, float loss, float val_loss, float lr, float grad_norm,
                 double tokens_per_s, double step_ms, const LossScaler *scaler);
void runlog_close(RunLog *r);

/* run.json; world_size ranks, dp of them data-parallel, and the layout's
 * other degrees (tp, pp, cp; all 1 for lab 00). */
void runlog_write_run_json(const char *path, const TrainOptions *o, const char *lab,
                           int world_size, int dp, const GPTLayout *l, size_t num_params);

#endif
