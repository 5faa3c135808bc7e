/* model.h: the GPT's forward and backward passes over a rank's share of it.
 *
 * The model's shape is config.h's, a rank's parameters (flat buffer, named
 * views, shard map) layout.h's. Here: what the forward pass keeps for the
 * backward pass, and the passes, one forward and one backward function per
 * block and for the whole model.
 *
 * Forward keeps what the backward pass needs in explicit activation structs
 * (BlockActs, GPTActs): nothing is hidden, so pipeline schedules can keep
 * several micro-batches, recomputation can rebuild one, sharded layouts can
 * give a layer only its shard. Sizes are the layout's local ones: at tensor
 * parallelism tp, qkv holds the rank's NH/tp heads (3C/tp columns), fch its
 * 4C/tp columns, probs its Vp/tp vocabulary columns; the residual stream,
 * the layernorms and the losses are whole on every rank.
 *
 * Mixed precision (config.h's precision bf16 or fp16): every layer computes
 * in fp32 from inputs in the run's format and stores its outputs rounded to
 * it (model.c's store_rounded): the embeddings' output, the layernorms'
 * outputs (not their statistics), qkv, the attention probabilities and
 * output, the linear layers' outputs and the residual sums, gelu's, the
 * logits and the kept probabilities; in the backward pass every
 * activation gradient the same. The weights the passes read are the
 * states' 2-byte compute copy (model_states.h), the weight gradients fp32
 * (fp32_grads). So GEMMs see 2-byte inputs and accumulate in fp32 (a
 * product of two 2-byte numbers is exact in fp32), and the buffers hold
 * exactly the values a 2-byte trainer would store. A block's are then
 * kept in 2 bytes (BlockActs.kept), packed after its forward and widened
 * back before its backward: lossless, since they hold the format's
 * values, so the passes give the same bits as fp32 buffers of rounded
 * values would. What the ops of a layout communicate inside a layer
 * (partial sums, keys and values) and an MoE layer's inside are fp32
 * buffers, moved on a 2-byte wire where they are activations (comm.h's
 * comm_act_dtype: TP's f and g, SP's gathers and scatters, CP's K and V,
 * MoE's rows); what CP's ops keep, as they write it.
 *
 * Communication inside the passes goes through the layout's
 * TensorParallelOps (below), called unconditionally: the whole model's
 * versions (tp = 1, labs 00-03) are the plain kernels and communicate
 * nothing; lab 04's split them over the TP group. Under sequence
 * parallelism (lab 05) the residual stream itself is split by rows, and
 * SequenceParallelOps take the split layers' place.
 */
#ifndef MODEL_H
#define MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "layout.h"
#include "moe.h"

/* The layers that tensor parallelism splits, as the passes call them.
 * Shapes are local: N = B T rows, C = n_embd, and OC or IC the layout's
 * local width where a weight is split. Conventions are kernels.h's (weights
 * (OC, IC), backward ACCUMULATES).
 *   column_*   out (N, OC) = inp (N, IC) W^T + b, W and b this rank's OC
 *              rows: the input is whole on every rank, the output split by
 *              columns (Megatron's f before it: identity forward, all-reduce
 *              of dinp backward; dinp must hold zeros on entry);
 *   row_*      out (N, OC) = inp W^T + b, W this rank's IC columns: the
 *              input split by columns, the output the sum over ranks (g:
 *              all-reduce forward, identity backward), the bias added once,
 *              after the sum;
 *   embedding_*  out (B,T,C) = wte[token] + wpe[t], wte this rank's
 *              vocabulary rows;
 *   crossentropy_*  softmax over the whole vocabulary of logits split by
 *              columns (probs: this rank's Vp/tp), the mean loss over N rows;
 *              backward turns probs into dloss (probs - onehot) in place.
 * gpt_layout_whole's (tp_ops NULL) are the kernels themselves. */
