#include "ddp_sync.h"

#include <stdlib.h>

#include "check.h"

/* GradSync's callbacks, by mode */
static void naive_finish(void *ctx, void *grads, size_t n) { (void)n; ddp_naive_sync(ctx, grads); }
static void bucketed_finish(void *ctx, void *grads, size_t n) {
    (void)n;
    ddp_bucketed_sync(ctx, grads);
}
static void overlap_begin(void *ctx, void *grads, int last) { ddp_overlap_begin(ctx, grads, last); }
static void overlap_ready(void *ctx, size_t offset, size_t count) {
    ddp_overlap_on_ready(ctx, offset, count);
}
static void overlap_finish(void *ctx, void *grads, size_t n) {
    (void)n;
    ddp_overlap_finish(ctx, grads);
}

void ddp_sync_init(DdpSync *s, Comm *dp, const GPTLayout *l, DdpMode mode, size_t bucket_bytes,
                   size_t first_bytes) {
    int ntensors = gpt_num_tensors(l);
    s->tensors = calloc((size_t)ntensors, sizeof *s->tensors);
    Bucket *buckets = calloc((size_t)ntensors, sizeof *buckets);
    CommRequest *requests = calloc((size_t)ntensors, sizeof *requests);
    CHECK(s->tensors && buckets && requests, "out of memory");
    gpt_tensor_table(l, s->tensors);
    const CommDtype dtype = comm_dtype_of(gpt_grad_precision(&l->cfg));
    const size_t elem = comm_dtype_size(dtype);
    s->ddp = (Ddp){.mode = mode, .dp = dp, .dtype = dtype, .tensors = s->tensors,
                   .ntensors = ntensors, .buckets = buckets, .requests = requests};
    /* without a first bucket size, the core's plan from the core's function */
    if (mode != DDP_NAIVE && first_bytes > 0)
        s->ddp.nbuckets = ddp_build_buckets_first(s->tensors, ntensors, first_bytes, bucket_bytes,
                                                  elem, buckets);
    else if (mode != DDP_NAIVE)
        s->ddp.nbuckets = ddp_build_buckets(s->tensors, ntensors, bucket_bytes, elem, buckets);
    s->sync = (GradSync){.ctx = &s->ddp};
    if (mode == DDP_NAIVE) s->sync.finish = naive_finish;
    if (mode == DDP_BUCKETED) s->sync.finish = bucketed_finish;
    if (mode == DDP_OVERLAPPED) {
        s->sync.begin_backward = overlap_begin;
        s->sync.grads_ready = overlap_ready;
        s->sync.finish = overlap_finish;
    }
}

void ddp_sync_free(DdpSync *s) {
    free(s->tensors);
    free(s->ddp.buckets);
    free(s->ddp.requests);
}
