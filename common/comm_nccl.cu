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
#define NCCL_CHECK(call) NCCL_CHECK_RESULT((call), #call)
#define NCCL_CHECK_RESULT(result, call_text)                                   \
    do {                                                                       \
        ncclResult_t nccl_check_rc_ = (result);                                \
        if (nccl_check_rc_ != ncclSuccess)                                     \
            die_at(__FILE__, __LINE__, "%s: %s (%s)", call_text,               \
                   ncclGetErrorString(nccl_check_rc_), ncclGetLastError(NULL)); \
    } while (0)

static ncclComm_t nccl_of(const Comm *c) {
    CHECK(c->nccl, "group '%s' has no NCCL communicator: call comm_nccl_attach first", c->name);
    return (ncclComm_t)c->nccl;
}

static ncclDataType_t nccl_dtype(CommDtype dtype) {
    /* comm.c runs floats of a 2-byte wire (COMM_FLOAT_AS_*) in the 2-byte
     * type; here they are floats of a group of one */
    static const ncclDataType_t map[COMM_NUM_DTYPES] = {ncclFloat32, ncclFloat64, ncclInt32,
                                                        ncclBfloat16, ncclFloat16, ncclFloat32,
                                                        ncclFloat32, ncclUint8};
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
 * rank has its own. GPUs are told apart by UUID (device_memory_id), which
 * is unique across nodes (a device index is not). Collective over c; all
 * ranks get the same answer. */
static int shared_gpu_pair(Comm *c, int *first, int *second) {
    enum { ID = 64 };
    char mine[ID] = {0};
    snprintf(mine, sizeof mine, "%s", device_memory_id());
    char *all = (char *)malloc((size_t)c->size * ID);
    CHECK(all, "out of memory");
    MPI_CHECK(MPI_Allgather(mine, ID, MPI_CHAR, all, ID, MPI_CHAR, c->mpi));
    int found = 0;
    for (int i = 0; i < c->size && !found; i++)
        for (int j = i + 1; j < c->size && !found; j++)
            if (strcmp(all + (size_t)i * ID, all + (size_t)j * ID) == 0) {
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

/* Run Open MPI's progress engine (see comm_nccl.h) */
static void keep_mpi_alive(Comm *c) {
    int flag;
    MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, c->mpi, &flag, MPI_STATUS_IGNORE));
}

/* NCCL failed on group c (a peer died, a network error, a refusal): free
 * the GPU's side of the communicator and end the job, saying what failed. */
__attribute__((noreturn))
static void nccl_failed(Comm *c, CommOp op, ncclResult_t state) {
    const char *detail = ncclGetLastError(nccl_of(c));
    char why[256];
    snprintf(why, sizeof why, "%s", detail ? detail : "");
    comm_nccl_abort(c);
    die_at(__FILE__, __LINE__, "NCCL failed in group '%s' during %s: %s (%s)", c->name,
           comm_op_name(op), ncclGetErrorString(state), why);
}

/* The communicators are non-blocking: a call may answer ncclInProgress and
 * go on in the background, and the communicator takes no other call until
 * ncclCommGetAsyncError says ncclSuccess. Waiting for that is bounded by the
 * watchdog (a rank that never comes to an init or a split ends the job)
 * and keeps MPI alive. */
static void settle(Comm *c, CommOp op) {
    ncclResult_t state;
    NCCL_CHECK(ncclCommGetAsyncError(nccl_of(c), &state));
    if (state == ncclInProgress) {
        watchdog_begin(c, op, -1);
        while (state == ncclInProgress) {
            watchdog_check();
            keep_mpi_alive(c);
            sched_yield();
            NCCL_CHECK(ncclCommGetAsyncError(nccl_of(c), &state));
        }
        watchdog_end();
    }
    if (state != ncclSuccess) nccl_failed(c, op, state);
}

/* Every operation is enqueued inside an NCCL group (one op alone in a group
 * is the op), and groups nest: a batch (comm_nccl_batch_begin) holds the
 * groups of its ops, and NCCL launches everything at the outermost end.
 * There, a non-blocking communicator may answer ncclInProgress: each group
 * touched is settled then. */
static struct {
    int depth;
    Comm **touched;
    int len, cap;
} g_group;

/* NCCL_IN_GROUP(ncclAllReduce(...)): an op enqueued inside a group; in
 * progress is fine (settled at the group's end), any other failure fatal */
#define NCCL_IN_GROUP(call)                                                    \
    do {                                                                       \
        ncclResult_t nccl_group_rc_ = (call);                                  \
        if (nccl_group_rc_ != ncclInProgress) NCCL_CHECK_RESULT(nccl_group_rc_, #call); \
    } while (0)

static void group_start(void) {
    NCCL_CHECK(ncclGroupStart());
    if (g_group.depth++ == 0) g_group.len = 0;
}

static void touch(Comm *c) {
    for (int i = 0; i < g_group.len; i++)
        if (g_group.touched[i] == c) return;
    if (g_group.len == g_group.cap) {
        g_group.cap = g_group.cap ? 2 * g_group.cap : 8;
        g_group.touched = (Comm **)realloc(g_group.touched, (size_t)g_group.cap * sizeof(Comm *));
        CHECK(g_group.touched, "out of memory");
    }
    g_group.touched[g_group.len++] = c;
}

/* the end of a group of c's ops (c NULL: a batch's, of the groups inside) */
static void group_end(Comm *c, CommOp op) {
    CHECK(g_group.depth > 0, "an NCCL group ended that was not started");
    if (c) touch(c);
    ncclResult_t rc = ncclGroupEnd();
    if (rc != ncclInProgress) NCCL_CHECK_RESULT(rc, "ncclGroupEnd()");
    if (--g_group.depth == 0 && rc == ncclInProgress)
        for (int i = 0; i < g_group.len; i++) settle(g_group.touched[i], op);
}

static ncclConfig_t nonblocking(void) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    return config;
}

void comm_nccl_attach(Comm *c) {
    CHECK(!c->nccl, "group '%s' already has an NCCL communicator", c->name);
    require_one_gpu_per_rank(c);
    ncclUniqueId id;
    if (c->rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    MPI_CHECK(MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, c->mpi));
    ncclConfig_t config = nonblocking();
    ncclComm_t comm = NULL;
    ncclResult_t rc = ncclCommInitRankConfig(&comm, c->size, id, c->rank, &config);
    if (rc != ncclInProgress) NCCL_CHECK_RESULT(rc, "ncclCommInitRankConfig");
    c->nccl = comm;  /* before waiting: a timeout aborts it */
    settle(c, OP_NCCL_SETUP);
}

void comm_nccl_split(Comm *parent, Comm *child, int color, int key) {
    ncclConfig_t config = nonblocking();
    ncclComm_t comm = NULL;
    ncclResult_t rc = ncclCommSplit(nccl_of(parent), color, key, &comm, &config);
    if (rc != ncclInProgress) NCCL_CHECK_RESULT(rc, "ncclCommSplit");
    CHECK(comm, "ncclCommSplit gave group '%s' no communicator", child->name);
    child->nccl = comm;
    settle(child, OP_NCCL_SETUP);
}

void comm_nccl_detach(Comm *c) {
    /* Finalize completes what is still in flight, then Destroy frees. */
    ncclResult_t rc = ncclCommFinalize(nccl_of(c));
    if (rc != ncclInProgress) NCCL_CHECK_RESULT(rc, "ncclCommFinalize");
    settle(c, OP_NCCL_SETUP);
    NCCL_CHECK(ncclCommDestroy(nccl_of(c)));
    c->nccl = NULL;
}

void comm_nccl_abort(Comm *c) {
    if (!c->nccl) return;
    ncclComm_t comm = (ncclComm_t)c->nccl;
    c->nccl = NULL;  /* once: aborting frees it */
    ncclCommAbort(comm);
}

/* The op's event goes on the stream behind it: now, or, inside a batch, at
 * the batch's end, when NCCL launches what the batch holds. Until then the
 * request is pending (event NULL): waiting for it is an error. */
static void record_event(NcclRequest *req, void *stream) {
    cudaEvent_t event;
    CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(event, (cudaStream_t)stream));
    req->event = event;
}

