/* Lab 09: distributed checkpoints (checkpoint_shards.h). */
#include "checkpoint_shards.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "device.h"

void ckpt_rects_of_runs(const TensorInfo *t, int nt, int kind, const CkptRun *runs, int nruns,
                        const CkptShare *share, CkptRects *out) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

void ckpt_shard_rects(const GPTLayout *l, const CkptHeld *held, int dp_rank, int dp,
                      CkptRects *out) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

size_t ckpt_reshard(const CkptRects *want, const CkptRects *saved, CkptReadRow read, void *ctx,
                    float *dest) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

int ckpt_load(const char *ckdir, const GPTLayout *l, const CkptHeld *held) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

void ckpt_commit(const char *tmp_dir, const char *final_dir, const char *index, size_t len) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

/* ---- the extension: --save-async ---- */

void ckpt_async_begin(CkptAsync *a, const char *path, const CkptRects *rects,
                      const CkptHeld *held) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

void ckpt_async_wait(CkptAsync *a, uint64_t *bytes, uint64_t *checksum) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}
