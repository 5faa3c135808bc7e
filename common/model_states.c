#include "model_states.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "check.h"
#include "device.h"
#include "kernels.h"
#include "precision.h"

float grad_clip_factor(double norm, double max_norm) {
    if (max_norm <= 0 || norm <= max_norm) return 1.0f;
    return (float)(max_norm / norm);
}


static void replicated_begin_step(void *ctx) {
    ReplicatedStates *r = ctx;
    set_zero(r->grads, r->n);
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

/* ---- mixed precision: the compute copy, widened unit by unit ------------ */

static int mixed(const ReplicatedStates *r) { return r->compute != NULL; }

/* the compute copy made from the master weights (model_states.h) */
static void copy_down(ReplicatedStates *r) {
    narrow_to_half(r->compute, r->params, r->n, r->layout->cfg.precision);
}

static void mixed_params_needed(void *ctx, int unit, int backward) {
    (void)backward;
    ReplicatedStates *r = ctx;
    size_t offset, count;
    gpt_unit_range(r->layout, unit, &offset, &count);
    if (count == 0) return;
    float *buf = unit == GPT_UNIT_EMBED ? r->embed_unit : r->one_unit;
    if (unit != GPT_UNIT_EMBED) {
        CHECK(r->unit_widened < 0, "unit %d needed while unit %d is (one at a time besides "
              "the embeddings)", unit, r->unit_widened);
        r->unit_widened = unit;
    }
    widen_from_half(buf, r->compute + offset, count, r->layout->cfg.precision);
    gpt_unit_view(r->layout, unit, buf, &r->p);
}

static void mixed_params_done(void *ctx, int unit, int backward) {
    (void)backward;
    ReplicatedStates *r = ctx;
    if (unit != GPT_UNIT_EMBED && unit == r->unit_widened) r->unit_widened = -1;
}

static void mixed_loaded(void *ctx) { copy_down(ctx); }

static void mixed_init(ReplicatedStates *r, const LossScaler *scaler) {
    const GPTLayout *l = r->layout;
    size_t offset, embed;
    gpt_unit_range(l, GPT_UNIT_EMBED, &offset, &embed);
    r->compute = mem_alloc(MEM_PARAMS, r->n * sizeof(uint16_t));
    r->embed_unit = embed ? mem_alloc(MEM_WORKSPACE, embed * sizeof(float)) : NULL;
    const size_t other = gpt_largest_unit_but_embeddings(l);
    r->one_unit = other ? mem_alloc(MEM_WORKSPACE, other * sizeof(float)) : NULL;
    r->unit_widened = -1;
    copy_down(r);
    r->scaler = scaler ? *scaler : (LossScaler){.scale = 1.0f};
    r->hooks.params_needed = mixed_params_needed;
    r->hooks.params_done = mixed_params_done;
    r->hooks.loss_scale = &r->scaler.scale;
}

/* The step after an overflow is skipped (model_states.h's LossScaler) */
static void scaler_after_step(LossScaler *s) {
    s->skipped += s->overflowed;
    if (s->interval == 0) return;  /* a fixed scale */
    if (s->overflowed) {
        s->scale *= 0.5f;
        s->clean = 0;
    } else if (++s->clean == s->interval) {
        s->scale *= 2.0f;
        s->clean = 0;
    }
}

static double replicated_finish_grads(void *ctx, int micro_batches) {
    ReplicatedStates *r = ctx;
    if (r->sync) r->sync->finish(r->sync->ctx, r->grads, r->n);
    /* sequence parallelism: each TP rank's layernorms saw its rows only */
    if (r->layout->sp) r->layout->sp_ops->sum_layernorm_grads(r->layout, &r->g);
    /* a pipeline: wte's two copies, each with its stage's share */
    if (r->layout->pp > 1) r->layout->sum_tied_embedding(r->layout, r->grads);
    /* each micro-batch's backward gave the gradient of its own mean loss */
    if (micro_batches > 1) scale_inplace(r->grads, 1.0f / micro_batches, r->n);
    /* the loss scale's square out of the sum (1 but under fp16); only fp16
     * skips a step whose gradients overflowed: elsewhere a non-finite
     * gradient is a divergence, which the loop reports */
    const double scale = r->scaler.scale, ss = layout_sum_squares(r->layout, r->tensors, r->grads);
    r->scaler.overflowed = r->layout->cfg.precision == PRECISION_FP16 && !isfinite(ss);
    return ss / (scale * scale);
}

/* clip, and under fp16 the loss scale divided out, in one scaling */
static void replicated_update(void *ctx, const AdamWStep *s) {
    ReplicatedStates *r = ctx;
    if (r->scaler.overflowed) {  /* skipped: the master weights and moments stay */
        scaler_after_step(&r->scaler);
        return;
    }
    const float factor = s->clip / r->scaler.scale;
    if (factor != 1.0f) scale_inplace(r->grads, factor, r->n);
    adamw_update(r->params, r->grads, r->adam_m, r->adam_v, r->n, s->lr, s->beta1, s->beta2,
                 s->eps, s->weight_decay, s->t);
    if (mixed(r)) copy_down(r);
    scaler_after_step(&r->scaler);
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
                    {1, 1, 1}, "replicated"};
}

void replicated_states_init(ReplicatedStates *r, const GPTLayout *layout, unsigned long long seed,
                            const GradSync *sync, const LossScaler *scaler, ModelStates *st) {
    memset(r, 0, sizeof *r);
    r->layout = layout;
    r->sync = sync;
    r->n = layout->num_params;
    r->tensors = malloc((size_t)gpt_num_tensors(layout) * sizeof *r->tensors);
    CHECK(r->tensors, "out of memory");
    gpt_tensor_table(layout, r->tensors);
    r->params = mem_alloc(MEM_PARAMS, r->n * sizeof(float));
    r->grads = mem_alloc(MEM_GRADS, r->n * sizeof(float));
    r->adam_m = mem_alloc(MEM_OPTIMIZER, r->n * sizeof(float));
    r->adam_v = mem_alloc(MEM_OPTIMIZER, r->n * sizeof(float));
    gpt_init_params(layout, seed, 0, r->n, r->params);
    gpt_params_view(layout, r->params, &r->p);
    gpt_params_view(layout, r->grads, &r->g);
    r->hooks = (ModelHooks){.ctx = r};
    if (sync && sync->grads_ready) r->hooks.grads_ready = replicated_grads_ready;
    r->scaler = (LossScaler){.scale = 1.0f};
    if (layout->cfg.precision != PRECISION_FP32) mixed_init(r, scaler);
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
    mem_free(r->embed_unit);
    mem_free(r->one_unit);
}
