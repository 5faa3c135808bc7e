#include "comm.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "device.h"
#include "fileio.h"
#include "kernels.h"
#include "precision.h"
#include "trace.h"
#include "watchdog.h"
#ifdef KIT_NCCL
#include "comm_nccl.h"
#endif

static Comm *g_world;

/* What the kit counts of a group, kept here out of the reach of lab code
 * (any file that includes comm.h reads and writes a Comm's fields): calls,
 * bytes and seconds per op, and whether the group is the kit's own
 * bookkeeping (comm_set_untraced). One per live Comm, newest first. */
typedef struct CommBook {
    Comm *comm;
    CommOpStats stats[OP_NUM];
    int untraced;
    int gpus_attached;  /* comm_attach_gpus has decided: NCCL or host staging */
    /* comm_wire_reserve's buffer, and how much of it the ops in flight
     * hold (wire_live of them; carved from the start, all given back
     * together) */
    char *wire;
    size_t wire_bytes, wire_used;
    int wire_live;
    struct CommBook *next;
} CommBook;
static CommBook *g_books;

static CommBook *book_of(const Comm *c) {
    for (CommBook *b = g_books; b; b = b->next)
        if (b->comm == c) return b;
    die_at(__FILE__, __LINE__, "a communicator the kit did not make (comm_split, comm_init)");
}

void mpi_die_at(const char *file, int line, const char *call, int rc) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "code %d", rc);
    die_at(file, line, "%s failed: %s", call, msg);  /* ends every rank (check.h) */
}

static const char *const g_op_names[OP_NUM] = {
    "allreduce", "reduce_scatter", "allgather", "broadcast", "reduce",
    "alltoall", "alltoallv", "send", "recv", "sendrecv", "barrier", "gather", "nccl_setup"};

const char *comm_op_name(CommOp op) { return g_op_names[op]; }

size_t comm_dtype_size(CommDtype dtype) {
    static const size_t sizes[COMM_NUM_DTYPES] = {4, 8, 4, 2, 2, 4, 4, 1};
    return sizes[dtype];
}

/* floats that travel in 2 bytes (comm.h) */
static int floats_as_half(CommDtype dtype) {
    return dtype == COMM_FLOAT_AS_BF16 || dtype == COMM_FLOAT_AS_FP16;
}

size_t comm_wire_size(CommDtype dtype) { return floats_as_half(dtype) ? 2 : comm_dtype_size(dtype); }

static MPI_Datatype mpi_type(CommDtype dtype) {
    switch (dtype) {
    case COMM_FLOAT: case COMM_FLOAT_AS_BF16: case COMM_FLOAT_AS_FP16: return MPI_FLOAT;
    case COMM_DOUBLE: return MPI_DOUBLE;
    case COMM_INT32: return MPI_INT32_T;
    case COMM_BYTE: return MPI_BYTE;
    default: return MPI_UINT16_T; /* bf16, fp16: MPI has no such types, */
    }
}

/* ... so their reductions are MPI user operations: inout[i] = in[i] op
 * inout[i], in fp32, rounded back to the type */
#define HALF_REDUCTION(name, to_float, from_float, combine)                    \
    static void name(void *in, void *inout, int *len, MPI_Datatype *type) {   \
        (void)type;                                                            \
        const uint16_t *a = in;                                                \
        uint16_t *b = inout;                                                   \
        for (int i = 0; i < *len; i++) {                                       \
            const float x = to_float(a[i]), y = to_float(b[i]);                \
            b[i] = from_float(combine);                                        \
        }                                                                      \
    }
HALF_REDUCTION(bf16_sum, bf16_to_float, float_to_bf16, x + y)
HALF_REDUCTION(bf16_max, bf16_to_float, float_to_bf16, x > y ? x : y)
HALF_REDUCTION(bf16_min, bf16_to_float, float_to_bf16, x < y ? x : y)
HALF_REDUCTION(fp16_sum, fp16_to_float, float_to_fp16, x + y)
HALF_REDUCTION(fp16_max, fp16_to_float, float_to_fp16, x > y ? x : y)
HALF_REDUCTION(fp16_min, fp16_to_float, float_to_fp16, x < y ? x : y)

/* [bf16, fp16][sum, max, min], made by comm_init, freed by comm_finalize */
static MPI_Op g_half_ops[2][COMM_NUM_REDOPS];

static void half_ops_create(void) {
    static MPI_User_function *const fns[2][COMM_NUM_REDOPS] = {
        {bf16_sum, bf16_max, bf16_min}, {fp16_sum, fp16_max, fp16_min}};
    for (int t = 0; t < 2; t++)
        for (int op = 0; op < COMM_NUM_REDOPS; op++)
            MPI_CHECK(MPI_Op_create(fns[t][op], 1, &g_half_ops[t][op]));
}

static void half_ops_free(void) {
    for (int t = 0; t < 2; t++)
        for (int op = 0; op < COMM_NUM_REDOPS; op++) MPI_CHECK(MPI_Op_free(&g_half_ops[t][op]));
}

static MPI_Op mpi_op(CommRedop redop, CommDtype dtype) {
    if (dtype == COMM_BF16 || dtype == COMM_FP16) return g_half_ops[dtype == COMM_FP16][redop];
    switch (redop) {
    case COMM_SUM: return MPI_SUM;
    case COMM_MAX: return MPI_MAX;
    default: return MPI_MIN;
    }
}

/* MPI counts are int: larger messages are rejected rather than truncated. */
static int mpi_count(size_t n) {
    CHECK(n <= INT_MAX, "a message of %zu elements is over MPI's int count limit (%d)", n, INT_MAX);
    return (int)n;
}

