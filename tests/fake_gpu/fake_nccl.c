/* fake_nccl.c: the pretend NCCL and the part of the CUDA runtime it needs
 * (include/nccl.h, include/cuda_runtime_api.h), over MPI, on the pretend
 * GPU of fake_device.c. Linked with common/comm_nccl.cu built by g++
 * against those headers, it runs the kit's NCCL path where no GPU is.
 *
 * What it keeps of NCCL, so that a bug in the kit's use of NCCL shows here
 * as it would on GPUs (each a documented NCCL rule):
 *   - Launches. An operation outside a group is one launch; the operations
 *     between ncclGroupStart and the outermost ncclGroupEnd are one launch,
 *     made at that ncclGroupEnd and not before. Launches queue on the
 *     stream in order; an event recorded on the stream is complete once
 *     every launch queued before the record is. So an event recorded
 *     inside a group does not wait for the group's operations.
 *   - Results land late. A launch reads its send buffers when it starts
 *     and writes its receive buffers when a query (cudaEventQuery,
 *     cudaStreamSynchronize, ncclCommGetAsyncError) finds it complete.
 *     Reading a receive buffer before waiting for the op gives stale data;
 *     writing one before (or freeing it) is overwritten at completion.
 *   - Buffers are GPU memory: a host pointer, or one outside a live block
 *     of the pretend GPU, is ncclInvalidArgument. Send and receive buffers
 *     may overlap only in NCCL's in-place layouts.
 *   - Communicators. ncclCommInitRankConfig builds one over the whole world
 *     (the kit's, bootstrapped with MPI_Bcast of the id); ncclCommSplit
 *     makes the others (collective over the parent, like MPI_Comm_split).
 *     Two ranks on one GPU (same device_memory_id) are ncclInvalidUsage,
 *     "Duplicate GPU detected". A non-blocking communicator (blocking = 0)
 *     answers ncclInProgress to its init, split, operations and group ends,
 *     and refuses any call until ncclCommGetAsyncError has been polled to
 *     ncclSuccess. Init is MPI_Comm_idup, so a rank that never arrives
 *     leaves the others polling (the kit's watchdog must end the job).
 *   - Sends and receives between two ranks match in the order issued.
 *
 * Reductions are done here, in rank order (r = 0, 1, ...), from the ranks'
 * contributions gathered by MPI: deterministic, as NCCL is on a fixed
 * topology (not the same order as MPI's own reductions on 3 or more ranks).
 *
 * Test hooks (environment): FAKE_NCCL_STALL_INIT=R makes world rank R sleep
 * instead of joining the world communicator's init; FAKE_NCCL_LOG=1 prints
 * one line per communicator aborted. One thread calls NCCL, as in the kit.
 */
#define _GNU_SOURCE
#include <limits.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mpi.h>

#include "check.h"
#include "device.h"
#include "precision.h"
#include "include/nccl.h"

#define MAX_GROUP_OPS 2048 /* NCCL's limit per group */
#define ID_MAGIC "pretend-nccl-world"

struct FakeNcclComm {
    MPI_Comm mpi;
    int rank, size;
    int blocking;
    ncclResult_t state;  /* ncclInProgress until polled, then ncclSuccess or the error */
    MPI_Comm joining;    /* init: the world's duplicate in flight (MPI_Comm_idup) */
    MPI_Request join;
    int init_rank;
    char last_error[256];
};

typedef enum {
    FN_ALLREDUCE, FN_REDUCE_SCATTER, FN_ALLGATHER, FN_BROADCAST, FN_REDUCE, FN_SEND, FN_RECV
} FnKind;

typedef struct {
    FnKind kind;
    ncclComm_t comm;
    const char *send;
    char *recv;
    size_t count; /* elements, as NCCL's call counts them */
    ncclDataType_t dtype;
    ncclRedOp_t redop;
    int root;      /* broadcast, reduce: the root; send, recv: the peer */
    char *host_in, *host_out; /* MPI's buffers */
    size_t out_bytes;         /* what lands in recv at completion */
    MPI_Request mpi;
} FakeOp;

