/* train.h: the single-device training loop, lab 00's reference trainer.
 *
 * Every later layout must reproduce the loss curve this loop writes for the
 * same seed, global batch and config (DESIGN.md: every strategy equals the
 * baseline). The pieces later labs reuse are exposed: the LR schedule, the
 * gradient clipping, the options parser.
 */
#ifndef TRAIN_H
#define TRAIN_H

#include "model.h"

typedef struct {
    char config_name[32];
    GPTConfig model;            /* the named config, with any overrides applied */
    char data_path[512];
    char out_dir[512];
    char device[8];             /* "cpu" (the CUDA backend is a later issue) */
    int steps, batch, seq;      /* global batch of `batch` sequences of `seq` tokens */
    int warmup;                 /* linear warmup steps */
    int eval_every, eval_batches, log_every, threads;
    double lr, min_lr_frac;     /* cosine decays lr to lr * min_lr_frac */
    double weight_decay, beta1, beta2, eps, grad_clip, val_fraction;
    unsigned long long seed;
} TrainOptions;

/* Parse and validate argv; prints --help and exits 0, or exits 2 with one
 * clear line on any bad option or impossible config. */
void train_options_parse(int argc, char **argv, TrainOptions *o);

/* Learning rate at step (0-based): warmup from lr/warmup to lr, then cosine
 * down to lr * min_lr_frac at the last step. */
float lr_at_step(const TrainOptions *o, int step);

/* Clip to max_norm given the global norm: returns the factor applied
 * (min(1, max_norm / norm); 1 when max_norm <= 0 means no clipping). */
float grad_clip_factor(double norm, double max_norm);

/* Train as o says; writes o->out_dir/{metrics.csv, memory.csv, run.json}. */
void train_run(const TrainOptions *o);

#endif
