#include "widened.h"

#include <string.h>

#include "check.h"
#include "kernels.h"
#include "model.h"

static size_t unit_count(const GPTLayout *l, int u) {
    size_t offset, count;
    gpt_unit_range(l, u, &offset, &count);
    return count;
}

void widened_init(WidenedUnits *w, const GPTLayout *l, int precision, MemCategory category) {
    const size_t embed = unit_count(l, GPT_UNIT_EMBED), other = gpt_largest_unit_but_embeddings(l);
    *w = (WidenedUnits){.layout = l, .precision = precision, .open = -1};
    w->embed = embed ? mem_alloc(category, embed * sizeof(float)) : NULL;
    w->other = other ? mem_alloc(category, other * sizeof(float)) : NULL;
}

void widened_free(WidenedUnits *w) {
    mem_free(w->embed);
    mem_free(w->other);
    w->embed = w->other = NULL;
}

float *widened_open(WidenedUnits *w, int u, const uint16_t *src, GPTParams *views) {
    const size_t count = unit_count(w->layout, u);
    float *copy = u == GPT_UNIT_EMBED ? w->embed : w->other;
    if (count == 0) return NULL;  /* another pipeline stage's */
    if (u == GPT_UNIT_EMBED && w->embed_open) return copy;
    if (u == GPT_UNIT_EMBED) {
        w->embed_open = 1;
    } else {
        CHECK(w->open < 0, "unit %d widened while unit %d is (one at a time besides the "
              "embeddings)", u, w->open);
        w->open = u;
    }
    widen_from_half(copy, src, count, w->precision);
    gpt_unit_view(w->layout, u, copy, views);
    return copy;
}

void widened_close(WidenedUnits *w, int u, uint16_t *dst) {
    const int open = u == GPT_UNIT_EMBED ? w->embed_open : w->open == u;
    if (!open) return;
    if (dst) narrow_to_half(dst, u == GPT_UNIT_EMBED ? w->embed : w->other,
                            unit_count(w->layout, u), w->precision);
    if (u == GPT_UNIT_EMBED) w->embed_open = 0;
    else w->open = -1;
}

void widened_sum_layernorm_grads(WidenedUnits *w, uint16_t *const *unit_start) {
    const GPTLayout *l = w->layout;
    GPTParams one;
    gpt_params_view(l, NULL, &one);
    for (int u = GPT_UNIT_EMBED + 1; u < gpt_num_units(l); u++) {
        memset(one.blocks, 0, (size_t)l->cfg.n_layer * sizeof(BlockParams));
        one.wte = one.wpe = one.lnfw = one.lnfb = NULL;
        if (!widened_open(w, u, unit_start[u], &one)) continue;
        l->sp_ops->sum_layernorm_grads(l, &one);
        widened_close(w, u, unit_start[u]);
    }
    gpt_params_view_free(&one);
}
