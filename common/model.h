/* model.h: a GPT-2 style transformer as flat buffers with named views.
 *
 *   tokens -> encoder (wte + wpe) -> L x block -> layernorm f -> logits = x wte^T
 *   block:  x1 = x  + attproj( attention( qkv( ln1(x)  ) ) )
 *           x2 = x1 + fcproj( gelu( fc( ln2(x1) ) ) )
 *
 * All parameters live in ONE float buffer (and the gradients in a second one
 * of the same layout). A table of tensors gives each its name, offset and
 * initialization; GPTParams holds pointers into the buffer under their names.
 * Layout: wte, wpe, then block 0's tensors, block 1's, ..., then lnf. A block
 * is contiguous, so later labs can gather, shard or hand out whole layers.
 *
 * Parameter init is independent of sharding: element i of tensor t is
 * std * N(0,1) drawn from the counter (i, t) of rng.h.
 *
 * Forward keeps what the backward pass needs in explicit activation structs
 * (BlockActs, GPTActs): nothing is hidden, so pipeline schedules can keep
 * several micro-batches, recomputation can rebuild one, sharded layouts can
 * give a layer only its shard.
 */
#ifndef MODEL_H
#define MODEL_H

#include <stddef.h>

typedef struct {
    int vocab_size;  /* V */
    int ctx_len;     /* maximum sequence length (wpe rows) */
    int n_layer;     /* L */
    int n_head;      /* NH */
    int n_embd;      /* C */
} GPTConfig;

/* Named configs: "tiny" (grading), "small" (demos), "medium" (the CPU
 * benchmark where GEMMs dominate), "gpt2-124m". Returns 0,
 * or -1 for an unknown name. */
int gpt_config_by_name(const char *name, GPTConfig *cfg);
const char *gpt_config_names(void);  /* "tiny, small, medium, gpt2-124m" for messages */

/* Why a config can't be built, or NULL when it can (C % NH, positive sizes). */
const char *gpt_config_problem(const GPTConfig *cfg);

#define BLOCK_NUM_TENSORS 12

typedef struct {
    float *ln1w, *ln1b;          /* (C) */
    float *qkvw, *qkvb;          /* (3C, C), (3C) */
    float *attprojw, *attprojb;  /* (C, C), (C) */
    float *ln2w, *ln2b;          /* (C) */
    float *fcw, *fcb;            /* (4C, C), (4C) */
    float *fcprojw, *fcprojb;    /* (C, 4C), (C) */
} BlockParams;

typedef struct {
    float *wte;          /* (V, C), also the LM head (tied) */
    float *wpe;          /* (ctx_len, C) */
    BlockParams *blocks; /* L of them */
    float *lnfw, *lnfb;  /* (C) */
} GPTParams;

typedef enum { INIT_ZEROS, INIT_ONES, INIT_NORMAL } InitKind;

typedef struct {
    char name[32];   /* "wte", "blocks.3.qkvw", "lnfw" */
    size_t offset;   /* in floats, into the flat buffer */
    size_t count;    /* elements */
    int rows, cols;  /* cols = 1 for vectors */
    InitKind init;
    float std;       /* for INIT_NORMAL */
} TensorInfo;

/* Size of the model, from the config alone (memory formulas use these). */
size_t gpt_num_params(const GPTConfig *cfg);        /* Phi */
size_t gpt_block_num_params(const GPTConfig *cfg);  /* 12C^2 + 13C */
int gpt_num_tensors(const GPTConfig *cfg);          /* 2 + 12L + 2 */
/* Fill t (gpt_num_tensors entries) with the layout described above. */
void gpt_tensor_table(const GPTConfig *cfg, TensorInfo *t);

/* Point the named views of p at a flat buffer with the standard layout
 * (flat = NULL: every view NULL, for a caller that points units one by one
 * with gpt_unit_view). */
void gpt_params_view(const GPTConfig *cfg, float *flat, GPTParams *p);
void gpt_params_view_free(GPTParams *p);

/* Units: the pieces the forward and backward passes use whole, each a
 * contiguous range of the flat buffer, in buffer order:
 *   unit 0       the embeddings, wte and wpe (wte is also the tied LM head)
 *   unit 1 + l   block l
 *   unit L + 1   the final layernorm
 * Sharded layouts (ZeRO-3) gather, free and reduce parameters unit by unit. */
enum { GPT_UNIT_EMBED = 0 };
int gpt_num_units(const GPTConfig *cfg);  /* L + 2 */
void gpt_unit_range(const GPTConfig *cfg, int unit, size_t *offset, size_t *count);
/* Point the views of unit's tensors in p (set up by gpt_params_view) at
 * base, which holds the unit's elements in the standard order. */
