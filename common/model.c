#include "model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "check.h"
#include "device.h"
#include "kernels.h"
#include "rng.h"

typedef struct { const char *name; GPTConfig cfg; } NamedConfig;

static const NamedConfig g_configs[] = {
    /*                 V      ctx   L   NH   C */
    {"tiny",      {  256,    64,  4,   4,  64}},
    {"small",     {  256,   128,  4,   4, 128}},
    {"medium",    {  256,   256,  4,   6, 384}},
    {"gpt2-124m", {50257,  1024, 12,  12, 768}},
};

int gpt_config_by_name(const char *name, GPTConfig *cfg) {
    for (size_t i = 0; i < sizeof g_configs / sizeof g_configs[0]; i++)
        if (strcmp(name, g_configs[i].name) == 0) {
            *cfg = g_configs[i].cfg;
            return 0;
        }
    return -1;
}

const char *gpt_config_names(void) { return "tiny, small, medium, gpt2-124m"; }

const char *gpt_config_problem(const GPTConfig *cfg) {
    if (cfg->vocab_size < 2 || cfg->vocab_size > 65536) return "vocab size must be in 2..65536";
    if (cfg->ctx_len < 1) return "context length must be at least 1";
    if (cfg->n_layer < 1) return "the model needs at least 1 layer";
    if (cfg->n_head < 1 || cfg->n_embd < 1) return "heads and channels must be positive";
    if (cfg->n_embd % cfg->n_head != 0) return "channels (n_embd) must be divisible by heads (n_head)";
    return NULL;
}

size_t gpt_block_num_params(const GPTConfig *cfg) {
    size_t C = cfg->n_embd;
    return 12 * C * C + 13 * C;
}

size_t gpt_num_params(const GPTConfig *cfg) {
    size_t C = cfg->n_embd;
    return (size_t)cfg->vocab_size * C + (size_t)cfg->ctx_len * C
           + cfg->n_layer * gpt_block_num_params(cfg) + 2 * C;
}

int gpt_num_tensors(const GPTConfig *cfg) { return 2 + BLOCK_NUM_TENSORS * cfg->n_layer + 2; }

void gpt_tensor_table(const GPTConfig *cfg, TensorInfo *t) {
    const int C = cfg->n_embd, L = cfg->n_layer;
    const float std = 0.02f;
    /* GPT-2 scales the two projections that write into the residual stream
     * by 1/sqrt(2L), so the stream's variance does not grow with depth. */
    const float std_proj = std / sqrtf(2.0f * L);
    size_t offset = 0;
    int n = 0;
#define ADD(nm_fmt, nm_arg, r, c, kind, s)                                       \
    do {                                                                          \
        snprintf(t[n].name, sizeof t[n].name, nm_fmt, nm_arg);                    \
        t[n].offset = offset; t[n].rows = (r); t[n].cols = (c);                   \
        t[n].count = (size_t)(r) * (c); t[n].init = (kind); t[n].std = (s);       \
        offset += t[n].count; n++;                                                \
    } while (0)
    ADD("%s", "wte", cfg->vocab_size, C, INIT_NORMAL, std);
    ADD("%s", "wpe", cfg->ctx_len, C, INIT_NORMAL, std);
    for (int l = 0; l < L; l++) {
        ADD("blocks.%d.ln1w", l, C, 1, INIT_ONES, 0);
        ADD("blocks.%d.ln1b", l, C, 1, INIT_ZEROS, 0);
        ADD("blocks.%d.qkvw", l, 3 * C, C, INIT_NORMAL, std);
        ADD("blocks.%d.qkvb", l, 3 * C, 1, INIT_ZEROS, 0);
        ADD("blocks.%d.attprojw", l, C, C, INIT_NORMAL, std_proj);
        ADD("blocks.%d.attprojb", l, C, 1, INIT_ZEROS, 0);
        ADD("blocks.%d.ln2w", l, C, 1, INIT_ONES, 0);
        ADD("blocks.%d.ln2b", l, C, 1, INIT_ZEROS, 0);
        ADD("blocks.%d.fcw", l, 4 * C, C, INIT_NORMAL, std);
        ADD("blocks.%d.fcb", l, 4 * C, 1, INIT_ZEROS, 0);
        ADD("blocks.%d.fcprojw", l, C, 4 * C, INIT_NORMAL, std_proj);
        ADD("blocks.%d.fcprojb", l, C, 1, INIT_ZEROS, 0);
    }
    ADD("%s", "lnfw", C, 1, INIT_ONES, 0);
    ADD("%s", "lnfb", C, 1, INIT_ZEROS, 0);
#undef ADD
    CHECK(offset == gpt_num_params(cfg) && n == gpt_num_tensors(cfg),
          "tensor table disagrees with gpt_num_params");
}

