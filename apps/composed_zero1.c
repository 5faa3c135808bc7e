#include "composed_zero1.h"

#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "check.h"
#include "device.h"
#include "kernels.h"

/* The run comes first: every callback takes it as its ComposedZero1 */
static ComposedZero1 *zero1_of(void *ctx) { return &((ComposedZero1Run *)ctx)->c; }

static void begin_step(void *ctx) { zero_begin_step(&zero1_of(ctx)->z); }

static void begin_backward(void *ctx, int last) {
    (void)ctx;
    (void)last;
}

/* a pipeline's last stage never readies the embeddings' unit (model.h):
 * in mixed precision its widened gradients are rounded back here, before
 * lab 10's finish reads them */
static double finish_grads(void *ctx, int micro_batches) {
    ComposedZero1Run *r = ctx;
    zero_unview_grads(&r->c.z, GPT_UNIT_EMBED);
    return zero_scaled_finish(&r->scaled, &r->c.z, composed_zero1_finish_grads(&r->c, micro_batches));
}

static void update(void *ctx, const AdamWStep *s) {
    ComposedZero1Run *r = ctx;
    zero_scaled_update(&r->scaled, &r->c.z, s);
}

/* unit u of the fp32 weights into flat (host memory): ZeRO-1 keeps every
 * unit whole after the update's all-gather, in fp32; in mixed precision
 * the master is sharded, gathered here over the group (not counted: an
 * output), and mine (what this rank's passes read) is the compute copy
 * widened */
static void unit_weights(Zero *z, int u, int mine, float *flat) {
    const ZeroUnit *x = &z->units[u];
    const void *unit = comm_at(z->params_full, z->dtype, x->padded_offset);
    if (!z->master) {
        device_copy(flat + x->offset, unit, x->count * sizeof(float));
        return;
    }
    float *whole = malloc((size_t)z->dp->size * x->shard * sizeof(float));
    CHECK(whole, "out of memory for gathering the parameters");
    if (mine) {  /* the unit widened as a pass reads it, through its first view */
        zero_view_params(z, u, unit);
        device_copy(whole, u == GPT_UNIT_EMBED ? z->p.wte : u == z->nunits - 1 ? z->p.lnfw
                           : z->p.blocks[u - 1].ln1w, x->count * sizeof(float));
        zero_unview_params(z, u);
    } else {
        comm_allgather_untraced(z->dp, zero_owned_master(z, u), whole,
                                (size_t)z->dp->size * x->shard, COMM_FLOAT);
    }
    memcpy(flat + x->offset, whole, x->count * sizeof(float));
    free(whole);
}

/* the standard layout: the layout's buffer, unpadded, then assembled over
 * tp and pp */
static void gathered(ComposedZero1 *c, float *out, int mine) {
    Zero *z = &c->z;
    float *flat = malloc(c->layout->num_params * sizeof(float));
    CHECK(flat, "out of memory for gathering the parameters");
    for (int u = 0; u < z->nunits; u++) unit_weights(z, u, mine, flat);
    float *whole = layout_gather_standard(c->layout, flat, mine);
    if (out) memcpy(out, whole, gpt_num_params(&c->layout->cfg) * sizeof(float));
    free(whole);
    free(flat);
}
static void gather_params(void *ctx, float *out) { gathered(zero1_of(ctx), out, 0); }
static void local_params(void *ctx, float *out) { gathered(zero1_of(ctx), out, 1); }
static void held(void *ctx, CkptHeld *h) { zero_held(&zero1_of(ctx)->z, h); }
static void loaded(void *ctx) { zero_loaded(&zero1_of(ctx)->z); }

/* mixed precision: the passes read the compute copy a unit at a time,
 * widened, and 2-byte gradients accumulate a unit at a time in fp32
 * (lab 03's given views) */
static void params_needed(void *ctx, int u, int backward) {
    (void)backward;
    Zero *z = &zero1_of(ctx)->z;
    zero_view_params(z, u, comm_at(z->params_full, z->dtype, z->units[u].padded_offset));
}
static void params_done(void *ctx, int u, int backward) {
    (void)backward;
    zero_unview_params(&zero1_of(ctx)->z, u);
}
static void grads_begin(void *ctx, int u) { zero_view_grads(&zero1_of(ctx)->z, u); }
static void grads_ready(void *ctx, int u) { zero_unview_grads(&zero1_of(ctx)->z, u); }

void composed_zero1_init(ComposedZero1Run *r, const GPTLayout *layout, Comm *group,
                         const TrainOptions *o, Comm *world) {
    memset(r, 0, sizeof *r);
    ComposedZero1 *c = &r->c;
    c->layout = layout;
    c->norm = comm_split(group, 0, group->rank, "zero-norm");
    c->tensors = malloc((size_t)gpt_num_tensors(layout) * sizeof *c->tensors);
    CHECK(c->tensors, "out of memory");
    gpt_tensor_table(layout, c->tensors);
    zero_init(&c->z, 1, 0, 0, group, c->norm, layout, o->seed);
    /* the in-place reduce-scatters' scratch, up front: the first step's
     * pipeline messages meet it as every later step's do */
    size_t widest = 0;
    for (int u = 0; u < c->z.nunits; u++)
        if (c->z.units[u].count && c->z.units[u].shard > widest) widest = c->z.units[u].shard;
    comm_reserve_scratch(group, widest * comm_dtype_size(c->z.grad_dtype));
    zero_scaled_init(&r->scaled, o, world);
    c->hooks = (ModelHooks){.ctx = r, .loss_scale = zero_scaled_scale(&r->scaled)};
    if (c->z.master) {
        c->hooks.params_needed = params_needed;
        c->hooks.params_done = params_done;
    }
    if (c->z.grad_dtype != COMM_FLOAT) {
        c->hooks.grads_begin = grads_begin;
        c->hooks.grads_ready = grads_ready;
    }
    c->states = (ModelStates){r, &c->z.p, &c->z.g, &c->hooks, begin_step, begin_backward,
                              finish_grads, update, gather_params, local_params, held,
                              c->z.master ? loaded : NULL, zero_scaled_scaler(&r->scaled)};
}

void composed_zero1_free(ComposedZero1Run *r) {
    zero_free(&r->c.z);
    free(r->c.tensors);
    comm_free(r->c.norm);
    zero_scaled_free(&r->scaled);
}
