#include "costmodel.h"

#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "layout.h"
#include "model.h"
#include "schedule.h"

double cost_allreduce(CostLink link, int p, double calls, double bytes) {
    if (p <= 1) return 0;
    return 2.0 * (p - 1) * calls * link.alpha + 2.0 * (p - 1) / p * bytes * link.beta;
}

double cost_scatter_gather(CostLink link, int p, double calls, double bytes) {
    if (p <= 1) return 0;
    return (double)(p - 1) * calls * link.alpha + (double)(p - 1) / p * bytes * link.beta;
}

double cost_sends(CostLink link, double calls, double bytes) {
    return calls * link.alpha + bytes * link.beta;
}

void cost_offload(int units, size_t owned, size_t owned_last, size_t grad_bytes,
                  size_t param_bytes, CostLink host, double adam_rate, OffloadCost *out) {
    out->down = cost_sends(host, units, (double)grad_bytes * owned);
    out->cpu = owned / adam_rate;
    out->up = cost_sends(host, units, (double)param_bytes * owned);
    out->exposed = cost_sends(host, 1, (double)grad_bytes * owned_last) + out->cpu + out->up;
}

static int degree(int d) { return d > 1 ? d : 1; }

void cost_forward_flops(const GPTConfig *cfg, const MemLayout *l, int pp_rank, double *blocks,
                        double *attention, double *head) {
    MemLayout at = *l;
    at.pp_rank = pp_rank;
    const GPTLayout m = memplan_model_layout(cfg, &at);
    const int tp = degree(l->tp), cp = degree(l->cp);
    const double C = cfg->n_embd, N = (double)l->rows * l->seq, Tg = (double)l->seq * cp;
    const double attn_linear = 4 * C * C / tp, mlp = 8 * C * C;
    *blocks = *attention = *head = 0;
    for (int c = 0; c < m.chunks; c++) {
        const GPTStage st = gpt_stage(&m, c);
        for (int i = st.first_block; i < st.first_block + st.n_blocks; i++) {
            /* an MoE block: k whole experts and the router a token */
            const double per_token = gpt_block_is_moe(cfg, i)
                                         ? attn_linear + cfg->top_k * mlp + cfg->n_experts * C
                                         : attn_linear + mlp / tp;
            *blocks += 2 * N * per_token;
            *attention += 4 * N * Tg * C / tp;
        }
        if (st.head) *head += 2 * N * m.vocab_rows * C;
    }
}

/* Forward, backward (whole, and ZB-H1's input and weight halves) FLOPs of
 * one micro-batch on rank pp_rank, recomputation included */
typedef struct {
    double forward, backward, backward_input, backward_weight;
} PassFlops;

static PassFlops pass_flops(const GPTConfig *cfg, const MemLayout *l, int pp_rank) {
    double blocks, attention, head;
    cost_forward_flops(cfg, l, pp_rank, &blocks, &attention, &head);
    /* what the backward pass computes again: each block's forward (not the
     * head's), or the probabilities; fused attention's backward rebuilds
     * each tile's scores q k^T (half its forward) whatever is recomputed,
     * and selective recomputation then has nothing left to rebuild */
    const int fused = cfg->attention == ATTENTION_FUSED;
    double again = l->recompute == RECOMPUTE_FULL                  ? blocks + attention
                   : l->recompute == RECOMPUTE_SELECTIVE && !fused ? attention
                                                                   : 0;
    if (fused) again += attention / 2;
    PassFlops f = {.forward = blocks + attention + head};
    /* dX and dW each as many FLOPs as the forward's GEMMs; attention's
     * backward (twice its forward) belongs to the input gradient */
    f.backward_weight = blocks + head;
    f.backward_input = blocks + head + 2 * attention + again;
    f.backward = f.backward_input + f.backward_weight;
    return f;
}

/* Seconds of TP and CP collectives of one micro-batch on rank pp_rank:
 * forward and backward */
static void layer_comm(const GPTConfig *cfg, const MemLayout *l, int pp_rank, CostLink tp_link,
                       CostLink cp_link, double *forward, double *backward) {
    MemLayout at = *l;
    at.pp_rank = pp_rank;
    *forward = *backward = 0;
    const int tp = degree(l->tp), cp = degree(l->cp);
    if (tp > 1) {
        TpTraffic f, b;
        memplan_tp_comm(cfg, &at, &f, &b);
        const TpTraffic *pass[2] = {&f, &b};
        double *out[2] = {forward, backward};
        for (int i = 0; i < 2; i++)
            *out[i] += cost_allreduce(tp_link, tp, pass[i]->allreduce.calls, pass[i]->allreduce.bytes)
                       + cost_scatter_gather(tp_link, tp, pass[i]->reduce_scatter.calls,
                                             pass[i]->reduce_scatter.bytes)
                       + cost_scatter_gather(tp_link, tp, pass[i]->allgather.calls,
                                             pass[i]->allgather.bytes);
    }
    if (cp > 1) {
        CpTraffic f, b;
        memplan_cp_comm(cfg, &at, &f, &b);
        const CpTraffic *pass[2] = {&f, &b};
        double *out[2] = {forward, backward};
        for (int i = 0; i < 2; i++)
            *out[i] += cost_sends(cp_link, pass[i]->send.calls, pass[i]->send.bytes)
                       + cost_scatter_gather(cp_link, cp, pass[i]->alltoall.calls,
                                             pass[i]->alltoall.bytes)
                       + cost_allreduce(cp_link, cp, pass[i]->allreduce.calls,
                                        pass[i]->allreduce.bytes);
    }
}

static CostLink link_of(const CostCluster *c, int intra) { return intra ? c->intra : c->inter; }

