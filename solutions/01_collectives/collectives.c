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

enum { TAG_RING = 101, TAG_TREE = 102, TAG_ALLTOALL = 103 };

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
    /* BEGIN SOLUTION */
    const int p = c->size, r = c->rank;
    if (p == 1) {
        if (recv != send) memcpy(recv, send, n * sizeof(float));
        return;
    }
    const size_t largest = shard_count(n, p, 0);
    float *incoming = scratch_floats(2 * largest), *spare = incoming + largest;
    const float *outgoing = send + shard_offset(n, p, wrap(r - 1, p));
    for (int s = 0; s < p - 1; s++) {
        int out = wrap(r - s - 1, p), in = wrap(r - s - 2, p);
        size_t in_count = shard_count(n, p, in);
        comm_sendrecv(c, outgoing, shard_count(n, p, out), (r + 1) % p, incoming, in_count,
                      wrap(r - 1, p), COMM_FLOAT, TAG_RING);
        /* the final sum goes straight to recv (in place: recv is chunk r of send) */
        float *sum = s == p - 2 ? recv : incoming;
        add_floats(sum, incoming, send + shard_offset(n, p, in), in_count);
        outgoing = sum;
        float *t = incoming;  /* the sum leaves at the next step: receive elsewhere */
        incoming = spare;
        spare = t;
    }
    /* END SOLUTION */
}

/* Ring all-gather: p-1 steps, each a comm_sendrecv of one chunk to r+1 and
 * one from r-1. Ends with every rank's shard in its place in recv. Sends
 * n - count(r+1) elements: every chunk but (r+1)'s, the one it receives
 * last. Received chunks go straight to their place in recv: no scratch. */
void ring_allgather(Comm *c, const float *send, float *recv, size_t n) {
    /* BEGIN SOLUTION */
    const int p = c->size, r = c->rank;
    float *own = recv + shard_offset(n, p, r);
    if (send != own) memcpy(own, send, shard_count(n, p, r) * sizeof(float));
    for (int s = 0; s < p - 1; s++) {
        int out = wrap(r - s, p), in = wrap(r - s - 1, p);
        comm_sendrecv(c, recv + shard_offset(n, p, out), shard_count(n, p, out), (r + 1) % p,
                      recv + shard_offset(n, p, in), shard_count(n, p, in), wrap(r - 1, p),
                      COMM_FLOAT, TAG_RING);
    }
    /* END SOLUTION */
}

/* Ring all-reduce = ring_reduce_scatter into this rank's shard of recv,
 * then ring_allgather from it. Sends 2n - count(r) - count(r+1) elements.
 * In place when send == recv. */
void ring_allreduce(Comm *c, const float *send, float *recv, size_t n) {
    /* BEGIN SOLUTION */
    float *own = recv + shard_offset(n, c->size, c->rank);
    ring_reduce_scatter(c, send, own, n);
    ring_allgather(c, own, recv, n);
    /* END SOLUTION */
}

/* Binomial tree broadcast from root. With v = (r - root) mod p, the parent
 * of v > 0 is v with its lowest set bit cleared: v receives buf once, from
 * its parent, then sends it to each of its children (comm_recv, comm_send).
 * Sends n elements per child; the root receives nothing. Which ranks are
 * v's children, and in which order to serve them, is the exercise. */
void tree_broadcast(Comm *c, float *buf, size_t n, int root) {
    /* BEGIN SOLUTION */
    const int p = c->size, v = wrap(c->rank - root, p);
    int bit = 1;
    while (bit < p && !(v & bit)) bit <<= 1;
    if (v != 0) comm_recv(c, buf, n, COMM_FLOAT, (v - bit + root) % p, TAG_TREE);
    for (bit >>= 1; bit > 0; bit >>= 1)
        if (v + bit < p) comm_send(c, buf, n, COMM_FLOAT, (v + bit + root) % p, TAG_TREE);
    /* END SOLUTION */
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
    /* BEGIN SOLUTION */
    const int p = c->size, r = c->rank;
    if (recv != send) memcpy(recv, send, n * sizeof(float));
    int q = 1;
    while (2 * q <= p) q *= 2;
    const int e = p - q;
    float *incoming = scratch_floats(n);

    int v = r - e;  /* virtual rank in the doubling, -1 for a folded one */
    if (r < 2 * e) {
        if (r % 2 == 0) {
            comm_send(c, recv, n, COMM_FLOAT, r + 1, TAG_TREE);
            v = -1;
        } else {
            comm_recv(c, incoming, n, COMM_FLOAT, r - 1, TAG_TREE);
            add_floats(recv, recv, incoming, n);
            v = r / 2;
        }
    }
    for (int bit = 1; v >= 0 && bit < q; bit <<= 1) {
        int pv = v ^ bit;
        int partner = pv < e ? 2 * pv + 1 : pv + e;
        comm_sendrecv(c, recv, n, partner, incoming, n, partner, COMM_FLOAT, TAG_TREE);
        add_floats(recv, recv, incoming, n);
    }
    if (r < 2 * e) {
        if (r % 2 == 1) comm_send(c, recv, n, COMM_FLOAT, r - 1, TAG_TREE);
        else comm_recv(c, recv, n, COMM_FLOAT, r + 1, TAG_TREE);
    }
    /* END SOLUTION */
}

/* Pairwise all-to-all: p steps of one comm_sendrecv each (the step that
 * pairs a rank with itself is a local copy, no message), every pair of
 * ranks meeting exactly once and agreeing on it. Sends (p-1) n_per_rank
 * elements. In place when send == recv: the block going out and the block
 * coming in share a place, so copy the outgoing one aside (scratch_floats).
 * The pairing rule is the exercise. */
void pairwise_alltoall(Comm *c, const float *send, float *recv, size_t n_per_rank) {
    /* BEGIN SOLUTION */
    const int p = c->size, r = c->rank;
    const size_t m = n_per_rank;
    float *staging = send == recv ? scratch_floats(m) : NULL;
    for (int s = 0; s < p; s++) {
        int q = wrap(s - r, p);
        const float *block = send + (size_t)q * m;
        if (q == r) {
            if (send != recv) memcpy(recv + (size_t)r * m, block, m * sizeof(float));
            continue;
        }
        if (staging) {
            memcpy(staging, block, m * sizeof(float));
            block = staging;
        }
        comm_sendrecv(c, block, m, q, recv + (size_t)q * m, m, q, COMM_FLOAT, TAG_ALLTOALL);
    }
    /* END SOLUTION */
}
