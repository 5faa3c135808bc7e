/* config.h: the whole model's shape, as named configs and as sizes.
 *
 *   tokens -> encoder (wte + wpe) -> L x block -> layernorm f -> logits = x wte^T
 *   block:  x1 = x  + attproj( attention( qkv( ln1(x)  ) ) )
 *           x2 = x1 + fcproj( gelu( fc( ln2(x1) ) ) )
 *
 * A mixture-of-experts model (lab 08; n_experts > 0) replaces the MLP of
 * every moe_every-th block (blocks moe_every - 1, 2 moe_every - 1, ...) by
 * moe.h's layer: a router to n_experts MLPs of the same shape, top_k of them
 * per token, capacity_factor (0: dropless), and the load-balancing loss
 * aux_loss_coef E sum_i f_i P_i added to the objective.
 *
 * Everything here is about the global model: a rank's share of it (its
 * local sizes, its tensors) is layout.h's. */
#ifndef CONFIG_H
#define CONFIG_H

#include <stddef.h>

typedef struct {
    int vocab_size;  /* V */
    int ctx_len;     /* maximum sequence length (wpe rows) */
    int n_layer;     /* L */
    int n_head;      /* NH */
    int n_embd;      /* C */
    /* mixture of experts (0 experts: a dense model; the named dense configs
     * leave these 0) */
    int n_experts;   /* E */
    int top_k;       /* k */
    float capacity_factor, aux_loss_coef;
    int moe_every;
    /* How it is stored and computed (not its shape: a checkpoint loads
     * into any precision). precision (precision.h's Precision, 0 = fp32,
     * the kit's original trainer): the format of the compute weights, the
     * saved activations and the activation gradients; the master weights,
     * AdamW's moments, the statistics and the loss stay fp32. The weight
     * gradients are stored in the compute format too (the ZeRO paper's
     * 2 + 2 + 12 bytes), or in fp32 with fp32_grads (Megatron's main_grad:
     * 2 + 4 + 12). attention (GPTAttention): how attention keeps what its
     * backward pass needs. */
    int precision;
    int fp32_grads;
    int attention;
} GPTConfig;

/* How attention runs (the trainers' and the planner's --attention):
 *   MATERIALIZED  the T x T probabilities P = softmax(q k^T / sqrt(hs)) are
 *                 stored, B NH T^2 floats per block, and read back by the
 *                 backward pass (lab 00's kernels);
 *   FUSED         tiles of queries against tiles of keys with an online
 *                 softmax (FlashAttention): only the output and each row's
 *                 log-sum-exp lse are kept, B NH T floats, and the backward
 *                 pass rebuilds each tile's P = e^(s - lse) (lab 05's
 *                 extension; kernels.h).
 * Both compute the same function; their results differ by float rounding. */
typedef enum { ATTENTION_MATERIALIZED, ATTENTION_FUSED } GPTAttention;
/* "materialized", "fused"; parse: 0, or -1 for anything else */
const char *gpt_attention_name(int a);
int gpt_attention_parse(const char *name, int *a);

/* The format of the weight gradients' buffers (a Precision) */
static inline int gpt_grad_precision(const GPTConfig *c) {
    return c->fp32_grads ? 0 : c->precision;
}

/* Whether block i (0-based) is a mixture of experts */
int gpt_block_is_moe(const GPTConfig *cfg, int i);
int gpt_num_moe_blocks(const GPTConfig *cfg);

/* Named configs: "tiny" (grading), "small" (demos), "medium" (the CPU
 * benchmark where GEMMs dominate), "gpt2-124m", and "tiny-moe" (tiny with 4
 * experts, top-2, capacity factor 1.25, aux 0.01, every other block). Returns 0,
 * or -1 for an unknown name. */
int gpt_config_by_name(const char *name, GPTConfig *cfg);
const char *gpt_config_names(void);  /* "tiny, small, medium, gpt2-124m" for messages */

/* Why a config can't be built, or NULL when it can (C % NH, positive sizes;
 * with experts: 2 <= E, 1 <= k <= E, capacity factor and aux >= 0, moe_every >= 1). */
const char *gpt_config_problem(const GPTConfig *cfg);

/* Parameters of the whole model (the memory formulas' Phi) and of block i:
 * 12C^2 + 13C dense; an MoE block's MLP (8C^2 + 5C) is E of them and the
 * router E C: 12C^2 + 13C + (E - 1)(8C^2 + 5C) + E C. */
size_t gpt_num_params(const GPTConfig *cfg);        /* Phi = (V + ctx) C + sum of blocks + 2C */
size_t gpt_block_num_params(const GPTConfig *cfg, int i);

/* Training FLOPs per token: 6 Phi' + 12 L C T (forward + backward), where Phi'
 * leaves out wpe (a lookup, no arithmetic) and 12 L C T counts the attention
 * score and value GEMMs over the full T x T, as PaLM's appendix B does. In
 * an MoE block a token meets only k experts (and the router): Phi' counts
 * the parameters a token's arithmetic uses, k of the E MLPs. */
double gpt_flops_per_token(const GPTConfig *cfg, int T);

#endif
