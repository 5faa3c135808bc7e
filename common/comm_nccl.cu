/* comm_nccl.cu: the NCCL path of the communicator (see comm_nccl.h).
 *
 * Host code only: NCCL launches its own kernels. Every function enqueues
 * NCCL work on the caller's stream, records an event behind it (issued) and,
 * when blocking, waits for that event (comm_nccl_wait). */
#include <sched.h>

#include <nccl.h>

#include "comm_nccl.h"
#include "cuda_check.h"
#include "device.h"
extern "C" {
#include "trace.h"
#include "watchdog.h"
}

/* NCCL_CHECK(ncclAllReduce(...)): a failed NCCL call dies naming the call,
 * NCCL's error class and its last detailed message (e.g. which ranks share a
 * device). */
#define NCCL_CHECK(call)                                                       \
    do {                                                                       \
        ncclResult_t nccl_check_rc_ = (call);                                  \
        if (nccl_check_rc_ != ncclSuccess)                                     \
            die_at(__FILE__, __LINE__, "%s: %s (%s)", #call,                   \
                   ncclGetErrorString(nccl_check_rc_), ncclGetLastError(NULL)); \
    } while (0)

int comm_nccl_device(void) { return device_cuda_bind(); }

static ncclComm_t nccl_of(const Comm *c) {
    CHECK(c->nccl, "group '%s' has no NCCL communicator: call comm_nccl_attach first", c->name);
    return (ncclComm_t)c->nccl;
}

static ncclDataType_t nccl_dtype(CommDtype dtype) {
    static const ncclDataType_t map[COMM_NUM_DTYPES] = {ncclFloat32, ncclFloat64, ncclInt32};
    CHECK(dtype >= 0 && dtype < COMM_NUM_DTYPES, "bad dtype %d", (int)dtype);
    return map[dtype];
}

static ncclRedOp_t nccl_redop(CommRedop redop) {
    static const ncclRedOp_t map[COMM_NUM_REDOPS] = {ncclSum, ncclMax, ncclMin};
    CHECK(redop >= 0 && redop < COMM_NUM_REDOPS, "bad reduction %d", (int)redop);
    return map[redop];
}

/* Element offsets to byte pointers. */
static const char *at(const void *buf, size_t elems, CommDtype dtype) {
    return (const char *)buf + elems * comm_dtype_size(dtype);
}
static char *at(void *buf, size_t elems, CommDtype dtype) {
    return (char *)buf + elems * comm_dtype_size(dtype);
}

/* The first pair of ranks of c that share a GPU (i < j), or 0 when every
 * rank has its own. GPUs are told apart by UUID, which is unique across
 * nodes (a device index is not). Collective over c; all ranks get the same
 * answer. */
static int shared_gpu_pair(Comm *c, int *first, int *second) {
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, comm_nccl_device()));
    cudaUUID_t *all = (cudaUUID_t *)malloc((size_t)c->size * sizeof *all);
    CHECK(all, "out of memory");
    MPI_CHECK(MPI_Allgather(&prop.uuid, (int)sizeof prop.uuid, MPI_BYTE, all,
                            (int)sizeof prop.uuid, MPI_BYTE, c->mpi));
    int found = 0;
    for (int i = 0; i < c->size && !found; i++)
        for (int j = i + 1; j < c->size && !found; j++)
            if (memcmp(&all[i], &all[j], sizeof all[i]) == 0) {
                *first = i;
                *second = j;
                found = 1;
            }
    free(all);
    return found;
}

int comm_nccl_one_gpu_per_rank(Comm *c) {
    int i, j;
    return !shared_gpu_pair(c, &i, &j);
}

/* Two ranks of one group on one GPU: NCCL would stop with "Duplicate GPU
 * detected"; say what to do instead. Rank 0 of the group prints the one
 * error line and exits with status 2, the others wait in a barrier it never
 * joins until mpirun ends the job. */
static void require_one_gpu_per_rank(Comm *c) {
    int i, j;
    if (!shared_gpu_pair(c, &i, &j)) return;
    if (c->rank != 0) MPI_CHECK(MPI_Barrier(c->mpi));
    USER_ERROR("ranks %d and %d of group '%s' would share one GPU: NCCL needs "
               "one GPU per rank; run fewer ranks per node, or use the MPI "
               "communicator with host staging, which lets ranks share a GPU",
               i, j, c->name);
}

void comm_nccl_attach(Comm *c) {
    CHECK(!c->nccl, "group '%s' already has an NCCL communicator", c->name);
    require_one_gpu_per_rank(c);
    ncclUniqueId id;
    if (c->rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    MPI_CHECK(MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, c->mpi));
    ncclComm_t comm;
    NCCL_CHECK(ncclCommInitRank(&comm, c->size, id, c->rank));
    c->nccl = comm;
}