void comm_abort_gpus(void) {
#ifdef KIT_NCCL
    for (CommBook *b = g_books; b; b = b->next) comm_nccl_abort(b->comm);
#endif
}

/* How a fatal error ends every rank (check.h): no rank is left waiting. */
static void abort_all(int status) {
    watchdog_mark_leaving();
    comm_abort_gpus();
    MPI_Abort(MPI_COMM_WORLD, status);
    exit(status);
}

static Comm *comm_new(MPI_Comm mpi, const char *name) {
    Comm *c = calloc(1, sizeof *c);
    CHECK(c, "out of memory for a communicator");
    c->mpi = mpi;
    MPI_CHECK(MPI_Comm_rank(mpi, &c->rank));
    MPI_CHECK(MPI_Comm_size(mpi, &c->size));
    snprintf(c->name, sizeof c->name, "%s", name);
    /* for the watchdog's messages, which name ranks as the user sees them */
    c->world_ranks = malloc((size_t)c->size * sizeof(int));
    CHECK(c->world_ranks, "out of memory");
    MPI_Group group, world;
    MPI_CHECK(MPI_Comm_group(mpi, &group));
    MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world));
    for (int r = 0; r < c->size; r++)
        MPI_CHECK(MPI_Group_translate_ranks(group, 1, &r, world, &c->world_ranks[r]));
    MPI_CHECK(MPI_Group_free(&group));
    MPI_CHECK(MPI_Group_free(&world));
    CommBook *b = calloc(1, sizeof *b);
    CHECK(b, "out of memory for a communicator");
    b->comm = c;
    b->next = g_books;
    g_books = b;
    return c;
}

Comm *comm_init(int *argc, char ***argv) {
    CHECK(!g_world, "comm_init called twice");
    int provided;
    MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
    /* MPI's default is to abort inside the failing call with its own report
     * (and status 2, which would read as a user error); returning the error
     * lets MPI_CHECK name the call and the line. Groups split from the world
     * inherit this handler. */
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    /* OpenMP threads compute, only the main thread calls MPI */
    CHECK(provided >= MPI_THREAD_FUNNELED, "this MPI library lacks MPI_THREAD_FUNNELED");
    MPI_Comm world;
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &world));
    g_world = comm_new(world, "world");
    half_ops_create();
    check_set_mpi_hooks(g_world->rank, abort_all);
    MPI_CHECK(MPI_Barrier(world));
    trace_start_clock();
    watchdog_start(world);
    return g_world;
}

Comm *comm_world(void) {
    CHECK(g_world, "comm_world() before comm_init()");
    return g_world;
}

void comm_finalize(void) {
    watchdog_stop();
    while (g_books) comm_free(g_books->comm);
    half_ops_free();
    g_world = NULL;
    /* from here on errors end this process only: MPI_Abort is not allowed
     * after MPI_Finalize */
    check_set_mpi_hooks(0, NULL);
    MPI_CHECK(MPI_Finalize());
}

Comm *comm_split(Comm *parent, int color, int key, const char *name) {
    MPI_Comm sub;
    MPI_CHECK(MPI_Comm_split(parent->mpi, color, key, &sub));
    Comm *c = comm_new(sub, name);
    book_of(c)->gpus_attached = book_of(parent)->gpus_attached;
#ifdef KIT_NCCL
    if (parent->nccl) comm_nccl_split(parent, c, color, key);
#endif
    return c;
}

Comm *comm_split_node(Comm *parent, const char *name) {
    MPI_Comm sub;
    MPI_CHECK(MPI_Comm_split_type(parent->mpi, MPI_COMM_TYPE_SHARED, parent->rank, MPI_INFO_NULL,
                                  &sub));
    return comm_new(sub, name);
}

void comm_set_timeout(double seconds) { watchdog_set_timeout(seconds); }

void comm_attach_gpus(Comm *c) {
    CHECK(device_current() == DEVICE_CUDA, "comm_attach_gpus without --device cuda");
    CommBook *b = book_of(c);
    if (b->gpus_attached) return;
    b->gpus_attached = 1;
#ifdef KIT_NCCL
    if (comm_nccl_one_gpu_per_rank(c)) comm_nccl_attach(c);
#endif
    if (c->rank == 0)
        printf(c->nccl ? "%s: group '%s' over NCCL, one GPU per rank, and every group split "
                         "from it\n"
                       : "%s: group '%s': ranks share GPUs, so NCCL cannot serve them: MPI with "
                         "host staging (every collective copies through host memory)\n",
               g_program_name, c->name);
}

void comm_free(Comm *c) {
#ifdef KIT_NCCL
    if (c->nccl) comm_nccl_detach(c);
#endif
    for (CommBook **p = &g_books; *p; p = &(*p)->next)
        if ((*p)->comm == c) {
            CommBook *b = *p;
            *p = b->next;
            if (b->wire) mem_free(b->wire);
            free(b);
            break;
        }
    if (c->scratch) mem_free(c->scratch);
    free(c->world_ranks);
    MPI_CHECK(MPI_Comm_free(&c->mpi));
    free(c);
}

void comm_record(Comm *c, CommOp op, size_t bytes, double t_start, double t_end) {
    CommBook *b = book_of(c);
    if (b->untraced) return;
    b->stats[op].calls++;
    b->stats[op].bytes += bytes;
    b->stats[op].seconds += t_end - t_start;
    trace_event("comm", g_op_names[op], c->name, t_start, t_end, bytes);
}

CommOpStats comm_op_stats(const Comm *c, CommOp op) { return book_of(c)->stats[op]; }

void comm_reset_stats(Comm *c) {
    CommBook *b = book_of(c);
    memset(b->stats, 0, sizeof b->stats);
}

void comm_set_untraced(Comm *c) { book_of(c)->untraced = 1; }

