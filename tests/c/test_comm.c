/* The library collectives of comm.h against references computed locally.
 * Inputs are small integers that depend on (rank, i), so every sum is exact
 * in any order, bf16's and fp16's too, and results can be compared bit for
 * bit. Run under mpirun
 * with any number of ranks; counts cover 0, fewer than the ranks, not
 * divisible by the ranks, and large and odd. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "comm.h"
#include "precision.h"
#include "trace.h"
#include "unit.h"

static Comm *W;

/* the value rank r contributes at element i: a small integer */
static double input(int r, size_t i) { return (double)((int)((i * 7 + (size_t)r * 13) % 17) - 8); }

static double reduce_ref(CommRedop op, size_t i, int p) {
    double acc = input(0, i);
    for (int r = 1; r < p; r++) {
        double v = input(r, i);
        acc = op == COMM_SUM ? acc + v : op == COMM_MAX ? (v > acc ? v : acc) : (v < acc ? v : acc);
    }
    return acc;
}

static void fill(void *buf, CommDtype dt, size_t n, size_t first, int r) {
    for (size_t i = 0; i < n; i++) {
        double v = input(r, first + i);
        if (comm_dtype_size(dt) == 4 && dt != COMM_INT32) ((float *)buf)[i] = (float)v;
        else if (dt == COMM_DOUBLE) ((double *)buf)[i] = v;
        else if (dt == COMM_BF16) ((uint16_t *)buf)[i] = float_to_bf16((float)v);
        else if (dt == COMM_FP16) ((uint16_t *)buf)[i] = float_to_fp16((float)v);
        else ((int32_t *)buf)[i] = (int32_t)v;
    }
}

static double get(const void *buf, CommDtype dt, size_t i) {
    switch (dt) {
    case COMM_FLOAT: case COMM_FLOAT_AS_BF16: case COMM_FLOAT_AS_FP16:
        return ((const float *)buf)[i];
    case COMM_DOUBLE: return ((const double *)buf)[i];
    case COMM_BF16: return bf16_to_float(((const uint16_t *)buf)[i]);
    case COMM_FP16: return fp16_to_float(((const uint16_t *)buf)[i]);
    default: return ((const int32_t *)buf)[i];
    }
}

static const char *const DT_NAMES[COMM_NUM_DTYPES] = {"float", "double", "int32", "bf16",
                                                     "fp16", "float as bf16", "float as fp16",
                                                     "byte"};
static const char *const OP_NAMES[] = {"sum", "max", "min"};

static void test_allreduce(size_t n, CommDtype dt, CommRedop op, int in_place, int nonblocking) {
    size_t es = comm_dtype_size(dt);
    char *send = malloc(n * es + 1), *recv = malloc(n * es + 1);
    fill(send, dt, n, 0, W->rank);
    if (in_place) memcpy(recv, send, n * es);
    if (nonblocking) {
        CommRequest req;
        comm_iallreduce(W, in_place ? recv : send, recv, n, dt, op, &req);
        while (!comm_test(&req)) {}
    } else {
        comm_allreduce(W, in_place ? recv : send, recv, n, dt, op);
    }
    size_t bad = n;
    for (size_t i = 0; i < n && bad == n; i++)
        if (get(recv, dt, i) != reduce_ref(op, i, W->size)) bad = i;
    EXPECT(bad == n, "allreduce %s %s n=%zu %s%s: element %zu is %g, expected %g", DT_NAMES[dt],
           OP_NAMES[op], n, in_place ? "in place" : "out of place", nonblocking ? " (i)" : "", bad,
           bad < n ? get(recv, dt, bad) : 0, bad < n ? reduce_ref(op, bad, W->size) : 0);
    free(send);
    free(recv);
}

