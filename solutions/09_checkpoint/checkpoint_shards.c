/* Lab 09: distributed checkpoints (checkpoint_shards.h). */
#include "checkpoint_shards.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "device.h"

/* SOLUTION ONLY BEGIN */
/* The part [lo, hi) of piece pc (its floats row-major from its
 * local_offset in the flat buffer) as at most three row-aligned
 * rectangles; at: where flat element lo is in the rank's buffer */
static void rects_of_range(CkptRects *out, int kind, int tensor, const ShardPiece *pc, size_t lo,
                           size_t hi, size_t at) {
    const size_t cols = (size_t)pc->cols;
    while (lo < hi) {
        const size_t k = lo - pc->local_offset, r = k / cols, c = k % cols;
        size_t rows = 1, width = cols - c;
        if (c == 0 && hi - lo >= cols) rows = (hi - lo) / cols, width = cols;
        else if (width > hi - lo) width = hi - lo;
        ckpt_rects_push(out, (CkptRect){kind, tensor, pc->row0 + (int)r, (int)rows,
                                        pc->col0 + (int)c, (int)width, at, cols});
        lo += rows * width;
        at += rows * width;
    }
}

/* SOLUTION ONLY END */
void ckpt_rects_of_runs(const TensorInfo *t, int nt, int kind, const CkptRun *runs, int nruns,
                        const CkptShare *share, CkptRects *out) {
    /* BEGIN SOLUTION */
    for (int i = 0; i < nruns; i++) {
        const size_t a = runs[i].flat, b = runs[i].flat + runs[i].count;
        for (int j = 0; j < nt; j++) {
            const CkptShare sh = share ? share[j] : (CkptShare){0, 1};
            if (sh.parts == 0) continue;
            for (int k = 0; k < t[j].npieces; k++) {
                const ShardPiece *pc = &t[j].piece[k];
                const size_t size = (size_t)pc->rows * pc->cols;
                /* this rank's part of the piece: [part size / parts, (part + 1) size / parts) */
                const size_t p0 = pc->local_offset + size * sh.part / sh.parts;
                const size_t p1 = pc->local_offset + size * (sh.part + 1) / sh.parts;
                const size_t lo = a > p0 ? a : p0, hi = b < p1 ? b : p1;
                if (lo < hi) rects_of_range(out, kind, j, pc, lo, hi, runs[i].local + (lo - a));
            }
        }
    }
    /* END SOLUTION */
}

void ckpt_shard_rects(const GPTLayout *l, const CkptHeld *held, int dp_rank, int dp,
                      CkptRects *out) {
    /* BEGIN SOLUTION */
    const int nt = gpt_num_tensors(l);
    TensorInfo *t = malloc((size_t)nt * sizeof *t);
    CkptShare *share = malloc((size_t)nt * sizeof *share);
    CHECK(t && share, "out of memory");
    gpt_tensor_table(l, t);
    for (int kind = 0; kind < CKPT_KINDS; kind++) {
        for (int i = 0; i < nt; i++) {
            /* CP ranks hold copies of what is replicated, their own
             * shards of what is sharded (over dp x cp) */
            const int first = !t[i].pipeline_copy && (t[i].split || l->tp_rank == 0) &&
                              (l->cp_rank == 0 || !held->replicated[kind]);
            if (!first) share[i] = (CkptShare){0, 0};
            else if (!held->replicated[kind]) share[i] = (CkptShare){0, 1};
            else if (t[i].expert_split) share[i] = (CkptShare){dp_rank / l->ep, dp / l->ep};
            else share[i] = (CkptShare){dp_rank, dp};
        }
        ckpt_rects_of_runs(t, nt, kind, held->runs[kind], held->nruns[kind], share, out);
    }
    free(share);
    free(t);
    /* END SOLUTION */
}

size_t ckpt_reshard(const CkptRects *want, const CkptRects *saved, CkptReadRow read, void *ctx,
                    float *dest) {
    /* BEGIN SOLUTION */
    size_t copied = 0;
    for (size_t i = 0; i < want->n; i++) {
        const CkptRect *w = &want->r[i];
        for (size_t j = 0; j < saved->n; j++) {
            const CkptRect *s = &saved->r[j];
            if (s->kind != w->kind || s->tensor != w->tensor) continue;
            const int r0 = w->row0 > s->row0 ? w->row0 : s->row0;
            const int r1 = w->row0 + w->rows < s->row0 + s->rows ? w->row0 + w->rows
                                                                   : s->row0 + s->rows;
            const int c0 = w->col0 > s->col0 ? w->col0 : s->col0;
            const int c1 = w->col0 + w->cols < s->col0 + s->cols ? w->col0 + w->cols
                                                                   : s->col0 + s->cols;
            if (r0 >= r1 || c0 >= c1) continue;
            for (int r = r0; r < r1; r++)
                read(ctx, j, r - s->row0, c0 - s->col0, c1 - c0,
                     dest + w->local + (size_t)(r - w->row0) * w->stride + (size_t)(c0 - w->col0));
            copied += (size_t)(r1 - r0) * (size_t)(c1 - c0);
        }
    }
    return copied;
    /* END SOLUTION */
}

