#include "model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "check.h"
#include "device.h"
#include "kernels.h"
#include "math_shared.h"
#include "precision.h"

/* Mixed precision (model.h): a layer's output is stored in the run's
 * format, so what the next layer reads, and what the backward pass reads,
 * is rounded to it; fp32 rounds nothing */
static void store_rounded(const GPTLayout *l, float *x, size_t n) {
    if (l->cfg.precision != PRECISION_FP32) round_inplace(x, n, l->cfg.precision);
}

/* Whether the blocks keep their activations packed in the 2-byte format
 * (model.h's BlockActs.kept) */
static int packed_blocks(const GPTLayout *l) { return l->cfg.precision != PRECISION_FP32; }

/* Whether a block's attention keeps the T x T probabilities of its own
 * positions (materialized, at cp 1): the buffer selective recomputation
 * rebuilds and mixed precision packs in 2 bytes. What fused attention and
 * context parallelism keep instead stays fp32, per block (it is small, or,
 * Ulysses', not rebuilt). */
static int keeps_probs(const GPTLayout *l) {
    return l->cp == 1 && l->cfg.attention == ATTENTION_MATERIALIZED;
}
/* and whether the blocks share one such buffer: rebuilt before each block's
 * backward, by full recomputation or by selective's (of the probabilities) */
static int attention_shared(const GPTLayout *l) {
    return l->recompute == RECOMPUTE_FULL ||
           (l->recompute == RECOMPUTE_SELECTIVE && keeps_probs(l));
}

/* ---- activations ---------------------------------------------------------- */

/* Rows between the split layers (model.h): all B T, or under sequence
 * parallelism this rank's B T / tp; and the rows the layernorm outputs
 * keep: all (the column layers' inputs, gathered in place), but with
 * sp_regather this rank's. */
static size_t seq_rows(const GPTLayout *l, size_t rows) { return l->sp ? rows / l->tp : rows; }
static size_t ln_rows(const GPTLayout *l, size_t rows) {
    return l->sp_regather ? seq_rows(l, rows) : rows;
}

/* An MoE block's layer shape for B sequences of T (moe.h: a routing group
 * is one sequence) */
static MoEShape moe_shape_of(const GPTLayout *l, int B, int T) {
    MoEShape s;
    const GPTConfig *c = &l->cfg;
    moe_shape_init(&s, B * T, T, c->n_embd, c->n_experts, c->top_k, c->capacity_factor,
                   c->aux_loss_coef);
    moe_shape_set_ep(&s, l->ep);
    return s;
}
/* moe.h's kept floats of one MoE block (all of a model's have one shape),
 * and how many MoE blocks a stage has */
static size_t moe_kept_floats_of(const GPTLayout *l, int B, int T) {
    const MoEShape s = moe_shape_of(l, B, T);
    return moe_kept_floats(&s);
}
static size_t stage_moe_blocks(const GPTLayout *l, const GPTStage *st) {
    size_t n = 0;
    for (int i = 0; i < st->n_blocks; i++) n += gpt_block_is_moe(&l->cfg, st->first_block + i);
    return n;
}

size_t gpt_ep_wire_elements(const GPTLayout *l, int B, int T, int overlapped) {
    size_t moe = 0;
    for (int c = 0; c < l->chunks; c++) {
        const GPTStage st = gpt_stage(l, c);
        moe += stage_moe_blocks(l, &st);
    }
    if (l->cfg.precision == PRECISION_FP32 || l->ep == 1 || moe == 0) return 0;
    const MoEShape s = moe_shape_of(l, B, T);
    return (overlapped ? 2 : 1) * ((size_t)s.A_max + (size_t)s.R_max) * (size_t)s.C;
}

/* Materialized: the probabilities; fused, and the ring: the lse. Ulysses:
 * its NH' / cp heads over all Tg = cp T positions, their qkv, then their
 * probabilities, or (fused) their output and lse. */
size_t gpt_attention_keep_floats(const GPTLayout *l, int B, int T) {
    const int a = l->cfg.attention, NH = l->n_head, cp = l->cp, Tg = cp * T;
    const size_t w = l->attn_width / cp;
    if (cp == 1) return gpt_attention_whole_keep_floats(a, B, T, NH);
    if (l->cp_algo != CP_ULYSSES) return (size_t)B * NH * T;
    return (size_t)B * Tg * 3 * w + gpt_attention_whole_keep_floats(a, B, Tg, NH / cp) +
           (a == ATTENTION_FUSED ? (size_t)B * Tg * w : 0);
}

/* Per block, per token of the BT: ln1 C, qkv 3 aw, atty aw, ln2 C, fch mw,
 * fch_gelu mw, with aw = C/tp and mw = 4C/tp; per row of the R between
 * the split layers (R = BT but under sequence parallelism): the layernorm
 * statistics 4, res1 C, res2 C (and under sp_regather ln1 and ln2 have R
 * rows, lnf too). 16C + 4 per token at tp = 1; plus att
 * NH/tp T per token (fused: NH/tp, the lse). Recomputation keeps, of L
 * blocks:
 *   SELECTIVE  L (all but att) + one att, shared (fused: all, the lse being
 *              what there is to keep);
 *   FULL       L res2 (each block's output) + one block's others, shared.
 * Outside the blocks: encoded R C, lnf BT C + 2R, probs BT Vp/tp, losses
 * BT, and under split layers ce_stats 3 BT.
 * Mixed precision (packed_blocks) stores what a block keeps in 2 bytes
 * (model.h), per block res1, ln1, ln2, qkv, atty, fch, fch_gelu and
 * (recompute none, keeps_probs) att, and res2 but the last block's (FULL:
 * res2 alone); the stage's output (the last res2), the statistics, the
 * lse or CP's keep and the ends stay fp32. The fp32 buffers the blocks
 * compute in are the rank's work area, in the scratch (packed_work_floats). The head's
 * logits stay fp32 too: packing them would need a work area as large,
 * which saves memory only with several micro-batches in flight. */
void gpt_stage_activation_parts(const GPTLayout *l, const GPTStage *st, int B, int T,
                                size_t parts[ACT_NUM_PARTS]) {
    const size_t BT = (size_t)B * T, R = seq_rows(l, BT), C = l->cfg.n_embd;
    const size_t aw = l->attn_width, mw = l->mlp_width, L = st->n_blocks;
    const size_t res2 = R * C, res1_stats = R * (C + 4);
    const size_t LN = ln_rows(l, BT), ln_out = 2 * LN * C, split = BT * (4 * aw + 2 * mw);
    const size_t att = gpt_attention_keep_floats(l, B, T);
    const int full = l->recompute == RECOMPUTE_FULL, none = l->recompute == RECOMPUTE_NONE;
    /* an MoE block keeps moe.h's buffers in place of fch and fch_gelu */
    const size_t moe_blocks = stage_moe_blocks(l, st), F = sizeof(float);
    const size_t moe = moe_blocks ? moe_blocks * (moe_kept_floats_of(l, B, T) - BT * 2 * mw) : 0;
    const size_t ends = R * C + (st->head ? LN * C + 2 * R + BT * l->vocab_rows + BT +
                                                (l->split_layers ? 3 * BT : 0)
                                          : 0);
    if (!packed_blocks(l)) {
        parts[ACT_RESIDUAL] = F * (L * res2 + (full ? 1 : L) * res1_stats);
        parts[ACT_LAYERNORM_OUT] = F * (full ? 1 : L) * ln_out;
        parts[ACT_SPLIT] = F * ((full ? 1 : L) * split + moe);
        parts[ACT_ATTENTION] = F * (attention_shared(l) ? 1 : L) * att;
        parts[ACT_ENDS] = F * ends;
        return;
    }
    const size_t H = precision_bytes((Precision)l->cfg.precision), kept = full ? 0 : L;
    const size_t dense = L - moe_blocks, qkv_atty = BT * 4 * aw, mlp = BT * 2 * mw;
    parts[ACT_RESIDUAL] = H * (kept * R * C + (L - 1) * res2) + F * (res2 + (full ? 1 : L) * R * 4);
    parts[ACT_LAYERNORM_OUT] = H * kept * ln_out;
    parts[ACT_SPLIT] = H * (kept * qkv_atty + (full ? 0 : dense) * mlp) +
                       F * (moe_blocks ? moe_blocks * moe_kept_floats_of(l, B, T) : 0);
    parts[ACT_ATTENTION] = keeps_probs(l) ? H * (none ? L : 0) * att : F * (full ? 1 : L) * att;
    parts[ACT_ENDS] = F * ends;
}