static void test_reduce_scatter_allgather(size_t n, CommDtype dt, int in_place, int nonblocking) {
    int p = W->size, r = W->rank;
    size_t es = comm_dtype_size(dt), off = shard_offset(n, p, r), cnt = shard_count(n, p, r);
    char *full = malloc(n * es + 1), *shard = malloc(cnt * es + 1);
    fill(full, dt, n, 0, r);
    void *out = in_place ? full + off * es : shard;
    CommRequest req;
    if (nonblocking) {
        comm_ireduce_scatter(W, full, out, n, dt, COMM_SUM, &req);
        comm_wait(&req);
    } else {
        comm_reduce_scatter(W, full, out, n, dt, COMM_SUM);
    }
    size_t bad = cnt;
    for (size_t i = 0; i < cnt && bad == cnt; i++)
        if (get(out, dt, i) != reduce_ref(COMM_SUM, off + i, p)) bad = i;
    EXPECT(bad == cnt, "reduce_scatter %s n=%zu %s: shard element %zu wrong", DT_NAMES[dt], n,
           in_place ? "in place" : "out of place", bad);
    if (in_place) {  /* the rest of the buffer is untouched */
        size_t changed = 0;
        for (size_t i = 0; i < n; i++)
            if ((i < off || i >= off + cnt) && get(full, dt, i) != input(r, i)) changed++;
        EXPECT(changed == 0, "in-place reduce_scatter n=%zu changed %zu elements outside the shard", n,
               changed);
    }
    /* all-gather the reduced shards back: every element is the full sum */
    char *gathered = in_place ? full : malloc(n * es + 1);
    if (nonblocking) {
        comm_iallgather(W, out, gathered, n, dt, &req);
        comm_wait(&req);
    } else {
        comm_allgather(W, out, gathered, n, dt);
    }
    bad = n;
    for (size_t i = 0; i < n && bad == n; i++)
        if (get(gathered, dt, i) != reduce_ref(COMM_SUM, i, p)) bad = i;
    EXPECT(bad == n, "allgather %s n=%zu %s: element %zu wrong", DT_NAMES[dt], n,
           in_place ? "in place" : "out of place", bad);
    if (!in_place) free(gathered);
    free(full);
    free(shard);
}

static void test_rooted(size_t n) {
    int p = W->size, root = p - 1;
    float *buf = malloc(n * 4 + 4), *out = malloc(n * 4 + 4);
    fill(buf, COMM_FLOAT, n, 0, W->rank);
    comm_broadcast(W, buf, n, COMM_FLOAT, root);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += buf[i] != (float)input(root, i);
    EXPECT(bad == 0, "broadcast from root %d n=%zu: %zu wrong", root, n, bad);
    fill(buf, COMM_FLOAT, n, 0, W->rank);
    CommRequest req;
    comm_ibroadcast(W, buf, n, COMM_FLOAT, root, &req);
    comm_test(&req);
    comm_wait(&req);
    bad = 0;
    for (size_t i = 0; i < n; i++) bad += buf[i] != (float)input(root, i);
    EXPECT(bad == 0, "ibroadcast from root %d n=%zu: %zu wrong", root, n, bad);
    for (int in_place = 0; in_place < 2; in_place++) {
        fill(buf, COMM_FLOAT, n, 0, W->rank);
        float *dst = W->rank != root ? NULL : in_place ? buf : out;
        comm_reduce(W, buf, in_place ? buf : dst, n, COMM_FLOAT, COMM_SUM, root);
        bad = 0;
        if (W->rank == root)
            for (size_t i = 0; i < n; i++) bad += dst[i] != (float)reduce_ref(COMM_SUM, i, p);
        EXPECT(bad == 0, "reduce to root %d n=%zu %s: %zu wrong", root, n,
               in_place ? "in place" : "out of place", bad);
    }
    free(buf);
    free(out);
}

/* alltoall: block j of rank r's send holds input(r, j*n + i); rank j
 * receives block r from every r. alltoallv: rank r sends (r + j) % 3
 * elements to rank j. */
/* COMM_BYTE (ZeRO++'s packed int8): all-gathers in and out of place and an
 * all-to-all move every byte as it is; it has no reductions */
static unsigned char byte_of(int r, size_t i) { return (unsigned char)(r * 37 + i * 11 + 5); }
static void test_bytes(size_t n) {
    const int p = W->size, r = W->rank;
    const size_t all = n * (size_t)p;
    unsigned char *send = malloc(all + 1), *recv = malloc(all + 1);
    for (size_t i = 0; i < all; i++) send[i] = byte_of(r, i);
    comm_allgather(W, send, recv, all, COMM_BYTE);  /* rank s's slice: its first n */
    size_t bad = 0;
    for (int s = 0; s < p; s++)
        for (size_t i = 0; i < n; i++) bad += recv[s * n + i] != byte_of(s, i);
    memcpy(recv + r * n, send, n);
    comm_allgather(W, recv + r * n, recv, all, COMM_BYTE);
    for (int s = 0; s < p; s++)
        for (size_t i = 0; i < n; i++) bad += recv[s * n + i] != byte_of(s, i);
    comm_alltoall(W, send, recv, n, COMM_BYTE);
    for (int s = 0; s < p; s++)
        for (size_t i = 0; i < n; i++) bad += recv[s * n + i] != byte_of(s, r * n + i);
    EXPECT(bad == 0, "bytes n=%zu: %zu wrong", n, bad);
    free(send);
    free(recv);
}

