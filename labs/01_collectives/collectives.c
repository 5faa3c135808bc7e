/* Lab 01: collectives from point-to-point messages.
 *
 * Each collective below is a schedule of comm_sendrecv / comm_send /
 * comm_recv steps. Costs use the alpha-beta model: a message of m bytes
 * takes alpha + m * beta (alpha: latency per message, beta: seconds per
 * byte, 1/beta the link bandwidth); p ranks, S = 4n bytes the whole buffer.
 * The additions (gamma per byte) are folded into beta: on one machine both
 * are memory traffic.
 *
 * Check your work with the checker, then measure it:
 *   mpirun -q --oversubscribe -np 4 ./build/labs/01_collectives/check_collectives
 *   mpirun -np 2 ./build/labs/01_collectives/bench_collectives --op allreduce
 */
#include <string.h>

#include "alloc.h"
#include "check.h"
#include "collectives.h"

enum { TAG_RING = 101, TAG_TREE = 102, TAG_ALLTOALL = 103, TAG_HALVING = 104 };

/* (a mod p) in 0..p-1 for a in -p..2p-1 */
static inline int wrap(int a, int p) { return (a % p + p) % p; }

/* Receive buffers that live across calls and only grow, as NCCL keeps its
 * buffers: a fresh mem_alloc per call would page-fault and zero-fill it every
 * time, as much memory traffic as the collective itself. One buffer for the
 * whole process: the calls are blocking, so never two in flight. */
static inline float *scratch_floats(size_t n) {
    static float *buf;
    static size_t capacity;
    if (n > capacity) {
        mem_free(buf);
        buf = mem_alloc(MEM_COMM, n * sizeof(float));
        capacity = n;
    }
    return buf;
}

/* dst[i] = a[i] + b[i]; dst may be a or b */
static inline void add_floats(float *dst, const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = a[i] + b[i];
}

/* Ring reduce-scatter: p-1 steps, each a comm_sendrecv of one chunk to r+1
 * and one from r-1 (chunks = shards). Ends with recv[0 .. count(r)) = the
 * sum over ranks of chunk r. Sends n - count(r) elements in all: every
 * chunk but its own, once. Receives into scratch_floats (two chunk-sized
 * buffers suffice), never into send, which is the caller's (only chunk r
 * of it changes, and only in place). Which chunk travels at step s is the
 * exercise (README). */
void ring_reduce_scatter(Comm *c, const float *send, float *recv, size_t n) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

/* Ring all-gather: p-1 steps, each a comm_sendrecv of one chunk to r+1 and
 * one from r-1. Ends with every rank's shard in its place in recv. Sends
 * n - count(r+1) elements: every chunk but (r+1)'s, the one it receives
 * last. Received chunks go straight to their place in recv: no scratch. */
void ring_allgather(Comm *c, const float *send, float *recv, size_t n) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

/* Ring all-reduce = ring_reduce_scatter into this rank's shard of recv,
 * then ring_allgather from it. Sends 2n - count(r) - count(r+1) elements.
 * In place when send == recv. */
void ring_allreduce(Comm *c, const float *send, float *recv, size_t n) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

/* Binomial tree broadcast from root. With v = (r - root) mod p, the parent
 * of v > 0 is v with its lowest set bit cleared: v receives buf once, from
 * its parent, then sends it to each of its children (comm_recv, comm_send).
 * Sends n elements per child; the root receives nothing. Which ranks are
 * v's children, and in which order to serve them, is the exercise. */
void tree_broadcast(Comm *c, float *buf, size_t n, int root) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

/* Recursive doubling all-reduce, the sum on every rank, identical bits.
 * p = 2^k: k rounds, in round j a comm_sendrecv of the whole partial sum
 * with the rank whose number differs in bit j, then an addition.
 * Other p: q = the largest power of two <= p, e = p - q; the 2e lowest
 * ranks fold in pairs first (even 2i sends its data to 2i+1 and waits),
 * the q others do the doubling among themselves, then each odd 2i+1 sends
 * the result back to 2i. Sends log2(q) n elements (from rank 2e on),
 * (log2(q) + 1) n (odd ranks below 2e) or n (even ones below 2e).
 * Incoming data goes to scratch_floats(n). In place when send == recv. */
void tree_allreduce(Comm *c, const float *send, float *recv, size_t n) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

/* Pairwise all-to-all: p steps of one comm_sendrecv each (the step that
 * pairs a rank with itself is a local copy, no message), every pair of
 * ranks meeting exactly once and agreeing on it. Sends (p-1) n_per_rank
 * elements. In place when send == recv: the block going out and the block
 * coming in share a place, so copy the outgoing one aside (scratch_floats).
 * The pairing rule is the exercise. */
void pairwise_alltoall(Comm *c, const float *send, float *recv, size_t n_per_rank) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

/* Rabenseifner's all-reduce (the extension): the sum on every rank, the
 * same bits everywhere, in place when send == recv. Among q = 2^k ranks, a
 * reduce-scatter by recursive halving (k comm_sendrecv rounds, partners at
 * distance q/2, q/4, .. 1; a rank keeps half of its segment and adds the
 * partner's copy of that half into it) leaves rank v owning shard v of
 * shard_count(n, q, v) elements, as the ring does; an all-gather by
 * recursive doubling (the same partners, distance 1 first) copies the
 * shards everywhere. For p not a power of two, tree_allreduce's fold
 * around it. The halving receives into scratch_floats: half the buffer is
 * enough. The elements each rank sends, for any n, are the exercise
 * (README): state them in a comment here. */
void halving_doubling_allreduce(Comm *c, const float *send, float *recv, size_t n) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

/* The hierarchical all-reduce (the second extension): the sum on every
 * rank, in place when send == recv, with this rank's node (k ranks, local
 * rank l = node->rank) and the ranks of its local rank on every node
 * (across, N ranks). Three phases, each one of your rings: reduce-scatter
 * inside the node into shard l of recv, all-reduce of that shard across the
 * nodes, all-gather inside the node. Why this order, what each phase sends
 * over which link, and its cost against the flat ring are the exercise
 * (README). */
void hierarchical_allreduce(Comm *node, Comm *across, const float *send, float *recv, size_t n) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}
