/* memplan: the memory planner (common/memplan.h) on the command line.
 *   memplan --config small --ranks 4 --batch 16        every layout, per rank
 *   memplan --params 7e9 --ranks 64                    model states only
 *   memplan --ranks 2 --overlap-rs                     ZeRO-2/3 as train_zero --overlap-rs
 *   memplan --ranks 8 --dp-shard 4                     hybrid sharding: ZeRO over groups of 4
 *   memplan --ranks 2 --offload                        ZeRO-2/3 with the optimizer on the host
 *   memplan --config small --tp 2 --ranks 4            train_tp's tp 2 x dp 2, and its TP traffic
 *   memplan --config small --tp 2 --sp --recompute full   lab 05's train_tp --sp --recompute full
 *   memplan --config small --tp 2 --activations        every way of keeping activations (lab 05)
 *   memplan --config tiny --cp 4 --cp-algo ulysses     train_cp's cp 4, and its CP traffic (lab 07)
 *   memplan --config tiny --ctx 1024 --cp 4 --fit 24   the longest sequence that fits 24 MiB per rank
 *   memplan --advise --config gpt2-124m --batch 64 --gpus-per-node 8   the layouts that fit,
 *                                                      ranked by predicted step time (costmodel.h)
 * Predict before you measure: lab 03's README asks for these numbers first. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cli.h"
#include "costmodel.h"
#include "layout.h"
#include "memplan.h"
#include "precision.h"
#include "model.h"
#include "parallel_flags.h"
#include "schedule.h"
#include "schedules.h"

static const char *const g_usage =
    "usage: memplan [options]\n"
    "Predict per-rank memory of each layout (replicated, ZeRO-1/2/3) from the formulas.\n\n"
    "  --config NAME     tiny | small | medium | gpt2-124m          (default tiny)\n"
    "  --ranks N         data-parallel ranks                             (default 1)\n"
    "  --batch B         sequences per step, all ranks  (default: tiny 8, small 16, gpt2 8)\n"
    "  --grad-accum K    micro-batches per rank and step                 (default 1)\n"
    "  --seq T           tokens per sequence               (default: the config's ctx)\n"
    "  --overlap-rs      ZeRO-2/3 with the reduce-scatter behind the backward pass\n"
    "                    (train_zero --overlap-rs: one unit in flight beside the one computed)\n"
    "  --dp-shard K      hybrid sharding (train_zero --dp-shard K): ZeRO's states sharded over\n"
    "                    groups of K of the --ranks, replicated across the groups\n"
    "  --offload         ZeRO-2/3 with the optimizer in host memory (train_zero --offload):\n"
    "                    the device's categories, and the host's held beside them; and\n"
    "                    the host link's time per step (costmodel.h's cost_offload):\n"
    "    --host-bw GB/s  the host link's bandwidth each way                 (default 25)\n"
    "    --host-lat US   a copy's start-up                                  (default 10)\n"
    "    --cpu-adam G    AdamW on the CPU, billions of elements a second     (default 1)\n"
    "  --params PHI      only the model states of a PHI-parameter model (e.g. 7e9)\n"
    "  --tp N            lab 04's layout instead (train_tp --tp N): each rank holds 1/N of\n"
    "                    the heads, MLP columns and vocabulary; --ranks is then all the\n"
    "                    ranks (default N), dp = ranks / N; for N > 1 also the TP group's\n"
    "                    all-reduces per forward and backward pass\n"
    "  --sp              with --tp: lab 05's sequence parallelism (train_tp --sp)\n"
    "  --sp-regather     with --tp: lab 05's extension (train_tp --sp-regather)\n"
    "  --recompute MODE  with --tp: none | selective | full (train_tp --recompute)\n"
    "  --activations     with --tp: also every layout of lab 05 (none, selective, full;\n"
    "                    without and with --sp) at this degree; with --csv, their\n"
    "                    activation bytes by part: layout,part,bytes\n"
    "  --cp N            lab 07's layout instead (train_cp --cp N): each rank holds --seq / N\n"
    "                    positions of every sequence of its rows; --ranks is then all the\n"
    "                    ranks (default tp N), dp = ranks / (tp N); with --tp, TP inside;\n"
    "                    for N > 1 also the CP group's traffic per forward and backward pass\n"
    "  --cp-algo NAME    with --cp: ring | zigzag | ulysses | striped   (default ring)\n"
    "  --ctx T           the model's context (position embeddings) instead of the config's:\n"
    "                    the longest --seq (train_cp --ctx T)\n"
    "  --fit MIB         with --cp: instead of --seq, the longest sequence, a multiple of\n"
    "                    2 N up to the context, whose peak per rank (the categories' sum)\n"
    "                    is at most MIB MiB; then the plan at that length\n"
    "  --csv             machine-readable: layout,category,states_bytes,peak_bytes\n"
    "                    (with --fit: cp,algo,budget_bytes,seq,peak_bytes,next_seq,\n"
    "                    next_peak_bytes)\n"
    "  --n-layer L, --n-head NH, --n-embd C, --vocab V   the config's sizes, changed\n"
    "  --experts E, --top-k K, --moe-every N   a mixture of experts (capacity: dropless)\n"
    "  --advise          the layouts of a cluster that fit, ranked by predicted step time\n"
    "                    (common/costmodel.h), and why the others are left out. The\n"
    "                    global batch: --batch sequences of --seq tokens. The cluster:\n"
    "    --gpus-per-node G   (default 8)          --nodes N       (default 1)\n"
    "    --gpu-mem GIB       (default 80)         --flops TFLOPS  per device (default 989:\n"
    "                        H100 bf16 dense peak; give what a device achieves)\n"
    "    --intra-bw GB/s     (default 450: NVLink per direction)  --intra-lat US (default 3)\n"
    "    --inter-bw GB/s     (default 50: 400 Gb/s InfiniBand)    --inter-lat US (default 10)\n"
    "    --headroom X        memory a device keeps free of the plan (the CUDA context, NCCL's\n"
    "                        buffers, the allocator's fragmentation): GiB, or a share of\n"
    "                        --gpu-mem like 10%                 (default 10%)\n"
    "    --bucket-mb MB      DP gradient buckets (default 25)\n"
    "    --no-overlap        DP traffic after the backward pass (train_4d's buckets)\n"
    "    --top N             rows of the table (default 10)\n"
    "                    Each of these pins its dimension (else every value is tried):\n"
    "                    --tp --cp --pp --ep --micro-batches --schedule --chunks --zero 0|1\n"
    "                    --recompute --cp-algo --sp | --no-sp. With --csv: one row a layout.\n"
    "                    Memory is the kit's: fp32 parameters, gradients, AdamW moments and\n"
    "                    activations, or --precision's (memplan_predict, the largest\n"
    "                    pipeline stage).\n"
    "  --precision P     fp32, or bf16 / fp16: the trainers' --precision P (fp32\n"
    "                    masters and moments, a 2-byte compute copy, 2-byte gradients\n"
    "                    and activations); with --tp, --cp or --advise (replicated\n"
    "                    states)\n"
    "  --fp32-grads      with --precision: fp32 gradients, as the trainers' flag\n"
    "  --attention A     materialized (default) or fused: the trainers' --attention A\n"
    "                    (fused keeps each row's log-sum-exp, not the T x T probabilities)\n"
    "  -h, --help        this text\n";

/* shard: the ranks ZeRO shards over (ranks, or --dp-shard's group) */
static void print_states_only(double phi, int ranks, int shard, Precision precision,
                              int fp32_grads) {
    static const char *names[] = {"replicated (DDP)", "ZeRO-1", "ZeRO-2", "ZeRO-3"};
    char hybrid[64] = "";
    if (shard != ranks) snprintf(hybrid, sizeof hybrid, ", ZeRO over shard groups of %d", shard);
    printf("model states per rank, %s AdamW%s, %.4g parameters, %d rank%s%s:\n",
           precision_name(precision), fp32_grads ? " (fp32 gradients)" : "", phi, ranks,
           ranks == 1 ? "" : "s", hybrid);
    for (int s = 0; s <= 3; s++)
        printf("  %-17s %10.2f GB\n", names[s],
               memplan_states_bytes(phi, s, shard, precision, fp32_grads) / 1e9);
}

static const char *const g_layouts[] = {"replicated", "zero1", "zero2", "zero3", "zero3-noprefetch"};

/* train_zero's variants of ZeRO-2/3 the flags ask for: --overlap-rs,
 * --offload (with the host link and the CPU's AdamW rate its time takes) */
typedef struct {
    int overlap_rs, offload;
    CostLink host;
    double adam_rate;
} ZeroVariant;

/* layout i of g_layouts; 0 when the variant has no such layout (offload
 * below ZeRO-2) */
