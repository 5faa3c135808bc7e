#include "config.h"

#include <string.h>

typedef struct { const char *name; GPTConfig cfg; } NamedConfig;

static const NamedConfig g_configs[] = {
    /*                 V      ctx   L   NH   C */
    {"tiny",      {  256,    64,  4,   4,  64, 0, 0, 0.0f,    0.0f,  0, 0, 0, 0}},
    {"small",     {  256,   128,  4,   4, 128, 0, 0, 0.0f,    0.0f,  0, 0, 0, 0}},
    {"medium",    {  256,   256,  4,   6, 384, 0, 0, 0.0f,    0.0f,  0, 0, 0, 0}},
    {"gpt2-124m", {50257,  1024, 12,  12, 768, 0, 0, 0.0f,    0.0f,  0, 0, 0, 0}},
    /*                                       E  k  capacity aux   every precision fp32_grads attention */
    {"tiny-moe",  {  256,    64,  4,   4,  64, 4, 2, 1.25f,   0.01f, 2, 0, 0, 0}},
};

int gpt_config_by_name(const char *name, GPTConfig *cfg) {
    for (size_t i = 0; i < sizeof g_configs / sizeof g_configs[0]; i++)
        if (strcmp(name, g_configs[i].name) == 0) {
            *cfg = g_configs[i].cfg;
            return 0;
        }
    return -1;
}

const char *gpt_config_names(void) { return "tiny, small, medium, gpt2-124m, tiny-moe"; }

const char *gpt_attention_name(int a) {
    return a == ATTENTION_FUSED ? "fused" : a == ATTENTION_MATERIALIZED ? "materialized" : "?";
}

int gpt_attention_parse(const char *name, int *a) {
    for (int i = ATTENTION_MATERIALIZED; i <= ATTENTION_FUSED; i++)
        if (strcmp(name, gpt_attention_name(i)) == 0) {
            *a = i;
            return 0;
        }
    return -1;
}

int gpt_block_is_moe(const GPTConfig *cfg, int i) {
    return cfg->n_experts > 0 && (i + 1) % cfg->moe_every == 0;
}

int gpt_num_moe_blocks(const GPTConfig *cfg) {
    return cfg->n_experts > 0 ? cfg->n_layer / cfg->moe_every : 0;
}

const char *gpt_config_problem(const GPTConfig *cfg) {
    if (cfg->vocab_size < 2 || cfg->vocab_size > 65536) return "vocab size must be in 2..65536";
    if (cfg->ctx_len < 1) return "context length must be at least 1";
    if (cfg->n_layer < 1) return "the model needs at least 1 layer";
    if (cfg->n_head < 1 || cfg->n_embd < 1) return "heads and channels must be positive";
    if (cfg->n_embd % cfg->n_head != 0) return "channels (n_embd) must be divisible by heads (n_head)";
    if (cfg->n_experts == 0) return NULL;
    if (cfg->n_experts < 2 || cfg->n_experts > 1024) return "a mixture of experts needs 2..1024 experts";
    if (cfg->top_k < 1 || cfg->top_k > cfg->n_experts) return "top-k must be in 1..experts";
    if (!(cfg->capacity_factor >= 0.0f) || !(cfg->aux_loss_coef >= 0.0f))
        return "the capacity factor and the aux loss coefficient must be >= 0";
    if (cfg->moe_every < 1 || cfg->moe_every > cfg->n_layer)
        return "moe-every must be in 1..n_layer (every n-th block is a mixture of experts)";
    return NULL;
}

size_t gpt_block_num_params(const GPTConfig *cfg, int i) {
    size_t C = cfg->n_embd, mlp = 8 * C * C + 5 * C;
    if (!gpt_block_is_moe(cfg, i)) return 12 * C * C + 13 * C;
    return 12 * C * C + 13 * C + (cfg->n_experts - 1) * mlp + (size_t)cfg->n_experts * C;
}

size_t gpt_num_params(const GPTConfig *cfg) {
    size_t C = cfg->n_embd;
    size_t blocks = 0;
    for (int i = 0; i < cfg->n_layer; i++) blocks += gpt_block_num_params(cfg, i);
    return (size_t)cfg->vocab_size * C + (size_t)cfg->ctx_len * C + blocks + 2 * C;
}

double gpt_flops_per_token(const GPTConfig *cfg, int T) {
    const double C = cfg->n_embd, mlp = 8 * C * C + 5 * C;
    double phi = (double)gpt_num_params(cfg) - (double)cfg->ctx_len * cfg->n_embd;
    /* an MoE block: the E - k experts a token does not meet do no work for it */
    phi -= gpt_num_moe_blocks(cfg) * (double)(cfg->n_experts - cfg->top_k) * mlp;
    return 6.0 * phi + 12.0 * cfg->n_layer * cfg->n_embd * (double)T;
}
