#include "mesh.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"

const char *const MESH_DIM_NAMES[MESH_DIMS] = {"tp", "cp", "dp", "pp"};

int mesh_order_parse(const char *order, MeshDim out[MESH_DIMS], char *why, size_t n) {
    if (!order) order = "tp-cp-dp-pp";
    int seen = 0, k = 0;
    for (const char *p = order; k <= MESH_DIMS; k++) {
        int dim = -1;
        for (int d = 0; d < MESH_DIMS; d++)
            if (strncmp(p, MESH_DIM_NAMES[d], 2) == 0) dim = d;
        if (k == MESH_DIMS || dim < 0 || (seen >> dim & 1)) break;
        seen |= 1 << dim;
        out[k] = (MeshDim)dim;
        p += 2;
        if (k == MESH_DIMS - 1 && *p == '\0') return 0;
        if (*p != '-') break;
        p++;
    }
    snprintf(why, n, "mesh order '%s': expected the four names tp, cp, dp and pp, each once, "
             "joined by '-' innermost first (Megatron-LM's: tp-cp-dp-pp)", order);
    return -1;
}

static int degree_of(const MeshDegrees *d, MeshDim k) {
    const int deg[MESH_DIMS] = {d->tp, d->cp, d->dp, d->pp};
    return deg[k];
}

MeshDegrees mesh_resolve_degrees(MeshDegrees want, int world_size) {
    MeshDegrees d = want;
    MeshDim order[MESH_DIMS];
    char why[160];
    if (mesh_order_parse(d.order, order, why, sizeof why)) USER_ERROR("%s", why);
    if (d.tp < 1 || d.cp < 1 || d.pp < 1 || d.ep < 1 || d.dp < 0)
        USER_ERROR("parallel degrees must be >= 1 (tp %d, cp %d, dp %d, pp %d, ep %d)", d.tp, d.cp,
                   d.dp, d.pp, d.ep);
    long fixed = (long)d.tp * d.cp * d.pp;
    if (d.dp == 0) {
        if (world_size % fixed != 0)
            USER_ERROR("tp %d x cp %d x pp %d = %ld does not divide the world size %d", d.tp, d.cp,
                       d.pp, fixed, world_size);
        d.dp = (int)(world_size / fixed);
    }
    if (fixed * d.dp != world_size)
        USER_ERROR("tp %d x cp %d x dp %d x pp %d = %ld ranks, but the world has %d", d.tp, d.cp,
                   d.dp, d.pp, fixed * d.dp, world_size);
    if (d.dp % d.ep != 0)
        USER_ERROR("ep %d does not divide dp %d (expert parallelism splits the data-parallel group)",
                   d.ep, d.dp);
    return d;
}

/* the order of a resolved mesh's degrees (checked by mesh_resolve_degrees) */
static void order_of(const MeshDegrees *d, MeshDim order[MESH_DIMS]) {
    char why[160];
    CHECK(mesh_order_parse(d->order, order, why, sizeof why) == 0, "%s", why);
}

/* rank -> coordinates (x[MESH_TP] ...) and back, in a parsed order:
 * digit by digit, the innermost dimension first */
static void coords_in(const MeshDegrees *d, const MeshDim order[MESH_DIMS], int rank,
                      int x[MESH_DIMS]) {
    for (int i = 0; i < MESH_DIMS; i++) {
        const int k = degree_of(d, order[i]);
        x[order[i]] = rank % k;
        rank /= k;
    }
}

static int rank_in(const MeshDegrees *d, const MeshDim order[MESH_DIMS], const int x[MESH_DIMS]) {
    int rank = 0;
    for (int i = MESH_DIMS - 1; i >= 0; i--) rank = rank * degree_of(d, order[i]) + x[order[i]];
    return rank;
}

void mesh_coords(const MeshDegrees *deg, int rank, int *tp_rank, int *cp_rank, int *dp_rank,
                 int *pp_rank) {
    MeshDim order[MESH_DIMS];
    order_of(deg, order);
    int x[MESH_DIMS];
    coords_in(deg, order, rank, x);
    *tp_rank = x[MESH_TP];
    *cp_rank = x[MESH_CP];
    *dp_rank = x[MESH_DP];
    *pp_rank = x[MESH_PP];
}

