#include "memplan.h"

#include <stdio.h>
#include <string.h>

#include "check.h"
#include "layout.h"
#include "math_shared.h"
#include "model.h"
#include "pipe_exec.h"
#include "precision.h"

GPTLayout memplan_model_layout(const GPTConfig *cfg, const MemLayout *l) {
    /* this rank's share of the model: all of it, or its TP shard */
    GPTLayout m = gpt_layout_make(cfg, l->tp > 1 ? l->tp : 1, 0);
    m.split_layers = l->tp >= 1;
    m.sp = l->sp;
    m.sp_regather = l->sp_regather;
    m.recompute = l->recompute;
    if (l->dual) gpt_layout_set_dual_pipeline(&m, l->pp, l->pp_rank);
    else if (l->pp > 1 || l->chunks > 1) gpt_layout_set_pipeline(&m, l->pp, l->pp_rank, l->chunks);
    if (l->cp > 1) gpt_layout_set_context(&m, l->cp, 0, l->cp_algo);
    if (l->ep > 1) gpt_layout_set_experts(&m, l->ep, 0);
    return m;
}

/* Mixed precision's replicated states (model_states.h): the embeddings'
 * unit and the largest other one widened to fp32, P_0 + max_u P_u
 * elements of this rank's units (twice with 2-byte gradients: their
 * accumulation's units beside the compute copy's) */
static size_t widened_units(const GPTLayout *m) {
    size_t offset, embed;
    gpt_unit_range(m, GPT_UNIT_EMBED, &offset, &embed);
    return embed + gpt_largest_unit_but_embeddings(m);
}

/* ZeRO-2/3's gradients beside the shard during a backward pass
 * (memplan.h): fp32 working buffers of N S_u, the embeddings' open from
 * the LM head to the end; 2-byte gradients (G < F) are rounded into a
 * second buffer of the unit before they travel, which then is the one in
 * flight beside the next unit's (overlapped). padded[u] = N S_u. */
static size_t zero_grads_working_set(const size_t *padded, int U, size_t F, size_t G,
                                     int overlap) {
    const size_t round = G < F ? G : 0;  /* the rounded copy, beside the fp32 one */
    size_t most = (F + round) * padded[GPT_UNIT_EMBED];
    for (int u = 1; u < U; u++) {
        const size_t next = u + 1 < U ? padded[u + 1] : 0;
        size_t at = (F + round) * padded[u];                          /* rounding u */
        if (overlap) {
            const size_t flying = F * padded[u] + (round ? G : F) * next;  /* u+1 in flight */
            if (flying > at) at = flying;
        }
        if (F * padded[GPT_UNIT_EMBED] + at > most) most = F * padded[GPT_UNIT_EMBED] + at;
    }
    return most;
}

/* Mixed precision's TP collectives on a 2-byte wire (comm.h): the wire
 * buffers one holds during its call, at most. Without sequence
 * parallelism an all-reduce of N C in place (one buffer); with it, an
 * all-gather or a reduce-scatter between a rank's N C / tp and all N C,
 * apart (two). None at tp 1 (a group of one has no wire). */
static size_t tp_wire_bytes(const GPTLayout *m, int B, int T) {
    if (m->cfg.precision == PRECISION_FP32 || m->tp == 1) return 0;
    const size_t NC = (size_t)B * T * m->cfg.n_embd;
    return 2 * (m->sp ? NC + NC / m->tp : NC);
}

static size_t max_of(size_t a, size_t b) { return a > b ? a : b; }

/* ZeRO++ (zero.h's fourth extension) replayed over one forward and one
 * backward pass in the order the model calls its hooks (model.h), to the
 * most bytes held at once beside the states: the parameters' (gathered
 * units, 4 N S_u each; hpZ's secondary copies, 4 N S_u / K, kept from a
 * unit's forward to its backward, all dropped when a forward starts) and
 * the communication's (qwZ's packed gather, N Q_u with Q_u =
 * quant_packed_bytes(S_u), in flight until its wait; qgZ's two
 * all-to-alls' buffers inside grads_ready). */
typedef struct {
    const size_t *padded;  /* N S_u */
    int U, N, K, prefetch, qwz, hpz, qgz;
    char gathered[1024], packed[1024], secondary[1024];
    size_t params, comm, params_peak, comm_peak;
} ZeroppReplay;