typedef struct Launch {
    FakeOp *ops;
    int n;
    int started;
    struct Launch *next;
} Launch;

struct FakeCudaEvent { uint64_t seq; };

static Launch *g_head, *g_tail;       /* launches not complete yet, oldest first */
static uint64_t g_enqueued, g_completed;
static int g_group_depth;
static FakeOp *g_group;               /* operations of the open group */
static int g_group_len, g_group_cap;
static cudaError_t g_cuda_last = cudaSuccess;
static char g_last_error[256];

/* ---- errors ---- */

__attribute__((format(printf, 3, 4)))
static ncclResult_t fail(ncclComm_t comm, ncclResult_t rc, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_last_error, sizeof g_last_error, fmt, ap);
    va_end(ap);
    if (comm) snprintf(comm->last_error, sizeof comm->last_error, "%s", g_last_error);
    return rc;
}

const char *ncclGetErrorString(ncclResult_t rc) {
    static const char *const names[ncclNumResults] = {
        "no error", "unhandled cuda error", "unhandled system error", "internal error",
        "invalid argument", "invalid usage", "remote process exited or there was a network error",
        "NCCL operation in progress"};
    return rc >= 0 && rc < ncclNumResults ? names[rc] : "unknown result code";
}

const char *ncclGetLastError(ncclComm_t comm) {
    return comm && comm->last_error[0] ? comm->last_error : g_last_error;
}

static size_t dtype_size(ncclDataType_t t) {
    return t == ncclFloat64 ? 8 : t == ncclBfloat16 || t == ncclFloat16 ? 2 : t == ncclUint8 ? 1 : 4;
}

static int valid_dtype(ncclDataType_t t) {
    return t == ncclInt32 || t == ncclFloat32 || t == ncclFloat64 || t == ncclBfloat16 ||
           t == ncclFloat16 || t == ncclUint8;
}

/* ---- the launches: start in order, complete in order ---- */

static int overlaps(const char *a, size_t na, const char *b, size_t nb) {
    return a && b && na && nb && a < b + nb && b < a + na;
}

/* bytes op reads from send, at start */
static size_t in_bytes(const FakeOp *op) {
    const size_t es = dtype_size(op->dtype);
    switch (op->kind) {
    case FN_REDUCE_SCATTER: return (size_t)op->comm->size * op->count * es;
    case FN_BROADCAST: return op->comm->rank == op->root ? op->count * es : 0;
    case FN_RECV: return 0;
    default: return op->count * es;
    }
}

/* A launch that reads or writes what an earlier incomplete one will write
 * waits for it (the stream's order); later launches wait behind it so that
 * every rank posts its MPI calls in issue order. */
static int waits_for_earlier(const Launch *l) {
    for (const Launch *e = g_head; e && e != l; e = e->next)
        for (int i = 0; i < e->n; i++)
            for (int j = 0; j < l->n; j++) {
                const FakeOp *w = &e->ops[i], *o = &l->ops[j];
                if (overlaps(w->recv, w->out_bytes, o->send, in_bytes(o)) ||
                    overlaps(w->recv, w->out_bytes, o->recv, o->out_bytes))
                    return 1;
            }
    return 0;
}

static int mpi_bytes(size_t n) {
    CHECK(n <= INT_MAX, "pretend NCCL: a message of %zu bytes is over MPI's int count", n);
    return (int)n;
}

static char *host_buffer(size_t bytes) {
    char *p = malloc(bytes ? bytes : 1);
    CHECK(p, "pretend NCCL: out of memory for %zu bytes", bytes);
    return p;
}

