/* comm.h: the communicator every lab talks through.
 *
 * A Comm is a group of ranks (the world, or a DP/TP/PP/CP/EP group made by
 * mesh.h) with the collectives a distributed trainer needs. It runs on MPI.
 *
 * GPU buffers (--device cuda, device.h). A group that comm_attach_gpus gave
 * an NCCL communicator (every rank has a GPU of its own) runs its
 * collectives on GPU buffers through NCCL (comm_nccl.h), on the
 * communication stream. Otherwise MPI works on host copies of GPU buffers
 * ("host staging": copy in, MPI, copy the result back at completion), which
 * is slower but lets several ranks share one GPU. Which path ran is
 * invisible to the caller and to comm.csv. Host buffers always go through
 * MPI. Staging copies are host memory and are not counted in memory.csv,
 * which counts the device's memory. reduce takes host buffers only
 * (comm_nccl.h has its GPU form).
 *
 * Conventions, the same for every call:
 *   - counts are in elements of `dtype`; buffers are host memory or memory
 *     of this process's GPU;
 *   - `send == recv` (or, for the sharded ops, the layouts below) means in
 *     place; other overlaps are an error;
 *   - every call is counted (calls, bytes, seconds per op and group, for
 *     comm.csv) and recorded as a trace event (trace.h);
 *   - errors from MPI are fatal with the call's name, file and line;
 *   - a count (or offset) above INT_MAX elements is a fatal error: MPI
 *     counts are int, so split such a buffer into several calls.
 *
 * Uneven shards. Reduce-scatter and all-gather split a buffer of n elements
 * over p ranks as evenly as possible: rank r owns
 *     count(r)  = n / p + (r < n % p)
 *     offset(r) = r * (n / p) + min(r, n % p)
 * so the first n % p ranks hold one element more, and any n works, 0 and
 * n < p included (some shards are then empty). shard_count/shard_offset
 * compute it; every lab that shards a buffer (ZeRO, the ring collectives)
 * uses the same split.
 *
 * In place for the sharded ops follows NCCL: reduce-scatter is in place when
 * recv == send + offset(rank) (only the rank's own shard of the buffer
 * changes), all-gather when send == recv + offset(rank).
 */
#ifndef COMM_H
#define COMM_H

#include <stddef.h>
#include <stdint.h>

#include <mpi.h>

#include "check.h"
#include "precision.h"