static int plan_of(int i, const GPTConfig *cfg, int ranks, int rows, int seq,
                   const ZeroVariant *v, MemPlan *plan) {
    int stage = i < 4 ? i : 3;
    if (v->offload && stage < 2) return 0;
    MemLayout l = {.zero_stage = stage, .ranks = ranks, .prefetch = i == 3, .rows = rows, .seq = seq,
                   .overlap_rs = v->overlap_rs && stage >= 2, .offload = v->offload};
    memplan_predict(cfg, &l, plan);
    return 1;
}

/* the device's categories, then with --offload the host's (host_NAME: held
 * all the time, so their peak is their states) */
static void print_csv(const GPTConfig *cfg, int ranks, int rows, int seq, const ZeroVariant *v) {
    printf("layout,category,states_bytes,peak_bytes\n");
    for (int i = 0; i < 5; i++) {
        MemPlan plan;
        if (!plan_of(i, cfg, ranks, rows, seq, v, &plan)) continue;
        for (int c = 0; c < MEM_NUM_CATEGORIES; c++)
            printf("%s,%s,%zu,%zu\n", g_layouts[i], mem_category_name((MemCategory)c),
                   plan.states[c], plan.peak[c]);
        for (int c = 0; c < MEM_NUM_CATEGORIES && v->offload; c++)
            if (plan.host_states[c])
                printf("%s,host_%s,%zu,%zu\n", g_layouts[i], mem_category_name((MemCategory)c),
                       plan.host_states[c], plan.host_states[c]);
    }
}

/* --offload: the host link's time per step and rank (costmodel.h's
 * cost_offload), the same for ZeRO-2 and 3: each owns S elements */
static void print_offload_times(const GPTConfig *cfg, int ranks, const ZeroVariant *v) {
    const GPTLayout whole = gpt_layout_whole(cfg);
    const int U = gpt_num_units(&whole);
    size_t owned = 0, last = 0, offset, count;
    for (int u = 0; u < U; u++) {
        gpt_unit_range(&whole, u, &offset, &count);
        owned += unit_shard_size(count, ranks);
        if (u == GPT_UNIT_EMBED) last = unit_shard_size(count, ranks);  /* its gradient: last */
    }
    const size_t G = precision_bytes((Precision)gpt_grad_precision(cfg));
    const size_t P = precision_bytes((Precision)cfg->precision);
    OffloadCost c;
    cost_offload(U, owned, last, G, P, v->host, v->adam_rate, &c);
    printf("host link per step and rank (%.4g GB/s, %.4g us a copy; AdamW on the CPU at %.4g "
           "elements/s; costmodel.h):\n", 1e-9 / v->host.beta, 1e6 * v->host.alpha, v->adam_rate);
    printf("  down %zu bytes in %d copies %.4f ms, CPU %.4f ms, up %zu bytes %.4f ms; exposed "
           "%.4f ms (the last unit's copy, the CPU, the copies up)\n", G * owned, U,
           1e3 * c.down, 1e3 * c.cpu, P * owned, 1e3 * c.up, 1e3 * c.exposed);
}

/* shard: the ranks ZeRO shards over (ranks, or --dp-shard's group) */
static void print_plans(const char *name, const GPTConfig *cfg, int ranks, int shard, int rows,
                        int seq, const ZeroVariant *v) {
    char hybrid[96] = "";
    if (shard != ranks)
        snprintf(hybrid, sizeof hybrid, ", ZeRO over shard groups of %d (--dp-shard)", shard);
    printf("config %s, %zu parameters, %d rank%s%s, micro-batch %d x %d per rank%s; "
           "peak MiB per rank\n",
           name, gpt_num_params(cfg), ranks, ranks == 1 ? "" : "s", hybrid, rows, seq,
           v->overlap_rs ? ", ZeRO-2/3 reduce-scatter behind the backward pass"
           : v->offload ? ", ZeRO-2/3 with the optimizer in host memory (total: the device's)" : "");
    printf("  %-16s", "layout");
    for (int c = 0; c < MEM_NUM_CATEGORIES; c++) printf(" %11s", mem_category_name((MemCategory)c));
    printf(" %11s %9s%s\n", "total", "padding", v->offload ? "        host" : "");
    for (int i = 0; i < 5; i++) {
        MemPlan plan;
        if (!plan_of(i, cfg, shard, rows, seq, v, &plan)) continue;
        size_t total = 0, host = 0;
        printf("  %-16s", g_layouts[i]);
        for (int c = 0; c < MEM_NUM_CATEGORIES; c++) {
            printf(" %11.3f", plan.peak[c] / 1048576.0);
            total += plan.peak[c];
            host += plan.host_states[c];
        }
        printf(" %11.3f %9zu", total / 1048576.0, plan.padding);
        if (v->offload) printf(" %11.3f", host / 1048576.0);
        printf("\n");
    }
    if (v->offload) print_offload_times(cfg, shard, v);
}

/* Labs 04-05: train_tp's layout, tp x dp (DDP over dp: replicated states),
 * with sequence parallelism and recomputation as given. */
static MemLayout tp_layout(int tp, int dp, int rows, int seq, int sp, Recompute recompute) {
    return (MemLayout){.zero_stage = 0, .ranks = dp, .rows = rows, .seq = seq, .tp = tp,
                       .sp = sp, .recompute = recompute};
}

/* "tp2", "tp2-sp", "tp2-sp-full": the layout column of the CSV and the table */
static void tp_label(char *out, size_t n, const MemLayout *l) {
    snprintf(out, n, "tp%d%s%s%s%s", l->tp, l->sp ? "-sp" : "", l->sp_regather ? "-regather" : "",
             l->recompute ? "-" : "",
             l->recompute ? gpt_recompute_name(l->recompute) : "");
}

static void print_tp_csv(const GPTConfig *cfg, const MemLayout *l) {
    MemPlan plan;
    memplan_predict(cfg, l, &plan);
    char label[64];
    tp_label(label, sizeof label, l);
    printf("layout,category,states_bytes,peak_bytes\n");
    for (int c = 0; c < MEM_NUM_CATEGORIES; c++)
        printf("%s,%s,%zu,%zu\n", label, mem_category_name((MemCategory)c), plan.states[c],
               plan.peak[c]);
}

/* Lab 05's layouts at l's degree: none, selective, full recomputation,
 * each without SP and, where the sequence divides, with SP and with SP
 * gathered again (the extension). Returns how many (at most 9). */
static int activation_layouts(const MemLayout *l, MemLayout out[9]) {
    int n = 0, sp_ok = l->tp > 1 && l->seq % l->tp == 0;
    for (int sp = 0; sp <= 2 * sp_ok; sp++)
        for (int r = RECOMPUTE_NONE; r <= RECOMPUTE_FULL; r++) {
            out[n] = *l;
            out[n].sp = sp >= 1;
            out[n].sp_regather = sp == 2;
            out[n++].recompute = (Recompute)r;
        }
    return n;
}

/* --activations --csv: each layout's activation bytes per rank by part
 * (model.h's ActPart, and the token ids); they add up to memory.csv's
 * activations peak. */
static void print_activation_parts_csv(const GPTConfig *cfg, const MemLayout *l) {
    printf("layout,part,bytes\n");
    MemLayout v[9];
    for (int i = 0, n = activation_layouts(l, v); i < n; i++) {
        const GPTLayout m = memplan_model_layout(cfg, &v[i]);
        size_t parts[ACT_NUM_PARTS];
        gpt_activation_parts(&m, v[i].rows, v[i].seq, parts);
        char label[64];
        tp_label(label, sizeof label, &v[i]);
        for (int p = 0; p < ACT_NUM_PARTS; p++)
            printf("%s,%s,%zu\n", label, gpt_activation_part_name((ActPart)p), parts[p]);
        printf("%s,tokens,%zu\n", label, sizeof(int) * gpt_activation_ints(v[i].rows, v[i].seq));
    }
}

static void print_tp_row(const GPTConfig *cfg, const MemLayout *l) {
    MemPlan plan;
    memplan_predict(cfg, l, &plan);
    char label[64];
    tp_label(label, sizeof label, l);
    printf("  %-26s", label);
    size_t total = 0;
    for (int c = 0; c < MEM_NUM_CATEGORIES; c++) {
        printf(" %11.3f", plan.peak[c] / 1048576.0);
        total += plan.peak[c];
    }
    printf(" %11.3f\n", total / 1048576.0);
}

static void print_traffic(const char *name, const CommCount *f, const CommCount *b) {
    if (f->calls + b->calls == 0) return;
    printf("TP %s per rank and micro-batch (payload bytes, any tp > 1):\n", name);
    printf("  forward   %4zu calls %12zu bytes\n", f->calls, f->bytes);
    printf("  backward  %4zu calls %12zu bytes\n", b->calls, b->bytes);
}