static void start_op(FakeOp *op) {
    const size_t es = dtype_size(op->dtype), n = op->count * es;
    const int p = op->comm->size, me = op->comm->rank;
    MPI_Comm mpi = op->comm->mpi;
    const size_t in = in_bytes(op);
    op->host_in = host_buffer(in);
    if (in) device_copy(op->host_in, op->send, in);
    switch (op->kind) {
    case FN_ALLREDUCE: /* every contribution to everyone, reduced at completion */
        op->host_out = host_buffer((size_t)p * n);
        MPI_Iallgather(op->host_in, mpi_bytes(n), MPI_BYTE, op->host_out, mpi_bytes(n), MPI_BYTE,
                       mpi, &op->mpi);
        break;
    case FN_REDUCE_SCATTER: /* block r of every rank to rank r */
        op->host_out = host_buffer((size_t)p * n);
        MPI_Ialltoall(op->host_in, mpi_bytes(n), MPI_BYTE, op->host_out, mpi_bytes(n), MPI_BYTE,
                      mpi, &op->mpi);
        break;
    case FN_REDUCE:
        op->host_out = host_buffer((size_t)p * n);
        MPI_Igather(op->host_in, mpi_bytes(n), MPI_BYTE, op->host_out, mpi_bytes(n), MPI_BYTE,
                    op->root, mpi, &op->mpi);
        break;
    case FN_ALLGATHER:
        op->host_out = host_buffer((size_t)p * n);
        MPI_Iallgather(op->host_in, mpi_bytes(n), MPI_BYTE, op->host_out, mpi_bytes(n), MPI_BYTE,
                       mpi, &op->mpi);
        break;
    case FN_BROADCAST:
        op->host_out = host_buffer(n);
        if (me == op->root) memcpy(op->host_out, op->host_in, n);
        MPI_Ibcast(op->host_out, mpi_bytes(n), MPI_BYTE, op->root, mpi, &op->mpi);
        break;
    case FN_SEND:
        MPI_Isend(op->host_in, mpi_bytes(n), MPI_BYTE, op->root, 0, mpi, &op->mpi);
        break;
    case FN_RECV:
        op->host_out = host_buffer(n);
        MPI_Irecv(op->host_out, mpi_bytes(n), MPI_BYTE, op->root, 0, mpi, &op->mpi);
        break;
    }
}

/* acc (x) = acc (x) op x, element-wise */
static void reduce_into(void *acc, const void *x, size_t count, ncclDataType_t t, ncclRedOp_t op) {
#define REDUCE(T)                                                                   \
    do {                                                                            \
        T *a = acc;                                                                 \
        const T *b = x;                                                             \
        for (size_t i = 0; i < count; i++)                                          \
            a[i] = op == ncclSum ? a[i] + b[i] : op == ncclProd ? a[i] * b[i]       \
                 : op == ncclMax ? (a[i] > b[i] ? a[i] : b[i]) : (a[i] < b[i] ? a[i] : b[i]); \
    } while (0)
#define REDUCE_HALF(to_float, from_float)                                          \
    do {                                                                            \
        uint16_t *a = acc;                                                          \
        const uint16_t *b = x;                                                      \
        for (size_t i = 0; i < count; i++) {                                        \
            const float p = to_float(a[i]), q = to_float(b[i]);                     \
            a[i] = from_float(op == ncclSum ? p + q : op == ncclProd ? p * q        \
                              : op == ncclMax ? (p > q ? p : q) : (p < q ? p : q)); \
        }                                                                           \
    } while (0)
    if (t == ncclFloat32) REDUCE(float);
    else if (t == ncclFloat64) REDUCE(double);
    else if (t == ncclBfloat16) REDUCE_HALF(bf16_to_float, float_to_bf16); /* in fp32, rounded */
    else if (t == ncclFloat16) REDUCE_HALF(fp16_to_float, float_to_fp16);
    else REDUCE(int32_t);
#undef REDUCE
#undef REDUCE_HALF
}

/* the p contributions of count elements in gathered, reduced in rank order
 * into the first */