int gpt_num_units(const GPTConfig *cfg) { return cfg->n_layer + 2; }

void gpt_unit_range(const GPTConfig *cfg, int unit, size_t *offset, size_t *count) {
    const size_t C = cfg->n_embd, embed = ((size_t)cfg->vocab_size + cfg->ctx_len) * C;
    const size_t block = gpt_block_num_params(cfg);
    CHECK(unit >= 0 && unit < gpt_num_units(cfg), "unit %d out of range", unit);
    if (unit == GPT_UNIT_EMBED) {
        *offset = 0;
        *count = embed;
    } else if (unit <= cfg->n_layer) {
        *offset = embed + (size_t)(unit - 1) * block;
        *count = block;
    } else {
        *offset = embed + (size_t)cfg->n_layer * block;
        *count = 2 * C;
    }
}

void gpt_unit_view(const GPTConfig *cfg, int unit, float *x, GPTParams *p) {
    const size_t C = cfg->n_embd;
    if (unit == GPT_UNIT_EMBED) {
        p->wte = x;
        p->wpe = x + (size_t)cfg->vocab_size * C;
        return;
    }
    if (unit == cfg->n_layer + 1) {
        p->lnfw = x;
        p->lnfb = x + C;
        return;
    }
    BlockParams *b = &p->blocks[unit - 1];
    /* same order as gpt_tensor_table */
    b->ln1w = x;     x += C;
    b->ln1b = x;     x += C;
    b->qkvw = x;     x += 3 * C * C;
    b->qkvb = x;     x += 3 * C;
    b->attprojw = x; x += C * C;
    b->attprojb = x; x += C;
    b->ln2w = x;     x += C;
    b->ln2b = x;     x += C;
    b->fcw = x;      x += 4 * C * C;
    b->fcb = x;      x += 4 * C;
    b->fcprojw = x;  x += 4 * C * C;
    b->fcprojb = x;
}

void gpt_params_view(const GPTConfig *cfg, float *flat, GPTParams *p) {
    memset(p, 0, sizeof *p);
    p->blocks = calloc(cfg->n_layer, sizeof(BlockParams));
    CHECK(p->blocks != NULL, "out of memory");
    if (!flat) return;
    for (int u = 0; u < gpt_num_units(cfg); u++) {
        size_t offset, count;
        gpt_unit_range(cfg, u, &offset, &count);
        gpt_unit_view(cfg, u, flat + offset, p);
    }
}

void gpt_params_view_free(GPTParams *p) {
    free(p->blocks);
    p->blocks = NULL;
}

void gpt_init_params(const GPTConfig *cfg, unsigned long long seed, size_t first, size_t n,
                     float *out) {
    /* the generator runs on the host; GPU parameters get a copy */
    float *host = device_is_gpu_pointer(out) ? malloc(n * sizeof(float)) : out;
    CHECK(host != NULL, "out of memory");
    int nt = gpt_num_tensors(cfg);
    TensorInfo *table = malloc(nt * sizeof *table);
    CHECK(table != NULL, "out of memory");
    gpt_tensor_table(cfg, table);
    for (int t = 0; t < nt; t++) {
        const TensorInfo *ti = &table[t];
        size_t lo = ti->offset > first ? ti->offset : first;
        size_t hi = ti->offset + ti->count < first + n ? ti->offset + ti->count : first + n;
        for (size_t g = lo; g < hi; g++) {
            size_t i = g - ti->offset;  /* index within the tensor */
            float v = ti->init == INIT_ONES ? 1.0f
                    : ti->init == INIT_ZEROS ? 0.0f
                    : ti->std * rng_normal(seed, RNG_STREAM_INIT, i, (uint32_t)t);
            host[g - first] = v;
        }
    }
    free(table);
    if (host != out) {
        device_copy(out, host, n * sizeof(float));
        free(host);
    }
}

