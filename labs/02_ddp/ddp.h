/* Lab 02: data-parallel training (DDP). Every rank holds the whole model and
 * trains on its slice of the global batch; after the backward pass the
 * gradients are averaged over the ranks, so every rank takes the same AdamW
 * step and the parameters stay identical. Three ways to average, each faster
 * than the one before:
 *
 *   naive       one all-reduce per parameter tensor, after the backward pass
 *   bucketed    tensors grouped into buckets of >= bucket_bytes, one
 *               all-reduce per bucket (fewer calls: fewer latencies alpha)
 *   overlapped  a bucket's all-reduce starts (non-blocking) as soon as the
 *               backward pass has finished all its gradients, and runs while
 *               the backward pass goes on through earlier layers
 *
 * The gradients live in one flat buffer (layout.h): a tensor, and a bucket of
 * consecutive tensors, is a contiguous range of it, so a bucket is
 * all-reduced in place without packing. Its elements are d->dtype:
 * COMM_FLOAT, or under mixed precision (--precision bf16|fp16) 2-byte
 * COMM_BF16 / COMM_FP16, which halves the bytes on the wire. Offsets and
 * counts are in elements; comm_at(grads, d->dtype, i) is element i. The backward pass finishes ranges
 * from the END of the buffer towards its start (lnf, the last block, ...,
 * the first block, then the embeddings), so buckets are built in that order.
 */
#ifndef DDP_H
#define DDP_H

#include <stddef.h>

#include "comm.h"
#include "model.h"

typedef enum { DDP_NAIVE, DDP_BUCKETED, DDP_OVERLAPPED } DdpMode;

/* A contiguous range of the flat gradient buffer, in elements. */
typedef struct {
    size_t offset, count;
} Bucket;

typedef struct {
    DdpMode mode;
    Comm *dp;                  /* the data-parallel group */
    CommDtype dtype;           /* the gradients' elements */
    const TensorInfo *tensors; /* the model's tensor table, in buffer order */
    int ntensors;
    Bucket *buckets;           /* in the order the backward pass fills them */
    int nbuckets;
    /* overlapped mode, during one backward pass: */
    void *grads;               /* the buffer being filled */
    size_t ready_from;         /* grads[ready_from, end) are final */
    int next_bucket;           /* the first bucket whose all-reduce has not started */
    CommRequest *requests;     /* one per bucket */
    int communicate;           /* 0 on the micro-batches that only accumulate */
} Ddp;

/* Naive: all-reduce each tensor of grads (sum), then divide by the ranks. */
void ddp_naive_sync(Ddp *d, void *grads);

/* Group the tensors into buckets, walking from the last tensor to the first:
 * a bucket closes as soon as it holds >= bucket_bytes, at elem_bytes bytes
 * an element (a tensor is never split, so a bucket may be larger). Writes
 * at most ntensors buckets to out and returns how many. */
int ddp_build_buckets(const TensorInfo *tensors, int ntensors, size_t bucket_bytes,
                      size_t elem_bytes, Bucket *out);

/* Extension, part 1: the same walk from the last tensor, but the first bucket
 * built (the one holding the last tensors, whose all-reduce can start first)
 * closes as soon as it holds >= first_bytes, every later one at
 * >= bucket_bytes. With first_bytes == bucket_bytes it returns exactly what
 * ddp_build_buckets returns. Writes at most ntensors buckets to out and
 * returns how many. train_ddp calls it, in place of ddp_build_buckets, when
 * given --first-bucket-mb. */
int ddp_build_buckets_first(const TensorInfo *tensors, int ntensors, size_t first_bytes,
                            size_t bucket_bytes, size_t elem_bytes, Bucket *out);

/* Bucketed: all-reduce each bucket, then divide by the ranks. */
void ddp_bucketed_sync(Ddp *d, void *grads);

/* Overlapped. begin: a backward pass starts (communicate = 0 while
 * accumulating micro-batches). on_ready: grads[offset, offset+count) is final;
 * start the all-reduce of every bucket that is now complete, and give MPI a
 * chance to progress the ones in flight. finish: wait for all, divide by the
 * ranks. */
void ddp_overlap_begin(Ddp *d, void *grads, int communicate);
void ddp_overlap_on_ready(Ddp *d, size_t offset, size_t count);
void ddp_overlap_finish(Ddp *d, void *grads);

/* Are the parameters identical on every rank? A bitwise checksum of params,
 * compared through a max and a min all-reduce. Returns 1 when they agree. */
int ddp_params_consistent(Comm *dp, const float *params, size_t n);

#endif
