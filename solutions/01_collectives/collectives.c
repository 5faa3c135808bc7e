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

/* SOLUTION ONLY BEGIN */
/* The fold that tree_allreduce and halving_doubling_allreduce share (the
 * student copy drops this block: it is part of tree_allreduce's exercise).
 * q = 2^floor(log2 p), e = p - q. Ranks 2i and 2i+1 below 2e pair up: the
 * even one hands its data to the odd one and waits, and the q survivors
 * run a power-of-two algorithm, numbered v = r / 2 (odd ranks below 2e,
 * v = 0 .. e-1) and v = r - e (ranks from 2e on, v = e .. q-1). */
typedef struct {
    int q, e;
    int v;              /* this rank's survivor number; -1 on a folded (even) rank */
    const float *sums;  /* this rank's partial sums: recv once the fold added into it,
                         * else still send */
} Fold;

static int survivor_rank(const Fold *f, int v) { return v < f->e ? 2 * v + 1 : v + f->e; }

/* This rank's Fold. Below 2e, an even rank sends send (n elements) to r+1,
 * an odd one writes send + r-1's into recv. */
static Fold fold_in(Comm *c, const float *send, float *recv, size_t n) {
    const int p = c->size, r = c->rank;
    Fold f = {.q = 1, .sums = send};
    while (2 * f.q <= p) f.q *= 2;
    f.e = p - f.q;
    f.v = r - f.e;
    if (r < 2 * f.e) {
        if (r % 2 == 0) {
            comm_send(c, send, n, COMM_FLOAT, r + 1, TAG_TREE);
            f.v = -1;
        } else {
            float *incoming = scratch_floats(n);
            comm_recv(c, incoming, n, COMM_FLOAT, r - 1, TAG_TREE);
            add_floats(recv, send, incoming, n);
            f.v = r / 2;
            f.sums = recv;
        }
    }
    return f;
}

/* The result back: an odd rank below 2e sends buf (n elements) to r-1. */
static void fold_out(Comm *c, float *buf, size_t n, const Fold *f) {
    const int r = c->rank;
    if (r >= 2 * f->e) return;
    if (r % 2 == 1) comm_send(c, buf, n, COMM_FLOAT, r - 1, TAG_TREE);
    else comm_recv(c, buf, n, COMM_FLOAT, r + 1, TAG_TREE);
}

/* A segment: the elements of shards first .. first + m - 1 of n over q. */
typedef struct {
    size_t offset, count;
} Segment;

static Segment segment(size_t n, int q, int first, int m) {
    const size_t begin = shard_offset(n, q, first);
    return (Segment){begin, shard_offset(n, q, first + m) - begin};
}
/* SOLUTION ONLY END */

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
    if (recv != send) memcpy(recv, send, n * sizeof(float));
    const Fold f = fold_in(c, recv, recv, n);
    float *incoming = scratch_floats(n);
    for (int bit = 1; f.v >= 0 && bit < f.q; bit <<= 1) {
        int partner = survivor_rank(&f, f.v ^ bit);
        comm_sendrecv(c, recv, n, partner, incoming, n, partner, COMM_FLOAT, TAG_TREE);
        add_floats(recv, recv, incoming, n);
    }
    fold_out(c, recv, n, &f);
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
    /* BEGIN SOLUTION */
    /* What rank r sends, exactly, for any n. With e = p - q, survivor v
     * (v = r when p = q), count(u) = shard_count(n, q, u) and G_i(v) = the
     * elements of the 2^i shards from v - v mod 2^i (what v holds before
     * doubling round i):
     *   survivor v        n - count(v)                  the halving
     *                     + G_0(v) + .. + G_(k-1)(v)    the doubling
     *   odd r below 2e    that for v = r / 2, + n       the result back
     *   even r below 2e   n                             its fold
     * With even shards a survivor sends 2(q-1)/q n: 2(p-1)/p n when p = q. */
    const Fold f = fold_in(c, send, recv, n);
    const int q = f.q, v = f.v;
    float *incoming = scratch_floats(segment(n, q, 0, q / 2).count);  /* the largest half kept */
    /* sums: where this rank's partial sums are. Out of place, the first round
     * reads send and writes the half it keeps into recv, and later rounds stay
     * within that half: no copy of the whole buffer first, which would move
     * 2 S more through memory than the ring does. */
    const float *sums = f.sums;
    /* Halving, d = q/2 .. 1. Before the round with distance d, v holds the
     * segment of the 2d shards from lo = v - v mod 2d, summed over the q / 2d
     * survivors u with u mod 2d = v mod 2d. It keeps the half (d shards)
     * that holds shard v, sends the other half to v ^ d, who keeps that one,
     * and adds v ^ d's copy of its own half: then v holds its d shards summed
     * over the survivors with u mod d = v mod d. After d = 1: shard v, summed
     * over all. */
    for (int d = q / 2; v >= 0 && d >= 1; d /= 2) {
        const int partner = survivor_rank(&f, v ^ d), lo = v & ~(2 * d - 1);
        const Segment keep = segment(n, q, v & d ? lo + d : lo, d);
        const Segment give = segment(n, q, v & d ? lo : lo + d, d);
        comm_sendrecv(c, sums + give.offset, give.count, partner, incoming, keep.count, partner,
                      COMM_FLOAT, TAG_HALVING);
        add_floats(recv + keep.offset, sums + keep.offset, incoming, keep.count);
        sums = recv;
    }
    if (v >= 0 && sums != recv) memcpy(recv, sums, n * sizeof(float));  /* p = 1: no round */
    /* Doubling, d = 1 .. q/2. Before the round with distance d, v holds the
     * final sums of the d shards from v - v mod d, and v ^ d those of the d
     * shards next to them: each sends its own and receives the other's into
     * its place in recv, and both hold the 2d shards from v - v mod 2d. Only
     * the owner of a shard ever added it; everyone else copies its bits. */
    for (int d = 1; v >= 0 && d < q; d *= 2) {
        const int partner = survivor_rank(&f, v ^ d), lo = v & ~(d - 1);
        const Segment mine = segment(n, q, lo, d), theirs = segment(n, q, lo ^ d, d);
        comm_sendrecv(c, recv + mine.offset, mine.count, partner, recv + theirs.offset,
                      theirs.count, partner, COMM_FLOAT, TAG_HALVING);
    }
    fold_out(c, recv, n, &f);
    /* END SOLUTION */
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
    /* BEGIN SOLUTION */
    /* shard l of n over the node's k ranks: the node's sum lands here, and
     * the all-reduce across sums it over the N nodes in place */
    float *shard = recv + shard_offset(n, node->size, node->rank);
    const size_t count = shard_count(n, node->size, node->rank);
    ring_reduce_scatter(node, send, shard, n);
    ring_allreduce(across, shard, shard, count);
    ring_allgather(node, shard, recv, n);
    /* END SOLUTION */
}