/* MPI_CHECK(MPI_Send(...)): a failed MPI call dies naming the call. */
#define MPI_CHECK(call)                                                        \
    do {                                                                       \
        int mpi_check_rc_ = (call);                                            \
        if (mpi_check_rc_ != MPI_SUCCESS) mpi_die_at(__FILE__, __LINE__, #call, mpi_check_rc_); \
    } while (0)

__attribute__((noreturn))
void mpi_die_at(const char *file, int line, const char *call, int rc);

/* COMM_BF16 and COMM_FP16 are mixed precision's 2-byte floats (precision.h),
 * stored as uint16_t. Their reductions add (or compare) in fp32 and round to
 * the type at every step, as NCCL does, so the order of the ranks' partial
 * sums can change the last bits where fp32's could not.
 *
 * COMM_FLOAT_AS_BF16 and COMM_FLOAT_AS_FP16 are floats in memory that go on
 * the wire in 2 bytes: mixed precision's activations, which the kit keeps
 * as floats holding values of the run's format (model.h), travel as a bf16
 * trainer's would. The call narrows the send floats into a wire buffer of
 * the 2-byte type, runs on it (reductions as above), and widens what
 * arrived into recv at completion; counts and offsets stay in floats,
 * comm.csv counts the 2-byte wire. The wire buffers are MEM_COMM, held
 * from the call to its completion (one buffer for the in-place layouts).
 * A group of one has no wire: there the floats stay floats, 4 bytes each.
 *
 * COMM_BYTE moves bytes as they are (ZeRO++'s packed int8, kernels.h's
 * quantize_int8): all-gathers, all-to-alls, sends; no reduction.
 * Where the sizes vary from call to call (lab 08's all-to-all-v's, whose
 * rows depend on the routing), comm_wire_reserve gives the group one wire
 * buffer of their bound instead, so that memory.csv's peak is the bound.
 * comm_act_dtype picks the activations' dtype for a run's precision. */
typedef enum {
    COMM_FLOAT, COMM_DOUBLE, COMM_INT32, COMM_BF16, COMM_FP16,
    COMM_FLOAT_AS_BF16, COMM_FLOAT_AS_FP16, COMM_BYTE, COMM_NUM_DTYPES
} CommDtype;
typedef enum { COMM_SUM, COMM_MAX, COMM_MIN, COMM_NUM_REDOPS } CommRedop;

/* The CommDtype of a buffer of precision.h's Precision p (fp32's floats,
 * or mixed precision's 2-byte gradients and weights), and back */
static inline CommDtype comm_dtype_of(int precision) {
    return precision == PRECISION_BF16 ? COMM_BF16
         : precision == PRECISION_FP16 ? COMM_FP16 : COMM_FLOAT;
}
static inline Precision comm_dtype_precision(CommDtype t) {
    return t == COMM_BF16 ? PRECISION_BF16 : t == COMM_FP16 ? PRECISION_FP16 : PRECISION_FP32;
}
/* What the activations of a run of precision p travel as: COMM_FLOAT in
 * fp32, else the floats on a 2-byte wire */
static inline CommDtype comm_act_dtype(int precision) {
    return precision == PRECISION_BF16 ? COMM_FLOAT_AS_BF16
         : precision == PRECISION_FP16 ? COMM_FLOAT_AS_FP16 : COMM_FLOAT;
}
/* bytes of one element in memory (a COMM_FLOAT_AS_* element is a float),
 * and on the wire (2 for those) */
size_t comm_dtype_size(CommDtype dtype);
size_t comm_wire_size(CommDtype dtype);
/* element i of a buffer of dtype */
static inline void *comm_at(void *base, CommDtype dtype, size_t i) {
    return (char *)base + i * comm_dtype_size(dtype);
}

/* What the counters and the trace call each operation (comm.csv's "op"). */
typedef enum {
    OP_ALLREDUCE, OP_REDUCE_SCATTER, OP_ALLGATHER, OP_BROADCAST, OP_REDUCE,
    OP_ALLTOALL, OP_ALLTOALLV, OP_SEND, OP_RECV, OP_SENDRECV, OP_BARRIER,
    OP_GATHER,  /* comm_gather_text: the kit's outputs, not counted */
    OP_NCCL_SETUP,  /* making, splitting or freeing an NCCL communicator, not counted */
    OP_NUM
} CommOp;

typedef struct {
    uint64_t calls;
    uint64_t bytes;     /* payload, see comm_op_bytes below */
    double seconds;     /* wall time inside the call (blocking) or from
                           issue to completion (non-blocking) */
} CommOpStats;

typedef struct Comm {
    MPI_Comm mpi;
    int rank, size;
    char name[16];               /* "world", "dp", "tp", "pp", "cp", "ep"... */
    void *scratch;               /* grown on demand (MEM_COMM) for in-place ops */
    size_t scratch_bytes;
    int scratch_busy;            /* an in-place reduce-scatter is using scratch */
    void *nccl;                  /* ncclComm_t, set by comm_nccl_attach (comm_nccl.h) */
    int *world_ranks;            /* world rank of each rank of the group */
} Comm;   /* its counters are comm.c's own (comm_op_stats): lab code cannot edit them */

/* A non-blocking NCCL operation in flight (comm_nccl.h). */
typedef struct {
    void *event;        /* cudaEvent_t recorded on the stream after the op */
    struct Comm *comm;
    CommOp op;
    size_t bytes;       /* counted when it completes */
    double t_start;     /* trace_now() at issue */
    int active;
} NcclRequest;

/* A non-blocking operation in flight. */
typedef struct {
    MPI_Request mpi;
    MPI_Request mpi_second;  /* sendrecv: the send beside the receive (or MPI_REQUEST_NULL) */
    NcclRequest nccl;   /* instead of mpi, when on_nccl */
    int on_nccl;
    Comm *comm;
    CommOp op;
    int peer;           /* send, recv: the peer's rank in comm (-1 for collectives) */
    size_t bytes;
    double t_start;
    int active;
    int batch;          /* the batch it was posted in (comm_batch_begin), 0 for none */
    int *tables;        /* MPI's count/displacement arrays, kept until completion */
    /* in-place reduce-scatter finishes with a copy out of scratch */
    void *copy_dst;
    const void *copy_src;
    size_t copy_bytes;
    int holds_scratch;  /* releases comm->scratch at completion */
    /* GPU buffers on the MPI path: MPI works on host copies (staged_send,
     * staged_recv); at completion staged_recv goes back to staged_dst */
    void *staged_send, *staged_recv, *staged_dst;
    size_t staged_bytes;
    /* floats on a 2-byte wire (COMM_FLOAT_AS_*): the wire buffers this
     * request allocated, freed at completion, and where the wire_n values
     * received (at wire_recv) widen to, in wire_precision */
    void *wire_owned[2];
    void *wire_recv;
    float *wire_dst;
    size_t wire_n;
    int wire_precision;
} CommRequest;

/* Start MPI (once per process) and return the world group. The clock of the
 * trace starts here, after a barrier, so all ranks share time zero. */
Comm *comm_init(int *argc, char ***argv);
/* Free every group and finalize MPI. */
void comm_finalize(void);
Comm *comm_world(void);

/* MPI_Comm_split: ranks with the same color form a group, ordered by key. */
Comm *comm_split(Comm *parent, int color, int key, const char *name);
/* The ranks of parent on this node (they share its memory), in parent's order. */
Comm *comm_split_node(Comm *parent, const char *name);
/* From now on c's ops on a 2-byte wire carve their wire buffers out of one
 * buffer of (at least) n 2-byte elements, kept (MEM_COMM) until comm_free,
 * instead of allocating each; ops in flight together need their sum
 * (fatal past it). Grows only while no op holds it. */
void comm_wire_reserve(Comm *c, size_t n);
/* With --device cuda: give c an NCCL communicator when every rank of c has
 * a GPU of its own; when ranks share GPUs, c stages GPU buffers through
 * host memory. Rank 0 of c says which, once. Collective over c; once per
 * group (a second call does nothing). Groups split from c afterwards
 * (comm_split) take the same path: each its own NCCL communicator, or
 * staging. mesh_create attaches the world first, so every group of a
 * trainer's mesh runs on NCCL when each rank has its own GPU. */
void comm_attach_gpus(Comm *c);
void comm_free(Comm *c);

const char *comm_op_name(CommOp op);

/* Shards of n elements over p ranks (see the top of this file). */
static inline size_t shard_count(size_t n, int p, int r) {
    return n / (size_t)p + ((size_t)r < n % (size_t)p);
}
static inline size_t shard_offset(size_t n, int p, int r) {
    size_t base = n / (size_t)p, rem = n % (size_t)p;
    return (size_t)r * base + ((size_t)r < rem ? (size_t)r : rem);
}

/* ---- blocking collectives ----
 * Bytes counted per call ("bytes" in comm.csv), with S the full buffer:
 *   allreduce S, reduce_scatter S (the input), allgather S (the output),
 *   broadcast and reduce S, alltoall(v) the bytes this rank sends,
 *   send and sendrecv the bytes sent, recv the bytes received. */
void comm_allreduce(Comm *c, const void *send, void *recv, size_t n,
                    CommDtype dtype, CommRedop redop);
/* send: n elements; recv: shard_count(n, p, rank) elements. In place, the
 * shard is reduced into the group's scratch buffer and then copied, so at
 * most one in-place reduce-scatter per group may be in flight (fatal
 * otherwise). */
void comm_reduce_scatter(Comm *c, const void *send, void *recv, size_t n,
                         CommDtype dtype, CommRedop redop);
/* Grow the group's scratch buffer to `bytes` now rather than at the first
 * in-place reduce-scatter: where that comes after other buffers of the
 * step are freed (the composed ZeRO-1's, after the pipeline's messages),
 * the first step's memory peak is then every step's. */
void comm_reserve_scratch(Comm *c, size_t bytes);
/* send: shard_count(n, p, rank) elements; recv: n elements */
void comm_allgather(Comm *c, const void *send, void *recv, size_t n, CommDtype dtype);
void comm_broadcast(Comm *c, void *buf, size_t n, CommDtype dtype, int root);
/* recv is used on the root only (may be NULL elsewhere) */
void comm_reduce(Comm *c, const void *send, void *recv, size_t n,
                 CommDtype dtype, CommRedop redop, int root);
/* block j (n elements) of send goes to rank j, into block `rank` of its recv */
void comm_alltoall(Comm *c, const void *send, void *recv, size_t n, CommDtype dtype);
/* variable counts: send_counts[j] elements at send_offsets[j] go to rank j;
 * recv_counts[j] elements from rank j land at recv_offsets[j] */
void comm_alltoallv(Comm *c, const void *send, const size_t *send_counts,
                    const size_t *send_offsets, void *recv, const size_t *recv_counts,
                    const size_t *recv_offsets, CommDtype dtype);
void comm_send(Comm *c, const void *buf, size_t n, CommDtype dtype, int dst, int tag);
void comm_recv(Comm *c, void *buf, size_t n, CommDtype dtype, int src, int tag);
/* send to dst and receive from src at once (no deadlock in a ring) */
void comm_sendrecv(Comm *c, const void *send, size_t send_n, int dst,
                   void *recv, size_t recv_n, int src, CommDtype dtype, int tag);
void comm_barrier(Comm *c);

/* ---- non-blocking forms: start, then comm_test / comm_wait ----
 * MPI progresses them only inside MPI calls, so a trainer that overlaps
 * calls comm_test now and then (e.g. between backward layers). */
void comm_iallreduce(Comm *c, const void *send, void *recv, size_t n,
                     CommDtype dtype, CommRedop redop, CommRequest *req);
void comm_ireduce_scatter(Comm *c, const void *send, void *recv, size_t n,
                          CommDtype dtype, CommRedop redop, CommRequest *req);
void comm_iallgather(Comm *c, const void *send, void *recv, size_t n,
                     CommDtype dtype, CommRequest *req);
void comm_ibroadcast(Comm *c, void *buf, size_t n, CommDtype dtype, int root,
                     CommRequest *req);
void comm_isend(Comm *c, const void *buf, size_t n, CommDtype dtype, int dst, int tag,
                CommRequest *req);
void comm_irecv(Comm *c, void *buf, size_t n, CommDtype dtype, int src, int tag,
                CommRequest *req);
/* A batch of sends and receives (pipeline schedules' pairs: schedule.h):
 * everything posted between begin and end starts together. MPI's
 * non-blocking calls already do; NCCL's go on one stream in order, where a
 * send waits for its receive, so a batch is one NCCL group there, launched
 * at its end. So no request of a batch may be waited for (comm_wait,
 * comm_test, a blocking call) before comm_batch_end: a fatal error, on the
 * CPU as on GPUs. Batches do not nest. */
void comm_batch_begin(void);
void comm_batch_end(void);
/* Every blocking call and every wait is bounded by the communication
 * watchdog (watchdog.h): past --comm-timeout (default 300 s) the job ends
 * with one line, from one rank, naming the rank, the group, the operation,
 * the wait and what holds it up (a stopped or dead rank, a chain of waits). */
void comm_set_timeout(double seconds);
/* For a program's own option parser: --comm-timeout's help line. */
#define COMM_TIMEOUT_HELP \
    "  --comm-timeout S     end the job when a communication waits over S s; 0 = never (default 300)\n"

/* 1 when done (the request is then finished and counted), 0 otherwise */
int comm_test(CommRequest *req);
void comm_wait(CommRequest *req);
void comm_waitall(CommRequest *reqs, int count);

/* ---- counters and outputs ---- */
/* What comm.csv will say of c's op so far. */
CommOpStats comm_op_stats(const Comm *c, CommOp op);
/* Every rank calls it (collective over the world): rank 0 writes one
 * comm.csv, "rank,group,op,calls,bytes,seconds", a row per rank, group and
 * op that was called at least once. */
void comm_write_csv(const char *path);
/* Gather text from every rank of c to its rank 0, in rank order. Returns a
 * malloc'ed NUL-terminated string on rank 0 (caller frees), NULL elsewhere. */
char *comm_gather_text(Comm *c, const char *text);
/* The same, then rank 0 writes header + every rank's text to path,
 * atomically (fileio.h): per-rank CSV files such as comm.csv, memory.csv. */
void comm_write_gathered(Comm *c, const char *path, const char *header, const char *text);

/* ---- the kit's own: never called from a lab's files ----
 * These change what comm.csv and the trace see. The grader's builds and
 * the Makefile's refuse a lab object that calls one of them, or MPI or
 * NCCL directly (scripts/lab_symbols.sh): a lab communicates through the
 * counted calls above and nothing else. */
/* Count one finished call and record its trace event (times from
 * trace_now()). comm.c calls it for every op; so does the NCCL path. */
void comm_record(Comm *c, CommOp op, size_t bytes, double t_start, double t_end);
void comm_reset_stats(Comm *c);
/* Every call on c from now on is the kit's bookkeeping (preflight.h):
 * neither counted in comm.csv nor traced. */
void comm_set_untraced(Comm *c);
/* The job ends on an error: abort every NCCL communicator first (the fatal
 * paths of check.h and the watchdog call it), so no GPU is left waiting in
 * a collective for a rank that is gone. */
void comm_abort_gpus(void);
/* An all-gather for a program's outputs (a gather for --dump-params, a
 * timeline), not the training's traffic: not counted in comm.csv */
void comm_allgather_untraced(Comm *c, const void *send, void *recv, size_t n, CommDtype dtype);

#endif