static struct {
    int open;
    NcclRequest **reqs;
    void **streams;
    int len, cap;
} g_batch;

static void issued(Comm *c, CommOp op, size_t bytes, double t_start, void *stream,
                   NcclRequest *req) {
    req->event = NULL;
    req->comm = c;
    req->op = op;
    req->bytes = bytes;
    req->t_start = t_start;
    req->active = 1;
    if (!g_batch.open) {
        record_event(req, stream);
        return;
    }
    if (g_batch.len == g_batch.cap) {
        g_batch.cap = g_batch.cap ? 2 * g_batch.cap : 32;
        const size_t cap = (size_t)g_batch.cap;
        g_batch.reqs = (NcclRequest **)realloc(g_batch.reqs, cap * sizeof(NcclRequest *));
        g_batch.streams = (void **)realloc(g_batch.streams, cap * sizeof(void *));
        CHECK(g_batch.reqs && g_batch.streams, "out of memory");
    }
    g_batch.reqs[g_batch.len] = req;
    g_batch.streams[g_batch.len++] = stream;
}

void comm_nccl_batch_begin(void) {
    CHECK(!g_batch.open, "a batch of sends and receives inside another");
    group_start();
    g_batch.open = 1;
    g_batch.len = 0;
}

void comm_nccl_batch_end(void) {
    CHECK(g_batch.open, "the end of a batch that was not begun");
    group_end(NULL, OP_SENDRECV);
    g_batch.open = 0;
    for (int k = 0; k < g_batch.len; k++) record_event(g_batch.reqs[k], g_batch.streams[k]);
}

