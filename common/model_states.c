#include "model_states.h"

#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "check.h"
#include "device.h"
#include "kernels.h"
#include "precision.h"
#include "widened.h"

float grad_clip_factor(double norm, double max_norm) {
    if (max_norm <= 0 || norm <= max_norm) return 1.0f;
    return (float)(max_norm / norm);
}

static int grad_precision(const ReplicatedStates *r) {
    return gpt_grad_precision(&r->layout->cfg);
}
static int mixed(const ReplicatedStates *r) { return r->compute != NULL; }
static int half_grads(const ReplicatedStates *r) { return grad_precision(r) != PRECISION_FP32; }

static void replicated_begin_step(void *ctx) {
    ReplicatedStates *r = ctx;
    device_zero(r->grads, r->n * precision_bytes(grad_precision(r)));  /* +0 in every format */
}

static void replicated_begin_backward(void *ctx, int last) {
    ReplicatedStates *r = ctx;
    if (r->sync && r->sync->begin_backward) r->sync->begin_backward(r->sync->ctx, r->grads, last);
}

static void replicated_grads_ready(void *ctx, int unit) {
    ReplicatedStates *r = ctx;
    size_t offset, count;
    gpt_unit_range(r->layout, unit, &offset, &count);
    r->sync->grads_ready(r->sync->ctx, offset, count);
}

/* unit u's first element in a 2-byte buffer of the layout */
static uint16_t *unit_at(const ReplicatedStates *r, void *buf, int u) {
    size_t offset, count;
    gpt_unit_range(r->layout, u, &offset, &count);
    return (uint16_t *)buf + offset;
}

/* ---- mixed precision: the compute copy, widened unit by unit ------------ */

/* the compute copy made from the master weights (model_states.h) */
static void copy_down(ReplicatedStates *r) {
    narrow_to_half(r->compute, r->params, r->n, r->layout->cfg.precision);
}

static void mixed_params_needed(void *ctx, int unit, int backward) {
    (void)backward;
    ReplicatedStates *r = ctx;
    widened_open(&r->weights, unit, unit_at(r, r->compute, unit), &r->p);
}

static void mixed_params_done(void *ctx, int unit, int backward) {
    (void)backward;
    ReplicatedStates *r = ctx;
    widened_close(&r->weights, unit, NULL);
}

static void mixed_loaded(void *ctx) { copy_down(ctx); }

/* ---- 2-byte gradients: accumulated in fp32 a unit at a time ------------ */

static void half_grads_begin(void *ctx, int unit) {
    ReplicatedStates *r = ctx;
    widened_open(&r->grad_units, unit, unit_at(r, r->grads, unit), &r->g);
}

static void half_grads_ready(void *ctx, int unit) {
    ReplicatedStates *r = ctx;
    widened_close(&r->grad_units, unit, unit_at(r, r->grads, unit));
    if (r->sync && r->sync->grads_ready) replicated_grads_ready(ctx, unit);
}

/* sequence parallelism's layernorm sums on the 2-byte gradients (widened.h) */
static void half_sum_layernorm_grads(ReplicatedStates *r) {
    const int U = gpt_num_units(r->layout);
    uint16_t *starts[U];
    for (int u = 0; u < U; u++) starts[u] = unit_at(r, r->grads, u);
    widened_sum_layernorm_grads(&r->grad_units, starts);
}

static void mixed_init(ReplicatedStates *r, const ReplicatedMixed *mp) {
    const int format = r->layout->cfg.precision;
    CHECK(mp && mp->ops, "--precision %s without mixed precision's ops (lab 11)",
          precision_name((Precision)format));
    r->mixed = *mp;
    r->compute = mem_alloc(MEM_PARAMS, r->n * sizeof(uint16_t));
    widened_init(&r->weights, r->layout, format, MEM_WORKSPACE);
    copy_down(r);
    r->scaler = mp->scaler;
    r->hooks.params_needed = mixed_params_needed;
    r->hooks.params_done = mixed_params_done;
    r->hooks.loss_scale = &r->scaler.scale;
    if (!half_grads(r)) return;
    widened_init(&r->grad_units, r->layout, format, MEM_WORKSPACE);
    r->hooks.grads_begin = half_grads_begin;
    r->hooks.grads_ready = half_grads_ready;
}

static double replicated_finish_grads(void *ctx, int micro_batches) {
    ReplicatedStates *r = ctx;
    const int half = half_grads(r);
    /* a pipeline's last stage never readies the embeddings (model.h) */
    if (half) widened_close(&r->grad_units, GPT_UNIT_EMBED, unit_at(r, r->grads, GPT_UNIT_EMBED));
    if (r->sync) r->sync->finish(r->sync->ctx, r->grads, r->n);
    /* sequence parallelism: each TP rank's layernorms saw its rows only */
    if (r->layout->sp && half) half_sum_layernorm_grads(r);
    else if (r->layout->sp) r->layout->sp_ops->sum_layernorm_grads(r->layout, &r->g);
    /* a pipeline: wte's two copies, each with its stage's share */
    if (r->layout->pp > 1) r->layout->sum_pipeline_copies(r->layout, r->grads);
    /* each micro-batch's backward gave the gradient of its own mean loss:
     * divided now in fp32, at the update in 2 bytes (with the loss scale) */
    /* lab 11's extension: what fp16 storage would have lost of them */
    if (r->mixed.count_flushed)
        r->scaler.flushed = (long long)r->mixed.ops->count_flushed(r->grads, r->n,
                                                                   PRECISION_FP16);
    r->unscale = r->scaler.scale;
    if (micro_batches > 1 && half) r->unscale *= (float)micro_batches;
    else if (micro_batches > 1) scale_inplace(r->grads, 1.0f / micro_batches, r->n);
    /* the unscaling's square out of the sum (1 but under fp16 or 2-byte
     * accumulation); only fp16 skips a step whose gradients overflowed (on
     * every rank, if on any: lab 11's check): elsewhere a non-finite
     * gradient is a divergence, which the loop reports */
    const double ss = layout_sum_squares(r->layout, r->tensors, r->grads, grad_precision(r));
    r->scaler.overflowed = r->layout->cfg.precision == PRECISION_FP16 &&
                           r->mixed.ops->found_overflow(r->grads, r->n, grad_precision(r),
                                                        r->mixed.group);
    return ss / ((double)r->unscale * r->unscale);
}