struct TensorParallelOps {
    void (*column_forward)(const GPTLayout *l, float *out, const float *inp, const float *w,
                           const float *b, int N, int IC, int OC);
    void (*column_backward)(const GPTLayout *l, float *dinp, float *dw, float *db,
                            const float *dout, const float *inp, const float *w, int N, int IC,
                            int OC);
    void (*row_forward)(const GPTLayout *l, float *out, const float *inp, const float *w,
                        const float *b, int N, int IC, int OC);
    void (*row_backward)(const GPTLayout *l, float *dinp, float *dw, float *db,
                         const float *dout, const float *inp, const float *w, int N, int IC,
                         int OC);
    void (*embedding_forward)(const GPTLayout *l, float *out, const int *tokens,
                              const float *wte, const float *wpe, int B, int T);
    void (*embedding_backward)(const GPTLayout *l, float *dwte, float *dwpe, const float *dout,
                               const int *tokens, int B, int T);
    float (*crossentropy_forward)(const GPTLayout *l, float *losses, float *probs,
                                  float *stats, const int *targets, int N);
    void (*crossentropy_backward)(const GPTLayout *l, float *probs, const int *targets,
                                  float dloss, int N);
};

/* Sequence parallelism (lab 05; Korthikanti et al. 2022): between the
 * split layers (embedding output, layernorms, residual adds) a rank holds
 * only its Nl = N/tp rows of the N = B T tokens, rows [tp_rank Nl,
 * (tp_rank + 1) Nl), so each of TensorParallelOps' all-reduces becomes a
 * reduce-scatter into the rank's rows or an all-gather out of them (the
 * same bytes on the wire: an all-reduce is a reduce-scatter and an
 * all-gather). Shapes as TensorParallelOps', N the whole row count; full
 * is (N, C) scratch (C = IC or OC, the whole-row side):
 *   column_forward   inp (N, IC) holds this rank's rows on entry: gather the
 *                    others into it (kept for the backward pass), then
 *                    out (N, OC) = inp W^T + b, this rank's columns;
 *   column_backward  dinp (Nl, IC) = this rank's rows of the sum over
 *                    ranks of dout W (WRITTEN, not accumulated); dw, db as TP;
 *   row_forward      out (Nl, OC) = this rank's rows of the sum over ranks
 *                    of inp W^T, plus b;
 *   row_backward     dout (Nl, OC) this rank's rows: gathered whole, then
 *                    dinp (N, IC) += dout W, dw, db as TP (whole sums);
 *   embedding_*      out, dout (Nl, C) this rank's rows of wte[token] +
 *                    wpe[t]; dwte this rank's vocabulary rows, dwpe whole;
 *   sum_layernorm_grads  once per step, after the data-parallel mean: a
 *                    layernorm saw only this rank's rows, so its gradient
 *                    is a partial sum: sum it over the TP group (g: the
 *                    views of the gradients, wherever the states keep them).
 * With sp_regather (the extension), the column layers keep only the
 * rank's rows of their input:
 *   column_forward_regather   inp (R, IC) this rank's rows: gathered into
 *                    full (N, IC), then out = full W^T + b;
 *   column_backward_regather  gather inp into full again, then as
 *                    column_backward with full2 (N, IC) as its scratch.
 * The cross-entropy stays TensorParallelOps': the LM head's output, like
 * every column-parallel output, has all N rows. */
struct SequenceParallelOps {
    void (*column_forward)(const GPTLayout *l, float *out, float *inp, const float *w,
                           const float *b, int N, int IC, int OC);
    void (*column_backward)(const GPTLayout *l, float *dinp, float *dw, float *db,
                            const float *dout, const float *inp, const float *w, float *full,
                            int N, int IC, int OC);
    void (*row_forward)(const GPTLayout *l, float *out, const float *inp, const float *w,
                        const float *b, float *full, int N, int IC, int OC);
    void (*row_backward)(const GPTLayout *l, float *dinp, float *dw, float *db,
                         const float *dout, const float *inp, const float *w, float *full,
                         int N, int IC, int OC);
    void (*embedding_forward)(const GPTLayout *l, float *out, const int *tokens,
                              const float *wte, const float *wpe, float *full, int B, int T);
    void (*embedding_backward)(const GPTLayout *l, float *dwte, float *dwpe, const float *dout,
                               const int *tokens, float *full, int B, int T);
    void (*sum_layernorm_grads)(const GPTLayout *l, const GPTParams *g);
    void (*column_forward_regather)(const GPTLayout *l, float *out, const float *inp,
                                    const float *w, const float *b, float *full, int N, int IC,
                                    int OC);
    void (*column_backward_regather)(const GPTLayout *l, float *dinp, float *dw, float *db,
                                     const float *dout, const float *inp, const float *w,
                                     float *full, float *full2, int N, int IC, int OC);
};