static void print_tp_plan(const char *name, const GPTConfig *cfg, const MemLayout *l,
                          int activations) {
    GPTLayout layout = gpt_layout_make(cfg, l->tp, 0);
    printf("config %s, tp %d x dp %d: per rank %zu of %zu parameters (%d of %d heads, %d of %d "
           "vocabulary rows, %d padding), micro-batch %d x %d per rank; peak MiB per rank\n",
           name, l->tp, l->ranks, layout.num_params, gpt_num_params(cfg), layout.n_head,
           cfg->n_head, layout.vocab_rows, layout.vocab_padded,
           layout.vocab_padded - cfg->vocab_size, l->rows, l->seq);
    printf("  %-26s", "layout");
    for (int c = 0; c < MEM_NUM_CATEGORIES; c++) printf(" %11s", mem_category_name((MemCategory)c));
    printf(" %11s\n", "total");
    print_tp_row(cfg, l);
    if (activations) {
        /* lab 05: every way of keeping activations at this degree */
        printf("activations by layout (lab 05: --sp needs --seq divisible by --tp):\n");
        MemLayout v[9];
        for (int i = 0, n = activation_layouts(l, v); i < n; i++) print_tp_row(cfg, &v[i]);
    }
    if (l->tp == 1) return;
    TpTraffic fwd, bwd;
    memplan_tp_comm(cfg, l, &fwd, &bwd);
    print_traffic("all-reduces", &fwd.allreduce, &bwd.allreduce);
    print_traffic("reduce-scatters", &fwd.reduce_scatter, &bwd.reduce_scatter);
    print_traffic("all-gathers", &fwd.allgather, &bwd.allgather);
}

/* ---- lab 07: context parallelism (train_cp) ------------------------------- */

/* train_cp's MemLayout (apps/train_cp.c): DDP over dp, the rank's T = Tg / cp
 * positions, TP's split layers only when tp > 1 */
static MemLayout cp_layout(int tp, int cp, CpAlgo algo, int dp, int rows, int seq) {
    return (MemLayout){.zero_stage = 0, .ranks = dp, .rows = rows, .seq = seq / cp,
                       .tp = tp > 1 ? tp : 0, .cp = cp, .cp_algo = algo};
}

static size_t plan_total(const MemPlan *plan) {
    size_t total = 0;
    for (int c = 0; c < MEM_NUM_CATEGORIES; c++) total += plan->peak[c];
    return total;
}

static size_t cp_total_bytes(const GPTConfig *cfg, const MemLayout *l) {
    MemPlan plan;
    memplan_predict(cfg, l, &plan);
    return plan_total(&plan);
}

/* "cp4-ring", "cp2-ulysses-tp2": the layout column */
static void cp_label(char *out, size_t n, const MemLayout *l, int tp) {
    char tps[16] = "";
    if (tp > 1) snprintf(tps, sizeof tps, "-tp%d", tp);
    snprintf(out, n, "cp%d-%s%s", l->cp, gpt_cp_algo_name(l->cp_algo), tps);
}

/* The attention terms that grow as the square of the sequence, per rank
 * (floats): lab 00's probabilities B NH' T^2 per block without CP, kept
 * for the backward pass in every block and once more as its gradient in
 * the workspace; the ring keeps only its lse (B NH' T), none; Ulysses
 * computes whole sequences of NH' / cp heads: B NH'/cp Tg^2, as lab 00. */
static size_t cp_square_floats(const GPTLayout *m, int B, int T) {
    const size_t Tg = (size_t)m->cp * T;
    if (m->cp > 1 && m->cp_algo != CP_ULYSSES) return 0;
    return (size_t)B * (m->n_head / m->cp) * Tg * Tg;
}

static void print_cp_plan(const char *name, const GPTConfig *cfg, const MemLayout *l, int tp,
                          int accum, int csv) {
    MemPlan plan;
    memplan_predict(cfg, l, &plan);
    char label[64];
    cp_label(label, sizeof label, l, tp);
    if (csv) {
        printf("layout,category,states_bytes,peak_bytes\n");
        for (int c = 0; c < MEM_NUM_CATEGORIES; c++)
            printf("%s,%s,%zu,%zu\n", label, mem_category_name((MemCategory)c), plan.states[c],
                   plan.peak[c]);
        return;
    }
    const GPTLayout m = memplan_model_layout(cfg, l);
    const int Tg = l->seq * l->cp;
    printf("config %s (ctx %d), cp %d x tp %d x dp %d, %s attention: %d of %d positions of each "
           "sequence per rank%s, micro-batch %d x %d per rank; peak MiB per rank\n",
           name, cfg->ctx_len, l->cp, tp, l->ranks, gpt_cp_algo_name(l->cp_algo), l->seq, Tg,
           l->cp > 1 && l->cp_algo == CP_ZIGZAG ? " (2 chunks)" : "", l->rows, l->seq);
    printf("  %-26s", "layout");
    for (int c = 0; c < MEM_NUM_CATEGORIES; c++) printf(" %11s", mem_category_name((MemCategory)c));
    printf(" %11s\n", "total");
    printf("  %-26s", label);
    for (int c = 0; c < MEM_NUM_CATEGORIES; c++) printf(" %11.3f", plan.peak[c] / 1048576.0);
    printf(" %11.3f\n", plan_total(&plan) / 1048576.0);
    const size_t sq = cp_square_floats(&m, l->rows, l->seq), L = cfg->n_layer;
    printf("attention terms in the square of the sequence, per rank: activations %zu bytes "
           "(%s), workspace %zu bytes\n",
           sizeof(float) * L * sq,
           l->cp == 1                   ? "L B NH' T^2: lab 00's probabilities"
           : l->cp_algo == CP_ULYSSES ? "L B NH'/cp Tg^2: whole sequences of its heads"
                                        : "none: the ring keeps B NH' T of lse",
           sizeof(float) * sq);
    if (l->cp == 1) return;
    CpTraffic f, b;
    memplan_cp_comm(cfg, l, &f, &b);
    printf("CP traffic per rank and micro-batch (payload bytes, as comm.csv counts them):\n");
    const struct {
        const char *name;
        CommCount f, b;
    } ops[] = {{"ring sends", f.send, b.send},
               {"all-to-alls", f.alltoall, b.alltoall},
               {"loss all-reduces", f.allreduce, b.allreduce}};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        if (ops[i].f.calls + ops[i].b.calls == 0) continue;
        printf("  %-17s forward %4zu calls %12zu bytes, backward %4zu calls %12zu bytes\n",
               ops[i].name, ops[i].f.calls, ops[i].f.bytes, ops[i].b.calls, ops[i].b.bytes);
    }
    /* what leaves the rank: every byte a ring sends; of an all-to-all's
     * buffer all but the 1/cp kept; of a ring all-reduce 2 (cp-1)/cp */
    const double P = l->cp;
    const double wire = (double)(f.send.bytes + b.send.bytes)
                        + (P - 1) / P * (double)(f.alltoall.bytes + b.alltoall.bytes)
                        + 2 * (P - 1) / P * (double)(f.allreduce.bytes + b.allreduce.bytes);
    printf("  leaving each rank per step (%d micro-batch%s): %.0f bytes\n", accum,
           accum == 1 ? "" : "es", accum * wire);
}

/* --fit: the longest Tg, a multiple of 2 cp (every algorithm's split) up to
 * the context, whose total fits the budget; memory grows with Tg, so the
 * first that does not fit ends the search. Returns 0 when none fits. */
static int cp_fit_seq(const GPTConfig *cfg, MemLayout l, size_t budget, size_t *peak,
                      int *next, size_t *next_peak) {
    const int step = 2 * l.cp;
    int best = 0;
    *peak = *next_peak = 0;
    *next = 0;
    for (int seq = step; seq <= cfg->ctx_len; seq += step) {
        l.seq = seq / l.cp;
        const size_t total = cp_total_bytes(cfg, &l);
        if (total > budget) {
            *next = seq;
            *next_peak = total;
            break;
        }
        best = seq;
        *peak = total;
    }
    return best;
}

static void print_cp_fit(const GPTConfig *cfg, const MemLayout *l, double budget_mib, int seq,
                         size_t peak, int next, size_t next_peak, int csv) {
    const size_t budget = (size_t)(budget_mib * 1048576.0);
    if (csv) {
        printf("cp,algo,budget_bytes,seq,peak_bytes,next_seq,next_peak_bytes\n");
        printf("%d,%s,%zu,%d,%zu,%d,%zu\n", l->cp, gpt_cp_algo_name(l->cp_algo), budget, seq,
               peak, next, next_peak);
        return;
    }
    printf("memplan: the longest sequence within %.3f MiB per rank (cp %d, %s; multiples of %d "
           "up to ctx %d): ", budget_mib, l->cp, gpt_cp_algo_name(l->cp_algo), 2 * l->cp,
           cfg->ctx_len);
    if (seq == 0) printf("none (%d needs %.3f MiB)\n", next, next_peak / 1048576.0);
    else if (next == 0) printf("%d, %.3f MiB (the context; longer needs --ctx)\n", seq,
                               peak / 1048576.0);
    else printf("%d, %.3f MiB; %d would need %.3f MiB\n", seq, peak / 1048576.0, next,
                next_peak / 1048576.0);
}

