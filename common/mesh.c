#include "mesh.h"

#include <stdlib.h>

MeshDegrees mesh_resolve_degrees(MeshDegrees want, int world_size) {
    MeshDegrees d = want;
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

void mesh_coords(const MeshDegrees *deg, int rank, int *tp_rank, int *cp_rank, int *dp_rank,
                 int *pp_rank) {
    *tp_rank = rank % deg->tp;
    rank /= deg->tp;
    *cp_rank = rank % deg->cp;
    rank /= deg->cp;
    *dp_rank = rank % deg->dp;
    *pp_rank = rank / deg->dp;
}

int mesh_rank_of(const MeshDegrees *deg, int tp_rank, int cp_rank, int dp_rank, int pp_rank) {
    return tp_rank + deg->tp * (cp_rank + deg->cp * (dp_rank + deg->dp * pp_rank));
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
