/* Lab 10: the seams of the composed trainer. See composed.h, and
 * labs/10_composed/README.md for what each decision costs. */
#include "composed.h"

#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "kernels.h"

const char *composed_mesh_order(const MeshDegrees *d) {
    (void)d;
    /* BEGIN SOLUTION */
    /* the most traffic innermost, on the fastest links: TP every layer,
     * CP every attention, DP once per step (behind the backward pass), PP
     * one activation per micro-batch and boundary; EP splits DP, so its
     * all-to-alls stay among neighbouring DP ranks */
    return "tp-cp-dp-pp";
    /* END SOLUTION */
}

void composed_groups(const Mesh *m, ComposedGroups *g) {
    /* BEGIN SOLUTION */
    /* the same parameters: same TP shard and stage; different tokens: every
     * dp and cp coordinate */
    g->grads = m->dcp_group;
    g->zero = m->dcp_group;
    /* CP's loss is its group's mean already (context_parallel_loss_mean),
     * TP's the whole vocabulary's on every TP rank, PP's on the last
     * stage only (the others add 0): sum over dp and pp, one rank per
     * (tp, cp) */
    g->loss = comm_split(m->world, m->tp_rank + m->deg.tp * m->cp_rank, m->world->rank, "metrics");
    /* END SOLUTION */
}

void composed_groups_free(ComposedGroups *g) {
    if (g->loss) comm_free(g->loss);
    *g = (ComposedGroups){0};
}

/* The second extension (hybrid ZeRO-1, --dp-shard) adds one call to this
 * function: composed.h says what it must leave unchanged. */
double composed_zero1_finish_grads(ComposedZero1 *c, int micro_batches) {
    /* BEGIN SOLUTION */
    Zero *z = &c->z;
    const GPTLayout *l = c->layout;
    /* 1. whole units first: SP's layernorms saw only this rank's rows,
     * each end of the pipeline only its use of wte; a slice cut now would
     * miss the other part (and the two ends' units 0 differ in size, so
     * their slices would not even line up) */
    if (l->sp) zero_sum_layernorm_grads(z);
    if (l->pp > 1) l->sum_pipeline_copies(l, z->grads_full);
    /* 2. this rank's slice, summed over the ranks that hold the unit */
    for (int u = 0; u < z->nunits; u++)
        if (z->units[u].count)  /* else another stage's unit */
            zero_reduce_scatter_grads(z, u, comm_at(z->grads_full, z->grad_dtype,
                                                    z->units[u].padded_offset));
    /* the second extension: a shard group's sums, averaged over its replicas */
    if (z->replicate) zero_hsdp_average(z);
    double sumsq = 0.0;
    const size_t r = (size_t)z->dp->rank;
    const int format = comm_dtype_precision(z->grad_dtype);
    for (int u = 0; u < z->nunits; u++) {
        const ZeroUnit *x = &z->units[u];
        if (x->count == 0) continue;
        /* 3. the mean: the same two divisions as DDP and the loop */
        void *mine = comm_at(z->grads_full, z->grad_dtype, x->padded_offset + r * x->shard);
        scale_inplace_as(mine, 1.0f / (float)z->dp->size, x->shard, format);
        if (micro_batches > 1) scale_inplace_as(mine, 1.0f / micro_batches, x->shard, format);
        /* 4. the squares of the slice's real elements (the padding is 0) */
        const size_t lo = zero_slice_start(x, r), hi = zero_slice_start(x, r + 1);
        sumsq += layout_counted_sum_squares(l, c->tensors, x->offset + lo, hi - lo, mine, format);
    }
    /* the slices of one copy, then the copy's parts (tp, pp) */
    comm_allreduce(c->norm, &sumsq, &sumsq, 1, COMM_DOUBLE, COMM_SUM);
    return layout_model_sum(l, sumsq);
    /* END SOLUTION */
}

/* ---- the extension --------------------------------------------------------- */

void composed_best_mesh_order(const MeshDegrees *d, int ranks_per_node, char *order, size_t n) {
    /* BEGIN SOLUTION */
    const int world = d->tp * d->cp * d->dp * d->pp;
    int *node = malloc((size_t)world * sizeof(int)), best[MESH_DIMS] = {0}, found = 0;
    CHECK(node, "out of memory");
    for (int r = 0; r < world; r++) node[r] = r / ranks_per_node;
    /* the 24 orders in lexicographic order: a b c e, each a dimension once */
    for (int a = 0; a < MESH_DIMS; a++)
        for (int b = 0; b < MESH_DIMS; b++)
            for (int c = 0; c < MESH_DIMS; c++) {
                const int e = 6 - a - b - c;  /* the one left: 0 + 1 + 2 + 3 = 6 */
                if (a == b || a == c || b == c) continue;
                char name[16];
                snprintf(name, sizeof name, "%s-%s-%s-%s", MESH_DIM_NAMES[a], MESH_DIM_NAMES[b],
                         MESH_DIM_NAMES[c], MESH_DIM_NAMES[e]);
                MeshDegrees x = *d;
                x.order = name;
                int spans[MESH_DIMS];
                mesh_group_spans(&x, node, spans);
                int better = !found;
                for (int k = 0; k < MESH_DIMS && !better; k++) {
                    if (spans[k] != best[k]) {
                        better = spans[k] < best[k];
                        break;
                    }
                }
                if (better) {
                    found = 1;
                    for (int k = 0; k < MESH_DIMS; k++) best[k] = spans[k];
                    snprintf(order, n, "%s", name);
                }
            }
    free(node);
    /* END SOLUTION */
}