static void test_alltoall(size_t n) {
    int p = W->size, r = W->rank;
    float *send = malloc(n * p * 4 + 4), *recv = malloc(n * p * 4 + 4);
    fill(send, COMM_FLOAT, n * p, 0, r);
    comm_alltoall(W, send, recv, n, COMM_FLOAT);
    size_t bad = 0;
    for (int s = 0; s < p; s++)
        for (size_t i = 0; i < n; i++) bad += recv[s * n + i] != (float)input(s, r * n + i);
    EXPECT(bad == 0, "alltoall n=%zu: %zu wrong", n, bad);
    memcpy(recv, send, n * p * 4);
    comm_alltoall(W, recv, recv, n, COMM_FLOAT);
    bad = 0;
    for (int s = 0; s < p; s++)
        for (size_t i = 0; i < n; i++) bad += recv[s * n + i] != (float)input(s, r * n + i);
    EXPECT(bad == 0, "alltoall in place n=%zu: %zu wrong", n, bad);
    free(send);
    free(recv);

    size_t sc[64], so[64], rc[64], ro[64], stot = 0, rtot = 0;
    for (int j = 0; j < p; j++) {
        sc[j] = (size_t)((r + j) % 3);
        so[j] = stot;
        stot += sc[j];
        rc[j] = (size_t)((j + r) % 3);
        ro[j] = rtot;
        rtot += rc[j];
    }
    float *vs = malloc(stot * 4 + 4), *vr = malloc(rtot * 4 + 4);
    for (int j = 0; j < p; j++)
        for (size_t i = 0; i < sc[j]; i++) vs[so[j] + i] = (float)(r * 100 + j * 10 + (int)i);
    comm_alltoallv(W, vs, sc, so, vr, rc, ro, COMM_FLOAT);
    bad = 0;
    for (int j = 0; j < p; j++)
        for (size_t i = 0; i < rc[j]; i++) bad += vr[ro[j] + i] != (float)(j * 100 + r * 10 + (int)i);
    EXPECT(bad == 0, "alltoallv: %zu wrong", bad);
    free(vs);
    free(vr);
}

/* a ring of sendrecv, and blocking/non-blocking point to point */
static void test_p2p(void) {
    int p = W->size, r = W->rank, next = (r + 1) % p, prev = (r + p - 1) % p;
    float out[5], in[5] = {0};
    for (int i = 0; i < 5; i++) out[i] = (float)(r * 10 + i);
    comm_sendrecv(W, out, 5, next, in, 5, prev, COMM_FLOAT, 7);
    int bad = 0;
    for (int i = 0; i < 5; i++) bad += in[i] != (float)(prev * 10 + i);
    EXPECT(bad == 0, "sendrecv ring: %d wrong", bad);
    CommRequest reqs[2];
    memset(in, 0, sizeof in);
    comm_irecv(W, in, 5, COMM_FLOAT, prev, 8, &reqs[0]);
    comm_isend(W, out, 5, COMM_FLOAT, next, 8, &reqs[1]);
    comm_waitall(reqs, 2);
    bad = 0;
    for (int i = 0; i < 5; i++) bad += in[i] != (float)(prev * 10 + i);
    EXPECT(bad == 0, "isend/irecv ring: %d wrong", bad);
    if (p > 1) {  /* blocking send/recv between ranks 0 and 1 */
        if (r == 0) comm_send(W, out, 5, COMM_FLOAT, 1, 9);
        if (r == 1) {
            comm_recv(W, in, 5, COMM_FLOAT, 0, 9);
            EXPECT(in[4] == 4.0f, "send/recv: got %g", in[4]);
        }
    }
}

static void expect_counted(const Comm *c, CommOp op, uint64_t calls, uint64_t bytes) {
    const CommOpStats s = comm_op_stats(c, op);
    EXPECT(s.calls == calls && s.bytes == bytes && s.seconds >= 0,
           "%s on %s: counted %llu calls / %llu bytes, expected %llu / %llu", comm_op_name(op),
           c->name, (unsigned long long)s.calls, (unsigned long long)s.bytes,
           (unsigned long long)calls, (unsigned long long)bytes);
}

/* Floats on a 2-byte wire (comm.h): values rounded to the format, as the
 * 2-byte type moves them and half the bytes counted (a group of one: the
 * floats themselves, 4 bytes); the ops the dtype loop above does not
 * cover (send and receive, all-to-all-v's untouched gaps), and the wire
 * buffers given back */