/* Context parallelism (lab 07): a rank holds T of each sequence's
 * positions (layout.h; the passes see these local shapes, B and T). Every
 * layer but attention works position by position; attention needs the
 * keys and values of every earlier position, which these bring (C' = the
 * layout's attn_width, NH' = its n_head, Tg = cp T the whole sequence):
 *   attention_forward   out (B,T,C') from this rank's qkv (B,T,3C'), and
 *                       keep, what the backward pass needs besides qkv and
 *                       out (gpt_attention_keep_floats): the ring's lse
 *                       (B,NH',T); Ulysses' qkv of all positions of its
 *                       heads (B,Tg,3C'/cp), then what
 *                       gpt_attention_whole_forward keeps of them, and
 *                       under fused attention their output (B,Tg,C'/cp)
 *                       last (its backward pass reads it);
 *   attention_backward  dqkv (B,T,3C') += the gradient, from dout (B,T,C');
 *                       scratch: the backward scratch's datt
 *                       (gpt_scratch_floats: Ulysses' heads' datt or D);
 *   loss_mean           the mean loss over the CP group's tokens, given
 *                       this rank's mean over its own (every rank of the
 *                       group has as many). */
struct ContextParallelOps {
    void (*attention_forward)(const GPTLayout *l, float *out, float *keep, const float *qkv,
                              int B, int T);
    void (*attention_backward)(const GPTLayout *l, float *dqkv, float *scratch,
                               const float *dout, const float *qkv, const float *out,
                               const float *keep, int B, int T);
    float (*loss_mean)(const GPTLayout *l, float loss);
};

/* Expert parallelism (lab 08; layout.h): the ep ranks of ep_group hold
 * E / ep experts each, and an MoE block's layer runs as moe.h's phases
 * with the experts phase on the owners: p and g are this rank's views (the
 * router whole, the expert tensors its experts' rows, expert 0 of them
 * global expert ep_rank E/ep), a the block's MoEActs (their shape's ep =
 * the layout's: xr, eor, peer_counts), sc the backward scratch:
 *   moe_forward   y (N, C) = the layer on x (N, C), this rank's tokens
 *                 through every rank's experts; keeps in a what the
 *                 backward pass needs (the routing, the dispatched and the
 *                 received rows, the experts' h and act);
 *   moe_backward  dx += , g += (the local experts' gradients summed over
 *                 the rows of every source), from dy (N, C); daux as moe.h's. */
struct ExpertParallelOps {
    void (*moe_forward)(const GPTLayout *l, float *y, MoEActs *a, const MoEParams *p,
                        const float *x);
    void (*moe_backward)(const GPTLayout *l, float *dx, const MoEParams *g, const float *dy,
                         MoEActs *a, const MoEScratch *sc, const MoEParams *p, const float *x,
                         float daux);
};

/* Causal attention over whole sequences as config.h's GPTAttention
 * `attention` runs it (kernels.h's passes), on NH heads of qkv (B,T,3C):
 * one device's, and Ulysses' heads over all positions (lab 07). keep is
 * what the backward pass needs besides qkv and out, of
 * gpt_attention_whole_keep_floats: the probabilities (B,NH,T,T), or fused,
 * the lse (B,NH,T). The backward pass reads out (fused: its D = dout . out)
 * and overwrites scratch: datt (B,NH,T,T), or fused, D (B,NH,T). */
size_t gpt_attention_whole_keep_floats(int attention, int B, int T, int NH);
void gpt_attention_whole_forward(int attention, float *out, float *keep, const float *qkv, int B,
                                 int T, int C, int NH);