/* The group's one scratch buffer belongs to one in-place reduce-scatter at a
 * time: a second one in flight would share it, and growing it would free
 * memory MPI is still writing. One buffer that only grows keeps memory.csv's
 * comm peak the same from run to run, whatever the timing. */
static void *claim_scratch(Comm *c, size_t bytes) {
    CHECK(!c->scratch_busy, "group %s: an in-place reduce-scatter is already in flight and uses "
          "the group's scratch buffer; wait for it first, or reduce into a separate buffer", c->name);
    c->scratch_busy = 1;
    if (bytes > c->scratch_bytes) {
        if (c->scratch) mem_free(c->scratch);
        c->scratch = mem_alloc(MEM_COMM, bytes);
        c->scratch_bytes = bytes;
    }
    return c->scratch;
}

void comm_reserve_scratch(Comm *c, size_t bytes) {
    claim_scratch(c, bytes);
    c->scratch_busy = 0;
}

/* counts and displacements of the shard split, as MPI wants them */
static void shard_tables(const Comm *c, size_t n, int *counts, int *displs) {
    for (int r = 0; r < c->size; r++) {
        counts[r] = mpi_count(shard_count(n, c->size, r));
        displs[r] = mpi_count(shard_offset(n, c->size, r));
    }
}

static int *int_table(int n) {
    int *t = malloc((size_t)n * sizeof(int));
    CHECK(t, "out of memory");
    return t;
}

/* The buffers [a, a+na) and [b, b+nb) must not overlap unless they are the
 * documented in-place layout (checked by the caller first). */
static void check_disjoint(const void *a, size_t na, const void *b, size_t nb, const char *op) {
    const char *pa = a, *pb = b;
    CHECK(!a || !b || na == 0 || nb == 0 || pa + na <= pb || pb + nb <= pa,
          "%s: send and receive buffers overlap (and are not the in-place layout)", op);
}

/* ---- floats on a 2-byte wire (COMM_FLOAT_AS_BF16, COMM_FLOAT_AS_FP16) ----
 * An op on such floats is the same op in the 2-byte type on wire buffers:
 * wire_open narrows the ns send floats into one, the op runs, and at
 * completion (finish) the nr received values widen into recv. When one
 * buffer lies inside the other (the in-place layouts) the wire is one
 * buffer with the same overlap, so the op stays in place. */
typedef struct {
    void *send, *recv;
    void *owned[2];
    CommDtype dtype;     /* the 2-byte type the op runs in */
    int precision;
} Wire;

/* A group of one has no wire: its floats stay floats (bit for bit what one
 * device computes) */
static int on_wire(const Comm *c, CommDtype dtype) { return floats_as_half(dtype) && c->size > 1; }

void comm_wire_reserve(Comm *c, size_t n) {
    if (n == 0) return;
    CommBook *b = book_of(c);
    if (2 * n <= b->wire_bytes) return;
    CHECK(!b->wire_live, "group %s: comm_wire_reserve while an op holds its wire buffer", c->name);
    if (b->wire) mem_free(b->wire);
    b->wire = mem_alloc(MEM_COMM, 2 * n);
    b->wire_bytes = 2 * n;
}

/* n 2-byte elements: from the group's reserved buffer when it has one,
 * else allocated */
static void *wire_alloc(Comm *c, size_t n) {
    CommBook *b = book_of(c);
    if (!n) return NULL;
    if (!b->wire) return mem_alloc(MEM_COMM, 2 * n);
    const size_t bytes = 2 * n;
    CHECK(b->wire_used + bytes <= b->wire_bytes, "group %s: its ops in flight need more than the "
          "%zu bytes of wire buffer reserved (comm_wire_reserve)", c->name, b->wire_bytes);
    void *p = b->wire + b->wire_used;
    b->wire_used += bytes;
    b->wire_live++;
    return p;
}

static void wire_free(Comm *c, void *p) {
    CommBook *b = book_of(c);
    if (!p) return;
    if (!b->wire || (char *)p < b->wire || (char *)p >= b->wire + b->wire_bytes) {
        mem_free(p);
        return;
    }
    if (--b->wire_live == 0) b->wire_used = 0;
}

/* [a, a + na floats) inside [b, b + nb floats) */
static int inside(const void *a, size_t na, const void *b, size_t nb) {
    const char *pa = a, *pb = b;
    return a && b && pa >= pb && pa + 4 * na <= pb + 4 * nb;
}

static Wire wire_open(Comm *c, CommDtype dtype, const void *send, size_t ns, const void *recv,
                      size_t nr) {
    Wire w = {0};
    w.precision = dtype == COMM_FLOAT_AS_BF16 ? PRECISION_BF16 : PRECISION_FP16;
    w.dtype = comm_dtype_of(w.precision);
    if (inside(send, ns, recv, nr)) {
        w.recv = w.owned[0] = wire_alloc(c, nr);
        w.send = (char *)w.recv + ((const char *)send - (const char *)recv) / 2;
    } else if (inside(recv, nr, send, ns)) {
        w.send = w.owned[0] = wire_alloc(c, ns);
        w.recv = (char *)w.send + ((const char *)recv - (const char *)send) / 2;
    } else {
        w.send = w.owned[0] = send ? wire_alloc(c, ns) : NULL;
        w.recv = w.owned[1] = recv ? wire_alloc(c, nr) : NULL;
    }
    if (send && ns) narrow_to_half(w.send, send, ns, w.precision);
    return w;
}

/* The request finishes the wire: the nr values at wire recv widen into
 * recv (all of recv, or the part at recv's offset) */