static void test_wire(CommDtype dt) {
    const int p = W->size, r = W->rank, next = (r + 1) % p, prev = (r + p - 1) % p;
    const Precision pr = comm_dtype_precision(dt == COMM_FLOAT_AS_BF16 ? COMM_BF16 : COMM_FP16);
    Comm *c = comm_split(W, 0, r, "wire");
    const size_t comm_before = mem_current_bytes(MEM_COMM);
    float out[5], in[5] = {0};
    for (int i = 0; i < 5; i++) out[i] = 1.0f + (float)(r * 5 + i) / 3.0f;  /* not 2-byte values */
    CommRequest reqs[2];
    comm_irecv(c, in, 5, dt, prev, 3, &reqs[0]);
    comm_isend(c, out, 5, dt, next, 3, &reqs[1]);
    comm_waitall(reqs, 2);
    int bad = 0;
    const size_t wire = p > 1 ? 2 : 4;
    for (int i = 0; i < 5; i++) {
        const float sent = 1.0f + (float)(prev * 5 + i) / 3.0f;
        bad += in[i] != (p == 1 ? sent : pr == PRECISION_BF16 ? bf16_to_float(float_to_bf16(sent))
                                                                : fp16_to_float(float_to_fp16(sent)));
    }
    EXPECT(bad == 0, "isend/irecv %s: %d values not the sent ones rounded", DT_NAMES[dt], bad);
    expect_counted(c, OP_SEND, 1, wire * 5);
    expect_counted(c, OP_RECV, 1, wire * 5);
    /* rank r sends r + 1 floats to each rank; recv's gaps keep their value */
    size_t sc[64], so[64], rc[64], ro[64];
    float *vs = malloc((size_t)p * (r + 1) * 4), *vr = malloc((size_t)p * (p + 1) * 4);
    for (int j = 0; j < p; j++) {
        sc[j] = (size_t)r + 1;
        so[j] = (size_t)j * (r + 1);
        rc[j] = (size_t)j + 1;
        ro[j] = (size_t)j * (p + 1);
        for (size_t i = 0; i < sc[j]; i++) vs[so[j] + i] = (float)(r * 8 + j);
    }
    for (size_t i = 0; i < (size_t)p * (p + 1); i++) vr[i] = -0.1f;
    comm_alltoallv(c, vs, sc, so, vr, rc, ro, dt);
    bad = 0;
    for (int j = 0; j < p; j++)
        for (size_t i = 0; i < (size_t)p + 1; i++)
            bad += vr[ro[j] + i] != (i < rc[j] ? (float)(j * 8 + r) : -0.1f);
    EXPECT(bad == 0, "alltoallv %s: %d elements wrong (gaps must stay)", DT_NAMES[dt], bad);
    expect_counted(c, OP_ALLTOALLV, 1, wire * (size_t)p * (r + 1));
    EXPECT(mem_current_bytes(MEM_COMM) == comm_before, "%s: wire buffers not given back "
           "(%zu bytes of MEM_COMM left)", DT_NAMES[dt], mem_current_bytes(MEM_COMM) - comm_before);
    /* a reserved wire buffer serves them instead: no MEM_COMM beyond it */
    comm_wire_reserve(c, 2 * (size_t)p * (p + 1) + 16);
    const size_t peak = mem_peak_bytes(MEM_COMM);
    for (size_t i = 0; i < (size_t)p * (p + 1); i++) vr[i] = -0.1f;
    comm_alltoallv(c, vs, sc, so, vr, rc, ro, dt);
    comm_irecv(c, in, 5, dt, prev, 3, &reqs[0]);
    comm_isend(c, out, 5, dt, next, 3, &reqs[1]);
    comm_waitall(reqs, 2);
    bad = 0;
    for (int j = 0; j < p; j++) bad += vr[ro[j]] != (float)(j * 8 + r);
    EXPECT(bad == 0 && mem_peak_bytes(MEM_COMM) == peak, "%s on a reserved wire buffer: %d "
           "wrong, MEM_COMM's peak %zu bytes past it", DT_NAMES[dt], bad,
           mem_peak_bytes(MEM_COMM) - peak);
    free(vs);
    free(vr);
    comm_free(c);
}

