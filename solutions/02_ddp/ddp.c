/* Lab 02: data-parallel gradient averaging, naive, bucketed and overlapped.
 * See ddp.h for the idea and labs/02_ddp/README.md for the cost model. */
#include "ddp.h"

#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "device.h"
#include "kernels.h"

/* Every rank's gradient is the mean over its own rows; the global batch's
 * gradient is the mean of the ranks' gradients: sum, then divide by N. */
static void average(Ddp *d, void *grads, size_t n) {
    scale_inplace_as(grads, 1.0f / (float)d->dp->size, n, comm_dtype_precision(d->dtype));
}

static size_t total_elems(const Ddp *d) {
    const TensorInfo *last = &d->tensors[d->ntensors - 1];
    return last->offset + last->count;
}

void ddp_naive_sync(Ddp *d, void *grads) {
    /* BEGIN SOLUTION */
    for (int t = 0; t < d->ntensors; t++) {
        void *x = comm_at(grads, d->dtype, d->tensors[t].offset);
        comm_allreduce(d->dp, x, x, d->tensors[t].count, d->dtype, COMM_SUM);
    }
    average(d, grads, total_elems(d));
    /* END SOLUTION */
}

int ddp_build_buckets(const TensorInfo *tensors, int ntensors, size_t bucket_bytes,
                      size_t elem_bytes, Bucket *out) {
    /* BEGIN SOLUTION */
    int nb = 0;
    size_t end = tensors[ntensors - 1].offset + tensors[ntensors - 1].count;
    for (int t = ntensors - 1; t >= 0; t--) {
        /* the bucket grows downwards, from `end` to this tensor's start */
        size_t start = tensors[t].offset;
        if ((end - start) * elem_bytes >= bucket_bytes || t == 0) {
            out[nb++] = (Bucket){start, end - start};
            end = start;
        }
    }
    return nb;
    /* END SOLUTION */
}

int ddp_build_buckets_first(const TensorInfo *tensors, int ntensors, size_t first_bytes,
                            size_t bucket_bytes, size_t elem_bytes, Bucket *out) {
    /* BEGIN SOLUTION */
    /* The walk carries nothing from one bucket to the next but where the
     * last one started. So the first bucket is the one the plain walk builds
     * first at first_bytes, and the tensors below it, a table of their own,
     * are walked at bucket_bytes. (The first walk may write past out[0]: out
     * has room for ntensors buckets, and the second walk overwrites them.) */
    ddp_build_buckets(tensors, ntensors, first_bytes, elem_bytes, out);
    int below = ntensors;
    while (below > 0 && tensors[below - 1].offset >= out[0].offset) below--;
    return below == 0 ? 1 : 1 + ddp_build_buckets(tensors, below, bucket_bytes, elem_bytes, out + 1);
    /* END SOLUTION */
}

void ddp_bucketed_sync(Ddp *d, void *grads) {
    /* BEGIN SOLUTION */
    for (int b = 0; b < d->nbuckets; b++) {
        void *x = comm_at(grads, d->dtype, d->buckets[b].offset);
        comm_allreduce(d->dp, x, x, d->buckets[b].count, d->dtype, COMM_SUM);
    }
    average(d, grads, total_elems(d));
    /* END SOLUTION */
}

void ddp_overlap_begin(Ddp *d, void *grads, int communicate) {
    d->grads = grads;
    d->ready_from = total_elems(d);
    d->next_bucket = 0;
    d->communicate = communicate;
}

void ddp_overlap_on_ready(Ddp *d, size_t offset, size_t count) {
    (void)count;  /* ranges arrive end to start: offset is the new frontier */
    /* BEGIN SOLUTION */
    d->ready_from = offset;
    if (!d->communicate) return;
    /* every bucket that lies wholly in [ready_from, end) can go */
    while (d->next_bucket < d->nbuckets && d->buckets[d->next_bucket].offset >= d->ready_from) {
        const Bucket *b = &d->buckets[d->next_bucket];
        void *x = comm_at(d->grads, d->dtype, b->offset);
        comm_iallreduce(d->dp, x, x, b->count, d->dtype, COMM_SUM, &d->requests[d->next_bucket]);
        d->next_bucket++;
    }
    /* MPI moves a non-blocking collective forward only inside MPI calls
     * (no progress thread in Debian's Open MPI): test the ones in flight
     * now, between layers, or they would all wait for finish() */
    for (int b = 0; b < d->next_bucket; b++) comm_test(&d->requests[b]);
    /* END SOLUTION */
}

void ddp_overlap_finish(Ddp *d, void *grads) {
    /* BEGIN SOLUTION */
    CHECK(d->next_bucket == d->nbuckets, "backward finished with %d of %d buckets started",
          d->next_bucket, d->nbuckets);
    comm_waitall(d->requests, d->nbuckets);
    average(d, grads, total_elems(d));
    /* END SOLUTION */
}

/* Given: the check the student runs (--check-consistency). A float's bits,
 * mixed with its index, summed mod 2^32: equal sums on every rank (max ==
 * min) mean, barring a 1-in-4-billion collision, equal parameters. */
int ddp_params_consistent(Comm *dp, const float *params, size_t n) {
    float *host = malloc(n * sizeof(float));  /* the parameters may be on a GPU */
    CHECK(host, "out of memory");
    device_copy(host, params, n * sizeof(float));
    uint32_t h = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, &host[i], sizeof bits);
        h += (bits ^ (uint32_t)(i * 2654435761u)) * 2246822519u;
    }
    free(host);
    int32_t lo = (int32_t)h, hi = (int32_t)h;
    comm_allreduce(dp, &lo, &lo, 1, COMM_INT32, COMM_MIN);
    comm_allreduce(dp, &hi, &hi, 1, COMM_INT32, COMM_MAX);
    return lo == hi;
}
