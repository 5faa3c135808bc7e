/* Lab 10: the seams of the composed trainer. See composed.h, and
 * labs/10_composed/README.md for what each decision costs. */
#include "composed.h"

#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "kernels.h"

const char *composed_mesh_order(const MeshDegrees *d) {
    (void)d;
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

void composed_groups(const Mesh *m, ComposedGroups *g) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

void composed_groups_free(ComposedGroups *g) {
    if (g->loss) comm_free(g->loss);
    *g = (ComposedGroups){0};
}

/* The second extension (hybrid ZeRO-1, --dp-shard) adds one call to this
 * function: composed.h says what it must leave unchanged. */
double composed_zero1_finish_grads(ComposedZero1 *c, int micro_batches) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

/* ---- the extension --------------------------------------------------------- */

void composed_best_mesh_order(const MeshDegrees *d, int ranks_per_node, char *order, size_t n) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}
