/* The step-time model (common/costmodel.h) against what it promises:
 * each group's link from the mesh order, the alpha-beta formulas, compute
 * inversely proportional to the device's FLOP/s, and GPipe's bubble
 * (p - 1) / (m + p - 1) from lab 06's simulator when messages are free. */
#include <math.h>

#include "costmodel.h"
#include "schedules.h"
#include "unit.h"

static int close_to(double a, double b) { return fabs(a - b) <= 1e-9 * fabs(b) + 1e-15; }

/* 1 when every group spanning dims lies within one node of G ranks */
static int intra(const MeshDegrees *d, unsigned dims, int G) {
    int node[64];
    for (int r = 0; r < d->tp * d->cp * d->dp * d->pp; r++) node[r] = r / G;
    return mesh_group_span(d, dims, node) == 1;
}

static void test_links(void) {
    /* tp 8 fills an 8-GPU node: TP inside, DP (stride 8) across nodes */
    MeshDegrees d = {.tp = 8, .cp = 1, .dp = 2, .pp = 1, .ep = 1};
    EXPECT(intra(&d, MESH_BIT(MESH_TP), 8), "tp 8 on 8-GPU nodes is intra-node");
    EXPECT(!intra(&d, MESH_BIT(MESH_DP), 8), "dp across two nodes is inter-node");
    /* tp 2 x dp 2 x pp 2 on 4-GPU nodes: a pipeline's stages 4 ranks apart */
    d = (MeshDegrees){.tp = 2, .cp = 1, .dp = 2, .pp = 2, .ep = 1};
    EXPECT(intra(&d, MESH_BIT(MESH_DP), 4), "dp {0,2} on node 0");
    EXPECT(!intra(&d, MESH_BIT(MESH_PP), 4), "pp {0,4} spans nodes 0 and 1");
    EXPECT(intra(&d, MESH_BIT(MESH_PP), 8), "one 8-GPU node holds everything");
    /* cp 2 inside tp 2: the dp x cp group of 4-GPU nodes, ranks {0,2,4,6} */
    d = (MeshDegrees){.tp = 2, .cp = 2, .dp = 2, .pp = 1, .ep = 1};
    EXPECT(intra(&d, MESH_BIT(MESH_CP), 4), "cp {0,2}");
    EXPECT(!intra(&d, MESH_BIT(MESH_CP) | MESH_BIT(MESH_DP), 4), "dcp {0,2,4,6}");
    EXPECT(intra(&d, MESH_BIT(MESH_CP) | MESH_BIT(MESH_DP), 1) == 0, "one GPU a node");
    /* how many nodes: dcp {0,2,4,6} covers 2 nodes of 4, 4 nodes of 1 */
    int node[8];
    for (int r = 0; r < 8; r++) node[r] = r / 4;
    EXPECT(mesh_group_span(&d, MESH_BIT(MESH_CP) | MESH_BIT(MESH_DP), node) == 2, "dcp on 2 nodes of 4");
    for (int r = 0; r < 8; r++) node[r] = r;
    EXPECT(mesh_group_span(&d, MESH_BIT(MESH_CP) | MESH_BIT(MESH_DP), node) == 4, "dcp on 4 nodes of 1");
    EXPECT(mesh_group_span(&d, MESH_BIT(MESH_TP), node) == 2, "tp on nodes of 1");
}

static void test_formulas(void) {
    const CostLink l = {.alpha = 1e-6, .beta = 1e-9};
    EXPECT(close_to(cost_allreduce(l, 4, 2, 1e6), 2 * 3 * 2 * 1e-6 + 2.0 * 3 / 4 * 1e6 * 1e-9), "ring");
    EXPECT(close_to(cost_scatter_gather(l, 4, 1, 1e6), 3e-6 + 0.75e-3), "reduce-scatter");
    EXPECT(cost_allreduce(l, 1, 5, 1e9) == 0, "a group of one moves nothing");
    EXPECT(close_to(cost_sends(l, 3, 1e3), 3e-6 + 1e-6), "sends");
}

static CostCluster free_links(double flops) {
    return (CostCluster){.gpus_per_node = 8, .nodes = 1, .flops = flops, .mem_bytes = 1e12};
}

static void test_compute_and_bubble(void) {
    GPTConfig cfg;
    gpt_config_by_name("tiny", &cfg);
    /* one device, 2 micro-batches of 4 x 64 */
    CostLayout one = {.mem = {.rows = 4, .seq = 64}, .dp = 1, .micro_batches = 2};
    StepCost a, b;
    CostCluster c1 = free_links(1e9), c2 = free_links(2e9);
    cost_step(&cfg, &one, &c1, &a);
    cost_step(&cfg, &one, &c2, &b);
    EXPECT(close_to(b.compute, a.compute / 2), "2x FLOP/s: %g vs %g", b.compute, a.compute);
    EXPECT(close_to(a.step, a.compute), "one device: the step is its compute");
    /* the FLOPs of one device: 6 Phi' + 12 L C T a token, less the O(C)
     * terms the model leaves out (biases, layernorms: 13C against 12C^2 a
     * block, 1.7% at C = 64): within 2.5% */
    const double tokens = 2 * 4 * 64, want = gpt_flops_per_token(&cfg, 64) * tokens;
    EXPECT(fabs(a.flops - want) < 0.025 * want, "flops %g vs config.h's %g", a.flops, want);
    /* full recomputation adds the blocks' forward */
    one.mem.recompute = RECOMPUTE_FULL;
    cost_step(&cfg, &one, &c1, &b);
    EXPECT(b.flops > a.flops * 1.2 && b.flops < a.flops * 1.34, "full: %g vs %g", b.flops, a.flops);
    /* GPipe, p = 4, m = 8, free messages: the bubble is (p - 1) / (m + p - 1) */
    const int p = 4, m = 8;
    cfg.n_layer = 8;
    Schedule *s = schedule_by_name("gpipe", p, m, 1);
    CostLayout pipe = {.mem = {.rows = 1, .seq = 64, .pp = p, .chunks = 1, .schedule = s},
                       .dp = 1, .micro_batches = m};
    cost_step(&cfg, &pipe, &c1, &a);
    EXPECT(close_to(a.bubble_fraction, (double)(p - 1) / (m + p - 1)), "bubble %g",
           a.bubble_fraction);
    EXPECT(close_to(a.step, a.compute * (m + p - 1) / m), "step %g, compute %g", a.step, a.compute);
    schedule_free(s);
}

int main(void) {
    test_links();
    test_formulas();
    test_compute_and_bubble();
    return unit_report("test_costmodel");
}