/* Every op's counters as comm.h documents them, on a fresh group (S = the
 * full buffer of N floats = 4N bytes): allreduce, reduce_scatter (input),
 * allgather (output), broadcast, reduce S; alltoall(v), send, sendrecv the
 * bytes sent; recv the bytes received; non-blocking calls once, at
 * completion. */
static void test_counters(void) {
    int p = W->size, r = W->rank;
    enum { N = 10 };
    Comm *c = comm_split(W, 0, r, "counted");
    float *buf = calloc((size_t)N * p, sizeof(float)), *out = calloc((size_t)N * p, sizeof(float));
    for (int k = 0; k < 3; k++) comm_allreduce(c, buf, buf, N, COMM_FLOAT, COMM_SUM);
    expect_counted(c, OP_ALLREDUCE, 3, 3 * 4 * N);
    comm_reduce_scatter(c, buf, out, N, COMM_FLOAT, COMM_SUM);
    expect_counted(c, OP_REDUCE_SCATTER, 1, 4 * N);
    comm_allgather(c, buf, out, N, COMM_FLOAT);
    expect_counted(c, OP_ALLGATHER, 1, 4 * N);
    comm_broadcast(c, buf, N, COMM_FLOAT, 0);
    expect_counted(c, OP_BROADCAST, 1, 4 * N);
    comm_reduce(c, buf, r == 0 ? out : NULL, N, COMM_FLOAT, COMM_MAX, 0);
    expect_counted(c, OP_REDUCE, 1, 4 * N);
    comm_alltoall(c, buf, out, N, COMM_FLOAT);
    expect_counted(c, OP_ALLTOALL, 1, 4 * (uint64_t)N * p);
    /* rank j gets j + 1 elements from each rank, at offset j p (p <= N) */
    size_t send_counts[64], recv_counts[64], offsets[64];
    for (int j = 0; j < p; j++) {
        send_counts[j] = (size_t)j + 1;
        recv_counts[j] = (size_t)r + 1;
        offsets[j] = (size_t)j * p;
    }
    comm_alltoallv(c, buf, send_counts, offsets, out, recv_counts, offsets, COMM_FLOAT);
    expect_counted(c, OP_ALLTOALLV, 1, 4 * (uint64_t)p * (p + 1) / 2);
    comm_sendrecv(c, buf, N, (r + 1) % p, out, N, (r + p - 1) % p, COMM_FLOAT, 3);
    expect_counted(c, OP_SENDRECV, 1, 4 * N);
    CommRequest req[2];
    comm_irecv(c, out, 2, COMM_FLOAT, (r + p - 1) % p, 4, &req[0]);
    comm_isend(c, buf, 2, COMM_FLOAT, (r + 1) % p, 4, &req[1]);
    comm_waitall(req, 2);
    expect_counted(c, OP_RECV, 1, 8);
    expect_counted(c, OP_SEND, 1, 8);
    comm_iallreduce(c, buf, buf, N, COMM_FLOAT, COMM_SUM, &req[0]);
    comm_wait(&req[0]);
    EXPECT(comm_test(&req[0]) == 1, "a finished request tests as done");
    comm_wait(&req[0]);
    expect_counted(c, OP_ALLREDUCE, 4, 4 * 4 * N);
    comm_barrier(c);
    expect_counted(c, OP_BARRIER, 1, 0);
    comm_reset_stats(c);
    for (int op = 0; op < OP_NUM; op++) expect_counted(c, op, 0, 0);
    comm_free(c);
    free(buf);
    free(out);
}

/* Planted failures (comm.bats runs each): every one must end the whole job
 * with its documented status and one message, and never leave a rank
 * waiting. The ranks that do not fail wait in a barrier. */
static void planted_failure(const char *what) {
    int last = W->rank == W->size - 1;
    float x[16] = {0};
    if (!strcmp(what, "--fatal-on-last-rank")) {
        CHECK(!last, "planted failure on rank %d", W->rank);
    } else if (!strcmp(what, "--mpi-error-on-last-rank")) {
        if (last) MPI_CHECK(MPI_Send(x, -1, MPI_FLOAT, 0, 0, W->mpi));
    } else if (!strcmp(what, "--not-implemented")) {
        NOT_IMPLEMENTED();
    } else if (!strcmp(what, "--not-implemented-on-last-rank")) {
        if (last) NOT_IMPLEMENTED();
    } else if (!strcmp(what, "--user-error")) {
        USER_ERROR("planted user error");
    } else if (!strcmp(what, "--count-over-int-max")) {
        comm_allreduce(W, x, x, (size_t)INT_MAX + 1, COMM_FLOAT, COMM_SUM);
    } else if (!strcmp(what, "--overlapping-buffers")) {
        comm_allreduce(W, x, x + 1, 8, COMM_FLOAT, COMM_SUM);
    } else if (!strcmp(what, "--two-in-place-reduce-scatters")) {
        CommRequest a, b;
        size_t own = shard_offset(8, W->size, W->rank);
        comm_ireduce_scatter(W, x, x + own, 8, COMM_FLOAT, COMM_SUM, &a);
        comm_ireduce_scatter(W, x + 8, x + 8 + own, 8, COMM_FLOAT, COMM_SUM, &b);
    } else {
        USER_ERROR("unknown option '%s'", what);
    }
    comm_barrier(W);
}

