/* comm_nccl.h: the communicator's NCCL path, collectives on GPU buffers.
 *
 * With `--device cuda` and one GPU per rank, a group's collectives run on
 * NCCL instead of MPI: the data stays on the GPU and travels over NVLink or
 * PCIe. The NCCL communicator hangs off the group's Comm (c->nccl) and is
 * bootstrapped through it: rank 0 of the group asks NCCL for a unique id,
 * MPI_Bcast hands it to the others, every rank calls ncclCommInitRankConfig
 * with it. That is done for the world; every group split from a group with
 * NCCL (dp, tp, pp, cp, ep...: comm_split) gets its own communicator from
 * ncclCommSplit, in the same order on every rank.
 *
 * Non-blocking communicators. Creating one waits for every rank to come; a
 * rank that never does would hang the others inside NCCL, out of the
 * watchdog's reach. So the communicators are non-blocking (config.blocking
 * = 0): calls return at once, maybe with ncclInProgress, and the kit polls
 * ncclCommGetAsyncError under the watchdog until the communicator is ready.
 * On a fatal error every communicator is aborted (ncclCommAbort) before
 * the job ends.
 *
 * This header is plain C: C files include it without nvcc. A cudaStream_t is
 * passed as `void *` (NULL: the default stream); c->nccl is NCCL's
 * ncclComm_t, which is a `struct ncclComm *`.
 *
 * Same conventions as comm.h: counts in elements of dtype, the same in-place
 * rules, the same uneven shards (shard_count/shard_offset), every call counted
 * in the Comm's counters with the same byte conventions (comm_record), so
 * comm.csv reads the same whichever path ran. Differences:
 *   - buffers are device memory of the GPU this rank uses (comm_nccl_device);
 *   - point-to-point calls have no tag: NCCL matches the sends and receives
 *     between two ranks in the order they were issued;
 *   - alltoall(v) is never in place (send != recv).
 *
 * Blocking and non-blocking. NCCL only enqueues work on a stream; the kit
 * adds a CUDA event after it. A blocking call returns once that event has
 * completed, so its result is ready and the seconds counted are real (they
 * include anything queued earlier on the stream). A non-blocking call
 * returns at once with a request; comm_nccl_test / comm_nccl_wait complete
 * it. Kernels queued later on the same stream need no wait at all: the
 * stream orders them after the collective.
 *
 * Waiting keeps MPI alive. NCCL ranks stall until every peer has launched
 * the same operation. If a peer is stuck inside an MPI call that needs this
 * rank's MPI progress (Open MPI progresses only inside MPI calls), a rank
 * blocked in cudaStreamSynchronize would never give it: deadlock. So the
 * wait polls the event and calls into MPI between polls.
 *
 * Uneven shards. NCCL's reduce-scatter and all-gather need n = p * count.
 * When p divides n they are called directly. Otherwise each shard is its own
 * rooted operation, all in one NCCL group (one launch):
 *     reduce-scatter = for each rank r: reduce    shard r to root r
 *     all-gather     = for each rank r: broadcast shard r from root r
 * Each rank then sends and receives about n elements instead of
 * (p-1)/p * n, no extra memory and no copies; shards of 0 elements (n < p)
 * are skipped.
 */
#ifndef COMM_NCCL_H
#define COMM_NCCL_H

/* Under C++ (nvcc) the system headers come first, outside the extern "C"
 * block (their C++ versions declare overloads), so that comm.h's own includes
 * of them are no-ops and only the kit's declarations get C linkage. */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <mpi.h>