static void replay_hold(ZeroppReplay *r, size_t *held, long delta) {
    *held += delta;
    r->params_peak = max_of(r->params_peak, r->params);
    r->comm_peak = max_of(r->comm_peak, r->comm);
}
static size_t replay_packed(const ZeroppReplay *r, int u) {
    return (size_t)r->N * quant_packed_bytes(r->padded[u] / r->N);
}
static void replay_start(ZeroppReplay *r, int u, int backward) {
    r->gathered[u] = 1;
    replay_hold(r, &r->params, (long)(4 * r->padded[u]));
    if ((backward && r->hpz && r->secondary[u]) || !r->qwz) return;
    r->packed[u] = 1;
    replay_hold(r, &r->comm, (long)replay_packed(r, u));
}
static void replay_secondary(ZeroppReplay *r, int u, int keep) {
    const long bytes = (long)(4 * r->padded[u] / r->K);
    if (r->secondary[u]) replay_hold(r, &r->params, -bytes);
    r->secondary[u] = (char)keep;
    if (keep) replay_hold(r, &r->params, bytes);
}
static void replay_needed(ZeroppReplay *r, int u, int backward, int next) {
    if (!r->gathered[u]) replay_start(r, u, backward);
    if (r->packed[u]) replay_hold(r, &r->comm, -(long)replay_packed(r, u));
    r->packed[u] = 0;
    if (!backward && r->hpz && u == GPT_UNIT_EMBED)
        for (int v = 0; v < r->U; v++) replay_secondary(r, v, 0);
    if (r->hpz) replay_secondary(r, u, !backward);
    if (r->prefetch && next >= 0 && !r->gathered[next]) replay_start(r, next, backward);
}
static void replay_done(ZeroppReplay *r, int u) {
    r->gathered[u] = 0;
    replay_hold(r, &r->params, -(long)(4 * r->padded[u]));
}
/* qgZ's buffers in zero_qgz_reduce's order: send and receive of N Q, the
 * receive and the fp32 partial sums of M S, the partial sums and the
 * second send of M Q, that send and its receive */
static void replay_grads_ready(ZeroppReplay *r, int u) {
    if (!r->qgz) return;
    const size_t S = r->padded[u] / r->N, Q = quant_packed_bytes(S), M = (size_t)r->N / r->K;
    const size_t phases[] = {2 * r->N * Q, r->N * Q + 4 * M * S, 4 * M * S + M * Q, 2 * M * Q};
    for (int k = 0; k < 4; k++) r->comm_peak = max_of(r->comm_peak, r->comm + phases[k]);
}

static void zeropp_peaks(const size_t *padded, int U, const MemLayout *l, size_t *params,
                         size_t *comm) {
    CHECK(U <= 1024, "ZeRO++'s replay holds at most 1024 units (%d)", U);
    ZeroppReplay r = {.padded = padded, .U = U, .N = l->ranks, .prefetch = l->prefetch,
                      .qwz = l->qwz, .hpz = l->hpz > 0, .qgz = l->qgz > 0};
    r.K = l->hpz ? l->hpz : l->qgz ? l->qgz : l->ranks;
    const int last = U - 1;  /* the final layernorm; the blocks 1 .. U - 2 */
    replay_needed(&r, GPT_UNIT_EMBED, 0, 1);
    for (int u = 1; u <= last; u++) {
        replay_needed(&r, u, 0, u < last ? u + 1 : -1);
        replay_done(&r, u);
    }
    replay_done(&r, GPT_UNIT_EMBED);  /* after the tied head */
    replay_needed(&r, GPT_UNIT_EMBED, 1, last);
    replay_done(&r, GPT_UNIT_EMBED);
    for (int u = last; u >= 1; u--) {
        replay_needed(&r, u, 1, u > 1 ? u - 1 : -1);
        replay_done(&r, u);
        replay_grads_ready(&r, u);
    }
    replay_grads_ready(&r, GPT_UNIT_EMBED);
    *params = r.params_peak;
    *comm = r.comm_peak;
}

