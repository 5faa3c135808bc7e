/* bench_collectives: how fast are the collectives, measured as nccl-tests does.
 *
 * For each buffer size S (bytes of the whole buffer, doubling from --min-bytes
 * to --max-bytes) and each implementation (the lab's, comm.h's library):
 *   1. run once on known inputs and check the result (wrong code is not timed);
 *   2. run a few warm-up iterations, then REPEATS blocks of about iters /
 *      REPEATS timed ones, each after a barrier; a block's time is the
 *      slowest rank's mean per iteration, and t is the median block (one
 *      descheduled block cannot move it), with the fastest and slowest
 *      blocks as its spread;
 *   3. algbw = S / t and busbw = algbw * factor, decimal GB/s, the factor
 *      (nccl-tests, doc/PERFORMANCE.md) making busbw comparable with a link's
 *      bandwidth whatever p is:
 *        allreduce (all four: ring, tree, halving, hierarchical) 2(p-1)/p;
 *        reduce_scatter, allgather, alltoall (p-1)/p; broadcast 1.
 * Out of place, float32, sum, root 0. Rank 0 prints a table and writes
 * DIR/busbw.csv (size_bytes,count,impl,time_us,algbw_GBps,busbw_GBps,
 * busbw_lo_GBps,busbw_hi_GBps: the median block's, then the slowest and
 * the fastest block's) and
 * DIR/run.json (the options, the memcpy ceiling and the fits below).
 *
 * The alpha-beta fit. Each op's time is modelled in the form of the lab's
 * algorithm, t = L(p) alpha + F(p) S beta (see g_ops), fitted by least
 * squares on relative errors (each size weighs the same, so the small sizes
 * fix alpha and the large ones beta). The library is fitted in the same form:
 * its algorithm may differ, but 1/beta is then directly comparable, and for
 * every op but broadcast it is the busbw the curve tends to.
 *
 * hierarchical_allreduce runs on the machine's nodes (the ranks that share
 * memory), or with --ranks-per-node K on nodes of K consecutive ranks
 * simulated on one machine; its library counterpart is the flat
 * comm_allreduce over all ranks. Its form assumes one link per rank, alike
 * inside and across nodes; on scripts/cluster.sh's cluster the two links
 * differ, and bench/cluster.sh fits each link alone and predicts from both.
 *
 * The ceiling: the ranks of one machine move data through memory, so one
 * core's memcpy bandwidth (64 MiB, measured here on rank 0) bounds what a
 * rank can send.
 */
#include <ctype.h>
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "check.h"
#include "cli.h"
#include "collectives.h"
#include "comm.h"
#include "device.h"
#include "fileio.h"
#include "mesh.h"
#include "runlog.h"

/* Large sizes get fewer iterations: at most this many bytes per size and
 * implementation (at least 2 iterations), so that the default sweep to
 * 64 MiB takes seconds on 4 ranks sharing 2 cores. */
#define BYTES_PER_SIZE (512.0 * 1024 * 1024)
#define MEMCPY_BYTES ((size_t)64 << 20)
#define MAX_BYTES ((size_t)1 << 30)
#define MAX_SIZES 40
#define REPEATS 5  /* timed blocks per size and implementation: the median and the spread */

typedef enum { BENCH_ALLREDUCE, BENCH_REDUCE_SCATTER, BENCH_ALLGATHER, BENCH_BROADCAST,
               BENCH_ALLTOALL, BENCH_TREE_ALLREDUCE, BENCH_HALVING_ALLREDUCE,
               BENCH_HIERARCHICAL_ALLREDUCE, BENCH_NUM_OPS } BenchOp;
typedef enum { IMPL_STUDENT, IMPL_LIBRARY, IMPL_NUM } Impl;
static const char *const g_impl_names[IMPL_NUM] = {"student", "library"};

/* Per op: the lab function timed as "student", and the alpha-beta form of
 * its algorithm, t = latency_steps alpha + bandwidth_factor S beta. */