void comm_nccl_detach(Comm *c) {
    /* Finalize completes what is still in flight, then Destroy frees. */
    NCCL_CHECK(ncclCommFinalize(nccl_of(c)));
    NCCL_CHECK(ncclCommDestroy(nccl_of(c)));
    c->nccl = NULL;
}

/* The op is enqueued: put an event behind it on the stream and fill req. */
static void issued(Comm *c, CommOp op, size_t bytes, double t_start, void *stream,
                   NcclRequest *req) {
    cudaEvent_t event;
    CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(event, (cudaStream_t)stream));
    req->event = event;
    req->comm = c;
    req->op = op;
    req->bytes = bytes;
    req->t_start = t_start;
    req->active = 1;
}

/* Sends and receives posted between comm_nccl_batch_begin and _end: NCCL
 * launches them at ncclGroupEnd, so their events go behind them then. */
enum { MAX_BATCH = 16 };
static struct {
    Comm *c;
    CommOp op;
    size_t bytes;
    double t_start;
    void *stream;
    NcclRequest *req;
} g_batch[MAX_BATCH];
static int g_in_batch, g_batch_len;

static void p2p_issued(Comm *c, CommOp op, size_t bytes, double t_start, void *stream,
                       NcclRequest *req) {
    if (!g_in_batch) {
        issued(c, op, bytes, t_start, stream, req);
        return;
    }
    CHECK(g_batch_len < MAX_BATCH, "more than %d sends and receives in one batch", MAX_BATCH);
    g_batch[g_batch_len++] = {c, op, bytes, t_start, stream, req};
}

void comm_nccl_batch_begin(void) {
    CHECK(!g_in_batch, "a batch of sends and receives inside another");
    NCCL_CHECK(ncclGroupStart());
    g_in_batch = 1;
    g_batch_len = 0;
}

void comm_nccl_batch_end(void) {
    CHECK(g_in_batch, "the end of a batch that was not begun");
    NCCL_CHECK(ncclGroupEnd());
    g_in_batch = 0;
    for (int k = 0; k < g_batch_len; k++)
        issued(g_batch[k].c, g_batch[k].op, g_batch[k].bytes, g_batch[k].t_start,
               g_batch[k].stream, g_batch[k].req);
}

int comm_nccl_test(NcclRequest *req) {
    if (!req->active) return 1;
    cudaError_t rc = cudaEventQuery((cudaEvent_t)req->event);
    if (rc == cudaErrorNotReady) {
        /* "not yet" is also left as the thread's last error: clear it, or
         * the next CUDA_CHECK(cudaGetLastError()) after a launch would fail. */
        (void)cudaGetLastError();
        return 0;
    }
    CUDA_CHECK(rc);
    comm_record(req->comm, req->op, req->bytes, req->t_start, trace_now());
    CUDA_CHECK(cudaEventDestroy((cudaEvent_t)req->event));
    req->active = 0;
    return 1;
}

void comm_nccl_wait(NcclRequest *req) {
    if (comm_nccl_test(req)) return;
    watchdog_begin(req->comm, req->op, -1);  /* a frozen peer ends the job (watchdog.h) */
    while (!comm_nccl_test(req)) {
        watchdog_check();
        /* MPI_Iprobe runs Open MPI's progress engine (see comm_nccl.h). */
        int flag;
        MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, req->comm->mpi, &flag,
                             MPI_STATUS_IGNORE));
        /* A peer that failed leaves this rank's kernel waiting forever; NCCL
         * reports it here, and aborting frees the GPU instead of hanging. */
        ncclComm_t comm = nccl_of(req->comm);
        ncclResult_t async;
        NCCL_CHECK(ncclCommGetAsyncError(comm, &async));
        if (async != ncclSuccess) {
            NCCL_CHECK(ncclCommAbort(comm));
            die_at(__FILE__, __LINE__, "NCCL failed in group '%s' during %s: %s",
                   req->comm->name, comm_op_name(req->op), ncclGetErrorString(async));
        }
        sched_yield();   /* with more ranks than cores, let the others run */
    }
    watchdog_end();
}

/* ---- the operations: enqueue, issued(), and for blocking forms wait ----
 * Operations of 0 elements are not handed to NCCL (every rank of the group
 * knows n, so all skip together) but are counted like any other call. */

void comm_nccl_iallreduce(Comm *c, const void *send, void *recv, size_t n,
                          CommDtype dtype, CommRedop redop, void *stream,
                          NcclRequest *req) {
    double t0 = trace_now();
    if (n)
        NCCL_CHECK(ncclAllReduce(send, recv, n, nccl_dtype(dtype), nccl_redop(redop),
                                 nccl_of(c), (cudaStream_t)stream));
    issued(c, OP_ALLREDUCE, n * comm_dtype_size(dtype), t0, stream, req);
}

