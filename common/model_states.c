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


static int grad_precision(const ReplicatedStates *r) {
    return gpt_grad_precision(&r->layout->cfg);
}
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

/* ---- 2-byte gradients: accumulated in fp32 a unit at a time ------------ */

static uint16_t *half_at(const ReplicatedStates *r, size_t offset) {
    return (uint16_t *)r->grads + offset;
}

/* unit's fp32 buffer, holding its stored gradient widened; with its views
 * in v (the embeddings stay open across the backward pass, model.h) */
static float *widen_grads(ReplicatedStates *r, int unit, GPTParams *v) {
    size_t offset, count;
    gpt_unit_range(r->layout, unit, &offset, &count);
    float *buf = unit == GPT_UNIT_EMBED ? r->grad_embed_unit : r->grad_one_unit;
    widen_from_half(buf, half_at(r, offset), count, grad_precision(r));
    gpt_unit_view(r->layout, unit, buf, v);
    return buf;
}

static void narrow_grads(ReplicatedStates *r, int unit, const float *buf) {
    size_t offset, count;
    gpt_unit_range(r->layout, unit, &offset, &count);
    narrow_to_half(half_at(r, offset), buf, count, grad_precision(r));
}

static void half_grads_begin(void *ctx, int unit) {
    ReplicatedStates *r = ctx;
    size_t offset, count;
    gpt_unit_range(r->layout, unit, &offset, &count);
    if (count == 0) return;
    if (unit == GPT_UNIT_EMBED) {
        if (r->embed_grads_open) return;  /* the LM head opened it, the encoder adds */
        r->embed_grads_open = 1;
    } else {
        CHECK(r->grads_open < 0, "gradients of unit %d begun while unit %d's are open", unit,
              r->grads_open);
        r->grads_open = unit;
    }
    widen_grads(r, unit, &r->g);
}

static void close_grads(ReplicatedStates *r, int unit) {
    if (unit == GPT_UNIT_EMBED && r->embed_grads_open) {
        narrow_grads(r, unit, r->grad_embed_unit);
        r->embed_grads_open = 0;
    } else if (unit != GPT_UNIT_EMBED && unit == r->grads_open) {
        narrow_grads(r, unit, r->grad_one_unit);
        r->grads_open = -1;
    }
}

static void half_grads_ready(void *ctx, int unit) {
    ReplicatedStates *r = ctx;
    close_grads(r, unit);
    if (r->sync && r->sync->grads_ready) replicated_grads_ready(ctx, unit);
}

/* sequence parallelism's layernorm sums (lab 05 reads fp32 views): each
 * unit widened, summed over the TP group, rounded back; what they move is
 * fp32, 4 (4 L + 2) C bytes a step, next to the gradients' 2 Phi */
static void half_sum_layernorm_grads(ReplicatedStates *r) {
    const GPTLayout *l = r->layout;
    for (int u = GPT_UNIT_EMBED + 1; u < gpt_num_units(l); u++) {
        size_t offset, count;
        gpt_unit_range(l, u, &offset, &count);
        if (count == 0) continue;
        memset(r->unit_only.blocks, 0, (size_t)l->cfg.n_layer * sizeof(BlockParams));
        r->unit_only.lnfw = r->unit_only.lnfb = NULL;
        const float *buf = widen_grads(r, u, &r->unit_only);
        l->sp_ops->sum_layernorm_grads(l, &r->unit_only);
        narrow_grads(r, u, buf);
    }
}

/* layout_sum_squares of the stored gradients, widened a unit at a time */
static double half_sum_squares(ReplicatedStates *r) {
    const GPTLayout *l = r->layout;
    double ss = 0.0;
    for (int u = 0; u < gpt_num_units(l); u++) {
        size_t offset, count;
        gpt_unit_range(l, u, &offset, &count);
        if (count == 0) continue;
        const float *buf = widen_grads(r, u, &r->unit_only);
        ss += layout_counted_sum_squares(l, r->tensors, offset, count, buf);
    }
    return layout_model_sum(l, ss);
}

/* AdamW on the master weights from the stored gradients times factor,
 * widened a unit at a time (AdamW is elementwise: the same step as one
 * call on the whole buffer) */
static void half_grads_adamw(ReplicatedStates *r, const AdamWStep *s, float factor) {
    const GPTLayout *l = r->layout;
    for (int u = 0; u < gpt_num_units(l); u++) {
        size_t o, count;
        gpt_unit_range(l, u, &o, &count);
        if (count == 0) continue;
        float *buf = widen_grads(r, u, &r->unit_only);
        if (factor != 1.0f) scale_inplace(buf, factor, count);
        adamw_update(r->params + o, buf, r->adam_m + o, r->adam_v + o, count, s->lr, s->beta1,
                     s->beta2, s->eps, s->weight_decay, s->t);
    }
}