typedef struct {
    const char *name, *student_function, *model;
} OpInfo;
static const OpInfo g_ops[BENCH_NUM_OPS] = {
    {"allreduce", "ring_allreduce", "t = 2(p-1) alpha + 2(p-1)/p S beta"},
    {"reduce_scatter", "ring_reduce_scatter", "t = (p-1) alpha + (p-1)/p S beta"},
    {"allgather", "ring_allgather", "t = (p-1) alpha + (p-1)/p S beta"},
    {"broadcast", "tree_broadcast", "t = ceil(log2 p) (alpha + S beta)"},
    {"alltoall", "pairwise_alltoall", "t = (p-1) alpha + (p-1)/p S beta"},
    {"tree_allreduce", "tree_allreduce",
     "t = k (alpha + S beta), k = floor(log2 p), +2 if p is no power of 2"},
    {"halving_allreduce", "halving_doubling_allreduce",
     "t = 2 log2(p) alpha + 2(p-1)/p S beta; p no power of 2: q = 2^floor(log2 p) for p, "
     "+2 (alpha + S beta)"},
    {"hierarchical_allreduce", "hierarchical_allreduce",
     "t = 2(k-1) (alpha + S/k beta) + 2(N-1) (alpha + S/(kN) beta), N nodes of k ranks"},
};

/* hierarchical_allreduce's groups (mesh_node_groups); NULL for other ops */
static Comm *g_node, *g_across;

static int ceil_log2(int p) {
    int k = 0;
    while ((1 << k) < p) k++;
    return k;
}

static void model_terms(BenchOp op, int p, double *latency_steps, double *bandwidth_factor) {
    if (op == BENCH_HIERARCHICAL_ALLREDUCE) {  /* k ranks a node, N nodes */
        const int k = g_node->size, N = g_across->size;
        *latency_steps = 2.0 * (k - 1) + 2.0 * (N - 1);
        *bandwidth_factor = 2.0 * (k - 1) / k + 2.0 * (N - 1) / ((double)k * N);
        return;
    }
    /* the folded all-reduces: k rounds among q = 2^k <= p ranks, and for
     * q < p the fold and the result back, 2 (alpha + S beta) */
    int k = 0;
    while ((2 << k) <= p) k++;
    const int q = 1 << k, fold = q != p ? 2 : 0;
    switch (op) {
    case BENCH_ALLREDUCE: *latency_steps = 2.0 * (p - 1); *bandwidth_factor = 2.0 * (p - 1) / p; return;
    case BENCH_BROADCAST: *latency_steps = *bandwidth_factor = ceil_log2(p); return;
    case BENCH_TREE_ALLREDUCE: *latency_steps = *bandwidth_factor = k + fold; return;
    case BENCH_HALVING_ALLREDUCE:
        *latency_steps = 2 * k + fold;
        *bandwidth_factor = 2.0 * (q - 1) / q + fold;
        return;
    default: *latency_steps = p - 1; *bandwidth_factor = (double)(p - 1) / p; return;
    }
}

static double busbw_factor(BenchOp op, int p) {
    switch (op) {
    case BENCH_ALLREDUCE:
    case BENCH_TREE_ALLREDUCE:
    case BENCH_HALVING_ALLREDUCE:
    case BENCH_HIERARCHICAL_ALLREDUCE: return 2.0 * (p - 1) / p;
    case BENCH_BROADCAST: return 1.0;
    default: return (double)(p - 1) / p;
    }
}

/* Elements of the whole buffer for S bytes; all-to-all needs p equal blocks. */
static size_t elements_for(BenchOp op, size_t bytes, int p) {
    size_t n = bytes / sizeof(float);
    return op == BENCH_ALLTOALL ? n / (size_t)p * (size_t)p : n;
}

