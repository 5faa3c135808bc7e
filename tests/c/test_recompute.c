/* Activation recomputation (layout.h's Recompute, model.h's RecomputeOps):
 * with SELECTIVE and FULL, two micro-batches accumulated (so that a value
 * kept from the other micro-batch would show) give bit for bit the losses
 * and gradients of keeping everything; the activations allocated are the
 * formula's (gpt_activation_bytes, counted by the allocator), and FULL <
 * SELECTIVE < NONE. The recomputing functions here are the obvious ones
 * (rerun the block's forward, or its attention), as lab 05's solution
 * writes them: what is tested is the library's placement of the buffers
 * and of the calls. In fp32, and in bf16 where the blocks keep their
 * activations packed (model.h) and the recomputed ones are rounded as the
 * forward pass's were. */
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "backward_kernels.h"
#include "check.h"
#include "kernels.h"
#include "model.h"
#include "precision.h"
#include "rng.h"
#include "unit.h"

static void again_block(const GPTLayout *l, const BlockParams *p, BlockActs *a, const float *x,
                        int B, int T) {
    block_forward(l, p, a, x, B, T);
}
static void again_attention(const GPTLayout *l, BlockActs *a, int B, int T) {
    attention_probs_forward(a->att, a->qkv, B, T, l->attn_width, l->n_head);
}
static const RecomputeOps g_ops = {again_block, again_attention};

enum { B = 2, T = 8 };

/* losses of two micro-batches and the accumulated gradients */
static const GPTConfig g_cfg = {.vocab_size = 32, .ctx_len = 8, .n_layer = 3, .n_head = 2,
                                .n_embd = 16};

static void run(Recompute rc, Precision precision, float losses[2], float **grads_out,
                size_t *acts_bytes) {
    GPTConfig cfg = g_cfg;
    cfg.precision = precision;
    kernels_set_precision(precision);
    GPTLayout l = gpt_layout_whole(&cfg);
    l.recompute = rc;
    l.recompute_ops = rc == RECOMPUTE_NONE ? NULL : &g_ops;
    float *params = malloc(l.num_params * sizeof(float)), *grads = calloc(l.num_params, sizeof(float));
    CHECK(params && grads, "out of memory");
    gpt_init_params(&l, 5, 0, l.num_params, params);
    GPTParams p, g;
    gpt_params_view(&l, params, &p);
    gpt_params_view(&l, grads, &g);
    size_t before = mem_current_bytes(MEM_ACTIVATIONS);
    GPTActs a;
    BackwardScratch s;
    gpt_acts_alloc(&l, B, T, &a, &s);
    *acts_bytes = mem_current_bytes(MEM_ACTIVATIONS) - before;
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < B * T; i++) {
            a.inputs[i] = (int)rng_below(7, RNG_STREAM_TEST, i, 20 + k, cfg.vocab_size);
            a.targets[i] = (int)rng_below(7, RNG_STREAM_TEST, i, 30 + k, cfg.vocab_size);
        }
        losses[k] = gpt_forward(&l, &p, &a, NULL);
        gpt_backward(&l, &p, &g, &a, &s, NULL);
    }
    EXPECT(gpt_activation_bytes(&l, B, T) + gpt_activation_ints(B, T) * sizeof(int)
               == *acts_bytes,
           "recompute %d: allocated %zu activation bytes, the formula says %zu", rc, *acts_bytes,
           gpt_activation_bytes(&l, B, T) + gpt_activation_ints(B, T) * sizeof(int));
    gpt_acts_free(&a, &s);
    gpt_params_view_free(&p);
    gpt_params_view_free(&g);
    free(params);
    *grads_out = grads;
}

static void check_precision(Precision p) {
    float base_loss[2], loss[2];
    float *base_grads, *grads;
    size_t base_bytes, bytes[3];
    run(RECOMPUTE_NONE, p, base_loss, &base_grads, &base_bytes);
    bytes[RECOMPUTE_NONE] = base_bytes;
    const size_t n = gpt_num_params(&g_cfg);
    for (Recompute rc = RECOMPUTE_SELECTIVE; rc <= RECOMPUTE_FULL; rc++) {
        run(rc, p, loss, &grads, &bytes[rc]);
        EXPECT(memcmp(loss, base_loss, sizeof loss) == 0,
               "%s, recompute %d: losses %.9g %.9g vs %.9g %.9g", precision_name(p), rc, loss[0],
               loss[1], base_loss[0], base_loss[1]);
        EXPECT(memcmp(grads, base_grads, n * sizeof(float)) == 0,
               "%s, recompute %d: gradients differ from keeping everything", precision_name(p), rc);
        free(grads);
    }
    EXPECT(bytes[RECOMPUTE_FULL] < bytes[RECOMPUTE_SELECTIVE] &&
               bytes[RECOMPUTE_SELECTIVE] < bytes[RECOMPUTE_NONE],
           "%s: activation bytes: none %zu, selective %zu, full %zu", precision_name(p), bytes[0],
           bytes[1], bytes[2]);
    free(base_grads);
}

int main(void) {
    kernels_set_cpu_backward(program_backward_kernels());
    check_precision(PRECISION_FP32);
    check_precision(PRECISION_BF16);
    return unit_report("test_recompute");
}