void memplan_predict(const GPTConfig *cfg, const MemLayout *l, MemPlan *plan) {
    CHECK(l->zero_stage >= 0 && l->zero_stage <= 3 && l->ranks >= 1, "bad layout: stage %d, %d ranks",
          l->zero_stage, l->ranks);
    CHECK(!l->overlap_rs || l->zero_stage >= 2, "bad layout: overlap_rs needs ZeRO-2 or 3, not %d",
          l->zero_stage);
    CHECK(!l->offload || l->zero_stage >= 2, "bad layout: offload needs ZeRO-2 or 3, not %d",
          l->zero_stage);
    memset(plan, 0, sizeof *plan);
    const GPTLayout m = memplan_model_layout(cfg, l);
    const size_t F = sizeof(float), phi = m.num_params;
    const int N = l->ranks, U = gpt_num_units(&m);
    /* padded[u] = N S_u; shard = sum S_u, what each rank owns */
    size_t padded[U], shard = 0, max_shard = 0;
    for (int u = 0; u < U; u++) {
        size_t offset, count;
        gpt_unit_range(&m, u, &offset, &count);
        size_t s = unit_shard_size(count, N);
        padded[u] = (size_t)N * s;
        shard += s;
        if (s > max_shard) max_shard = s;
        plan->padded_params += padded[u];
    }
    size_t *st = plan->states, *pk = plan->peak;
    if (l->zero_stage == 0) plan->padded_params = phi;
    /* bytes of a parameter the passes read and of a gradient (fp32, or
     * mixed precision's 2), and whether an fp32 master joins the moments */
    const int mixed = cfg->precision != PRECISION_FP32, stage = l->zero_stage;
    const int zeropp = stage == 3 && (l->qwz || l->hpz || l->qgz);
    const size_t P = precision_bytes((Precision)cfg->precision);
    const size_t G = precision_bytes((Precision)gpt_grad_precision(cfg));
    const size_t owned = stage == 0 ? phi : shard, full = plan->padded_params;
    st[MEM_PARAMS] = P * (stage == 3 ? shard : full);
    st[MEM_GRADS] = G * (stage <= 1 ? full : shard);
    st[MEM_OPTIMIZER] = (mixed ? 3 : 2) * F * owned;
    if (l->offload) {  /* the optimizer, with an fp32 master, and the gradients' copy */
        plan->host_states[MEM_OPTIMIZER] = 3 * F * owned;
        plan->host_states[MEM_GRADS] = G * owned;
        st[MEM_OPTIMIZER] = 0;
    }
    plan->padding = plan->padded_params - phi;
    /* mixed precision's widened units (widened.h): the weights', and the
     * gradients' where 2-byte ones are accumulated whole (not ZeRO-2/3's
     * working buffers) */
    size_t mixed_units = mixed ? F * widened_units(&m) : 0;
    if (G < F && stage <= 1) mixed_units *= 2;
    memcpy(pk, st, sizeof plan->states);

    /* the working set of ZeRO-2/3 (see memplan.h) */
    size_t one_unit = 0, two_units = 0;  /* max over blocks and lnf, u >= 1 */
    for (int u = 1; u < U; u++) {
        if (padded[u] > one_unit) one_unit = padded[u];
        size_t pair = padded[u] + (u + 1 < U ? padded[u + 1] : 0);
        if (pair > two_units) two_units = pair;
    }
    /* overlapped: the unit in flight beside the one computed (memplan.h) */
    if (stage >= 2) pk[MEM_GRADS] += zero_grads_working_set(padded, U, F, G, l->overlap_rs);
    if (stage == 3 && !zeropp)
        pk[MEM_PARAMS] += P * (padded[GPT_UNIT_EMBED] + (l->prefetch ? two_units : one_unit));
    /* the in-place reduce-scatter's scratch (none where qgZ replaces it) */
    if (stage >= 1 && !l->qgz) pk[MEM_COMM] = G * max_shard;
    if (zeropp) {
        size_t params, comm;
        zeropp_peaks(padded, U, l, &params, &comm);
        pk[MEM_PARAMS] += params;
        pk[MEM_COMM] += comm;
    }

    /* context parallelism's transfers, inside each forward and backward */
    size_t cp_forward = 0, cp_backward = 0, cp_work = 0;
    if (m.cp > 1) memplan_cp_transient(&m, l->rows, l->seq, &cp_forward, &cp_backward, &cp_work);
    /* a pass's own transfers: attention's (CP) and, never at the same
     * time, the split layers' (TP) */
    const size_t tp_wire = tp_wire_bytes(&m, l->rows, l->seq);
    const size_t forward = max_of(cp_forward, tp_wire), backward = max_of(cp_backward, tp_wire);
    /* and the EP rows' wire, reserved for the whole run */
    pk[MEM_COMM] += 2 * gpt_ep_wire_elements(&m, l->rows, l->seq, l->ep_overlap);
    if (l->schedule) {  /* a pipeline: the schedule's order decides */
        pk[MEM_ACTIVATIONS] = pipe_activation_peak_bytes(&m, l->schedule, l->rows, l->seq);
        /* the messages live during each op, and the op's own transfers */
        pk[MEM_COMM] += pipe_comm_peak_bytes(&m, l->schedule, l->rows, l->seq, forward, backward);
    } else {
        pk[MEM_ACTIVATIONS] = gpt_activation_bytes(&m, l->rows, l->seq)
                              + sizeof(int) * gpt_activation_ints(l->rows, l->seq);
        pk[MEM_COMM] += max_of(forward, backward);
    }
    pk[MEM_WORKSPACE] = F * gpt_scratch_floats(&m, l->rows, l->seq) + cp_work + mixed_units;
}

