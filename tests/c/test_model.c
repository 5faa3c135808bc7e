/* The model's backward hook: the ranges it reports tile the gradient buffer
 * exactly once, from its end to its start, and each range is final when
 * reported (nothing later in the backward pass writes to it again). */
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "model.h"
#include "rng.h"
#include "unit.h"

typedef struct {
    const float *grads;
    float *snapshot;      /* the buffer as each range was reported */
    size_t total, next_end;
    int calls, out_of_order;
    char *reported;       /* per element: reported how many times */
} HookLog;

static void on_ready(void *ctx, size_t offset, size_t count) {
    HookLog *h = ctx;
    h->calls++;
    if (offset + count != h->next_end) h->out_of_order++;
    h->next_end = offset;
    for (size_t i = offset; i < offset + count && i < h->total; i++) h->reported[i]++;
    memcpy(h->snapshot + offset, h->grads + offset, count * sizeof(float));
}

int main(void) {
    GPTConfig cfg = {.vocab_size = 32, .ctx_len = 8, .n_layer = 3, .n_head = 2, .n_embd = 8};
    const int B = 2, T = 8;
    size_t n = gpt_num_params(&cfg);
    float *params = mem_alloc(MEM_PARAMS, n * sizeof(float));
    float *grads = mem_alloc(MEM_GRADS, n * sizeof(float));
    gpt_init_params(&cfg, 5, 0, n, params);
    GPTParams p, g;
    gpt_params_view(&cfg, params, &p);
    gpt_params_view(&cfg, grads, &g);
    GPTActs a;
    BackwardScratch s;
    gpt_acts_alloc(&cfg, B, T, &a, &s);
    for (int i = 0; i < B * T; i++) {
        a.inputs[i] = (int)rng_below(5, RNG_STREAM_TEST, (uint64_t)i, 0, 32);
        a.targets[i] = (int)rng_below(5, RNG_STREAM_TEST, (uint64_t)i, 1, 32);
    }
    HookLog h = {.grads = grads, .total = n, .next_end = n};
    h.snapshot = calloc(n, sizeof(float));
    h.reported = calloc(n, 1);
    gpt_forward(&cfg, &p, &a);
    gpt_backward_hooked(&cfg, &p, &g, &a, &s, on_ready, &h);

    size_t once = 0;
    for (size_t i = 0; i < n; i++) once += h.reported[i] == 1;
    EXPECT(h.calls == cfg.n_layer + 2, "%d ranges reported, expected L + 2 = %d", h.calls, cfg.n_layer + 2);
    EXPECT(h.out_of_order == 0, "%d ranges not contiguous from the end", h.out_of_order);
    EXPECT(h.next_end == 0, "the ranges stop at offset %zu, not 0", h.next_end);
    EXPECT(once == n, "%zu of %zu gradients reported exactly once", once, n);
    EXPECT(memcmp(h.snapshot, grads, n * sizeof(float)) == 0,
           "a gradient changed after its range was reported");
    free(h.snapshot);
    free(h.reported);
    gpt_acts_free(&a, &s);
    gpt_params_view_free(&p);
    gpt_params_view_free(&g);
    mem_free(params);
    mem_free(grads);
    return unit_report("test_model");
}