/* One collective on send/recv, count elements of the whole buffer. */
static void run_op(Comm *c, BenchOp op, Impl impl, float *send, float *recv, size_t count) {
    const int lib = impl == IMPL_LIBRARY;
    switch (op) {
    case BENCH_ALLREDUCE:
    case BENCH_TREE_ALLREDUCE:
    case BENCH_HALVING_ALLREDUCE:
    case BENCH_HIERARCHICAL_ALLREDUCE:
        if (lib) comm_allreduce(c, send, recv, count, COMM_FLOAT, COMM_SUM);
        else if (op == BENCH_TREE_ALLREDUCE) tree_allreduce(c, send, recv, count);
        else if (op == BENCH_HALVING_ALLREDUCE) halving_doubling_allreduce(c, send, recv, count);
        else if (op == BENCH_HIERARCHICAL_ALLREDUCE) hierarchical_allreduce(g_node, g_across, send, recv, count);
        else ring_allreduce(c, send, recv, count);
        break;
    case BENCH_REDUCE_SCATTER:
        if (lib) comm_reduce_scatter(c, send, recv, count, COMM_FLOAT, COMM_SUM);
        else ring_reduce_scatter(c, send, recv, count);
        break;
    case BENCH_ALLGATHER:
        if (lib) comm_allgather(c, send, recv, count, COMM_FLOAT);
        else ring_allgather(c, send, recv, count);
        break;
    case BENCH_BROADCAST:
        if (lib) comm_broadcast(c, recv, count, COMM_FLOAT, 0);
        else tree_broadcast(c, recv, count, 0);
        break;
    case BENCH_ALLTOALL:
        if (lib) comm_alltoall(c, send, recv, count / c->size, COMM_FLOAT);
        else pairwise_alltoall(c, send, recv, count / c->size);
        break;
    default: CHECK(0, "bad op %d", (int)op);
    }
}

/* Inputs for the correctness run: element i of rank r is (i mod 251) + r, an
 * integer, so every sum is exact. */
static float pattern(size_t i, int r) { return (float)(i % 251 + (size_t)r); }

static int owner_of(size_t i, size_t n, int p) {
    int j = 0;
    while (i >= shard_offset(n, p, j) + shard_count(n, p, j)) j++;
    return j;
}

/* Fill the inputs of op, run it once, count the wrong output elements.
 * The check reads host memory: with --device cuda the inputs are made in
 * hsend/hrecv, copied to the GPU's send/recv, and the result copied back. */
static size_t wrong_elements(Comm *c, BenchOp op, Impl impl, float *send, float *recv,
                             float *hsend, float *hrecv, size_t n) {
    const int p = c->size, r = c->rank;
    const size_t off = shard_offset(n, p, r), own = shard_count(n, p, r), m = n / p;
    const float everyone = (float)(p * (p - 1) / 2);  /* sum of the ranks' offsets r */
    size_t out_count = op == BENCH_REDUCE_SCATTER ? own : n;
    if (op == BENCH_ALLGATHER)
        for (size_t k = 0; k < own; k++) hsend[k] = pattern(off + k, r);
    else if (op == BENCH_BROADCAST)
        for (size_t i = 0; i < n; i++) hrecv[i] = pattern(i, r);
    else
        for (size_t i = 0; i < n; i++) hsend[i] = pattern(i, r);
    if (send != hsend) {
        device_copy(send, hsend, n * sizeof(float));
        device_copy(recv, hrecv, n * sizeof(float));
    }
    run_op(c, op, impl, send, recv, n);
    if (recv != hrecv) device_copy(hrecv, recv, out_count * sizeof(float));
    size_t wrong = 0;
    for (size_t k = 0; k < out_count; k++) {
        float want;
        switch (op) {
        case BENCH_REDUCE_SCATTER: want = p * (float)((off + k) % 251) + everyone; break;
        case BENCH_ALLGATHER: want = pattern(k, owner_of(k, n, p)); break;
        case BENCH_BROADCAST: want = pattern(k, 0); break;
        case BENCH_ALLTOALL: want = pattern(r * m + k % m, (int)(k / m)); break;
        default: want = p * (float)(k % 251) + everyone; break;
        }
        wrong += hrecv[k] != want;
    }
    return wrong;
}

/* Seconds per call: the median, fastest and slowest of the blocks */
typedef struct {
    double median, fastest, slowest;
} Timing;

/* REPEATS blocks of iters / REPEATS calls (at least one), after warmup:
 * each block the slowest rank's mean seconds per call */