void gpt_attention_whole_backward(int attention, float *dqkv, float *scratch, const float *dout,
                                  const float *qkv, const float *out, const float *keep, int B,
                                  int T, int C, int NH);

/* Floats of a block's attention activations besides qkv and the output:
 * what gpt_attention_whole_forward keeps of its B NH' T (the probabilities
 * B NH' T^2, or fused the lse B NH' T), or under context parallelism what
 * cp_ops keep (above). */
size_t gpt_attention_keep_floats(const GPTLayout *l, int B, int T);

/* What one block's forward keeps. Shapes for a batch of B sequences of T;
 * R = B T rows, or under sequence parallelism this rank's B T / tp (the
 * (B,T,C) buffers the split layers read whole keep all rows: the layernorm
 * outputs, gathered in place; with sp_regather, they too keep R rows). */
typedef struct {
    float *ln1, *ln1_mean, *ln1_rstd;  /* (B,T,C), (R), (R) */
    float *qkv;                        /* (B,T,3C) */
    float *att;                        /* (B,NH,T,T) softmax probabilities, or fused
                                          attention's lse (B,NH,T); under context
                                          parallelism what cp_ops keep */
    float *atty;                       /* (B,T,C) attention output, pre-projection */
    float *res1;                       /* (R,C) x + attention branch */
    float *ln2, *ln2_mean, *ln2_rstd;  /* (B,T,C), (R), (R) */
    float *fch, *fch_gelu;             /* (B,T,4C) each */
    float *res2;                       /* (R,C) block output */
    float *seq_full;                   /* (B,T,C) sequence parallelism's scratch (not
                                          kept; shared by all blocks), else NULL */
    float *seq_full2;                  /* (B,T,C) a second one under sp_regather */
    MoEActs *moe;                      /* an MoE block's (moe.h; fch, fch_gelu NULL),
                                          else NULL */
    float aux;                         /* and its aux loss in this forward */
    /* Mixed precision: the block's store, what it keeps in 2 bytes (ln1,
     * qkv, att, atty, res1, ln2, fch, fch_gelu, res2; model.c's
     * block_kept). The pointers above are then the rank's work area in
     * fp32 (BackwardScratch.work, res2 taking turns; the last block's its
     * own, the stage's output): the forward pass packs each block into its
     * store, the backward pass widens it back before the block's
     * backward. The statistics, CP's keep and an MoE block's buffers stay
     * fp32, per block. NULL in fp32. */
    uint16_t *kept;
} BlockActs;

/* One micro-batch's activations on one pipeline stage (layout.h's
 * GPTStage; the whole model at pp = 1): its blocks' and, on the last stage,
 * the head's. */
typedef struct {
    int B, T;
    GPTStage stage;                         /* which blocks, whether the ends */
    int *inputs, *targets;                  /* (B,T) token ids */
    float *encoded;                         /* (R,C) the stage's input: the embeddings'
                                               output, or the previous stage's */
    BlockActs *blocks;                      /* the stage's n_blocks of them */
    /* the last stage only (else NULL): */
    float *lnf, *lnf_mean, *lnf_rstd;       /* (B,T,C), (R), (R) */
    float *probs;                           /* (B,T,Vp/tp); dlogits in backward */
    float *losses;                          /* (B,T) */
    float *ce_stats;                        /* (3,B,T) per row: max, sum of exps, target
                                               logit over the TP group (split layers only) */
    float *seq_full, *seq_full2;            /* the blocks' seq_full, seq_full2 */
    float *weight_grads;                    /* between gpt_stage_backward_input and
                                               _weight: what the latter reads */
    const struct ModelHooks *split_hooks;   /* and the hooks the former ran, which the
                                               latter runs again (may be NULL) */
    float *wpe_local, *dwpe_local;          /* the scratch's, under context parallelism */
    uint16_t *kept;                         /* mixed precision: the blocks' stores */
} GPTActs;

/* Scratch for the backward pass: activation gradients of ONE block at a
 * time (reused down the layers), plus the residual stream's gradient
 * (under sequence parallelism, of the residual stream's first R rows). */
