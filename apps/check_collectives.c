/* check_collectives: lab 01's collectives, checked to the bit.
 *
 * Every case fills the inputs with small integers that depend on (rank, i),
 * runs one collective on every rank, and compares each output element
 * bit for bit with a reference this rank computes alone. Sums of integers
 * below 2^24 are exact in float whatever the order of the additions, so a
 * correct schedule, however it orders its sums, matches exactly, and one
 * wrong chunk index, a missing contribution or one counted twice does not.
 *
 * Per op it runs the counts 0, 1, p-1, p, p+1, 1000, 4099 and LARGE_COUNT
 * (empty shards, uneven shards, several messages' worth), in place and out
 * of place (broadcast: root 0 and root p-1). Besides the values it checks:
 *   - out of place, the input is left alone; in place, only what the op may
 *     change changes (reduce-scatter: the rank's own shard);
 *   - nothing is written past the end of the output (a guard zone);
 *   - for the student's code, the bytes this rank sent (comm.h's counters of
 *     comm_send and comm_sendrecv) equal what the README's schedule sends,
 *     see sent_elements below.
 * --impl library runs the same cases on comm.h's collectives.
 * --op all runs the core's ops; the extensions' (halving_allreduce,
 * hierarchical_allreduce) run only by name, so that the core grades
 * without them. hierarchical_allreduce runs on the machine's nodes (ranks
 * sharing memory: one node here, several on scripts/cluster.sh's cluster)
 * or, with --ranks-per-node K, on nodes of K consecutive ranks simulated
 * on this machine (mesh_node_groups).
 */
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "check.h"
#include "cli.h"
#include "collectives.h"
#include "comm.h"
#include "mesh.h"

#define LARGE_COUNT 262147  /* odd, and 1 MiB of floats: many eager-limit multiples */
#define GUARD 16            /* floats after every output buffer that must stay untouched */
#define MESSAGE_MAX 200

typedef enum { IMPL_STUDENT, IMPL_LIBRARY } Impl;

typedef enum { CHECK_REDUCE_SCATTER, CHECK_ALLGATHER, CHECK_ALLREDUCE, CHECK_BROADCAST,
               CHECK_TREE_ALLREDUCE, CHECK_ALLTOALL,
               CHECK_HALVING_ALLREDUCE, CHECK_HIERARCHICAL_ALLREDUCE,  /* the extensions:
                                                                          not in --op all */
               CHECK_NUM_OPS } CheckedOp;

static const char *const g_op_names[CHECK_NUM_OPS] = {
    "reduce_scatter", "allgather", "allreduce", "broadcast", "tree_allreduce", "alltoall",
    "halving_allreduce", "hierarchical_allreduce"};

static int is_extension(int op) {
    return op == CHECK_HALVING_ALLREDUCE || op == CHECK_HIERARCHICAL_ALLREDUCE;
}

/* One case on this rank: what ran, and the first thing found wrong. */
typedef struct {
    Comm *c;
    Comm *node, *across;  /* hierarchical_allreduce's groups (mesh_node_groups), else NULL */
    Impl impl;
    CheckedOp op;
    size_t n;        /* elements of the whole buffer (alltoall: per rank) */
    int variant;     /* in place (1) or not (0); broadcast: 0 root 0, 1 root p-1 */
    char error[MESSAGE_MAX];
} Case;

/* Input element i of rank r: an integer in -1000..1000 from a hash of (r, i),
 * so that a misplaced element almost never carries the expected value. Sums
 * over up to 16000 ranks stay below 2^24: exact in float. */
static float input_value(int r, size_t i) {
    uint64_t h = (uint64_t)(i + 1) * 0x9E3779B97F4A7C15ull ^ (uint64_t)(r + 1) * 0xC2B2AE3D27D4EB4Full;
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 32;
    return (float)((int)(h % 2001) - 1000);
}

static float sum_over_ranks(int p, size_t i) {
    float s = 0.0f;
    for (int r = 0; r < p; r++) s += input_value(r, i);
    return s;
}