static Timing time_op(Comm *c, BenchOp op, Impl impl, float *send, float *recv, size_t n,
                      int warmup, int iters) {
    for (int i = 0; i < warmup; i++) run_op(c, op, impl, send, recv, n);
    const int per_block = iters / REPEATS > 0 ? iters / REPEATS : 1;
    double blocks[REPEATS];
    for (int r = 0; r < REPEATS; r++) {
        comm_barrier(c);
        double t0 = MPI_Wtime();
        for (int i = 0; i < per_block; i++) run_op(c, op, impl, send, recv, n);
        double mean = (MPI_Wtime() - t0) / per_block;
        MPI_CHECK(MPI_Allreduce(&mean, &blocks[r], 1, MPI_DOUBLE, MPI_MAX, c->mpi));
    }
    timings_sort(blocks, REPEATS);
    return (Timing){blocks[REPEATS / 2], blocks[0], blocks[REPEATS - 1]};
}

/* One core copying MEMCPY_BYTES: the best of 5 copies, in GB/s of data copied.
 * Host memory (malloc, not mem_alloc: with --device cuda that is the GPU's,
 * which the host must not touch). */
static double memcpy_gbps(void) {
    char *src = malloc(MEMCPY_BYTES), *dst = malloc(MEMCPY_BYTES);
    CHECK(src && dst, "out of memory for the memcpy ceiling");
    memset(src, 1, MEMCPY_BYTES);
    memcpy(dst, src, MEMCPY_BYTES);  /* faults dst's pages in */
    double best = 1e30;
    for (int i = 0; i < 5; i++) {
        double t0 = MPI_Wtime();
        memcpy(dst, src, MEMCPY_BYTES);
        double dt = MPI_Wtime() - t0;
        if (dt < best) best = dt;
    }
    free(src);
    free(dst);
    return MEMCPY_BYTES / best / 1e9;
}

typedef struct {
    size_t bytes, count;
    Impl impl;
    double seconds;  /* the median block's */
    Timing spread;
} Row;

/* Least squares of t = a + b S on relative errors: minimize
 * sum ((a + b S_i - t_i) / t_i)^2, i.e. weights w_i = 1 / t_i^2. Returns
 * the largest relative misfit |a + b S_i - t_i| / t_i, and its size. */
static double fit_line(const Row *rows, int num_rows, Impl impl, double *a, double *b,
                       size_t *worst_bytes) {
    double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (int i = 0; i < num_rows; i++) {
        if (rows[i].impl != impl) continue;
        double x = (double)rows[i].bytes, y = rows[i].seconds, w = 1.0 / (y * y);
        sw += w; sx += w * x; sy += w * y; sxx += w * x * x; sxy += w * x * y;
    }
    *b = (sw * sxy - sx * sy) / (sw * sxx - sx * sx);
    *a = (sy - *b * sx) / sw;
    double worst = 0;
    for (int i = 0; i < num_rows; i++) {
        if (rows[i].impl != impl) continue;
        double misfit = fabs(*a + *b * rows[i].bytes - rows[i].seconds) / rows[i].seconds;
        if (misfit > worst) worst = misfit, *worst_bytes = rows[i].bytes;
    }
    return worst;
}

/* "64M" -> 67108864: an integer with an optional K, M or G (powers of 1024). */
static size_t parse_bytes(const char *flag, const char *arg) {
    size_t len = strlen(arg), scale = 1;
    char digits[32];
    if (len == 0 || len >= sizeof digits) USER_ERROR("%s expects a size like 4096, 64K or 64M, got '%s'", flag, arg);
    memcpy(digits, arg, len + 1);
    switch (toupper((unsigned char)digits[len - 1])) {
    case 'K': scale = (size_t)1 << 10; break;
    case 'M': scale = (size_t)1 << 20; break;
    case 'G': scale = (size_t)1 << 30; break;
    default: break;
    }
    if (scale > 1) digits[len - 1] = '\0';
    for (const char *d = digits; *d; d++)
        if (!isdigit((unsigned char)*d)) USER_ERROR("%s expects a size like 4096, 64K or 64M, got '%s'", flag, arg);
    size_t v = (size_t)cli_int(flag, digits, 0, (long)(MAX_BYTES / scale)) * scale;
    if (v < sizeof(float) || v > MAX_BYTES)
        USER_ERROR("%s must be between 4 bytes and 1G, got '%s'", flag, arg);
    return v;
}

