/* gradcheck: finite-difference check of every layer's backward pass.
 *
 * For a layer y = f(x, params) we take the scalar L = sum_i r_i y_i with a
 * fixed random r, so dL/dy = r. The backward pass, fed dout = r, gives the
 * analytic dL/dx; the central difference (L(x + h) - L(x - h)) / 2h gives the
 * numeric one, with error O(h^2) from the Taylor series plus the float
 * rounding of L divided by 2h. We compute L in double from float outputs.
 *
 * A tensor passes when  max_j |analytic_j - numeric_j| / max_j |numeric_j|
 * is below the tolerance (TOL): an error in a backward pass (a missing term,
 * a wrong index, a factor) gives O(1) relative errors, far above float noise.
 * A NaN or an infinity anywhere fails.
 *
 * It must also keep the accumulation contract (kernels.h): a backward pass
 * ADDS into its gradient outputs. So each check runs the backward pass twice:
 * once on zeroed gradient buffers (the analytic gradient g), once on buffers
 * pre-filled with known values p of g's size, and requires p + g back. A
 * backward pass that writes `=` where it should add, or zeroes its outputs
 * itself, returns g alone: a relative error of 0.5 or more. (Exception:
 * crossentropy_backward turns probs into dlogits in place.) Scratch it is
 * given (attention's datt) arrives holding garbage: its contents on entry
 * are unspecified.
 */
#include <getopt.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "backward_kernels.h"
#include "check.h"
#include "cli.h"
#include "fused_attention_ops.h"
#include "kernels.h"
#include "kernels_backend.h"
#include "model.h"
#include "rng.h"
#include "runlog.h"

/* Step and tolerance. Inputs and gradients are of size ~1 (the model check
 * perturbs its weights to make them so): h = 1e-2 keeps the h^2 Taylor term
 * near 1e-4, and the float rounding of L (~1e-7 relative over a few hundred
 * outputs) divided by 2h is ~1e-5. Correct backward passes measure 1e-6 to
 * 5e-4 (layers, model); the tolerance leaves a 20x margin above that, and a
 * wrong term, index or factor gives errors of 0.1 to 1. */
#define H_STEP 1e-2
#define TOL 1e-2
/* Accumulation: (p + g) - p against g, relative to max |g|. Only float
 * rounding separates them (p is of g's size: a few 1e-7); a backward pass
 * that overwrites gives at least 0.5 (|p_j| >= max |g| / 2). */
#define TOL_ACCUM 1e-4

typedef struct {
    const char *name;
    float *x, *grad;  /* the tensor and its analytic gradient */
    size_t n;         /* elements */
    /* strided tensors (q, k, v inside qkv): element j is at
     * (j / run) * ld + j % run in x and grad; run = 0: contiguous */
    size_t run, ld;
    int in_place;     /* the backward overwrites grad (crossentropy): no += check */
} Checked;

#define TENSOR(nm, xp, gp, count) {.name = (nm), .x = (xp), .grad = (gp), .n = (count)}

static size_t at(const Checked *t, size_t j) { return t->run ? (j / t->run) * t->ld + j % t->run : j; }

typedef struct GradCheck GradCheck;
struct GradCheck {
    double (*loss)(GradCheck *);   /* forward, then L */
    /* forward, then backward with dout = r, adding into the gradient buffers
     * as they are (check_tensors zeroes or pre-fills them) */
    void (*backward)(GradCheck *);
    /* layer state */
    int B, T, C, NH, V, N;
    float *buf[16];
    int *tokens;
    GPTConfig cfg;
    GPTLayout layout;  /* the whole model */
    GPTParams p, g;
    GPTActs acts;
    BackwardScratch scratch;
};

static unsigned long long g_seed = 1;