static void wire_attach(CommRequest *req, const Wire *w, void *recv, size_t nr) {
    memcpy(req->wire_owned, w->owned, sizeof w->owned);
    req->wire_recv = w->recv;
    req->wire_dst = recv;
    req->wire_n = recv ? nr : 0;
    req->wire_precision = w->precision;
}

static void wire_finish(CommRequest *req) {
    if (req->wire_n) widen_from_half(req->wire_dst, req->wire_recv, req->wire_n,
                                     req->wire_precision);
    for (int i = 0; i < 2; i++) wire_free(req->comm, req->wire_owned[i]);
    req->wire_owned[0] = req->wire_owned[1] = NULL;
    req->wire_n = 0;
}

/* A blocking call's wire, once its op returned */
static void wire_close(Comm *c, const Wire *w, void *recv, size_t nr) {
    CommRequest req = {0};
    req.comm = c;
    wire_attach(&req, w, recv, nr);
    wire_finish(&req);
}

/* ---- the calls; each blocking call = its non-blocking form + wait ---- */

/* The batch open now (comm_batch_begin), numbered from 1; 0 when none. A
 * request of the open batch must not be waited for: MPI would finish it, but
 * NCCL launches a batch only at its end, so on GPUs the wait would never
 * return. Refusing it here shows the bug on the CPU too. */
static int g_open_batch, g_batches;

static void require_batch_ended(const CommRequest *req) {
    CHECK(!req->batch || req->batch != g_open_batch,
          "a wait for a %s of group '%s' before the end of its batch: NCCL launches a batch at "
          "comm_batch_end, so this wait would never end; end the batch first",
          g_op_names[req->op], req->comm->name);
}

static void start(CommRequest *req, Comm *c, CommOp op, size_t bytes) {
    memset(req, 0, sizeof *req);
    req->batch = g_open_batch;
    req->mpi = req->mpi_second = MPI_REQUEST_NULL;
    req->comm = c;
    req->op = op;
    req->peer = -1;
    req->bytes = bytes;
    req->t_start = trace_now();
    req->active = 1;
}

/* ---- GPU buffers (see comm.h) ----
 * MPI here is not assumed to read GPU memory: it gets host copies, in
 * pinned memory (device_host_alloc). A send buffer is copied in now, on the
 * communication stream after the kernels that produce it, and MPI starts
 * once the copy is done; a receive buffer gets a host twin (with the
 * current contents when the op reads it too), copied back at completion
 * without the host waiting: kernels queued after comm_wait wait on the GPU
 * for that copy (finish). */
static const void *staged_send(CommRequest *req, const void *send, size_t bytes) {
    if (!device_is_gpu_pointer(send)) return send;
    req->staged_send = device_host_alloc(bytes);
    device_comm_copy(req->staged_send, send, bytes);
    device_comm_synchronize();
    return req->staged_send;
}

static void *staged_recv(CommRequest *req, void *recv, size_t bytes, int copy_in) {
    if (!device_is_gpu_pointer(recv)) return recv;
    req->staged_recv = device_host_alloc(bytes);
    if (copy_in) {
        device_comm_copy(req->staged_recv, recv, bytes);
        device_comm_synchronize();
    }
    req->staged_dst = recv;
    req->staged_bytes = bytes;
    return req->staged_recv;
}

/* NCCL serves an op when the group has it and every buffer given is GPU
 * memory: NCCL reads and writes device memory only, so a host buffer beside
 * a GPU one goes the MPI way, staged. */
#ifdef KIT_NCCL
static int nccl_serves(const Comm *c, const void *send, const void *recv) {
    return c->nccl && (send || recv) && (!send || device_is_gpu_pointer(send)) &&
           (!recv || device_is_gpu_pointer(recv));
}
#endif

/* Starts the op on NCCL when nccl_serves it; returns 0 (nothing done)
 * otherwise. The
 * communication stream first waits for the kernels that produced the data.
 * For send and recv, `root` is the peer. */
static int nccl_start(CommRequest *req, const void *send, void *recv, size_t n,
                      CommDtype dtype, CommRedop redop, int root) {
#ifdef KIT_NCCL
    Comm *c = req->comm;
    if (!nccl_serves(c, send, recv)) return 0;
    device_comm_after_compute();
    void *stream = device_comm_stream();
    NcclRequest *r = &req->nccl;
    switch (req->op) {
    case OP_ALLREDUCE: comm_nccl_iallreduce(c, send, recv, n, dtype, redop, stream, r); break;
    case OP_REDUCE_SCATTER:
        comm_nccl_ireduce_scatter(c, send, recv, n, dtype, redop, stream, r);
        break;
    case OP_ALLGATHER: comm_nccl_iallgather(c, send, recv, n, dtype, stream, r); break;
    case OP_BROADCAST: comm_nccl_ibroadcast(c, recv, n, dtype, root, stream, r); break;
    case OP_SEND: comm_nccl_isend(c, send, n, dtype, root, stream, r); break;
    case OP_RECV: comm_nccl_irecv(c, recv, n, dtype, root, stream, r); break;
    default: CHECK(0, "no NCCL path for %s", g_op_names[req->op]);
    }
    req->on_nccl = 1;
    return 1;
#else
    (void)req, (void)send, (void)recv, (void)n, (void)dtype, (void)redop, (void)root;
    return 0;
#endif
}

/* MPI_Test. A receive posted shorter than the message sent to it is the
 * program's error, not MPI's: say so in the caller's terms (the op, the
 * group, the peer), not as MPI_ERR_TRUNCATE inside comm.c. */