/* ---- activations ---------------------------------------------------------- */

/* Per block, per token: ln1 C + 2, qkv 3C, atty C, res1 C, ln2 C + 2,
 * fch 4C, fch_gelu 4C, res2 C = 16C + 4; plus att NH*T per token. */
static size_t block_act_floats(const GPTConfig *cfg, int B, int T) {
    size_t BT = (size_t)B * T, C = cfg->n_embd;
    return BT * (16 * C + 4) + (size_t)B * cfg->n_head * T * T;
}

size_t gpt_activation_floats(const GPTConfig *cfg, int B, int T) {
    size_t BT = (size_t)B * T, C = cfg->n_embd, V = cfg->vocab_size;
    return BT * C                                /* encoded */
           + cfg->n_layer * block_act_floats(cfg, B, T)
           + BT * (C + 2)                        /* lnf, mean, rstd */
           + BT * V                              /* probs */
           + BT;                                 /* losses */
}

size_t gpt_activation_ints(int B, int T) { return 2 * (size_t)B * T; }

/* dlnf, dres_out, dres_in: 3 BTC; per block: dres_mid C, dln C, dqkv 3C,
 * datty C, dfch 4C, dfch_gelu 4C = 14C per token, plus datt NH*T*T per row. */
size_t gpt_scratch_floats(const GPTConfig *cfg, int B, int T) {
    size_t BT = (size_t)B * T, C = cfg->n_embd;
    return BT * 3 * C + BT * 14 * C + (size_t)B * cfg->n_head * T * T;
}

/* Hand out consecutive pieces of one allocation. */
static float *take(float **cursor, size_t n) {
    float *p = *cursor;
    *cursor += n;
    return p;
}

void gpt_acts_alloc(const GPTConfig *cfg, int B, int T, GPTActs *a, BackwardScratch *s) {
    const size_t BT = (size_t)B * T, C = cfg->n_embd, NH = cfg->n_head;
    memset(a, 0, sizeof *a);
    a->B = B;
    a->T = T;
    a->inputs = mem_alloc(MEM_ACTIVATIONS, gpt_activation_ints(B, T) * sizeof(int));
    a->targets = a->inputs + BT;
    size_t nf = gpt_activation_floats(cfg, B, T);
    float *base = mem_alloc(MEM_ACTIVATIONS, nf * sizeof(float)), *cur = base;
    a->encoded = take(&cur, BT * C);
    a->blocks = calloc(cfg->n_layer, sizeof(BlockActs));
    CHECK(a->blocks != NULL, "out of memory");
    for (int l = 0; l < cfg->n_layer; l++) {
        BlockActs *b = &a->blocks[l];
        b->ln1 = take(&cur, BT * C);
        b->ln1_mean = take(&cur, BT);
        b->ln1_rstd = take(&cur, BT);
        b->qkv = take(&cur, BT * 3 * C);
        b->att = take(&cur, (size_t)B * NH * T * T);
        b->atty = take(&cur, BT * C);
        b->res1 = take(&cur, BT * C);
        b->ln2 = take(&cur, BT * C);
        b->ln2_mean = take(&cur, BT);
        b->ln2_rstd = take(&cur, BT);
        b->fch = take(&cur, BT * 4 * C);
        b->fch_gelu = take(&cur, BT * 4 * C);
        b->res2 = take(&cur, BT * C);
    }
    a->lnf = take(&cur, BT * C);
    a->lnf_mean = take(&cur, BT);
    a->lnf_rstd = take(&cur, BT);
    a->probs = take(&cur, BT * cfg->vocab_size);
    a->losses = take(&cur, BT);
    CHECK((size_t)(cur - base) == nf, "activation layout disagrees with its formula");

    size_t ns = gpt_scratch_floats(cfg, B, T);
    float *sbase = mem_alloc(MEM_WORKSPACE, ns * sizeof(float));
    cur = sbase;
    s->dlnf = take(&cur, BT * C);
    s->dres_out = take(&cur, BT * C);
    s->dres_in = take(&cur, BT * C);
    s->block_base = cur;
    s->dres_mid = take(&cur, BT * C);
    s->dln = take(&cur, BT * C);
    s->dqkv = take(&cur, BT * 3 * C);
    s->datt = take(&cur, (size_t)B * NH * T * T);
    s->datty = take(&cur, BT * C);
    s->dfch = take(&cur, BT * 4 * C);
    s->dfch_gelu = take(&cur, BT * 4 * C);
    s->block_floats = (size_t)(cur - s->block_base);
    CHECK((size_t)(cur - sbase) == ns, "scratch layout disagrees with its formula");
}

