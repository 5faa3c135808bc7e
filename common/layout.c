#include "layout.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "comm.h"
#include "device.h"
#include "kernels.h"
#include "math_shared.h"
#include "schedule.h"
#include "precision.h"
#include "rng.h"

static const char *const g_recompute_names[] = {"none", "selective", "full"};

const char *gpt_recompute_name(Recompute r) {
    return r >= RECOMPUTE_NONE && r <= RECOMPUTE_FULL ? g_recompute_names[r] : "?";
}

Recompute gpt_recompute_parse(const char *name) {
    for (int r = RECOMPUTE_NONE; r <= RECOMPUTE_FULL; r++)
        if (!strcmp(name, g_recompute_names[r])) return (Recompute)r;
    USER_ERROR("--recompute expects none, selective or full, got '%s'", name);
}

static const char *const g_cp_algo_names[] = {"ring", "zigzag", "ulysses", "striped"};

const char *gpt_cp_algo_name(CpAlgo a) {
    return a >= CP_RING && a <= CP_STRIPED ? g_cp_algo_names[a] : "?";
}

CpAlgo gpt_cp_algo_parse(const char *name) {
    for (int a = CP_RING; a <= CP_STRIPED; a++)
        if (!strcmp(name, g_cp_algo_names[a])) return (CpAlgo)a;
    USER_ERROR("--cp-algo expects ring, zigzag, ulysses or striped, got '%s'", name);
}

const char *gpt_context_problem(const GPTConfig *cfg, int tp, int cp, CpAlgo algo, int seq) {
    static char why[256];
    const int pieces = algo == CP_ZIGZAG ? 2 * cp : cp;
    if (cp < 1) return "the context-parallel degree must be at least 1";
    if (cp > 1 && cfg->n_experts > 0)
        return "a mixture of experts routes each sequence as a whole: no context parallelism";
    if (seq % pieces != 0) {
        snprintf(why, sizeof why, "context parallelism splits each sequence into %s%d chunks: "
                 "--seq %d must be a multiple of %d", algo == CP_ZIGZAG ? "2 x --cp = " : "",
                 pieces, seq, pieces);
        return why;
    }
    if (algo == CP_ULYSSES && (cfg->n_head / tp) % cp != 0) {
        snprintf(why, sizeof why, "Ulysses gives each of the --cp %d ranks whole heads: the %d "
                 "heads of a tensor-parallel rank (n_head %d / --tp %d) must divide by --cp",
                 cp, cfg->n_head / tp, cfg->n_head, tp);
        return why;
    }
    return NULL;
}

void gpt_layout_set_context(GPTLayout *l, int cp, int cp_rank, CpAlgo algo) {
    CHECK(cp >= 1 && cp_rank >= 0 && cp_rank < cp, "cp rank %d of %d", cp_rank, cp);
    l->cp = cp;
    l->cp_rank = cp_rank;
    l->cp_algo = algo;
}

int gpt_cp_placement(const GPTLayout *l) {
    return l->cp_algo == CP_ZIGZAG    ? CP_PLACE_ZIGZAG
           : l->cp_algo == CP_STRIPED ? CP_PLACE_STRIPED
                                      : CP_PLACE_CONTIGUOUS;
}

int gpt_cp_position(const GPTLayout *l, int t, int Tl) {
    return cp_global_position(t, Tl, l->cp, l->cp_rank, gpt_cp_placement(l));
}

const char *gpt_layout_problem(const GPTConfig *cfg, int tp) {
    static char why[160];
    if (tp < 1) return "the tensor-parallel degree must be at least 1";
    if (cfg->n_head % tp != 0) {
        /* NH % tp == 0 makes C = NH hs and 4C divide too */
        snprintf(why, sizeof why, "tensor parallelism splits the heads: --tp %d does not divide "
                 "n_head %d", tp, cfg->n_head);
        return why;
    }
    return NULL;
}

const char *gpt_activation_problem(const GPTConfig *cfg, int tp, int sp, Recompute recompute,
                                   int seq) {
    static char why[200];
    if (cfg->n_experts > 0 && sp)
        return "a mixture of experts routes each sequence as a whole: no sequence parallelism "
               "(--sp); tensor parallelism alone composes with it";
    if (cfg->n_experts > 0 && recompute != RECOMPUTE_NONE)
        return "activation recomputation of a mixture of experts is not written: --recompute none";
    if (sp && seq % tp != 0) {
        snprintf(why, sizeof why, "--sp splits each micro-batch's tokens over the TP group: "
                 "--seq %d must be a multiple of --tp %d", seq, tp);
        return why;
    }
    return NULL;
}