static void write_outputs(const char *dir, BenchOp op, int p, const char *impl_arg,
                          size_t min_bytes, size_t max_bytes, int warmup, int iters,
                          const Row *rows, int num_rows, double memcpy_bw,
                          const double fit[IMPL_NUM][2], const int fitted[IMPL_NUM]) {
    const int nodes = g_across ? g_across->size : 1;
    char path[1100];
    AtomicFile af;
    make_dirs(dir);
    snprintf(path, sizeof path, "%s/busbw.csv", dir);
    FILE *f = atomic_open(&af, path);
    fprintf(f, "size_bytes,count,impl,time_us,algbw_GBps,busbw_GBps,busbw_lo_GBps,busbw_hi_GBps\n");
    for (int i = 0; i < num_rows; i++) {
        const Row *r = &rows[i];
        const double algbw = r->bytes / r->seconds / 1e9, k = busbw_factor(op, p) * r->bytes / 1e9;
        fprintf(f, "%zu,%zu,%s,%.3f,%.6g,%.6g,%.6g,%.6g\n", r->bytes, r->count,
                g_impl_names[r->impl], r->seconds * 1e6, algbw, algbw * busbw_factor(op, p),
                k / r->spread.slowest, k / r->spread.fastest);
    }
    atomic_commit(&af);

    snprintf(path, sizeof path, "%s/run.json", dir);
    f = atomic_open(&af, path);
    fprintf(f, "{\n  \"program\": \"bench_collectives\",\n  \"op\": \"%s\",\n  \"ranks\": %d,\n"
               "  \"impl\": \"%s\",\n  \"dtype\": \"float32\",\n  \"min_bytes\": %zu,\n"
               "  \"max_bytes\": %zu,\n  \"warmup\": %d,\n  \"iters\": %d,\n  \"repeats\": %d,\n"
               "  \"busbw_factor\": %.6f,\n  \"memcpy_GBps\": %.3f,\n  \"model\": \"%s\"",
            g_ops[op].name, p, impl_arg, min_bytes, max_bytes, warmup, iters, REPEATS,
            busbw_factor(op, p), memcpy_bw, g_ops[op].model);
    if (g_node) fprintf(f, ",\n  \"nodes\": %d,\n  \"ranks_per_node\": %d", nodes, g_node->size);
    for (int impl = 0; impl < IMPL_NUM; impl++)
        if (fitted[impl])
            fprintf(f, ",\n  \"%s_alpha_us\": %.3f,\n  \"%s_inv_beta_GBps\": %.4f", g_impl_names[impl],
                    fit[impl][0] * 1e6, g_impl_names[impl], 1e-9 / fit[impl][1]);
    fprintf(f, "\n}\n");
    atomic_commit(&af);
}

/* The command line, checked. */
typedef struct {
    BenchOp op;
    const char *impl_arg;       /* student, library or both */
    int first_impl, last_impl;  /* the range of Impl that impl_arg names */
    size_t min_bytes, max_bytes;
    int warmup, iters;
    int ranks_per_node;         /* 0: the machine's nodes */
    char out_dir[1024], device[8];
} Options;

/* The collective's buffers, and the host memory the checks read: the same
 * buffers on the CPU, copies of them with --device cuda. */
typedef struct {
    float *send, *recv, *hsend, *hrecv;
} Buffers;

static void print_usage(void) {
    printf("usage: mpirun -np P %s [options]\n"
           "Bus bandwidth of lab 01's collectives and of the library's, nccl-tests style.\n"
           "  --op NAME        allreduce (default), reduce_scatter, allgather, broadcast,\n"
           "                   alltoall, tree_allreduce, and the extensions halving_allreduce\n"
           "                   and hierarchical_allreduce\n"
           "  --impl WHICH     student, library or both (default)\n"
           "  --min-bytes S    smallest buffer (default 1K; suffixes K, M, G)\n"
           "  --max-bytes S    largest buffer (default 64M); sizes double in between\n"
           "  --warmup N       untimed runs per size (default 5)\n"
           "  --iters N        timed runs per size, in 5 blocks whose median is reported\n"
           "                   (default 40; fewer from 16M, at least one a block)\n"
           "  --out DIR        busbw.csv and run.json (default runs/01_collectives-OP-npP)\n"
           "  --ranks-per-node K  hierarchical_allreduce's nodes: K consecutive ranks each\n"
           "                   (default: the machine's nodes, the ranks sharing memory)\n"
           "  --device cpu|cuda  buffers in host or GPU memory (default cpu); cuda times\n"
           "                   the library (NCCL, or MPI with host staging): --impl library\n"
           COMM_TIMEOUT_HELP,
           g_program_name);
}

