/* memplan: the memory planner (common/memplan.h) on the command line.
 *   memplan --config small --ranks 4 --batch 16        every layout, per rank
 *   memplan --params 7e9 --ranks 64                    model states only
 *   memplan --ranks 2 --overlap-rs                     ZeRO-2/3 as train_zero --overlap-rs
 *   memplan --config small --tp 2 --ranks 4            train_tp's tp 2 x dp 2, and its TP traffic
 *   memplan --config small --tp 2 --sp --recompute full   lab 05's train_tp --sp --recompute full
 *   memplan --config small --tp 2 --activations        every way of keeping activations (lab 05)
 *   memplan --config tiny --cp 4 --cp-algo ulysses     train_cp's cp 4, and its CP traffic (lab 07)
 *   memplan --config tiny --ctx 1024 --cp 4 --fit 24   the longest sequence that fits 24 MiB per rank
 * Predict before you measure: lab 03's README asks for these numbers first. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "cli.h"
#include "layout.h"
#include "memplan.h"
#include "model.h"

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
    "  -h, --help        this text\n";

static void print_states_only(double phi, int ranks) {
    static const char *names[] = {"replicated (DDP)", "ZeRO-1", "ZeRO-2", "ZeRO-3"};
    printf("model states per rank, fp32 AdamW, %.4g parameters, %d rank%s:\n", phi, ranks,
           ranks == 1 ? "" : "s");
    for (int s = 0; s <= 3; s++)
        printf("  %-17s %10.2f GB\n", names[s], memplan_states_bytes(phi, s, ranks) / 1e9);
}

static const char *const g_layouts[] = {"replicated", "zero1", "zero2", "zero3", "zero3-noprefetch"};

static void plan_of(int i, const GPTConfig *cfg, int ranks, int rows, int seq, int overlap_rs,
                    MemPlan *plan) {
    int stage = i < 4 ? i : 3;
    MemLayout l = {.zero_stage = stage, .ranks = ranks, .prefetch = i == 3, .rows = rows, .seq = seq,
                   .overlap_rs = overlap_rs && stage >= 2};
    memplan_predict(cfg, &l, plan);
}

static void print_csv(const GPTConfig *cfg, int ranks, int rows, int seq, int overlap_rs) {
    printf("layout,category,states_bytes,peak_bytes\n");
    for (int i = 0; i < 5; i++) {
        MemPlan plan;
        plan_of(i, cfg, ranks, rows, seq, overlap_rs, &plan);
        for (int c = 0; c < MEM_NUM_CATEGORIES; c++)
            printf("%s,%s,%zu,%zu\n", g_layouts[i], mem_category_name((MemCategory)c),
                   plan.states[c], plan.peak[c]);
    }
}

static void print_plans(const char *name, const GPTConfig *cfg, int ranks, int rows, int seq,
                        int overlap_rs) {
    printf("config %s, %zu parameters, %d rank%s, micro-batch %d x %d per rank%s; "
           "peak MiB per rank\n",
           name, gpt_num_params(cfg), ranks, ranks == 1 ? "" : "s", rows, seq,
           overlap_rs ? ", ZeRO-2/3 reduce-scatter behind the backward pass" : "");
    printf("  %-16s", "layout");
    for (int c = 0; c < MEM_NUM_CATEGORIES; c++) printf(" %11s", mem_category_name((MemCategory)c));
    printf(" %11s %9s\n", "total", "padding");
    for (int i = 0; i < 5; i++) {
        MemPlan plan;
        plan_of(i, cfg, ranks, rows, seq, overlap_rs, &plan);
        size_t total = 0;
        printf("  %-16s", g_layouts[i]);
        for (int c = 0; c < MEM_NUM_CATEGORIES; c++) {
            printf(" %11.3f", plan.peak[c] / 1048576.0);
            total += plan.peak[c];
        }
        printf(" %11.3f %9zu\n", total / 1048576.0, plan.padding);
    }
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
            printf("%s,%s,%zu\n", label, gpt_activation_part_name((ActPart)p),
                   sizeof(float) * parts[p]);
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

int main(int argc, char **argv) {
    program_set_name(argv[0]);
    static const struct option opts[] = {
        {"config", required_argument, 0, 'c'}, {"ranks", required_argument, 0, 'n'},
        {"batch", required_argument, 0, 'b'},  {"grad-accum", required_argument, 0, 'k'},
        {"seq", required_argument, 0, 't'},    {"params", required_argument, 0, 'p'},
        {"csv", no_argument, 0, 'v'},          {"help", no_argument, 0, 'h'},
        {"overlap-rs", no_argument, 0, 'o'},   {"tp", required_argument, 0, 'T'},
        {"sp", no_argument, 0, 'S'},           {"recompute", required_argument, 0, 'R'},
        {"activations", no_argument, 0, 'A'},  {"sp-regather", no_argument, 0, 'G'},
        {"cp", required_argument, 0, 'P'},     {"cp-algo", required_argument, 0, 'a'},
        {"ctx", required_argument, 0, 'x'},    {"fit", required_argument, 0, 'F'},
        {0, 0, 0, 0}};
    char config[32] = "tiny";
    int ranks = 1, batch = 0, accum = 1, seq = 0, csv = 0, overlap_rs = 0, tp = 0,
        ranks_given = 0, sp = 0, sp_regather = 0, activations = 0, cp = 0, ctx = 0,
        algo_given = 0;
    Recompute recompute = RECOMPUTE_NONE;
    CpAlgo algo = CP_RING;
    double phi = 0, fit_mib = 0;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'c': cli_string(config, sizeof config, "--config", optarg); break;
        case 'n': ranks = (int)cli_int("--ranks", optarg, 1, 1 << 20); ranks_given = 1; break;
        case 'b': batch = (int)cli_int("--batch", optarg, 1, 1 << 20); break;
        case 'k': accum = (int)cli_int("--grad-accum", optarg, 1, 1 << 16); break;
        case 't': seq = (int)cli_int("--seq", optarg, 1, 1 << 20); break;
        case 'p': phi = cli_double("--params", optarg, 1.0, 1e15); break;
        case 'v': csv = 1; break;
        case 'o': overlap_rs = 1; break;
        case 'T': tp = (int)cli_int("--tp", optarg, 1, 1 << 16); break;
        case 'S': sp = 1; break;
        case 'G': sp = sp_regather = 1; break;
        case 'A': activations = 1; break;
        case 'R': recompute = gpt_recompute_parse(optarg); break;
        case 'P': cp = (int)cli_int("--cp", optarg, 1, 1 << 12); break;
        case 'a': algo = gpt_cp_algo_parse(optarg); algo_given = 1; break;
        case 'x': ctx = (int)cli_int("--ctx", optarg, 1, 1 << 20); break;
        case 'F': fit_mib = cli_double("--fit", optarg, 1e-3, 1e12); break;
        case 'h': printf("%s", g_usage); return 0;
        default: cli_bad_option(argv[optind - 1], "see --help");
        }
    }
    if (optind < argc) USER_ERROR("unexpected argument '%s'; see --help", argv[optind]);
    if (tp && phi > 0) USER_ERROR("--tp plans a GPT config; it does not combine with --params");
    if (tp && overlap_rs) USER_ERROR("--overlap-rs is ZeRO's; train_tp (--tp) averages gradients by DDP");
    if ((sp || recompute || activations) && !tp)
        USER_ERROR("--sp, --recompute and --activations plan lab 05's train_tp: give --tp N (1 for "
                   "one device or DDP)");
    if ((algo_given || fit_mib > 0) && !cp)
        USER_ERROR("--cp-algo and --fit plan lab 07's train_cp: give --cp N (1 for no split)");
    if (cp && (phi > 0 || overlap_rs || sp || recompute || activations))
        USER_ERROR("--cp plans train_cp: DDP over dp, no --params, --overlap-rs, --sp, "
                   "--sp-regather, --recompute or --activations");
    if (fit_mib > 0 && seq)
        USER_ERROR("--fit searches the sequence length: it does not combine with --seq");
    if (ctx && phi > 0) USER_ERROR("--ctx sets a GPT config's context; --params has none");
    if (phi > 0) {
        print_states_only(phi, ranks);
        return 0;
    }
    GPTConfig cfg;
    if (gpt_config_by_name(config, &cfg) != 0)
        USER_ERROR("unknown --config '%s' (known: %s)", config, gpt_config_names());
    if (ctx) cfg.ctx_len = ctx;
    if (cp) {
        if (!tp) tp = 1;
        const char *why = gpt_layout_problem(&cfg, tp);
        if (why) USER_ERROR("%s (config %s)", why, config);
        if (!ranks_given) ranks = tp * cp;
        if (ranks % (tp * cp) != 0)
            USER_ERROR("--ranks %d must be a multiple of --tp x --cp = %d x %d (dp = ranks / "
                       "(tp cp))", ranks, tp, cp);
        const int dp = ranks / (tp * cp);
        if (batch == 0) batch = strcmp(config, "small") == 0 ? 16 : 8;
        if (batch % (dp * accum) != 0)
            USER_ERROR("--batch %d must be a multiple of dp x --grad-accum = %d x %d", batch, dp,
                       accum);
        MemLayout l = cp_layout(tp, cp, algo, dp, batch / (dp * accum), cfg.ctx_len);
        if (fit_mib > 0) {
            why = gpt_context_problem(&cfg, tp, cp, algo, 2 * cp);
            if (why) USER_ERROR("%s (config %s)", why, config);
            size_t peak, next_peak;
            int next;
            seq = cp_fit_seq(&cfg, l, (size_t)(fit_mib * 1048576.0), &peak, &next, &next_peak);
            print_cp_fit(&cfg, &l, fit_mib, seq, peak, next, next_peak, csv);
            if (seq == 0 || csv) return 0;
        } else if (seq == 0) {
            seq = cfg.ctx_len;
        }
        if (seq > cfg.ctx_len)
            USER_ERROR("--seq %d is longer than the model's context (%d; --ctx sets it)", seq,
                       cfg.ctx_len);
        why = gpt_context_problem(&cfg, tp, cp, algo, seq);
        if (why) USER_ERROR("%s (config %s)", why, config);
        l.seq = seq / cp;
        print_cp_plan(config, &cfg, &l, tp, accum, csv);
        return 0;
    }
    if (tp) {
        const char *why = gpt_layout_problem(&cfg, tp);
        if (why) USER_ERROR("%s (config %s)", why, config);
        if (!ranks_given) ranks = tp;
        if (ranks % tp != 0)
            USER_ERROR("--ranks %d must be a multiple of --tp %d (dp = ranks / tp)", ranks, tp);
        ranks /= tp;  /* from here on, the data-parallel group */
    }
    if (batch == 0) batch = strcmp(config, "small") == 0 ? 16 : 8;
    if (seq == 0) seq = cfg.ctx_len;
    if (seq > cfg.ctx_len) USER_ERROR("--seq %d is longer than the model's context (%d)", seq, cfg.ctx_len);
    if (batch % (ranks * accum) != 0)
        USER_ERROR("--batch %d must be a multiple of ranks x --grad-accum = %d x %d", batch, ranks,
                   accum);
    if (sp && seq % tp != 0)
        USER_ERROR("--sp splits the tokens over the TP group: --seq %d must be a multiple of --tp "
                   "%d", seq, tp);
    MemLayout tl = tp_layout(tp, ranks, batch / (ranks * accum), seq, sp, recompute);
    tl.sp_regather = sp_regather;
    if (tp && csv && activations) print_activation_parts_csv(&cfg, &tl);
    else if (tp && csv) print_tp_csv(&cfg, &tl);
    else if (tp) print_tp_plan(config, &cfg, &tl, activations);
    else if (csv) print_csv(&cfg, ranks, batch / (ranks * accum), seq, overlap_rs);
    else print_plans(config, &cfg, ranks, batch / (ranks * accum), seq, overlap_rs);
    return 0;
}