static void reduce_ranks(char *gathered, int p, size_t count, ncclDataType_t t, ncclRedOp_t op) {
    const size_t n = count * dtype_size(t);
    for (int r = 1; r < p; r++) reduce_into(gathered, gathered + (size_t)r * n, count, t, op);
}

static void finish_op(FakeOp *op) {
    const int p = op->comm->size, me = op->comm->rank;
    if (op->kind == FN_ALLREDUCE || op->kind == FN_REDUCE_SCATTER ||
        (op->kind == FN_REDUCE && me == op->root))
        reduce_ranks(op->host_out, p, op->count, op->dtype, op->redop);
    if (op->out_bytes) device_copy(op->recv, op->host_out, op->out_bytes);
    free(op->host_in);
    free(op->host_out);
}

static void start_ready_launches(void) {
    for (Launch *l = g_head; l; l = l->next) {
        if (l->started) continue;
        if (waits_for_earlier(l)) return;
        for (int i = 0; i < l->n; i++) start_op(&l->ops[i]);
        l->started = 1;
    }
}

static int launch_done(Launch *l) {
    if (!l->started) return 0;
    for (int i = 0; i < l->n; i++) {
        int done = 1;
        if (l->ops[i].mpi != MPI_REQUEST_NULL) MPI_Test(&l->ops[i].mpi, &done, MPI_STATUS_IGNORE);
        if (!done) return 0;
    }
    return 1;
}

/* Complete what has completed, oldest first; start what may start. */
static void progress(void) {
    start_ready_launches();
    while (g_head && launch_done(g_head)) {
        Launch *l = g_head;
        for (int i = 0; i < l->n; i++) finish_op(&l->ops[i]);
        g_head = l->next;
        if (!g_head) g_tail = NULL;
        free(l->ops);
        free(l);
        g_completed++;
        start_ready_launches();
    }
}

static void enqueue(FakeOp *ops, int n) {
    Launch *l = calloc(1, sizeof *l);
    CHECK(l, "pretend NCCL: out of memory");
    l->ops = ops;
    l->n = n;
    if (g_tail) g_tail->next = l;
    else g_head = l;
    g_tail = l;
    g_enqueued++;
    progress();
}

/* ---- communicators ---- */

static ncclResult_t usable(ncclComm_t comm) {
    if (!comm) return fail(NULL, ncclInvalidArgument, "comm is NULL");
    if (comm->state == ncclInProgress)
        return fail(comm, ncclInvalidUsage, "a call on a non-blocking communicator still in "
                    "progress: poll ncclCommGetAsyncError until ncclSuccess first");
    if (comm->state != ncclSuccess)
        return fail(comm, ncclInvalidUsage, "a call on a communicator in error (%s)",
                    ncclGetErrorString(comm->state));
    return ncclSuccess;
}

/* The device ids of the comm's ranks: two ranks on one GPU are NCCL's
 * "Duplicate GPU detected". */
static ncclResult_t check_devices(ncclComm_t comm) {
    enum { ID = 64 };
    char mine[ID] = {0};
    snprintf(mine, sizeof mine, "%s", device_memory_id());
    char *all = host_buffer((size_t)comm->size * ID);
    MPI_Allgather(mine, ID, MPI_CHAR, all, ID, MPI_CHAR, comm->mpi);
    ncclResult_t rc = ncclSuccess;
    for (int i = 0; i < comm->size && rc == ncclSuccess; i++)
        for (int j = i + 1; j < comm->size && rc == ncclSuccess; j++)
            if (strcmp(all + (size_t)i * ID, all + (size_t)j * ID) == 0)
                rc = fail(comm, ncclInvalidUsage, "Duplicate GPU detected : rank %d and rank %d "
                          "both on CUDA device %s", i, j, all + (size_t)i * ID);
    free(all);
    return rc;
}

