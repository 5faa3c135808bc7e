/* Lab 09: distributed checkpoints.
 *
 * A rank's model states are flat buffers in its layout's order (layout.h),
 * and the shard map says which rows and columns of which global tensor
 * each piece of a buffer is. A checkpoint that only any layout can load is
 * written in that global language: rectangles of global tensors
 * (common/checkpoint.h's CkptRect), each element of each kind (parameters,
 * AdamW's m and v) written by exactly one rank. Loading is then a
 * geometry problem: the rectangles the new layout holds, intersected with
 * the saved ones.
 *
 * - ckpt_rects_of_runs: the geometry. A rank holds runs of its layout's
 *   flat buffer (checkpoint.h's CkptRun: all of it, or ZeRO's shards); a
 *   run meets a tensor piece (a row-major rectangle of the global tensor)
 *   in a contiguous range, which is at most three rectangles: the rest of
 *   a first row, whole rows, the start of a last row.
 * - ckpt_shard_rects: the writer's rule. Of the ranks that hold the same
 *   copy of a tensor, the first TP rank (a replicated tensor), the first
 *   CP rank and the first stage (not the last stage's tied wte) write it;
 *   a replicated kind's copies on the DP ranks are written in dp parts
 *   (part dp_rank), an expert's by the dp / ep ranks of its EDP group
 *   (part dp_rank / ep); sharded kinds (ZeRO) are each rank's own, on
 *   every CP rank too (the composed trainer's ZeRO-1 shards the moments
 *   over dp x cp, so each CP rank holds a different shard).
 * - ckpt_reshard: for each wanted rectangle and each saved one of the same
 *   kind and tensor, copy the overlap, row by row.
 * - ckpt_load: everything this rank holds, from the checkpoint's files,
 *   with the check that every element was found exactly once; returns the
 *   steps the checkpoint had done, where the run continues.
 * - ckpt_commit: make a checkpoint appear whole or not at all.
 * - the extension, --save-async: ckpt_async_begin takes a snapshot of what
 *   this rank writes and starts a thread that writes its file from it
 *   while training goes on; ckpt_async_wait joins it (checkpoint.h's
 *   ckpt_save_async and ckpt_save_finish commit around them).
 */
#ifndef CHECKPOINT_SHARDS_H
#define CHECKPOINT_SHARDS_H

#include "checkpoint.h"

/* The rectangles that runs of one kind cover in a layout's tensors (t, its
 * table of nt; share: per tensor the part to take, NULL: all), appended to
 * out, each with local = where its first float is in the rank's buffer and
 * stride = the piece's columns (the floats from one row to the next) */
void ckpt_rects_of_runs(const TensorInfo *t, int nt, int kind, const CkptRun *runs, int nruns,
                        const CkptShare *share, CkptRects *out);

/* What this rank writes of every kind of held (rank dp_rank of dp in its
 * data-parallel group), by the rule above, appended to out */
void ckpt_shard_rects(const GPTLayout *l, const CkptHeld *held, int dp_rank, int dp,
                      CkptRects *out);

/* Copy into dest (host memory laid out as the wanted rectangles say) the
 * overlap of each wanted rectangle with each saved one of the same kind
 * and tensor, reading the saved floats through read(ctx, ...); returns the
 * floats copied */
size_t ckpt_reshard(const CkptRects *want, const CkptRects *saved, CkptReadRow read, void *ctx,
                    float *dest);

/* Load what held's buffers hold (device or host memory) from the
 * checkpoint in ckdir (verified: checkpoint.h's ckpt_verify), resharding
 * from whatever layout saved it; dies with one clear error if an element
 * is not found exactly once. Returns the steps the checkpoint had done. */
int ckpt_load(const char *ckdir, const GPTLayout *l, const CkptHeld *held);

/* The last step of a save: every rank file is written and flushed in
 * tmp_dir; write the index (len bytes) as tmp_dir/index.txt, flush it to
 * the disk, then make tmp_dir appear as final_dir at once (flushing the
 * directories), so that a crash at any moment leaves either no final_dir
 * or a whole one. */
void ckpt_commit(const char *tmp_dir, const char *final_dir, const char *index, size_t len);

/* --save-async's writer (checkpoint.h's CkptAsync; a->rank is set, no
 * writer running): copy the floats of rects (in held's buffers, device or
 * host memory) into a->snapshot in the file's order (checkpoint.h's
 * ckpt_gather_rects), keep copies of path and rects, and start a thread
 * that writes the file (ckpt_write_rank_file) into a->bytes, a->checksum
 * and a->err, making no MPI call. Returns at once. */
void ckpt_async_begin(CkptAsync *a, const char *path, const CkptRects *rects,
                      const CkptHeld *held);

/* Join the writer ckpt_async_begin started; the file's size and checksum
 * into bytes and checksum (a->err says whether it was written); frees the
 * snapshot and the copies */
void ckpt_async_wait(CkptAsync *a, uint64_t *bytes, uint64_t *checksum);

#endif
