/* test_nccl: every NCCL collective against the MPI path, bit for bit.
 *
 *     mpirun -np P build/cuda/tests/test_nccl      (one GPU per rank)
 *
 * Each case runs the MPI collective (comm.h) on host buffers and the NCCL
 * one (comm_nccl.h) on device copies of the same inputs, and demands the
 * same bytes in the results and the same calls and bytes in the counters.
 * Inputs are small integers, whose sums are exact in float in any order, so
 * NCCL's summation order cannot change a bit. Sizes include 0, n < p, p not
 * dividing n (the grouped path for uneven shards) and p dividing n.
 * The world is checked, then the groups of even and of odd ranks (a second
 * NCCL bootstrap per process, 1-rank groups when P <= 2).
 *
 * Exit status: 0 all equal, 1 a difference, 2 a user error (two ranks on
 * one GPU), 77 no CUDA device (the test is skipped).
 */
#include <cuda_runtime_api.h>

#include "comm_nccl.h"
#include "cuda_check.h"
#include "device.h"
#include "gpu_present.h"
#include "precision.h"
#include "unit.h"


static const char *const g_dtype_names[COMM_NUM_DTYPES] = {"float", "double", "int32", "bf16",
                                                           "fp16"};
static const size_t g_sizes[] = {0, 1, 5, 64, 1003, 262147};
static cudaStream_t g_stream;   /* a stream of our own: the ops must honour it */

/* Element i of the input of `seed` (a rank, usually): a small integer in
 * [-8, 8], so sums over a few ranks are exact in every dtype. */
static void fill(void *buf, size_t n, CommDtype dtype, int seed) {
    for (size_t i = 0; i < n; i++) {
        int v = (int)((i * 7 + (size_t)seed * 13) % 17) - 8;
        switch (dtype) {
        case COMM_FLOAT: ((float *)buf)[i] = (float)v; break;
        case COMM_DOUBLE: ((double *)buf)[i] = (double)v; break;
        case COMM_BF16: ((uint16_t *)buf)[i] = float_to_bf16((float)v); break;
        case COMM_FP16: ((uint16_t *)buf)[i] = float_to_fp16((float)v); break;
        default: ((int32_t *)buf)[i] = v; break;
        }
    }
}

static void *host_alloc(size_t bytes) {
    void *p = calloc(1, bytes + 1);   /* + 1: a real pointer for n = 0 too */
    CHECK(p, "out of memory");
    return p;
}

static void *device_copy(const void *host, size_t bytes) {
    void *d;
    CUDA_CHECK(cudaMalloc(&d, bytes + 1));
    CUDA_CHECK(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice));
    return d;
}

static void upload(void *dev, const void *host, size_t bytes) {
    CUDA_CHECK(cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice));
}

/* Free a case's two device and two host buffers. */
static void release(void *dev_a, void *dev_b, void *host_a, void *host_b) {
    CUDA_CHECK(cudaFree(dev_a));
    CUDA_CHECK(cudaFree(dev_b));
    free(host_a);
    free(host_b);
}

/* What a case is about, for failure messages. */
typedef struct {
    Comm *c;
    CommDtype dtype;
    size_t n, es;       /* elements, bytes per element */
    char what[96];
} Case;

static void expect_equal(const Case *k, const char *variant, const void *dev,
                         const void *want, size_t bytes) {
    void *got = host_alloc(bytes);
    CUDA_CHECK(cudaMemcpy(got, dev, bytes, cudaMemcpyDeviceToHost));
    size_t i = 0;
    while (i < bytes && ((const char *)got)[i] == ((const char *)want)[i]) i++;
    EXPECT(i == bytes, "%s %s: first differing byte %zu of %zu", k->what, variant, i, bytes);
    free(got);
}

/* The NCCL call (after) must count like the MPI call (before). */
static void expect_counted_alike(const Case *k, CommOpStats mpi0, CommOpStats mpi1,
                                 CommOpStats nccl0, CommOpStats nccl1) {
    EXPECT(nccl1.calls - nccl0.calls == mpi1.calls - mpi0.calls &&
               nccl1.bytes - nccl0.bytes == mpi1.bytes - mpi0.bytes,
           "%s: counted %llu calls %llu bytes, MPI path %llu calls %llu bytes", k->what,
           (unsigned long long)(nccl1.calls - nccl0.calls),
           (unsigned long long)(nccl1.bytes - nccl0.bytes),
           (unsigned long long)(mpi1.calls - mpi0.calls),
           (unsigned long long)(mpi1.bytes - mpi0.bytes));
}