void gpt_activation_parts(const GPTLayout *l, int B, int T, size_t parts[ACT_NUM_PARTS]) {
    memset(parts, 0, ACT_NUM_PARTS * sizeof *parts);
    for (int c = 0; c < l->chunks; c++) {
        const GPTStage st = gpt_stage(l, c);
        size_t mine[ACT_NUM_PARTS];
        gpt_stage_activation_parts(l, &st, B, T, mine);
        for (int i = 0; i < ACT_NUM_PARTS; i++) parts[i] += mine[i];
    }
}

const char *gpt_activation_part_name(ActPart p) {
    static const char *const names[ACT_NUM_PARTS] = {"residual", "layernorm_out", "split",
                                                     "attention", "ends"};
    return p >= 0 && p < ACT_NUM_PARTS ? names[p] : "?";
}

static size_t parts_sum(const size_t parts[ACT_NUM_PARTS]) {
    size_t total = 0;
    for (int i = 0; i < ACT_NUM_PARTS; i++) total += parts[i];
    return total;
}

size_t gpt_activation_bytes(const GPTLayout *l, int B, int T) {
    size_t parts[ACT_NUM_PARTS];
    gpt_activation_parts(l, B, T, parts);
    return parts_sum(parts);
}

size_t gpt_stage_activation_bytes(const GPTLayout *l, const GPTStage *st, int B, int T) {
    size_t parts[ACT_NUM_PARTS];
    gpt_stage_activation_parts(l, st, B, T, parts);
    return parts_sum(parts);
}

size_t gpt_stage_io_floats(const GPTLayout *l, int B, int T) {
    return seq_rows(l, (size_t)B * T) * l->cfg.n_embd;
}

size_t gpt_activation_ints(int B, int T) { return 2 * (size_t)B * T; }

/* dlnf, dres_out, dres_in: 3 BTC; per block: dres_mid C, dln C, dqkv 3 aw,
 * datty aw, dfch mw, dfch_gelu mw = 14C per token at tp = 1, plus datt
 * NH/tp T T per sequence, or fused attention's D NH/tp T (under context
 * parallelism: none for the ring, Ulysses' heads' B NH'/cp Tg^2 or Tg);
 * under sequence parallelism, seq_full BTC
 * (and seq_full2 BTC under sp_regather); under context parallelism the
 * local position embeddings and their gradient, 2 T C. */
static size_t datt_floats(const GPTLayout *l, int B, int T) {
    const int a = l->cfg.attention;
    if (l->cp == 1) return gpt_attention_whole_keep_floats(a, B, T, l->n_head);
    return l->cp_algo == CP_ULYSSES
               ? gpt_attention_whole_keep_floats(a, B, l->cp * T, l->n_head / l->cp)
               : 0;
}

static size_t scratch_floats_of_blocks(const GPTLayout *l, int B, int T) {
    size_t BT = (size_t)B * T, C = l->cfg.n_embd, aw = l->attn_width, mw = l->mlp_width;
    return BT * 3 * C + BT * (2 * C + 4 * aw + 2 * mw) + datt_floats(l, B, T) +
           (l->sp ? BT * C : 0) + (l->sp_regather ? BT * C : 0) +
           (l->cp > 1 ? 2 * (size_t)T * C : 0);
}

/* Mixed precision's work area (the parts' comment above): one block's kept
 * tensors in fp32 (fch and fch_gelu where the model has dense blocks; att
 * where CP does not keep its own) and res2's two turns */
static size_t packed_work_floats(const GPTLayout *l, int B, int T) {
    if (!packed_blocks(l)) return 0;
    const size_t BT = (size_t)B * T, R = seq_rows(l, BT), LN = ln_rows(l, BT);
    const size_t C = l->cfg.n_embd, aw = l->attn_width, mw = l->mlp_width;
    const int dense = gpt_num_moe_blocks(&l->cfg) < l->cfg.n_layer;
    return 2 * LN * C + BT * 4 * aw + R * C +
           (keeps_probs(l) ? gpt_attention_keep_floats(l, B, T) : 0) + (dense ? BT * 2 * mw : 0) +
           2 * R * C;
}

/* and a mixture of experts' (moe.h), its own allocation */
size_t gpt_scratch_floats(const GPTLayout *l, int B, int T) {
    size_t moe = 0;
    if (l->cfg.n_experts > 0) {
        const MoEShape s = moe_shape_of(l, B, T);
        moe = moe_scratch_floats(&s);
    }
    return scratch_floats_of_blocks(l, B, T) + packed_work_floats(l, B, T) + moe;
}

/* Hand out consecutive pieces of one allocation. */
static float *take(float **cursor, size_t n) {
    float *p = *cursor;
    *cursor += n;
    return p;
}

/* The last stage's own: the head's activations, from cur on */
static float *take_head(const GPTLayout *l, GPTActs *a, float *cur) {
    const size_t BT = (size_t)a->B * a->T, R = seq_rows(l, BT), LN = ln_rows(l, BT);
    a->lnf = take(&cur, LN * l->cfg.n_embd);
    a->lnf_mean = take(&cur, R);
    a->lnf_rstd = take(&cur, R);
    a->probs = take(&cur, BT * l->vocab_rows);
    a->losses = take(&cur, BT);
    if (l->split_layers) a->ce_stats = take(&cur, 3 * BT);
    return cur;
}

/* ---- mixed precision: the blocks' activations packed ------------------------
 * What block i keeps in its 2-byte store (BlockActs.kept), in the store's
 * order, each as the fp32 buffer it is computed in (the rank's work area;
 * res2 one of its two turns) and its length: the parts' "2 bytes"
 * (gpt_stage_activation_parts). */
typedef struct {
    float *work;
    size_t n;
} KeptTensor;
enum { MAX_KEPT = 9 };

static int block_kept(const GPTLayout *l, const GPTActs *a, int i, KeptTensor k[MAX_KEPT]) {
    const BlockActs *b = &a->blocks[i];
    const size_t BT = (size_t)a->B * a->T, R = seq_rows(l, BT), LN = ln_rows(l, BT);
    const size_t C = l->cfg.n_embd, aw = l->attn_width, mw = l->mlp_width;
    int n = 0;
    if (l->recompute != RECOMPUTE_FULL) {
        k[n++] = (KeptTensor){b->ln1, LN * C};
        k[n++] = (KeptTensor){b->qkv, BT * 3 * aw};
        if (keeps_probs(l) && l->recompute == RECOMPUTE_NONE)
            k[n++] = (KeptTensor){b->att, gpt_attention_keep_floats(l, a->B, a->T)};
        k[n++] = (KeptTensor){b->atty, BT * aw};
        k[n++] = (KeptTensor){b->res1, R * C};
        k[n++] = (KeptTensor){b->ln2, LN * C};
        if (!b->moe) {
            k[n++] = (KeptTensor){b->fch, BT * mw};
            k[n++] = (KeptTensor){b->fch_gelu, BT * mw};
        }
    }
    if (i < a->stage.n_blocks - 1) k[n++] = (KeptTensor){b->res2, R * C};  /* the last: fp32 */
    return n;
}