static BenchOp op_named(const char *name) {
    for (int k = 0; k < BENCH_NUM_OPS; k++)
        if (strcmp(name, g_ops[k].name) == 0) return (BenchOp)k;
    USER_ERROR("unknown --op '%s'; see --help", name);
}

/* The options into o; returns 1 for --help (rank 0 printed it), leaving the
 * options after it unread. */
static int parse_options(int argc, char **argv, int rank, Options *o) {
    static const struct option opts[] = {
        {"op", required_argument, 0, 'o'},        {"impl", required_argument, 0, 'i'},
        {"min-bytes", required_argument, 0, 'm'}, {"max-bytes", required_argument, 0, 'M'},
        {"warmup", required_argument, 0, 'w'},    {"iters", required_argument, 0, 'n'},
        {"out", required_argument, 0, 'O'},       {"device", required_argument, 0, 'd'},
        {"comm-timeout", required_argument, 0, 'T'},
        {"ranks-per-node", required_argument, 0, 'k'},
        {"help", no_argument, 0, 'h'},            {0, 0, 0, 0}};
    *o = (Options){.op = BENCH_ALLREDUCE, .impl_arg = "both", .min_bytes = 1024,
                   .max_bytes = (size_t)64 << 20, .warmup = 5, .iters = 40, .device = "cpu"};
    opterr = 0;
    int ch;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (ch) {
        case 'o': o->op = op_named(optarg); break;
        case 'i':
            if (strcmp(optarg, "student") && strcmp(optarg, "library") && strcmp(optarg, "both"))
                USER_ERROR("--impl expects student, library or both, got '%s'", optarg);
            o->impl_arg = optarg;
            break;
        case 'm': o->min_bytes = parse_bytes("--min-bytes", optarg); break;
        case 'M': o->max_bytes = parse_bytes("--max-bytes", optarg); break;
        case 'w': o->warmup = (int)cli_int("--warmup", optarg, 0, 10000); break;
        case 'n': o->iters = (int)cli_int("--iters", optarg, 1, 100000); break;
        case 'O': cli_string(o->out_dir, sizeof o->out_dir, "--out", optarg); break;
        case 'd': cli_string(o->device, sizeof o->device, "--device", optarg); break;
        case 'T': comm_set_timeout(cli_double("--comm-timeout", optarg, 0, 1e7)); break;
        case 'k': o->ranks_per_node = (int)cli_int("--ranks-per-node", optarg, 1, 1 << 16); break;
        case 'h':
            if (rank == 0) print_usage();
            return 1;
        default: cli_bad_option(argv[optind - 1], "see --help");
        }
    }
    if (optind < argc) USER_ERROR("unexpected argument '%s'; see --help", argv[optind]);
    return 0;
}

/* Selects the device, refuses the combinations that cannot run and fills in
 * what follows from the rest: the default --out, the implementations. Every
 * rank checks, so that all of them stop alike (check.h). */
