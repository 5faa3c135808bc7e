#include "composed_zero1.h"

#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "device.h"

static void begin_step(void *ctx) { zero_begin_step(&((ComposedZero1 *)ctx)->z); }

static void begin_backward(void *ctx, int last) {
    (void)ctx;
    (void)last;
}

static double finish_grads(void *ctx, int micro_batches) {
    return composed_zero1_finish_grads(ctx, micro_batches);
}

static void update(void *ctx, const AdamWStep *s) { zero_update(&((ComposedZero1 *)ctx)->z, s); }

/* ZeRO-1 keeps every unit whole after the update's all-gather: the
 * standard layout is the layout's buffer, unpadded (host memory), then
 * assembled over tp and pp */
static void gathered(ComposedZero1 *c, float *out, int mine) {
    const Zero *z = &c->z;
    float *flat = malloc(c->layout->num_params * sizeof(float));
    CHECK(flat, "out of memory for gathering the parameters");
    for (int u = 0; u < z->nunits; u++)
        device_copy(flat + z->units[u].offset,
                    comm_at(z->params_full, COMM_FLOAT, z->units[u].padded_offset),
                    z->units[u].count * sizeof(float));
    float *whole = layout_gather_standard(c->layout, flat, mine);
    if (out) memcpy(out, whole, gpt_num_params(&c->layout->cfg) * sizeof(float));
    free(whole);
    free(flat);
}
static void gather_params(void *ctx, float *out) { gathered(ctx, out, 0); }
static void local_params(void *ctx, float *out) { gathered(ctx, out, 1); }
static void held(void *ctx, CkptHeld *h) { zero_held(&((ComposedZero1 *)ctx)->z, h); }

void composed_zero1_init(ComposedZero1 *c, const GPTLayout *layout, Comm *group,
                         unsigned long long seed) {
    memset(c, 0, sizeof *c);
    c->layout = layout;
    c->norm = comm_split(group, 0, group->rank, "zero-norm");
    c->tensors = malloc((size_t)gpt_num_tensors(layout) * sizeof *c->tensors);
    CHECK(c->tensors, "out of memory");
    gpt_tensor_table(layout, c->tensors);
    zero_init(&c->z, 1, 0, group, c->norm, layout, seed);
    c->hooks = (ModelHooks){.ctx = c};
    c->states = (ModelStates){c, &c->z.p, &c->z.g, &c->hooks, begin_step, begin_backward,
                              finish_grads, update, gather_params, local_params, held,
                              NULL, NULL};
}

void composed_zero1_free(ComposedZero1 *c) {
    zero_free(&c->z);
    free(c->tensors);
    comm_free(c->norm);
}