static Case make_case(Comm *c, CommDtype dtype, size_t n, const char *op) {
    Case k;
    k.c = c;
    k.dtype = dtype;
    k.n = n;
    k.es = comm_dtype_size(dtype);
    snprintf(k.what, sizeof k.what, "%s on '%s' (p=%d) %s n=%zu", op, c->name, c->size,
             g_dtype_names[dtype], n);
    return k;
}

static void check_allreduce(Comm *c, CommDtype dtype, size_t n) {
    for (int redop = 0; redop < COMM_NUM_REDOPS; redop++) {
        static const char *const names[COMM_NUM_REDOPS] = {"allreduce sum", "allreduce max",
                                                           "allreduce min"};
        Case k = make_case(c, dtype, n, names[redop]);
        size_t bytes = n * k.es;
        void *in = host_alloc(bytes), *want = host_alloc(bytes);
        fill(in, n, dtype, c->rank);
        CommOpStats m0 = comm_op_stats(c, OP_ALLREDUCE);
        comm_allreduce(c, in, want, n, dtype, (CommRedop)redop);
        CommOpStats m1 = comm_op_stats(c, OP_ALLREDUCE);
        void *din = device_copy(in, bytes), *dout = device_copy(in, bytes);
        comm_nccl_allreduce(c, din, dout, n, dtype, (CommRedop)redop, g_stream);
        expect_counted_alike(&k, m0, m1, m1, comm_op_stats(c, OP_ALLREDUCE));
        expect_equal(&k, "out of place", dout, want, bytes);
        comm_nccl_allreduce(c, din, din, n, dtype, (CommRedop)redop, g_stream);
        expect_equal(&k, "in place", din, want, bytes);
        upload(din, in, bytes);
        NcclRequest req;
        comm_nccl_iallreduce(c, din, dout, n, dtype, (CommRedop)redop, g_stream, &req);
        comm_nccl_wait(&req);
        EXPECT(comm_nccl_test(&req), "%s: a finished request is not done", k.what);
        expect_equal(&k, "non-blocking", dout, want, bytes);
        release(din, dout, in, want);
    }
}

static void check_reduce_scatter(Comm *c, CommDtype dtype, size_t n) {
    Case k = make_case(c, dtype, n, "reduce_scatter");
    size_t bytes = n * k.es, off = shard_offset(n, c->size, c->rank);
    size_t mine = shard_count(n, c->size, c->rank) * k.es;
    void *in = host_alloc(bytes), *want = host_alloc(mine);
    fill(in, n, dtype, c->rank);
    CommOpStats m0 = comm_op_stats(c, OP_REDUCE_SCATTER);
    comm_reduce_scatter(c, in, want, n, dtype, COMM_SUM);
    CommOpStats m1 = comm_op_stats(c, OP_REDUCE_SCATTER);
    void *din = device_copy(in, bytes), *dout = device_copy(in, mine);
    comm_nccl_reduce_scatter(c, din, dout, n, dtype, COMM_SUM, g_stream);
    expect_counted_alike(&k, m0, m1, m1, comm_op_stats(c, OP_REDUCE_SCATTER));
    expect_equal(&k, "out of place", dout, want, mine);
    void *own = (char *)din + off * k.es;
    comm_nccl_reduce_scatter(c, din, own, n, dtype, COMM_SUM, g_stream);
    expect_equal(&k, "in place", own, want, mine);
    upload(din, in, bytes);
    NcclRequest req;
    comm_nccl_ireduce_scatter(c, din, dout, n, dtype, COMM_SUM, g_stream, &req);
    comm_nccl_wait(&req);
    expect_equal(&k, "non-blocking", dout, want, mine);
    release(din, dout, in, want);
}

static void check_allgather(Comm *c, CommDtype dtype, size_t n) {
    Case k = make_case(c, dtype, n, "allgather");
    size_t bytes = n * k.es, off = shard_offset(n, c->size, c->rank);
    size_t mine = shard_count(n, c->size, c->rank) * k.es;
    void *in = host_alloc(mine), *want = host_alloc(bytes);
    fill(in, mine / k.es, dtype, c->rank);
    CommOpStats m0 = comm_op_stats(c, OP_ALLGATHER);
    comm_allgather(c, in, want, n, dtype);
    CommOpStats m1 = comm_op_stats(c, OP_ALLGATHER);
    void *din = device_copy(in, mine), *dout = device_copy(want, bytes);
    CUDA_CHECK(cudaMemset(dout, 0, bytes));
    comm_nccl_allgather(c, din, dout, n, dtype, g_stream);
    expect_counted_alike(&k, m0, m1, m1, comm_op_stats(c, OP_ALLGATHER));
    expect_equal(&k, "out of place", dout, want, bytes);
    CUDA_CHECK(cudaMemset(dout, 0, bytes));
    void *own = (char *)dout + off * k.es;
    upload(own, in, mine);
    comm_nccl_allgather(c, own, dout, n, dtype, g_stream);
    expect_equal(&k, "in place", dout, want, bytes);
    CUDA_CHECK(cudaMemset(dout, 0, bytes));
    NcclRequest req;
    comm_nccl_iallgather(c, din, dout, n, dtype, g_stream, &req);
    comm_nccl_wait(&req);
    expect_equal(&k, "non-blocking", dout, want, bytes);
    release(din, dout, in, want);
}