int ckpt_load(const char *ckdir, const GPTLayout *l, const CkptHeld *held) {
    /* BEGIN SOLUTION */
    CkptSaved *saved = ckpt_saved_open(ckdir);
    const int nt = gpt_num_tensors(l);
    TensorInfo *t = malloc((size_t)nt * sizeof *t);
    CHECK(t, "out of memory");
    gpt_tensor_table(l, t);
    for (int kind = 0; kind < CKPT_KINDS; kind++) {
        CkptRects want = {0};
        ckpt_rects_of_runs(t, nt, kind, held->runs[kind], held->nruns[kind], NULL, &want);
        size_t need = 0;
        for (size_t i = 0; i < want.n; i++) need += (size_t)want.r[i].rows * want.r[i].cols;
        const size_t n = ckpt_held_floats(held, kind);
        float *host = calloc(n ? n : 1, sizeof(float));  /* ZeRO's padding stays 0 */
        CHECK(host, "out of memory for loading %s", ckpt_kind_name(kind));
        /* the saved rectangles do not overlap (one writer per element), so
         * the floats copied count each wanted element once when all are there */
        const size_t got = ckpt_reshard(&want, ckpt_saved_rects(saved), ckpt_saved_read_row,
                                        saved, host);
        if (got > need)
            USER_ERROR("%s: the checkpoint's %s rectangles overlap (%zu floats found for the %zu "
                       "this rank needs): an element saved twice, by two ranks (saved by %s)",
                       ckdir, ckpt_kind_name(kind), got, need, ckpt_saved_by(saved));
        if (got < need)
            USER_ERROR("%s: the checkpoint holds %zu of the %zu %s floats this rank needs "
                       "(saved by %s)", ckdir, got, need, ckpt_kind_name(kind),
                       ckpt_saved_by(saved));
        if (n) device_copy(held->buf[kind], host, n * sizeof(float));
        free(host);
        ckpt_rects_free(&want);
    }
    free(t);
    const int steps = ckpt_saved_step(saved);
    ckpt_saved_close(saved);
    return steps;
    /* END SOLUTION */
}

void ckpt_commit(const char *tmp_dir, const char *final_dir, const char *index, size_t len) {
    /* BEGIN SOLUTION */
    char path[1200];
    snprintf(path, sizeof path, "%s/index.txt", tmp_dir);
    FILE *f = fopen(path, "w");
    IO_CHECK(f && fwrite(index, 1, len, f) == len, "writing %s", path);
    IO_CHECK(fflush(f) == 0 && fclose(f) == 0, "closing %s", path);
    ckpt_fsync_path(path);
    /* the directory's entries, then one rename makes the whole checkpoint
     * appear at once, then the parent's entry */
    ckpt_fsync_path(tmp_dir);
    IO_CHECK(rename(tmp_dir, final_dir) == 0, "renaming %s to %s", tmp_dir, final_dir);
    char parent[1200];
    snprintf(parent, sizeof parent, "%s", final_dir);
    char *slash = strrchr(parent, '/');
    if (slash) *slash = '\0';
    ckpt_fsync_path(slash ? parent : ".");
    /* END SOLUTION */
}

/* ---- the extension: --save-async ---- */

/* SOLUTION ONLY BEGIN */
/* The writer thread: the file from the snapshot, nothing else (no MPI, no
 * exit: a failure is left in a->err for the main thread) */
static void *write_snapshot(void *arg) {
    CkptAsync *a = arg;
    a->err = ckpt_write_rank_file(a->path, a->rank, &a->rects, a->snapshot, &a->bytes,
                                  &a->checksum, a->why, sizeof a->why);
    return NULL;
}

/* SOLUTION ONLY END */
void ckpt_async_begin(CkptAsync *a, const char *path, const CkptRects *rects,
                      const CkptHeld *held) {
    /* BEGIN SOLUTION */
    CHECK(!a->running, "a checkpoint writer started before the last one was joined");
    /* the thread outlives the caller's path and rectangles: its own copies */
    snprintf(a->path, sizeof a->path, "%s", path);
    a->rects = (CkptRects){0};
    for (size_t i = 0; i < rects->n; i++) ckpt_rects_push(&a->rects, rects->r[i]);
    /* the states change at the next step: copy them now, in file order */
    a->snapshot = malloc((ckpt_rects_floats(rects) + 1) * sizeof(float));
    CHECK(a->snapshot, "out of memory for the snapshot of %s", path);
    ckpt_gather_rects(held, rects, a->snapshot);
    a->err = 0;
    const int err = pthread_create(&a->thread, NULL, write_snapshot, a);
    if (err) die_errno_at(__FILE__, __LINE__, err, "starting the writer of %s", path);
    a->running = 1;
    /* END SOLUTION */
}

void ckpt_async_wait(CkptAsync *a, uint64_t *bytes, uint64_t *checksum) {
    /* BEGIN SOLUTION */
    CHECK(a->running, "no checkpoint writer to wait for");
    const int err = pthread_join(a->thread, NULL);
    if (err) die_errno_at(__FILE__, __LINE__, err, "joining the writer of %s", a->path);
    a->running = 0;
    *bytes = a->bytes;
    *checksum = a->checksum;
    free(a->snapshot);
    a->snapshot = NULL;
    ckpt_rects_free(&a->rects);
    /* END SOLUTION */
}