int comm_nccl_test(NcclRequest *req) {
    if (!req->active) return 1;
    CHECK(req->event, "a wait for a %s of group '%s' before the end of its batch: NCCL "
          "launches a batch at comm_batch_end, so this wait would never end; end the batch "
          "first", comm_op_name(req->op), req->comm->name);
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
        keep_mpi_alive(req->comm);
        /* A peer that failed leaves this rank's kernel waiting forever; NCCL
         * reports it here, and aborting frees the GPU instead of hanging. */
        ncclResult_t async;
        NCCL_CHECK(ncclCommGetAsyncError(nccl_of(req->comm), &async));
        if (async != ncclSuccess && async != ncclInProgress) nccl_failed(req->comm, req->op, async);
        sched_yield();   /* with more ranks than cores, let the others run */
    }
    watchdog_end();
}

/* ---- the operations: a group of NCCL calls, issued(), and for blocking
 * forms wait ----
 * Operations of 0 elements are not handed to NCCL (every rank of the group
 * knows n, so all skip together) but are counted like any other call. */

void comm_nccl_iallreduce(Comm *c, const void *send, void *recv, size_t n,
                          CommDtype dtype, CommRedop redop, void *stream,
                          NcclRequest *req) {
    double t0 = trace_now();
    group_start();
    if (n)
        NCCL_IN_GROUP(ncclAllReduce(send, recv, n, nccl_dtype(dtype), nccl_redop(redop),
                                    nccl_of(c), (cudaStream_t)stream));
    group_end(c, OP_ALLREDUCE);
    issued(c, OP_ALLREDUCE, n * comm_dtype_size(dtype), t0, stream, req);
}

void comm_nccl_ireduce_scatter(Comm *c, const void *send, void *recv, size_t n,
                               CommDtype dtype, CommRedop redop, void *stream,
                               NcclRequest *req) {
    double t0 = trace_now();
    ncclComm_t comm = nccl_of(c);
    ncclDataType_t t = nccl_dtype(dtype);
    cudaStream_t s = (cudaStream_t)stream;
    const int p = c->size;
    group_start();
    if (n % (size_t)p == 0) {
        if (n)
            NCCL_IN_GROUP(ncclReduceScatter(send, recv, n / (size_t)p, t, nccl_redop(redop), comm,
                                            s));
    } else {
        /* Shard r reduced onto rank r; only the root's recvbuff is written,
         * so in place (recv == send + offset(rank)) stays in place. */
        for (int r = 0; r < p; r++) {
            size_t count = shard_count(n, p, r);
            if (count)
                NCCL_IN_GROUP(ncclReduce(at(send, shard_offset(n, p, r), dtype),
                                         r == c->rank ? recv : NULL, count, t, nccl_redop(redop), r,
                                         comm, s));
        }
    }
    group_end(c, OP_REDUCE_SCATTER);
    issued(c, OP_REDUCE_SCATTER, n * comm_dtype_size(dtype), t0, stream, req);
}

void comm_nccl_iallgather(Comm *c, const void *send, void *recv, size_t n,
                          CommDtype dtype, void *stream, NcclRequest *req) {
    double t0 = trace_now();
    ncclComm_t comm = nccl_of(c);
    ncclDataType_t t = nccl_dtype(dtype);
    cudaStream_t s = (cudaStream_t)stream;
    const int p = c->size;
    group_start();
    if (n % (size_t)p == 0) {
        if (n) NCCL_IN_GROUP(ncclAllGather(send, recv, n / (size_t)p, t, comm, s));
    } else {
        /* Shard r broadcast from rank r into its place; only the root's
         * sendbuff is read, so in place (send == recv + offset(rank)) is
         * NCCL's in-place broadcast on the root. */
        for (int r = 0; r < p; r++) {
            size_t count = shard_count(n, p, r);
            if (count)
                NCCL_IN_GROUP(ncclBroadcast(r == c->rank ? send : NULL,
                                            at(recv, shard_offset(n, p, r), dtype), count, t, r,
                                            comm, s));
        }
    }
    group_end(c, OP_ALLGATHER);
    issued(c, OP_ALLGATHER, n * comm_dtype_size(dtype), t0, stream, req);
}

