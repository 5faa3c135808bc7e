/* check_mesh_order: lab 10's extension, composed_best_mesh_order, checked
 * alone against a search of its own, without MPI. For each layout and node
 * size below, the answer must be an order of the four dimensions whose
 * groups span the fewest nodes, compared busiest dimension first (TP's
 * span, then CP's, DP's, PP's: mesh_group_spans), and among equals the
 * first in lexicographic order of the dimensions' indices (tp-cp-dp-pp
 * first). Prints one line per layout and "check_mesh_order: ok", exit 0;
 * or the first failure, exit 1. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "composed.h"

typedef struct {
    int tp, cp, dp, pp, per_node;
} OrderCase;

/* Megatron-LM's order wins on nodes of a power of two; on nodes of 6
 * (Summit's), or degrees that do not divide the node, it often does not */
static const OrderCase g_cases[] = {
    {2, 1, 2, 2, 4}, {2, 2, 2, 1, 4}, {8, 1, 4, 4, 8}, {2, 2, 3, 1, 6},  {2, 1, 3, 2, 6},
    {3, 2, 2, 1, 4}, {2, 3, 2, 2, 6}, {4, 1, 2, 2, 2}, {1, 2, 3, 2, 6},  {2, 2, 2, 2, 1},
    {1, 1, 6, 2, 4}, {3, 1, 1, 4, 6}, {2, 2, 1, 3, 6}, {4, 2, 3, 1, 12}, {1, 1, 1, 1, 1},
};

static int spans_of(const MeshDegrees *d, const char *order, const int *node, int spans[MESH_DIMS]) {
    MeshDim parsed[MESH_DIMS];
    char why[200];
    if (mesh_order_parse(order, parsed, why, sizeof why)) return -1;
    MeshDegrees x = *d;
    x.order = order;
    mesh_group_spans(&x, node, spans);
    return 0;
}

/* compare spans busiest first: < 0 when a is better */
static int compare_spans(const int a[MESH_DIMS], const int b[MESH_DIMS]) {
    for (int k = 0; k < MESH_DIMS; k++)
        if (a[k] != b[k]) return a[k] - b[k];
    return 0;
}

/* the expected order: every permutation by its index digits, in increasing
 * lexicographic order, keeping the first of the best */
static void expected_order(const MeshDegrees *d, const int *node, char *out, size_t n,
                           int best[MESH_DIMS]) {
    int found = 0;
    for (int code = 0; code < 256; code++) {
        int p[MESH_DIMS], used = 0, ok = 1;
        for (int i = 0; i < MESH_DIMS; i++) {
            p[i] = (code >> (2 * (MESH_DIMS - 1 - i))) & 3;
            ok &= !(used >> p[i] & 1);
            used |= 1 << p[i];
        }
        if (!ok) continue;
        char name[16];
        snprintf(name, sizeof name, "%s-%s-%s-%s", MESH_DIM_NAMES[p[0]], MESH_DIM_NAMES[p[1]],
                 MESH_DIM_NAMES[p[2]], MESH_DIM_NAMES[p[3]]);
        int spans[MESH_DIMS];
        CHECK(spans_of(d, name, node, spans) == 0, "the checker's own order %s", name);
        if (!found || compare_spans(spans, best) < 0) {
            found = 1;
            memcpy(best, spans, sizeof spans);
            snprintf(out, n, "%s", name);
        }
    }
}

int main(int argc, char **argv) {
    (void)argc;
    program_set_name(argv[0]);
    for (size_t i = 0; i < sizeof g_cases / sizeof g_cases[0]; i++) {
        const OrderCase *c = &g_cases[i];
        const MeshDegrees d = {.tp = c->tp, .cp = c->cp, .dp = c->dp, .pp = c->pp, .ep = 1};
        const int world = c->tp * c->cp * c->dp * c->pp;
        int *node = malloc((size_t)world * sizeof(int));
        CHECK(node, "out of memory");
        for (int r = 0; r < world; r++) node[r] = r / c->per_node;
        char want[32], got[32] = "";
        int best[MESH_DIMS], spans[MESH_DIMS];
        expected_order(&d, node, want, sizeof want, best);
        composed_best_mesh_order(&d, c->per_node, got, sizeof got);
        printf("tp %d x cp %d x dp %d x pp %d on nodes of %d: expected %s (spans %d %d %d %d), "
               "got %s", c->tp, c->cp, c->dp, c->pp, c->per_node, want, best[0], best[1], best[2],
               best[3], got);
        if (spans_of(&d, got, node, spans)) {
            printf(": not an order of tp, cp, dp and pp  FAIL\n");
            return 1;
        }
        if (strcmp(got, want) != 0) {
            printf(" (spans %d %d %d %d): %s  FAIL\n", spans[0], spans[1], spans[2], spans[3],
                   compare_spans(spans, best) > 0 ? "its groups span more nodes"
                                                  : "as good, but not the first such order");
            return 1;
        }
        printf("  ok\n");
        free(node);
    }
    printf("check_mesh_order: ok\n");
    return 0;
}
