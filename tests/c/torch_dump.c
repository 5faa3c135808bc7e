/* torch_dump: the C model's numbers for a PyTorch cross-check.
 *
 * Usage: torch_dump [--bf16] [--fused] OUT_FILE
 *
 * Builds a small GPT (V 256, ctx 16, L 2, NH 2, C 32), initializes it with
 * gpt_init_params(seed 1), makes one batch (B 4, T 16) of random tokens from
 * RNG_STREAM_TEST, and records: the loss and every parameter gradient at step
 * 0, then the losses of NSTEPS AdamW steps on that same batch (constant lr, no
 * clipping; each loss measured before its update). tests/torch_check.py
 * rebuilds the same model in PyTorch from this file and compares.
 * --bf16: the same in mixed precision, as the trainers' --precision bf16
 * --fp32-grads run it: the passes read the weights rounded to bf16 (the
 * compute copy, made from the fp32 master before each step), store their
 * activations and activation gradients rounded, and AdamW updates the fp32
 * master from the fp32 gradients (header version 2: a precision field).
 * --fused: with fused attention (lab 05's forward pass, the library's
 * backward; skips with status 77 in a build without it), over sequences
 * of T = 300 (ctx 300): three tiles of queries, two of keys. PyTorch's
 * reference is its plain attention all the same.
 *
 * File format, little-endian, no padding:
 *   int32   magic 0x54524348 ("TRCH"), version 2, V, ctx, L, NH, C, B, T,
 *           nsteps, nparams, precision (precision.h: 0 fp32, 1 bf16)
 *   float32 lr, beta1, beta2, eps, weight_decay
 *   float32 params[nparams]   initial flat buffer, gpt_tensor_table layout
 *   int32   inputs[B*T], targets[B*T]
 *   float32 loss0
 *   float32 grads[nparams]    d(loss0)/d(params), same layout
 *   float32 losses[nsteps]    losses[0] == loss0
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "backward_kernels.h"
#include "check.h"
#include "fileio.h"
#include "fused_attention_ops.h"
#include "kernels.h"
#include "model.h"
#include "precision.h"
#include "rng.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "torch_dump writes its file in host byte order, which must be little-endian"
#endif

#define DUMP_MAGIC 0x54524348
#define DUMP_VERSION 2
#define NSTEPS 10
#define SEED 1ULL
#define BATCH 4         /* B sequences */
#define SEQ 16          /* of T tokens */
#define FUSED_SEQ 300   /* or, with --fused, of these */

/* fwrite n items of size bytes, or die naming the file. */
static void write_all(FILE *f, const void *data, size_t size, size_t n, const char *path) {
    IO_CHECK(fwrite(data, size, n, f) == n, "cannot write %s", path);
}