static int test_request(const Comm *c, CommOp op, int peer, MPI_Request *r) {
    int done = 0, cls = 0;
    const int rc = MPI_Test(r, &done, MPI_STATUS_IGNORE);
    if (rc == MPI_SUCCESS) return done;
    if (MPI_Error_class(rc, &cls) == MPI_SUCCESS && cls == MPI_ERR_TRUNCATE) {
        char from[32] = "";
        if (peer >= 0) snprintf(from, sizeof from, " from rank %d", peer);
        die_at(__FILE__, __LINE__, "%s on group %s%s: a message arrived longer than the count "
               "posted to receive it: the two sides' counts differ (the counts or offsets given "
               "to comm_%s or comm_i%s)", g_op_names[op], c->name, from, g_op_names[op],
               g_op_names[op]);
    }
    mpi_die_at(__FILE__, __LINE__, "MPI_Test", rc);
}

/* MPI_Wait under the watchdog: polls, and ends the job past the timeout.
 * (Open MPI's own MPI_Wait polls the same way; MPI_REQUEST_NULL is done.) */
static void wait_bounded(const Comm *c, CommOp op, int peer, MPI_Request *r) {
    int done = test_request(c, op, peer, r);
    if (done) return;
    watchdog_begin(c, op, peer);
    while (!done) {
        watchdog_check();
        done = test_request(c, op, peer, r);
    }
    watchdog_end();
}

/* Is the request's transfer done? (NCCL counts its own ops when they are.) */
static int transfer_done(CommRequest *req, int wait) {
    int done = 0;
#ifdef KIT_NCCL
    if (req->on_nccl) {
        if (wait) comm_nccl_wait(&req->nccl);
        return wait || comm_nccl_test(&req->nccl);
    }
#endif
    if (wait) {
        wait_bounded(req->comm, req->op, req->peer, &req->mpi);
        wait_bounded(req->comm, req->op, req->peer, &req->mpi_second);
        return 1;
    }
    done = test_request(req->comm, req->op, req->peer, &req->mpi);
    if (done && req->mpi_second != MPI_REQUEST_NULL)
        done = test_request(req->comm, req->op, req->peer, &req->mpi_second);
    return done;
}

static void finish(CommRequest *req) {
    free(req->tables);
    req->tables = NULL;
    if (req->staged_dst) {
        device_comm_copy(req->staged_dst, req->staged_recv, req->staged_bytes);
        device_compute_after(device_comm_mark());
    }
    if (req->staged_send) device_host_free(req->staged_send);
    if (req->staged_recv) device_host_free(req->staged_recv);
    if (req->copy_bytes) device_copy(req->copy_dst, req->copy_src, req->copy_bytes);
    if (req->holds_scratch) req->comm->scratch_busy = 0;
    wire_finish(req);
    if (!req->on_nccl) comm_record(req->comm, req->op, req->bytes, req->t_start, trace_now());
    req->active = 0;
}

int comm_test(CommRequest *req) {
    if (!req->active) return 1;
    require_batch_ended(req);
    int done = transfer_done(req, 0);
    if (done) finish(req);
    return done;
}

void comm_wait(CommRequest *req) {
    if (!req->active) return;
    require_batch_ended(req);
    transfer_done(req, 1);
    finish(req);
}

void comm_waitall(CommRequest *reqs, int count) {
    for (int i = 0; i < count; i++) comm_wait(&reqs[i]);
}

void comm_iallreduce(Comm *c, const void *send, void *recv, size_t n, CommDtype dtype,
                     CommRedop redop, CommRequest *req) {
    if (on_wire(c, dtype)) {
        Wire w = wire_open(c, dtype, send, n, recv, n);
        comm_iallreduce(c, w.send, w.recv, n, w.dtype, redop, req);
        wire_attach(req, &w, recv, n);
        return;
    }
    size_t bytes = n * comm_dtype_size(dtype);
    if (send != recv) check_disjoint(send, bytes, recv, bytes, "allreduce");
    start(req, c, OP_ALLREDUCE, bytes);
    if (nccl_start(req, send, recv, n, dtype, redop, 0)) return;
    void *hrecv = staged_recv(req, recv, bytes, send == recv);
    MPI_CHECK(MPI_Iallreduce(send == recv ? MPI_IN_PLACE : staged_send(req, send, bytes), hrecv,
                             mpi_count(n), mpi_type(dtype), mpi_op(redop, dtype), c->mpi,
                             &req->mpi));
}

void comm_ireduce_scatter(Comm *c, const void *send, void *recv, size_t n, CommDtype dtype,
                          CommRedop redop, CommRequest *req) {
    if (on_wire(c, dtype)) {
        const size_t mine = shard_count(n, c->size, c->rank);
        Wire w = wire_open(c, dtype, send, n, recv, mine);
        comm_ireduce_scatter(c, w.send, w.recv, n, w.dtype, redop, req);
        wire_attach(req, &w, recv, mine);
        return;
    }
    size_t es = comm_dtype_size(dtype);
    size_t mine = shard_count(n, c->size, c->rank) * es;
    const char *own = (const char *)send + shard_offset(n, c->size, c->rank) * es;
    int in_place = recv == own;
    if (!in_place) check_disjoint(send, n * es, recv, mine, "reduce_scatter");
    start(req, c, OP_REDUCE_SCATTER, n * es);
    /* In place, the shard lands in scratch first and is copied into the
     * buffer at completion: MPI may not write where it still reads. (NCCL
     * could, but takes the same route so memory.csv is the same.) */
    void *dst = in_place ? claim_scratch(c, mine) : recv;
    if (in_place) {
        req->holds_scratch = 1;
        req->copy_dst = recv;
        req->copy_src = dst;
        req->copy_bytes = mine;
    }
    if (nccl_start(req, send, dst, n, dtype, redop, 0)) return;
    /* MPI reads the count array until the operation completes */
    req->tables = int_table(2 * c->size);
    int *counts = req->tables, *displs = req->tables + c->size;
    shard_tables(c, n, counts, displs);
    const void *hsend = staged_send(req, send, n * es);
    MPI_CHECK(MPI_Ireduce_scatter(hsend, staged_recv(req, dst, mine, 0), counts, mpi_type(dtype),
                                  mpi_op(redop, dtype), c->mpi, &req->mpi));
}

