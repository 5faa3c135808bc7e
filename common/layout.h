/* layout.h: a rank's share of the model, and the map from its tensors to
 * the whole model's.
 *
 * One device and DDP keep the whole model on every rank; ZeRO cuts the flat
 * buffer into equal pieces without looking inside. From tensor parallelism
 * on, a layout changes what a rank computes, so one value, the layout, says what
 * a rank holds, and allocation, init, the passes and the memory planner
 * read their sizes from it, never from the global config:
 *
 *   GPTLayout     the global config, the degrees and coordinates, the
 *                 groups the in-block communication runs on, and the local
 *                 sizes derived from them (gpt_layout_make);
 *   TensorInfo    per local tensor, its place in this rank's flat buffer
 *                 and its shard map: which rectangle(s) of which global
 *                 tensor it holds.
 *
 * Tensor parallelism (Megatron-LM) splits, over tp ranks:
 *   tensor      global     local           rank r holds
 *   wte         (V, C)     (Vp/tp, C)      vocabulary rows [r Vp/tp, (r+1) Vp/tp),
 *                                          Vp = V rounded up to a multiple of tp;
 *                                          rows >= V are padding (zeros, no piece)
 *   qkvw        (3C, C)    (3C/tp, C)      3 pieces: rows of q, k and v of heads
 *   qkvb        (3C)       (3C/tp)           [r NH/tp, (r+1) NH/tp): [q_r | k_r | v_r]
 *   attprojw    (C, C)     (C, C/tp)       columns [r C/tp, (r+1) C/tp)
 *   fcw, fcb    (4C, C)    (4C/tp, C)      rows [r 4C/tp, ...)
 *   fcprojw     (C, 4C)    (C, 4C/tp)      columns [r 4C/tp, ...)
 *   wpe, layernorms, attprojb, fcprojb     whole on every rank (replicated)
 * At tp = 1 every tensor is one piece covering the whole global tensor, and
 * the local buffer is the standard layout itself.
 *
 * The buffer keeps model.h's order (wte, wpe, blocks, lnf) with local sizes,
 * so a unit (embeddings, one block, lnf) stays contiguous: ZeRO and, later,
 * pipeline stages still hand out whole units.
 *
 * Sequence parallelism shards the tokens outside the TP GEMMs
 * (local rows B T / tp): no parameter moves, so the map is TP's.
 *
 * Pipeline parallelism cuts the L blocks into S = pp x chunks
 * stages of L / S consecutive blocks; stage s lives on rank s mod pp as its
 * local chunk s / pp (schedule.h), so with chunks = v > 1 rank r holds the
 * chunks r, r + pp, r + 2 pp, ... (interleaving). The first stage also
 * holds the embeddings (wte, wpe), the last the final layernorm and the LM
 * head, which is wte again (tied): with pp > 1 the last stage's rank keeps
 * its own copy of wte (no wpe), and the two copies' gradients are summed
 * over the embedding group (first and last stage) before the update, so
 * that both stay equal (Megatron-LM's embedding group). Under DualPipe's
 * placement (schedule.h, dual) there are pp stages and rank r holds two,
 * r and pp - 1 - r: ranks 0 and pp - 1 both hold the first and the last
 * stage, so one wte serves both ends (no tied copy), and every stage is
 * held twice, by r and pp - 1 - r, whose gradients the program sums over
 * dual_group. A rank's buffer
 * holds only the units it has, in the standard order; the others have
 * count 0 and NULL views.
 *
 * Context parallelism splits every sequence's positions over cp
 * ranks (math_shared.h's placement: contiguous, or zigzag chunks); no
 * parameter moves, so the map is unchanged, and the passes see local
 * shapes: T is a rank's T / cp positions per sequence.
 *
 * Expert parallelism (gpt_layout_set_experts) splits each MoE
 * block's E experts over the ep ranks of an expert-parallel group (mesh.h:
 * ep consecutive data-parallel ranks): rank r holds experts [r E/ep,
 * (r+1) E/ep), the rows of the stacked tensors
 *   fcw (E 4C, C), fcb (E 4C)         rows [r E/ep 4C, (r+1) E/ep 4C)
 *   fcprojw (E C, 4C), fcprojb (E C)  rows [r E/ep C, (r+1) E/ep C)
 * (expert_split in TensorInfo, apart from TP's split); the router and
 * every other tensor stay whole. The MoE branch then runs the program's
 * ep_ops over ep_group (model.h ExpertParallelOps). Under tensor
 * parallelism the MoE blocks' attention is split like a dense block's,
 * but the router and the experts are not: every TP rank holds them whole
 * (the same experts, as its EP group is the ranks of its own tp_rank) and
 * routes the same whole ln2 output, so the MoE branch needs no TP
 * collective and its output is already the same on every TP rank.
 * Sequence parallelism would give a TP rank a slice of each sequence,
 * while a routing group is a whole sequence (moe.h): not composed
 * (gpt_activation_problem).
 */