typedef struct {
    float *dlnf;                 /* (B,T,C) */
    float *dres_out, *dres_mid, *dres_in; /* (B,T,C) d(x2), d(x1), d(x) of a block */
    float *dln;                  /* (B,T,C) */
    float *dqkv;                 /* (B,T,3C) */
    float *datt;                 /* (B,NH,T,T), or fused attention's D (B,NH,T) */
    float *datty;                /* (B,T,C) */
    float *dfch, *dfch_gelu;     /* (B,T,4C) */
    float *block_base;           /* dres_mid .. dfch_gelu are contiguous here, */
    size_t block_floats;         /* zeroed before each block's backward */
    float *seq_full, *seq_full2; /* (B,T,C) sequence parallelism's, else NULL */
    /* (T,C) each under context parallelism: the position embeddings of this
     * rank's positions, and their gradient (else NULL) */
    float *wpe_local, *dwpe_local;
    /* a mixture of experts' backward scratch (moe.h), shared by its MoE
     * blocks, and the weight of the aux losses in this backward's
     * objective (the loss's: 1, or a pipeline's 1/m); else NULL */
    MoEScratch *moe;
    float moe_daux;
    /* mixed precision: the fp32 buffers the blocks compute in, whose
     * results each block packs into its store (BlockActs.kept): one
     * block's kept tensors and res2's two turns (the stage's output is the
     * activations' own); else NULL */
    BlockActs work;
    float *res2_turn[2];
} BackwardScratch;

/* A mixture of experts' statistics over the forward passes since the last
 * reset (the training loop: one step's micro-batches), summed over the MoE
 * blocks: their aux losses, the assignments dropped over capacity, and per
 * expert the assignments kept (its load). */
enum { MOE_STATS_MAX_EXPERTS = 1024 };
typedef struct {
    double aux;
    long long dropped;
    long long load[MOE_STATS_MAX_EXPERTS];
} MoEStats;
void gpt_moe_stats_reset(void);
const MoEStats *gpt_moe_stats(void);

/* Bytes of forward activations and floats of backward scratch, and int32s
 * of token ids, for B x T on this layout (the memory formulas in the
 * READMEs of the single-device and the tensor-parallel labs; fp32's bytes
 * are 4 a float, mixed precision's stores 2 an element: model.c's parts). */
size_t gpt_activation_bytes(const GPTLayout *l, int B, int T);
/* The same bytes by what they are (labs 05's chart; they add up to
 * gpt_activation_bytes):
 *   ACT_RESIDUAL       the residual stream: res1, res2, layernorm statistics
 *                      (R rows: split under sequence parallelism);
 *   ACT_LAYERNORM_OUT  ln1, ln2: the split layers' whole inputs;
 *   ACT_SPLIT          qkv, atty, fch, fch_gelu: split by TP;
 *   ACT_ATTENTION      the attention probabilities, B NH/tp T^2 per block;
 *   ACT_ENDS           the embedding's output, lnf, logits, losses. */
typedef enum {
    ACT_RESIDUAL, ACT_LAYERNORM_OUT, ACT_SPLIT, ACT_ATTENTION, ACT_ENDS, ACT_NUM_PARTS
} ActPart;
void gpt_activation_parts(const GPTLayout *l, int B, int T, size_t parts[ACT_NUM_PARTS]);
/* Of one pipeline stage (one micro-batch's; the whole model's at pp = 1).
 * gpt_activation_parts and _bytes are one micro-batch on each of this
 * rank's chunks. Every stage keeps its input (R,C) ("ends"); the last the
 * head's too. */
void gpt_stage_activation_parts(const GPTLayout *l, const GPTStage *st, int B, int T,
                                size_t parts[ACT_NUM_PARTS]);
size_t gpt_stage_activation_bytes(const GPTLayout *l, const GPTStage *st, int B, int T);
const char *gpt_activation_part_name(ActPart p);
size_t gpt_activation_ints(int B, int T);
size_t gpt_scratch_floats(const GPTLayout *l, int B, int T);