/* ---- issue 22: --advise, the layouts that fit, ranked by step time -------- */

/* What --advise searches: the cluster, the batch, and each dimension's
 * values (a flag given pins its dimension to that one value) */
typedef struct {
    CostCluster cluster;
    int batch, seq, top, csv;
    size_t bucket_bytes;
    double headroom;       /* GiB, or with headroom_share a fraction of the memory */
    int headroom_share;
    int dp_overlap;
    int tp, cp, pp, micro_batches, chunks, zero, ep;  /* 0: searched */
    int sp;                /* -1 searched, 0 off, 1 on */
    int recompute;         /* -1 searched, else a Recompute */
    int cp_algo;           /* -1 searched (zigzag and Ulysses), else a CpAlgo */
    char schedule[32];     /* "" searched */
} AdviseOptions;

typedef struct {
    CostLayout layout;
    const char *schedule;  /* "-" without a pipeline */
    size_t peak;           /* bytes, the largest stage's */
    StepCost cost;
} Candidate;

/* One reason a layout is out, how many layouts it put out, and the first */
typedef struct {
    char why[256], example[120];
    int count;
} Rejection;

typedef struct {
    Candidate *fit;
    int n_fit, cap_fit, n_tried;
    Rejection reasons[64];
    int n_reasons;
    /* schedules built once per (name, p, m, v) */
    struct { char name[32]; int p, m, v; Schedule *s; } *schedules;
    int n_schedules, cap_schedules;
} Advice;

static void layout_label(char *out, size_t n, const Candidate *c) {
    const MemLayout *l = &c->layout.mem;
    snprintf(out, n, "tp %d cp %d pp %d dp %d %s m %d %s zero %d", l->tp > 1 ? l->tp : 1,
             l->cp > 1 ? l->cp : 1, l->pp > 1 ? l->pp : 1, c->layout.dp, c->schedule,
             c->layout.micro_batches, gpt_recompute_name(l->recompute), l->zero_stage);
}

static void reject(Advice *a, const Candidate *c, const char *why) {
    int i = 0;
    while (i < a->n_reasons && strcmp(a->reasons[i].why, why) != 0) i++;
    if (i == a->n_reasons) {
        if (a->n_reasons == (int)(sizeof a->reasons / sizeof a->reasons[0])) i--;  /* the rest */
        else a->n_reasons++;
        snprintf(a->reasons[i].why, sizeof a->reasons[i].why, "%s", why);
        layout_label(a->reasons[i].example, sizeof a->reasons[i].example, c);
        a->reasons[i].count = 0;
    }
    a->reasons[i].count++;
}

static const Schedule *advice_schedule(Advice *a, const char *name, int p, int m, int v) {
    for (int i = 0; i < a->n_schedules; i++)
        if (strcmp(a->schedules[i].name, name) == 0 && a->schedules[i].p == p &&
            a->schedules[i].m == m && a->schedules[i].v == v)
            return a->schedules[i].s;
    if (a->n_schedules == a->cap_schedules) {
        a->cap_schedules = a->cap_schedules ? 2 * a->cap_schedules : 16;
        a->schedules = realloc(a->schedules, a->cap_schedules * sizeof *a->schedules);
        CHECK(a->schedules, "out of memory (%d schedules)", a->cap_schedules);
    }
    Schedule *s = schedule_by_name(name, p, m, v);
    a->schedules[a->n_schedules].s = s;
    snprintf(a->schedules[a->n_schedules].name, sizeof a->schedules[0].name, "%s", name);
    a->schedules[a->n_schedules].p = p;
    a->schedules[a->n_schedules].m = m;
    a->schedules[a->n_schedules++].v = v;
    return s;
}

/* Why the kit can't run this layout (its programs' own checks, train_4d's
 * order), or NULL */
static const char *layout_rule(const GPTConfig *cfg, const Candidate *c, int Tg, char *why,
                               size_t n) {
    const MemLayout *l = &c->layout.mem;
    const int tp = l->tp > 1 ? l->tp : 1, pp = l->pp > 1 ? l->pp : 1, v = l->chunks;
    if (pp > 1 && pipe_schedule_problem(c->schedule, pp, c->layout.micro_batches, v, why, n))
        return why;
    const char *p = gpt_layout_problem(cfg, tp);
    if (!p) p = gpt_pipeline_problem(cfg, pp, v, pipe_schedule_dual(c->schedule));
    if (!p) p = gpt_context_problem(cfg, tp, l->cp, l->cp_algo, Tg);
    if (!p) p = gpt_activation_problem(cfg, tp, l->sp, l->recompute, l->seq);
    if (!p && l->ep > 1) p = gpt_expert_problem(cfg, l->ep);
    if (!p && l->cp > 1 && l->recompute == RECOMPUTE_SELECTIVE &&
        cfg->attention == ATTENTION_MATERIALIZED)
        p = "selective recomputation rebuilds the attention probabilities, which context "
            "parallelism never keeps";
    if (!p && pp > 1 && strcmp(c->schedule, "zb-h1") == 0 &&
        (l->sp || l->recompute == RECOMPUTE_FULL))
        p = "zb-h1 keeps each layer's input until its weight gradient: not with SP or full "
            "recomputation";
    return p;
}

/* The largest stage's peak (the first and the last stage hold the most:
 * the embedding and the most micro-batches in flight, the head and its
 * logits; a middle stage holds less of both), and its largest category;
 * 0 as soon as a stage is over the budget. The model states come first,
 * without the schedule: simulating a long schedule's activations is the
 * search's slowest part. */
static size_t stage_peak(const GPTConfig *cfg, const MemLayout *l, double budget,
                         MemCategory *largest) {
    const int pp = l->pp > 1 ? l->pp : 1, ends[2] = {0, pp - 1};
    size_t best = 0;
    for (int e = 0; e < 2; e++) {
        MemLayout at = *l;
        at.pp_rank = ends[e];
        at.schedule = NULL;
        MemPlan plan;
        memplan_predict(cfg, &at, &plan);
        size_t states = 0;
        for (int c = 0; c < MEM_NUM_CATEGORIES; c++) states += plan.states[c];
        if (l->schedule) {
            at.schedule = l->schedule;
            if ((double)states <= budget) memplan_predict(cfg, &at, &plan);
        }
        *largest = MEM_PARAMS;
        for (int c = 0; c < MEM_NUM_CATEGORIES; c++)
            if (plan.peak[c] > plan.peak[*largest]) *largest = (MemCategory)c;
        if ((double)plan_total(&plan) > budget) return 0;
        if (plan_total(&plan) > best) best = plan_total(&plan);
    }
    return best;
}

/* The bytes a layout may plan on a device: --gpu-mem less --headroom */
static double advise_budget(const AdviseOptions *o) {
    const double m = o->cluster.mem_bytes;
    return m - (o->headroom_share ? o->headroom * m : o->headroom * 1073741824.0);
}

static void consider(Advice *a, const GPTConfig *cfg, const AdviseOptions *o, Candidate c) {
    a->n_tried++;
    MemLayout *l = &c.layout.mem;
    char why[256];
    const char *rule = layout_rule(cfg, &c, o->seq, why, sizeof why);
    if (rule) {
        reject(a, &c, rule);
        return;
    }
    if (l->pp > 1)
        l->schedule = advice_schedule(a, c.schedule, l->pp, c.layout.micro_batches, l->chunks);
    MemCategory largest = MEM_PARAMS;
    c.peak = stage_peak(cfg, l, advise_budget(o), &largest);
    if (c.peak == 0) {
        snprintf(why, sizeof why, "memory: over %.4g GiB per device (%s), %s the largest part",
                 advise_budget(o) / 1073741824.0, o->headroom > 0 ? "after the headroom" :
                 "no headroom", mem_category_name(largest));
        reject(a, &c, why);
        return;
    }
    cost_step(cfg, &c.layout, &o->cluster, &c.cost);
    if (a->n_fit == a->cap_fit) {
        a->cap_fit = a->cap_fit ? 2 * a->cap_fit : 64;
        a->fit = realloc(a->fit, a->cap_fit * sizeof *a->fit);
        CHECK(a->fit, "out of memory (%d layouts)", a->cap_fit);
    }
    a->fit[a->n_fit++] = c;
}

/* the value pinned, or every value of a dimension the loops below try */
static int pinned_or(int pin, int value) { return pin == 0 || pin == value; }

/* The recomputations, the CP algorithms, each EP degree that divides dp
 * and the experts: each of c's variants. SP (when tp > 1) and ZeRO-1
 * (when dp x cp > 1) are always on unless pinned off: each moves the same
 * bytes as what it replaces (reduce-scatter + all-gather for an
 * all-reduce) and holds less, so the variants without them never rank
 * higher. */