const char *gpt_expert_problem(const GPTConfig *cfg, int ep) {
    static char why[160];
    if (ep < 1) return "the expert-parallel degree must be at least 1";
    if (ep > 1 && cfg->n_experts == 0)
        return "expert parallelism splits a mixture of experts: the config has none (--experts E)";
    if (ep > 1 && cfg->n_experts % ep != 0) {
        snprintf(why, sizeof why, "expert parallelism gives each rank E / ep experts: --ep %d does "
                 "not divide the %d experts", ep, cfg->n_experts);
        return why;
    }
    return NULL;
}

int gpt_local_experts(const GPTLayout *l) { return l->cfg.n_experts / l->ep; }

/* An MLP's width on this rank in block i: a dense block's mw = 4C / tp
 * columns, an MoE block's experts whole (4C): TP splits the attention and
 * the dense MLPs, EP the experts (layout.h) */
static size_t block_mlp_width(const GPTLayout *l, int i) {
    return gpt_block_is_moe(&l->cfg, i) ? 4 * (size_t)l->cfg.n_embd : (size_t)l->mlp_width;
}

/* Floats of block i on this rank: layernorms 4C, qkv 3 aw (C + 1),
 * attproj C aw + C, fc mw (C + 1), fcproj C mw + C; 12C^2 + 13C at tp = 1.
 * An MoE block has its E / ep experts' whole MLPs and the router's E C. */
static size_t block_local_params(const GPTLayout *l, int i) {
    const size_t C = l->cfg.n_embd, aw = l->attn_width, mw = block_mlp_width(l, i);
    const int moe = gpt_block_is_moe(&l->cfg, i);
    const size_t E = moe ? (size_t)gpt_local_experts(l) : 1;
    return 4 * C + 3 * aw * (C + 1) + C * aw + C + E * (mw * (C + 1) + C * mw + C) +
           (moe ? (size_t)l->cfg.n_experts * C : 0);
}

/* Whether this rank runs the first stage (the embedding) or the last (the
 * head): under DualPipe's placement ranks 0 and pp - 1 run both. */
static int runs_first_stage(const GPTLayout *l) {
    return l->pp_rank == 0 || (l->dual && l->pp_rank == l->pp - 1);
}
static int runs_last_stage(const GPTLayout *l) {
    return l->pp_rank == l->pp - 1 || (l->dual && l->pp_rank == 0);
}

/* Floats of unit u in this rank's buffer: 0 when none of its stages uses
 * it; the embedding unit on the last stage (not also the first) is wte
 * alone, the tied copy. Units of blocks go to the rank of their stage. */
static size_t unit_count(const GPTLayout *l, int u) {
    const size_t C = l->cfg.n_embd, L = l->cfg.n_layer;
    const int first = runs_first_stage(l), last = runs_last_stage(l);
    if (u == GPT_UNIT_EMBED)
        return first ? ((size_t)l->vocab_rows + l->cfg.ctx_len) * C
             : last  ? (size_t)l->vocab_rows * C : 0;
    if (u == (int)L + 1) return last ? 2 * C : 0;
    const int stages = pipe_stages(l->pp, l->chunks, l->dual);
    const int stage = (u - 1) / ((int)L / stages);
    for (int c = 0; c < l->chunks; c++)
        if (pipe_stage_of(l->pp, l->dual, l->pp_rank, c) == stage)
            return block_local_params(l, u - 1);
    return 0;
}

static size_t layout_num_params(const GPTLayout *l) {
    size_t n = 0;
    for (int u = 0; u < gpt_num_units(l); u++) n += unit_count(l, u);
    return n;
}