static void check_options(Options *o, int p) {
    device_select(o->device);
    const int on_gpu = device_current() == DEVICE_CUDA;
    if (on_gpu && strcmp(o->impl_arg, "library") != 0)
        USER_ERROR("--device cuda times the library's collectives only (the lab's functions "
                   "compute on host memory): add --impl library");
    if (on_gpu && o->op == BENCH_ALLTOALL)
        USER_ERROR("--device cuda: comm.h's alltoall takes host buffers only");
    if (on_gpu && o->op == BENCH_HIERARCHICAL_ALLREDUCE)
        USER_ERROR("--device cuda: hierarchical_allreduce is the lab's own (host memory): time it on the CPU");
    if (o->ranks_per_node && o->op != BENCH_HIERARCHICAL_ALLREDUCE)
        USER_ERROR("--ranks-per-node is for --op hierarchical_allreduce only");
    if (o->min_bytes > o->max_bytes)
        USER_ERROR("--min-bytes (%zu) is above --max-bytes (%zu)", o->min_bytes, o->max_bytes);
    if (o->op == BENCH_ALLTOALL && o->min_bytes < sizeof(float) * (size_t)p)
        USER_ERROR("alltoall needs --min-bytes of at least 4 p = %zu (one float per rank)",
                   sizeof(float) * (size_t)p);
    if (!o->out_dir[0])
        snprintf(o->out_dir, sizeof o->out_dir, "runs/01_collectives-%s-np%d", g_ops[o->op].name, p);
    char why[1400];
    if (output_dir_problem(o->out_dir, why, sizeof why))
        USER_ERROR("--out %s: %s", o->out_dir, why);
    o->first_impl = strcmp(o->impl_arg, "library") == 0 ? IMPL_LIBRARY : IMPL_STUDENT;
    o->last_impl = strcmp(o->impl_arg, "student") == 0 ? IMPL_STUDENT : IMPL_LIBRARY;
}

static void print_header(const Options *o, int p, double memcpy_bw) {
    printf("bench_collectives: %s on %d ranks, float32, out of place; student = %s\n",
           g_ops[o->op].name, p, g_ops[o->op].student_function);
    if (g_node) printf("nodes: %d of %d ranks each\n", g_across->size, g_node->size);
    printf("memcpy ceiling: %.2f GB/s (one core, 64 MiB)\n", memcpy_bw);
    printf("%12s %11s %8s %11s %11s %11s\n", "size_bytes", "count", "impl", "time_us",
           "algbw_GBps", "busbw_GBps");
}

/* Buffers for the largest size, count elements each. */
static Buffers buffers_alloc(size_t count, int on_gpu) {
    Buffers b;
    b.send = mem_alloc(MEM_WORKSPACE, count * sizeof(float));
    b.recv = mem_alloc(MEM_WORKSPACE, count * sizeof(float));
    b.hsend = b.send, b.hrecv = b.recv;
    if (on_gpu) {
        b.hsend = malloc(count * sizeof(float));
        b.hrecv = malloc(count * sizeof(float));
        CHECK(b.hsend && b.hrecv, "out of memory");
    }
    return b;
}

static void buffers_free(Buffers *b) {
    if (b->hsend != b->send) {
        free(b->hsend);
        free(b->hrecv);
    }
    mem_free(b->send);
    mem_free(b->recv);
}

/* Whether impl's op gives the right n elements on every rank; rank 0 says
 * which is wrong otherwise. */
static int right_everywhere(Comm *c, const Options *o, Impl impl, const Buffers *b, size_t n) {
    uint64_t wrong = wrong_elements(c, o->op, impl, b->send, b->recv, b->hsend, b->hrecv, n);
    uint64_t wrong_anywhere;
    MPI_CHECK(MPI_Allreduce(&wrong, &wrong_anywhere, 1, MPI_UINT64_T, MPI_SUM, c->mpi));
    if (wrong_anywhere && c->rank == 0)
        fprintf(stderr, "%s: %s %s gives %llu wrong elements at %zu bytes: run check_collectives\n",
                g_program_name, g_impl_names[impl], g_ops[o->op].name,
                (unsigned long long)wrong_anywhere, n * sizeof(float));
    return wrong_anywhere == 0;
}

static void print_row(BenchOp op, int p, const Row *row) {
    double algbw = row->bytes / row->seconds / 1e9;
    printf("%12zu %11zu %8s %11.1f %11.3f %11.3f\n", row->bytes, row->count,
           g_impl_names[row->impl], row->seconds * 1e6, algbw, algbw * busbw_factor(op, p));
    fflush(stdout);
}

/* Every size, doubling from --min-bytes to --max-bytes, and every
 * implementation: checked, then timed, into rows (rank 0 prints each).
 * Returns 1, having timed no more, when a result is wrong. */