static void search_options(Advice *a, const GPTConfig *cfg, const AdviseOptions *o, Candidate c) {
    MemLayout *l = &c.layout.mem;
    const int tp = l->tp > 1 ? l->tp : 1, dp = c.layout.dp, cp = l->cp;
    l->sp = o->sp >= 0 ? o->sp : tp > 1 && !cfg->n_experts;  /* MoE: no SP (layout.h) */
    l->zero_stage = o->zero >= 0 ? o->zero : dp * cp > 1;
    l->ranks = l->zero_stage ? dp * cp : dp;  /* ZeRO-1 shards over dp x cp */
    for (int r = RECOMPUTE_NONE; r <= RECOMPUTE_FULL; r++)
        for (int alg = 0; alg < (cp > 1 && o->cp_algo < 0 ? 2 : 1); alg++)
            for (int ep = 1; ep <= dp; ep++) {
                if ((o->recompute >= 0 && r != o->recompute) || dp % ep || !pinned_or(o->ep, ep) ||
                    (ep > 1 && (!cfg->n_experts || cfg->n_experts % ep)))
                    continue;
                l->recompute = (Recompute)r;
                l->cp_algo = o->cp_algo >= 0 ? (CpAlgo)o->cp_algo : alg ? CP_ULYSSES : CP_ZIGZAG;
                l->ep = ep;
                consider(a, cfg, o, c);
            }
}

/* The schedules --advise ranks (two chunks for the interleaved one):
 * lab 06's core; its extensions run in train_pp alone */
static const char *const ADVISED_SCHEDULES[] = {"1f1b", "gpipe", "interleaved", "zb-h1"};
static int advised_schedule(const char *name) {
    for (int s = 0; s < 4; s++)
        if (strcmp(name, ADVISED_SCHEDULES[s]) == 0) return 1;
    return 0;
}

/* For degrees tp x cp x pp (dp the rest): m micro-batches per step
 * dividing each DP rank's sequences (powers of two from max(pp, 1) to
 * 8 max(pp, 1): fewer is mostly bubble, more only costs messages), each
 * schedule */
static void search_degrees(Advice *a, const GPTConfig *cfg, const AdviseOptions *o, int tp, int cp,
                           int pp) {
    const char *const *schedules = ADVISED_SCHEDULES;
    const int dp = o->cluster.gpus_per_node * o->cluster.nodes / (tp * cp * pp);
    const int low = o->micro_batches ? o->micro_batches : pp;
    const int high = o->micro_batches ? o->micro_batches : 8 * pp;
    for (int m = low; m <= high; m *= 2) {
        if ((o->batch / dp) % m) continue;
        for (int s = 0; s < (pp > 1 ? 4 : 1); s++) {
            const char *name = pp > 1 ? schedules[s] : "-";
            if (o->schedule[0] && strcmp(o->schedule, name) != 0) continue;
            Candidate c = {.schedule = name};
            c.layout = (CostLayout){
                .mem = {.rows = o->batch / (dp * m), .seq = o->seq / cp, .tp = tp > 1 ? tp : 0,
                        .pp = pp, .chunks = o->chunks ? o->chunks : s == 2 ? 2 : 1, .cp = cp},
                .dp = dp, .micro_batches = m, .bucket_bytes = o->bucket_bytes,
                .dp_overlap = o->dp_overlap};
            search_options(a, cfg, o, c);
        }
    }
}

/* Why no variant of degrees tp x cp x pp can run (the rules of the
 * degrees alone, checked once for all their variants), or NULL */
static const char *degrees_rule(const GPTConfig *cfg, const AdviseOptions *o, int tp, int cp, int pp) {
    const char *p = gpt_layout_problem(cfg, tp);
    if (!p) p = gpt_pipeline_problem(cfg, pp, 1, 0);
    if (!p) p = gpt_context_problem(cfg, tp, cp, CP_ZIGZAG, o->seq);
    if (!p && o->batch % (o->cluster.gpus_per_node * o->cluster.nodes / (tp * cp * pp)))
        p = "dp does not divide --batch (every DP rank takes whole sequences)";
    return p;
}

/* Every tp x cp x pp x dp = W (TP within a node, CP at most 32, unless
 * pinned: longer rings than published runs use are not tried) */
static void search(Advice *a, const GPTConfig *cfg, const AdviseOptions *o) {
    const int W = o->cluster.gpus_per_node * o->cluster.nodes;
    for (int tp = 1; tp <= W; tp++)
        for (int cp = 1; W % tp == 0 && cp <= W / tp; cp++)
            for (int pp = 1; (W / tp) % cp == 0 && pp <= W / (tp * cp); pp++) {
                if ((W / (tp * cp)) % pp || !pinned_or(o->tp, tp) || !pinned_or(o->cp, cp) ||
                    !pinned_or(o->pp, pp) || (!o->tp && tp > o->cluster.gpus_per_node) ||
                    (!o->cp && cp > 32))
                    continue;
                const char *why = degrees_rule(cfg, o, tp, cp, pp);
                if (!why) {
                    search_degrees(a, cfg, o, tp, cp, pp);
                    continue;
                }
                Candidate c = {.schedule = pp > 1 ? "any" : "-", .layout = {.dp = W / (tp * cp * pp)}};
                c.layout.mem = (MemLayout){.tp = tp, .cp = cp, .pp = pp};
                a->n_tried++;
                reject(a, &c, why);
            }
}

static int by_count(const void *x, const void *y) {
    return ((const Rejection *)y)->count - ((const Rejection *)x)->count;
}

static int by_step_time(const void *x, const void *y) {
    const double a = ((const Candidate *)x)->cost.step, b = ((const Candidate *)y)->cost.step;
    return (a > b) - (a < b);
}

/* The model's useful FLOPs (config.h's 6 Phi' + 12 L C T a token, no
 * recomputation) over what the W devices could do in the step */
static double model_flops_utilization(const GPTConfig *cfg, const AdviseOptions *o, double step) {
    const double W = (double)o->cluster.gpus_per_node * o->cluster.nodes;
    return gpt_flops_per_token(cfg, o->seq) * o->batch * o->seq / (W * o->cluster.flops * step);
}

/* "interleaved(v2)": the schedule and its chunks per rank */
static void schedule_label(const Candidate *c, char *s, size_t size) {
    if (c->layout.mem.chunks > 1) snprintf(s, size, "%s(v%d)", c->schedule, c->layout.mem.chunks);
    else snprintf(s, size, "%s", c->schedule);
}

/* seconds as milliseconds, or "-" for a group that moves nothing */
static const char *ms_or_dash(char *buf, double seconds) {
    if (seconds == 0) return "-";
    snprintf(buf, 16, "%.1f", 1e3 * seconds);
    return buf;
}

static const char *link_name(int intra) { return intra ? "intra" : "inter"; }