void comm_iallgather(Comm *c, const void *send, void *recv, size_t n, CommDtype dtype,
                     CommRequest *req) {
    if (on_wire(c, dtype)) {
        Wire w = wire_open(c, dtype, send, shard_count(n, c->size, c->rank), recv, n);
        comm_iallgather(c, w.send, w.recv, n, w.dtype, req);
        wire_attach(req, &w, recv, n);
        return;
    }
    size_t es = comm_dtype_size(dtype);
    size_t mine = shard_count(n, c->size, c->rank) * es;
    int in_place = send == (const char *)recv + shard_offset(n, c->size, c->rank) * es;
    if (!in_place) check_disjoint(send, mine, recv, n * es, "allgather");
    start(req, c, OP_ALLGATHER, n * es);
    if (nccl_start(req, send, recv, n, dtype, COMM_SUM, 0)) return;
    req->tables = int_table(2 * c->size);
    int *counts = req->tables, *displs = req->tables + c->size;
    shard_tables(c, n, counts, displs);
    void *hrecv = staged_recv(req, recv, n * es, in_place);
    MPI_CHECK(MPI_Iallgatherv(in_place ? MPI_IN_PLACE : staged_send(req, send, mine),
                              counts[c->rank], mpi_type(dtype), hrecv, counts, displs,
                              mpi_type(dtype), c->mpi, &req->mpi));
}

void comm_ibroadcast(Comm *c, void *buf, size_t n, CommDtype dtype, int root, CommRequest *req) {
    CHECK(root >= 0 && root < c->size, "broadcast: root %d outside group %s of %d", root, c->name,
          c->size);
    if (on_wire(c, dtype)) {  /* the root narrows, every rank widens */
        Wire w = wire_open(c, dtype, c->rank == root ? buf : NULL, n, buf, n);
        comm_ibroadcast(c, w.recv, n, w.dtype, root, req);
        wire_attach(req, &w, buf, n);
        return;
    }
    size_t bytes = n * comm_dtype_size(dtype);
    start(req, c, OP_BROADCAST, bytes);
    if (nccl_start(req, NULL, buf, n, dtype, COMM_SUM, root)) return;
    MPI_CHECK(MPI_Ibcast(staged_recv(req, buf, bytes, c->rank == root), mpi_count(n),
                         mpi_type(dtype), root, c->mpi, &req->mpi));
}

void comm_isend(Comm *c, const void *buf, size_t n, CommDtype dtype, int dst, int tag,
                CommRequest *req) {
    if (on_wire(c, dtype)) {
        Wire w = wire_open(c, dtype, buf, n, NULL, 0);
        comm_isend(c, w.send, n, w.dtype, dst, tag, req);
        wire_attach(req, &w, NULL, 0);
        return;
    }
    size_t bytes = n * comm_dtype_size(dtype);
    start(req, c, OP_SEND, bytes);
    req->peer = dst;
    if (nccl_start(req, buf, NULL, n, dtype, COMM_SUM, dst)) return;
    MPI_CHECK(MPI_Isend(staged_send(req, buf, bytes), mpi_count(n), mpi_type(dtype), dst, tag,
                        c->mpi, &req->mpi));
}

void comm_irecv(Comm *c, void *buf, size_t n, CommDtype dtype, int src, int tag,
                CommRequest *req) {
    if (on_wire(c, dtype)) {
        Wire w = wire_open(c, dtype, NULL, 0, buf, n);
        comm_irecv(c, w.recv, n, w.dtype, src, tag, req);
        wire_attach(req, &w, buf, n);
        return;
    }
    size_t bytes = n * comm_dtype_size(dtype);
    start(req, c, OP_RECV, bytes);
    req->peer = src;
    if (nccl_start(req, NULL, buf, n, dtype, COMM_SUM, src)) return;
    MPI_CHECK(MPI_Irecv(staged_recv(req, buf, bytes, 0), mpi_count(n), mpi_type(dtype), src, tag,
                        c->mpi, &req->mpi));
}

void comm_batch_begin(void) {
    CHECK(!g_open_batch, "comm_batch_begin inside another batch");
    g_open_batch = ++g_batches;
#ifdef KIT_NCCL
    if (device_current() == DEVICE_CUDA) comm_nccl_batch_begin();
#endif
}

void comm_batch_end(void) {
    CHECK(g_open_batch, "comm_batch_end without comm_batch_begin");
    g_open_batch = 0;
#ifdef KIT_NCCL
    if (device_current() == DEVICE_CUDA) comm_nccl_batch_end();
#endif
}

void comm_allreduce(Comm *c, const void *send, void *recv, size_t n, CommDtype dtype,
                    CommRedop redop) {
    CommRequest req;
    comm_iallreduce(c, send, recv, n, dtype, redop, &req);
    comm_wait(&req);
}

void comm_reduce_scatter(Comm *c, const void *send, void *recv, size_t n, CommDtype dtype,
                         CommRedop redop) {
    CommRequest req;
    comm_ireduce_scatter(c, send, recv, n, dtype, redop, &req);
    comm_wait(&req);
}

void comm_allgather(Comm *c, const void *send, void *recv, size_t n, CommDtype dtype) {
    CommRequest req;
    comm_iallgather(c, send, recv, n, dtype, &req);
    comm_wait(&req);
}

