/* check_act: lab 05's layernorm-gradient sum where lab 05's trainers never
 * take it, on the stages of a pipeline (the composed trainer's
 * train_4d --pp 2 --tp 2 --sp). Run on 2 ranks: one TP group of 2.
 *
 * For each stage of a pipeline of 2, both ranks hold that stage's layout
 * (its blocks; the final layernorm on the last stage only; the views of
 * what the stage does not hold are NULL, gpt_params_view), every gradient
 * element set to rank + 1. After sp_sum_layernorm_grads each layernorm
 * weight and bias the stage holds must be 3 (1 + 2, summed over the TP
 * group) and every other element its rank's own value. A sum that reads a
 * view the stage does not hold stops here with the reason (its SIGSEGV
 * caught); one that skips a layernorm, or sums other tensors too, is the
 * first element that differs.
 *
 * Prints one line per stage and "check_act: ok", exit 0; or the first
 * failure, exit 1. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "activation_memory.h"
#include "check.h"
#include "cli.h"
#include "comm.h"
#include "layout.h"

/* Mark the n floats at p (a view into flat, or NULL) as summed */
static void mark(char *summed, const float *flat, const float *p, size_t n) {
    if (p) memset(summed + (p - flat), 1, n);
}

/* One stage: returns 1 when every element is as it should be */
static int check_stage(const GPTConfig *c, Comm *tp, int stage) {
    GPTLayout l = gpt_layout_make(c, tp->size, tp->rank);
    gpt_layout_set_pipeline(&l, 2, stage, 1);
    l.tp_group = tp;
    const size_t n = l.num_params, C = (size_t)c->n_embd;
    float *flat = malloc(n * sizeof *flat);
    char *summed = calloc(n, 1);
    CHECK(flat && summed, "out of memory");
    for (size_t i = 0; i < n; i++) flat[i] = (float)(tp->rank + 1);
    GPTParams g;
    gpt_params_view(&l, flat, &g);
    for (int b = 0; b < c->n_layer; b++) {
        const BlockParams *p = &g.blocks[b];
        mark(summed, flat, p->ln1w, C), mark(summed, flat, p->ln1b, C);
        mark(summed, flat, p->ln2w, C), mark(summed, flat, p->ln2b, C);
    }
    mark(summed, flat, g.lnfw, C), mark(summed, flat, g.lnfb, C);
    sp_sum_layernorm_grads(&l, &g);
    int ok = 1;
    for (size_t i = 0; i < n && ok; i++) {
        const float want = summed[i] ? 3.0f : (float)(tp->rank + 1);
        if (flat[i] != want) {
            printf("check_act: FAIL: stage %d of 2, rank %d: gradient element %zu is %g, want %g "
                   "(%s)\n", stage, tp->rank, i, flat[i], want,
                   summed[i] ? "a layernorm's: summed over the TP group"
                             : "not a layernorm's: left as it was");
            ok = 0;
        }
    }
    gpt_params_view_free(&g);
    free(summed);
    free(flat);
    return ok;
}

int main(int argc, char **argv) {
    program_set_name(argv[0]);
    cli_no_options(argc, argv, "mpirun -np 2 check_act",
                   "Checks lab 05's sp_sum_layernorm_grads alone: on a pipeline's two stages, "
                   "each with one TP group of 2 ranks, the layernorm gradients summed as the "
                   "stage holds them. Exit status 0 when it passes, 1 when it fails, 3 when it "
                   "is not implemented.");
    Comm *world = comm_init(&argc, &argv);
    if (world->size != 2) USER_ERROR("check_act runs on 2 ranks (one TP group of 2), not %d",
                                     world->size);
    const GPTConfig c = {.vocab_size = 64, .ctx_len = 8, .n_layer = 4, .n_head = 4, .n_embd = 16};
    check_segv_says("check_act: FAIL: sp_sum_layernorm_grads read a tensor this pipeline stage "
                    "does not hold (its view is NULL: another stage's block, or the final "
                    "layernorm before the last stage)");
    int ok = 1;
    for (int stage = 0; stage < 2 && ok; stage++) {
        ok = check_stage(&c, world, stage);
        comm_allreduce(world, &ok, &ok, 1, COMM_INT32, COMM_MIN);
        if (ok && world->rank == 0)
            printf("check_act: stage %d of 2: the layernorms it holds summed over TP, nothing "
                   "else touched\n", stage);
    }
    if (world->rank == 0) printf("check_act: %s\n", ok ? "ok" : "FAILED");
    comm_finalize();
    return ok ? 0 : 1;
}
