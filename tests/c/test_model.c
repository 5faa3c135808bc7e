/* The model's hooks (model.h):
 *   - the gradient ranges reported ready tile the buffer exactly once, from
 *     its end to its start, and each is final when reported;
 *   - the hooks come in the documented order (what ZeRO-3's gathers rely on);
 *   - a layout that points each unit's views at buffers of its own (ZeRO's
 *     gathered parameters, its gradient working buffers) gets bit-identical
 *     losses and gradients. */
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "backward_kernels.h"
#include "model.h"
#include "rng.h"
#include "unit.h"

typedef struct {
    const GPTLayout *m;
    const float *grads;
    float *snapshot;      /* the buffer as each range was reported */
    size_t total, next_end;
    int calls, out_of_order;
    char *reported;       /* per element: reported how many times */
    char events[512];     /* "n0 d0 ..." for needed/done, "b0 r0" for begin/ready */
} HookLog;

static void log_event(HookLog *h, char kind, int unit) {
    size_t len = strlen(h->events);
    snprintf(h->events + len, sizeof h->events - len, "%s%c%d", len ? " " : "", kind, unit);
}

static void on_needed(void *ctx, int unit, int backward) { (void)backward; log_event(ctx, 'n', unit); }
static void on_done(void *ctx, int unit, int backward) { (void)backward; log_event(ctx, 'd', unit); }
static void on_begin(void *ctx, int unit) { log_event(ctx, 'b', unit); }

static void on_ready(void *ctx, int unit) {
    HookLog *h = ctx;
    log_event(h, 'r', unit);
    size_t offset, count;
    gpt_unit_range(h->m, unit, &offset, &count);
    h->calls++;
    if (offset + count != h->next_end) h->out_of_order++;
    h->next_end = offset;
    for (size_t i = offset; i < offset + count && i < h->total; i++) h->reported[i]++;
    memcpy(h->snapshot + offset, h->grads + offset, count * sizeof(float));
}

/* A layout with private copies: parameters are copied into a fresh buffer
 * when needed (freed when done), gradients accumulate in a fresh buffer per
 * unit and are added to the real buffer when ready. */
typedef struct {
    const GPTLayout *m;
    const float *params;
    float *grads;
    GPTParams *p, *g;
    float *param_copy[16], *grad_copy[16];
    int live_params;
} Private;

static void private_needed(void *ctx, int unit, int backward) {
    (void)backward;
    Private *v = ctx;
    size_t offset, count;
    gpt_unit_range(v->m, unit, &offset, &count);
    v->param_copy[unit] = malloc(count * sizeof(float));
    memcpy(v->param_copy[unit], v->params + offset, count * sizeof(float));
    gpt_unit_view(v->m, unit, v->param_copy[unit], v->p);
    v->live_params++;
}

static void private_done(void *ctx, int unit, int backward) {
    (void)backward;
    Private *v = ctx;
    memset(v->param_copy[unit], 0xff, sizeof(float));  /* poison: a later read would show */
    free(v->param_copy[unit]);
    v->param_copy[unit] = NULL;
    v->live_params--;
}

static void private_begin(void *ctx, int unit) {
    Private *v = ctx;
    size_t offset, count;
    gpt_unit_range(v->m, unit, &offset, &count);
    v->grad_copy[unit] = calloc(count, sizeof(float));
    gpt_unit_view(v->m, unit, v->grad_copy[unit], v->g);
}

static void private_ready(void *ctx, int unit) {
    Private *v = ctx;
    size_t offset, count;
    gpt_unit_range(v->m, unit, &offset, &count);
    for (size_t i = 0; i < count; i++) v->grads[offset + i] += v->grad_copy[unit][i];
    free(v->grad_copy[unit]);
    v->grad_copy[unit] = NULL;
}