static void half_grads_init(ReplicatedStates *r) {
    const GPTLayout *l = r->layout;
    size_t offset, embed;
    gpt_unit_range(l, GPT_UNIT_EMBED, &offset, &embed);
    const size_t other = gpt_largest_unit_but_embeddings(l);
    r->grad_embed_unit = embed ? mem_alloc(MEM_WORKSPACE, embed * sizeof(float)) : NULL;
    r->grad_one_unit = other ? mem_alloc(MEM_WORKSPACE, other * sizeof(float)) : NULL;
    r->grads_open = -1;
    gpt_params_view(l, NULL, &r->unit_only);
    r->hooks.grads_begin = half_grads_begin;
    r->hooks.grads_ready = half_grads_ready;
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
    const int half = half_grads(r);
    /* a pipeline's last stage never readies the embeddings (model.h) */
    if (half) close_grads(r, GPT_UNIT_EMBED);
    if (r->sync) r->sync->finish(r->sync->ctx, r->grads, r->n);
    /* sequence parallelism: each TP rank's layernorms saw its rows only */
    if (r->layout->sp && half) half_sum_layernorm_grads(r);
    else if (r->layout->sp) r->layout->sp_ops->sum_layernorm_grads(r->layout, &r->g);
    /* a pipeline: wte's two copies, each with its stage's share */
    if (r->layout->pp > 1) r->layout->sum_tied_embedding(r->layout, r->grads);
    /* each micro-batch's backward gave the gradient of its own mean loss:
     * divided now in fp32, at the update in 2 bytes (with the loss scale) */
    r->unscale = r->scaler.scale;
    if (micro_batches > 1 && half) r->unscale *= (float)micro_batches;
    else if (micro_batches > 1) scale_inplace(r->grads, 1.0f / micro_batches, r->n);
    /* the unscaling's square out of the sum (1 but under fp16 or 2-byte
     * accumulation); only fp16 skips a step whose gradients overflowed:
     * elsewhere a non-finite gradient is a divergence, which the loop
     * reports */
    const double ss = half ? half_sum_squares(r) : layout_sum_squares(r->layout, r->tensors,
                                                                       r->grads);
    r->scaler.overflowed = r->layout->cfg.precision == PRECISION_FP16 && !isfinite(ss);
    return ss / ((double)r->unscale * r->unscale);
}

/* clip, and under fp16 the loss scale divided out, in one scaling */
static void replicated_update(void *ctx, const AdamWStep *s) {
    ReplicatedStates *r = ctx;
    if (r->scaler.overflowed) {  /* skipped: the master weights and moments stay */
        scaler_after_step(&r->scaler);
        return;
    }
    const float factor = s->clip / r->unscale;
    if (half_grads(r)) {
        half_grads_adamw(r, s, factor);
    } else {
        if (factor != 1.0f) scale_inplace(r->grads, factor, r->n);
        adamw_update(r->params, r->grads, r->adam_m, r->adam_v, r->n, s->lr, s->beta1, s->beta2,
                     s->eps, s->weight_decay, s->t);
    }
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
    r->grads = mem_alloc(MEM_GRADS, r->n * precision_bytes(grad_precision(r)));
    r->adam_m = mem_alloc(MEM_OPTIMIZER, r->n * sizeof(float));
    r->adam_v = mem_alloc(MEM_OPTIMIZER, r->n * sizeof(float));
    gpt_init_params(layout, seed, 0, r->n, r->params);
    gpt_params_view(layout, r->params, &r->p);
    r->hooks = (ModelHooks){.ctx = r};
    if (sync && sync->grads_ready) r->hooks.grads_ready = replicated_grads_ready;
    r->scaler = (LossScaler){.scale = 1.0f};
    r->unscale = 1.0f;
    r->grads_open = -1;
    if (layout->cfg.precision != PRECISION_FP32) mixed_init(r, scaler);
    /* 2-byte gradients: views of one unit at a time (NULL until begun) */
    gpt_params_view(layout, grad_precision(r) == PRECISION_FP32 ? r->grads : NULL, &r->g);
    if (grad_precision(r) != PRECISION_FP32) half_grads_init(r);
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
    mem_free(r->grad_embed_unit);
    mem_free(r->grad_one_unit);
    gpt_params_view_free(&r->unit_only);
}
