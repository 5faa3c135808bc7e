/* nccl_check: comm.h's calls on GPU buffers over NCCL, checked on the pretend
 * GPUs and the pretend NCCL (tests/fake_gpu.bats runs it with one pretend
 * GPU per rank, FAKE_GPUS). Values are small integers in floats, so every
 * sum is exact whatever the order, and a result is right or wrong.
 *   nccl_check                 every collective, even and uneven shards, in
 *                              place, on the world and on a split group,
 *                              bf16 and fp16 sums;
 *                              then the batches: sends and receives of a
 *                              pipeline's pair, a collective inside a batch,
 *                              a batch of more than 16 requests, a host send
 *                              with a GPU receive, a buffer freed before its
 *                              op completed; prints "nccl_check: ok"
 *   nccl_check wait-in-batch   waits for a receive before its batch ends:
 *                              must stop with one clear fatal line, on NCCL
 *                              (where that wait would never end) and on MPI
 *                              (FAKE_GPUS=1: ranks share a GPU) alike
 *   nccl_check duplicate-gpu   NCCL's own init with ranks on one GPU: rank 0
 *                              prints the result, ncclInvalidUsage
 */
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "check.h"
#include "comm.h"
#include "device.h"
#include "precision.h"
#include "include/nccl.h" /* the pretend's: duplicate-gpu calls it */

#define N 37 /* not a multiple of any rank count used: uneven shards */

static float *gpu_from(const float *host, size_t n) {
    float *d = mem_alloc(MEM_COMM, n * sizeof(float));
    device_copy(d, host, n * sizeof(float));
    return d;
}