static size_t block_kept_elems(const GPTLayout *l, const GPTActs *a, int i) {
    KeptTensor k[MAX_KEPT];
    size_t total = 0;
    for (int j = 0, n = block_kept(l, a, i, k); j < n; j++) total += k[j].n;
    return total;
}

/* After block i's forward: what it keeps, into its store */
static void pack_block(const GPTLayout *l, const GPTActs *a, int i) {
    KeptTensor k[MAX_KEPT];
    uint16_t *dst = a->blocks[i].kept;
    for (int j = 0, n = block_kept(l, a, i, k); j < n; dst += k[j].n, j++)
        narrow_to_half(dst, k[j].work, k[j].n, l->cfg.precision);
}

/* Before block i's backward (or weight gradients): its kept tensors back
 * into the work area, all but res2 (which its backward does not read) */
static void unpack_block(const GPTLayout *l, const GPTActs *a, int i) {
    KeptTensor k[MAX_KEPT];
    const uint16_t *src = a->blocks[i].kept;
    const int n = block_kept(l, a, i, k) - (i < a->stage.n_blocks - 1);
    for (int j = 0; j < n; src += k[j].n, j++)
        widen_from_half(k[j].work, src, k[j].n, l->cfg.precision);
}

/* Block i's input, as its backward reads it: the stage's input, or the
 * output of block i - 1 (packed: widened back into its own turn of the
 * work area, which is not block i's) */
static const float *block_input(const GPTLayout *l, const GPTActs *a, int i) {
    if (i == 0) return a->encoded;
    const BlockActs *prev = &a->blocks[i - 1];
    if (!packed_blocks(l)) return prev->res2;
    KeptTensor k[MAX_KEPT];
    const int n = block_kept(l, a, i - 1, k);
    widen_from_half(prev->res2, prev->kept + block_kept_elems(l, a, i - 1) - k[n - 1].n,
                    k[n - 1].n, l->cfg.precision);
    return prev->res2;
}

/* The elements a stage's blocks store in 2 bytes (block_kept's, from the
 * shapes alone: what sizes the allocation) */
static size_t stage_kept_elems(const GPTLayout *l, const GPTStage *st, int B, int T) {
    const size_t BT = (size_t)B * T, R = seq_rows(l, BT), LN = ln_rows(l, BT);
    const size_t C = l->cfg.n_embd, aw = l->attn_width, mw = l->mlp_width, L = st->n_blocks;
    size_t n = (L - 1) * R * C;  /* res2 but the last */
    if (l->recompute == RECOMPUTE_FULL) return n;
    const int att = keeps_probs(l) && l->recompute == RECOMPUTE_NONE;
    const size_t dense = L - stage_moe_blocks(l, st);
    return n + L * (2 * LN * C + BT * 4 * aw + R * C +
                    (att ? gpt_attention_keep_floats(l, B, T) : 0)) + dense * BT * 2 * mw;
}

/* The packed layout's own fp32 buffers (the parts' "fp32": the stage's
 * output, the statistics and CP's keep per block (FULL: once), the head),
 * then the 2-byte stores; the buffers the blocks compute in are the
 * scratch's work area (gpt_acts_use_scratch) */
static float *alloc_packed(const GPTLayout *l, const GPTStage *st, GPTActs *a, float *cur,
                          const MoEShape *moe_shape, size_t stored) {
    const int B = a->B, T = a->T, L = st->n_blocks, full = l->recompute == RECOMPUTE_FULL;
    const size_t BT = (size_t)B * T, R = seq_rows(l, BT), C = l->cfg.n_embd;
    const size_t keep = gpt_attention_keep_floats(l, B, T);
    float *out = take(&cur, R * C);
    for (int i = 0; i < L; i++) {
        BlockActs *b = &a->blocks[i];
        const int own = i == 0 || !full;  /* statistics and CP's keep: per block, or once */
        b->ln1_mean = own ? take(&cur, R) : a->blocks[0].ln1_mean;
        b->ln1_rstd = own ? take(&cur, R) : a->blocks[0].ln1_rstd;
        b->ln2_mean = own ? take(&cur, R) : a->blocks[0].ln2_mean;
        b->ln2_rstd = own ? take(&cur, R) : a->blocks[0].ln2_rstd;
        if (!keeps_probs(l)) b->att = own ? take(&cur, keep) : a->blocks[0].att;
        if (gpt_block_is_moe(&l->cfg, st->first_block + i)) {
            b->moe = calloc(1, sizeof *b->moe);
            CHECK(b->moe, "out of memory");
            moe_acts_alloc(b->moe, moe_shape);
        }
        if (i == L - 1) b->res2 = out;
    }
    if (st->head) cur = take_head(l, a, cur);
    a->kept = mem_alloc(MEM_ACTIVATIONS, stored * sizeof(uint16_t));
    size_t offset = 0;
    for (int i = 0; i < L; offset += block_kept_elems(l, a, i), i++)
        a->blocks[i].kept = a->kept + offset;
    CHECK(offset == stored, "the blocks' stores disagree with their formula");
    return cur;
}

void gpt_stage_acts_alloc(const GPTLayout *l, const GPTStage *st, int B, int T, GPTActs *a) {
    const size_t BT = (size_t)B * T, R = seq_rows(l, BT), LN = ln_rows(l, BT);
    const size_t C = l->cfg.n_embd;
    const size_t aw = l->attn_width, mw = l->mlp_width;
    memset(a, 0, sizeof *a);
    a->B = B;
    a->T = T;
    a->stage = *st;
    a->inputs = mem_alloc(MEM_ACTIVATIONS, gpt_activation_ints(B, T) * sizeof(int));
    a->targets = a->inputs + BT;
    CHECK(l->cfg.n_experts == 0 || l->recompute == RECOMPUTE_NONE, "activation recomputation "
          "of a mixture of experts is not supported: --recompute none");
    /* the MoE blocks' buffers are moe.h's own allocations */
    const size_t moe_blocks = stage_moe_blocks(l, st);
    const size_t moe = moe_blocks ? moe_blocks * moe_kept_floats_of(l, B, T) : 0;
    const MoEShape moe_shape = moe > 0 ? moe_shape_of(l, B, T) : (MoEShape){0};
    /* the fp32 floats: the formula's bytes but the experts' and the stores' */
    const size_t stored = packed_blocks(l) ? stage_kept_elems(l, st, B, T) : 0;
    const size_t nf = (gpt_stage_activation_bytes(l, st, B, T) - moe * sizeof(float) -
                       stored * precision_bytes((Precision)l->cfg.precision)) / sizeof(float);
    a->blocks = calloc(st->n_blocks, sizeof(BlockActs));
    CHECK(a->blocks != NULL, "out of memory");
    float *base = mem_alloc(MEM_ACTIVATIONS, nf * sizeof(float)), *cur = base;
    a->encoded = take(&cur, R * C);
    if (packed_blocks(l)) {
        cur = alloc_packed(l, st, a, cur, &moe_shape, stored);
        CHECK((size_t)(cur - base) == nf, "activation layout disagrees with its formula");
        return;
    }
    for (int i = 0; i < st->n_blocks; i++) {
        BlockActs *b = &a->blocks[i];
        if (i > 0 && l->recompute == RECOMPUTE_FULL) {
            /* block 0's buffers, rebuilt before each block's backward */
            *b = a->blocks[0];
            b->res2 = take(&cur, R * C);
            continue;
        }
        b->ln1 = take(&cur, LN * C);
        b->ln1_mean = take(&cur, R);
        b->ln1_rstd = take(&cur, R);
        b->qkv = take(&cur, BT * 3 * aw);
        int shared_att = i > 0 && attention_shared(l);
        b->att = shared_att ? a->blocks[0].att : take(&cur, gpt_attention_keep_floats(l, B, T));
        b->atty = take(&cur, BT * aw);
        b->res1 = take(&cur, R * C);
        b->ln2 = take(&cur, LN * C);
        b->ln2_mean = take(&cur, R);
        b->ln2_rstd = take(&cur, R);
        if (gpt_block_is_moe(&l->cfg, st->first_block + i)) {
            b->moe = calloc(1, sizeof *b->moe);
            CHECK(b->moe, "out of memory");
            moe_acts_alloc(b->moe, &moe_shape);
        } else {
            b->fch = take(&cur, BT * mw);
            b->fch_gelu = take(&cur, BT * mw);
        }
        b->res2 = take(&cur, R * C);
    }
    if (st->head) cur = take_head(l, a, cur);
    CHECK((size_t)(cur - base) == nf, "activation layout disagrees with its formula");
}