void memplan_cp_transient(const GPTLayout *m, int B, int T, size_t *comm_forward,
                          size_t *comm_backward, size_t *work) {
    const size_t F = sizeof(float), BT = (size_t)B * T, C = m->attn_width, NH = m->n_head;
    /* mixed precision's wire buffers (comm.h), a send's and a receive's:
     * Ulysses' all-to-all of q, k, v; the ring's K V (dK dV go in fp32) */
    const size_t W = m->cfg.precision == PRECISION_FP32 ? 0 : 2 * 2;
    if (m->cp_algo == CP_ULYSSES) {
        *comm_forward = *comm_backward = (F * 2 + W) * BT * 3 * C;
        *work = F * 4 * BT * C;
    } else {
        *comm_forward = (F * 2 + W) * BT * 2 * C;
        *comm_backward = (F * 5 + W) * BT * 2 * C;
        *work = F * (BT * C + (size_t)B * NH * T);
    }
}

/* What one rank's pipeline stage holds (all of it without a pipeline):
 * its blocks (L / pp, over its chunks), whether it has the embedding (the
 * first stage) and the head and loss (the last) */
static size_t stage_blocks(const GPTConfig *cfg, const MemLayout *l, int *first, int *last) {
    const int pp = l->pp > 1 ? l->pp : 1;
    *first = l->pp_rank == 0 || pp == 1;
    *last = l->pp_rank == pp - 1 || pp == 1;
    return (size_t)cfg->n_layer / pp;
}

void memplan_cp_comm(const GPTConfig *cfg, const MemLayout *l, CpTraffic *forward,
                     CpTraffic *backward) {
    const GPTLayout m = memplan_model_layout(cfg, l);
    int first, last;
    const size_t F = sizeof(float), L = stage_blocks(cfg, l, &first, &last), P = l->cp;
    /* K V and the all-to-alls' activations in the run's format (comm.h's
     * comm_act_dtype), the ring's dK dV in fp32 */
    const size_t A = precision_bytes((Precision)cfg->precision);
    const size_t BT = (size_t)l->rows * l->seq, C = m.attn_width, kv = BT * 2 * C;
    memset(forward, 0, sizeof *forward);
    memset(backward, 0, sizeof *backward);
    if (last) forward->allreduce = (CommCount){1, F};  /* the loss's mean */
    if (l->cp_algo == CP_ULYSSES) {
        forward->alltoall = (CommCount){2 * L, L * A * BT * 4 * C};
        backward->alltoall = forward->alltoall;
    } else {
        forward->send = (CommCount){L * (P - 1), L * (P - 1) * A * kv};
        backward->send = (CommCount){L * (2 * P - 1), L * ((P - 1) * A + P * F) * kv};
    }
    if (l->recompute == RECOMPUTE_FULL) {  /* each block's forward again, its ring too */
        backward->alltoall.calls += forward->alltoall.calls;
        backward->alltoall.bytes += forward->alltoall.bytes;
        backward->send.calls += forward->send.calls;
        backward->send.bytes += forward->send.bytes;
    }
}

double memplan_states_bytes(double phi, int zero_stage, int ranks, int precision,
                            int fp32_grads) {
    const double n = ranks, P = precision_bytes((Precision)precision);
    const double G = precision == PRECISION_FP32 || fp32_grads ? 4 : 2;
    const double K = precision == PRECISION_FP32 ? 8 : 12;  /* moments, and a master */
    switch (zero_stage) {
    case 0: return (P + G + K) * phi;
    case 1: return (P + G) * phi + K * phi / n;
    case 2: return P * phi + (G + K) * phi / n;
    default: return (P + G + K) * phi / n;
    }
}