void comm_nccl_ireduce_scatter(Comm *c, const void *send, void *recv, size_t n,
                               CommDtype dtype, CommRedop redop, void *stream,
                               NcclRequest *req) {
    double t0 = trace_now();
    ncclComm_t comm = nccl_of(c);
    int p = c->size;
    if (n % (size_t)p == 0) {
        if (n)
            NCCL_CHECK(ncclReduceScatter(send, recv, n / (size_t)p, nccl_dtype(dtype),
                                         nccl_redop(redop), comm, (cudaStream_t)stream));
    } else {
        /* Shard r reduced onto rank r; only the root's recvbuff is written,
         * so in place (recv == send + offset(rank)) stays in place. */
        NCCL_CHECK(ncclGroupStart());
        for (int r = 0; r < p; r++) {
            size_t count = shard_count(n, p, r);
            if (count)
                NCCL_CHECK(ncclReduce(at(send, shard_offset(n, p, r), dtype),
                                      r == c->rank ? recv : NULL, count, nccl_dtype(dtype),
                                      nccl_redop(redop), r, comm, (cudaStream_t)stream));
        }
        NCCL_CHECK(ncclGroupEnd());
    }
    issued(c, OP_REDUCE_SCATTER, n * comm_dtype_size(dtype), t0, stream, req);
}

void comm_nccl_iallgather(Comm *c, const void *send, void *recv, size_t n,
                          CommDtype dtype, void *stream, NcclRequest *req) {
    double t0 = trace_now();
    ncclComm_t comm = nccl_of(c);
    int p = c->size;
    if (n % (size_t)p == 0) {
        if (n)
            NCCL_CHECK(ncclAllGather(send, recv, n / (size_t)p, nccl_dtype(dtype), comm,
                                     (cudaStream_t)stream));
    } else {
        /* Shard r broadcast from rank r into its place; only the root's
         * sendbuff is read, so in place (send == recv + offset(rank)) is
         * NCCL's in-place broadcast on the root. */
        NCCL_CHECK(ncclGroupStart());
        for (int r = 0; r < p; r++) {
            size_t count = shard_count(n, p, r);
            if (count)
                NCCL_CHECK(ncclBroadcast(r == c->rank ? send : NULL,
                                         at(recv, shard_offset(n, p, r), dtype), count,
                                         nccl_dtype(dtype), r, comm, (cudaStream_t)stream));
        }
        NCCL_CHECK(ncclGroupEnd());
    }
    issued(c, OP_ALLGATHER, n * comm_dtype_size(dtype), t0, stream, req);
}

void comm_nccl_ibroadcast(Comm *c, void *buf, size_t n, CommDtype dtype, int root,
                          void *stream, NcclRequest *req) {
    double t0 = trace_now();
    if (n)
        NCCL_CHECK(ncclBroadcast(buf, buf, n, nccl_dtype(dtype), root, nccl_of(c),
                                 (cudaStream_t)stream));
    issued(c, OP_BROADCAST, n * comm_dtype_size(dtype), t0, stream, req);
}

void comm_nccl_isend(Comm *c, const void *buf, size_t n, CommDtype dtype, int dst,
                     void *stream, NcclRequest *req) {
    double t0 = trace_now();
    if (n)
        NCCL_CHECK(ncclSend(buf, n, nccl_dtype(dtype), dst, nccl_of(c), (cudaStream_t)stream));
    p2p_issued(c, OP_SEND, n * comm_dtype_size(dtype), t0, stream, req);
}

void comm_nccl_irecv(Comm *c, void *buf, size_t n, CommDtype dtype, int src,
                     void *stream, NcclRequest *req) {
    double t0 = trace_now();
    if (n)
        NCCL_CHECK(ncclRecv(buf, n, nccl_dtype(dtype), src, nccl_of(c), (cudaStream_t)stream));
    p2p_issued(c, OP_RECV, n * comm_dtype_size(dtype), t0, stream, req);
}

void comm_nccl_allreduce(Comm *c, const void *send, void *recv, size_t n,
                         CommDtype dtype, CommRedop redop, void *stream) {
    NcclRequest req;
    comm_nccl_iallreduce(c, send, recv, n, dtype, redop, stream, &req);
    comm_nccl_wait(&req);
}

void comm_nccl_reduce_scatter(Comm *c, const void *send, void *recv, size_t n,
                              CommDtype dtype, CommRedop redop, void *stream) {
    NcclRequest req;
    comm_nccl_ireduce_scatter(c, send, recv, n, dtype, redop, stream, &req);
    comm_nccl_wait(&req);
}

void comm_nccl_allgather(Comm *c, const void *send, void *recv, size_t n,
                         CommDtype dtype, void *stream) {
    NcclRequest req;
    comm_nccl_iallgather(c, send, recv, n, dtype, stream, &req);
    comm_nccl_wait(&req);
}

