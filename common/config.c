#include "config.h"

#include <string.h>

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

double gpt_flops_per_token(const GPTConfig *cfg, int T) {
    double phi = (double)gpt_num_params(cfg) - (double)cfg->ctx_len * cfg->n_embd;
    return 6.0 * phi + 12.0 * cfg->n_layer * cfg->n_embd * (double)T;
}