void memplan_tp_comm(const GPTConfig *cfg, const MemLayout *l, TpTraffic *forward,
                     TpTraffic *backward) {
    int first, last;
    const size_t L = stage_blocks(cfg, l, &first, &last);
    const size_t N = (size_t)l->rows * l->seq, NC = N * cfg->n_embd, F = sizeof(float);
    /* activations travel in the run's format (comm.h's comm_act_dtype) */
    const size_t A = precision_bytes((Precision)cfg->precision);
    /* per block: two split layers (attention's and the MLP's) joined by a
     * collective each way; an MoE block's experts are not split (2L - M) */
    const size_t blocks = 2 * L - (l->pp > 1 ? 0 : (size_t)gpt_num_moe_blocks(cfg));
    const CommCount loss = {3, F * 3 * N};  /* the vocabulary's cross-entropy */
#define ROWS(k) ((CommCount){(k), A * (k) * NC})
    /* the embedding's sum (first stage), the head's input gradient (last) */
    const CommCount in_forward = ROWS(blocks + first), in_backward = ROWS(blocks + last);
    const CommCount again = ROWS(2 * L);  /* full recomputation's forward */
    const int full = l->recompute == RECOMPUTE_FULL;
    memset(forward, 0, sizeof *forward);
    memset(backward, 0, sizeof *backward);
    if (l->sp) {
        /* reduce-scatters after the split layers and the embedding, all-gathers
         * before them and the head; the backward the other way round */
        forward->reduce_scatter = in_forward;
        forward->allgather = ROWS(blocks + last);
        backward->reduce_scatter = ROWS(blocks + last);
        backward->allgather = ROWS(blocks + first);
        if (last) forward->allreduce = loss;
        if (full) {
            backward->reduce_scatter = (CommCount){backward->reduce_scatter.calls + again.calls,
                                                   backward->reduce_scatter.bytes + again.bytes};
            backward->allgather = (CommCount){backward->allgather.calls + again.calls,
                                              backward->allgather.bytes + again.bytes};
        }
        if (l->sp_regather) {
            backward->allgather.calls += forward->allgather.calls;
            backward->allgather.bytes += forward->allgather.bytes;
        }
    } else {
        forward->allreduce = in_forward;
        if (last) {
            forward->allreduce.calls += loss.calls;
            forward->allreduce.bytes += loss.bytes;
        }
        backward->allreduce = in_backward;
        if (full)
            backward->allreduce = (CommCount){in_backward.calls + again.calls,
                                              in_backward.bytes + again.bytes};
    }
#undef ROWS
}

CommCount memplan_tp_step_comm(const GPTConfig *cfg, const MemLayout *l) {
    int first, last;
    const size_t L = stage_blocks(cfg, l, &first, &last);
    CommCount c = {1, sizeof(double)};  /* the gradient norm's sum */
    if (l->sp) {  /* the layernorms' gradients: 4 a block, lnf's 2 on the last stage */
        c.calls += 4 * L + 2 * (size_t)last;
        c.bytes += sizeof(float) * (4 * L + 2 * (size_t)last) * cfg->n_embd;
    }
    return c;
}

void memplan_print_check(const char *program, const GPTConfig *cfg, const MemLayout *layout,
                         int steps_run) {
    if (steps_run <= 0) {
        printf("%s: memory per rank: no step run, no peak to compare with memplan's\n", program);
        return;
    }
    MemPlan plan;
    memplan_predict(cfg, layout, &plan);
    printf("%s: memory per rank, predicted by memplan vs measured (peak bytes):\n", program);
    int width = 12;  /* "host_optimizer" widens the column, where offloaded */
    for (int k = 0; k < MEM_NUM_CATEGORIES; k++)
        if (plan.host_states[k] || mem_host_peak_bytes((MemCategory)k)) width = 14;
    for (int c = 0; c < 2 * MEM_NUM_CATEGORIES; c++) {
        const int host = c >= MEM_NUM_CATEGORIES, k = c % MEM_NUM_CATEGORIES;
        const size_t measured = host ? mem_host_peak_bytes((MemCategory)k)
                                     : mem_peak_bytes((MemCategory)k);
        const size_t predicted = host ? plan.host_states[k] : plan.peak[k];
        if (host && !measured && !predicted) continue;  /* host rows: where offloaded */
        char name[32];
        snprintf(name, sizeof name, "%s%s", host ? "host_" : "", mem_category_name((MemCategory)k));
        printf("  %-*s predicted %12zu  measured %12zu  %s\n", width, name, predicted, measured,
               measured == predicted ? "ok" : "DIFFERENT");
    }
}