static void print_advice(const char *name, const GPTConfig *cfg, const AdviseOptions *o,
                         const Advice *a) {
    const int n = a->n_fit < o->top ? a->n_fit : o->top;
    if (o->csv) {
        printf("rank,tp,cp,pp,dp,ep,schedule,chunks,micro_batches,rows,sp,recompute,zero,cp_algo,"
               "peak_bytes,step_s,compute_s,bubble,tp_s,cp_s,pp_send_s,dp_s,dp_exposed_s,mfu,"
               "tp_link,cp_link,dp_link,pp_link\n");
        for (int i = 0; i < n; i++) {
            const Candidate *c = &a->fit[i];
            const MemLayout *l = &c->layout.mem;
            const StepCost *k = &c->cost;
            printf("%d,%d,%d,%d,%d,%d,%s,%d,%d,%d,%d,%s,%d,%s,%zu,%.6g,%.6g,%.4f,%.6g,%.6g,%.6g,"
                   "%.6g,%.6g,%.4f,%s,%s,%s,%s\n",
                   i + 1, l->tp > 1 ? l->tp : 1, l->cp, l->pp, c->layout.dp, l->ep, c->schedule,
                   l->chunks, c->layout.micro_batches, l->rows, l->sp,
                   gpt_recompute_name(l->recompute), l->zero_stage, gpt_cp_algo_name(l->cp_algo),
                   c->peak, k->step, k->compute, k->bubble_fraction, k->tp, k->cp, k->pp_send, k->dp,
                   k->dp_exposed, model_flops_utilization(cfg, o, k->step), link_name(k->tp_intra),
                   link_name(k->cp_intra), link_name(k->dp_intra), link_name(k->pp_intra));
        }
        return;
    }
    const CostCluster *cl = &o->cluster;
    printf("memplan --advise: config %s (%d layers, C %d, %d heads, vocab %d, ctx %d%s), %zu "
           "parameters; batch %d x %d tokens\n",
           name, cfg->n_layer, cfg->n_embd, cfg->n_head, cfg->vocab_size, cfg->ctx_len,
           cfg->n_experts ? ", MoE" : "", gpt_num_params(cfg), o->batch, o->seq);
    printf("cluster: %d node%s x %d GPUs, %.4g TFLOP/s and %.4g GiB each (%.4g GiB planned, the "
           "rest --headroom); intra-node %.4g GB/s %.3g us, inter-node %.4g GB/s %.3g us; DP "
           "buckets %.4g MB%s\n",
           cl->nodes, cl->nodes == 1 ? "" : "s", cl->gpus_per_node, cl->flops / 1e12,
           cl->mem_bytes / 1073741824.0, advise_budget(o) / 1073741824.0, 1e-9 / cl->intra.beta,
           cl->intra.alpha * 1e6, 1e-9 / cl->inter.beta, cl->inter.alpha * 1e6,
           o->bucket_bytes / 1e6,
           o->dp_overlap ? ", overlapped with the backward" : ", after the backward");
    printf("%d layouts tried, %d fit; the fastest %d by predicted step time (memory: %s states "
           "and activations, %s attention, the largest stage):\n", a->n_tried, a->n_fit, n,
           precision_name((Precision)cfg->precision), gpt_attention_name(cfg->attention));
    int width = (int)strlen("schedule");
    for (int i = 0; i < n; i++) {
        char s[32];
        schedule_label(&a->fit[i], s, sizeof s);
        if ((int)strlen(s) > width) width = (int)strlen(s);
    }
    printf("  %3s %3s %3s %3s %5s %3s %-*s %4s %4s %2s %-9s %4s %-7s %7s %9s %10s %6s %8s %8s %8s "
           "%5s\n", "#", "tp", "cp", "pp", "dp", "ep", width, "schedule", "m", "rows", "sp",
           "recompute", "zero", "cp-algo", "mem GiB", "step ms", "compute ms", "bubble", "tp ms",
           "cp ms", "dp ms", "MFU");
    for (int i = 0; i < n; i++) {
        const Candidate *c = &a->fit[i];
        const MemLayout *l = &c->layout.mem;
        const StepCost *k = &c->cost;
        char s[32], tp[16], cp[16], dp[16];
        schedule_label(c, s, sizeof s);
        printf("  %3d %3d %3d %3d %5d %3d %-*s %4d %4d %2s %-9s %4d %-7s %7.2f %9.1f %10.1f "
               "%5.1f%% %8s %8s %8s %4.0f%%\n",
               i + 1, l->tp > 1 ? l->tp : 1, l->cp, l->pp, c->layout.dp, l->ep, width, s,
               c->layout.micro_batches, l->rows, l->sp ? "on" : "-",
               gpt_recompute_name(l->recompute), l->zero_stage,
               l->cp > 1 ? gpt_cp_algo_name(l->cp_algo) : "-", c->peak / 1073741824.0,
               1e3 * k->step, 1e3 * k->compute, 100 * k->bubble_fraction, ms_or_dash(tp, k->tp),
               ms_or_dash(cp, k->cp), ms_or_dash(dp, k->dp_exposed),
               100 * model_flops_utilization(cfg, o, k->step));
    }
    if (a->n_reasons == 0) return;
    const int shown = a->n_reasons < 8 ? a->n_reasons : 8;
    printf("left out (%d layouts), the %d most common reasons, with the first layout each put "
           "out:\n", a->n_tried - a->n_fit, shown);
    for (int i = 0; i < shown; i++)
        printf("  %6d  %s (e.g. %s)\n", a->reasons[i].count, a->reasons[i].why,
               a->reasons[i].example);
}

static void advise(const char *name, const GPTConfig *cfg, const AdviseOptions *o) {
    Advice a = {0};
    search(&a, cfg, o);
    qsort(a.fit, a.n_fit, sizeof *a.fit, by_step_time);
    qsort(a.reasons, a.n_reasons, sizeof *a.reasons, by_count);
    print_advice(name, cfg, o, &a);
    for (int i = 0; i < a.n_schedules; i++) schedule_free(a.schedules[i].s);
    free(a.schedules);
    free(a.fit);
}

static const struct option g_options[] = {
    {"config", required_argument, 0, 'c'}, {"ranks", required_argument, 0, 'n'},
    {"batch", required_argument, 0, 'b'},  {"grad-accum", required_argument, 0, 'k'},
    {"seq", required_argument, 0, 't'},    {"params", required_argument, 0, 'p'},
    {"csv", no_argument, 0, 'v'},          {"help", no_argument, 0, 'h'},
    {"overlap-rs", no_argument, 0, 'o'},   {"tp", required_argument, 0, 'T'},
    {"sp", no_argument, 0, 'S'},           {"recompute", required_argument, 0, 'R'},
    {"activations", no_argument, 0, 'A'},  {"sp-regather", no_argument, 0, 'G'},
    {"cp", required_argument, 0, 'P'},     {"cp-algo", required_argument, 0, 'a'},
    {"ctx", required_argument, 0, 'x'},    {"fit", required_argument, 0, 'F'},
    {"n-layer", required_argument, 0, 'L'}, {"n-head", required_argument, 0, 'H'},
    {"n-embd", required_argument, 0, 'E'},  {"vocab", required_argument, 0, 'V'},
    {"experts", required_argument, 0, 'X'}, {"top-k", required_argument, 0, 'K'},
    {"moe-every", required_argument, 0, 'M'}, {"advise", no_argument, 0, 'D'},
    {"gpus-per-node", required_argument, 0, 1}, {"nodes", required_argument, 0, 2},
    {"gpu-mem", required_argument, 0, 3},   {"flops", required_argument, 0, 4},
    {"intra-bw", required_argument, 0, 5},  {"inter-bw", required_argument, 0, 6},
    {"intra-lat", required_argument, 0, 7}, {"inter-lat", required_argument, 0, 8},
    {"bucket-mb", required_argument, 0, 9}, {"no-overlap", no_argument, 0, 10},
    {"top", required_argument, 0, 11},      {"pp", required_argument, 0, 12},
    {"ep", required_argument, 0, 13},       {"micro-batches", required_argument, 0, 14},
    {"schedule", required_argument, 0, 15}, {"chunks", required_argument, 0, 16},
    {"zero", required_argument, 0, 17},     {"no-sp", no_argument, 0, 18},
    {"precision", required_argument, 0, 19}, {"fp32-grads", no_argument, 0, 20},
    {"attention", required_argument, 0, 21}, {"headroom", required_argument, 0, 22},
    {"dp-shard", required_argument, 0, 23}, {"offload", no_argument, 0, 24},
    {"host-bw", required_argument, 0, 25},  {"host-lat", required_argument, 0, 26},
    {"cpu-adam", required_argument, 0, 27}, {0, 0, 0, 0}};

/* The command line: 0 (or "") where a flag was not given. The layout's
 * flags are read by the trainers' parser (parallel_flags.h, into flags:
 * the same values and bounds), kept here as given: tp and cp 0 mean none
 * (plan the ZeRO layouts, or the TP ones), --advise's 0 a searched
 * dimension. */
typedef struct {
    char config[32];
    int ranks, ranks_given, batch, accum, seq, csv, overlap_rs, activations, ctx;
    int dp_shard;  /* --dp-shard K: ZeRO's group (0: every rank) */
    int offload;   /* --offload: ZeRO-2/3's optimizer in host memory */
    double host_bw, host_lat, cpu_adam;  /* --host-bw GB/s, --host-lat us, --cpu-adam G/s */
    int host_given;                      /* one of those given */
    double phi, fit_mib;
    ParallelFlags flags;
    int tp, sp, sp_regather, no_sp, cp;
    Recompute recompute;
    int recompute_given;
    int fp32_grads;
    int attention;
    CpAlgo algo;
    int algo_given;
    int advise, pinned;  /* --advise; a dimension of its search pinned */
    int sizes[7];  /* --n-layer --n-head --n-embd --vocab --experts --top-k --moe-every */
    Precision precision;
    AdviseOptions ao;
} Args;

/* A layout flag, through the trainers' parser: the value it took */
static ParallelFlags *layout_flag(Args *a, const char *name, const char *arg) {
    parallel_flags_set(&a->flags, name, arg);
    return &a->flags;
}