#ifndef LAYOUT_H
#define LAYOUT_H

#include <stddef.h>

#include "config.h"

typedef struct Comm Comm;
typedef struct TensorParallelOps TensorParallelOps;  /* model.h */
typedef struct RecomputeOps RecomputeOps;            /* model.h */
typedef struct SequenceParallelOps SequenceParallelOps;  /* model.h */
typedef struct ContextParallelOps ContextParallelOps;    /* model.h */
typedef struct ExpertParallelOps ExpertParallelOps;      /* model.h */

/* Which activations a rank keeps for the backward pass:
 *   NONE       everything each block's forward computes;
 *   SELECTIVE  all but the attention probabilities (B NH T^2 per block: the
 *              part that grows with T^2), rebuilt from the kept q, k, v;
 *   FULL       only each block's output (the next block's input); each
 *              block's forward runs again just before its backward. */
typedef enum { RECOMPUTE_NONE, RECOMPUTE_SELECTIVE, RECOMPUTE_FULL } Recompute;
/* "none", "selective", "full"; parsing anything else is one user error
 * naming --recompute (the trainers' and the planner's option) */
const char *gpt_recompute_name(Recompute r);
Recompute gpt_recompute_parse(const char *name);
/* the trainers' option (parallel_flags.h) */
#define RECOMPUTE_OPTION_HELP                                                                    \
    "--recompute MODE     none | selective (the attention probabilities) | full (each "       \
    "block's forward again): what the backward pass rebuilds (default none)"

/* How attention is repaired across context parallelism's split:
 *   RING     K and V blocks travel around the CP ring (contiguous chunks);
 *   ZIGZAG   the same ring over the zigzag placement (balanced causal work);
 *   ULYSSES  an all-to-all to "all positions, my heads" and back;
 *   STRIPED  the ring over the striped placement (an extension).
 * Parsing anything else is one user error naming --cp-algo. */
typedef enum { CP_RING, CP_ZIGZAG, CP_ULYSSES, CP_STRIPED } CpAlgo;
const char *gpt_cp_algo_name(CpAlgo a);
CpAlgo gpt_cp_algo_parse(const char *name);

typedef struct GPTLayout {
    GPTConfig cfg;                 /* the whole model */
    /* tensor parallelism */
    int tp, tp_rank;               /* degree and this rank's coordinate */
    /* the split layers, set together by the program that runs them (the
     * tensor-parallel program's at any degree, 1 included), else 0 / NULL:
     * the whole model's */
    int split_layers;
    Comm *tp_group;                /* the in-block collectives' group */
    const TensorParallelOps *tp_ops;
    /* sequence parallelism, on top of the split layers: between
     * them (embedding output, layernorms, residual stream) rank tp_rank
     * holds only rows [tp_rank N/tp, (tp_rank + 1) N/tp) of the N = B T
     * tokens (sp and sp_ops set together; T must divide by tp) */
    int sp;
    const SequenceParallelOps *sp_ops;
    /* under sp: keep only this rank's rows of the layernorm outputs, and
     * gather them again in the backward pass (an extension) */
    int sp_regather;
    /* activation recomputation, and who runs it (both set together) */
    Recompute recompute;
    const RecomputeOps *recompute_ops;
    /* pipeline parallelism (gpt_layout_set_pipeline): pp ranks,
     * this rank's coordinate, chunks (model chunks per rank, v); 1, 0, 1
     * without. The groups are the program's: pp_group the ranks of one
     * pipeline (same tp rank), embed_group its first and last stage's
     * ranks (NULL at pp = 1); dual: DualPipe's placement
     * (gpt_layout_set_dual_pipeline), dual_group then ranks r and
     * pp - 1 - r of the pipeline, which hold the same stages. */
    int pp, pp_rank, chunks, dual;
    Comm *pp_group, *embed_group, *dual_group;
    /* at pp > 1, the program's: sum the gradients of what two ranks of
     * the pipeline both hold, so that both copies take the same step:
     * wte over embed_group, on its ranks, or under DualPipe's placement
     * the whole buffer over dual_group (grads: this rank's flat buffer,
     * of the gradient format gpt_grad_precision, where wte comes first) */
    void (*sum_pipeline_copies)(const struct GPTLayout *l, void *grads);
    /* context parallelism (gpt_layout_set_context): cp ranks share
     * each sequence, this one holding positions of its placement
     * (gpt_cp_placement); attention
     * runs the program's cp_ops over cp_group. 1, 0 without. */
    int cp, cp_rank;
    CpAlgo cp_algo;
    Comm *cp_group;
    const ContextParallelOps *cp_ops;
    /* expert parallelism (gpt_layout_set_experts): ep ranks hold
     * E / ep experts each, this one experts [ep_rank E/ep, ...); the MoE
     * branch runs ep_ops over ep_group. 1, 0 without. */
    int ep, ep_rank;
    Comm *ep_group;
    const ExpertParallelOps *ep_ops;
    /* local sizes (gpt_layout_make) */
    int vocab_padded;              /* Vp: V rounded up to a multiple of tp */
    int vocab_rows, vocab_first;   /* this rank's wte rows: [vocab_first, + vocab_rows) of Vp */
    int vocab_real;                /* how many of them are real (the rest, rows >= V: padding) */
    int n_head;                    /* NH / tp heads */
    int attn_width;                /* C / tp: local width of q, k, v and attention's output */
    int mlp_width;                 /* 4C / tp */
    size_t num_params;             /* floats in this rank's buffer (Phi at tp = 1) */
} GPTLayout;

