/* The executor (pipe_exec.h) on one rank, where every schedule must give
 * the whole model's arithmetic bit for bit:
 *   - the trivial schedule (the loop's own, labs 00-05) gives the losses and
 *     gradients of the plain loop (gpt_forward, gpt_backward per
 *     micro-batch), bit for bit;
 *   - the model cut into 2 and 4 stages on one rank (chunks), run in any
 *     valid order, gives the same bits: a stage's output handed to the next
 *     stage, its input gradient handed back, the tied wte written by the
 *     head first and the embedding last;
 *   - the split backward (I then W, as ZB-H1 runs it) gives the same bits
 *     as the whole backward;
 *   - the allocator's activation and gradient-buffer peaks equal
 *     pipe_activation_peak_bytes and pipe_comm_peak_bytes;
 *   - using activations after releasing them is an error, and a run frees
 *     everything it took.
 * All of it in fp32 and again in bf16, where the blocks keep their
 * activations packed (model.h's BlockActs.kept). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "backward_kernels.h"
#include "check.h"
#include "model.h"
#include "kernels.h"
#include "pipe_exec.h"
#include "precision.h"
#include "rng.h"
#include "unit.h"

enum { B = 2, T = 8, M = 3 };
static GPTConfig g_cfg = {.vocab_size = 32, .ctx_len = 8, .n_layer = 4, .n_head = 2,
                          .n_embd = 16};

static void load(void *ctx, int micro, GPTActs *a) {
    (void)ctx;
    for (int i = 0; i < B * T; i++) {
        a->inputs[i] = (int)rng_below(7, RNG_STREAM_TEST, i, 20 + micro, g_cfg.vocab_size);
        a->targets[i] = (int)rng_below(7, RNG_STREAM_TEST, i, 40 + micro, g_cfg.vocab_size);
    }
}

typedef struct {
    GPTLayout l;
    float *params, *grads;
    GPTParams p, g;
} Model;

static void model_init(Model *m, int chunks) {
    m->l = gpt_layout_whole(&g_cfg);
    gpt_layout_set_pipeline(&m->l, 1, 0, chunks);
    m->params = malloc(m->l.num_params * sizeof(float));
    m->grads = calloc(m->l.num_params, sizeof(float));
    CHECK(m->params && m->grads, "out of memory");
    gpt_init_params(&m->l, 5, 0, m->l.num_params, m->params);
    gpt_params_view(&m->l, m->params, &m->p);
    gpt_params_view(&m->l, m->grads, &m->g);
}

static void model_free(Model *m) {
    gpt_params_view_free(&m->p);
    gpt_params_view_free(&m->g);
    free(m->params);
    free(m->grads);
}

/* The plain loop: M micro-batches, gradients accumulated */
static double plain_loop(Model *m) {
    GPTActs a;
    BackwardScratch s;
    gpt_acts_alloc(&m->l, B, T, &a, &s);
    double sum = 0;
    for (int k = 0; k < M; k++) {
        load(NULL, k, &a);
        sum += gpt_forward(&m->l, &m->p, &a, NULL);
        gpt_backward(&m->l, &m->p, &m->g, &a, &s, NULL);
    }
    gpt_acts_free(&a, &s);
    return sum;
}

/* The split backward's ops, as lab 06's pipeline.c writes them but with
 * the loop's loss weight (each micro-batch's own mean loss) */
static void split_input(PipeRank *x, int micro, int chunk) {
    gpt_stage_backward_input(x->layout, x->params, x->grads, pipe_acts(x, micro, chunk),
                             &x->scratch, pipe_grad_out(x, micro, chunk),
                             pipe_grad_in(x, micro, chunk), 1.0f, x->hooks);
}
static void split_weight(PipeRank *x, int micro, int chunk) {
    gpt_stage_backward_weight(x->layout, x->grads, pipe_acts(x, micro, chunk));
    pipe_acts_release(x, micro, chunk);
}

/* One rank, v chunks: each micro-batch forward through the chunks, then
 * backward (whole, or split: every I, then every W), micro-batches
 * `ahead` forwards ahead of their backwards (several sets in flight). */
static Schedule *one_rank_schedule(int v, int split, int ahead) {
    Schedule *s = schedule_create(1, M, v);
    int next_forward = 0;
    for (int i = 0; i < M; i++) {
        for (; next_forward < M && next_forward <= i + ahead; next_forward++)
            for (int c = 0; c < v; c++) schedule_add(s, 0, PIPE_FORWARD, next_forward, c, -1);
        for (int c = v - 1; c >= 0; c--)
            schedule_add(s, 0, split ? PIPE_BACKWARD_INPUT : PIPE_BACKWARD, i, c, -1);
        for (int c = v - 1; c >= 0 && split; c--)
            schedule_add(s, 0, PIPE_BACKWARD_WEIGHT, i, c, -1);
    }
    return s;
}