/* The options --advise alone takes: the cluster, the search's pins */
static void parse_advise_option(int c, const char *arg, Args *a) {
    AdviseOptions *ao = &a->ao;
    switch (c) {
    case 1: ao->cluster.gpus_per_node = (int)cli_int("--gpus-per-node", arg, 1, 1024); break;
    case 2: ao->cluster.nodes = (int)cli_int("--nodes", arg, 1, 1 << 16); break;
    case 3: ao->cluster.mem_bytes = cli_double("--gpu-mem", arg, 1e-6, 1e6) * 1073741824.0; break;
    case 4: ao->cluster.flops = cli_double("--flops", arg, 1e-9, 1e9) * 1e12; break;
    case 5: ao->cluster.intra.beta = 1e-9 / cli_double("--intra-bw", arg, 1e-6, 1e6); break;
    case 6: ao->cluster.inter.beta = 1e-9 / cli_double("--inter-bw", arg, 1e-6, 1e6); break;
    case 7: ao->cluster.intra.alpha = 1e-6 * cli_double("--intra-lat", arg, 0, 1e6); break;
    case 8: ao->cluster.inter.alpha = 1e-6 * cli_double("--inter-lat", arg, 0, 1e6); break;
    case 9: ao->bucket_bytes = (size_t)(1e6 * cli_double("--bucket-mb", arg, 1e-3, 1e6)); break;
    case 10: ao->dp_overlap = 0; break;
    case 22: {
        const size_t n = strlen(arg);
        ao->headroom_share = n > 0 && arg[n - 1] == '%';
        char number[64];
        snprintf(number, sizeof number, "%.*s", (int)(n - ao->headroom_share), arg);
        ao->headroom = ao->headroom_share ? cli_double("--headroom", number, 0, 99.9) / 100
                                          : cli_double("--headroom", arg, 0, 1e6);
        break;
    }
    case 11: ao->top = (int)cli_int("--top", arg, 1, 1 << 20); break;
    case 12: ao->pp = layout_flag(a, "pp", arg)->pp; a->pinned = 1; break;
    case 13: ao->ep = layout_flag(a, "ep", arg)->ep; a->pinned = 1; break;
    case 14: ao->micro_batches = layout_flag(a, "micro-batches", arg)->micro_batches; a->pinned = 1; break;
    case 15:
        snprintf(ao->schedule, sizeof ao->schedule, "%s", layout_flag(a, "schedule", arg)->schedule);
        if (!advised_schedule(ao->schedule))
            USER_ERROR("--advise ranks the schedules %s, %s, %s and %s: not --schedule %s (lab "
                       "06's extensions run in train_pp alone)", ADVISED_SCHEDULES[0],
                       ADVISED_SCHEDULES[1], ADVISED_SCHEDULES[2], ADVISED_SCHEDULES[3],
                       ao->schedule);
        a->pinned = 1;
        break;
    case 16: ao->chunks = layout_flag(a, "chunks", arg)->chunks; a->pinned = 1; break;
    case 17: ao->zero = (int)cli_int("--zero", arg, 0, 1); a->pinned = 1; break;
    default: a->no_sp = 1;  /* 18 */
    }
}

/* One option (getopt_long's c) into a; 0 when c is not one */
static int parse_option(int c, const char *arg, Args *a) {
    switch (c) {
    case 'c': cli_string(a->config, sizeof a->config, "--config", arg); break;
    case 'n': a->ranks = (int)cli_int("--ranks", arg, 1, 1 << 20); a->ranks_given = 1; break;
    case 'b': a->batch = (int)cli_int("--batch", arg, 1, 1 << 20); break;
    case 'k': a->accum = (int)cli_int("--grad-accum", arg, 1, 1 << 16); break;
    case 't': a->seq = (int)cli_int("--seq", arg, 1, 1 << 20); break;
    case 'p': a->phi = cli_double("--params", arg, 1.0, 1e15); break;
    case 'v': a->csv = 1; break;
    case 'o': a->overlap_rs = 1; break;
    case 23: a->dp_shard = (int)cli_int("--dp-shard", arg, 1, 1 << 20); break;
    case 24: a->offload = 1; break;
    case 25: a->host_bw = cli_double("--host-bw", arg, 1e-6, 1e6); a->host_given = 1; break;
    case 26: a->host_lat = cli_double("--host-lat", arg, 0, 1e6); a->host_given = 1; break;
    case 27: a->cpu_adam = cli_double("--cpu-adam", arg, 1e-9, 1e6); a->host_given = 1; break;
    case 'T': a->tp = layout_flag(a, "tp", arg)->tp; break;
    case 'S': a->sp = 1; break;
    case 'G': a->sp = a->sp_regather = 1; break;
    case 'A': a->activations = 1; break;
    case 'R': a->recompute = layout_flag(a, "recompute", arg)->recompute; a->recompute_given = 1; break;
    case 'P': a->cp = layout_flag(a, "cp", arg)->cp; break;
    case 'a': a->algo = layout_flag(a, "cp-algo", arg)->cp_algo; a->algo_given = 1; break;
    case 'x': a->ctx = (int)cli_int("--ctx", arg, 1, 1 << 20); break;
    case 'F': a->fit_mib = cli_double("--fit", arg, 1e-3, 1e12); break;
    case 'L': a->sizes[0] = (int)cli_int("--n-layer", arg, 1, 4096); break;
    case 'H': a->sizes[1] = (int)cli_int("--n-head", arg, 1, 4096); break;
    case 'E': a->sizes[2] = (int)cli_int("--n-embd", arg, 1, 1 << 17); break;
    case 'V': a->sizes[3] = (int)cli_int("--vocab", arg, 2, 65536); break;
    case 'X': a->sizes[4] = (int)cli_int("--experts", arg, 2, 1024); break;
    case 'K': a->sizes[5] = (int)cli_int("--top-k", arg, 1, 1024); break;
    case 'M': a->sizes[6] = (int)cli_int("--moe-every", arg, 1, 4096); break;
    case 'D': a->advise = 1; break;
    case 19:
        if (precision_parse(arg, &a->precision) != 0)
            USER_ERROR("--precision expects fp32, bf16 or fp16, got '%s'", arg);
        break;
    case 20: a->fp32_grads = 1; break;
    case 21:
        if (gpt_attention_parse(arg, &a->attention) != 0)
            USER_ERROR("--attention expects materialized or fused, got '%s'", arg);
        break;
    default:
        if ((c < 1 || c > 18) && c != 22) return 0;
        parse_advise_option(c, arg, a);
    }
    return 1;
}

/* The flags that belong to another mode than the one given */
static void check_combinations(Args *a) {
    if (a->fp32_grads && a->precision == PRECISION_FP32)
        USER_ERROR("--fp32-grads keeps fp32 gradients under --precision bf16 or fp16");
    if (!a->advise && (a->pinned || a->no_sp))
        USER_ERROR("--pp, --ep, --micro-batches, --schedule, --chunks, --zero and --no-sp pin "
                   "a dimension of --advise's search: give --advise");
    if (a->advise) {
        if (a->phi > 0 || a->ranks_given || a->overlap_rs || a->activations || a->fit_mib > 0 ||
            a->accum != 1 || a->sp_regather)
            USER_ERROR("--advise searches the layouts of the cluster: not with --params, --ranks, "
                       "--overlap-rs, --activations, --fit, --grad-accum or --sp-regather");
        if (a->sp && a->no_sp) USER_ERROR("--sp and --no-sp: give one of them");
        if (advise_budget(&a->ao) <= 0)
            USER_ERROR("--headroom %g GiB leaves nothing of --gpu-mem %g GiB for the plan",
                       a->ao.headroom, a->ao.cluster.mem_bytes / 1073741824.0);
        a->ao.tp = a->tp;
        a->ao.cp = a->cp;
        a->ao.sp = a->sp ? 1 : a->no_sp ? 0 : -1;
        a->ao.recompute = a->recompute_given ? (int)a->recompute : -1;
        a->ao.cp_algo = a->algo_given ? (int)a->algo : -1;
        return;
    }
    const int tp = a->tp, phi = a->phi > 0;
    if (tp && phi) USER_ERROR("--tp plans a GPT config; it does not combine with --params");
    if (tp && a->overlap_rs) USER_ERROR("--overlap-rs is ZeRO's; train_tp (--tp) averages gradients by DDP");
    if (a->host_given && !a->offload)
        USER_ERROR("--host-bw, --host-lat and --cpu-adam time ZeRO-Offload's host link: give "
                   "--offload");
    if (a->offload && (tp || a->cp || phi || a->overlap_rs || a->dp_shard))
        USER_ERROR("--offload plans train_zero --offload (ZeRO-2/3): not with --tp, --cp, "
                   "--params, --overlap-rs or --dp-shard");
    if (a->dp_shard && (tp || a->cp))
        USER_ERROR("--dp-shard is train_zero's hybrid sharding; train_tp and train_cp average "
                   "gradients by DDP");
    if (a->dp_shard && a->ranks % a->dp_shard)
        USER_ERROR("--dp-shard %d does not divide the %d ranks into shard groups", a->dp_shard,
                   a->ranks);
    if ((a->sp || a->recompute || a->activations) && !tp)
        USER_ERROR("--sp, --recompute and --activations plan lab 05's train_tp: give --tp N (1 for "
                   "one device or DDP)");
    if ((a->algo_given || a->fit_mib > 0) && !a->cp)
        USER_ERROR("--cp-algo and --fit plan lab 07's train_cp: give --cp N (1 for no split)");
    if (a->cp && (phi || a->overlap_rs || a->sp || a->recompute || a->activations))
        USER_ERROR("--cp plans train_cp: DDP over dp, no --params, --overlap-rs, --sp, "
                   "--sp-regather, --recompute or --activations");
    if (a->fit_mib > 0 && a->seq)
        USER_ERROR("--fit searches the sequence length: it does not combine with --seq");
    if (a->ctx && phi) USER_ERROR("--ctx sets a GPT config's context; --params has none");
}