int main(int argc, char **argv) {
    program_set_name(argv[0]);
    kernels_set_cpu_backward(program_backward_kernels());
    int bf16 = 0, fused = 0, i = 1;
    for (; i < argc - 1; i++) {
        if (strcmp(argv[i], "--bf16") == 0) bf16 = 1;
        else if (strcmp(argv[i], "--fused") == 0) fused = 1;
        else break;
    }
    if (i != argc - 1 || argv[argc - 1][0] == '-') {
        if (argc == 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
            printf("usage: %s [--bf16] [--fused] OUT_FILE\n"
                   "Write the C model's initial params, one batch, its loss and gradients,\n"
                   "and %d AdamW losses, for tests/torch_check.py; --bf16: in mixed\n"
                   "precision (bf16 compute, fp32 master); --fused: with fused attention,\n"
                   "T = %d.\n", g_program_name, NSTEPS, FUSED_SEQ);
            return 0;
        }
        USER_ERROR("usage: %s [--bf16] [--fused] OUT_FILE", g_program_name);
    }
    const char *path = argv[argc - 1];
    if (fused && !program_fused_attention()) {
        printf("torch_dump: skipped: this build has no fused attention (lab 05)\n");
        return 77;
    }
    if (fused) kernels_set_cpu_fused_forward(program_fused_attention());

    const int B = BATCH, T = fused ? FUSED_SEQ : SEQ;
    const GPTConfig cfg = {.vocab_size = 256, .ctx_len = T, .n_layer = 2, .n_head = 2,
                           .n_embd = 32, .precision = bf16 ? PRECISION_BF16 : PRECISION_FP32,
                           .fp32_grads = bf16,
                           .attention = fused ? ATTENTION_FUSED : ATTENTION_MATERIALIZED};
    kernels_set_precision(cfg.precision);
    const float lr = 1e-2f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f;
    CHECK(gpt_config_problem(&cfg) == NULL, "bad built-in config");
    const GPTLayout m = gpt_layout_whole(&cfg);

    const size_t nparams = gpt_num_params(&cfg);
    float *params = mem_alloc(MEM_PARAMS, nparams * sizeof(float));
    float *params0 = mem_alloc(MEM_PARAMS, nparams * sizeof(float));
    float *compute = mem_alloc(MEM_PARAMS, nparams * sizeof(float));  /* what the passes read */
    float *grads = mem_alloc(MEM_GRADS, nparams * sizeof(float));
    float *grads0 = mem_alloc(MEM_GRADS, nparams * sizeof(float));
    float *adam_m = mem_alloc(MEM_OPTIMIZER, nparams * sizeof(float));
    float *adam_v = mem_alloc(MEM_OPTIMIZER, nparams * sizeof(float));
    gpt_init_params(&m, SEED, 0, nparams, params);
    memcpy(params0, params, nparams * sizeof(float));

    GPTParams p, g;
    gpt_params_view(&m, compute, &p);
    gpt_params_view(&m, grads, &g);
    GPTActs acts;
    BackwardScratch scratch;
    gpt_acts_alloc(&m, B, T, &acts, &scratch);
    for (int i = 0; i < B * T; i++) {
        acts.inputs[i] = (int)rng_below(SEED, RNG_STREAM_TEST, (uint64_t)i, 101,
                                        (uint64_t)cfg.vocab_size);
        acts.targets[i] = (int)rng_below(SEED, RNG_STREAM_TEST, (uint64_t)i, 102,
                                         (uint64_t)cfg.vocab_size);
    }
    /* the file's copy, as fixed-width ints */
    int32_t inputs[BATCH * FUSED_SEQ], targets[BATCH * FUSED_SEQ];
    for (int i = 0; i < B * T; i++) {
        inputs[i] = acts.inputs[i];
        targets[i] = acts.targets[i];
    }

    float losses[NSTEPS];
    for (int step = 0; step < NSTEPS; step++) {
        memset(grads, 0, nparams * sizeof(float));
        memcpy(compute, params, nparams * sizeof(float));
        round_inplace(compute, nparams, cfg.precision);  /* the compute copy (fp32: as is) */
        losses[step] = gpt_forward(&m, &p, &acts, NULL);
        gpt_backward(&m, &p, &g, &acts, &scratch, NULL);
        if (step == 0) memcpy(grads0, grads, nparams * sizeof(float));
        adamw_update(params, grads, adam_m, adam_v, nparams, lr, beta1, beta2, eps,
                     weight_decay, step + 1);
    }

    CHECK(nparams <= INT32_MAX, "too many parameters for the dump format");
    const int32_t header[12] = {DUMP_MAGIC, DUMP_VERSION, cfg.vocab_size, cfg.ctx_len,
                                cfg.n_layer, cfg.n_head, cfg.n_embd, B, T, NSTEPS,
                                (int32_t)nparams, cfg.precision};
    const float hyper[5] = {lr, beta1, beta2, eps, weight_decay};
    AtomicFile af;
    FILE *f = atomic_open(&af, path);
    write_all(f, header, sizeof header[0], 12, path);
    write_all(f, hyper, sizeof hyper[0], 5, path);
    write_all(f, params0, sizeof(float), nparams, path);
    write_all(f, inputs, sizeof inputs[0], (size_t)B * T, path);
    write_all(f, targets, sizeof targets[0], (size_t)B * T, path);
    write_all(f, &losses[0], sizeof(float), 1, path);
    write_all(f, grads0, sizeof(float), nparams, path);
    write_all(f, losses, sizeof(float), NSTEPS, path);
    atomic_commit(&af);

    printf("%s: wrote %s (%zu parameters, loss %.6f -> %.6f over %d AdamW steps)\n",
           g_program_name, path, nparams, losses[0], losses[NSTEPS - 1], NSTEPS);

    gpt_acts_free(&acts, &scratch);
    gpt_params_view_free(&p);
    gpt_params_view_free(&g);
    mem_free(params);
    mem_free(params0);
    mem_free(compute);
    mem_free(grads);
    mem_free(grads0);
    mem_free(adam_m);
    mem_free(adam_v);
    return 0;
}