static ncclComm_t new_comm(const ncclConfig_t *config) {
    ncclComm_t comm = calloc(1, sizeof *comm);
    CHECK(comm, "pretend NCCL: out of memory");
    comm->mpi = comm->joining = MPI_COMM_NULL;
    comm->join = MPI_REQUEST_NULL;
    comm->blocking = config ? config->blocking : 1;
    comm->state = ncclInProgress;
    return comm;
}

/* init: once every rank has joined the world's duplicate, the comm in the
 * order of the ranks given */
static void poll_init(ncclComm_t comm) {
    int done = 0;
    MPI_Test(&comm->join, &done, MPI_STATUS_IGNORE);
    if (!done) return;
    MPI_Comm_split(comm->joining, 0, comm->init_rank, &comm->mpi);
    MPI_Comm_free(&comm->joining);
    MPI_Comm_rank(comm->mpi, &comm->rank);
    MPI_Comm_size(comm->mpi, &comm->size);
    comm->state = check_devices(comm);
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    memset(id, 0, sizeof *id);
    snprintf(id->internal, sizeof id->internal, "%s", ID_MAGIC);
    return ncclSuccess;
}

static void stall_if_asked(void) {
    const char *env = getenv("FAKE_NCCL_STALL_INIT");
    int me;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    if (env && atoi(env) == me)
        for (;;) sleep(60); /* never arrives; the job's end kills it */
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *out, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t *config) {
    int world;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (strcmp(id.internal, ID_MAGIC) != 0)
        return fail(NULL, ncclInvalidArgument, "an id ncclGetUniqueId did not make");
    if (nranks != world || rank < 0 || rank >= nranks)
        return fail(NULL, ncclInvalidUsage, "the pretend NCCL inits the whole world only "
                    "(%d ranks, rank %d, world %d): split the other communicators from it",
                    nranks, rank, world);
    stall_if_asked();
    ncclComm_t comm = new_comm(config);
    comm->init_rank = rank;
    MPI_Comm_idup(MPI_COMM_WORLD, &comm->joining, &comm->join);
    *out = comm;
    if (!comm->blocking) return ncclInProgress;
    while (comm->state == ncclInProgress) {
        poll_init(comm);
        sched_yield();
    }
    return comm->state;
}

ncclResult_t ncclCommSplit(ncclComm_t parent, int color, int key, ncclComm_t *out,
                           ncclConfig_t *config) {
    ncclResult_t rc = usable(parent);
    if (rc != ncclSuccess) return rc;
    MPI_Comm mpi;
    MPI_Comm_split(parent->mpi, color == NCCL_SPLIT_NOCOLOR ? MPI_UNDEFINED : color, key, &mpi);
    if (mpi == MPI_COMM_NULL) {
        *out = NULL;
        return ncclSuccess;
    }
    const ncclConfig_t inherited = {sizeof(ncclConfig_t), parent->blocking};
    ncclComm_t comm = new_comm(config ? config : &inherited);
    comm->mpi = mpi;
    MPI_Comm_rank(mpi, &comm->rank);
    MPI_Comm_size(mpi, &comm->size);
    *out = comm;
    if (comm->blocking) comm->state = ncclSuccess;
    return comm->state;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *async_error) {
    if (!comm) return fail(NULL, ncclInvalidArgument, "comm is NULL");
    if (comm->join != MPI_REQUEST_NULL || comm->joining != MPI_COMM_NULL) poll_init(comm);
    else if (comm->state == ncclInProgress) comm->state = ncclSuccess; /* an op enqueued */
    progress();
    *async_error = comm->state;
    return ncclSuccess;
}

/* every launch of comm complete (its outstanding work, as NCCL's finalize) */
static int has_work(ncclComm_t comm) {
    for (const Launch *l = g_head; l; l = l->next)
        for (int i = 0; i < l->n; i++)
            if (l->ops[i].comm == comm) return 1;
    return 0;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
    ncclResult_t rc = usable(comm);
    if (rc != ncclSuccess) return rc;
    while (has_work(comm)) {
        progress();
        sched_yield();
    }
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    if (!comm) return ncclSuccess;
    if (has_work(comm))
        return fail(comm, ncclInvalidUsage, "ncclCommDestroy with operations in flight: "
                    "ncclCommFinalize first");
    if (comm->mpi != MPI_COMM_NULL) MPI_Comm_free(&comm->mpi);
    free(comm);
    return ncclSuccess;
}

