#include "ep_sync.h"

#include <stdlib.h>

#include "check.h"
#include "expert_parallel.h"

static void ep_finish(void *ctx, void *grads, size_t n) {
    (void)n;
    const EpSync *s = ctx;
    ep_sync_grads(s->layout, s->dp, s->edp, s->tensors, grads);
}

void ep_sync_init(EpSync *s, const GPTLayout *l, Comm *dp, Comm *edp) {
    s->layout = l;
    s->dp = dp;
    s->edp = edp;
    s->tensors = malloc((size_t)gpt_num_tensors(l) * sizeof *s->tensors);
    CHECK(s->tensors, "out of memory");
    gpt_tensor_table(l, s->tensors);
    s->sync = (GradSync){.ctx = s, .finish = ep_finish};
}

void ep_sync_free(EpSync *s) {
    free(s->tensors);
    s->tensors = NULL;
}