/* Mixed precision's work area (packed_work_floats), from cur on */
static float *take_work(const GPTLayout *l, int B, int T, BackwardScratch *s, float *cur) {
    const size_t BT = (size_t)B * T, R = seq_rows(l, BT), LN = ln_rows(l, BT);
    const size_t C = l->cfg.n_embd, aw = l->attn_width, mw = l->mlp_width;
    BlockActs *w = &s->work;
    w->ln1 = take(&cur, LN * C);
    w->qkv = take(&cur, BT * 3 * aw);
    if (keeps_probs(l)) w->att = take(&cur, gpt_attention_keep_floats(l, B, T));
    w->atty = take(&cur, BT * aw);
    w->res1 = take(&cur, R * C);
    w->ln2 = take(&cur, LN * C);
    if (gpt_num_moe_blocks(&l->cfg) < l->cfg.n_layer) {
        w->fch = take(&cur, BT * mw);
        w->fch_gelu = take(&cur, BT * mw);
    }
    s->res2_turn[0] = take(&cur, R * C);
    s->res2_turn[1] = take(&cur, R * C);
    return cur;
}

void gpt_scratch_alloc(const GPTLayout *l, int B, int T, BackwardScratch *s) {
    const size_t BT = (size_t)B * T, C = l->cfg.n_embd;
    const size_t aw = l->attn_width, mw = l->mlp_width;
    memset(s, 0, sizeof *s);
    size_t ns = scratch_floats_of_blocks(l, B, T) + packed_work_floats(l, B, T);
    float *sbase = mem_alloc(MEM_WORKSPACE, ns * sizeof(float)), *cur = sbase;
    s->dlnf = take(&cur, BT * C);
    s->dres_out = take(&cur, BT * C);
    s->dres_in = take(&cur, BT * C);
    s->block_base = cur;
    s->dres_mid = take(&cur, BT * C);
    s->dln = take(&cur, BT * C);
    s->dqkv = take(&cur, BT * 3 * aw);
    s->datt = take(&cur, datt_floats(l, B, T));
    s->datty = take(&cur, BT * aw);
    s->dfch = take(&cur, BT * mw);
    s->dfch_gelu = take(&cur, BT * mw);
    s->block_floats = (size_t)(cur - s->block_base);
    if (l->sp) s->seq_full = take(&cur, BT * C);
    if (l->sp_regather) s->seq_full2 = take(&cur, BT * C);
    if (l->cp > 1) {
        s->wpe_local = take(&cur, (size_t)T * C);
        s->dwpe_local = take(&cur, (size_t)T * C);
    }
    if (packed_blocks(l)) cur = take_work(l, B, T, s, cur);
    CHECK((size_t)(cur - sbase) == ns, "scratch layout disagrees with its formula");
    if (l->cfg.n_experts > 0) {
        const MoEShape shape = moe_shape_of(l, B, T);
        s->moe = calloc(1, sizeof *s->moe);
        CHECK(s->moe, "out of memory");
        moe_scratch_alloc(s->moe, &shape);
    }
}

void gpt_acts_use_scratch(GPTActs *a, const BackwardScratch *s) {
    a->seq_full = s->seq_full;
    a->seq_full2 = s->seq_full2;
    a->wpe_local = s->wpe_local;
    a->dwpe_local = s->dwpe_local;
    const int L = a->stage.n_blocks;
    for (int i = 0; a->kept && i < L; i++) {  /* packed: the layers compute in the work area */
        BlockActs *b = &a->blocks[i];
        const BlockActs *w = &s->work;
        b->ln1 = w->ln1, b->qkv = w->qkv, b->atty = w->atty, b->res1 = w->res1, b->ln2 = w->ln2;
        if (w->att) b->att = w->att;  /* the lse and CP's keep: their own, per block */
        if (!b->moe) b->fch = w->fch, b->fch_gelu = w->fch_gelu;
        if (i < L - 1) b->res2 = s->res2_turn[i % 2];
    }
    for (int i = 0; i < a->stage.n_blocks; i++) {
        a->blocks[i].seq_full = s->seq_full;
        a->blocks[i].seq_full2 = s->seq_full2;
    }
}

void gpt_acts_alloc(const GPTLayout *l, int B, int T, GPTActs *a, BackwardScratch *s) {
    CHECK(l->pp == 1 && l->chunks == 1, "gpt_acts_alloc holds the whole model: a pipeline "
          "stage's activations are gpt_stage_acts_alloc's");
    const GPTStage whole = gpt_stage(l, 0);
    gpt_stage_acts_alloc(l, &whole, B, T, a);
    gpt_scratch_alloc(l, B, T, s);
    gpt_acts_use_scratch(a, s);
}

void gpt_stage_acts_poison(const GPTLayout *l, GPTActs *a) {
    const size_t moe_blocks = stage_moe_blocks(l, &a->stage);
    const size_t moe = moe_blocks ? moe_blocks * moe_kept_floats_of(l, a->B, a->T) : 0;
    const size_t stored = packed_blocks(l) ? stage_kept_elems(l, &a->stage, a->B, a->T) : 0;
    const size_t H = precision_bytes((Precision)l->cfg.precision);
    const size_t nf = (gpt_stage_activation_bytes(l, &a->stage, a->B, a->T) -
                       moe * sizeof(float) - stored * H) / sizeof(float);
    fill_value(a->encoded, NAN, nf);  /* the start of the fp32 allocation */
    for (size_t done = 0; done < stored; done += nf)  /* NaN from it, rounded: NaN */
        narrow_to_half(a->kept + done, a->encoded, stored - done < nf ? stored - done : nf,
                       l->cfg.precision);
}

void gpt_stage_acts_free(GPTActs *a) {
    if (a->weight_grads) mem_free(a->weight_grads);
    mem_free(a->kept);
    mem_free(a->inputs);
    mem_free(a->encoded);  /* the start of the float allocation */
    for (int i = 0; i < a->stage.n_blocks; i++)
        if (a->blocks[i].moe) {
            moe_acts_free(a->blocks[i].moe);
            free(a->blocks[i].moe);
        }
    free(a->blocks);
    memset(a, 0, sizeof *a);
}

void gpt_scratch_free(BackwardScratch *s) {
    if (s->moe) {
        moe_scratch_free(s->moe);
        free(s->moe);
    }
    mem_free(s->dlnf);     /* the start of the scratch allocation */
    memset(s, 0, sizeof *s);
}

void gpt_acts_free(GPTActs *a, BackwardScratch *s) {
    gpt_stage_acts_free(a);
    gpt_scratch_free(s);
}

/* ---- the whole model's layers (tp = 1): the kernels, no communication ----- */