/* The whole model's activations and scratch (pp = 1) */
void gpt_acts_alloc(const GPTLayout *l, int B, int T, GPTActs *a, BackwardScratch *s);
void gpt_acts_free(GPTActs *a, BackwardScratch *s);
/* A pipeline keeps one stage's activations per micro-batch in flight
 * (MEM_ACTIVATIONS) and one scratch per rank (MEM_WORKSPACE); the
 * activations borrow the scratch's sequence-parallel buffers. */
void gpt_stage_acts_alloc(const GPTLayout *l, const GPTStage *st, int B, int T, GPTActs *a);
void gpt_stage_acts_free(GPTActs *a);
/* Fill a stage's activations with NaN (pipe_exec.h's poison: what a
 * released micro-batch's backward must never read) */
void gpt_stage_acts_poison(const GPTLayout *l, GPTActs *a);
void gpt_scratch_alloc(const GPTLayout *l, int B, int T, BackwardScratch *s);
void gpt_scratch_free(BackwardScratch *s);
void gpt_acts_use_scratch(GPTActs *a, const BackwardScratch *s);

/* One block. x is the block input (B,T,C); its output is a->res2. */
void block_forward(const GPTLayout *l, const BlockParams *p, BlockActs *a, const float *x,
                   int B, int T);
/* Given dout = d(loss)/d(res2), accumulate parameter gradients into g and
 * d(loss)/d(x) into dx. Uses s->dres_mid, dln, dqkv, datt, datty, dfch,
 * dfch_gelu as scratch. */
void block_backward(const GPTLayout *l, const BlockParams *p, BlockParams *g,
                    const BlockActs *a, const float *x, const float *dout, float *dx,
                    BackwardScratch *s, int B, int T);

/* What a layout may do around each unit (all optional, NULL = nothing):
 *   params_needed(u, backward)  unit u's parameter views are about to be read
 *                               (a sharded layout gathers them and points
 *                               the views at the gathered copy);
 *   params_done(u, backward)    not read again in this pass (free them);
 *   grads_begin(u)              gradients are about to be accumulated into
 *                               unit u's gradient views (point them at a
 *                               buffer of the layout's choice);
 *   grads_ready(u)              unit u's gradients are final for this backward.
 * Forward:  needed(0), encoder, then for each block u = 1..L: needed(u),
 *           block, done(u); then needed(L+1), lnf, done(L+1); LM head; done(0)
 *           (the embeddings are read at both ends of the forward pass).
 * Backward: needed(0), begin(0), LM head, done(0); lnf: needed(L+1),
 *           begin(L+1), lnf, done(L+1), ready(L+1); blocks u = L..1 the
 *           same; encoder; ready(0) (the embedding gradient, written by the
 *           LM head first and the encoder last, is final only now). A
 *           pipeline stage runs its part: the first one's encoder begins
 *           unit 0 itself (begin(0), encoder, ready(0)); the last one's LM
 *           head begins it and nothing readies it (its states finish it).
 * So the ranges become final from the end of the buffer to its start.
 * loss_scale (may be NULL: 1): the backward pass starts from the loss's
 * gradient times *loss_scale, read at each backward (fp16's loss scaling:
 * the states that own the scale divide it out of the gradients). */
typedef struct ModelHooks {
    void *ctx;
    void (*params_needed)(void *ctx, int unit, int backward);
    void (*params_done)(void *ctx, int unit, int backward);
    void (*grads_begin)(void *ctx, int unit);
    void (*grads_ready)(void *ctx, int unit);
    const float *loss_scale;
} ModelHooks;

/* Activation recomputation (layout.h's Recompute), as the backward pass
 * calls it for block l just before block_backward, with the block's
 * parameters ready (after the hooks' params_needed):
 *   block_forward_again  FULL: rebuild every activation of the block (a,
 *                        whose buffers the blocks share) from its input x;
 *   attention_again      SELECTIVE: rebuild a->att (shared by the blocks)
 *                        from the block's kept a->qkv.
 * Same kernels, same inputs, same order: the backward pass then sees the
 * very bits the forward pass computed. */