/* Why tp can't split cfg, or NULL: tp must divide the heads (and so C and
 * 4C). The vocabulary need not divide: it is padded. */
const char *gpt_layout_problem(const GPTConfig *cfg, int tp);

/* Why the activation layouts (sp, recompute) can't run on cfg at tp, or NULL: sequence
 * parallelism splits each micro-batch's seq tokens over the TP group (seq
 * must divide by tp), and neither it nor recomputation is written for a
 * mixture of experts (a routing group is a whole sequence; moe.h keeps
 * its own buffers). */
const char *gpt_activation_problem(const GPTConfig *cfg, int tp, int sp, Recompute recompute,
                                   int seq);

/* The layout of rank tp_rank of tp (gpt_layout_problem must be NULL), with
 * the whole model's layers: the caller sets split_layers, tp_group and
 * tp_ops to run its own. */
GPTLayout gpt_layout_make(const GPTConfig *cfg, int tp, int tp_rank);
/* The whole model on one rank: gpt_layout_make(cfg, 1, 0). */
GPTLayout gpt_layout_whole(const GPTConfig *cfg);

/* Why pp ranks of `chunks` model chunks each can't cut cfg's blocks into
 * stages, or NULL: each of the pp x chunks stages (pp under DualPipe's
 * placement, dual) takes n_layer / stages blocks, which must be a whole
 * number, at least 1. */
const char *gpt_pipeline_problem(const GPTConfig *cfg, int pp, int chunks, int dual);
/* Make l rank pp_rank of a pipeline of pp ranks of `chunks` chunks each
 * (gpt_pipeline_problem must be NULL), in l's placement (dual, kept):
 * num_params becomes this rank's units' (the layout's other fields are
 * unchanged). */
void gpt_layout_set_pipeline(GPTLayout *l, int pp, int pp_rank, int chunks);
/* The same under DualPipe's placement: two chunks, stages pp_rank and
 * pp - 1 - pp_rank. */
void gpt_layout_set_dual_pipeline(GPTLayout *l, int pp, int pp_rank);

/* Why cp ranks can't split sequences of seq tokens with algo (on top of
 * tp), or NULL: each rank takes seq / cp positions (in two chunks under
 * zigzag: seq must divide by 2 cp), and Ulysses gives every rank whole
 * heads, so the n_head / tp heads of a TP rank must divide by cp. */
const char *gpt_context_problem(const GPTConfig *cfg, int tp, int cp, CpAlgo algo, int seq);
/* Make l rank cp_rank of a CP group of cp (gpt_context_problem must be
 * NULL); the caller sets cp_group and cp_ops. */
void gpt_layout_set_context(GPTLayout *l, int cp, int cp_rank, CpAlgo algo);
/* The global position of this rank's local position t of a sequence (Tl
 * local positions; math_shared.h's cp_global_position) */