static int sweep(Comm *c, const Options *o, const Buffers *b, Row *rows, int *num_rows) {
    for (size_t bytes = o->min_bytes; bytes <= o->max_bytes && *num_rows < 2 * MAX_SIZES;
         bytes *= 2) {
        const size_t n = elements_for(o->op, bytes, c->size), real_bytes = n * sizeof(float);
        int size_iters = o->iters;
        if ((double)real_bytes * o->iters > BYTES_PER_SIZE)
            size_iters = (int)(BYTES_PER_SIZE / real_bytes);
        if (size_iters < 2) size_iters = 2;
        const int size_warmup = o->warmup < size_iters ? o->warmup : size_iters;
        for (int impl = o->first_impl; impl <= o->last_impl; impl++) {
            if (!right_everywhere(c, o, (Impl)impl, b, n)) return 1;
            Timing t = time_op(c, o->op, (Impl)impl, b->send, b->recv, n, size_warmup, size_iters);
            rows[*num_rows] = (Row){real_bytes, n, (Impl)impl, t.median, t};
            if (c->rank == 0) print_row(o->op, c->size, &rows[*num_rows]);
            (*num_rows)++;
        }
    }
    return 0;
}

/* Rank 0: each implementation's alpha and 1/beta, printed and written with
 * the rows. */
static void report_fits(const Options *o, int p, const Row *rows, int num_rows, double memcpy_bw) {
    double fit[IMPL_NUM][2] = {{0}};
    int fitted[IMPL_NUM] = {0};
    double latency_steps, bandwidth_factor;
    model_terms(o->op, p, &latency_steps, &bandwidth_factor);
    printf("alpha-beta fit, %s (relative least squares over the sizes):\n", g_ops[o->op].model);
    for (int impl = o->first_impl; impl <= o->last_impl; impl++) {
        if (num_rows / (o->last_impl - o->first_impl + 1) < 2 || latency_steps == 0) {
            printf("  %s: needs 2 sizes or more and 2 ranks or more\n", g_impl_names[impl]);
            continue;
        }
        double a, b;
        size_t worst_bytes = 0;
        double worst = fit_line(rows, num_rows, (Impl)impl, &a, &b, &worst_bytes);
        fit[impl][0] = a / latency_steps;
        fit[impl][1] = b / bandwidth_factor;
        fitted[impl] = 1;
        printf("  %s: alpha = %.2f us, 1/beta = %.3f GB/s (worst misfit %.0f%% at %zu bytes)\n",
               g_impl_names[impl], fit[impl][0] * 1e6, 1e-9 / fit[impl][1], 100 * worst,
               worst_bytes);
    }
    write_outputs(o->out_dir, o->op, p, o->impl_arg, o->min_bytes, o->max_bytes, o->warmup,
                  o->iters, rows, num_rows, memcpy_bw, fit, fitted);
    printf("wrote %s/busbw.csv and %s/run.json\n", o->out_dir, o->out_dir);
}

int main(int argc, char **argv) {
    program_set_name(argv[0]);
    Comm *c = comm_init(&argc, &argv);
    const int p = c->size, r = c->rank;
    Options o;
    if (parse_options(argc, argv, r, &o)) {
        comm_finalize();
        return 0;
    }
    check_options(&o, p);
    const int on_gpu = device_current() == DEVICE_CUDA;
    if (o.op == BENCH_HIERARCHICAL_ALLREDUCE) mesh_node_groups(c, o.ranks_per_node, &g_node, &g_across);
    double memcpy_bw = 0;
    if (r == 0) memcpy_bw = memcpy_gbps();
    comm_barrier(c);
    if (r == 0) print_header(&o, p, memcpy_bw);

    Buffers b = buffers_alloc(elements_for(o.op, o.max_bytes, p), on_gpu);
    if (on_gpu) {
        if (r == 0) printf("device: %s\n", device_description());
        comm_attach_gpus(c);
    }
    Row rows[2 * MAX_SIZES];
    int num_rows = 0;
    if (sweep(c, &o, &b, rows, &num_rows)) {
        comm_finalize();
        return 1;
    }
    buffers_free(&b);
    if (r == 0) report_fits(&o, p, rows, num_rows, memcpy_bw);
    comm_finalize();
    return 0;
}