void gpt_acts_free(GPTActs *a, BackwardScratch *s) {
    mem_free(a->inputs);
    mem_free(a->encoded);  /* the start of the float allocation */
    free(a->blocks);
    mem_free(s->dlnf);     /* the start of the scratch allocation */
    memset(a, 0, sizeof *a);
    memset(s, 0, sizeof *s);
}

/* ---- forward and backward ------------------------------------------------- */

void block_forward(const GPTConfig *cfg, const BlockParams *p, BlockActs *a, const float *x,
                   int B, int T) {
    const int C = cfg->n_embd, N = B * T;
    const size_t NC = (size_t)N * C;
    layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, x, p->ln1w, p->ln1b, N, C);
    matmul_forward(a->qkv, a->ln1, p->qkvw, p->qkvb, N, C, 3 * C);
    attention_forward(a->atty, a->att, a->qkv, B, T, C, cfg->n_head);
    matmul_forward(a->res1, a->atty, p->attprojw, p->attprojb, N, C, C);
    residual_forward(a->res1, a->res1, x, NC);
    layernorm_forward(a->ln2, a->ln2_mean, a->ln2_rstd, a->res1, p->ln2w, p->ln2b, N, C);
    matmul_forward(a->fch, a->ln2, p->fcw, p->fcb, N, C, 4 * C);
    gelu_forward(a->fch_gelu, a->fch, NC * 4);
    matmul_forward(a->res2, a->fch_gelu, p->fcprojw, p->fcprojb, N, 4 * C, C);
    residual_forward(a->res2, a->res2, a->res1, NC);
}

void block_backward(const GPTConfig *cfg, const BlockParams *p, BlockParams *g,
                    const BlockActs *a, const float *x, const float *dout, float *dx,
                    BackwardScratch *s, int B, int T) {
    const int C = cfg->n_embd, N = B * T;
    const size_t NC = (size_t)N * C;
    set_zero(s->block_base, s->block_floats);
    /* MLP branch, x2 = x1 + fcproj(gelu(fc(ln2(x1)))): the branch gets dout,
     * and the skip connection adds dout into d(x1) = dres_mid. */
    matmul_backward(s->dfch_gelu, g->fcprojw, g->fcprojb, dout, a->fch_gelu, p->fcprojw,
                    N, 4 * C, C);
    gelu_backward(s->dfch, a->fch, s->dfch_gelu, NC * 4);
    matmul_backward(s->dln, g->fcw, g->fcb, s->dfch, a->ln2, p->fcw, N, C, 4 * C);
    layernorm_backward(s->dres_mid, g->ln2w, g->ln2b, s->dln, a->res1, p->ln2w, a->ln2_mean,
                       a->ln2_rstd, N, C);
    residual_backward(s->dres_mid, dout, NC);
    /* Attention branch, x1 = x + attproj(attention(qkv(ln1(x)))). */
    set_zero(s->dln, NC);
    matmul_backward(s->datty, g->attprojw, g->attprojb, s->dres_mid, a->atty, p->attprojw,
                    N, C, C);
    attention_backward(s->dqkv, s->datt, s->datty, a->qkv, a->att, B, T, C, cfg->n_head);
    matmul_backward(s->dln, g->qkvw, g->qkvb, s->dqkv, a->ln1, p->qkvw, N, C, 3 * C);
    layernorm_backward(dx, g->ln1w, g->ln1b, s->dln, x, p->ln1w, a->ln1_mean, a->ln1_rstd,
                       N, C);
    residual_backward(dx, s->dres_mid, NC);
}