int mesh_rank_of(const MeshDegrees *deg, int tp_rank, int cp_rank, int dp_rank, int pp_rank) {
    MeshDim order[MESH_DIMS];
    order_of(deg, order);
    const int x[MESH_DIMS] = {tp_rank, cp_rank, dp_rank, pp_rank};
    return rank_in(deg, order, x);
}

int mesh_nodes(Comm *world, int ranks_per_node, int *node) {
    if (ranks_per_node > 0) {
        for (int r = 0; r < world->size; r++) node[r] = r / ranks_per_node;
        return ranks_per_node < world->size ? ranks_per_node : world->size;
    }
    /* each node's first world rank, known to every rank */
    Comm *here = comm_split_node(world, "node");
    int *ranks = malloc((size_t)here->size * sizeof(int));
    CHECK(ranks, "out of memory");
    comm_allgather_untraced(here, &world->rank, ranks, (size_t)here->size, COMM_INT32);
    int first = ranks[0];
    for (int i = 1; i < here->size; i++) first = ranks[i] < first ? ranks[i] : first;
    free(ranks);
    comm_free(here);
    comm_allgather_untraced(world, &first, node, (size_t)world->size, COMM_INT32);
    /* number the nodes 0, 1, ... in the order of their first ranks */
    int *number = malloc((size_t)world->size * sizeof(int));
    CHECK(number, "out of memory");
    for (int r = 0, count = 0; r < world->size; r++)
        if (node[r] == r) number[r] = count++;
    int on_node_0 = 0;
    for (int r = 0; r < world->size; r++) {
        node[r] = number[node[r]];
        on_node_0 += node[r] == 0;
    }
    free(number);
    return on_node_0;
}

void mesh_node_groups(Comm *world, int ranks_per_node, Comm **node, Comm **across) {
    const int p = world->size, me = world->rank;
    int *node_of = malloc((size_t)p * sizeof(int)), *ranks_on = calloc((size_t)p, sizeof(int));
    CHECK(node_of && ranks_on, "out of memory");
    if (ranks_per_node > 0 && p % ranks_per_node != 0)
        USER_ERROR("--ranks-per-node %d does not divide the %d ranks", ranks_per_node, p);
    mesh_nodes(world, ranks_per_node, node_of);
    int local = 0, nodes = 0;
    for (int r = 0; r < p; r++) {
        local += r < me && node_of[r] == node_of[me];
        nodes += ranks_on[node_of[r]]++ == 0;
    }
    for (int i = 1; i < nodes; i++)
        if (ranks_on[i] != ranks_on[0])
            USER_ERROR("node %d runs %d ranks and node 0 runs %d: a hierarchical collective "
                       "needs the same number on every node", i, ranks_on[i], ranks_on[0]);
    const int this_node = node_of[me];
    free(node_of);
    free(ranks_on);
    *node = comm_split(world, this_node, me, "node");
    *across = comm_split(world, local, me, "across");
}

static int compare_keys(const void *a, const void *b) {
    const unsigned long long x = *(const unsigned long long *)a, y = *(const unsigned long long *)b;
    return (x > y) - (x < y);
}

int mesh_group_span(const MeshDegrees *d, unsigned dims, const int *node) {
    MeshDim order[MESH_DIMS];
    order_of(d, order);  /* once: the loop below runs world times */
    const int world = d->tp * d->cp * d->dp * d->pp;
    /* every rank as (its group, its node): a group named by its member
     * whose coordinates along dims are 0; sorted, each group's distinct
     * nodes come together */
    unsigned long long *key = malloc((size_t)world * sizeof *key);
    CHECK(key, "out of memory");
    for (int r = 0; r < world; r++) {
        int x[MESH_DIMS];
        coords_in(d, order, r, x);
        for (int k = 0; k < MESH_DIMS; k++)
            if (dims & MESH_BIT(k)) x[k] = 0;
        key[r] = (unsigned long long)rank_in(d, order, x) * (unsigned long long)world +
                 (unsigned long long)node[r];
    }
    qsort(key, (size_t)world, sizeof *key, compare_keys);
    int span = 0, nodes = 0;
    for (int i = 0; i < world; i++) {
        if (i > 0 && key[i] == key[i - 1]) continue;          /* a node seen already */
        if (i == 0 || key[i] / world != key[i - 1] / world) nodes = 0;  /* a new group */
        if (++nodes > span) span = nodes;
    }
    free(key);
    return span;
}