void comm_nccl_ibroadcast(Comm *c, void *buf, size_t n, CommDtype dtype, int root,
                          void *stream, NcclRequest *req) {
    double t0 = trace_now();
    group_start();
    if (n)
        NCCL_IN_GROUP(ncclBroadcast(buf, buf, n, nccl_dtype(dtype), root, nccl_of(c),
                                    (cudaStream_t)stream));
    group_end(c, OP_BROADCAST);
    issued(c, OP_BROADCAST, n * comm_dtype_size(dtype), t0, stream, req);
}

void comm_nccl_isend(Comm *c, const void *buf, size_t n, CommDtype dtype, int dst,
                     void *stream, NcclRequest *req) {
    double t0 = trace_now();
    group_start();
    if (n)
        NCCL_IN_GROUP(ncclSend(buf, n, nccl_dtype(dtype), dst, nccl_of(c), (cudaStream_t)stream));
    group_end(c, OP_SEND);
    issued(c, OP_SEND, n * comm_dtype_size(dtype), t0, stream, req);
}

void comm_nccl_irecv(Comm *c, void *buf, size_t n, CommDtype dtype, int src,
                     void *stream, NcclRequest *req) {
    double t0 = trace_now();
    group_start();
    if (n)
        NCCL_IN_GROUP(ncclRecv(buf, n, nccl_dtype(dtype), src, nccl_of(c), (cudaStream_t)stream));
    group_end(c, OP_RECV);
    issued(c, OP_RECV, n * comm_dtype_size(dtype), t0, stream, req);
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
    group_start();
    if (n)
        NCCL_IN_GROUP(ncclReduce(send, c->rank == root ? recv : NULL, n, nccl_dtype(dtype),
                                 nccl_redop(redop), root, nccl_of(c), (cudaStream_t)stream));
    group_end(c, OP_REDUCE);
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
    ncclDataType_t t = nccl_dtype(dtype);
    cudaStream_t s = (cudaStream_t)stream;
    size_t sent = 0;
    group_start();
    for (int j = 0; j < c->size; j++) {
        if (send_counts[j])
            NCCL_IN_GROUP(ncclSend(at(send, send_offsets[j], dtype), send_counts[j], t, j, comm,
                                   s));
        if (recv_counts[j])
            NCCL_IN_GROUP(ncclRecv(at(recv, recv_offsets[j], dtype), recv_counts[j], t, j, comm,
                                   s));
        sent += send_counts[j];
    }
    group_end(c, OP_ALLTOALLV);
    issued(c, OP_ALLTOALLV, sent * comm_dtype_size(dtype), t0, stream, &req);
    comm_nccl_wait(&req);
}

void comm_nccl_alltoall(Comm *c, const void *send, void *recv, size_t n,
                        CommDtype dtype, void *stream) {
    CHECK(send != recv || n == 0, "comm_nccl_alltoall: in place is not supported");
    NcclRequest req;
    double t0 = trace_now();
    ncclComm_t comm = nccl_of(c);
    ncclDataType_t t = nccl_dtype(dtype);
    cudaStream_t s = (cudaStream_t)stream;
    group_start();
    for (int j = 0; j < c->size && n; j++) {
        NCCL_IN_GROUP(ncclSend(at(send, (size_t)j * n, dtype), n, t, j, comm, s));
        NCCL_IN_GROUP(ncclRecv(at(recv, (size_t)j * n, dtype), n, t, j, comm, s));
    }
    group_end(c, OP_ALLTOALL);
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
    ncclDataType_t t = nccl_dtype(dtype);
    cudaStream_t s = (cudaStream_t)stream;
    group_start();
    if (send_n) NCCL_IN_GROUP(ncclSend(send, send_n, t, dst, comm, s));
    if (recv_n) NCCL_IN_GROUP(ncclRecv(recv, recv_n, t, src, comm, s));
    group_end(c, OP_SENDRECV);
    issued(c, OP_SENDRECV, send_n * comm_dtype_size(dtype), t0, stream, &req);
    comm_nccl_wait(&req);
}