int gpt_cp_position(const GPTLayout *l, int t, int Tl);
/* The placement cp_algo uses (math_shared.h's CP_PLACE_*) */
int gpt_cp_placement(const GPTLayout *l);

/* Why ep ranks can't split cfg's experts, or NULL: the config must have
 * experts, and ep must divide their number E. */
const char *gpt_expert_problem(const GPTConfig *cfg, int ep);
/* Make l rank ep_rank of an expert-parallel group of ep
 * (gpt_expert_problem must be NULL at ep > 1): num_params becomes this
 * rank's; the caller sets ep_group and ep_ops. */
void gpt_layout_set_experts(GPTLayout *l, int ep, int ep_rank);
/* Experts of an MoE block this rank holds: E / ep */
int gpt_local_experts(const GPTLayout *l);

/* One pipeline stage as a rank runs it: local chunk c of rank pp_rank is
 * stage pp_rank + c pp (pipe_stage_of, schedule.h, also for DualPipe's), blocks [first_block, first_block + n_blocks). The
 * first stage starts from the tokens (embedding), the last ends in the
 * loss (final layernorm, LM head, cross-entropy). At pp = 1, chunks = 1
 * the one stage is the whole model. */
typedef struct {
    int stage, first_block, n_blocks;
    int embedding, head;  /* first stage, last stage */
} GPTStage;
GPTStage gpt_stage(const GPTLayout *l, int chunk);
/* Whether this rank holds unit u (units below), whole or as the tied copy */
int gpt_holds_unit(const GPTLayout *l, int unit);

/* ---- the flat buffer and its named views ---------------------------------- */

#define BLOCK_NUM_TENSORS 12

/* Shapes are local (layout.h's table above): (3C, C) at tp = 1 is
 * (3 attn_width, C) in general. */
typedef struct {
    float *ln1w, *ln1b;          /* (C) */
    float *qkvw, *qkvb;          /* (3C, C), (3C) */
    float *attprojw, *attprojb;  /* (C, C), (C) */
    float *ln2w, *ln2b;          /* (C) */
    float *fcw, *fcb;            /* (4C, C), (4C) */
    float *fcprojw, *fcprojb;    /* (C, 4C), (C) */
    /* an MoE block (config.h): the router (E, C), and the MLP tensors
     * above are the E experts' stacked (moe.h); NULL in a dense block */
    float *routerw;
} BlockParams;

typedef struct {
    float *wte;          /* (V, C), also the LM head (tied) */
    float *wpe;          /* (ctx_len, C) */
    BlockParams *blocks; /* L of them */
    float *lnfw, *lnfb;  /* (C) */
} GPTParams;

typedef enum { INIT_ZEROS, INIT_ONES, INIT_NORMAL } InitKind;

/* One rectangle of a global tensor that a rank holds: global rows
 * [row0, row0 + rows) x columns [col0, col0 + cols), stored row-major from
 * local_offset (floats into the rank's flat buffer). */
typedef struct {
    int row0, rows, col0, cols;
    size_t local_offset;
} ShardPiece;

typedef struct {
    char name[32];          /* "wte", "blocks.3.qkvw", "lnfw" */
    size_t offset;          /* in floats, into this rank's flat buffer */
    size_t count;           /* local elements (rows x cols) */
    int rows, cols;         /* local shape; cols = 1 for vectors */
    int global_rows, global_cols;
    size_t global_offset;   /* where the whole tensor starts in the standard layout */
    int split;              /* 1: split over TP; 0: whole on every TP rank */
    int expert_split;       /* 1: this rank's experts' rows (ep > 1); 0: whole on
                               every rank of the expert-parallel group */
    int pipeline_copy;      /* 1: a copy of a tensor another pipeline rank holds
                               too, which counts it (norms) and saves it: the
                               last stage's wte (pp > 1), or under DualPipe's
                               placement every tensor of ranks pp/2 .. pp-1 */
    InitKind init;
    float std;              /* for INIT_NORMAL */
    int npieces;            /* 0 (not held on this pipeline stage, or only vocabulary
                               padding) to 3 (qkv) */
    ShardPiece piece[3];
} TensorInfo;

int gpt_num_tensors(const GPTLayout *l);  /* 2 + 12L + 2 (+ a router per MoE block), on every layout */
/* Fill t (gpt_num_tensors entries) with this rank's tensors, in buffer order. */
void gpt_tensor_table(const GPTLayout *l, TensorInfo *t);

/* Point the named views of p at a flat buffer of this layout (flat = NULL:
 * every view NULL, for a caller that points units one by one with
 * gpt_unit_view). */
