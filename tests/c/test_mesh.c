/* The process mesh against its documented rank order, computed here
 * independently: for the degrees on the command line, each rank checks its
 * coordinates and the members of every group, in coordinate order.
 *   mpirun -np W test_mesh [--tp T] [--cp C] [--dp D] [--pp P] [--ep E] [--order O] */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "mesh.h"
#include "unit.h"

/* World ranks of group g's members, by brute force over all ranks: r is in
 * my group when it agrees with me on every coordinate except `dim`. */
enum { DIM_TP, DIM_CP, DIM_DP, DIM_PP };

static void coords_of(const MeshDegrees *d, int r, int x[4]) {
    /* default order: rank = tp + T (cp + C (dp + D pp)); another order
     * permutes the digits: dimension k's coordinate is (r / stride_k) %
     * degree_k, its stride the product of the degrees inside it */
    const int deg[4] = {d->tp, d->cp, d->dp, d->pp};
    const char *order = d->order ? d->order : "tp-cp-dp-pp";
    static const char names[4][3] = {"tp", "cp", "dp", "pp"};
    int stride = 1;
    for (int k = 0; k < 4; k++) x[k] = 0;
    for (int i = 0; i < 4; i++)
        for (int k = 0; k < 4; k++)
            if (strncmp(order + 3 * i, names[k], 2) == 0) {
                x[k] = (r / stride) % deg[k];
                stride *= deg[k];
            }
}

/* Check that group c holds exactly the ranks `expected(r)` of the world, ranked
 * by `order(r)`. */
typedef int (*Member)(const MeshDegrees *d, int me, int r, int *order);

static int same_except(const MeshDegrees *d, int me, int r, int dim, int *order) {
    int a[4], b[4];
    coords_of(d, me, a);
    coords_of(d, r, b);
    for (int k = 0; k < 4; k++)
        if (k != dim && a[k] != b[k]) return 0;
    *order = b[dim];
    return 1;
}
static int tp_member(const MeshDegrees *d, int me, int r, int *o) { return same_except(d, me, r, DIM_TP, o); }
static int cp_member(const MeshDegrees *d, int me, int r, int *o) { return same_except(d, me, r, DIM_CP, o); }
static int dp_member(const MeshDegrees *d, int me, int r, int *o) { return same_except(d, me, r, DIM_DP, o); }
static int pp_member(const MeshDegrees *d, int me, int r, int *o) { return same_except(d, me, r, DIM_PP, o); }
/* ep: same (tp, cp, pp) and the same block of ep consecutive dp ranks */
static int ep_member(const MeshDegrees *d, int me, int r, int *o) {
    int a[4], b[4];
    coords_of(d, me, a);
    coords_of(d, r, b);
    *o = b[DIM_DP] % d->ep;
    return same_except(d, me, r, DIM_DP, &(int){0}) && a[DIM_DP] / d->ep == b[DIM_DP] / d->ep;
}
/* edp: same (tp, cp, pp) and the same position inside its ep block */
static int edp_member(const MeshDegrees *d, int me, int r, int *o) {
    int a[4], b[4];
    coords_of(d, me, a);
    coords_of(d, r, b);
    *o = b[DIM_DP] / d->ep;
    return same_except(d, me, r, DIM_DP, &(int){0}) && a[DIM_DP] % d->ep == b[DIM_DP] % d->ep;
}

static void check_group(const Mesh *m, Comm *g, Member member, const char *name) {
    Comm *w = m->world;
    int *expected = malloc((size_t)w->size * sizeof(int));
    int *got = malloc((size_t)w->size * sizeof(int));
    int n = 0, order;
    for (int r = 0; r < w->size; r++) expected[r] = -1;
    for (int r = 0; r < w->size; r++)
        if (member(&m->deg, w->rank, r, &order)) {
            expected[order] = r;
            n++;
        }
    EXPECT(g->size == n, "rank %d: %s group has %d members, expected %d", w->rank, name, g->size, n);
    /* who is in my group, in group-rank order */
    int me = w->rank;
    MPI_CHECK(MPI_Allgather(&me, 1, MPI_INT, got, 1, MPI_INT, g->mpi));
    for (int i = 0; i < n && i < g->size; i++)
        EXPECT(got[i] == expected[i], "rank %d: %s group member %d is world rank %d, expected %d",
               w->rank, name, i, got[i], expected[i]);
    free(expected);
    free(got);
}

int main(int argc, char **argv) {
    program_set_name(argv[0]);
    Comm *world = comm_init(&argc, &argv);
    MeshDegrees want = {.tp = 1, .cp = 1, .dp = 0, .pp = 1, .ep = 1};
    static const struct option opts[] = {{"tp", 1, 0, 't'}, {"cp", 1, 0, 'c'}, {"dp", 1, 0, 'd'},
                                         {"pp", 1, 0, 'p'}, {"ep", 1, 0, 'e'},
                                         {"order", 1, 0, 'o'}, {0, 0, 0, 0}};
    opterr = 0;
    int ch, idx = 0;
    while ((ch = getopt_long(argc, argv, "", opts, &idx)) != -1) {
        /* degrees may be 0 or negative here: mesh_resolve_degrees must say so */
        char flag[8];
        snprintf(flag, sizeof flag, "--%s", ch == '?' ? "?" : opts[idx].name);
        if (ch == 'o') {
            want.order = optarg;
            continue;
        }
        long v = ch != '?' && optarg ? cli_int(flag, optarg, -1000, 1000) : 0;
        switch (ch) {
        case 't': want.tp = (int)v; break;
        case 'c': want.cp = (int)v; break;
        case 'd': want.dp = (int)v; break;
        case 'p': want.pp = (int)v; break;
        case 'e': want.ep = (int)v; break;
        default: cli_bad_option(argv[optind - 1], "expected --tp --cp --dp --pp --ep --order");
        }
    }
    Mesh *m = mesh_create(world, want);
    const MeshDegrees *d = &m->deg;
    int x[4];
    coords_of(d, world->rank, x);
    EXPECT(m->tp_rank == x[DIM_TP] && m->cp_rank == x[DIM_CP] && m->dp_rank == x[DIM_DP] &&
               m->pp_rank == x[DIM_PP] && m->ep_rank == x[DIM_DP] % d->ep,
           "rank %d: coordinates (tp %d, cp %d, dp %d, pp %d)", world->rank, m->tp_rank, m->cp_rank,
           m->dp_rank, m->pp_rank);
    EXPECT(mesh_rank_of(d, m->tp_rank, m->cp_rank, m->dp_rank, m->pp_rank) == world->rank,
           "mesh_rank_of does not invert mesh_coords at rank %d", world->rank);
    check_group(m, m->tp_group, tp_member, "tp");
    check_group(m, m->cp_group, cp_member, "cp");
    check_group(m, m->dp_group, dp_member, "dp");
    check_group(m, m->pp_group, pp_member, "pp");
    check_group(m, m->ep_group, ep_member, "ep");
    check_group(m, m->edp_group, edp_member, "edp");
    if (world->rank == 0)
        printf("test_mesh: world %d = tp %d x cp %d x dp %d x pp %d, ep %d, order %s\n",
               world->size, d->tp, d->cp, d->dp, d->pp, d->ep, d->order ? d->order : "tp-cp-dp-pp");
    /* every rank's failures count: the job fails if any rank failed */
    int failures = g_unit_failures, total = 0;
    MPI_CHECK(MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, world->mpi));
    g_unit_failures = total;
    int rc = world->rank == 0 ? unit_report("test_mesh") : (total ? 1 : 0);
    mesh_free(m);
    comm_finalize();
    return rc;
}