/* No MPI call: the job is ending and MPI may be stuck in a peer. */
ncclResult_t ncclCommAbort(ncclComm_t comm) {
    if (!comm) return ncclSuccess;
    const char *log = getenv("FAKE_NCCL_LOG");
    if (log && strcmp(log, "1") == 0) {
        int me;
        MPI_Comm_rank(MPI_COMM_WORLD, &me);
        fprintf(stderr, "pretend NCCL: rank %d: ncclCommAbort of a communicator %s\n", me,
                comm->state == ncclInProgress ? "still initializing" : "in use");
    }
    comm->state = ncclRemoteError;
    return ncclSuccess;
}

/* ---- groups and operations ---- */

ncclResult_t ncclGroupStart(void) {
    g_group_depth++;
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
    if (g_group_depth == 0)
        return fail(NULL, ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
    if (--g_group_depth > 0 || g_group_len == 0) return ncclSuccess;
    FakeOp *ops = g_group;
    const int n = g_group_len;
    g_group = NULL;
    g_group_len = g_group_cap = 0;
    int in_progress = 0;
    for (int i = 0; i < n; i++)
        if (!ops[i].comm->blocking) {
            ops[i].comm->state = ncclInProgress;
            in_progress = 1;
        }
    enqueue(ops, n); /* which may complete and free ops */
    return in_progress ? ncclInProgress : ncclSuccess;
}

/* the memory [p, p + bytes) is one live block of the pretend GPU */
static int on_gpu(const void *p, size_t bytes) {
    return bytes == 0 ||
           (device_is_gpu_pointer(p) && device_is_gpu_pointer((const char *)p + bytes - 1));
}

/* NCCL's in-place layouts: recv == send (all-reduce, broadcast, reduce),
 * recv == send + rank * count (reduce-scatter), send == recv + rank * count
 * (all-gather); any other overlap is a bug */
static int in_place_ok(const FakeOp *op, size_t in, size_t es) {
    if (!overlaps(op->send, in, op->recv, op->out_bytes)) return 1;
    const size_t shard = (size_t)op->comm->rank * op->count * es;
    switch (op->kind) {
    case FN_REDUCE_SCATTER: return op->recv == op->send + shard;
    case FN_ALLGATHER: return op->send == op->recv + shard;
    default: return op->send == op->recv;
    }
}

static FakeOp op_of(FnKind kind, ncclComm_t comm, const void *send, void *recv, size_t count,
                    ncclDataType_t dtype, ncclRedOp_t redop, int root) {
    return (FakeOp){.kind = kind, .comm = comm, .send = send, .recv = recv, .count = count,
                    .dtype = dtype, .redop = redop, .root = root, .mpi = MPI_REQUEST_NULL};
}

static ncclResult_t post(FakeOp op) {
    ncclResult_t rc = usable(op.comm);
    if (rc != ncclSuccess) return rc;
    if (!valid_dtype(op.dtype)) return fail(op.comm, ncclInvalidArgument, "datatype %d", op.dtype);
    const int p = op.comm->size, me = op.comm->rank;
    if ((op.kind == FN_BROADCAST || op.kind == FN_REDUCE || op.kind == FN_SEND ||
         op.kind == FN_RECV) && (op.root < 0 || op.root >= p))
        return fail(op.comm, ncclInvalidArgument, "root or peer %d outside %d ranks", op.root, p);
    const size_t es = dtype_size(op.dtype);
    switch (op.kind) {
    case FN_ALLGATHER: op.out_bytes = (size_t)p * op.count * es; break;
    case FN_REDUCE: op.out_bytes = me == op.root ? op.count * es : 0; break;
    case FN_SEND: op.out_bytes = 0; break;
    default: op.out_bytes = op.count * es; break;
    }
    const size_t in = in_bytes(&op);
    if (!on_gpu(op.send, in))
        return fail(op.comm, ncclInvalidArgument, "sendbuff %p is not GPU memory of this rank "
                    "(%zu bytes)", (const void *)op.send, in);
    if (!on_gpu(op.recv, op.out_bytes))
        return fail(op.comm, ncclInvalidArgument, "recvbuff %p is not GPU memory of this rank "
                    "(%zu bytes)", (void *)op.recv, op.out_bytes);
    if (!in_place_ok(&op, in, es))
        return fail(op.comm, ncclInvalidArgument, "send and receive buffers overlap outside "
                    "NCCL's in-place layout");
    op.mpi = MPI_REQUEST_NULL;
    if (g_group_depth > 0) {
        if (g_group_len == MAX_GROUP_OPS)
            return fail(op.comm, ncclInvalidUsage, "more than %d operations in one group",
                        MAX_GROUP_OPS);
        if (g_group_len == g_group_cap) {
            g_group_cap = g_group_cap ? 2 * g_group_cap : 16;
            g_group = realloc(g_group, (size_t)g_group_cap * sizeof *g_group);
            CHECK(g_group, "pretend NCCL: out of memory");
        }
        g_group[g_group_len++] = op;
        return ncclSuccess;
    }
    FakeOp *one = malloc(sizeof *one);
    CHECK(one, "pretend NCCL: out of memory");
    *one = op;
    ncclComm_t comm = op.comm;
    enqueue(one, 1);
    if (comm->blocking) return ncclSuccess;
    comm->state = ncclInProgress;
    return ncclInProgress;
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream) {
    (void)stream;
    return post(op_of(FN_ALLREDUCE, comm, sendbuff, recvbuff, count, datatype, op, 0));
}

ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream) {
    (void)stream;
    return post(op_of(FN_REDUCE_SCATTER, comm, sendbuff, recvbuff, recvcount, datatype, op, 0));
}

ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
    (void)stream;
    return post(op_of(FN_ALLGATHER, comm, sendbuff, recvbuff, sendcount, datatype, ncclSum, 0));
}

ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           cudaStream_t stream) {
    (void)stream;
    return post(op_of(FN_BROADCAST, comm, sendbuff, recvbuff, count, datatype, ncclSum, root));
}

ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count,
                        ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
                        cudaStream_t stream) {
    (void)stream;
    return post(op_of(FN_REDUCE, comm, sendbuff, recvbuff, count, datatype, op, root));
}

ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
    (void)stream;
    return post(op_of(FN_SEND, comm, sendbuff, NULL, count, datatype, ncclSum, peer));
}

ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
    (void)stream;
    return post(op_of(FN_RECV, comm, NULL, recvbuff, count, datatype, ncclSum, peer));
}

/* ---- the CUDA runtime's streams and events ---- */

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags) {
    (void)flags;
    *event = calloc(1, sizeof **event);
    return *event ? cudaSuccess : cudaErrorInvalidValue;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
    (void)stream;
    if (!event) return g_cuda_last = cudaErrorInvalidResourceHandle;
    event->seq = g_enqueued;
    return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
    if (!event) return g_cuda_last = cudaErrorInvalidResourceHandle;
    progress();
    if (g_completed >= event->seq) return cudaSuccess;
    return g_cuda_last = cudaErrorNotReady;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
    free(event);
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
    (void)stream;
    for (progress(); g_head; progress()) sched_yield();
    return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
    cudaError_t rc = g_cuda_last;
    g_cuda_last = cudaSuccess;
    return rc;
}

const char *cudaGetErrorString(cudaError_t error) {
    switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    }
    return "unknown error";
}