void cost_step(const GPTConfig *cfg, const CostLayout *layout, const CostCluster *cluster,
               StepCost *out) {
    const MemLayout *l = &layout->mem;
    const int tp = degree(l->tp), cp = degree(l->cp), pp = degree(l->pp), dp = layout->dp;
    const int v = l->chunks > 1 ? l->chunks : 1, m = layout->micro_batches;
    CHECK(dp >= 1 && m >= 1 && cluster->flops > 0, "bad cost layout: dp %d, m %d", dp, m);
    CHECK(pp == 1 || (l->schedule && l->schedule->micro_batches == m),
          "a pipeline needs its schedule of %d micro-batches", m);
    memset(out, 0, sizeof *out);
    const MeshDegrees deg = {.tp = tp, .cp = cp, .dp = dp, .pp = pp, .ep = degree(l->ep)};
    /* rank r on node r / G: a group's link is intra-node when it spans one */
    const int G = cluster->gpus_per_node, world = tp * cp * dp * pp;
    CHECK(G >= 1, "gpus per node %d", G);
    int *node = malloc((size_t)world * sizeof(int));
    CHECK(node, "out of memory");
    for (int r = 0; r < world; r++) node[r] = r / G;
    out->tp_intra = mesh_group_span(&deg, MESH_BIT(MESH_TP), node) == 1;
    out->cp_intra = mesh_group_span(&deg, MESH_BIT(MESH_CP), node) == 1;
    out->dp_intra = mesh_group_span(&deg, MESH_BIT(MESH_DP) | MESH_BIT(MESH_CP), node) == 1;
    out->pp_intra = mesh_group_span(&deg, MESH_BIT(MESH_PP), node) == 1;
    free(node);
    const CostLink tp_link = link_of(cluster, out->tp_intra), cp_link = link_of(cluster, out->cp_intra);

    /* the busiest rank's costs per micro-batch (every stage's are computed:
     * the last holds the head) */
    PipeCosts costs = {0};
    int busiest = 0;
    double busiest_time = -1, forward_comm = 0, backward_comm = 0;
    PassFlops busiest_flops = {0};
    for (int r = 0; r < pp; r++) {
        const PassFlops f = pass_flops(cfg, l, r);
        double cf, cb;
        layer_comm(cfg, l, r, tp_link, cp_link, &cf, &cb);
        const double t = (f.forward + f.backward) / cluster->flops + cf + cb;
        if (t > busiest_time) {
            busiest_time = t;
            busiest = r;
            busiest_flops = f;
            forward_comm = cf;
            backward_comm = cb;
        }
    }
    const double F = cluster->flops;
    costs.forward = (busiest_flops.forward / F + forward_comm) / v;
    costs.backward = (busiest_flops.backward / F + backward_comm) / v;
    costs.backward_input = (busiest_flops.backward_input / F + backward_comm) / v;
    costs.backward_weight = busiest_flops.backward_weight / F / v;
    out->flops = m * (busiest_flops.forward + busiest_flops.backward);
    out->compute = out->flops / F;
    if (tp > 1 || cp > 1) {
        /* split the layers' communication into TP and CP for the report */
        double tf, tb, cf, cb;
        layer_comm(cfg, l, busiest, tp_link, (CostLink){0, 0}, &tf, &tb);
        layer_comm(cfg, l, busiest, (CostLink){0, 0}, cp_link, &cf, &cb);
        out->tp = m * (tf + tb);
        out->cp = m * (cf + cb);
    }

    MemLayout at = *l;
    at.pp_rank = busiest;
    const GPTLayout model = memplan_model_layout(cfg, &at);
    if (pp > 1) {
        /* the messages in the run's format (pipe_exec.c) */
        const double bytes = (double)precision_bytes((Precision)cfg->precision) *
                             (double)gpt_stage_io_floats(&model, l->rows, l->seq);
        costs.send = out->pp_send = cost_sends(link_of(cluster, out->pp_intra), 1, bytes);
        PipeTimeline timeline;
        schedule_simulate(l->schedule, &costs, &timeline);
        out->makespan = timeline.makespan;
        out->bubble_fraction = timeline.bubble_fraction;
        pipe_timeline_free(&timeline);
    } else {
        out->makespan = m * v * (costs.forward + costs.backward);
    }
    double tp_step = 0;  /* the gradient norm's and SP's layernorm sums, once a step */
    if (tp > 1) {
        const CommCount step = memplan_tp_step_comm(cfg, &at);
        tp_step = cost_allreduce(tp_link, tp, step.calls, step.bytes);
        out->tp += tp_step;
    }

    /* the gradients of the ranks holding the same parameters (dp x cp) */
    const int group = dp * cp;
    const double grad_bytes = (double)precision_bytes((Precision)gpt_grad_precision(cfg)) *
                              (double)model.num_params;
    const double bucket = layout->bucket_bytes > 0 ? (double)layout->bucket_bytes : grad_bytes;
    const double buckets = grad_bytes > 0 ? (double)(size_t)((grad_bytes + bucket - 1) / bucket) : 0;
    const CostLink dp_link = link_of(cluster, out->dp_intra);
    out->dp = cost_allreduce(dp_link, group, buckets, grad_bytes);
    out->dp_exposed = out->dp;
    if (layout->dp_overlap) {
        const double last = cost_allreduce(dp_link, group, 1, bucket < grad_bytes ? bucket : grad_bytes);
        const double hidden = out->dp - v * costs.backward;
        out->dp_exposed = hidden > last ? hidden : last;
        if (out->dp_exposed > out->dp) out->dp_exposed = out->dp;
    }
    out->step = out->makespan + tp_step + out->dp_exposed;
}