/* the n elements of the GPU buffer d equal want's */
static void expect(const char *what, const Comm *c, const float *d, const float *want, size_t n) {
    float got[4 * N * 8];
    CHECK(n <= sizeof got / sizeof got[0], "expect: %zu elements", n);
    device_copy(got, d, n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        CHECK(got[i] == want[i], "%s on group '%s' (rank %d of %d): element %zu is %g, want %g",
              what, c->name, c->rank, c->size, i, got[i], want[i]);
}

/* rank r's contribution: element i is (r + 1) * (i % 5 + 1) */
static float contribution(int r, size_t i) { return (float)((r + 1) * (int)(i % 5 + 1)); }

static void check_collectives(Comm *c) {
    const int p = c->size, me = c->rank;
    float mine[N], sum[N];
    for (size_t i = 0; i < N; i++) {
        mine[i] = contribution(me, i);
        sum[i] = 0;
        for (int r = 0; r < p; r++) sum[i] += contribution(r, i);
    }
    float *d = gpu_from(mine, N), *out = mem_alloc(MEM_COMM, N * sizeof(float));
    comm_allreduce(c, d, out, N, COMM_FLOAT, COMM_SUM);
    expect("allreduce", c, out, sum, N);
    comm_allreduce(c, d, d, N, COMM_FLOAT, COMM_SUM);
    expect("allreduce in place", c, d, sum, N);

    /* reduce-scatter: the rank's shard of the sum, apart and in place */
    const size_t own = shard_count(N, p, me), at = shard_offset(N, p, me);
    device_copy(d, mine, sizeof mine);
    comm_reduce_scatter(c, d, out, N, COMM_FLOAT, COMM_SUM);
    expect("reduce_scatter", c, out, sum + at, own);
    comm_reduce_scatter(c, d, d + at, N, COMM_FLOAT, COMM_SUM);
    expect("reduce_scatter in place", c, d + at, sum + at, own);

    /* all-gather of the shards of `mine` laid out by rank */
    float gathered[N];
    for (int r = 0; r < p; r++)
        for (size_t i = 0; i < shard_count(N, p, r); i++)
            gathered[shard_offset(N, p, r) + i] = contribution(r, shard_offset(N, p, r) + i);
    float *shard = gpu_from(mine + at, own ? own : 1);
    comm_allgather(c, shard, out, N, COMM_FLOAT);
    expect("allgather", c, out, gathered, N);
    device_copy(d + at, mine + at, own * sizeof(float));
    comm_allgather(c, d + at, d, N, COMM_FLOAT);
    expect("allgather in place", c, d, gathered, N);

    /* broadcast from the last rank */
    float root_data[N];
    for (size_t i = 0; i < N; i++) root_data[i] = contribution(p - 1, i);
    device_copy(d, mine, sizeof mine);
    comm_broadcast(c, d, N, COMM_FLOAT, p - 1);
    expect("broadcast", c, d, root_data, N);

    /* all-to-all: block j of rank r holds 100 r + j, lands in block r of j */
    float blocks[8] = {0}, want_blocks[8] = {0};
    for (int j = 0; j < p; j++) {
        blocks[j] = (float)(100 * me + j);
        want_blocks[j] = (float)(100 * j + me);
    }
    float *db = gpu_from(blocks, (size_t)p), *dr = mem_alloc(MEM_COMM, (size_t)p * sizeof(float));
    comm_alltoall(c, db, dr, 1, COMM_FLOAT);
    expect("alltoall", c, dr, want_blocks, (size_t)p);

    /* all-to-all-v: rank r sends j + 1 elements of value 100 r + j to rank j */
    size_t sc[8], so[8], rc[8], ro[8], sent = 0, got = 0;
    float sendv[64], wantv[64];
    for (int j = 0; j < p; j++) {
        sc[j] = (size_t)j + 1, so[j] = sent, rc[j] = (size_t)me + 1, ro[j] = got;
        for (size_t k = 0; k < sc[j]; k++) sendv[sent + k] = (float)(100 * me + j);
        for (size_t k = 0; k < rc[j]; k++) wantv[got + k] = (float)(100 * j + me);
        sent += sc[j], got += rc[j];
    }
    float *dsv = gpu_from(sendv, sent), *drv = mem_alloc(MEM_COMM, got * sizeof(float));
    comm_alltoallv(c, dsv, sc, so, drv, rc, ro, COMM_FLOAT);
    expect("alltoallv", c, drv, wantv, got);

    /* a ring: send to the next, receive from the previous */
    const int next = (me + 1) % p, prev = (me + p - 1) % p;
    float from_prev[N];
    for (size_t i = 0; i < N; i++) from_prev[i] = contribution(prev, i);
    device_copy(d, mine, sizeof mine);
    comm_sendrecv(c, d, N, next, out, N, prev, COMM_FLOAT, 0);
    expect("sendrecv", c, out, from_prev, N);
    /* a host send with a GPU receive (and the reverse) */
    comm_sendrecv(c, mine, N, next, out, N, prev, COMM_FLOAT, 0);
    expect("sendrecv from host memory", c, out, from_prev, N);
    float host_out[N];
    comm_sendrecv(c, d, N, next, host_out, N, prev, COMM_FLOAT, 0);
    for (size_t i = 0; i < N; i++)
        CHECK(host_out[i] == from_prev[i], "sendrecv into host memory: element %zu", i);
    mem_free(d), mem_free(out), mem_free(shard), mem_free(db), mem_free(dr), mem_free(dsv),
        mem_free(drv);
}

/* mixed precision's 2-byte floats: the reduction in NCCL's bf16 and fp16
 * (small integers: exact in either, in any order) */
static void check_half_floats(Comm *c) {
    for (int t = COMM_BF16; t <= COMM_FP16; t++) {
        uint16_t mine[N], want[N], got[N];
        for (size_t i = 0; i < N; i++) {
            float sum = 0;
            for (int r = 0; r < c->size; r++) sum += contribution(r, i);
            mine[i] = t == COMM_BF16 ? float_to_bf16(contribution(c->rank, i))
                                     : float_to_fp16(contribution(c->rank, i));
            want[i] = t == COMM_BF16 ? float_to_bf16(sum) : float_to_fp16(sum);
        }
        uint16_t *d = mem_alloc(MEM_COMM, sizeof mine);
        device_copy(d, mine, sizeof mine);
        comm_allreduce(c, d, d, N, (CommDtype)t, COMM_SUM);
        device_copy(got, d, sizeof got);
        CHECK(memcmp(got, want, sizeof got) == 0, "allreduce of %s on group '%s': wrong bits",
              t == COMM_BF16 ? "bf16" : "fp16", c->name);
        mem_free(d);
    }
}

/* A block freed while an op still writes into it (the program's bug, which
 * a GPU run must survive): the allocator hands it out again only after the
 * op has completed, so its new owner gets zeros, not the op's late result.
 * The first rank to post the all-reduce cannot see it complete before the
 * others post theirs, so that rank at least frees it in flight. */
static void check_free_before_wait(Comm *c) {
    float mine[N], zeros[N] = {0};
    for (size_t i = 0; i < N; i++) mine[i] = contribution(c->rank, i);
    float *d = gpu_from(mine, N), *out = mem_alloc(MEM_COMM, N * sizeof(float));
    CommRequest req;
    comm_iallreduce(c, d, out, N, COMM_FLOAT, COMM_SUM, &req);
    mem_free(out);
    float *again = mem_alloc(MEM_COMM, N * sizeof(float));
    CHECK(again == out, "the allocator did not hand the freed block out again");
    comm_wait(&req);
    expect("a block freed before its all-reduce completed, handed out again", c, again, zeros, N);
    mem_free(again), mem_free(d);
}

/* A pipeline's exchange: every rank sends `count` requests' worth to the
 * next and receives as many from the previous, in one batch, with an
 * all-reduce inside the batch too. 20 pairs: more than 16 requests. */
static void check_batches(Comm *c) {
    enum { PAIRS = 20 };
    const int p = c->size, me = c->rank, next = (me + 1) % p, prev = (me + p - 1) % p;
    float mine[N], from_prev[N], sum[N];
    for (size_t i = 0; i < N; i++) {
        mine[i] = contribution(me, i);
        from_prev[i] = contribution(prev, i);
        sum[i] = 0;
        for (int r = 0; r < p; r++) sum[i] += contribution(r, i);
    }
    float *d = gpu_from(mine, N), *in[PAIRS], *red = mem_alloc(MEM_COMM, N * sizeof(float));
    CommRequest sends[PAIRS], recvs[PAIRS], allreduce;
    for (int k = 0; k < PAIRS; k++) in[k] = mem_alloc(MEM_COMM, N * sizeof(float));
    comm_batch_begin();
    for (int k = 0; k < PAIRS; k++) {
        comm_irecv(c, in[k], N, COMM_FLOAT, prev, k, &recvs[k]);
        comm_isend(c, d, N, COMM_FLOAT, next, k, &sends[k]);
    }
    comm_iallreduce(c, d, red, N, COMM_FLOAT, COMM_SUM, &allreduce);
    comm_batch_end();
    comm_wait(&allreduce);
    expect("allreduce inside a batch", c, red, sum, N);
    for (int k = 0; k < PAIRS; k++) {
        comm_wait(&recvs[k]);
        comm_wait(&sends[k]);
        expect("a receive of a batch of 40", c, in[k], from_prev, N);
        mem_free(in[k]);
    }
    mem_free(d), mem_free(red);
}

/* the bug this must stop: a wait on a receive before its batch has ended */
static void wait_in_batch(Comm *c) {
    const int p = c->size, me = c->rank;
    float *buf = mem_alloc(MEM_COMM, N * sizeof(float));
    CommRequest send, recv;
    comm_batch_begin();
    comm_irecv(c, buf, N, COMM_FLOAT, (me + p - 1) % p, 0, &recv);
    comm_isend(c, buf, N, COMM_FLOAT, (me + 1) % p, 0, &send);
    comm_wait(&recv);
    comm_batch_end();
    comm_wait(&send);
    printf("nccl_check: waited inside a batch: not caught\n");
}

/* NCCL itself (the pretend) refuses two ranks on one GPU, before the kit's
 * own check does (comm_nccl.cu asks first and says what to do instead) */
static void duplicate_gpu(Comm *world) {
    ncclUniqueId id;
    if (world->rank == 0) ncclGetUniqueId(&id);
    MPI_CHECK(MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, world->mpi));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    ncclComm_t comm;
    ncclResult_t rc = ncclCommInitRankConfig(&comm, world->size, id, world->rank, &config);
    if (world->rank == 0)
        printf("nccl_check: ncclCommInitRankConfig: %s: %s\n", ncclGetErrorString(rc),
               ncclGetLastError(comm));
}