void comm_allgather_untraced(Comm *c, const void *send, void *recv, size_t n, CommDtype dtype) {
    CommBook *b = book_of(c);
    const int untraced = b->untraced;
    b->untraced = 1;
    comm_allgather(c, send, recv, n, dtype);
    b->untraced = untraced;
}

void comm_broadcast(Comm *c, void *buf, size_t n, CommDtype dtype, int root) {
    CommRequest req;
    comm_ibroadcast(c, buf, n, dtype, root, &req);
    comm_wait(&req);
}

void comm_send(Comm *c, const void *buf, size_t n, CommDtype dtype, int dst, int tag) {
    CommRequest req;
    comm_isend(c, buf, n, dtype, dst, tag, &req);
    comm_wait(&req);
}

void comm_recv(Comm *c, void *buf, size_t n, CommDtype dtype, int src, int tag) {
    CommRequest req;
    comm_irecv(c, buf, n, dtype, src, tag, &req);
    comm_wait(&req);
}

void comm_sendrecv(Comm *c, const void *send, size_t send_n, int dst, void *recv, size_t recv_n,
                   int src, CommDtype dtype, int tag) {
    if (on_wire(c, dtype)) {
        Wire w = wire_open(c, dtype, send, send_n, recv, recv_n);
        comm_sendrecv(c, w.send, send_n, dst, w.recv, recv_n, src, w.dtype, tag);
        wire_close(c, &w, recv, recv_n);
        return;
    }
#ifdef KIT_NCCL
    if (nccl_serves(c, send_n ? send : NULL, recv_n ? recv : NULL)) {
        device_comm_after_compute();
        comm_nccl_sendrecv(c, send, send_n, dst, recv, recv_n, src, dtype, device_comm_stream());
        return;
    }
#endif
    CommRequest req;  /* a receive and a send, both posted before either waits */
    start(&req, c, OP_SENDRECV, send_n * comm_dtype_size(dtype));
    req.peer = src;
    const void *hsend = staged_send(&req, send, send_n * comm_dtype_size(dtype));
    void *hrecv = staged_recv(&req, recv, recv_n * comm_dtype_size(dtype), 0);
    MPI_CHECK(MPI_Irecv(hrecv, mpi_count(recv_n), mpi_type(dtype), src, tag, c->mpi, &req.mpi));
    MPI_CHECK(MPI_Isend(hsend, mpi_count(send_n), mpi_type(dtype), dst, tag, c->mpi,
                        &req.mpi_second));
    comm_wait(&req);
}

/* reduce works on host buffers (no lab needs it on the GPU yet;
 * comm_nccl.h has it for the lab that will). */
static void require_host(const void *a, const void *b, const char *op) {
    CHECK(!device_is_gpu_pointer(a) && !device_is_gpu_pointer(b),
          "%s: GPU buffers are not supported by comm.h's %s yet; use comm_nccl.h", op, op);
}

void comm_reduce(Comm *c, const void *send, void *recv, size_t n, CommDtype dtype,
                 CommRedop redop, int root) {
    CHECK(root >= 0 && root < c->size, "reduce: root %d outside group %s of %d", root, c->name,
          c->size);
    require_host(send, recv, "reduce");
    if (on_wire(c, dtype)) {
        const int root_recv = c->rank == root;
        Wire w = wire_open(c, dtype, send, n, root_recv ? recv : NULL, n);
        comm_reduce(c, w.send, w.recv, n, w.dtype, redop, root);
        wire_close(c, &w, root_recv ? recv : NULL, n);
        return;
    }
    size_t bytes = n * comm_dtype_size(dtype);
    int in_place = c->rank == root && send == recv;
    if (c->rank == root && !in_place) check_disjoint(send, bytes, recv, bytes, "reduce");
    CommRequest req;
    start(&req, c, OP_REDUCE, bytes);
    MPI_CHECK(MPI_Ireduce(in_place ? MPI_IN_PLACE : send, recv, mpi_count(n), mpi_type(dtype),
                          mpi_op(redop, dtype), root, c->mpi, &req.mpi));
    comm_wait(&req);
}

/* GPU buffers (Ulysses' all-to-alls, lab 07): NCCL's grouped sends and
 * receives when the group has it (not in place), else host copies */
void comm_alltoall(Comm *c, const void *send, void *recv, size_t n, CommDtype dtype) {
    if (on_wire(c, dtype)) {
        const size_t all = n * (size_t)c->size;
        Wire w = wire_open(c, dtype, send, all, recv, all);
        comm_alltoall(c, w.send, w.recv, n, w.dtype);
        wire_close(c, &w, recv, all);
        return;
    }
    size_t bytes = n * (size_t)c->size * comm_dtype_size(dtype);
    if (send != recv) check_disjoint(send, bytes, recv, bytes, "alltoall");
#ifdef KIT_NCCL
    if (send != recv && nccl_serves(c, send, recv)) {
        device_comm_after_compute();
        comm_nccl_alltoall(c, send, recv, n, dtype, device_comm_stream());
        return;
    }
#endif
    CommRequest req;
    start(&req, c, OP_ALLTOALL, bytes);
    void *hrecv = staged_recv(&req, recv, bytes, send == recv);
    MPI_CHECK(MPI_Ialltoall(send == recv ? MPI_IN_PLACE : staged_send(&req, send, bytes),
                            mpi_count(n), mpi_type(dtype), hrecv, mpi_count(n), mpi_type(dtype),
                            c->mpi, &req.mpi));
    comm_wait(&req);
}

/* GPU buffers (lab 08's expert exchange): NCCL's grouped sends and
 * receives when the group has it, else host copies of each buffer up to
 * its last block (the receive side's copied in first, so that what the op
 * does not write comes back unchanged) */