#ifdef __cplusplus
extern "C" {
#endif

#include "comm.h"

/* 1 when every rank of c has a GPU of its own, so that NCCL can serve c;
 * 0 when two of them share one (collective over c). */
int comm_nccl_one_gpu_per_rank(Comm *c);

/* Give the group c an NCCL communicator (collective over c; the pretend
 * NCCL of tests/fake_gpu makes it for the whole world only). Two ranks of c
 * on one GPU is a user error: NCCL refuses it, the MPI path with host staging
 * is the way to run several ranks per GPU. */
void comm_nccl_attach(Comm *c);
/* child, just split from parent by MPI with (color, key), gets the
 * communicator ncclCommSplit makes with the same (collective over parent):
 * every rank makes its groups in the same order, so no id is exchanged. */
void comm_nccl_split(Comm *parent, Comm *child, int color, int key);
/* Free c's NCCL communicator (collective over c), before comm_free(c). */
void comm_nccl_detach(Comm *c);
/* The job is ending on an error: NCCL frees c's communicator without
 * waiting for its peers (ncclCommAbort); this rank's GPU work on it stops. */
void comm_nccl_abort(Comm *c);

/* ---- blocking, device buffers (see comm.h for the layouts) ---- */
void comm_nccl_allreduce(Comm *c, const void *send, void *recv, size_t n,
                         CommDtype dtype, CommRedop redop, void *stream);
/* send: n elements; recv: shard_count(n, p, rank) elements */
void comm_nccl_reduce_scatter(Comm *c, const void *send, void *recv, size_t n,
                              CommDtype dtype, CommRedop redop, void *stream);
/* send: shard_count(n, p, rank) elements; recv: n elements */
void comm_nccl_allgather(Comm *c, const void *send, void *recv, size_t n,
                         CommDtype dtype, void *stream);
void comm_nccl_broadcast(Comm *c, void *buf, size_t n, CommDtype dtype, int root,
                         void *stream);
/* recv is used on the root only (may be NULL elsewhere) */
void comm_nccl_reduce(Comm *c, const void *send, void *recv, size_t n,
                      CommDtype dtype, CommRedop redop, int root, void *stream);
/* block j (n elements) of send goes to rank j, into block `rank` of its recv */
void comm_nccl_alltoall(Comm *c, const void *send, void *recv, size_t n,
                        CommDtype dtype, void *stream);
void comm_nccl_alltoallv(Comm *c, const void *send, const size_t *send_counts,
                         const size_t *send_offsets, void *recv,
                         const size_t *recv_counts, const size_t *recv_offsets,
                         CommDtype dtype, void *stream);
void comm_nccl_send(Comm *c, const void *buf, size_t n, CommDtype dtype, int dst,
                    void *stream);
void comm_nccl_recv(Comm *c, void *buf, size_t n, CommDtype dtype, int src,
                    void *stream);
void comm_nccl_sendrecv(Comm *c, const void *send, size_t send_n, int dst,
                        void *recv, size_t recv_n, int src, CommDtype dtype,
                        void *stream);

/* ---- non-blocking: start, then comm_nccl_test / comm_nccl_wait ---- */
void comm_nccl_iallreduce(Comm *c, const void *send, void *recv, size_t n,
                          CommDtype dtype, CommRedop redop, void *stream,
                          NcclRequest *req);
void comm_nccl_ireduce_scatter(Comm *c, const void *send, void *recv, size_t n,
                               CommDtype dtype, CommRedop redop, void *stream,
                               NcclRequest *req);
void comm_nccl_iallgather(Comm *c, const void *send, void *recv, size_t n,
                          CommDtype dtype, void *stream, NcclRequest *req);
void comm_nccl_ibroadcast(Comm *c, void *buf, size_t n, CommDtype dtype, int root,
                          void *stream, NcclRequest *req);
void comm_nccl_isend(Comm *c, const void *buf, size_t n, CommDtype dtype, int dst,
                     void *stream, NcclRequest *req);
void comm_nccl_irecv(Comm *c, void *buf, size_t n, CommDtype dtype, int src,
                     void *stream, NcclRequest *req);
/* The sends and receives between these two (on any groups) are one NCCL
 * group, launched together: two ranks that send to each other and then
 * receive would otherwise wait forever, each in its send, on their
 * communication streams (comm_batch_begin, comm.h) */
void comm_nccl_batch_begin(void);
void comm_nccl_batch_end(void);
/* 1 when done (the request is then finished and counted, and stays done),
 * 0 otherwise */
int comm_nccl_test(NcclRequest *req);
void comm_nccl_wait(NcclRequest *req);

#ifdef __cplusplus
}
#endif

#endif