int main(int argc, char **argv) {
    program_set_name(argv[0]);
    W = comm_init(&argc, &argv);
    int p = W->size;
    if (argc > 1 && argv[1][0] == '-') {
        planted_failure(argv[1]);
        comm_finalize();
        return 0;  /* the failure did not end the job: comm.bats reports it */
    }
    size_t counts[] = {0, 1, (size_t)p - 1, (size_t)p, (size_t)p + 1, 1000, 100003};
    for (size_t k = 0; k < sizeof counts / sizeof *counts; k++) {
        size_t n = counts[k];
        for (int dt = 0; dt < COMM_NUM_DTYPES; dt++) {
            if (dt == COMM_BYTE) continue;  /* no reductions: test_bytes */
            for (int op = 0; op < COMM_NUM_REDOPS; op++)
                for (int ip = 0; ip < 2; ip++) test_allreduce(n, dt, op, ip, 0);
            for (int ip = 0; ip < 2; ip++)
                for (int nb = 0; nb < 2; nb++) test_reduce_scatter_allgather(n, dt, ip, nb);
        }
        test_allreduce(n, COMM_FLOAT, COMM_SUM, 0, 1);
        test_rooted(n);
        test_alltoall(n < 1000 ? n : 1000);
        test_bytes(n < 1000 ? n : 1000);
    }
    test_p2p();
    test_counters();
    test_wire(COMM_FLOAT_AS_BF16);
    test_wire(COMM_FLOAT_AS_FP16);

    /* counters: k allreduces of n floats = k calls and 4nk bytes; a split
     * group counts on its own row */
    comm_reset_stats(W);
    float *buf = calloc(1000, sizeof(float));
    for (int k = 0; k < 3; k++) comm_allreduce(W, buf, buf, 1000, COMM_FLOAT, COMM_SUM);
    EXPECT(comm_op_stats(W, OP_ALLREDUCE).calls == 3 && comm_op_stats(W, OP_ALLREDUCE).bytes == 12000,
           "allreduce counted %llu calls / %llu bytes, expected 3 / 12000",
           (unsigned long long)comm_op_stats(W, OP_ALLREDUCE).calls,
           (unsigned long long)comm_op_stats(W, OP_ALLREDUCE).bytes);
    Comm *half = comm_split(W, W->rank % 2, W->rank, "half");
    EXPECT(half->size == (p + 1 - W->rank % 2) / 2, "split group of %d", half->size);
    comm_reduce_scatter(half, buf, buf + shard_offset(1000, half->size, half->rank), 1000,
                        COMM_FLOAT, COMM_SUM);
    comm_barrier(W);
    EXPECT(comm_op_stats(half, OP_REDUCE_SCATTER).calls == 1 && comm_op_stats(half, OP_REDUCE_SCATTER).bytes == 4000,
           "reduce_scatter on the split group counted %llu calls",
           (unsigned long long)comm_op_stats(half, OP_REDUCE_SCATTER).calls);
    EXPECT(mem_peak_bytes(MEM_COMM) > 0, "in-place reduce_scatter scratch is counted as comm memory");
    free(buf);

    /* the outputs: argv[1] names a directory for comm.csv and the traces */
    if (argc > 1) {
        char path[1024];
        snprintf(path, sizeof path, "%s/comm.csv", argv[1]);
        comm_write_csv(path);
        snprintf(path, sizeof path, "%s/trace.json", argv[1]);
        trace_write_json(path);
        snprintf(path, sizeof path, "%s/trace.csv", argv[1]);
        trace_write_csv(path);
    }
    int failures = g_unit_failures, total = 0;
    MPI_CHECK(MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, W->mpi));
    g_unit_failures = total;
    int rc = W->rank == 0 ? unit_report("test_comm") : (total ? 1 : 0);
    comm_finalize();
    return rc;
}