static void whole_linear_forward(const GPTLayout *l, float *out, const float *inp,
                                 const float *w, const float *b, int N, int IC, int OC) {
    (void)l;
    matmul_forward(out, inp, w, b, N, IC, OC);
}
static void whole_linear_backward(const GPTLayout *l, float *dinp, float *dw, float *db,
                                  const float *dout, const float *inp, const float *w, int N,
                                  int IC, int OC) {
    (void)l;
    matmul_backward(dinp, dw, db, dout, inp, w, N, IC, OC);
}
static void whole_embedding_forward(const GPTLayout *l, float *out, const int *tokens,
                                    const float *wte, const float *wpe, int B, int T) {
    encoder_forward(out, tokens, wte, wpe, B, T, l->cfg.n_embd);
}
static void whole_embedding_backward(const GPTLayout *l, float *dwte, float *dwpe,
                                     const float *dout, const int *tokens, int B, int T) {
    encoder_backward(dwte, dwpe, dout, tokens, B, T, l->cfg.n_embd);
}
static float whole_crossentropy_forward(const GPTLayout *l, float *losses, float *probs,
                                        float *stats, const int *targets, int N) {
    (void)stats;
    return crossentropy_forward(losses, probs, probs, targets, N, l->cfg.vocab_size);
}
static void whole_crossentropy_backward(const GPTLayout *l, float *probs, const int *targets,
                                        float dloss, int N) {
    crossentropy_backward(probs, targets, dloss, N, l->cfg.vocab_size);
}

static const TensorParallelOps g_whole_ops = {
    whole_linear_forward,      whole_linear_backward,       whole_linear_forward,
    whole_linear_backward,     whole_embedding_forward,     whole_embedding_backward,
    whole_crossentropy_forward, whole_crossentropy_backward,
};

/* Rebuild what block i's backward needs and the forward did not keep. */
static void recompute_block(const GPTLayout *l, const BlockParams *p, BlockActs *a,
                            const float *x, int B, int T) {
    if (l->recompute == RECOMPUTE_NONE) return;
    CHECK(l->cfg.n_experts == 0, "activation recomputation of a mixture of experts is not "
          "supported: --recompute none");
    CHECK(l->cp == 1 || l->recompute == RECOMPUTE_FULL || l->cfg.attention == ATTENTION_FUSED,
          "selective recomputation rebuilds the attention probabilities, which context "
          "parallelism does not keep: recompute full, or none (the ring keeps no T x T term "
          "already)");
    CHECK(l->recompute_ops, "activation recomputation needs lab 05's functions (recompute_ops)");
    if (l->recompute == RECOMPUTE_FULL) {
        l->recompute_ops->block_forward_again(l, p, a, x, B, T);
        return;
    }
    if (!keeps_probs(l)) return;  /* fused: its backward pass rebuilds the tiles from the lse */
    l->recompute_ops->attention_again(l, a, B, T);
    store_rounded(l, a->att, gpt_attention_keep_floats(l, B, T));  /* as the forward's */
}

static const TensorParallelOps *ops_of(const GPTLayout *l) {
    CHECK(!l->split_layers == !l->tp_ops && (l->split_layers || l->tp == 1),
          "a layout of tp %d must run split layers (split_layers and tp_ops set together)", l->tp);
    CHECK(!l->sp == !l->sp_ops && (!l->sp || l->split_layers) && (!l->sp_regather || l->sp),
          "sequence parallelism needs its layers (sp and sp_ops set together) and split layers "
          "(and sp_regather needs sp)");
    return l->split_layers ? l->tp_ops : &g_whole_ops;
}

/* Attention over this rank's qkv: the kernels, or under context
 * parallelism the program's ops (model.h), which bring the other ranks'
 * positions */
static const ContextParallelOps *cp_ops_of(const GPTLayout *l) {
    CHECK(l->cp_ops && l->cp_group, "a layout of cp %d needs its attention (cp_ops) and its "
          "group (cp_group)", l->cp);
    return l->cp_ops;
}
size_t gpt_attention_whole_keep_floats(int attention, int B, int T, int NH) {
    return (size_t)B * NH * T * (attention == ATTENTION_FUSED ? 1 : T);
}

void gpt_attention_whole_forward(int attention, float *out, float *keep, const float *qkv, int B,
                                 int T, int C, int NH) {
    if (attention == ATTENTION_FUSED) attention_fused_forward(out, keep, qkv, B, T, C, NH);
    else attention_forward(out, keep, qkv, B, T, C, NH);
}

void gpt_attention_whole_backward(int attention, float *dqkv, float *scratch, const float *dout,
                                  const float *qkv, const float *out, const float *keep, int B,
                                  int T, int C, int NH) {
    if (attention == ATTENTION_FUSED)
        attention_fused_backward(dqkv, scratch, dout, qkv, out, keep, B, T, C, NH);
    else attention_backward(dqkv, scratch, dout, qkv, keep, B, T, C, NH);
}

static void attention_of_layout_forward(const GPTLayout *l, BlockActs *a, int B, int T) {
    if (l->cp > 1) {  /* what the CP ops keep (the ring's lse) stays as they wrote it */
        cp_ops_of(l)->attention_forward(l, a->atty, a->att, a->qkv, B, T);
    } else {  /* the probabilities are rounded as their store keeps them; the lse stays fp32 */
        gpt_attention_whole_forward(l->cfg.attention, a->atty, a->att, a->qkv, B, T,
                                    l->attn_width, l->n_head);
        if (keeps_probs(l)) store_rounded(l, a->att, gpt_attention_keep_floats(l, B, T));
    }
    store_rounded(l, a->atty, (size_t)B * T * l->attn_width);
}
static void attention_of_layout_backward(const GPTLayout *l, const BlockActs *a,
                                         BackwardScratch *s, int B, int T) {
    if (l->cp > 1)
        cp_ops_of(l)->attention_backward(l, s->dqkv, s->datt, s->datty, a->qkv, a->atty, a->att,
                                         B, T);
    else gpt_attention_whole_backward(l->cfg.attention, s->dqkv, s->datt, s->datty, a->qkv,
                                      a->atty, a->att, B, T, l->attn_width, l->n_head);
}

/* ---- the split layers as this layout runs them ----------------------------
 * TensorParallelOps', or under sequence parallelism SequenceParallelOps',
 * whose rows between the split layers are this rank's R = N/tp (model.h).
 * Either way: a column layer reads an (N, IC) input whose rows from
 * ln_first the caller wrote (all of them, or its R rows from seq_first; with
 * sp_regather an (R, IC) input), and gives its input gradient's R rows at
 * the start of dinp, which holds zeros on entry; a row layer gives R rows.
 * full and full2 are the (N, C) scratch buffers (NULL without SP). */
static size_t seq_first(const GPTLayout *l, int N) {
    return l->sp ? (size_t)l->tp_rank * (size_t)(N / l->tp) : 0;
}
static size_t ln_first(const GPTLayout *l, int N) { return l->sp_regather ? 0 : seq_first(l, N); }
static void column_forward(const GPTLayout *l, float *out, float *inp, const float *w,
                           const float *b, float *full, int N, int IC, int OC) {
    if (l->sp_regather) l->sp_ops->column_forward_regather(l, out, inp, w, b, full, N, IC, OC);
    else if (l->sp) l->sp_ops->column_forward(l, out, inp, w, b, N, IC, OC);
    else ops_of(l)->column_forward(l, out, inp, w, b, N, IC, OC);
}
static void column_backward(const GPTLayout *l, float *dinp, float *dw, float *db,
                            const float *dout, const float *inp, const float *w, float *full,
                            float *full2, int N, int IC, int OC) {
    if (l->sp_regather)
        l->sp_ops->column_backward_regather(l, dinp, dw, db, dout, inp, w, full, full2, N, IC,
                                            OC);
    else if (l->sp) l->sp_ops->column_backward(l, dinp, dw, db, dout, inp, w, full, N, IC, OC);
    else ops_of(l)->column_backward(l, dinp, dw, db, dout, inp, w, N, IC, OC);
}
static void row_forward(const GPTLayout *l, float *out, const float *inp, const float *w,
                        const float *b, float *full, int N, int IC, int OC) {
    if (l->sp) l->sp_ops->row_forward(l, out, inp, w, b, full, N, IC, OC);
    else ops_of(l)->row_forward(l, out, inp, w, b, N, IC, OC);
}
static void row_backward(const GPTLayout *l, float *dinp, float *dw, float *db,
                         const float *dout, const float *inp, const float *w, float *full,
                         int N, int IC, int OC) {
    if (l->sp) l->sp_ops->row_backward(l, dinp, dw, db, dout, inp, w, full, N, IC, OC);
    else ops_of(l)->row_backward(l, dinp, dw, db, dout, inp, w, N, IC, OC);
}