void gpt_params_view(const GPTLayout *l, float *flat, GPTParams *p);
void gpt_params_view_free(GPTParams *p);

/* Units: the pieces the forward and backward passes use whole, each a
 * contiguous range of the flat buffer, in buffer order:
 *   unit 0       the embeddings, wte and wpe (wte is also the tied LM head)
 *   unit 1 + l   block l
 *   unit L + 1   the final layernorm
 * Sharded layouts (ZeRO-3) gather, free and reduce parameters unit by unit. */
enum { GPT_UNIT_EMBED = 0 };
int gpt_num_units(const GPTLayout *l);  /* L + 2 */
/* count 0 for a unit this rank does not hold (pipeline stages) */
void gpt_unit_range(const GPTLayout *l, int unit, size_t *offset, size_t *count);
/* The elements of the largest unit this rank holds but the embeddings (what
 * a buffer for one unit at a time besides them needs) */
size_t gpt_largest_unit_but_embeddings(const GPTLayout *l);
/* Point the views of unit's tensors in p (set up by gpt_params_view) at
 * base, which holds the unit's elements in buffer order. */
void gpt_unit_view(const GPTLayout *l, int unit, float *base, GPTParams *p);

/* Initialize elements [first, first + n) of this rank's flat buffer into
 * out[0..n), from the shard map: global element i of tensor t is
 * std * N(0,1) drawn from the counter (i, t) of rng.h (or 0, or 1), the
 * same number on every layout, so every layout starts from one device's
 * weights; padding is 0. A rank (or a ZeRO shard) makes exactly its part. */
void gpt_init_params(const GPTLayout *l, unsigned long long seed, size_t first, size_t n,
                     float *out);

/* Copy what this rank holds (its pieces; host memory) from local, its flat
 * buffer, into whole, a buffer in the standard layout (gpt_num_params(cfg)
 * floats): every tensor this rank holds, split or whole, the last stage's
 * tied copy of wte too (its own view of the model); nothing else of whole
 * is written. Assembling the model from several ranks, the copy written
 * last wins where ranks hold the same tensor. */
void gpt_layout_to_standard(const GPTLayout *l, const float *local, float *whole);

/* ---- the whole model from a layout's pieces ----
 * The gradient norm counts each distinct parameter once:
 * layout_counted_sum_squares sums the squares of the elements [first,
 * first + n) of this rank's flat buffer (layout.h), which lie at g in
 * precision's format (the gradients': gpt_grad_precision), of the
 * tensors this rank counts: a tensor split over TP or EP on every rank, one
 * whole on every TP (EP) rank, the same gradient, on TP (EP) rank 0 only,
 * the last stage's tied copy of wte never (the first stage's stands for
 * it); t is the layout's tensor table. layout_model_sum then adds x over
 * the ranks that hold the other parts of the same model copy (the TP,
 * pipeline and EP groups). Replicated states count their whole buffer;
 * ZeRO's owners count their shards, summed over the sharding group first. */
double layout_counted_sum_squares(const GPTLayout *l, const TensorInfo *t, size_t first,
                                  size_t n, const void *g, int precision);
double layout_model_sum(const GPTLayout *l, double x);

/* Whether this rank's buffer is the whole model in the standard layout (no
 * tensor, pipeline or expert split): then the norm and the gather take it
 * as it is */
int layout_holds_whole_model(const GPTLayout *l);

/* The sum of squares of the gradients of the whole model, each parameter
 * counted once (layout_counted_sum_squares, then layout_model_sum; t is
 * the layout's tensor table). On one rank of the whole model, the whole
 * buffer at once. */
double layout_sum_squares(const GPTLayout *l, const TensorInfo *t, const void *grads,
                          int precision);

/* The whole model in the standard layout (host memory, gpt_num_params
 * floats; the caller frees it), assembled from the local buffers of every
 * rank of this one's TP group and EP group (the EP group's first, then
 * those of the TP group: tp x ep buffers, their tensors split over TP or
 * EP each from its owner), then every pipeline stage's (a collective over
 * those groups, kept out of comm.csv). Where copies of a tensor could
 * differ (one held whole by several ranks), the copy of TP and EP rank 0
 * wins, and wte's of the first stage; or, when mine, this rank's own
 * wherever it holds the tensor (its view of the model, for the
 * consistency checksum): those buffers are copied last. */
float *layout_gather_standard(const GPTLayout *l, const float *local, int mine);

#endif