void comm_nccl_broadcast(Comm *c, void *buf, size_t n, CommDtype dtype, int root,
                         void *stream) {
    NcclRequest req;
    comm_nccl_ibroadcast(c, buf, n, dtype, root, stream, &req);
    comm_nccl_wait(&req);
}

void comm_nccl_send(Comm *c, const void *buf, size_t n, CommDtype dtype, int dst,
                    void *stream) {
    NcclRequest req;
    comm_nccl_isend(c, buf, n, dtype, dst, stream, &req);
    comm_nccl_wait(&req);
}

void comm_nccl_recv(Comm *c, void *buf, size_t n, CommDtype dtype, int src,
                    void *stream) {
    NcclRequest req;
    comm_nccl_irecv(c, buf, n, dtype, src, stream, &req);
    comm_nccl_wait(&req);
}

void comm_nccl_reduce(Comm *c, const void *send, void *recv, size_t n,
                      CommDtype dtype, CommRedop redop, int root, void *stream) {
    NcclRequest req;
    double t0 = trace_now();
    if (n)
        NCCL_CHECK(ncclReduce(send, c->rank == root ? recv : NULL, n, nccl_dtype(dtype),
                              nccl_redop(redop), root, nccl_of(c), (cudaStream_t)stream));
    issued(c, OP_REDUCE, n * comm_dtype_size(dtype), t0, stream, &req);
    comm_nccl_wait(&req);
}

/* All-to-all is p sends and p receives in one NCCL group: the group makes
 * them concurrent, so no ordering of the pairs can deadlock. The self pair
 * (j == rank) is a plain copy inside NCCL. */
void comm_nccl_alltoallv(Comm *c, const void *send, const size_t *send_counts,
                         const size_t *send_offsets, void *recv,
                         const size_t *recv_counts, const size_t *recv_offsets,
                         CommDtype dtype, void *stream) {
    CHECK(send != recv, "comm_nccl_alltoallv: in place is not supported");
    NcclRequest req;
    double t0 = trace_now();
    ncclComm_t comm = nccl_of(c);
    size_t sent = 0;
    NCCL_CHECK(ncclGroupStart());
    for (int j = 0; j < c->size; j++) {
        if (send_counts[j])
            NCCL_CHECK(ncclSend(at(send, send_offsets[j], dtype), send_counts[j],
                                nccl_dtype(dtype), j, comm, (cudaStream_t)stream));
        if (recv_counts[j])
            NCCL_CHECK(ncclRecv(at(recv, recv_offsets[j], dtype), recv_counts[j],
                                nccl_dtype(dtype), j, comm, (cudaStream_t)stream));
        sent += send_counts[j];
    }
    NCCL_CHECK(ncclGroupEnd());
    issued(c, OP_ALLTOALLV, sent * comm_dtype_size(dtype), t0, stream, &req);
    comm_nccl_wait(&req);
}

void comm_nccl_alltoall(Comm *c, const void *send, void *recv, size_t n,
                        CommDtype dtype, void *stream) {
    CHECK(send != recv || n == 0, "comm_nccl_alltoall: in place is not supported");
    NcclRequest req;
    double t0 = trace_now();
    ncclComm_t comm = nccl_of(c);
    if (n) {
        NCCL_CHECK(ncclGroupStart());
        for (int j = 0; j < c->size; j++) {
            NCCL_CHECK(ncclSend(at(send, (size_t)j * n, dtype), n, nccl_dtype(dtype), j, comm,
                                (cudaStream_t)stream));
            NCCL_CHECK(ncclRecv(at(recv, (size_t)j * n, dtype), n, nccl_dtype(dtype), j, comm,
                                (cudaStream_t)stream));
        }
        NCCL_CHECK(ncclGroupEnd());
    }
    issued(c, OP_ALLTOALL, (size_t)c->size * n * comm_dtype_size(dtype), t0, stream, &req);
    comm_nccl_wait(&req);
}

/* Send and receive in one group: in a ring every rank does both at once. */
void comm_nccl_sendrecv(Comm *c, const void *send, size_t send_n, int dst,
                        void *recv, size_t recv_n, int src, CommDtype dtype,
                        void *stream) {
    NcclRequest req;
    double t0 = trace_now();
    ncclComm_t comm = nccl_of(c);
    NCCL_CHECK(ncclGroupStart());
    if (send_n)
        NCCL_CHECK(ncclSend(send, send_n, nccl_dtype(dtype), dst, comm, (cudaStream_t)stream));
    if (recv_n)
        NCCL_CHECK(ncclRecv(recv, recv_n, nccl_dtype(dtype), src, comm, (cudaStream_t)stream));
    NCCL_CHECK(ncclGroupEnd());
    issued(c, OP_SENDRECV, send_n * comm_dtype_size(dtype), t0, stream, &req);
    comm_nccl_wait(&req);
}