/* ---- forward and backward -------------------------------------------------
 * Local widths: aw = C/tp (q, k, v and the attention output of NH/tp
 * heads), mw = 4C/tp. Attention is column-parallel into the heads and
 * row-parallel out of them, the MLP column then row: one all-reduce per
 * pair in each direction (model.h's TensorParallelOps), or a reduce-scatter
 * and an all-gather under sequence parallelism. x, res1, res2 and the
 * layernorm statistics have R rows; the layernorms write theirs from row
 * ln_first of their outputs, which the column layers read. */

/* ---- mixture of experts (moe.h) ------------------------------------------- */

static MoEStats g_moe_stats;
void gpt_moe_stats_reset(void) { memset(&g_moe_stats, 0, sizeof g_moe_stats); }
const MoEStats *gpt_moe_stats(void) { return &g_moe_stats; }

/* An MoE block's parameters (or gradients) as moe.h takes them */
static MoEParams moe_params(const BlockParams *p) {
    return (MoEParams){p->routerw, p->fcw, p->fcb, p->fcprojw, p->fcprojb};
}

static const ExpertParallelOps *ep_ops_of(const GPTLayout *l) {
    CHECK(l->ep_ops && l->ep_group, "a layout of ep %d needs its experts' exchange (ep_ops) and "
          "its group (ep_group)", l->ep);
    return l->ep_ops;
}

/* x2 = x1 + MoE(ln2(x1)), the MoE's output into res2 first (through the
 * layout's experts under expert parallelism); its aux loss (moe.h) joins
 * the objective: returned, and counted in the statistics */
static float moe_branch_forward(const GPTLayout *l, const BlockParams *p, BlockActs *a,
                                size_t RC) {
    const MoEParams mp = moe_params(p);
    if (l->ep > 1) ep_ops_of(l)->moe_forward(l, a->res2, a->moe, &mp, a->ln2);
    else moe_forward(a->res2, a->moe, &mp, a->ln2);
    residual_forward(a->res2, a->res2, a->res1, RC);
    const MoERouting *r = &a->moe->route;
    g_moe_stats.aux += r->aux;
    g_moe_stats.dropped += r->dropped;
    for (int e = 0; e < l->cfg.n_experts && e < MOE_STATS_MAX_EXPERTS; e++)
        g_moe_stats.load[e] += r->counts[e];
    return r->aux;
}

void block_forward(const GPTLayout *l, const BlockParams *p, BlockActs *a, const float *x,
                   int B, int T) {
    const int C = l->cfg.n_embd, aw = l->attn_width, mw = l->mlp_width, N = B * T;
    const int R = (int)seq_rows(l, (size_t)N);
    const size_t RC = (size_t)R * C, mine = ln_first(l, N) * C;
    layernorm_forward(a->ln1 + mine, a->ln1_mean, a->ln1_rstd, x, p->ln1w, p->ln1b, R, C);
    store_rounded(l, a->ln1 + mine, RC);
    column_forward(l, a->qkv, a->ln1, p->qkvw, p->qkvb, a->seq_full, N, C, 3 * aw);
    store_rounded(l, a->qkv, (size_t)N * 3 * aw);
    attention_of_layout_forward(l, a, B, T);
    row_forward(l, a->res1, a->atty, p->attprojw, p->attprojb, a->seq_full, N, aw, C);
    store_rounded(l, a->res1, RC);
    residual_forward(a->res1, a->res1, x, RC);
    store_rounded(l, a->res1, RC);
    layernorm_forward(a->ln2 + mine, a->ln2_mean, a->ln2_rstd, a->res1, p->ln2w, p->ln2b, R, C);
    store_rounded(l, a->ln2 + mine, RC);
    if (a->moe) {
        a->aux = moe_branch_forward(l, p, a, RC);
        store_rounded(l, a->res2, RC);
        return;
    }
    column_forward(l, a->fch, a->ln2, p->fcw, p->fcb, a->seq_full, N, C, mw);
    store_rounded(l, a->fch, (size_t)N * mw);
    gelu_forward(a->fch_gelu, a->fch, (size_t)N * mw);
    store_rounded(l, a->fch_gelu, (size_t)N * mw);
    row_forward(l, a->res2, a->fch_gelu, p->fcprojw, p->fcprojb, a->seq_full, N, mw, C);
    store_rounded(l, a->res2, RC);
    residual_forward(a->res2, a->res2, a->res1, RC);
    store_rounded(l, a->res2, RC);
}