static float *randn(size_t n, uint32_t tag) {
    float *x = mem_alloc(MEM_WORKSPACE, n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = rng_normal(g_seed, RNG_STREAM_TEST, i, tag);
    return x;
}

static float *zeros(size_t n) { return mem_alloc(MEM_WORKSPACE, n * sizeof(float)); }

static double dot(const float *a, const float *b, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

/* max |a_j - b_j| with NaN and infinities counted as infinitely wrong */
static double worse(double max_err, double a, double b) {
    double e = fabs(a - b);
    return fmax(max_err, isfinite(e) ? e : INFINITY);
}

/* The known values a pre-filled gradient buffer holds: of g's size (scale =
 * max |g|), and never small, |p_j| in [scale/2, 3 scale/2), either sign. */
static float prefill(size_t j, int k, double scale) {
    float u = rng_uniform(g_seed, RNG_STREAM_TEST, j, 500 + (uint32_t)k);
    return (float)(scale * (u < 0.5f ? -(0.5 + 2 * u) : 0.5 + 2 * (u - 0.5f)));
}

/* Step 1: the analytic gradient of each tensor, from zeroed buffers, into
 * analytic[k] (malloc'd), and scale[k] = max |g| (1 when that is 0 or not
 * finite). Kept, because the forward passes of step 3 may reuse the
 * gradient buffers (crossentropy turns probs into dlogits in place). */
static void analytic_gradients(GradCheck *gc, Checked *t, int nt, float **analytic,
                               double *scale) {
    for (int k = 0; k < nt; k++)
        for (size_t j = 0; j < t[k].n; j++) t[k].grad[at(&t[k], j)] = 0.0f;
    gc->backward(gc);
    for (int k = 0; k < nt; k++) {
        analytic[k] = malloc(t[k].n * sizeof(float));
        CHECK(analytic[k] != NULL, "out of memory");
        scale[k] = 0.0;
        for (size_t j = 0; j < t[k].n; j++) {
            analytic[k][j] = t[k].grad[at(&t[k], j)];
            scale[k] = fmax(scale[k], fabs(analytic[k][j]));
        }
        if (!isfinite(scale[k]) || scale[k] == 0.0) scale[k] = 1.0;
    }
}

/* Step 2, the accumulation contract: pre-filled with p, the buffers must
 * come back holding p + g. accum_err[k] is the worst miss relative to
 * scale[k]. */
static void accumulation_errors(GradCheck *gc, Checked *t, int nt, float *const *analytic,
                                const double *scale, double *accum_err) {
    int any_accum = 0;
    for (int k = 0; k < nt; k++) {
        accum_err[k] = 0.0;  /* and stays 0 in place */
        any_accum |= !t[k].in_place;
    }
    if (!any_accum) return;  /* spares a backward */
    for (int k = 0; k < nt; k++)
        if (!t[k].in_place)
            for (size_t j = 0; j < t[k].n; j++) t[k].grad[at(&t[k], j)] = prefill(j, k, scale[k]);
    gc->backward(gc);
    for (int k = 0; k < nt; k++) {
        double err = 0.0;
        if (!t[k].in_place)
            for (size_t j = 0; j < t[k].n; j++)
                err = worse(err, (double)t[k].grad[at(&t[k], j)] - prefill(j, k, scale[k]),
                            analytic[k][j]);
        accum_err[k] = err / scale[k];
    }
}

/* Step 3: tensor t's analytic gradient against finite differences, at up to
 * max_elems elements (all of a small tensor, an even stride through a large
 * one), printed with its accumulation error. Returns 1 if it failed. */
static int check_tensor(const char *layer, GradCheck *gc, Checked *t, const float *analytic,
                        double accum_err, double h, double tol, size_t max_elems) {
    size_t stride = t->n > max_elems ? t->n / max_elems : 1;
    double max_err = 0.0, max_num = 0.0;
    for (size_t j = 0; j < t->n; j += stride) {
        float *x = &t->x[at(t, j)], saved = *x;
        *x = saved + (float)h;
        double lp = gc->loss(gc);
        *x = saved - (float)h;
        double lm = gc->loss(gc);
        *x = saved;
        /* the actual step is what float rounding made of x +- h */
        double num = (lp - lm) / ((double)(saved + (float)h) - (double)(saved - (float)h));
        max_err = worse(max_err, num, analytic[j]);
        max_num = fmax(max_num, fabs(num));
    }
    double rel = max_err / fmax(max_num, 1e-12);
    int ok = rel < tol, accum_ok = t->in_place || accum_err < TOL_ACCUM;
    char accum[32];
    if (t->in_place) snprintf(accum, sizeof accum, "+= n/a (in place)");
    else snprintf(accum, sizeof accum, "+= err %.1e", accum_err);
    printf("%-12s %-22s rel err %.2e  (max |grad| %.2e)  %s  %s%s%s\n", layer, t->name, rel,
           max_num, accum, ok && accum_ok ? "ok" : "FAIL",
           ok ? "" : ": does not match finite differences",
           accum_ok ? "" : ": not accumulated: a pre-filled buffer must come back "
                           "as its contents + the gradient (= instead of +=?)");
    return !ok || !accum_ok;
}

/* Check each tensor's gradient against finite differences, and every
 * element of it for accumulation. Returns the number of failures. */
static int check_tensors(const char *layer, GradCheck *gc, Checked *t, int nt, double h,
                         double tol, size_t max_elems) {
    float **analytic = malloc(nt * sizeof *analytic);
    double *scale = malloc(nt * sizeof *scale), *accum_err = malloc(nt * sizeof *accum_err);
    CHECK(analytic && scale && accum_err, "out of memory");
    analytic_gradients(gc, t, nt, analytic, scale);
    accumulation_errors(gc, t, nt, analytic, scale, accum_err);
    int failures = 0;
    for (int k = 0; k < nt; k++) {
        failures += check_tensor(layer, gc, &t[k], analytic[k], accum_err[k], h, tol, max_elems);
        free(analytic[k]);
    }
    free(analytic);
    free(scale);
    free(accum_err);
    return failures;
}

/* ---- layers --------------------------------------------------------------- */
/* buf[0] is r (dL/dy) and buf[1] the output in every layer check. */

/* A layer check ends here: its buffers are freed (unused slots are NULL) and
 * its failure count passed on. */
static int layer_done(GradCheck *c, int failures) {
    for (size_t i = 0; i < sizeof c->buf / sizeof c->buf[0]; i++) mem_free(c->buf[i]);
    return failures;
}

static double loss_layernorm(GradCheck *c) {
    float **b = c->buf;
    layernorm_forward(b[1], b[5], b[6], b[2], b[3], b[4], c->N, c->C);
    return dot(b[0], b[1], (size_t)c->N * c->C);
}
static void backward_layernorm(GradCheck *c) {
    float **b = c->buf;
    loss_layernorm(c);
    layernorm_backward(b[7], b[8], b[9], b[0], b[2], b[3], b[5], b[6], c->N, c->C);
}
static int check_layernorm(void) {
    GradCheck c = {.loss = loss_layernorm, .backward = backward_layernorm, .N = 6, .C = 16};
    size_t NC = (size_t)c.N * c.C;
    float **b = c.buf;
    b[0] = randn(NC, 0); b[1] = zeros(NC); b[2] = randn(NC, 2);
    b[3] = randn(c.C, 3); b[4] = randn(c.C, 4); b[5] = zeros(c.N); b[6] = zeros(c.N);
    b[7] = zeros(NC); b[8] = zeros(c.C); b[9] = zeros(c.C);
    Checked t[] = {TENSOR("dinp", b[2], b[7], NC), TENSOR("dw", b[3], b[8], c.C),
                   TENSOR("db", b[4], b[9], c.C)};
    return layer_done(&c, check_tensors("layernorm", &c, t, 3, H_STEP, TOL, 1000));
}

static double loss_matmul(GradCheck *c) {
    float **b = c->buf;
    matmul_forward(b[1], b[2], b[3], b[4], c->N, c->C, c->V);
    return dot(b[0], b[1], (size_t)c->N * c->V);
}
static void backward_matmul(GradCheck *c) {
    float **b = c->buf;
    matmul_backward(b[5], b[6], b[7], b[0], b[2], b[3], c->N, c->C, c->V);
}
static int check_matmul(void) {
    /* V plays OC here */
    GradCheck c = {.loss = loss_matmul, .backward = backward_matmul, .N = 5, .C = 8, .V = 12};
    float **b = c.buf;
    size_t NI = (size_t)c.N * c.C, NO = (size_t)c.N * c.V, W = (size_t)c.V * c.C;
    b[0] = randn(NO, 0); b[1] = zeros(NO); b[2] = randn(NI, 2); b[3] = randn(W, 3);
    b[4] = randn(c.V, 4); b[5] = zeros(NI); b[6] = zeros(W); b[7] = zeros(c.V);
    Checked t[] = {TENSOR("dinp", b[2], b[5], NI), TENSOR("dw", b[3], b[6], W),
                   TENSOR("dbias", b[4], b[7], c.V)};
    return layer_done(&c, check_tensors("matmul", &c, t, 3, H_STEP, TOL, 1000));
}

static double loss_attention(GradCheck *c) {
    float **b = c->buf;
    attention_forward(b[1], b[3], b[2], c->B, c->T, c->C, c->NH);
    return dot(b[0], b[1], (size_t)c->B * c->T * c->C);
}
static void backward_attention(GradCheck *c) {
    float **b = c->buf;
    loss_attention(c);
    /* datt is scratch whose contents on entry are unspecified: garbage here */
    size_t ATT = (size_t)c->B * c->NH * c->T * c->T;
    for (size_t i = 0; i < ATT; i++) b[5][i] = 1e3f * rng_normal(g_seed, RNG_STREAM_TEST, i, 77);
    attention_backward(b[4], b[5], b[0], b[2], b[3], c->B, c->T, c->C, c->NH);
}
/* An attention of c's shape, layer: its buffers (what the forward pass
 * keeps in b[3] and the backward pass's scratch in b[5]: keep floats each)
 * and its q, k, v checked apart; `tag` names the tensors when there are
 * several shapes. */
static int check_qkv(GradCheck *c, const char *layer, size_t keep, const char *tag) {
    float **b = c->buf;
    const size_t C = (size_t)c->C, BTC = (size_t)c->B * c->T * C;
    b[0] = randn(BTC, 0); b[1] = zeros(BTC); b[2] = randn(3 * BTC, 2); b[3] = zeros(keep);
    b[4] = zeros(3 * BTC); b[5] = zeros(keep);
    /* q, k and v are the three C-wide parts of each 3C-wide row of qkv */
    Checked t[3];
    char names[3][32];
    for (int k = 0; k < 3; k++) {
        snprintf(names[k], sizeof names[k], "d%c%s", "qkv"[k], tag);
        t[k] = (Checked){.name = names[k], .x = b[2] + k * C, .grad = b[4] + k * C, .n = BTC,
                         .run = C, .ld = 3 * C};
    }
    return layer_done(c, check_tensors(layer, c, t, 3, H_STEP, TOL, 1000));
}
static int check_attention_shape(int B, int T, int C, int NH, const char *tag) {
    GradCheck c = {.loss = loss_attention, .backward = backward_attention,
                   .B = B, .T = T, .C = C, .NH = NH};
    return check_qkv(&c, "attention", (size_t)B * NH * T * T, tag);
}
/* Fused attention (lab 05's forward pass, the library's backward): the
 * same gradient check, the lse in b[3] and the backward pass's D in b[5]
 * (scratch: garbage on entry) */
static double loss_fused(GradCheck *c) {
    float **b = c->buf;
    attention_fused_forward(b[1], b[3], b[2], c->B, c->T, c->C, c->NH);
    return dot(b[0], b[1], (size_t)c->B * c->T * c->C);
}
static void backward_fused(GradCheck *c) {
    float **b = c->buf;
    loss_fused(c);
    for (size_t i = 0; i < (size_t)c->B * c->NH * c->T; i++)
        b[5][i] = 1e3f * rng_normal(g_seed, RNG_STREAM_TEST, i, 78);
    attention_fused_backward(b[4], b[5], b[0], b[2], b[1], b[3], c->B, c->T, c->C, c->NH);
}
static int check_fused_shape(int B, int T, int C, int NH, const char *tag) {
    GradCheck c = {.loss = loss_fused, .backward = backward_fused, .B = B, .T = T, .C = C,
                   .NH = NH};
    return check_qkv(&c, "fused attention", (size_t)B * NH * T, tag);
}
/* A short sequence, and one longer than the blocks a backward pass that
 * skips the masked half may cut T into (lab 00's extension), and not a
 * multiple of them. */
static int check_attention(void) {
    return check_attention_shape(2, 5, 8, 2, "") + check_attention_shape(1, 67, 8, 2, " (T=67)");
}

static double loss_gelu(GradCheck *c) {
    gelu_forward(c->buf[1], c->buf[2], c->N);
    return dot(c->buf[0], c->buf[1], c->N);
}
static void backward_gelu(GradCheck *c) {
    gelu_backward(c->buf[3], c->buf[2], c->buf[0], c->N);
}
static int check_gelu(void) {
    GradCheck c = {.loss = loss_gelu, .backward = backward_gelu, .N = 64};
    c.buf[0] = randn(c.N, 0); c.buf[1] = zeros(c.N); c.buf[2] = randn(c.N, 2);
    c.buf[3] = zeros(c.N);
    Checked t[] = {TENSOR("dinp", c.buf[2], c.buf[3], c.N)};
    return layer_done(&c, check_tensors("gelu", &c, t, 1, H_STEP, TOL, 1000));
}

static double loss_residual(GradCheck *c) {
    residual_forward(c->buf[1], c->buf[2], c->buf[3], c->N);
    return dot(c->buf[0], c->buf[1], c->N);
}
static void backward_residual(GradCheck *c) {
    residual_backward(c->buf[4], c->buf[0], c->N);
    residual_backward(c->buf[5], c->buf[0], c->N);
}
static int check_residual(void) {
    GradCheck c = {.loss = loss_residual, .backward = backward_residual, .N = 32};
    float **b = c.buf;
    b[0] = randn(c.N, 0); b[1] = zeros(c.N); b[2] = randn(c.N, 2); b[3] = randn(c.N, 3);
    b[4] = zeros(c.N); b[5] = zeros(c.N);
    Checked t[] = {TENSOR("da", b[2], b[4], c.N), TENSOR("db", b[3], b[5], c.N)};
    return layer_done(&c, check_tensors("residual", &c, t, 2, H_STEP, TOL, 1000));
}

static double loss_encoder(GradCheck *c) {
    encoder_forward(c->buf[1], c->tokens, c->buf[2], c->buf[3], c->B, c->T, c->C);
    return dot(c->buf[0], c->buf[1], (size_t)c->B * c->T * c->C);
}
static void backward_encoder(GradCheck *c) {
    encoder_backward(c->buf[4], c->buf[5], c->buf[0], c->tokens, c->B, c->T, c->C);
}
static int check_encoder(void) {
    GradCheck c = {.loss = loss_encoder, .backward = backward_encoder,
                   .B = 2, .T = 4, .C = 6, .V = 5};
    int tokens[] = {0, 3, 3, 1, 4, 3, 0, 0};  /* repeats: gradients must add up */
    c.tokens = tokens;
    float **b = c.buf;
    size_t BTC = (size_t)c.B * c.T * c.C;
    b[0] = randn(BTC, 0); b[1] = zeros(BTC); b[2] = randn((size_t)c.V * c.C, 2);
    b[3] = randn((size_t)c.T * c.C, 3); b[4] = zeros((size_t)c.V * c.C);
    b[5] = zeros((size_t)c.T * c.C);
    Checked t[] = {TENSOR("dwte", b[2], b[4], (size_t)c.V * c.C),
                   TENSOR("dwpe", b[3], b[5], (size_t)c.T * c.C)};
    return layer_done(&c, check_tensors("encoder", &c, t, 2, H_STEP, TOL, 1000));
}

/* L = mean cross-entropy, so here dL/d(row loss) = 1/N for every row. */
static double loss_crossentropy(GradCheck *c) {
    return crossentropy_forward(c->buf[1], c->buf[3], c->buf[2], c->tokens, c->N, c->V);
}
static void backward_crossentropy(GradCheck *c) {
    loss_crossentropy(c);
    crossentropy_backward(c->buf[3], c->tokens, 1.0f / c->N, c->N, c->V);
}
static int check_crossentropy(void) {
    GradCheck c = {.loss = loss_crossentropy, .backward = backward_crossentropy, .N = 4, .V = 10};
    int targets[] = {3, 0, 9, 3};
    c.tokens = targets;
    size_t NV = (size_t)c.N * c.V;
    c.buf[1] = zeros(c.N); c.buf[2] = randn(NV, 2); c.buf[3] = zeros(NV);
    Checked t[] = {{.name = "dlogits", .x = c.buf[2], .grad = c.buf[3], .n = NV, .in_place = 1}};
    return layer_done(&c, check_tensors("crossentropy", &c, t, 1, H_STEP, TOL, 1000));
}

/* ---- the whole model ------------------------------------------------------ */

static double loss_model(GradCheck *c) { return gpt_forward(&c->layout, &c->p, &c->acts, NULL); }
static void backward_model(GradCheck *c) {
    gpt_forward(&c->layout, &c->p, &c->acts, NULL);
    gpt_backward(&c->layout, &c->p, &c->g, &c->acts, &c->scratch, NULL);
}
static int check_model_of(const char *name, GPTConfig cfg) {
    GradCheck c = {.loss = loss_model, .backward = backward_model, .B = 2, .T = 8};
    c.cfg = cfg;
    c.layout = gpt_layout_whole(&c.cfg);
    size_t n = gpt_num_params(&c.cfg);
    float *params = mem_alloc(MEM_PARAMS, n * sizeof(float));
    float *grads = mem_alloc(MEM_GRADS, n * sizeof(float));
    gpt_init_params(&c.layout, g_seed, 0, n, params);
    /* Larger than GPT-2's init (std 0.02): with tiny weights most gradients
     * are too small to measure in float. Biases and layernorm weights get
     * random values too, so that their gradients are exercised. */
    for (size_t i = 0; i < n; i++) params[i] += 0.3f * rng_normal(g_seed, RNG_STREAM_TEST, i, 99);
    gpt_params_view(&c.layout, params, &c.p);
    gpt_params_view(&c.layout, grads, &c.g);
    gpt_acts_alloc(&c.layout, c.B, c.T, &c.acts, &c.scratch);
    for (int i = 0; i < c.B * c.T; i++) {
        c.acts.inputs[i] = (int)rng_below(g_seed, RNG_STREAM_TEST, i, 7, c.cfg.vocab_size);
        c.acts.targets[i] = (int)rng_below(g_seed, RNG_STREAM_TEST, i, 8, c.cfg.vocab_size);
    }
    int nt = gpt_num_tensors(&c.layout);
    TensorInfo *info = malloc(nt * sizeof *info);
    Checked *t = malloc(nt * sizeof *t);
    CHECK(info && t, "out of memory");
    gpt_tensor_table(&c.layout, info);
    for (int k = 0; k < nt; k++)
        t[k] = (Checked)TENSOR(info[k].name, params + info[k].offset, grads + info[k].offset,
                               info[k].count);
    int failures = check_tensors(name, &c, t, nt, H_STEP, TOL, 40);
    free(info);
    free(t);
    gpt_acts_free(&c.acts, &c.scratch);
    gpt_params_view_free(&c.p);
    gpt_params_view_free(&c.g);
    mem_free(grads);
    mem_free(params);
    return failures;
}

static int check_model(void) {
    return check_model_of("model", (GPTConfig){.vocab_size = 32, .ctx_len = 8, .n_layer = 2,
                                               .n_head = 2, .n_embd = 16});
}

/* within one tile, and over two query tiles and two key tiles (the last
 * ones partial); then the model with
 * it. Skipped in a build without lab 05's extension. */
static int check_fused(void) {
    if (!program_fused_attention()) {
        printf("fused attention: skipped: this build has no fused attention (lab 05)\n");
        return 0;
    }
    kernels_set_cpu_fused_forward(program_fused_attention());
    return check_fused_shape(2, 5, 8, 2, "") + check_fused_shape(1, 300, 8, 2, " (T=300)") +
           check_model_of("model, fused attention",
                          (GPTConfig){.vocab_size = 32, .ctx_len = 8, .n_layer = 2, .n_head = 2,
                                      .n_embd = 16, .attention = ATTENTION_FUSED});
}

/* A mixture of experts (lab 08) in the second block, wired into the
 * model: 3 experts, each token routed to all 3, dropless, a large aux
 * weight so that its gradient shows. Top-k and capacity are piecewise
 * constant: in a random model of this size some routing decision is always
 * within a difference step of flipping, and the quotient across a flip is
 * the jump over 2h, not a derivative. With k = E and no capacity nothing
 * flips, and every path of the block (router through softmax and combine
 * weights, experts, aux loss) is still differentiated; top-k and drops are
 * tests/c/test_moe.c's, on inputs whose decision margins it measures. */
static int check_moe_model(void) {
    return check_model_of("moe", (GPTConfig){.vocab_size = 32, .ctx_len = 8, .n_layer = 2,
                                             .n_head = 2, .n_embd = 16, .n_experts = 3,
                                             .top_k = 3, .capacity_factor = 0.0f,
                                             .aux_loss_coef = 0.1f, .moe_every = 2});
}

/* ---- timing (lab 00's extension) ------------------------------------------ */

/* What --require-skip accepts of a backward's GEMM multiply-adds, as a
 * fraction of the 4 full T x T GEMMs': blocks of b rows against the keys on
 * or below the diagonal do (1 + b/T)/2 (0.53 at T = 512, b = 32; 0.625 with
 * b = 128); the diagonal blocks done by hand leave (1 - b/T)/2. Below 0.4
 * the products no longer go through the kit's GEMM, where they are counted. */
#define SKIP_MIN 0.40
#define SKIP_MAX 0.65

/* What 4 full T x T GEMMs of an attention backward cost on this machine, as
 * the forward pass's two shapes: per head, one (T,hs) x (hs,T) product into
 * (T,T) as q k^T, and three (T,T) x (T,hs) products into (T,hs) as P v. */
static void reference_gemms(float **b, int B, int T, int C, int NH) {
    const int hs = C / NH;
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * NH; bh++) {
        int bb = bh / NH, h = bh % NH;
        const float *q = b[2] + (size_t)bb * T * 3 * C + h * hs, *k = q + C, *v = q + 2 * C;
        float *s = b[5] + (size_t)bh * T * T, *out = b[4] + (size_t)bb * T * 3 * C + h * hs;
        sgemm_rowmajor_cpu(0, 1, T, T, hs, 1.0f, q, 3 * C, k, 3 * C, 0.0f, s, T);
        for (int g = 0; g < 3; g++)
            sgemm_rowmajor_cpu(0, 0, T, hs, T, 1.0f, s, T, v, 3 * C, 1.0f, out + g * C, 3 * C);
    }
}

/* Median milliseconds of reps calls of what (0 the attention forward, 1 the
 * backward, 2 the reference GEMMs) on the buffers b (see time_attention). */
static double median_ms(int what, float **b, int B, int T, int C, int NH, int reps) {
    double *ms = malloc(reps * sizeof *ms);
    CHECK(ms != NULL, "out of memory");
    for (int r = -2; r < reps; r++) {  /* two calls to warm up */
        double t0 = wall_seconds();
        if (what == 1) attention_backward(b[4], b[5], b[0], b[2], b[3], B, T, C, NH);
        else if (what == 2) reference_gemms(b, B, T, C, NH);
        else attention_forward(b[1], b[3], b[2], B, T, C, NH);
        if (r >= 0) ms[r] = 1e3 * (wall_seconds() - t0);
    }
    timings_sort(ms, reps);
    double m = ms[reps / 2];
    free(ms);
    return m;
}

/* --time attention: the forward pass (the kit's, which skips the masked half), the
 * backward pass (the student's) and the reference GEMMs at one shape, median
 * of reps calls each, and the multiply-adds one backward call asks of
 * sgemm_rowmajor_cpu. Returns those as a fraction of the 4 full GEMMs'. */
static double time_attention(int B, int T, int C, int NH, int reps) {
    size_t BTC = (size_t)B * T * C, ATT = (size_t)B * NH * T * T;
    float *b[6] = {randn(BTC, 0), zeros(BTC), randn(3 * BTC, 2), zeros(ATT), zeros(3 * BTC),
                   zeros(ATT)};
    attention_forward(b[1], b[3], b[2], B, T, C, NH);  /* P for the backward pass */
    unsigned long long madds0 = sgemm_madds_cpu();
    attention_backward(b[4], b[5], b[0], b[2], b[3], B, T, C, NH);
    double madds = (double)(sgemm_madds_cpu() - madds0);
    double fwd = median_ms(0, b, B, T, C, NH, reps), bwd = median_ms(1, b, B, T, C, NH, reps);
    double ref = median_ms(2, b, B, T, C, NH, reps);
    /* a full T x T GEMM with an hs-long inner dimension: 2 T^2 hs FLOPs per head */
    double gemm = 2.0 * B * NH * (double)T * T * (C / NH);
    int threads = omp_get_max_threads();
    printf("attention B=%d T=%d C=%d NH=%d, %d thread%s, median of %d calls:\n", B, T, C, NH,
           threads, threads == 1 ? "" : "s", reps);
    printf("  forward         %9.3f ms  (the kit's: 2 T x T GEMMs by row blocks, masked half\n"
           "                                skipped, and the softmax)\n", fwd);
    printf("  4 full GEMMs    %9.3f ms  (%.1f MFLOP, %.1f GFLOP/s: what a backward that\n"
           "                                computes every T x T entry multiplies)\n",
           ref, 4 * gemm / 1e6, 4 * gemm / 1e6 / ref);
    printf("  backward        %9.3f ms  (yours)\n", bwd);
    printf("  backward / 4 full GEMMs %.2f\n", bwd / ref);
    /* a full GEMM does gemm / 2 multiply-adds */
    double fraction = madds / (2.0 * gemm);
    printf("  backward's GEMM multiply-adds %.1f M = %.3f of the 4 full GEMMs'\n", madds / 1e6,
           fraction);
    for (int i = 0; i < 6; i++) mem_free(b[i]);
    return fraction;
}

typedef struct { const char *name; int (*run)(void); } LayerCheck;

/* The layers given in common/ first, the student's (layernorm, attention)
 * after them, then the whole model; then fused attention (lab 05's
 * extension, with a model of it) and a model with a mixture of experts. */
static const LayerCheck g_checks[] = {
    {"encoder", check_encoder}, {"matmul", check_matmul}, {"gelu", check_gelu},
    {"residual", check_residual}, {"crossentropy", check_crossentropy},
    {"layernorm", check_layernorm}, {"attention", check_attention}, {"model", check_model},
    {"fused", check_fused}, {"moe", check_moe_model}};
#define NUM_CHECKS (int)(sizeof g_checks / sizeof g_checks[0])

int main(int argc, char **argv) {
    program_set_name(argv[0]);
    kernels_set_cpu_backward(program_backward_kernels());
    static const struct option opts[] = {{"layer", required_argument, 0, 'l'},
                                         {"seed", required_argument, 0, 's'},
                                         {"time", required_argument, 0, 't'},
                                         {"shape", required_argument, 0, 'S'},
                                         {"reps", required_argument, 0, 'r'},
                                         {"require-skip", no_argument, 0, 'k'},
                                         {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    const char *layer = "all", *time_what = NULL;
    int shape[4] = {16, 128, 128, 4}, reps = 20, require_skip = 0;
    opterr = 0;
    int ch;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (ch) {
        case 'l': layer = optarg; break;
        case 's': g_seed = cli_u64("--seed", optarg); break;
        case 't': time_what = optarg; break;
        case 'S': {
            char extra;
            if (sscanf(optarg, "%d,%d,%d,%d%c", &shape[0], &shape[1], &shape[2], &shape[3],
                       &extra) != 4 || shape[0] < 1 || shape[1] < 1 || shape[2] < 1 ||
                shape[3] < 1 || shape[2] % shape[3] != 0 || shape[0] > 4096 || shape[1] > 8192 ||
                shape[2] > 8192)
                USER_ERROR("--shape wants B,T,C,NH (positive, C a multiple of NH), got '%s'",
                           optarg);
            break;
        }
        case 'r': reps = (int)cli_int("--reps", optarg, 1, 100000); break;
        case 'k': require_skip = 1; break;
        case 'h':
            printf("usage: %s [--layer NAME] [--seed N]\n"
                   "       %s --time attention [--shape B,T,C,NH] [--reps N] [--require-skip]\n"
                   "Finite-difference check of each layer's backward pass, and that it\n"
                   "accumulates into its gradients.\n"
                   , g_program_name, g_program_name);
            char names[512] = "NAME: all (default)";
            for (int i = 0; i < NUM_CHECKS; i++)
                snprintf(names + strlen(names), sizeof names - strlen(names), ", %s",
                         g_checks[i].name);
            cli_print_paragraph(names);
            printf("--time attention: median time of the attention forward and backward\n"
                   "passes (default shape 16,128,128,4, small's; 20 calls; one thread\n"
                   "unless OMP_NUM_THREADS is set), and the multiply-adds the backward pass\n"
                   "asks of sgemm_rowmajor_cpu. --require-skip (the extension's grading): exit\n"
                   "1 unless those are %.0f-%.0f%% of the 4 full T x T GEMMs' (the masked\n"
                   "half skipped, the T x T products still through the kit's GEMM).\n",
                   100 * SKIP_MIN, 100 * SKIP_MAX);
            printf("Exit status: 0 all pass, 1 a check failed, 2 bad usage, 3 a lab function\n"
                   "is not implemented.\n");
            return 0;
        default: cli_bad_option(argv[optind - 1], "see --help");
        }
    }
    if (optind < argc) USER_ERROR("unexpected argument '%s'; see --help", argv[optind]);
    if (time_what) {
        if (strcmp(time_what, "attention") != 0)
            USER_ERROR("--time knows only 'attention', got '%s'", time_what);
        if (!getenv("OMP_NUM_THREADS")) omp_set_num_threads(1);
        double fraction = time_attention(shape[0], shape[1], shape[2], shape[3], reps);
        if (!require_skip) return 0;
        if (fraction < SKIP_MIN || fraction > SKIP_MAX) {
            printf("gradcheck: FAILED: the backward's GEMMs do %.3f of the full multiply-adds, "
                   "not %.2f-%.2f: %s\n", fraction, SKIP_MIN, SKIP_MAX,
                   fraction > SKIP_MAX ? "the masked half is not skipped"
                                       : "the T x T products bypass sgemm_rowmajor_cpu");
            return 1;
        }
        printf("gradcheck: the backward skips the masked half\n");
        return 0;
    }
    if (require_skip) USER_ERROR("--require-skip goes with --time attention; see --help");
    int ran = 0, failures = 0;
    for (int i = 0; i < NUM_CHECKS; i++) {
        if (strcmp(layer, "all") != 0 && strcmp(layer, g_checks[i].name) != 0) continue;
        failures += g_checks[i].run();
        ran++;
    }
    if (!ran) USER_ERROR("unknown --layer '%s'; see --help", layer);
    printf("gradcheck: %s\n", failures ? "FAILED" : "all gradients match");
    return failures ? 1 : 0;
}
