#include "model_states.h"

#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "check.h"
#include "device.h"
#include "kernels.h"

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

static double replicated_finish_grads(void *ctx, int micro_batches) {
    ReplicatedStates *r = ctx;
    if (r->sync) r->sync->finish(r->sync->ctx, r->grads, r->n);
    /* sequence parallelism: each TP rank's layernorms saw its rows only */
    if (r->layout->sp) r->layout->sp_ops->sum_layernorm_grads(r->layout, &r->g);
    /* a pipeline: wte's two copies, each with its stage's share */
    if (r->layout->pp > 1) r->layout->sum_tied_embedding(r->layout, r->grads);
    /* each micro-batch's backward gave the gradient of its own mean loss */
    if (micro_batches > 1) scale_inplace(r->grads, 1.0f / micro_batches, r->n);
    return layout_sum_squares(r->layout, r->tensors, r->grads);
}

static void replicated_update(void *ctx, const AdamWStep *s) {
    ReplicatedStates *r = ctx;
    if (s->clip < 1.0f) scale_inplace(r->grads, s->clip, r->n);
    adamw_update(r->params, r->grads, r->adam_m, r->adam_v, r->n, s->lr, s->beta1, s->beta2,
                 s->eps, s->weight_decay, s->t);
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
                            const GradSync *sync, ModelStates *st) {
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
    *st = (ModelStates){r, &r->p, &r->g, &r->hooks, replicated_begin_step,
                        replicated_begin_backward, replicated_finish_grads, replicated_update,
                        replicated_gather_params, replicated_local_params, replicated_held};
}

void replicated_states_free(ReplicatedStates *r) {
    free(r->tensors);
    gpt_params_view_free(&r->p);
    gpt_params_view_free(&r->g);
    mem_free(r->params);
    mem_free(r->grads);
    mem_free(r->adam_m);
    mem_free(r->adam_v);
}