void block_backward(const GPTLayout *l, const BlockParams *p, BlockParams *g,
                    const BlockActs *a, const float *x, const float *dout, float *dx,
                    BackwardScratch *s, int B, int T) {
    const int C = l->cfg.n_embd, aw = l->attn_width, mw = l->mlp_width, N = B * T;
    const int R = (int)seq_rows(l, (size_t)N);
    const size_t RC = (size_t)R * C;
    set_zero(s->block_base, s->block_floats);
    /* MLP branch, x2 = x1 + fcproj(gelu(fc(ln2(x1)))): the branch gets dout,
     * and the skip connection adds dout into d(x1) = dres_mid. An MoE
     * branch (moe.h) the same, its aux loss weighted as the objective's. */
    if (a->moe) {
        const MoEParams mp = moe_params(p), mg = moe_params(g);
        if (l->ep > 1)
            ep_ops_of(l)->moe_backward(l, s->dln, &mg, dout, a->moe, s->moe, &mp, a->ln2,
                                       s->moe_daux);
        else
            moe_backward(s->dln, &mg, dout, a->moe, s->moe, &mp, a->ln2, s->moe_daux);
    } else {
        row_backward(l, s->dfch_gelu, g->fcprojw, g->fcprojb, dout, a->fch_gelu, p->fcprojw,
                     a->seq_full, N, mw, C);
        store_rounded(l, s->dfch_gelu, (size_t)N * mw);
        gelu_backward(s->dfch, a->fch, s->dfch_gelu, (size_t)N * mw);
        store_rounded(l, s->dfch, (size_t)N * mw);
        column_backward(l, s->dln, g->fcw, g->fcb, s->dfch, a->ln2, p->fcw, a->seq_full,
                        a->seq_full2, N, C, mw);
    }
    store_rounded(l, s->dln, (size_t)N * C);
    layernorm_backward(s->dres_mid, g->ln2w, g->ln2b, s->dln, a->res1, p->ln2w, a->ln2_mean,
                       a->ln2_rstd, R, C);
    residual_backward(s->dres_mid, dout, RC);
    store_rounded(l, s->dres_mid, RC);
    /* Attention branch, x1 = x + attproj(attention(qkv(ln1(x)))). */
    set_zero(s->dln, (size_t)N * C);
    row_backward(l, s->datty, g->attprojw, g->attprojb, s->dres_mid, a->atty, p->attprojw,
                 a->seq_full, N, aw, C);
    store_rounded(l, s->datty, (size_t)N * aw);
    attention_of_layout_backward(l, a, s, B, T);
    store_rounded(l, s->dqkv, (size_t)N * 3 * aw);
    column_backward(l, s->dln, g->qkvw, g->qkvb, s->dqkv, a->ln1, p->qkvw, a->seq_full,
                    a->seq_full2, N, C, 3 * aw);
    store_rounded(l, s->dln, (size_t)N * C);
    layernorm_backward(dx, g->ln1w, g->ln1b, s->dln, x, p->ln1w, a->ln1_mean, a->ln1_rstd,
                       R, C);
    residual_backward(dx, s->dres_mid, RC);
    store_rounded(l, dx, RC);
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

/* Under context parallelism a rank's T positions of a sequence are its
 * placement's (math_shared.h): the layers see them as positions 0..T-1 of
 * a local table, wpe_local, whose row t is wpe's row of global position
 * gpt_cp_position(t); its gradient is added back into those rows. Both
 * copies go by runs of consecutive positions: a chunk (contiguous, zigzag)
 * or one row every cp (striped). */
static void positions_copy(const GPTLayout *l, float *wpe, float *local, int T, int to_wpe) {
    const int C = l->cfg.n_embd, striped = gpt_cp_placement(l) == CP_PLACE_STRIPED;
    const int run = striped ? 1 : gpt_cp_placement(l) == CP_PLACE_ZIGZAG ? T / 2 : T;
    for (int t = 0; t < (striped ? 1 : T); t += run) {
        float *global = wpe + (size_t)gpt_cp_position(l, t, T) * C;
        const int rows = striped ? T : 1, cols = striped ? C : run * C;
        const int gs = striped ? l->cp * C : cols;  /* from one local row to the next */
        if (to_wpe) copy_strided(global, gs, local + (size_t)t * C, cols, rows, cols, 1);
        else copy_strided(local + (size_t)t * C, cols, global, gs, rows, cols, 0);
    }
}
static const float *positions_of_rank(const GPTLayout *l, const float *wpe, GPTActs *a) {
    if (l->cp == 1) return wpe;
    positions_copy(l, (float *)wpe, a->wpe_local, a->T, 0);
    return a->wpe_local;
}
static void add_position_grads(const GPTLayout *l, float *dwpe, const GPTActs *a) {
    positions_copy(l, dwpe, a->dwpe_local, a->T, 1);
}

/* The embeddings: every row, or this rank's R under sequence parallelism. */
static void embedding_forward(const GPTLayout *l, const GPTParams *p, GPTActs *a) {
    const float *wpe = positions_of_rank(l, p->wpe, a);
    if (l->sp)
        l->sp_ops->embedding_forward(l, a->encoded, a->inputs, p->wte, wpe, a->seq_full, a->B,
                                     a->T);
    else ops_of(l)->embedding_forward(l, a->encoded, a->inputs, p->wte, wpe, a->B, a->T);
    store_rounded(l, a->encoded, seq_rows(l, (size_t)a->B * a->T) * l->cfg.n_embd);
}
static void embedding_backward(const GPTLayout *l, GPTParams *g, GPTActs *a, const float *dout) {
    float *dwpe = g->wpe;
    if (l->cp > 1) {
        dwpe = a->dwpe_local;
        set_zero(dwpe, (size_t)a->T * l->cfg.n_embd);
    }
    if (l->sp)
        l->sp_ops->embedding_backward(l, g->wte, dwpe, dout, a->inputs, a->seq_full, a->B, a->T);
    else ops_of(l)->embedding_backward(l, g->wte, dwpe, dout, a->inputs, a->B, a->T);
    if (l->cp > 1) add_position_grads(l, g->wpe, a);
}

float gpt_stage_forward(const GPTLayout *l, const GPTParams *p, GPTActs *a,
                        const ModelHooks *h) {
    const TensorParallelOps *op = ops_of(l);
    const GPTStage *st = &a->stage;
    const int B = a->B, T = a->T, C = l->cfg.n_embd, L = l->cfg.n_layer, N = B * T;
    const int R = (int)seq_rows(l, (size_t)N);
    if (st->embedding) {
        needed(h, GPT_UNIT_EMBED, 0);
        embedding_forward(l, p, a);
        if (!st->head) done(h, GPT_UNIT_EMBED, 0);
    }
    const float *x = a->encoded;  /* the embeddings' output, or the received activation */
    float aux = 0.0f;             /* the MoE blocks' aux losses: part of the objective */
    for (int i = 0; i < st->n_blocks; i++) {
        const int u = 1 + st->first_block + i;
        needed(h, u, 0);
        block_forward(l, &p->blocks[u - 1], &a->blocks[i], x, B, T);
        if (packed_blocks(l)) pack_block(l, a, i);
        done(h, u, 0);
        x = a->blocks[i].res2;
        aux += a->blocks[i].aux;
    }
    if (!st->head) return 0.0f;
    needed(h, L + 1, 0);
    layernorm_forward(a->lnf + ln_first(l, N) * C, a->lnf_mean, a->lnf_rstd, x, p->lnfw,
                      p->lnfb, R, C);
    store_rounded(l, a->lnf + ln_first(l, N) * C, (size_t)R * C);
    done(h, L + 1, 0);
    /* logits, the tied head: column-parallel over this rank's vocabulary rows */
    if (!st->embedding) needed(h, GPT_UNIT_EMBED, 0);
    column_forward(l, a->probs, a->lnf, p->wte, NULL, a->seq_full, N, C, l->vocab_rows);
    done(h, GPT_UNIT_EMBED, 0);
    const size_t logits = (size_t)N * l->vocab_rows;
    store_rounded(l, a->probs, logits);
    /* the softmax and the loss in fp32, the probabilities kept rounded */
    const float loss = op->crossentropy_forward(l, a->losses, a->probs, a->ce_stats, a->targets, N);
    store_rounded(l, a->probs, logits);
    /* the mean over the whole sequences' tokens, not this rank's positions */
    return (l->cp > 1 ? cp_ops_of(l)->loss_mean(l, loss) : loss) + aux;
}

float gpt_forward(const GPTLayout *l, const GPTParams *p, GPTActs *a, const ModelHooks *h) {
    CHECK(a->stage.embedding && a->stage.head, "gpt_forward runs the whole model: a pipeline "
          "stage runs gpt_stage_forward");
    return gpt_stage_forward(l, p, a, h);
}

/* What backward_input keeps for backward_weight, per block: the output
 * gradients of its four linear layers, fcproj's (R,C) dout... (N = B T
 * rows each, or R under sequence parallelism for the residual stream's):
 *   dout (N,C) fcproj, dfch (N,mw) fc, dres_mid (N,C) attproj, dqkv (N,3aw) qkv;
 * and on the first stage the embeddings' output gradient (R,C). */
size_t gpt_stage_weight_grad_floats(const GPTLayout *l, const GPTStage *st, int B, int T) {
    const size_t N = (size_t)B * T, C = l->cfg.n_embd;
    return st->n_blocks * N * (2 * C + 3 * (size_t)l->attn_width + l->mlp_width) +
           (st->embedding ? seq_rows(l, N) * C : 0);
}

typedef enum { BACKWARD_WHOLE, BACKWARD_INPUT } BackwardPart;

static void stage_backward(const GPTLayout *l, const GPTParams *p, GPTParams *g, GPTActs *a,
                           BackwardScratch *s, const float *dout_in, float *dinput, float dloss,
                           const ModelHooks *h, BackwardPart part) {
    const TensorParallelOps *op = ops_of(l);
    const GPTStage *st = &a->stage;
    const int B = a->B, T = a->T, C = l->cfg.n_embd, L = l->cfg.n_layer, N = B * T;
    const int R = (int)seq_rows(l, (size_t)N);
    const size_t NC = (size_t)N * C;
    const int input_only = part == BACKWARD_INPUT;
    /* under BACKWARD_INPUT the linear layers' weight gradients wait for
     * gpt_stage_backward_weight, their output gradients kept here */
    float *keep = NULL;
    if (input_only) {
        CHECK(!a->weight_grads, "a second backward_input before the backward_weight");
        a->weight_grads = mem_alloc(MEM_ACTIVATIONS, gpt_stage_weight_grad_floats(l, st, B, T) *
                                                         sizeof(float));
        keep = a->weight_grads;
        a->split_hooks = h;
    }
    /* d(objective)/d(output) of the stage: from the loss, or received */
    const float *dout = dout_in;
    dloss *= h && h->loss_scale ? *h->loss_scale : 1.0f;  /* fp16's loss scaling (model.h) */
    s->moe_daux = dloss;
    if (st->head) {
        /* the loss is the mean over B*T positions: d(loss)/d(row loss) = dloss/(BT) */
        op->crossentropy_backward(l, a->probs, a->targets, dloss / N, N);
        store_rounded(l, a->probs, (size_t)N * l->vocab_rows);
        set_zero(s->dlnf, NC);
        needed(h, GPT_UNIT_EMBED, 1);
        grads_begin(h, GPT_UNIT_EMBED);
        column_backward(l, s->dlnf, input_only ? NULL : g->wte, NULL, a->probs, a->lnf, p->wte,
                        a->seq_full, a->seq_full2, N, C, l->vocab_rows);
        store_rounded(l, s->dlnf, NC);
        done(h, GPT_UNIT_EMBED, 1);
        set_zero(s->dres_out, NC);
        needed(h, L + 1, 1);
        grads_begin(h, L + 1);
        const float *x = st->n_blocks ? a->blocks[st->n_blocks - 1].res2 : a->encoded;
        layernorm_backward(s->dres_out, g->lnfw, g->lnfb, s->dlnf, x, p->lnfw, a->lnf_mean,
                           a->lnf_rstd, R, C);
        store_rounded(l, s->dres_out, (size_t)R * C);
        done(h, L + 1, 1);
        grads_ready(h, L + 1);
        dout = s->dres_out;
    }
    /* d(input) of one block is d(output) of the one before: dres_in and
     * dres_out take turns (never the received dout_in, which is read) */
    for (int i = st->n_blocks - 1, k = 0; i >= 0; i--, k++) {
        const int u = 1 + st->first_block + i;
        const float *x = block_input(l, a, i);
        if (packed_blocks(l)) unpack_block(l, a, i);
        float *dx = k % 2 == 0 ? s->dres_in : s->dres_out;
        set_zero(dx, NC);
        needed(h, u, 1);
        grads_begin(h, u);  /* may repoint the views: read them after */
        BlockParams gi = g->blocks[u - 1];
        if (input_only)  /* the layernorms' (small) stay in the input part */
            gi.qkvw = gi.qkvb = gi.attprojw = gi.attprojb = gi.fcw = gi.fcb = gi.fcprojw =
                gi.fcprojb = NULL;
        recompute_block(l, &p->blocks[u - 1], &a->blocks[i], x, B, T);
        block_backward(l, &p->blocks[u - 1], &gi, &a->blocks[i], x, dout, dx, s, B, T);
        done(h, u, 1);
        grads_ready(h, u);
        if (input_only) {  /* block i's four, in gpt_stage_weight_grad_floats' order */
            const size_t aw = l->attn_width, mw = l->mlp_width;
            float *kb = keep + (size_t)i * N * (2 * C + 3 * aw + mw);
            device_copy(kb, dout, NC * sizeof(float));
            device_copy(kb + NC, s->dfch, (size_t)N * mw * sizeof(float));
            device_copy(kb + NC + (size_t)N * mw, s->dres_mid, NC * sizeof(float));
            device_copy(kb + 2 * NC + (size_t)N * mw, s->dqkv, (size_t)N * 3 * aw * sizeof(float));
        }
        dout = dx;
    }
    if (!st->embedding) {
        device_copy(dinput, dout, (size_t)R * C * sizeof(float));  /* for the previous stage */
        return;
    }
    if (input_only) {  /* the embeddings have weight gradients only */
        device_copy(keep + gpt_stage_weight_grad_floats(l, st, B, T) - (size_t)R * C, dout,
                    (size_t)R * C * sizeof(float));
        return;
    }
    /* wte is final only now: the tied LM head wrote to it first */
    if (!st->head) grads_begin(h, GPT_UNIT_EMBED);
    embedding_backward(l, g, a, dout);
    grads_ready(h, GPT_UNIT_EMBED);
}

void gpt_stage_backward(const GPTLayout *l, const GPTParams *p, GPTParams *g, GPTActs *a,
                        BackwardScratch *s, const float *dout, float *dinput, float dloss,
                        const ModelHooks *h) {
    stage_backward(l, p, g, a, s, dout, dinput, dloss, h, BACKWARD_WHOLE);
}

void gpt_stage_backward_input(const GPTLayout *l, const GPTParams *p, GPTParams *g, GPTActs *a,
                              BackwardScratch *s, const float *dout, float *dinput, float dloss,
                              const ModelHooks *h) {
    CHECK(!l->sp && l->recompute != RECOMPUTE_FULL, "the split backward keeps the layers' "
          "inputs until backward_weight: not with sequence parallelism or full recomputation");
    stage_backward(l, p, g, a, s, dout, dinput, dloss, h, BACKWARD_INPUT);
}

/* dW += dout^T inp for the layers backward_input left, from the kept output
 * gradients and the activations (the layers' inputs); the same GEMMs as
 * the whole backward's, so the sums are the same. Local on every TP rank:
 * a column layer's input is whole, a row layer's output gradient too. */
void gpt_stage_backward_weight(const GPTLayout *l, GPTParams *g, GPTActs *a) {
    const GPTStage *st = &a->stage;
    CHECK(a->weight_grads, "backward_weight without its backward_input");
    const int N = a->B * a->T, C = l->cfg.n_embd, aw = l->attn_width, mw = l->mlp_width;
    const int R = (int)seq_rows(l, (size_t)N);
    const size_t NC = (size_t)N * C;
    /* the input part's hooks around each unit again (model.h's order: the
     * LM head's unit 0 left open as there, the blocks from the last) */
    const ModelHooks *h = a->split_hooks;
    if (st->head) {  /* the LM head: a->probs holds d(logits) */
        grads_begin(h, GPT_UNIT_EMBED);
        matmul_backward(NULL, g->wte, NULL, a->probs, a->lnf, NULL, N, C, l->vocab_rows);
    }
    for (int i = st->n_blocks - 1; i >= 0; i--) {
        const int u = 1 + st->first_block + i;
        grads_begin(h, u);  /* may repoint the views: read them after */
        BlockParams *gb = &g->blocks[u - 1];
        const BlockActs *b = &a->blocks[i];
        if (packed_blocks(l)) unpack_block(l, a, i);
        const float *kb = a->weight_grads + (size_t)i * N * (2 * C + 3 * aw + mw);
        matmul_backward(NULL, gb->fcprojw, gb->fcprojb, kb, b->fch_gelu, NULL, N, mw, C);
        matmul_backward(NULL, gb->fcw, gb->fcb, kb + NC, b->ln2, NULL, N, C, mw);
        matmul_backward(NULL, gb->attprojw, gb->attprojb, kb + NC + (size_t)N * mw, b->atty, NULL,
                        N, aw, C);
        matmul_backward(NULL, gb->qkvw, gb->qkvb, kb + 2 * NC + (size_t)N * mw, b->ln1, NULL, N,
                        C, 3 * aw);
        grads_ready(h, u);
    }
    if (st->embedding) {
        if (!st->head) grads_begin(h, GPT_UNIT_EMBED);
        embedding_backward(l, g, a, a->weight_grads + gpt_stage_weight_grad_floats(l, st, a->B, a->T) -
                                        (size_t)R * C);
        grads_ready(h, GPT_UNIT_EMBED);
    }
    mem_free(a->weight_grads);
    a->weight_grads = NULL;
    a->split_hooks = NULL;
}

void gpt_backward(const GPTLayout *l, const GPTParams *p, GPTParams *g, GPTActs *a,
                  BackwardScratch *s, const ModelHooks *h) {
    CHECK(a->stage.embedding && a->stage.head, "gpt_backward runs the whole model: a pipeline "
          "stage runs gpt_stage_backward");
    gpt_stage_backward(l, p, g, a, s, NULL, NULL, 1.0f, h);
}
