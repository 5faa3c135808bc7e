/* model_states.h: who holds the parameters, the gradients and the AdamW
 * moments, as the training loop (train.h) asks them each step: the
 * interface (ModelStates), the gradient averaging a replicated layout
 * plugs in (GradSync), and the replicated implementation: every rank
 * holds all of its layout's states.
 */
#ifndef MODEL_STATES_H
#define MODEL_STATES_H

#include <stddef.h>
#include <stdint.h>

#include "checkpoint.h"
#include "model.h"
#include "widened.h"

/* Clip to max_norm given the global norm: returns the factor applied
 * (min(1, max_norm / norm); 1 when max_norm <= 0 means no clipping). */
float grad_clip_factor(double norm, double max_norm);

/* Data parallelism: how a trainer makes every rank's gradients the
 * mean over all ranks. The loop calls, for each step:
 *   for each micro-batch k: forward; begin_backward(ctx, grads, last);
 *       backward, calling grads_ready(ctx, offset, count) as ranges of the
 *       flat gradient buffer become final for this micro-batch (last = 1 on
 *       the final micro-batch: the earlier ones only accumulate, and the
 *       sync must not communicate for them);
 *   finish(ctx, grads, n): complete the communication, leave the mean over
 *       the data-parallel ranks in grads (the time spent here is the
 *       communication the backward pass did not hide).
 * grads holds n elements of the layout's gradient format
 * (gpt_grad_precision: fp32, or mixed precision's 2 bytes); offsets and
 * counts are in elements. begin_backward and grads_ready may be NULL. */
typedef void (*GradsReadyFn)(void *ctx, size_t offset, size_t count);
typedef struct {
    void *ctx;
    void (*begin_backward)(void *ctx, void *grads, int last);
    GradsReadyFn grads_ready;
    void (*finish)(void *ctx, void *grads, size_t n);
} GradSync;

/* fp16's dynamic loss scaling (Micikevicius et al. 2018; PyTorch's
 * GradScaler): the backward pass starts from the loss's gradient times
 * scale, so that small activation gradients stay above fp16's smallest
 * subnormal (2^-24); the states divide it out of the fp32 gradients. A
 * step whose gradients are not finite (an overflow) is skipped and the
 * scale halved; after `interval` clean steps in a row it doubles
 * (interval 0: a fixed scale, an overflow still skips the step). The
 * decision is the global gradient norm's (finish_grads: every rank gets
 * the same one), so every rank skips together. bf16 and fp32 keep scale 1,
 * interval 0, and never skip: there a non-finite gradient is a divergence. */
typedef struct {
    float scale;
    int interval;        /* 0: the scale stays fixed */
    int clean;           /* clean steps since the scale last changed */
    int overflowed;      /* this step's gradients: not finite, so skipped */
    long long skipped;   /* steps skipped so far in this run */
    long long flushed;   /* --count-flushed: this step's nonzero fp32 gradients fp16
                          * would round to zero (lab 11's extension), else -1 */
} LossScaler;

/* One AdamW step as the loop hands it to whoever holds the moments. */
typedef struct {
    float lr, beta1, beta2, eps, weight_decay;
    float clip;  /* scale the gradients by this first (grad_clip_factor) */
    int t;       /* 1-based step, for the bias corrections */
} AdamWStep;

/* Mixed precision's master-weight step on the n elements this rank
 * updates: the gradients hold the loss's gradient times unscale (fp16's
 * loss scale, and the micro-batches when they are summed in 2 bytes), the
 * scaler says whether they overflowed (and keeps the scale's rule). */
typedef struct {
    float *master;              /* the fp32 weights AdamW updates */
    void *grads;                /* grad_format (precision.h's Precision) */
    int grad_format;
    float *adam_m, *adam_v;
    uint16_t *compute;          /* the 2-byte copy the passes read, format */
    int format;
    size_t n;
    float unscale;
    LossScaler *scaler;
} MasterStep;