GPTLayout gpt_layout_make(const GPTConfig *cfg, int tp, int tp_rank) {
    const char *why = gpt_layout_problem(cfg, tp);
    CHECK(!why, "%s", why);
    CHECK(tp_rank >= 0 && tp_rank < tp, "tp rank %d of %d", tp_rank, tp);
    GPTLayout l = {0};
    l.cfg = *cfg;
    l.tp = tp;
    l.tp_rank = tp_rank;
    l.vocab_padded = (cfg->vocab_size + tp - 1) / tp * tp;
    l.vocab_rows = l.vocab_padded / tp;
    l.vocab_first = tp_rank * l.vocab_rows;
    l.vocab_real = cfg->vocab_size - l.vocab_first;
    l.vocab_real = l.vocab_real < 0 ? 0 : l.vocab_real > l.vocab_rows ? l.vocab_rows : l.vocab_real;
    l.n_head = cfg->n_head / tp;
    l.attn_width = cfg->n_embd / tp;
    l.mlp_width = 4 * cfg->n_embd / tp;
    l.pp = l.chunks = l.cp = l.ep = 1;
    l.num_params = layout_num_params(&l);
    return l;
}

GPTLayout gpt_layout_whole(const GPTConfig *cfg) { return gpt_layout_make(cfg, 1, 0); }

const char *gpt_pipeline_problem(const GPTConfig *cfg, int pp, int chunks, int dual) {
    static char why[200];
    if (pp < 1 || chunks < 1) return "the pipeline degree and its chunks must be at least 1";
    if (pp * chunks > 1 && cfg->n_experts > 0)
        return "a mixture of experts is not cut into pipeline stages here: give --pp 1";
    const int stages = pipe_stages(pp, chunks, dual);
    if (dual && cfg->n_layer % stages != 0) {
        snprintf(why, sizeof why, "DualPipe cuts the blocks into %d stages of equal depth, one "
                 "per rank: n_layer %d is not a multiple of %d", pp, cfg->n_layer, pp);
        return why;
    }
    if (cfg->n_layer % stages != 0) {
        snprintf(why, sizeof why, "a pipeline of %d rank%s x %d chunk%s cuts the blocks into "
                 "%d stages of equal depth: n_layer %d is not a multiple of %d", pp,
                 pp == 1 ? "" : "s", chunks, chunks == 1 ? "" : "s", stages, cfg->n_layer,
                 stages);
        return why;
    }
    return NULL;
}

void gpt_layout_set_dual_pipeline(GPTLayout *l, int pp, int pp_rank) {
    l->dual = 1;
    gpt_layout_set_pipeline(l, pp, pp_rank, 2);
}

void gpt_layout_set_pipeline(GPTLayout *l, int pp, int pp_rank, int chunks) {
    const char *why = gpt_pipeline_problem(&l->cfg, pp, chunks, l->dual);
    CHECK(!why, "%s", why);
    CHECK(pp_rank >= 0 && pp_rank < pp, "pp rank %d of %d", pp_rank, pp);
    l->pp = pp;
    l->pp_rank = pp_rank;
    l->chunks = chunks;
    l->num_params = layout_num_params(l);
}

void gpt_layout_set_experts(GPTLayout *l, int ep, int ep_rank) {
    const char *why = gpt_expert_problem(&l->cfg, ep);
    CHECK(!why, "%s", why);
    CHECK(ep_rank >= 0 && ep_rank < ep, "ep rank %d of %d", ep_rank, ep);
    l->ep = ep;
    l->ep_rank = ep_rank;
    l->num_params = layout_num_params(l);
}

GPTStage gpt_stage(const GPTLayout *l, int chunk) {
    CHECK(chunk >= 0 && chunk < l->chunks, "chunk %d of %d", chunk, l->chunks);
    const int stages = pipe_stages(l->pp, l->chunks, l->dual), per_stage = l->cfg.n_layer / stages;
    const int s = pipe_stage_of(l->pp, l->dual, l->pp_rank, chunk);
    return (GPTStage){s, s * per_stage, per_stage, s == 0, s == stages - 1};
}

int gpt_holds_unit(const GPTLayout *l, int unit) { return unit_count(l, unit) > 0; }

int gpt_num_tensors(const GPTLayout *l) {
    return 2 + BLOCK_NUM_TENSORS * l->cfg.n_layer + gpt_num_moe_blocks(&l->cfg) + 2;
}

/* How a tensor is split over TP (the table in layout.h), or over EP */
typedef enum {
    WHOLE,       /* replicated */
    VOCAB_ROWS,  /* wte: a range of the padded vocabulary */
    HEAD_ROWS,   /* qkv: the local heads' rows of q, of k and of v */
    ROWS,        /* fc: rows [r n/tp, (r+1) n/tp) */
    COLUMNS,     /* attproj, fcproj: columns [r n/tp, (r+1) n/tp) */
    EXPERT_ROWS  /* stacked experts, over EP: rows [r n/ep, (r+1) n/ep) */
} Split;