void mesh_group_spans(const MeshDegrees *d, const int *node, int spans[MESH_DIMS]) {
    for (int k = 0; k < MESH_DIMS; k++) spans[k] = mesh_group_span(d, MESH_BIT(k), node);
}

Mesh *mesh_create(Comm *world, MeshDegrees deg) {
    Mesh *m = calloc(1, sizeof *m);
    CHECK(m, "out of memory for the mesh");
    m->deg = mesh_resolve_degrees(deg, world->size);
    const MeshDegrees *d = &m->deg;
    int t, c, dp, p;
    mesh_coords(d, world->rank, &t, &c, &dp, &p);
    m->world = world;
    m->tp_rank = t;
    m->cp_rank = c;
    m->dp_rank = dp;
    m->pp_rank = p;
    m->ep_rank = dp % d->ep;
    /* on GPUs, the world first: its groups then get NCCL communicators of
     * their own when each rank has its own GPU (comm_attach_gpus) */
    if (device_current() == DEVICE_CUDA) comm_attach_gpus(world);
    /* color = the rank with this group's coordinate set to 0 (unique per
     * group); key = the coordinate, so group rank = coordinate */
    m->tp_group = comm_split(world, mesh_rank_of(d, 0, c, dp, p), t, "tp");
    m->cp_group = comm_split(world, mesh_rank_of(d, t, 0, dp, p), c, "cp");
    m->dp_group = comm_split(world, mesh_rank_of(d, t, c, 0, p), dp, "dp");
    m->pp_group = comm_split(world, mesh_rank_of(d, t, c, dp, 0), p, "pp");
    /* ep: blocks of ep consecutive dp ranks; edp: same ep_rank across blocks */
    int block = dp / d->ep;
    m->ep_group = comm_split(world, mesh_rank_of(d, t, c, block * d->ep, p), m->ep_rank, "ep");
    m->edp_group = comm_split(world, mesh_rank_of(d, t, c, m->ep_rank, p), block, "edp");
    m->dcp_group = comm_split(world, mesh_rank_of(d, t, 0, 0, p), c + d->cp * dp, "dcp");
    return m;
}

Comm *mesh_pipeline_ends(const Mesh *m) {
    const MeshDegrees *d = &m->deg;
    const int end = m->pp_rank == 0 || m->pp_rank == d->pp - 1;
    /* ends: their pipeline's first rank; the others a color of their own */
    const int color = end ? mesh_rank_of(d, m->tp_rank, m->cp_rank, m->dp_rank, 0)
                          : m->world->size + m->world->rank;
    Comm *g = comm_split(m->world, color, m->world->rank, "embed");
    if (end && d->pp > 1) return g;
    comm_free(g);
    return NULL;
}

Comm *mesh_pipeline_mirrors(const Mesh *m) {
    const MeshDegrees *d = &m->deg;
    CHECK(d->pp >= 2 && d->pp % 2 == 0, "DualPipe's pairs need an even pp (got %d)", d->pp);
    const int low = m->pp_rank < d->pp - 1 - m->pp_rank ? m->pp_rank : d->pp - 1 - m->pp_rank;
    /* a pair's color: its lower rank's world rank */
    return comm_split(m->world, mesh_rank_of(d, m->tp_rank, m->cp_rank, m->dp_rank, low),
                      m->world->rank, "dual");
}

void mesh_free(Mesh *m) {
    comm_free(m->tp_group);
    comm_free(m->cp_group);
    comm_free(m->dp_group);
    comm_free(m->pp_group);
    comm_free(m->ep_group);
    comm_free(m->edp_group);
    comm_free(m->dcp_group);
    free(m);
}