struct RecomputeOps {
    void (*block_forward_again)(const GPTLayout *l, const BlockParams *p, BlockActs *a,
                                const float *x, int B, int T);
    void (*attention_again)(const GPTLayout *l, BlockActs *a, int B, int T);
};

/* Whole model. Forward reads a->inputs and a->targets and returns the mean
 * loss; backward accumulates d(mean loss)/d(params) into grads. hooks may be
 * NULL. The views in p and g are read after each hook call, so a hook may
 * repoint them. */
float gpt_forward(const GPTLayout *l, const GPTParams *p, GPTActs *a, const ModelHooks *hooks);
void gpt_backward(const GPTLayout *l, const GPTParams *p, GPTParams *g, GPTActs *a,
                  BackwardScratch *s, const ModelHooks *hooks);

/* One pipeline stage (a->stage), which gpt_forward and gpt_backward are
 * for the whole model. Forward: from the tokens (first stage) or a->encoded
 * (the previous stage's output, written there by the caller) through the
 * stage's blocks; the last stage goes on to the loss and returns it (the
 * others return 0; their output, for the next stage, is the last block's
 * res2: gpt_stage_output). Backward: the last stage starts from the loss,
 * weighted by dloss (d(objective)/d(this micro-batch's mean loss): 1 for
 * one micro-batch, 1/m when the objective is the mean over m); the others
 * from dout (R,C), the gradient of their output. The first stage ends in
 * the embeddings' gradients; the others write d(input) (R,C) to dinput,
 * for the previous stage. Gradients accumulate into g; hooks as above. */
float gpt_stage_forward(const GPTLayout *l, const GPTParams *p, GPTActs *a,
                        const ModelHooks *hooks);
void gpt_stage_backward(const GPTLayout *l, const GPTParams *p, GPTParams *g, GPTActs *a,
                        BackwardScratch *s, const float *dout, float *dinput, float dloss,
                        const ModelHooks *hooks);
/* Zero-bubble pipelines (ZB-H1, Qi et al. 2023) split the backward in two:
 * backward_input does all of gpt_stage_backward's work but the linear
 * layers' weight gradients (dW += dout^T inp, the LM head's and the
 * embeddings' too), keeping those layers' output gradients in
 * a->weight_grads (gpt_stage_weight_grad_floats, MEM_ACTIVATIONS);
 * backward_weight computes them later and frees that. Together they give
 * gpt_stage_backward's gradients. Not with sequence parallelism or full
 * recomputation (which do not keep the layers' inputs as they are). */
void gpt_stage_backward_input(const GPTLayout *l, const GPTParams *p, GPTParams *g, GPTActs *a,
                              BackwardScratch *s, const float *dout, float *dinput, float dloss,
                              const ModelHooks *hooks);
void gpt_stage_backward_weight(const GPTLayout *l, GPTParams *g, GPTActs *a);
size_t gpt_stage_weight_grad_floats(const GPTLayout *l, const GPTStage *st, int B, int T);

/* Expert parallelism's rows on a 2-byte wire (comm.h, mixed precision):
 * the bound of what the ep group's ops hold in flight at once, in 2-byte
 * elements, which the programs reserve (comm_wire_reserve) so that the
 * routing does not decide memory.csv's peak. An exchange sends at most
 * A_max rows of C and receives at most R_max (moe.h), or the other way
 * round; overlapped (lab 08's extension), the dispatch's and the
 * return's are in flight together: 2 (A_max + R_max) C. 0 in fp32, at
 * ep 1, or on a pipeline rank without MoE blocks. */
size_t gpt_ep_wire_elements(const GPTLayout *l, int B, int T, int overlapped);

/* Floats of a stage's input and of its output, and of their gradients:
 * the residual stream's (R, C) (R = B T, or B T / tp under sequence
 * parallelism): what the pipeline's messages carry */
size_t gpt_stage_io_floats(const GPTLayout *l, int B, int T);

static inline float *gpt_stage_output(const GPTActs *a) {
    return a->blocks[a->stage.n_blocks - 1].res2;
}

#endif