int main(int argc, char **argv) {
    program_set_name(argv[0]);
    Comm *world = comm_init(&argc, &argv);
    const char *mode = argc > 1 ? argv[1] : "";
    const int in_batch = strcmp(mode, "wait-in-batch") == 0;
    CHECK(argc == 1 || in_batch || strcmp(mode, "duplicate-gpu") == 0,
          "usage: nccl_check [wait-in-batch | duplicate-gpu]");
    if (strcmp(mode, "duplicate-gpu") == 0) {
        device_select("cuda");
        duplicate_gpu(world);
        comm_finalize();
        return 0;
    }
    CHECK(world->size <= 8, "nccl_check runs on 8 ranks at most");
    device_select("cuda");
    comm_set_timeout(60);
    comm_attach_gpus(world);
    if (in_batch) { /* on NCCL, or on MPI where ranks share a GPU: refused alike */
        wait_in_batch(world);
        comm_finalize();
        return 1;
    }
    CHECK(world->nccl, "the world has no NCCL communicator: run one pretend GPU per rank "
          "(FAKE_GPUS=ranks)");
    check_collectives(world);
    check_half_floats(world);
    Comm *half = comm_split(world, world->rank % 2, world->rank, "half");
    CHECK(half->nccl, "a group split from the world has no NCCL communicator of its own");
    check_collectives(half);
    check_batches(world);
    check_batches(half);
    check_free_before_wait(world);
    comm_free(half);
    if (world->rank == 0) printf("nccl_check: ok\n");
    comm_finalize();
    return 0;
}