void comm_alltoallv(Comm *c, const void *send, const size_t *send_counts,
                    const size_t *send_offsets, void *recv, const size_t *recv_counts,
                    const size_t *recv_offsets, CommDtype dtype) {
    int p = c->size;
    /* sent: elements this rank sends; the extents: elements from the start
     * of each buffer to the end of its last block, for the overlap check */
    size_t sent = 0, send_extent = 0, recv_extent = 0;
    for (int r = 0; r < p; r++) {
        sent += send_counts[r];
        if (send_counts[r] && send_offsets[r] + send_counts[r] > send_extent)
            send_extent = send_offsets[r] + send_counts[r];
        if (recv_counts[r] && recv_offsets[r] + recv_counts[r] > recv_extent)
            recv_extent = recv_offsets[r] + recv_counts[r];
    }
    size_t es = comm_dtype_size(dtype);
    check_disjoint(send, send_extent * es, recv, recv_extent * es, "alltoallv");
    if (on_wire(c, dtype)) {  /* only the blocks received widen: recv's gaps stay */
        Wire w = wire_open(c, dtype, send, send_extent, recv, recv_extent);
        comm_alltoallv(c, w.send, send_counts, send_offsets, w.recv, recv_counts, recv_offsets,
                       w.dtype);
        for (int r = 0; r < p; r++)
            if (recv_counts[r])
                widen_from_half((float *)recv + recv_offsets[r],
                                (const uint16_t *)w.recv + recv_offsets[r], recv_counts[r],
                                w.precision);
        wire_close(c, &w, NULL, 0);
        return;
    }
#ifdef KIT_NCCL
    if (nccl_serves(c, send, recv)) {
        device_comm_after_compute();
        comm_nccl_alltoallv(c, send, send_counts, send_offsets, recv, recv_counts, recv_offsets,
                            dtype, device_comm_stream());
        return;
    }
#endif
    int *sc = int_table(p), *sd = int_table(p), *rc = int_table(p), *rd = int_table(p);
    for (int r = 0; r < p; r++) {
        sc[r] = mpi_count(send_counts[r]);
        sd[r] = mpi_count(send_offsets[r]);
        rc[r] = mpi_count(recv_counts[r]);
        rd[r] = mpi_count(recv_offsets[r]);
    }
    CommRequest req;
    start(&req, c, OP_ALLTOALLV, sent * es);
    const void *hsend = staged_send(&req, send, send_extent * es);
    void *hrecv = staged_recv(&req, recv, recv_extent * es, 1);
    MPI_CHECK(MPI_Ialltoallv(hsend, sc, sd, mpi_type(dtype), hrecv, rc, rd, mpi_type(dtype),
                             c->mpi, &req.mpi));
    comm_wait(&req);
    free(sc);
    free(sd);
    free(rc);
    free(rd);
}

void comm_barrier(Comm *c) {
    CommRequest req;
    start(&req, c, OP_BARRIER, 0);
    MPI_CHECK(MPI_Ibarrier(c->mpi, &req.mpi));
    comm_wait(&req);
}

/* ---- outputs ---- */

char *comm_gather_text(Comm *c, const char *text) {
    int len = mpi_count(strlen(text));
    int *lens = c->rank == 0 ? int_table(c->size) : NULL;
    MPI_Request r;
    MPI_CHECK(MPI_Igather(&len, 1, MPI_INT, lens, 1, MPI_INT, 0, c->mpi, &r));
    wait_bounded(c, OP_GATHER, -1, &r);
    int *displs = NULL;
    char *all = NULL;
    if (c->rank == 0) {
        displs = int_table(c->size);
        size_t total = 0;
        for (int r = 0; r < c->size; r++) {
            displs[r] = mpi_count(total);
            total += (size_t)lens[r];
        }
        all = malloc(total + 1);
        CHECK(all, "out of memory gathering %zu bytes of text", total);
        all[total] = '\0';
    }
    MPI_CHECK(MPI_Igatherv(text, len, MPI_CHAR, all, lens, displs, MPI_CHAR, 0, c->mpi, &r));
    wait_bounded(c, OP_GATHER, -1, &r);
    free(lens);
    free(displs);
    return all;
}

void comm_write_gathered(Comm *c, const char *path, const char *header, const char *text) {
    char *all = comm_gather_text(c, text);
    if (c->rank == 0) {
        AtomicFile af;
        FILE *f = atomic_open(&af, path);
        IO_CHECK(fprintf(f, "%s%s", header, all) >= 0, "writing %s", path);
        atomic_commit(&af);
        free(all);
    }
}

void comm_write_csv(const char *path) {
    Comm *world = comm_world();
    size_t cap = 4096, len = 0;
    char *mine = malloc(cap);
    CHECK(mine, "out of memory");
    mine[0] = '\0';
    /* oldest group first (the world), so rows come in creation order */
    int ngroups = 0;
    for (CommBook *b = g_books; b; b = b->next) ngroups++;
    for (int k = ngroups - 1; k >= 0; k--) {
        CommBook *b = g_books;
        for (int i = 0; i < k; i++) b = b->next;
        const Comm *c = b->comm;
        for (int op = 0; op < OP_NUM; op++) {
            const CommOpStats *s = &b->stats[op];
            if (!s->calls) continue;
            if (cap - len < 256) {
                cap *= 2;
                mine = realloc(mine, cap);
                CHECK(mine, "out of memory");
            }
            len += (size_t)snprintf(mine + len, cap - len, "%d,%s,%s,%llu,%llu,%.6f\n", world->rank,
                                    c->name, g_op_names[op], (unsigned long long)s->calls,
                                    (unsigned long long)s->bytes, s->seconds);
        }
    }
    comm_write_gathered(world, path, "rank,group,op,calls,bytes,seconds\n", mine);
    free(mine);
}
