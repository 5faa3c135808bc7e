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
 *   mpirun -np 4 ./build/labs/01_collectives/check_collectives
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

/* Ring reduce-scatter. Rank r sends to r+1 and receives from r-1. At step s
 * (s = 0 .. p-2) it sends chunk (r-s-1) mod p and receives chunk (r-s-2) mod p,
 * to which it adds its own contribution:
 *   step 0 sends its own chunk r-1 as is;
 *   step s > 0 sends the sum it made at step s-1, which holds s+1 ranks'
 *   contributions (chunk c travels c+1, c+2, ..., collecting one at each hop).
 * The last step (s = p-2) receives chunk (r-p) mod p = r with p-1 contributions;
 * adding its own completes it, so rank r ends up owning shard r.
 * Rank r sends every chunk but its own: n - count(r) elements.
 * Cost: (p-1) alpha + (p-1)/p S beta. Only one chunk is in flight, so two
 * chunk buffers suffice: the sum being sent and the chunk being received. */
void ring_reduce_scatter(Comm *c, const float *send, float *recv, size_t n) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

/* Ring all-gather. At step s (s = 0 .. p-2) rank r forwards chunk (r-s) mod p
 * to r+1 and receives chunk (r-s-1) mod p from r-1, straight into its place in
 * recv: its own shard first, then each chunk it has just received. After p-1
 * steps it has received every chunk but its own.
 * Rank r sends every chunk but (r+1) mod p, the one it receives last:
 * n - count(r+1) elements. Cost: (p-1) alpha + (p-1)/p S beta. */
void ring_allgather(Comm *c, const float *send, float *recv, size_t n) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

/* Ring all-reduce = reduce-scatter (rank r gets the sum of shard r), then
 * all-gather of those sums. Rank r sends 2n - count(r) - count(r+1) elements,
 * within two elements of 2(p-1)/p n: nearly constant in p.
 * Cost: 2(p-1) alpha + 2(p-1)/p S beta. The bandwidth term tends to 2 S beta,
 * and no algorithm can do better: each rank must send (p-1)/p of its data out
 * and receive (p-1)/p of the result in. */
void ring_allreduce(Comm *c, const float *send, float *recv, size_t n) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

/* Binomial tree broadcast. Number ranks from the root: v = (r - root) mod p.
 * Rank v > 0 receives once, from v - 2^k where 2^k is v's lowest set bit; then
 * every rank sends to v + 2^j for each 2^j below that bit (below p for the
 * root), largest first so that the biggest subtree starts earliest. Ranks
 * holding the data double each round: ceil(log2 p) rounds.
 * Cost: ceil(log2 p) (alpha + S beta): few messages, but the whole buffer
 * crosses log2 p links one after the other. */
void tree_broadcast(Comm *c, float *buf, size_t n, int root) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

/* Recursive doubling all-reduce. With p = 2^k, at round j rank v exchanges its
 * whole partial sum with v XOR 2^j and adds: after round j it holds the sum of
 * the 2^(j+1) ranks that agree with v above bit j, after k rounds everyone's.
 * Other p: let q be the largest power of two <= p and e = p - q. First the
 * 2e lowest ranks fold in pairs: even rank 2i sends its data to 2i+1 and
 * waits; the q remaining ranks (odd ones below 2e, all from 2e on) run the
 * doubling as virtual ranks 0..q-1, then each odd rank 2i+1 sends the
 * result back to 2i. Both sides of an exchange add the same two partial sums,
 * so every rank ends with the same bits.
 * Sent per rank: log2(q) n, plus n for the ranks that fold or send back.
 * Cost: log2(q) (alpha + S beta), plus 2 (alpha + S beta) when p != q: the
 * fewest messages, so the best for small buffers; ring wins for large ones. */
void tree_allreduce(Comm *c, const float *send, float *recv, size_t n) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

/* Pairwise all-to-all. At step s (s = 0 .. p-1) rank r exchanges with
 * q = (s - r) mod p: q's partner at that step is (s - q) mod p = r, so the
 * pairing is symmetric and both sides swap blocks in one sendrecv (r's block q
 * for q's block r). Over the p steps r meets every rank once, itself included
 * (a local copy): p-1 exchanges of n_per_rank elements.
 * In place, block q of recv is where the incoming block lands and also the
 * block going out: it is copied aside first.
 * Cost: (p-1) alpha + (p-1)/p S beta, S = p n_per_rank 4 bytes. */
void pairwise_alltoall(Comm *c, const float *send, float *recv, size_t n_per_rank) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}