/* The named config with the sizes given */
static GPTConfig config_of(const Args *a) {
    GPTConfig cfg;
    if (gpt_config_by_name(a->config, &cfg) != 0)
        USER_ERROR("unknown --config '%s' (known: %s)", a->config, gpt_config_names());
    if (a->ctx) cfg.ctx_len = a->ctx;
    int *const fields[7] = {&cfg.n_layer, &cfg.n_head, &cfg.n_embd, &cfg.vocab_size,
                            &cfg.n_experts, &cfg.top_k, &cfg.moe_every};
    for (int i = 0; i < 7; i++)
        if (a->sizes[i]) *fields[i] = a->sizes[i];
    cfg.precision = a->precision;
    cfg.fp32_grads = a->fp32_grads;
    cfg.attention = a->attention;
    if (a->sizes[4] && !a->sizes[5]) cfg.top_k = 1;
    if (a->sizes[4] && !a->sizes[6]) cfg.moe_every = 1;
    const char *bad = gpt_config_problem(&cfg);
    if (bad) USER_ERROR("%s (config %s with the sizes given)", bad, a->config);
    return cfg;
}

/* --advise: the layouts of the cluster that fit, by predicted step time */
static void run_advise(Args *a, const GPTConfig *cfg) {
    a->ao.batch = a->batch ? a->batch : strcmp(a->config, "small") == 0 ? 16 : 8;
    a->ao.seq = a->seq ? a->seq : cfg->ctx_len;
    if (a->ao.seq > cfg->ctx_len)
        USER_ERROR("--seq %d is longer than the model's context (%d; --ctx sets it)", a->ao.seq,
                   cfg->ctx_len);
    a->ao.csv = a->csv;
    int custom = 0;
    for (int i = 0; i < 7; i++) custom |= a->sizes[i] != 0;
    advise(custom || a->ctx ? "custom" : a->config, cfg, &a->ao);
}

/* --cp: train_cp's plan (tp x cp x dp), or with --fit the longest sequence */
static void run_cp(Args *a, const GPTConfig *cfg) {
    const int tp = a->tp ? a->tp : 1, cp = a->cp;
    const char *why = gpt_layout_problem(cfg, tp);
    if (why) USER_ERROR("%s (config %s)", why, a->config);
    if (!a->ranks_given) a->ranks = tp * cp;
    if (a->ranks % (tp * cp) != 0)
        USER_ERROR("--ranks %d must be a multiple of --tp x --cp = %d x %d (dp = ranks / "
                   "(tp cp))", a->ranks, tp, cp);
    const int dp = a->ranks / (tp * cp);
    if (a->batch == 0) a->batch = strcmp(a->config, "small") == 0 ? 16 : 8;
    if (a->batch % (dp * a->accum) != 0)
        USER_ERROR("--batch %d must be a multiple of dp x --grad-accum = %d x %d", a->batch, dp,
                   a->accum);
    MemLayout l = cp_layout(tp, cp, a->algo, dp, a->batch / (dp * a->accum), cfg->ctx_len);
    int seq = a->seq;
    if (a->fit_mib > 0) {
        why = gpt_context_problem(cfg, tp, cp, a->algo, 2 * cp);
        if (why) USER_ERROR("%s (config %s)", why, a->config);
        size_t peak, next_peak;
        int next;
        seq = cp_fit_seq(cfg, l, (size_t)(a->fit_mib * 1048576.0), &peak, &next, &next_peak);
        print_cp_fit(cfg, &l, a->fit_mib, seq, peak, next, next_peak, a->csv);
        if (seq == 0 || a->csv) return;
    } else if (seq == 0) {
        seq = cfg->ctx_len;
    }
    if (seq > cfg->ctx_len)
        USER_ERROR("--seq %d is longer than the model's context (%d; --ctx sets it)", seq,
                   cfg->ctx_len);
    why = gpt_context_problem(cfg, tp, cp, a->algo, seq);
    if (why) USER_ERROR("%s (config %s)", why, a->config);
    l.seq = seq / cp;
    print_cp_plan(a->config, cfg, &l, tp, a->accum, a->csv);
}

/* --tp: train_tp's plan (tp x dp); else every ZeRO layout of the ranks */
static void run_tp_or_zero(Args *a, const GPTConfig *cfg) {
    const int tp = a->tp;
    int ranks = a->ranks, seq = a->seq, batch = a->batch;
    if (tp) {
        const char *why = gpt_layout_problem(cfg, tp);
        if (why) USER_ERROR("%s (config %s)", why, a->config);
        if (!a->ranks_given) ranks = tp;
        if (ranks % tp != 0)
            USER_ERROR("--ranks %d must be a multiple of --tp %d (dp = ranks / tp)", ranks, tp);
        ranks /= tp;  /* from here on, the data-parallel group */
    }
    if (batch == 0) batch = strcmp(a->config, "small") == 0 ? 16 : 8;
    if (seq == 0) seq = cfg->ctx_len;
    if (seq > cfg->ctx_len) USER_ERROR("--seq %d is longer than the model's context (%d)", seq, cfg->ctx_len);
    if (batch % (ranks * a->accum) != 0)
        USER_ERROR("--batch %d must be a multiple of ranks x --grad-accum = %d x %d", batch, ranks,
                   a->accum);
    if (a->sp && seq % tp != 0)
        USER_ERROR("--sp splits the tokens over the TP group: --seq %d must be a multiple of --tp "
                   "%d", seq, tp);
    const int rows = batch / (ranks * a->accum);
    MemLayout tl = tp_layout(tp, ranks, rows, seq, a->sp, a->recompute);
    tl.sp_regather = a->sp_regather;
    if (tp && a->csv && a->activations) print_activation_parts_csv(cfg, &tl);
    else if (tp && a->csv) print_tp_csv(cfg, &tl);
    else if (tp) print_tp_plan(a->config, cfg, &tl, a->activations);
    if (tp) return;
    const int shard = a->dp_shard ? a->dp_shard : ranks;  /* ZeRO's group */
    const ZeroVariant v = {a->overlap_rs, a->offload, {1e-6 * a->host_lat, 1e-9 / a->host_bw},
                           1e9 * a->cpu_adam};
    if (a->csv) print_csv(cfg, shard, rows, seq, &v);
    else print_plans(a->config, cfg, ranks, shard, rows, seq, &v);
}

int main(int argc, char **argv) {
    program_set_name(argv[0]);
    /* --advise: the cluster's defaults, an 8-GPU H100 node */
    /* the host link's defaults: PCIe 4.0 x16's 32 GB/s raw per direction
     * (the PCI Express specification) less its encoding and protocol, 25;
     * a copy's start 10 us; AdamW at 1e9 elements a second on the CPU */
    Args a = {.config = "tiny", .ranks = 1, .accum = 1, .flags = parallel_flags_default(),
              .host_bw = 25, .host_lat = 10, .cpu_adam = 1,
              .recompute = RECOMPUTE_NONE, .algo = CP_RING,
              .ao = {.cluster = {.gpus_per_node = 8, .nodes = 1, .flops = 989e12,
                                 .mem_bytes = 80 * 1073741824.0,
                                 .intra = {3e-6, 1 / 450e9}, .inter = {10e-6, 1 / 50e9}},
                     .top = 10, .bucket_bytes = 25000000, .headroom = 0.1,
                     .headroom_share = 1, .dp_overlap = 1, .zero = -1,
                     .sp = -1, .recompute = -1, .cp_algo = -1}};
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "h", g_options, NULL)) != -1) {
        if (c == 'h') {
            printf("%s", g_usage);
            return 0;
        }
        if (!parse_option(c, optarg, &a)) cli_bad_option(argv[optind - 1], "see --help");
    }
    if (optind < argc) USER_ERROR("unexpected argument '%s'; see --help", argv[optind]);
    check_combinations(&a);
    if (a.phi > 0) {
        print_states_only(a.phi, a.ranks, a.dp_shard ? a.dp_shard : a.ranks, a.precision,
                          a.fp32_grads);
        return 0;
    }
    const GPTConfig cfg = config_of(&a);
    if (a.advise) run_advise(&a, &cfg);
    else if (a.cp) run_cp(&a, &cfg);
    else run_tp_or_zero(&a, &cfg);
    return 0;
}