static void check_broadcast_reduce(Comm *c, CommDtype dtype, size_t n) {
    int root = (int)(n % (size_t)c->size);
    Case k = make_case(c, dtype, n, "broadcast");
    size_t bytes = n * k.es;
    void *in = host_alloc(bytes), *want = host_alloc(bytes);
    fill(in, n, dtype, c->rank);
    memcpy(want, in, bytes);
    CommOpStats m0 = comm_op_stats(c, OP_BROADCAST);
    comm_broadcast(c, want, n, dtype, root);
    CommOpStats m1 = comm_op_stats(c, OP_BROADCAST);
    void *dbuf = device_copy(in, bytes);
    comm_nccl_broadcast(c, dbuf, n, dtype, root, g_stream);
    expect_counted_alike(&k, m0, m1, m1, comm_op_stats(c, OP_BROADCAST));
    expect_equal(&k, "blocking", dbuf, want, bytes);
    upload(dbuf, in, bytes);
    NcclRequest req;
    comm_nccl_ibroadcast(c, dbuf, n, dtype, root, g_stream, &req);
    comm_nccl_wait(&req);
    expect_equal(&k, "non-blocking", dbuf, want, bytes);

    k = make_case(c, dtype, n, "reduce max");
    m0 = comm_op_stats(c, OP_REDUCE);
    comm_reduce(c, in, c->rank == root ? want : NULL, n, dtype, COMM_MAX, root);
    m1 = comm_op_stats(c, OP_REDUCE);
    upload(dbuf, in, bytes);
    void *dout = device_copy(in, bytes);
    comm_nccl_reduce(c, dbuf, c->rank == root ? dout : NULL, n, dtype, COMM_MAX, root,
                     g_stream);
    expect_counted_alike(&k, m0, m1, m1, comm_op_stats(c, OP_REDUCE));
    if (c->rank == root) expect_equal(&k, "on the root", dout, want, bytes);
    release(dbuf, dout, in, want);
}

/* Elements rank a sends to rank b in the alltoallv case (0 to 3). */
static size_t v_count(int a, int b, size_t n) {
    return ((size_t)a + 2 * (size_t)b + n) % 4;
}

static void check_alltoall(Comm *c, CommDtype dtype, size_t n) {
    int p = c->size;
    Case k = make_case(c, dtype, n, "alltoall");
    size_t bytes = (size_t)p * n * k.es;
    void *in = host_alloc(bytes), *want = host_alloc(bytes);
    fill(in, (size_t)p * n, dtype, c->rank);
    CommOpStats m0 = comm_op_stats(c, OP_ALLTOALL);
    comm_alltoall(c, in, want, n, dtype);
    CommOpStats m1 = comm_op_stats(c, OP_ALLTOALL);
    void *din = device_copy(in, bytes), *dout = device_copy(in, bytes);
    comm_nccl_alltoall(c, din, dout, n, dtype, g_stream);
    expect_counted_alike(&k, m0, m1, m1, comm_op_stats(c, OP_ALLTOALL));
    expect_equal(&k, "blocking", dout, want, bytes);
    release(din, dout, in, want);

    k = make_case(c, dtype, n, "alltoallv");
    size_t *sc = (size_t *)host_alloc(4 * (size_t)p * sizeof *sc);
    size_t *so = sc + p, *rc = sc + 2 * p, *ro = sc + 3 * p, stotal = 0, rtotal = 0;
    for (int j = 0; j < p; j++) {
        sc[j] = v_count(c->rank, j, n);
        rc[j] = v_count(j, c->rank, n);
        so[j] = stotal;
        ro[j] = rtotal;
        stotal += sc[j];
        rtotal += rc[j];
    }
    in = host_alloc(stotal * k.es);
    want = host_alloc(rtotal * k.es);
    fill(in, stotal, dtype, c->rank);
    m0 = comm_op_stats(c, OP_ALLTOALLV);
    comm_alltoallv(c, in, sc, so, want, rc, ro, dtype);
    m1 = comm_op_stats(c, OP_ALLTOALLV);
    din = device_copy(in, stotal * k.es);
    dout = device_copy(want, rtotal * k.es);
    CUDA_CHECK(cudaMemset(dout, 0, rtotal * k.es));
    comm_nccl_alltoallv(c, din, sc, so, dout, rc, ro, dtype, g_stream);
    expect_counted_alike(&k, m0, m1, m1, comm_op_stats(c, OP_ALLTOALLV));
    expect_equal(&k, "blocking", dout, want, rtotal * k.es);
    release(din, dout, sc, in);
    free(want);
}