static int same_bits(const float *a, const float *b, size_t n) {
    return memcmp(a, b, n * sizeof(float)) == 0;
}

/* Run s on a model of v chunks; compare with the plain loop's gradients */
static void check_schedule(const char *what, Schedule *s, const PipeStageOps *ops,
                           const float *want_grads, double want_loss) {
    char why[256];
    EXPECT(schedule_validate(s, why, sizeof why) == 0, "%s: invalid: %s", what, why);
    Model m;
    model_init(&m, s->chunks);
    mem_reset_peaks();
    const size_t act0 = mem_current_bytes(MEM_ACTIVATIONS), comm0 = mem_current_bytes(MEM_COMM);
    PipeRank x;
    pipe_rank_init(&x, &m.l, &m.p, &m.g, NULL, B, T, NULL, 1);
    double loss = pipe_run(&x, s, ops, load, NULL, NULL, NULL);
    EXPECT(loss == want_loss, "%s: loss sum %.9g, the plain loop's %.9g", what, loss, want_loss);
    EXPECT(same_bits(m.grads, want_grads, m.l.num_params), "%s: gradients differ", what);
    EXPECT(mem_peak_bytes(MEM_ACTIVATIONS) - act0 == pipe_activation_peak_bytes(&m.l, s, B, T),
           "%s: activations peak %zu bytes, predicted %zu", what,
           mem_peak_bytes(MEM_ACTIVATIONS) - act0, pipe_activation_peak_bytes(&m.l, s, B, T));
    EXPECT(mem_peak_bytes(MEM_COMM) - comm0 == pipe_comm_peak_bytes(&m.l, s, B, T, 0, 0),
           "%s: gradient buffers peak %zu bytes, predicted %zu", what,
           mem_peak_bytes(MEM_COMM) - comm0, pipe_comm_peak_bytes(&m.l, s, B, T, 0, 0));
    EXPECT(mem_current_bytes(MEM_COMM) == comm0, "%s: gradient buffers left after the run", what);
    pipe_rank_free(&x);
    EXPECT(mem_current_bytes(MEM_ACTIVATIONS) == act0, "%s: activations left after the run", what);
    model_free(&m);
    schedule_free(s);
}

/* Every check in one precision */
static void check_precision(Precision p) {
    g_cfg.precision = p;
    kernels_set_precision(p);
    Model ref;
    model_init(&ref, 1);
    const double ref_loss = plain_loop(&ref);

    char what[64];
    snprintf(what, sizeof what, "%s: trivial schedule", precision_name(p));
    check_schedule(what, pipe_schedule_trivial(M), &pipe_plain_ops, ref.grads, ref_loss);
    const PipeStageOps split_ops = {pipe_plain_ops.forward, NULL, split_input, split_weight, 0, "split_"};
    for (int v = 1; v <= 4; v *= 2)
        for (int ahead = 0; ahead < M; ahead++) {
            snprintf(what, sizeof what, "%s: %d chunks, %d ahead", precision_name(p), v, ahead);
            check_schedule(what, one_rank_schedule(v, 0, ahead), &pipe_plain_ops, ref.grads,
                           ref_loss);
            snprintf(what, sizeof what, "%s: %d chunks, %d ahead, split backward",
                     precision_name(p), v, ahead);
            check_schedule(what, one_rank_schedule(v, 1, ahead), &split_ops, ref.grads, ref_loss);
        }

    /* the activation peak grows with the micro-batches in flight: one more
     * set per chunk for each forward ahead */
    Model m;
    model_init(&m, 2);
    Schedule *s0 = one_rank_schedule(2, 0, 0), *s2 = one_rank_schedule(2, 0, 2);
    const GPTStage st0 = gpt_stage(&m.l, 0), st1 = gpt_stage(&m.l, 1);
    const size_t sets = (gpt_stage_activation_bytes(&m.l, &st0, B, T) +
                         gpt_stage_activation_bytes(&m.l, &st1, B, T)) +
                        2 * gpt_activation_ints(B, T) * sizeof(int);
    EXPECT(pipe_activation_peak_bytes(&m.l, s0, B, T) == sets, "one micro-batch in flight");
    EXPECT(pipe_activation_peak_bytes(&m.l, s2, B, T) == 3 * sets, "three micro-batches in flight");
    schedule_free(s0);
    schedule_free(s2);
    model_free(&m);
    model_free(&ref);
}

int main(void) {
    kernels_set_cpu_backward(program_backward_kernels());
    check_precision(PRECISION_FP32);
    check_precision(PRECISION_BF16);
    return unit_report("test_pipe_exec");
}
