/* config.h: the whole model's shape, as named configs and as sizes.
 *
 *   tokens -> encoder (wte + wpe) -> L x block -> layernorm f -> logits = x wte^T
 *   block:  x1 = x  + attproj( attention( qkv( ln1(x)  ) ) )
 *           x2 = x1 + fcproj( gelu( fc( ln2(x1) ) ) )
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
} GPTConfig;

/* Named configs: "tiny" (grading), "small" (demos), "medium" (the CPU
 * benchmark where GEMMs dominate), "gpt2-124m". Returns 0,
 * or -1 for an unknown name. */
int gpt_config_by_name(const char *name, GPTConfig *cfg);
const char *gpt_config_names(void);  /* "tiny, small, medium, gpt2-124m" for messages */

/* Why a config can't be built, or NULL when it can (C % NH, positive sizes). */
const char *gpt_config_problem(const GPTConfig *cfg);

/* Parameters of the whole model (the memory formulas' Phi) and of a block. */
size_t gpt_num_params(const GPTConfig *cfg);        /* Phi = (V + ctx) C + L (12C^2 + 13C) + 2C */
size_t gpt_block_num_params(const GPTConfig *cfg);  /* 12C^2 + 13C */

/* Training FLOPs per token: 6 Phi' + 12 L C T (forward + backward), where Phi'
 * leaves out wpe (a lookup, no arithmetic) and 12 L C T counts the attention
 * score and value GEMMs over the full T x T, as PaLM's appendix B does. */
double gpt_flops_per_token(const GPTConfig *cfg, int T);

#endif