/* A ring (sendrecv), then rank 0 to the last rank (send/recv and their
 * non-blocking forms). */
static void check_point_to_point(Comm *c, CommDtype dtype, size_t n) {
    int p = c->size, next = (c->rank + 1) % p, prev = (c->rank + p - 1) % p;
    Case k = make_case(c, dtype, n, "sendrecv");
    size_t bytes = n * k.es;
    void *in = host_alloc(bytes), *want = host_alloc(bytes);
    fill(in, n, dtype, c->rank);
    CommOpStats m0 = comm_op_stats(c, OP_SENDRECV);
    comm_sendrecv(c, in, n, next, want, n, prev, dtype, 0);
    CommOpStats m1 = comm_op_stats(c, OP_SENDRECV);
    void *din = device_copy(in, bytes), *dout = device_copy(in, bytes);
    comm_nccl_sendrecv(c, din, n, next, dout, n, prev, dtype, g_stream);
    expect_counted_alike(&k, m0, m1, m1, comm_op_stats(c, OP_SENDRECV));
    expect_equal(&k, "ring", dout, want, bytes);

    if (p > 1 && (c->rank == 0 || c->rank == p - 1)) {
        int sender = c->rank == 0;
        CommOp op = sender ? OP_SEND : OP_RECV;
        k = make_case(c, dtype, n, sender ? "send" : "recv");
        m0 = comm_op_stats(c, op);
        if (sender) comm_send(c, in, n, dtype, p - 1, 0);
        else comm_recv(c, want, n, dtype, 0, 0);
        m1 = comm_op_stats(c, op);
        CUDA_CHECK(cudaMemset(dout, 0, bytes));
        if (sender) comm_nccl_send(c, din, n, dtype, p - 1, g_stream);
        else comm_nccl_recv(c, dout, n, dtype, 0, g_stream);
        expect_counted_alike(&k, m0, m1, m1, comm_op_stats(c, op));
        if (!sender) expect_equal(&k, "blocking", dout, want, bytes);
        CUDA_CHECK(cudaMemset(dout, 0, bytes));
        NcclRequest req;
        if (sender) comm_nccl_isend(c, din, n, dtype, p - 1, g_stream, &req);
        else comm_nccl_irecv(c, dout, n, dtype, 0, g_stream, &req);
        comm_nccl_wait(&req);
        if (!sender) expect_equal(&k, "non-blocking", dout, want, bytes);
    }
    release(din, dout, in, want);
}

static void check_group(Comm *c) {
    CHECK(c->nccl, "group '%s' has no NCCL communicator", c->name);
    for (int dtype = 0; dtype < COMM_NUM_DTYPES; dtype++)
        for (size_t i = 0; i < sizeof g_sizes / sizeof g_sizes[0]; i++) {
            CommDtype d = (CommDtype)dtype;
            check_allreduce(c, d, g_sizes[i]);
            check_reduce_scatter(c, d, g_sizes[i]);
            check_allgather(c, d, g_sizes[i]);
            check_broadcast_reduce(c, d, g_sizes[i]);
            check_alltoall(c, d, g_sizes[i]);
            check_point_to_point(c, d, g_sizes[i]);
        }
}

int main(int argc, char **argv) {
    program_set_name(argv[0]);
    exit_unless_gpu_present();
    Comm *world = comm_init(&argc, &argv);
    device_select("cuda");
    CUDA_CHECK(cudaStreamCreate(&g_stream));
    comm_nccl_attach(world);
    check_group(world);
    /* split from the world's communicator (ncclCommSplit) */
    Comm *half = comm_split(world, world->rank % 2, world->rank, "half");
    check_group(half);
    comm_free(half);
    CUDA_CHECK(cudaStreamDestroy(g_stream));

    int counts[2] = {g_unit_checks, g_unit_failures}, totals[2];
    comm_allreduce(world, counts, totals, 2, COMM_INT32, COMM_SUM);
    if (world->rank == 0)
        printf("test_nccl: %d ranks, %d checks, %d failed\n", world->size, totals[0], totals[1]);
    comm_finalize();
    return totals[1] ? 1 : 0;
}