static float sentinel(void) {
    uint32_t bits = 0x7FC0DEADu;  /* a NaN no collective produces */
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* n elements plus the guard zone, all set to the sentinel */
static float *buffer(size_t n) {
    float *x = mem_alloc(MEM_WORKSPACE, (n + GUARD) * sizeof(float));
    for (size_t i = 0; i < n + GUARD; i++) x[i] = sentinel();
    return x;
}

static void fill_inputs(float *x, size_t count, int r, size_t first_index) {
    for (size_t k = 0; k < count; k++) x[k] = input_value(r, first_index + k);
}

static int same_bits(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

/* Compare got[0..count) with want[0..count), and the guard zone after
 * got[count) with the sentinel; the first difference becomes k->error. */
static void compare(Case *k, const char *what, const float *got, const float *want,
                    size_t count) {
    if (k->error[0]) return;
    for (size_t i = 0; i < count; i++)
        if (!same_bits(got[i], want[i])) {
            snprintf(k->error, MESSAGE_MAX, "rank %d: %s[%zu] = %g, want %g", k->c->rank, what,
                     i, got[i], want[i]);
            return;
        }
    for (size_t i = count; i < count + GUARD; i++)
        if (!same_bits(got[i], sentinel())) {
            snprintf(k->error, MESSAGE_MAX, "rank %d: wrote past the end of %s (%zu elements)",
                     k->c->rank, what, count);
            return;
        }
}

/* Elements survivor v of q = 2^k sends in the power-of-two part of a folded
 * all-reduce (below), with count(u) and G_i over the shards of n over q:
 *   recursive doubling  k n, the whole buffer each round
 *   halving-doubling    n - count(v) in the halving (every shard but its own,
 *                       once), then G_i(v) in doubling round i = 0 .. k-1: the
 *                       elements of the 2^i shards from v with its i low bits
 *                       cleared (the segment it holds) */
static size_t survivor_sent(CheckedOp op, size_t n, int q, int v) {
    size_t sent = 0;
    if (op == CHECK_TREE_ALLREDUCE) {
        for (int span = 1; span < q; span *= 2) sent += n;
        return sent;
    }
    sent = n - shard_count(n, q, v);
    for (int span = 1; span < q; span *= 2) {  /* round i: span = 2^i */
        int lo = v & ~(span - 1);
        sent += shard_offset(n, q, lo + span) - shard_offset(n, q, lo);
    }
    return sent;
}

/* Elements this rank sends in the README's schedules, rank r of p, with
 * count(j) = shard_count(n, p, j):
 *   ring reduce-scatter  n - count(r)          every chunk but its own
 *   ring all-gather      n - count(r+1)        every chunk but the last received
 *   ring all-reduce      the sum of both: 2n - count(r) - count(r+1)
 *   binomial broadcast   n per child: ranks v + 2^j, 2^j below v's lowest set bit
 *   recursive doubling,  folded to q = 2^floor(log2 p), e = p - q: a rank from 2e
 *   halving-doubling     on is survivor v = r - e and sends survivor_sent; below
 *                        2e, even ranks send n (their fold), odd ones are
 *                        v = r / 2 and send survivor_sent + n (the result back)
 *   pairwise all-to-all  (p-1) n               one block to every other rank */
static size_t sent_elements(CheckedOp op, size_t n, int p, int r, int root) {
    size_t own = shard_count(n, p, r), next = shard_count(n, p, (r + 1) % p);
    switch (op) {
    case CHECK_REDUCE_SCATTER: return n - own;
    case CHECK_ALLGATHER: return n - next;
    case CHECK_ALLREDUCE: return 2 * n - own - next;
    case CHECK_BROADCAST: {
        int v = (r - root + p) % p, children = 0;
        for (int bit = 1; bit < p && !(v & bit); bit <<= 1) children += v + bit < p;
        return (size_t)children * n;
    }
    case CHECK_TREE_ALLREDUCE:
    case CHECK_HALVING_ALLREDUCE: {
        int q = 1;
        while (2 * q <= p) q *= 2;
        const int e = p - q;
        if (r >= 2 * e) return survivor_sent(op, n, q, r - e);
        return r % 2 ? survivor_sent(op, n, q, r / 2) + n : n;  /* + result back; fold */
    }
    case CHECK_ALLTOALL: return (size_t)(p - 1) * n;
    default: CHECK(0, "bad op %d", (int)op);
    }
}

/* Elements rank l of a node of k sends in the hierarchical all-reduce, its
 * across group being N ranks of which it is rank a, m = count(l) of n over k:
 *   reduce-scatter in the node   n - count(l)              (over k)
 *   all-reduce across the nodes  2m - count(a) - count(a+1)  (of m over N)
 *   all-gather in the node       n - count(l+1)            (over k) */
static size_t hierarchical_sent(size_t n, int k, int l, int N, int a) {
    const size_t m = shard_count(n, k, l);
    return n - m + 2 * m - shard_count(m, N, a) - shard_count(m, N, (a + 1) % N) + n -
           shard_count(n, k, (l + 1) % k);
}

static void run_reduce_scatter(const Case *k, const float *send, float *recv) {
    if (k->impl == IMPL_STUDENT) ring_reduce_scatter(k->c, send, recv, k->n);
    else comm_reduce_scatter(k->c, send, recv, k->n, COMM_FLOAT, COMM_SUM);
}
static void run_allgather(const Case *k, const float *send, float *recv) {
    if (k->impl == IMPL_STUDENT) ring_allgather(k->c, send, recv, k->n);
    else comm_allgather(k->c, send, recv, k->n, COMM_FLOAT);
}
static void run_alltoall(const Case *k, const float *send, float *recv) {
    if (k->impl == IMPL_STUDENT) pairwise_alltoall(k->c, send, recv, k->n);
    else comm_alltoall(k->c, send, recv, k->n, COMM_FLOAT);
}
static void run_allreduce(const Case *k, const float *send, float *recv) {
    if (k->impl == IMPL_LIBRARY) comm_allreduce(k->c, send, recv, k->n, COMM_FLOAT, COMM_SUM);
    else if (k->op == CHECK_TREE_ALLREDUCE) tree_allreduce(k->c, send, recv, k->n);
    else if (k->op == CHECK_HALVING_ALLREDUCE) halving_doubling_allreduce(k->c, send, recv, k->n);
    else if (k->op == CHECK_HIERARCHICAL_ALLREDUCE) hierarchical_allreduce(k->node, k->across, send, recv, k->n);
    else ring_allreduce(k->c, send, recv, k->n);
}

static void check_reduce_scatter(Case *k) {
    const int p = k->c->size, r = k->c->rank;
    const size_t n = k->n, own = shard_count(n, p, r), off = shard_offset(n, p, r);
    float *send = buffer(n), *want = buffer(n);
    fill_inputs(send, n, r, 0);
    fill_inputs(want, n, r, 0);  /* the input, with the own shard summed */
    for (size_t i = 0; i < own; i++) want[off + i] = sum_over_ranks(p, off + i);
    if (k->variant) {
        run_reduce_scatter(k, send, send + off);
        compare(k, "buf", send, want, n);
    } else {
        float *recv = buffer(own);
        run_reduce_scatter(k, send, recv);
        compare(k, "recv", recv, want + off, own);
        fill_inputs(want + off, own, r, off);
        compare(k, "send", send, want, n);
        mem_free(recv);
    }
    mem_free(send);
    mem_free(want);
}

/* all-gather: shard j holds rank j's inputs at its own indices */
static void check_allgather(Case *k) {
    const int p = k->c->size, r = k->c->rank;
    const size_t n = k->n, own = shard_count(n, p, r), off = shard_offset(n, p, r);
    float *recv = buffer(n), *want = buffer(n);
    for (int j = 0; j < p; j++)
        fill_inputs(want + shard_offset(n, p, j), shard_count(n, p, j), j, shard_offset(n, p, j));
    if (k->variant) {
        fill_inputs(recv + off, own, r, off);
        run_allgather(k, recv + off, recv);
    } else {
        float *send = buffer(own);
        fill_inputs(send, own, r, off);
        run_allgather(k, send, recv);
        compare(k, "send", send, want + off, own);
        mem_free(send);
    }
    compare(k, "recv", recv, want, n);
    mem_free(recv);
    mem_free(want);
}

/* All-reduce and all-to-all read the whole send buffer and write the whole
 * recv buffer; in place, recv is send. */
static void check_whole_buffer(Case *k, size_t total, const float *want,
                               void (*run)(const Case *, const float *, float *)) {
    const int r = k->c->rank;
    float *send = buffer(total);
    fill_inputs(send, total, r, 0);
    float *recv = k->variant ? send : buffer(total);
    run(k, send, recv);
    compare(k, k->variant ? "buf" : "recv", recv, want, total);
    if (!k->variant) {
        fill_inputs(recv, total, r, 0);  /* recv becomes the reference for send */
        compare(k, "send", send, recv, total);
        mem_free(recv);
    }
    mem_free(send);
}

static void check_allreduce(Case *k) {
    float *want = buffer(k->n);
    for (size_t i = 0; i < k->n; i++) want[i] = sum_over_ranks(k->c->size, i);
    check_whole_buffer(k, k->n, want, run_allreduce);
    mem_free(want);
}

static void check_broadcast(Case *k) {
    const int r = k->c->rank, root = k->variant ? k->c->size - 1 : 0;
    float *buf = buffer(k->n), *want = buffer(k->n);
    fill_inputs(buf, k->n, r, 0);  /* non-roots start with other data: it must be replaced */
    fill_inputs(want, k->n, root, 0);
    if (k->impl == IMPL_STUDENT) tree_broadcast(k->c, buf, k->n, root);
    else comm_broadcast(k->c, buf, k->n, COMM_FLOAT, root);
    compare(k, "buf", buf, want, k->n);
    mem_free(buf);
    mem_free(want);
}

/* all-to-all: rank r's send block j is its inputs j*m ..; it must arrive as
 * block r of rank j's recv */
static void check_alltoall(Case *k) {
    const int p = k->c->size, r = k->c->rank;
    const size_t m = k->n, total = m * (size_t)p;
    float *want = buffer(total);
    for (int j = 0; j < p; j++) fill_inputs(want + (size_t)j * m, m, j, (size_t)r * m);
    check_whole_buffer(k, total, want, run_alltoall);
    mem_free(want);
}

/* Bytes this rank sent in its groups' point-to-point calls */
static uint64_t bytes_sent(const Case *k) {
    const Comm *groups[3] = {k->c, k->node, k->across};
    uint64_t sent = 0;
    for (int g = 0; g < 3; g++)
        if (groups[g]) sent += comm_op_stats(groups[g], OP_SEND).bytes + comm_op_stats(groups[g], OP_SENDRECV).bytes;
    return sent;
}

static void run_case(Case *k) {
    comm_reset_stats(k->c);
    if (k->node) {
        comm_reset_stats(k->node);
        comm_reset_stats(k->across);
    }
    switch (k->op) {
    case CHECK_REDUCE_SCATTER: check_reduce_scatter(k); break;
    case CHECK_ALLGATHER: check_allgather(k); break;
    case CHECK_ALLREDUCE:
    case CHECK_TREE_ALLREDUCE:
    case CHECK_HALVING_ALLREDUCE:
    case CHECK_HIERARCHICAL_ALLREDUCE: check_allreduce(k); break;
    case CHECK_BROADCAST: check_broadcast(k); break;
    case CHECK_ALLTOALL: check_alltoall(k); break;
    default: CHECK(0, "bad op %d", (int)k->op);
    }
    if (k->impl != IMPL_STUDENT || k->error[0]) return;
    const int p = k->c->size, r = k->c->rank;
    const uint64_t sent = bytes_sent(k);
    const uint64_t want = (k->op == CHECK_HIERARCHICAL_ALLREDUCE
                               ? hierarchical_sent(k->n, k->node->size, k->node->rank,
                                                   k->across->size, k->across->rank)
                               : sent_elements(k->op, k->n, p, r, k->variant ? p - 1 : 0)) *
                          sizeof(float);
    if (sent != want) {
        snprintf(k->error, MESSAGE_MAX, "rank %d sent %llu bytes, the schedule sends %llu", r,
                 (unsigned long long)sent, (unsigned long long)want);
    } else if (k->op == CHECK_ALLREDUCE) {
        /* the ring's promise: 2(p-1)/p S per rank, to within two elements */
        double ideal = 2.0 * (p - 1) / p * (double)k->n * sizeof(float);
        if (fabs((double)sent - ideal) > 2 * sizeof(float))
            snprintf(k->error, MESSAGE_MAX, "rank %d sent %llu bytes, 2(p-1)/p S = %.1f", r,
                     (unsigned long long)sent, ideal);
    }
}

/* Run one case everywhere; rank 0 prints its line. Returns 1 if it failed. */
static int report_case(Case *k) {
    run_case(k);
    char line[MESSAGE_MAX + 2];
    snprintf(line, sizeof line, "%s%s", k->error, k->error[0] ? "\n" : "");
    char *errors = comm_gather_text(k->c, line);
    int failed = 0;
    if (k->c->rank == 0) {
        const char *variant = k->op == CHECK_BROADCAST ? (k->variant ? "root p-1" : "root 0")
                              : k->variant ? "in place" : "out of place";
        failed = errors[0] != '\0';
        if (failed) errors[strcspn(errors, "\n")] = '\0';
        printf("%-17s n=%-7zu %-13s %s%s%s\n", g_op_names[k->op], k->n, variant,
               failed ? "FAIL" : "ok", failed ? ": " : "", errors);
        fflush(stdout);
        free(errors);
    }
    MPI_CHECK(MPI_Bcast(&failed, 1, MPI_INT, 0, k->c->mpi));
    return failed;
}

/* The command line. */
typedef struct {
    const char *op_name;  /* all, or one op's name */
    Impl impl;
    int ranks_per_node;  /* 0: the machine's nodes */
} Options;

static void print_usage(void) {
    printf("usage: mpirun -np P %s [--op NAME] [--impl student|library] [--ranks-per-node K]\n"
           "       [--comm-timeout S]\n"
           "Checks lab 01's collectives bit for bit on P ranks.\n",
           g_program_name);
    char names[1024] = "NAME: all (default: the core's ops) or one op:";
    for (int op = 0; op < CHECK_NUM_OPS; op++)
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s %s%s", op ? "," : "",
                 g_op_names[op], is_extension(op) ? " (an extension: never in all)" : "");
    cli_print_paragraph(names);
    printf("--impl library checks comm.h's collectives instead of collectives.c.\n"
           "--ranks-per-node K: hierarchical_allreduce's nodes are K consecutive ranks\n"
           "each (default: the machine's nodes, the ranks that share memory).\n"
           "--comm-timeout S ends the job when a communication waits over S seconds\n"
           "(default 300; 0 = never): a deadlock is reported instead of hanging.\n"
           "Exit status: 0 all pass, 1 a case failed, 3 a lab function is not implemented,\n"
           "4 a communication timed out.\n");
}

/* The options into o; returns 1 for --help (rank 0 printed it), leaving the
 * options after it unread. */
static int parse_options(int argc, char **argv, int rank, Options *o) {
    static const struct option opts[] = {{"op", required_argument, 0, 'o'},
                                         {"impl", required_argument, 0, 'i'},
                                         {"comm-timeout", required_argument, 0, 'T'},
                                         {"ranks-per-node", required_argument, 0, 'k'},
                                         {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    *o = (Options){.op_name = "all", .impl = IMPL_STUDENT};
    opterr = 0;
    int ch;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (ch) {
        case 'o': o->op_name = optarg; break;
        case 'i':
            if (strcmp(optarg, "student") == 0) o->impl = IMPL_STUDENT;
            else if (strcmp(optarg, "library") == 0) o->impl = IMPL_LIBRARY;
            else USER_ERROR("--impl expects student or library, got '%s'", optarg);
            break;
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

/* The op --op names; -1 for all. */
static int chosen_op(const char *op_name) {
    for (int op = 0; op < CHECK_NUM_OPS; op++)
        if (strcmp(op_name, g_op_names[op]) == 0) return op;
    if (strcmp(op_name, "all") != 0) USER_ERROR("unknown --op '%s'; see --help", op_name);
    return -1;
}

/* Every case of the chosen op (-1: of the core's ops), on the groups and
 * implementation of `groups`; returns the failures, and counts the cases. */
static int run_cases(const Case *groups, int chosen, int *cases) {
    const int p = groups->c->size;
    const size_t counts[] = {0, 1, (size_t)p - 1, (size_t)p, (size_t)p + 1, 1000, 4099, LARGE_COUNT};
    const int num_counts = (int)(sizeof counts / sizeof counts[0]);
    int failures = 0;
    for (int op = 0; op < CHECK_NUM_OPS; op++) {
        if (chosen >= 0 ? op != chosen : is_extension(op)) continue;
        for (int i = 0; i < num_counts; i++) {
            int repeated = 0;  /* p - 1, p, p + 1 are 0, 1, 2 on one rank */
            for (int j = 0; j < i; j++) repeated |= counts[j] == counts[i];
            for (int variant = 0; variant < 2 && !repeated; variant++) {
                Case k = *groups;
                k.op = (CheckedOp)op, k.n = counts[i], k.variant = variant;
                failures += report_case(&k);
                (*cases)++;
            }
        }
    }
    return failures;
}

int main(int argc, char **argv) {
    program_set_name(argv[0]);
    Comm *world = comm_init(&argc, &argv);
    Options o;
    if (parse_options(argc, argv, world->rank, &o)) {
        comm_finalize();
        return 0;
    }
    const int chosen = chosen_op(o.op_name);
    Comm *node = NULL, *across = NULL;
    if (chosen == CHECK_HIERARCHICAL_ALLREDUCE) mesh_node_groups(world, o.ranks_per_node, &node, &across);
    else if (o.ranks_per_node) USER_ERROR("--ranks-per-node is for --op hierarchical_allreduce only");

    const int p = world->size;
    if (world->rank == 0) {
        printf("check_collectives: %s implementation on %d rank%s",
               o.impl == IMPL_STUDENT ? "student" : "library", p, p == 1 ? "" : "s");
        if (node) printf(", %d node%s of %d", across->size, across->size == 1 ? "" : "s", node->size);
        printf("\n");
    }
    int cases = 0;
    const Case groups = {.c = world, .node = node, .across = across, .impl = o.impl};
    const int failures = run_cases(&groups, chosen, &cases);
    if (world->rank == 0) {
        if (failures) printf("check_collectives: FAILED %d of %d cases\n", failures, cases);
        else printf("check_collectives: all %d cases pass\n", cases);
    }
    comm_finalize();
    return failures ? 1 : 0;
}
