/* collectives.h: lab 01's collectives, built from point-to-point messages.
 *
 * Every function is collective over the group c: all its ranks call it with
 * the same n (and root), and each rank talks to the others only through
 * comm_send, comm_recv and comm_sendrecv (comm.h). Data are float32 and the
 * reduction is the sum. Any n works: 0, n < p (some shards are then empty)
 * and n not divisible by p.
 *
 * Shards follow comm.h: rank r owns count(r) = shard_count(n, p, r) elements
 * at offset(r) = shard_offset(n, p, r), the first n % p ranks one more.
 * "In place" has the same meaning as for the library calls (comm_allreduce,
 * comm_reduce_scatter...), so the checker and the benchmark can call either.
 */
#ifndef COLLECTIVES_H
#define COLLECTIVES_H

#include <stddef.h>

#include "comm.h"

/* recv[0 .. count(rank)) = sum over ranks of send[offset(rank) ..], send has n
 * elements. In place when recv == send + offset(rank): then only that shard
 * of send changes. */
void ring_reduce_scatter(Comm *c, const float *send, float *recv, size_t n);

/* recv (n elements) = every rank's shard, rank j's count(j) elements of send
 * landing at recv + offset(j). In place when send == recv + offset(rank). */
void ring_allgather(Comm *c, const float *send, float *recv, size_t n);

/* recv[i] = sum over ranks of send[i], i < n: ring reduce-scatter, then ring
 * all-gather. In place when send == recv. */
void ring_allreduce(Comm *c, const float *send, float *recv, size_t n);

/* buf (n elements) of rank root is copied into buf on every rank, along a
 * binomial tree. */
void tree_broadcast(Comm *c, float *buf, size_t n, int root);

/* Same result as ring_allreduce, by recursive doubling: log2(p) exchanges of
 * the whole buffer, the choice for small messages. In place when send == recv. */
void tree_allreduce(Comm *c, const float *send, float *recv, size_t n);

/* Same result as ring_allreduce, by Rabenseifner's algorithm (the lab's
 * extension): a reduce-scatter by recursive halving, then an all-gather by
 * recursive doubling, log2(p) exchanges each, 2(p-1)/p n elements sent per
 * rank for even shards; for p not a power of two, the fold of
 * tree_allreduce around it. Every rank ends with the same bits. In place
 * when send == recv. */
void halving_doubling_allreduce(Comm *c, const float *send, float *recv, size_t n);

/* The same sum on every rank, in three rings for ranks on several nodes
 * (the second extension): with k ranks on each of N nodes, node is this
 * rank's node (k ranks, local rank l) and across holds the N ranks with
 * local rank l, one per node. A ring reduce-scatter inside the node leaves
 * this rank shard l of n over k, summed over its node; a ring all-reduce
 * across the nodes sums that shard over all N; a ring all-gather inside
 * the node copies every shard everywhere. Only (N-1)/N of the shard, not of
 * the buffer, goes out on the slow links per phase. In place when
 * send == recv. */
void hierarchical_allreduce(Comm *node, Comm *across, const float *send, float *recv, size_t n);

/* Block j (n_per_rank elements at send + j * n_per_rank) goes to rank j, into
 * block `rank` of its recv; both buffers hold p blocks. In place when
 * send == recv. */
void pairwise_alltoall(Comm *c, const float *send, float *recv, size_t n_per_rank);

#endif