/* fp32: clip and AdamW; mixed precision: lab 11's master-weight step */
static void replicated_update(void *ctx, const AdamWStep *s) {
    ReplicatedStates *r = ctx;
    if (!mixed(r)) {
        adamw_update_as(r->params, r->grads, s->clip / r->unscale, r->adam_m, r->adam_v, r->n,
                        grad_precision(r), s->lr, s->beta1, s->beta2, s->eps, s->weight_decay,
                        s->t);
        return;
    }
    const MasterStep m = {r->params, r->grads, grad_precision(r), r->adam_m, r->adam_v,
                          r->compute, r->layout->cfg.precision, r->n, r->unscale, &r->scaler};
    r->mixed.ops->master_step(&m, s);
}

static void replicated_gather_params(void *ctx, float *out) {
    ReplicatedStates *r = ctx;
    if (layout_holds_whole_model(r->layout)) {
        if (out) device_copy(out, r->params, r->n * sizeof(float));
        return;
    }
    float *whole = layout_gather_standard(r->layout, r->params, 0);
    if (out) memcpy(out, whole, gpt_num_params(&r->layout->cfg) * sizeof(float));
    free(whole);
}

static void replicated_local_params(void *ctx, float *out) {
    ReplicatedStates *r = ctx;
    if (layout_holds_whole_model(r->layout)) {
        device_copy(out, r->params, r->n * sizeof(float));
        return;
    }
    float *whole = layout_gather_standard(r->layout, r->params, 1);
    memcpy(out, whole, gpt_num_params(&r->layout->cfg) * sizeof(float));
    free(whole);
}

/* every rank of a DP group holds all of its layout's buffer */
static void replicated_held(void *ctx, CkptHeld *h) {
    ReplicatedStates *r = ctx;
    r->all = (CkptRun){0, r->n, 0};
    *h = (CkptHeld){{r->params, r->adam_m, r->adam_v}, {&r->all, &r->all, &r->all}, {1, 1, 1},
                    {1, 1, 1}, "replicated", {0}};
}

void replicated_states_init(ReplicatedStates *r, const GPTLayout *layout, unsigned long long seed,
                            const GradSync *sync, const ReplicatedMixed *mp, ModelStates *st) {
    memset(r, 0, sizeof *r);
    r->layout = layout;
    r->sync = sync;
    r->n = layout->num_params;
    r->tensors = malloc((size_t)gpt_num_tensors(layout) * sizeof *r->tensors);
    CHECK(r->tensors, "out of memory");
    gpt_tensor_table(layout, r->tensors);
    /* mixed precision: the master weights are the optimizer's (model_states.h) */
    r->params = mem_alloc(layout->cfg.precision == PRECISION_FP32 ? MEM_PARAMS : MEM_OPTIMIZER,
                          r->n * sizeof(float));
    r->grads = mem_alloc(MEM_GRADS, r->n * precision_bytes(grad_precision(r)));
    r->adam_m = mem_alloc(MEM_OPTIMIZER, r->n * sizeof(float));
    r->adam_v = mem_alloc(MEM_OPTIMIZER, r->n * sizeof(float));
    gpt_init_params(layout, seed, 0, r->n, r->params);
    gpt_params_view(layout, r->params, &r->p);
    r->hooks = (ModelHooks){.ctx = r};
    if (sync && sync->grads_ready) r->hooks.grads_ready = replicated_grads_ready;
    r->scaler = (LossScaler){.scale = 1.0f};
    r->unscale = 1.0f;
    /* 2-byte gradients: views of one unit at a time (NULL until begun) */
    gpt_params_view(layout, half_grads(r) ? NULL : r->grads, &r->g);
    if (layout->cfg.precision != PRECISION_FP32) mixed_init(r, mp);
    *st = (ModelStates){r, &r->p, &r->g, &r->hooks, replicated_begin_step,
                        replicated_begin_backward, replicated_finish_grads, replicated_update,
                        replicated_gather_params, replicated_local_params, replicated_held,
                        mixed(r) ? mixed_loaded : NULL, &r->scaler};
}

void replicated_states_free(ReplicatedStates *r) {
    free(r->tensors);
    gpt_params_view_free(&r->p);
    gpt_params_view_free(&r->g);
    mem_free(r->params);
    mem_free(r->grads);
    mem_free(r->adam_m);
    mem_free(r->adam_v);
    mem_free(r->compute);
    widened_free(&r->weights);
    widened_free(&r->grad_units);
}