typedef struct {
    const GPTLayout *l;
    TensorInfo *t;
    int n;
    size_t offset, global_offset;
} TableBuilder;

/* held: whether this rank's stages use the tensor (else count 0, no
 * pieces); copy: another rank's copy (TensorInfo.pipeline_copy) */
static void add_tensor(TableBuilder *b, const char *name, int rows, int cols, Split split,
                       InitKind init, float std, int held, int copy) {
    const GPTLayout *l = b->l;
    TensorInfo *t = &b->t[b->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->global_rows = rows;
    t->global_cols = cols;
    t->global_offset = b->global_offset;
    t->offset = b->offset;
    t->init = init;
    t->std = std;
    t->split = split != WHOLE && split != EXPERT_ROWS && l->tp > 1;
    t->expert_split = split == EXPERT_ROWS && l->ep > 1;
    t->pipeline_copy = copy;
    b->global_offset += (size_t)rows * cols;
    if (!held) return;
    t->rows = rows;
    t->cols = cols;
    ShardPiece *p = t->piece;
    if (split == WHOLE) {
        p[t->npieces++] = (ShardPiece){0, rows, 0, cols, t->offset};
    } else if (split == VOCAB_ROWS) {
        t->rows = l->vocab_rows;
        if (l->vocab_real > 0)
            p[t->npieces++] = (ShardPiece){l->vocab_first, l->vocab_real, 0, cols, t->offset};
    } else if (split == HEAD_ROWS) {
        /* rows is 3C (q, k, v stacked); each part gives attn_width rows */
        const int part = rows / 3, w = l->attn_width;
        t->rows = 3 * w;
        for (int k = 0; k < 3; k++)
            p[t->npieces++] = (ShardPiece){k * part + l->tp_rank * w, w, 0, cols,
                                           t->offset + (size_t)k * w * cols};
    } else if (split == ROWS) {
        t->rows = rows / l->tp;
        p[t->npieces++] = (ShardPiece){l->tp_rank * t->rows, t->rows, 0, cols, t->offset};
    } else if (split == EXPERT_ROWS) {
        /* E experts of rows / E rows each: this rank's E / ep consecutive */
        t->rows = rows / l->ep;
        p[t->npieces++] = (ShardPiece){l->ep_rank * t->rows, t->rows, 0, cols, t->offset};
    } else {
        t->cols = cols / l->tp;
        p[t->npieces++] = (ShardPiece){0, rows, l->tp_rank * t->cols, t->cols, t->offset};
    }
    t->count = (size_t)t->rows * t->cols;
    b->offset += t->count;
}

void gpt_tensor_table(const GPTLayout *l, TensorInfo *t) {
    const int C = l->cfg.n_embd, L = l->cfg.n_layer;
    const float std = 0.02f;
    /* GPT-2 scales the two projections that write into the residual stream
     * by 1/sqrt(2L), so the stream's variance does not grow with depth. */
    const float std_proj = std / sqrtf(2.0f * L);
    TableBuilder b = {l, t, 0, 0, 0};
    char name[32];
    const int first = runs_first_stage(l), last = runs_last_stage(l);
    /* DualPipe: the second half's ranks hold copies of the first half's */
    const int copy = l->dual && l->pp_rank >= l->pp / 2;
    add_tensor(&b, "wte", l->cfg.vocab_size, C, VOCAB_ROWS, INIT_NORMAL, std, first || last,
               !first || copy);
    add_tensor(&b, "wpe", l->cfg.ctx_len, C, WHOLE, INIT_NORMAL, std, first, copy);
    for (int i = 0; i < L; i++) {
        const int held = gpt_holds_unit(l, 1 + i);
#define BLOCK_TENSOR(suffix, rows, cols, split, init, s)                \
    snprintf(name, sizeof name, "blocks.%d." suffix, i);               \
    add_tensor(&b, name, rows, cols, split, init, s, held, copy)
        BLOCK_TENSOR("ln1w", C, 1, WHOLE, INIT_ONES, 0);
        BLOCK_TENSOR("ln1b", C, 1, WHOLE, INIT_ZEROS, 0);
        BLOCK_TENSOR("qkvw", 3 * C, C, HEAD_ROWS, INIT_NORMAL, std);
        BLOCK_TENSOR("qkvb", 3 * C, 1, HEAD_ROWS, INIT_ZEROS, 0);
        BLOCK_TENSOR("attprojw", C, C, COLUMNS, INIT_NORMAL, std_proj);
        BLOCK_TENSOR("attprojb", C, 1, WHOLE, INIT_ZEROS, 0);
        BLOCK_TENSOR("ln2w", C, 1, WHOLE, INIT_ONES, 0);
        BLOCK_TENSOR("ln2b", C, 1, WHOLE, INIT_ZEROS, 0);
        if (gpt_block_is_moe(&l->cfg, i)) {
            /* the router (whole), then the E experts' MLPs stacked (moe.h),
             * this rank's experts under expert parallelism */
            const int E = l->cfg.n_experts;
            BLOCK_TENSOR("routerw", E, C, WHOLE, INIT_NORMAL, std);
            BLOCK_TENSOR("fcw", E * 4 * C, C, EXPERT_ROWS, INIT_NORMAL, std);
            BLOCK_TENSOR("fcb", E * 4 * C, 1, EXPERT_ROWS, INIT_ZEROS, 0);
            BLOCK_TENSOR("fcprojw", E * C, 4 * C, EXPERT_ROWS, INIT_NORMAL, std_proj);
            BLOCK_TENSOR("fcprojb", E * C, 1, EXPERT_ROWS, INIT_ZEROS, 0);
            continue;
        }
        BLOCK_TENSOR("fcw", 4 * C, C, ROWS, INIT_NORMAL, std);
        BLOCK_TENSOR("fcb", 4 * C, 1, ROWS, INIT_ZEROS, 0);
        BLOCK_TENSOR("fcprojw", C, 4 * C, COLUMNS, INIT_NORMAL, std_proj);
        BLOCK_TENSOR("fcprojb", C, 1, WHOLE, INIT_ZEROS, 0);
#undef BLOCK_TENSOR
    }
    add_tensor(&b, "lnfw", C, 1, WHOLE, INIT_ONES, 0, last, copy);
    add_tensor(&b, "lnfb", C, 1, WHOLE, INIT_ZEROS, 0, last, copy);
    CHECK(b.offset == l->num_params && b.global_offset == gpt_num_params(&l->cfg) &&
          b.n == gpt_num_tensors(l), "tensor table disagrees with the layout's sizes");
}

int gpt_num_units(const GPTLayout *l) { return l->cfg.n_layer + 2; }

void gpt_unit_range(const GPTLayout *l, int unit, size_t *offset, size_t *count) {
    CHECK(unit >= 0 && unit < gpt_num_units(l), "unit %d out of range", unit);
    *offset = 0;
    for (int u = 0; u < unit; u++) *offset += unit_count(l, u);
    *count = unit_count(l, unit);
}

size_t gpt_largest_unit_but_embeddings(const GPTLayout *l) {
    size_t most = 0;
    for (int u = GPT_UNIT_EMBED + 1; u < gpt_num_units(l); u++)
        if (unit_count(l, u) > most) most = unit_count(l, u);
    return most;
}

void gpt_unit_view(const GPTLayout *l, int unit, float *x, GPTParams *p) {
    const size_t C = l->cfg.n_embd, aw = l->attn_width;
    if (unit == GPT_UNIT_EMBED) {
        p->wte = x;
        p->wpe = runs_first_stage(l) ? x + (size_t)l->vocab_rows * C : NULL;  /* not in the tied copy */
        return;
    }
    if (unit == l->cfg.n_layer + 1) {
        p->lnfw = x;
        p->lnfb = x + C;
        return;
    }
    BlockParams *b = &p->blocks[unit - 1];
    const size_t mw = block_mlp_width(l, unit - 1);
    const int moe = gpt_block_is_moe(&l->cfg, unit - 1);
    const size_t E = moe ? (size_t)gpt_local_experts(l) : 1;  /* this rank's experts */
    /* same order as gpt_tensor_table */
    b->ln1w = x;     x += C;
    b->ln1b = x;     x += C;
    b->qkvw = x;     x += 3 * aw * C;
    b->qkvb = x;     x += 3 * aw;
    b->attprojw = x; x += C * aw;
    b->attprojb = x; x += C;
    b->ln2w = x;     x += C;
    b->ln2b = x;     x += C;
    b->routerw = moe ? x : NULL;
    x += moe ? (size_t)l->cfg.n_experts * C : 0;
    b->fcw = x;      x += E * mw * C;
    b->fcb = x;      x += E * mw;
    b->fcprojw = x;  x += E * C * mw;
    b->fcprojb = x;
}

void gpt_params_view(const GPTLayout *l, float *flat, GPTParams *p) {
    memset(p, 0, sizeof *p);
    p->blocks = calloc(l->cfg.n_layer, sizeof(BlockParams));
    CHECK(p->blocks != NULL, "out of memory");
    if (!flat) return;
    for (int u = 0; u < gpt_num_units(l); u++) {
        size_t offset, count;
        gpt_unit_range(l, u, &offset, &count);
        if (count > 0) gpt_unit_view(l, u, flat + offset, p);
    }
}

void gpt_params_view_free(GPTParams *p) {
    free(p->blocks);
    p->blocks = NULL;
}

static TensorInfo *tensor_table_alloc(const GPTLayout *l) {
    TensorInfo *table = malloc((size_t)gpt_num_tensors(l) * sizeof *table);
    CHECK(table != NULL, "out of memory");
    gpt_tensor_table(l, table);
    return table;
}

void gpt_init_params(const GPTLayout *l, unsigned long long seed, size_t first, size_t n,
                     float *out) {
    /* the generator runs on the host; GPU parameters get a copy */
    float *host = device_is_gpu_pointer(out) ? malloc(n * sizeof(float)) : out;
    CHECK(host != NULL, "out of memory");
    memset(host, 0, n * sizeof(float));  /* the vocabulary's padding rows */
    const int nt = gpt_num_tensors(l);
    TensorInfo *table = tensor_table_alloc(l);
    for (int t = 0; t < nt; t++) {
        const TensorInfo *ti = &table[t];
        for (int k = 0; k < ti->npieces; k++) {
            const ShardPiece *pc = &ti->piece[k];
            const size_t size = (size_t)pc->rows * pc->cols;
            size_t lo = pc->local_offset > first ? pc->local_offset : first;
            size_t hi = pc->local_offset + size < first + n ? pc->local_offset + size : first + n;
            for (size_t e = lo; e < hi; e++) {
                size_t k_in = e - pc->local_offset;  /* row-major in the piece */
                size_t row = pc->row0 + k_in / pc->cols, col = pc->col0 + k_in % pc->cols;
                size_t i = row * ti->global_cols + col;  /* index within the global tensor */
                host[e - first] = ti->init == INIT_ONES ? 1.0f
                                : ti->init == INIT_ZEROS ? 0.0f
                                : ti->std * rng_normal(seed, RNG_STREAM_INIT, i, (uint32_t)t);
            }
        }
    }
    free(table);
    if (host != out) {
        device_copy(out, host, n * sizeof(float));
        free(host);
    }
}

void gpt_layout_to_standard(const GPTLayout *l, const float *local, float *whole) {
    const int nt = gpt_num_tensors(l);
    TensorInfo *table = tensor_table_alloc(l);
    for (int t = 0; t < nt; t++) {
        const TensorInfo *ti = &table[t];
        for (int k = 0; k < ti->npieces; k++) {
            const ShardPiece *pc = &ti->piece[k];
            for (int r = 0; r < pc->rows; r++)
                memcpy(whole + ti->global_offset + (size_t)(pc->row0 + r) * ti->global_cols
                           + pc->col0,
                       local + pc->local_offset + (size_t)r * pc->cols,
                       (size_t)pc->cols * sizeof(float));
        }
    }
    free(table);
}

/* ---- the layout's whole-model view ----------------------------------------- */

int layout_holds_whole_model(const GPTLayout *l) { return l->tp == 1 && l->pp == 1 && l->ep == 1; }

double layout_counted_sum_squares(const GPTLayout *l, const TensorInfo *t, size_t first,
                                  size_t n, const void *g, int precision) {
    const size_t bytes = precision_bytes((Precision)precision);
    double sum = 0.0;
    for (int i = 0; i < gpt_num_tensors(l); i++) {
        if (!(t[i].split || l->tp_rank == 0) || !(t[i].expert_split || l->ep_rank == 0) ||
            t[i].pipeline_copy)
            continue;
        const size_t lo = t[i].offset > first ? t[i].offset : first;
        const size_t hi = t[i].offset + t[i].count < first + n ? t[i].offset + t[i].count
                                                               : first + n;
        if (lo < hi)
            sum += sum_squares_as((const char *)g + (lo - first) * bytes, hi - lo, precision);
    }
    return sum;
}

double layout_model_sum(const GPTLayout *l, double x) {
    if (l->tp > 1) comm_allreduce(l->tp_group, &x, &x, 1, COMM_DOUBLE, COMM_SUM);
    if (l->pp > 1) comm_allreduce(l->pp_group, &x, &x, 1, COMM_DOUBLE, COMM_SUM);
    if (l->ep > 1) comm_allreduce(l->ep_group, &x, &x, 1, COMM_DOUBLE, COMM_SUM);
    return x;
}

double layout_sum_squares(const GPTLayout *l, const TensorInfo *t, const void *grads,
                          int precision) {
    if (layout_holds_whole_model(l)) return sum_squares_as(grads, l->num_params, precision);
    return layout_model_sum(l, layout_counted_sum_squares(l, t, 0, l->num_params, grads,
                                                          precision));
}

/* The layout of the rank at tp_rank r and ep_rank e of l's stage */
static GPTLayout layout_of_rank(const GPTLayout *l, int r, int e) {
    GPTLayout lr = gpt_layout_make(&l->cfg, l->tp, r);
    lr.dual = l->dual;
    gpt_layout_set_pipeline(&lr, l->pp, l->pp_rank, l->chunks);
    if (l->ep > 1) gpt_layout_set_experts(&lr, l->ep, e);
    return lr;
}

float *layout_gather_standard(const GPTLayout *l, const float *local, int mine) {
    const size_t n = l->num_params, total = gpt_num_params(&l->cfg);
    const int tp = l->tp, ep = l->ep, ranks = tp * ep;  /* n floats each */
    float *own = malloc(n * sizeof(float)), *of_ep = malloc(n * ep * sizeof(float));
    float *all = malloc(n * ranks * sizeof(float)), *whole = calloc(total, sizeof(float));
    CHECK(own && of_ep && all && whole, "out of memory for gathering the parameters");
    device_copy(own, local, n * sizeof(float));
    if (ep > 1) comm_allgather_untraced(l->ep_group, own, of_ep, n * ep, COMM_FLOAT);
    else memcpy(of_ep, own, n * sizeof(float));
    if (tp > 1) comm_allgather_untraced(l->tp_group, of_ep, all, n * ranks, COMM_FLOAT);
    else memcpy(all, of_ep, n * ep * sizeof(float));
    free(own);
    free(of_ep);
    /* buffer i = r ep + e; the winner's last */
    const int last = mine ? l->tp_rank * ep + l->ep_rank : 0;
    for (int k = 1; k <= ranks; k++) {
        const int i = (last + k) % ranks;
        const GPTLayout lr = layout_of_rank(l, i / ep, i % ep);
        gpt_layout_to_standard(&lr, all + (size_t)i * n, whole);
    }
    free(all);
    if (l->pp == 1) return whole;
    /* every stage's tensors, whole after the TP gather, from their stage;
     * this rank's own last, so that they win when mine */
    float *stages = malloc(total * l->pp * sizeof(float));
    TensorInfo *t = malloc((size_t)gpt_num_tensors(l) * sizeof *t);
    CHECK(stages && t, "out of memory for gathering the parameters");
    comm_allgather_untraced(l->pp_group, whole, stages, total * l->pp, COMM_FLOAT);
    for (int k = 1; k <= l->pp; k++) {
        const int q = (l->pp_rank + k) % l->pp;
        GPTLayout lq = *l;
        gpt_layout_set_pipeline(&lq, l->pp, q, l->chunks);
        gpt_tensor_table(&lq, t);
        for (int i = 0; i < gpt_num_tensors(&lq); i++) {
            if (t[i].count == 0 || (t[i].pipeline_copy && !(mine && q == l->pp_rank))) continue;
            const size_t off = t[i].global_offset, size = (size_t)t[i].global_rows * t[i].global_cols;
            memcpy(whole + off, stages + (size_t)q * total + off, size * sizeof(float));
        }
    }
    free(t);
    free(stages);
    return whole;
}