/* Mixed precision's seam (lab 11's mixed_precision.h): the overflow
 * check every rank agrees on, and the master-weight step. A program hands them over (TrainProgram.mixed);
 * without them it trains fp32 only. */
struct Comm;
typedef struct {
    int (*found_overflow)(const void *grads, size_t n, int format, struct Comm *group);
    void (*master_step)(const MasterStep *m, const AdamWStep *s);
    void (*scaler_after_step)(LossScaler *s);  /* states with their own step (ZeRO) */
    size_t (*count_flushed)(const float *x, size_t n, int format);  /* the extension's */
} MixedPrecisionOps;

/* Model states: who holds the parameters, gradients and AdamW moments. The
 * replicated implementation below keeps them whole on every rank (one
 * device, DDP through a GradSync, tensor parallelism's shards); ZeRO brings
 * one that shards them. The loop
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
    /* may be NULL: after a checkpoint was loaded into held's buffers,
     * derive what it does not hold (mixed precision's compute copy) */
    void (*loaded)(void *ctx);
    /* may be NULL: the loss scale (fp16), which a resumed run restores */
    LossScaler *scaler;
} ModelStates;

/* What mixed precision adds to the replicated states: lab 11's ops, fp16's
 * loss scale to start from, the group of every rank of the run (the
 * overflow check's; NULL on one device), and whether to count the
 * gradients fp16 would flush (--count-flushed: fp16 with fp32 gradients) */
typedef struct {
    const MixedPrecisionOps *ops;
    LossScaler scaler;
    struct Comm *group;
    int count_flushed;
} ReplicatedMixed;

/* The replicated states: every rank holds all of its layout's buffer, 4
 * bytes each of params and grads and 8 of AdamW moments per element of the
 * layout's num_params (one device, DDP through sync, tensor parallelism).
 * Under mixed precision (the layout's cfg.precision bf16 or fp16) the
 * passes read compute, a 2-byte copy of the weights (MEM_PARAMS), made
 * after each update (and a load) from params, the fp32 master weights,
 * which like the moments are the optimizer's (MEM_OPTIMIZER: 12 bytes an
 * element, the ZeRO paper's K); each unit is widened to fp32 when the
 * passes need it (params_needed: widened.h's copies, MEM_WORKSPACE). The
 * gradients are 2 bytes too (2 + 2 + 12 = 16 bytes per element), or fp32
 * with fp32_grads (2 + 4 + 12). 2-byte gradients are accumulated a unit
 * at a time in fp32 (grads_begin widens the unit, grads_ready rounds it
 * back: one rounding per unit and micro-batch, not one per kernel); the
 * step reads them widened (the *_as kernels), dividing the micro-batch
 * count and the loss scale out at the update (one rounding fewer than
 * dividing the stored gradients). */
typedef struct {
    const GPTLayout *layout;
    TensorInfo *tensors;    /* the layout's table, for the gradient norm */
    const GradSync *sync;   /* NULL on one device */
    size_t n;
    float *params, *adam_m, *adam_v;
    void *grads;            /* n elements of gpt_grad_precision */
    GPTParams p, g;
    ModelHooks hooks;
    CkptRun all;            /* the whole local buffer, for checkpoints */
    /* mixed precision only (else NULL / empty) */
    uint16_t *compute;
    WidenedUnits weights;   /* compute's units as the passes read them */
    /* 2-byte gradients only */
    WidenedUnits grad_units; /* the units a backward pass accumulates */
    ReplicatedMixed mixed;  /* its ops, and the overflow check's group */
    float unscale;          /* this step's: the loss scale x the micro-batches */
    LossScaler scaler;
} ReplicatedStates;

/* Allocate and initialize (seed) r's states on layout, st its ModelStates;
 * mp: under mixed precision, what ReplicatedMixed says (else NULL) */
void replicated_states_init(ReplicatedStates *r, const GPTLayout *layout, unsigned long long seed,
                            const GradSync *sync, const ReplicatedMixed *mp, ModelStates *st);
void replicated_states_free(ReplicatedStates *r);

#endif