void gpt_unit_view(const GPTConfig *cfg, int unit, float *base, GPTParams *p);

/* Initialize elements [first, first + n) of the flat buffer (global indices)
 * into out[0..n): a rank can make exactly its shard. */
void gpt_init_params(const GPTConfig *cfg, unsigned long long seed, size_t first, size_t n,
                     float *out);

/* What one block's forward keeps. Shapes for a batch of B sequences of T. */
typedef struct {
    float *ln1, *ln1_mean, *ln1_rstd;  /* (B,T,C), (B,T), (B,T) */
    float *qkv;                        /* (B,T,3C) */
    float *att;                        /* (B,NH,T,T) softmax probabilities */
    float *atty;                       /* (B,T,C) attention output, pre-projection */
    float *res1;                       /* (B,T,C) x + attention branch */
    float *ln2, *ln2_mean, *ln2_rstd;  /* (B,T,C), (B,T), (B,T) */
    float *fch, *fch_gelu;             /* (B,T,4C) each */
    float *res2;                       /* (B,T,C) block output */
} BlockActs;

typedef struct {
    int B, T;
    int *inputs, *targets;                  /* (B,T) token ids */
    float *encoded;                         /* (B,T,C) */
    BlockActs *blocks;                      /* L of them */
    float *lnf, *lnf_mean, *lnf_rstd;       /* (B,T,C), (B,T), (B,T) */
    float *probs;                           /* (B,T,V); dlogits in backward */
    float *losses;                          /* (B,T) */
} GPTActs;

/* Scratch for the backward pass: activation gradients of ONE block at a
 * time (reused down the layers), plus the residual stream's gradient. */
typedef struct {
    float *dlnf;                 /* (B,T,C) */
    float *dres_out, *dres_mid, *dres_in; /* (B,T,C) d(x2), d(x1), d(x) of a block */
    float *dln;                  /* (B,T,C) */
    float *dqkv;                 /* (B,T,3C) */
    float *datt;                 /* (B,NH,T,T) */
    float *datty;                /* (B,T,C) */
    float *dfch, *dfch_gelu;     /* (B,T,4C) */
    float *block_base;           /* dres_mid .. dfch_gelu are contiguous here, */
    size_t block_floats;         /* zeroed before each block's backward */
} BackwardScratch;

/* Floats of forward activations and of backward scratch, and int32s of token
 * ids, for B x T (the memory formulas in labs/00_single_device/README.md). */
size_t gpt_activation_floats(const GPTConfig *cfg, int B, int T);
size_t gpt_activation_ints(int B, int T);
size_t gpt_scratch_floats(const GPTConfig *cfg, int B, int T);

void gpt_acts_alloc(const GPTConfig *cfg, int B, int T, GPTActs *a, BackwardScratch *s);
void gpt_acts_free(GPTActs *a, BackwardScratch *s);

/* One block. x is the block input (B,T,C); its output is a->res2. */
void block_forward(const GPTConfig *cfg, const BlockParams *p, BlockActs *a, const float *x,
                   int B, int T);
/* Given dout = d(loss)/d(res2), accumulate parameter gradients into g and
 * d(loss)/d(x) into dx. Uses s->dres_mid, dln, dqkv, datt, datty, dfch,
 * dfch_gelu as scratch. */
void block_backward(const GPTConfig *cfg, const BlockParams *p, BlockParams *g,
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
 *           LM head first and the encoder last, is final only now).
 * So the ranges become final from the end of the buffer to its start. */
typedef struct {
    void *ctx;
    void (*params_needed)(void *ctx, int unit, int backward);
    void (*params_done)(void *ctx, int unit, int backward);
    void (*grads_begin)(void *ctx, int unit);
    void (*grads_ready)(void *ctx, int unit);
} ModelHooks;

/* Whole model. Forward reads a->inputs and a->targets and returns the mean
 * loss; backward accumulates d(mean loss)/d(params) into grads. hooks may be
 * NULL. The views in p and g are read after each hook call, so a hook may
 * repoint them. */
float gpt_forward(const GPTConfig *cfg, const GPTParams *p, GPTActs *a, const ModelHooks *hooks);
void gpt_backward(const GPTConfig *cfg, const GPTParams *p, GPTParams *g, GPTActs *a,
                  BackwardScratch *s, const ModelHooks *hooks);

/* Training FLOPs per token: 6 Phi' + 12 L C T (forward + backward), where Phi'
 * leaves out wpe (a lookup, no arithmetic) and 12 L C T counts the attention
 * score and value GEMMs over the full T x T, as PaLM's appendix B does. */
double gpt_flops_per_token(const GPTConfig *cfg, int T);

#endif