/* The hooks, each a no-op when absent */
static void needed(const ModelHooks *h, int u, int backward) {
    if (h && h->params_needed) h->params_needed(h->ctx, u, backward);
}
static void done(const ModelHooks *h, int u, int backward) {
    if (h && h->params_done) h->params_done(h->ctx, u, backward);
}
static void grads_begin(const ModelHooks *h, int u) {
    if (h && h->grads_begin) h->grads_begin(h->ctx, u);
}
static void grads_ready(const ModelHooks *h, int u) {
    if (h && h->grads_ready) h->grads_ready(h->ctx, u);
}

float gpt_forward(const GPTConfig *cfg, const GPTParams *p, GPTActs *a, const ModelHooks *h) {
    const int B = a->B, T = a->T, C = cfg->n_embd, V = cfg->vocab_size, L = cfg->n_layer;
    needed(h, GPT_UNIT_EMBED, 0);
    encoder_forward(a->encoded, a->inputs, p->wte, p->wpe, B, T, C);
    const float *x = a->encoded;
    for (int l = 0; l < L; l++) {
        needed(h, 1 + l, 0);
        block_forward(cfg, &p->blocks[l], &a->blocks[l], x, B, T);
        done(h, 1 + l, 0);
        x = a->blocks[l].res2;
    }
    needed(h, L + 1, 0);
    layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, x, p->lnfw, p->lnfb, B * T, C);
    done(h, L + 1, 0);
    matmul_forward(a->probs, a->lnf, p->wte, NULL, B * T, C, V);  /* logits, tied head */
    done(h, GPT_UNIT_EMBED, 0);
    return crossentropy_forward(a->losses, a->probs, a->probs, a->targets, B * T, V);
}

void gpt_backward(const GPTConfig *cfg, const GPTParams *p, GPTParams *g, GPTActs *a,
                  BackwardScratch *s, const ModelHooks *h) {
    const int B = a->B, T = a->T, C = cfg->n_embd, V = cfg->vocab_size, L = cfg->n_layer;
    const size_t NC = (size_t)B * T * C;
    /* The loss is the mean over B*T positions: d(loss)/d(row loss) = 1/(BT). */
    crossentropy_backward(a->probs, a->targets, 1.0f / (B * T), B * T, V);
    set_zero(s->dlnf, NC);
    needed(h, GPT_UNIT_EMBED, 1);
    grads_begin(h, GPT_UNIT_EMBED);
    matmul_backward(s->dlnf, g->wte, NULL, a->probs, a->lnf, p->wte, B * T, C, V);
    done(h, GPT_UNIT_EMBED, 1);
    float *dout = s->dres_out, *dx = s->dres_in;
    set_zero(dout, NC);
    needed(h, L + 1, 1);
    grads_begin(h, L + 1);
    layernorm_backward(dout, g->lnfw, g->lnfb, s->dlnf, a->blocks[L - 1].res2, p->lnfw,
                       a->lnf_mean, a->lnf_rstd, B * T, C);
    done(h, L + 1, 1);
    grads_ready(h, L + 1);
    for (int l = L - 1; l >= 0; l--) {
        const float *x = l == 0 ? a->encoded : a->blocks[l - 1].res2;
        set_zero(dx, NC);
        needed(h, 1 + l, 1);
        grads_begin(h, 1 + l);
        block_backward(cfg, &p->blocks[l], &g->blocks[l], &a->blocks[l], x, dout, dx, s, B, T);
        done(h, 1 + l, 1);
        grads_ready(h, 1 + l);
        float *tmp = dout;  /* this block's d(input) is the next one's d(output) */
        dout = dx;
        dx = tmp;
    }
    /* wte is final only now: the tied LM head wrote to it first */
    encoder_backward(g->wte, g->wpe, dout, a->inputs, B, T, C);
    grads_ready(h, GPT_UNIT_EMBED);
}

double gpt_flops_per_token(const GPTConfig *cfg, int T) {
    double phi = (double)gpt_num_params(cfg) - (double)cfg->ctx_len * cfg->n_embd;
    return 6.0 * phi + 12.0 * cfg->n_layer * cfg->n_embd * (double)T;
}