int main(void) {
    kernels_set_cpu_backward(program_backward_kernels());
    GPTConfig cfg = {.vocab_size = 32, .ctx_len = 8, .n_layer = 3, .n_head = 2, .n_embd = 8};
    const GPTLayout m = gpt_layout_whole(&cfg);
    const int B = 2, T = 8;
    size_t n = gpt_num_params(&cfg);
    float *params = mem_alloc(MEM_PARAMS, n * sizeof(float));
    float *grads = mem_alloc(MEM_GRADS, n * sizeof(float));
    float *grads_private = mem_alloc(MEM_GRADS, n * sizeof(float));
    gpt_init_params(&m, 5, 0, n, params);
    GPTParams p, g;
    gpt_params_view(&m, params, &p);
    gpt_params_view(&m, grads, &g);
    GPTActs a;
    BackwardScratch s;
    gpt_acts_alloc(&m, B, T, &a, &s);
    for (int i = 0; i < B * T; i++) {
        a.inputs[i] = (int)rng_below(5, RNG_STREAM_TEST, (uint64_t)i, 0, 32);
        a.targets[i] = (int)rng_below(5, RNG_STREAM_TEST, (uint64_t)i, 1, 32);
    }

    /* units tile the buffer in order */
    size_t next = 0;
    for (int u = 0; u < gpt_num_units(&m); u++) {
        size_t offset, count;
        gpt_unit_range(&m, u, &offset, &count);
        EXPECT(offset == next, "unit %d starts at %zu, expected %zu", u, offset, next);
        next = offset + count;
    }
    EXPECT(next == n, "units cover %zu of %zu parameters", next, n);

    HookLog h = {.m = &m, .grads = grads, .total = n, .next_end = n};
    h.snapshot = calloc(n, sizeof(float));
    h.reported = calloc(n, 1);
    ModelHooks logging = {&h, on_needed, on_done, on_begin, on_ready, NULL};
    float loss = gpt_forward(&m, &p, &a, &logging);
    EXPECT(strcmp(h.events, "n0 n1 d1 n2 d2 n3 d3 n4 d4 d0") == 0, "forward hooks: %s", h.events);
    h.events[0] = '\0';
    gpt_backward(&m, &p, &g, &a, &s, &logging);
    EXPECT(strcmp(h.events, "n0 b0 d0 n4 b4 d4 r4 n3 b3 d3 r3 n2 b2 d2 r2 n1 b1 d1 r1 r0") == 0,
           "backward hooks: %s", h.events);

    size_t once = 0;
    for (size_t i = 0; i < n; i++) once += h.reported[i] == 1;
    EXPECT(h.calls == cfg.n_layer + 2, "%d ranges reported, expected L + 2 = %d", h.calls, cfg.n_layer + 2);
    EXPECT(h.out_of_order == 0, "%d ranges not contiguous from the end", h.out_of_order);
    EXPECT(h.next_end == 0, "the ranges stop at offset %zu, not 0", h.next_end);
    EXPECT(once == n, "%zu of %zu gradients reported exactly once", once, n);
    EXPECT(memcmp(h.snapshot, grads, n * sizeof(float)) == 0,
           "a gradient changed after its range was reported");

    /* private copies: views start NULL, so a read outside needed/done crashes */
    GPTParams pv, gv;
    gpt_params_view(&m, NULL, &pv);
    gpt_params_view(&m, NULL, &gv);
    Private v = {.m = &m, .params = params, .grads = grads_private, .p = &pv, .g = &gv};
    ModelHooks private_hooks = {&v, private_needed, private_done, private_begin, private_ready,
                                   NULL};
    float loss_private = gpt_forward(&m, &pv, &a, &private_hooks);
    EXPECT(v.live_params == 0, "%d units still gathered after forward", v.live_params);
    gpt_backward(&m, &pv, &gv, &a, &s, &private_hooks);
    EXPECT(v.live_params == 0, "%d units still gathered after backward", v.live_params);
    EXPECT(loss_private == loss, "loss %.9g with private copies, %.9g without", loss_private, loss);
    EXPECT(memcmp(grads_private, grads, n * sizeof(float)) == 0,
           "gradients through private buffers differ from the plain backward pass");

    free(h.snapshot);
    free(h.reported);
    gpt_acts_free(&a, &s);
    gpt_params_view_free(&p);
    gpt_params_view_free(&g);
    gpt_params_view_free(&pv);
    gpt_params_view_free(&gv);
    mem_free(params);
    mem_free(grads);
    mem_free(grads_private);
    return unit_report("test_model");
}
