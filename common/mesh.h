/* mesh.h: the process mesh, which rank does what in a composed layout.
 *
 * The world of W ranks is a 4-D grid of degrees tp x cp x dp x pp
 * (W = tp * cp * dp * pp). Rank order, innermost first, as Megatron-LM:
 *
 *     rank = tp_rank + tp * (cp_rank + cp * (dp_rank + dp * pp_rank))
 *
 * TP is innermost because it talks most (every layer, forward and backward),
 * so its ranks should be neighbours (same node, fastest links); PP is
 * outermost because it sends only activations between stages. Another
 * order (MeshDegrees.order, e.g. "dp-tp-cp-pp") permutes the digits: the
 * groups below are the same sets of coordinates, on other world ranks.
 *
 * Groups (each a Comm, ordered by the coordinate along its dimension):
 *   tp: same (cp, dp, pp)      cp: same (tp, dp, pp)
 *   dp: same (tp, cp, pp)      pp: same (tp, cp, dp)
 *   ep: expert parallelism splits each DP group into dp / ep blocks of ep
 *       consecutive DP ranks: ep_rank = dp_rank % ep. Those ep ranks hold
 *       different experts; the ranks that hold the same experts (same ep_rank
 *       in the DP group) form edp, the group that averages expert gradients.
 *   dcp: same (tp, pp): the dp x cp ranks that hold the same parameters
 *       under context parallelism, the group that averages their gradients
 *       (ordered by cp_rank + cp dp_rank).
 * Example, W = 8, tp = 2, dp = 2, pp = 2: tp groups {0,1} {2,3} {4,5} {6,7},
 * dp groups {0,2} {1,3} {4,6} {5,7}, pp groups {0,4} {1,5} {2,6} {3,7}.
 */
#ifndef MESH_H
#define MESH_H

#include "comm.h"

typedef struct {
    int tp, cp, dp, pp, ep;   /* degrees; 0 in mesh_parse_degrees = "derive dp" */
    /* the dimensions' order in the rank, innermost first, as "tp-cp-dp-pp"
     * (a permutation of the four names); NULL: that one, Megatron-LM's */
    const char *order;
} MeshDegrees;

/* The dimensions, in Megatron-LM's order */
typedef enum { MESH_TP, MESH_CP, MESH_DP, MESH_PP, MESH_DIMS } MeshDim;
extern const char *const MESH_DIM_NAMES[MESH_DIMS];  /* "tp", "cp", "dp", "pp" */

/* Parse an order ("tp-cp-dp-pp"; NULL: that one) into out, innermost
 * first: 0, or -1 with why (one line) when it is not a permutation of the
 * four names. */
int mesh_order_parse(const char *order, MeshDim out[MESH_DIMS], char *why, size_t n);

typedef struct {
    MeshDegrees deg;
    int tp_rank, cp_rank, dp_rank, pp_rank, ep_rank;
    Comm *world, *tp_group, *cp_group, *dp_group, *pp_group, *ep_group, *edp_group, *dcp_group;
} Mesh;

/* Check the degrees against the world size; dp = 0 means world / (tp cp pp).
 * Every degree >= 1, their product = world, ep divides dp, the order a
 * permutation of the four names. On failure, rank 0
 * prints one clear error and every rank exits with status 2 (a user error). */
MeshDegrees mesh_resolve_degrees(MeshDegrees want, int world_size);

/* Build the groups (collective over the world). */
Mesh *mesh_create(Comm *world, MeshDegrees deg);
void mesh_free(Mesh *m);

/* The tied embedding's group (lab 06): the first and the last stage of
 * this rank's pipeline (the ranks of its tp, cp and dp coordinates), which
 * sum wte's two gradients. Collective over the world; NULL on a rank that
 * is neither end, and at pp 1 (both ends are one rank). comm_free after. */
Comm *mesh_pipeline_ends(const Mesh *m);
/* DualPipe's pairs: pipeline ranks r and pp - 1 - r of this rank's
 * pipeline (same tp, cp and dp coordinates), which hold the same two
 * stages and sum their gradients; pp even, >= 2. Collective over the
 * world. comm_free after. */
Comm *mesh_pipeline_mirrors(const Mesh *m);

/* Placement: which node each world rank runs on (node[world size]; every
 * rank gets all). ranks_per_node > 0 simulates nodes of that many
 * consecutive ranks on one machine; 0 takes the machine's (ranks that
 * share memory, comm_split_node), nodes numbered by their first rank.
 * Collective over the world, kept out of comm.csv. Returns how many
 * ranks node 0 holds (the node size, when the nodes are alike). */
int mesh_nodes(Comm *world, int ranks_per_node, int *node);

/* The two groups of a hierarchical collective (lab 01's extension), nodes
 * placed as mesh_nodes does: *node holds the ranks of this rank's node
 * ("node", in world order, so its rank is the local rank l) and *across
 * the ranks of local rank l on every node ("across", one per node, in node
 * order). Every node must hold the same number of ranks, or the ranks
 * would not pair up across nodes: a user error otherwise, on every rank.
 * Collective over the world; comm_free both after. */
void mesh_node_groups(Comm *world, int ranks_per_node, Comm **node, Comm **across);

/* A set of the mesh's dimensions, one bit each: lab 10's gradients
 * group is MESH_BIT(MESH_DP) | MESH_BIT(MESH_CP). */
#define MESH_BIT(k) (1u << (k))

/* The most nodes one group spanning the dimensions `dims` covers (a group:
 * the ranks whose coordinates agree outside dims), from every rank's node
 * (node[world size]): a pure function of the degrees, their order
 * included. A group on one node runs on the node's fast links; one
 * spanning more, on the slow links between nodes. */
int mesh_group_span(const MeshDegrees *d, unsigned dims, const int *node);

/* mesh_group_span of each dimension alone: spans[MESH_TP] ... spans[MESH_PP] */
void mesh_group_spans(const MeshDegrees *d, const int *node, int spans[MESH_DIMS]);

/* Coordinates of a world rank, and back (pure functions of the degrees). */
void mesh_coords(const MeshDegrees *deg, int rank, int *tp_rank, int *cp_rank,
                 int *dp_rank, int *pp_rank);
int mesh_rank_of(const MeshDegrees *deg, int tp_rank, int cp_rank, int dp_rank, int pp_rank);

#endif
