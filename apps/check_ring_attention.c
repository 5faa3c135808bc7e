/* Lab 07's attention across a split sequence (ring_attention.h,
 * ulysses.h), run on the world's ranks as one CP group (2, 3, 4 ranks):
 *
 * 1. Equality: every rank draws the same global qkv and dout (the seed
 *    and counters do not depend on the rank), takes its positions
 *    (gpt_cp_position), and runs the lab's forward and backward; its rows
 *    of out and dqkv must be those of lab 00's attention of the whole
 *    sequence (attention_forward/backward, on every rank), and the lse rows
 *    the ring keeps the direct log-sum-exp. Ring under each placement
 *    (contiguous, zigzag, striped), Ulysses where the heads divide by cp.
 *    dqkv is pre-filled: a backward pass adds (model.h's contract).
 * 2. A finite-difference check of the same functions: L = sum of w . out
 *    over all ranks' rows (w random), dL/dqkv from the backward with
 *    dout = w, against (L(x + h) - L(x - h)) / 2h for entries of qkv owned
 *    by every rank. Only the owning rank perturbs its copy; every rank
 *    runs the forward (it is collective) and the loss is the group's sum.
 *
 * Built for each copy of lab 07 (build/labs/: the student's, `make check
 * LAB=07`), with lab 00 for the reference. Exits non-zero on any
 * failure, on every rank. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "backward_kernels.h"
#include "check.h"
#include "cli.h"
#include "comm.h"
#include "kernels.h"
#include "layout.h"
#include "ring_attention.h"
#include "rng.h"
#include "ulysses.h"
#include "unit.h"

static Comm *W;

static float *randn(size_t n, uint32_t tag) {
    float *x = malloc(n * sizeof(float));
    CHECK(x != NULL, "out of memory");
    for (size_t i = 0; i < n; i++) x[i] = rng_normal(11, RNG_STREAM_TEST, i, tag);
    return x;
}

static float *zeros(size_t n) {
    float *x = calloc(n ? n : 1, sizeof(float));
    CHECK(x != NULL, "out of memory");
    return x;
}

static const char *algo_name(CpAlgo a) { return gpt_cp_algo_name(a); }

/* The rank's layout: a one-block model of C wide and NH heads, split over
 * the world as the CP group */
static GPTLayout layout_for(int C, int NH, int Tg, CpAlgo algo) {
    GPTConfig cfg = {.vocab_size = 16, .ctx_len = Tg, .n_layer = 1, .n_head = NH, .n_embd = C};
    GPTLayout l = gpt_layout_make(&cfg, 1, 0);
    gpt_layout_set_context(&l, W->size, W->rank, algo);
    l.cp_group = W;
    return l;
}

/* rows[b, t] of local (B,Tl,w) = rows[b, position of t] of global (B,Tg,w) */
static void take_rows(const GPTLayout *l, float *local, const float *global, int B, int Tl,
                      int w) {
    const int Tg = Tl * l->cp;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < Tl; t++)
            memcpy(local + ((size_t)b * Tl + t) * w,
                   global + ((size_t)b * Tg + gpt_cp_position(l, t, Tl)) * w, w * sizeof(float));
}

/* The lab's attention on this rank's rows: out (B,Tl,C) and, for the
 * ring, lse (B,NH,Tl); keep is Ulysses' */
typedef struct {
    const GPTLayout *l;
    int B, Tl, Tg, C, NH;
    float *qkv, *out, *lse, *keep, *scratch;
} Run;

static Run run_make(const GPTLayout *l, int B, int Tl) {
    Run r = {.l = l, .B = B, .Tl = Tl, .Tg = Tl * l->cp, .C = l->attn_width, .NH = l->n_head};
    const int P = l->cp;
    r.qkv = zeros((size_t)B * Tl * 3 * r.C);
    r.out = zeros((size_t)B * Tl * r.C);
    r.lse = zeros((size_t)B * r.NH * Tl);
    if (l->cp_algo == CP_ULYSSES) {
        /* qkv of all positions of this rank's heads, then their probabilities */
        const size_t probs = (size_t)B * (r.NH / P) * r.Tg * r.Tg;
        r.keep = zeros((size_t)B * r.Tg * 3 * (r.C / P) + probs);
        r.scratch = zeros(probs);
    } else {
        r.scratch = zeros(1);
    }
    return r;
}

static void run_free(Run *r) {
    free(r->qkv);
    free(r->out);
    free(r->lse);
    free(r->keep);
    free(r->scratch);
}

static void forward(Run *r) {
    if (r->l->cp_algo == CP_ULYSSES)
        ulysses_attention_forward(r->l, r->out, r->keep, r->qkv, r->B, r->Tl);
    else
        ring_attention_forward(r->l, r->out, r->lse, r->qkv, r->B, r->Tl);
}

static void backward(Run *r, float *dqkv, const float *dout) {
    if (r->l->cp_algo == CP_ULYSSES)
        ulysses_attention_backward(r->l, dqkv, r->scratch, dout, r->qkv, r->out, r->keep, r->B,
                                   r->Tl);
    else
        ring_attention_backward(r->l, dqkv, r->scratch, dout, r->qkv, r->out, r->lse, r->B,
                                r->Tl);
}

/* max |a - b| with NaN and infinities infinitely wrong */
static double worse(double m, double a, double b) {
    const double e = fabs(a - b);
    return fmax(m, isfinite(e) ? e : INFINITY);
}

static double g_worst_out, g_worst_lse, g_worst_dqkv, g_worst_fd;

/* 1. the lab's attention on this rank's rows equals the whole sequence's */
static void check_equal(CpAlgo algo, int B, int Tg, int C, int NH) {
    const int P = W->size, Tl = Tg / P, hs = C / NH;
    const GPTLayout l = layout_for(C, NH, Tg, algo);
    float *qkv = randn((size_t)B * Tg * 3 * C, 1), *dout = randn((size_t)B * Tg * C, 2);
    float *out = zeros((size_t)B * Tg * C), *att = zeros((size_t)B * NH * Tg * Tg);
    float *datt = zeros((size_t)B * NH * Tg * Tg), *dqkv = zeros((size_t)B * Tg * 3 * C);
    attention_forward(out, att, qkv, B, Tg, C, NH);
    attention_backward(dqkv, datt, dout, qkv, att, B, Tg, C, NH);

    Run r = run_make(&l, B, Tl);
    float *ldout = zeros((size_t)B * Tl * C), *prefill = randn((size_t)B * Tl * 3 * C, 3 + W->rank);
    float *ldqkv = zeros((size_t)B * Tl * 3 * C);
    take_rows(&l, r.qkv, qkv, B, Tl, 3 * C);
    take_rows(&l, ldout, dout, B, Tl, C);
    memcpy(ldqkv, prefill, (size_t)B * Tl * 3 * C * sizeof(float));
    forward(&r);
    backward(&r, ldqkv, ldout);

    double out_err = 0, lse_err = 0, dqkv_err = 0, scale = 1;
    for (size_t i = 0; i < (size_t)B * Tg * 3 * C; i++) scale = fmax(scale, fabs(dqkv[i]));
    for (int b = 0; b < B; b++)
        for (int t = 0; t < Tl; t++) {
            const int g = gpt_cp_position(&l, t, Tl);
            for (int k = 0; k < C; k++)
                out_err = worse(out_err, r.out[((size_t)b * Tl + t) * C + k],
                                out[((size_t)b * Tg + g) * C + k]);
            for (int k = 0; k < 3 * C; k++) {
                const size_t i = ((size_t)b * Tl + t) * 3 * C + k;
                dqkv_err = worse(dqkv_err, (double)ldqkv[i] - prefill[i],
                                 dqkv[((size_t)b * Tg + g) * 3 * C + k]);
            }
            if (algo == CP_ULYSSES) continue;
            for (int h = 0; h < NH; h++) {
                /* log sum_{j <= g} e^(q_g . k_j / sqrt(hs)), in double */
                const float *q = qkv + ((size_t)b * Tg + g) * 3 * C + h * hs;
                double m = -INFINITY, sum = 0;
                for (int pass = 0; pass < 2; pass++)
                    for (int j = 0; j <= g; j++) {
                        const float *k = qkv + ((size_t)b * Tg + j) * 3 * C + C + h * hs;
                        double s = 0;
                        for (int d = 0; d < hs; d++) s += (double)q[d] * k[d];
                        s /= sqrt((double)hs);
                        if (pass == 0) m = fmax(m, s);
                        else sum += exp(s - m);
                    }
                lse_err = worse(lse_err, r.lse[((size_t)b * NH + h) * Tl + t], m + log(sum));
            }
        }
    g_worst_out = fmax(g_worst_out, out_err);
    g_worst_lse = fmax(g_worst_lse, lse_err);
    g_worst_dqkv = fmax(g_worst_dqkv, dqkv_err / scale);
    EXPECT(out_err < 1e-5, "rank %d of %d, %s, B %d T %d C %d NH %d: out differs from the whole "
           "sequence's attention by %g", W->rank, P, algo_name(algo), B, Tg, C, NH, out_err);
    EXPECT(lse_err < 1e-5, "rank %d of %d, %s, B %d T %d C %d NH %d: lse differs from the "
           "log-sum-exp of its causal row by %g", W->rank, P, algo_name(algo), B, Tg, C, NH,
           lse_err);
    EXPECT(dqkv_err < 1e-5 * scale, "rank %d of %d, %s, B %d T %d C %d NH %d: dqkv (what the "
           "backward added) differs from the whole sequence's by %g (max |dqkv| %g)", W->rank, P,
           algo_name(algo), B, Tg, C, NH, dqkv_err, scale);
    run_free(&r);
    free(ldout); free(prefill); free(ldqkv);
    free(qkv); free(dout); free(out); free(att); free(datt); free(dqkv);
}

/* L = sum over the group of w . out (its rows), in double */
static double group_loss(Run *r, const float *w) {
    forward(r);
    double L = 0;
    for (size_t i = 0; i < (size_t)r->B * r->Tl * r->C; i++) L += (double)w[i] * r->out[i];
    comm_allreduce(W, &L, &L, 1, COMM_DOUBLE, COMM_SUM);
    return L;
}

/* 2. central differences, entry by entry: h = 1e-2 on inputs of size ~1
 * keeps the h^2 Taylor term near 1e-4; L sums a few hundred float outputs
 * (rounding ~1e-6 in all), which divided by 2h is ~1e-4. Correct gradients
 * measure ~5e-4 relative to the largest; a wrong term, index or missing
 * block gives O(1). Then along random directions u of all of qkv at once
 * (every rank perturbs its own rows): (L(x + h u) - L(x - h u)) / 2h
 * against dL/dqkv . u, with h = 1e-3 since |u| ~ sqrt(n). */
#define H_STEP 1e-2
#define H_DIR 1e-3
#define FD_TOL 1e-2
#define DIRECTIONS 2
static void check_fd(CpAlgo algo, int B, int Tg, int C, int NH) {
    const int P = W->size, Tl = Tg / P;
    const GPTLayout l = layout_for(C, NH, Tg, algo);
    const size_t nl = (size_t)B * Tl * 3 * C;
    float *qkv = randn((size_t)B * Tg * 3 * C, 4), *w = randn((size_t)B * Tg * C, 5);
    Run r = run_make(&l, B, Tl);
    float *lw = zeros((size_t)B * Tl * C), *grad = zeros(nl), *x0 = zeros(nl), *u = zeros(nl);
    take_rows(&l, r.qkv, qkv, B, Tl, 3 * C);
    take_rows(&l, lw, w, B, Tl, C);
    memcpy(x0, r.qkv, nl * sizeof(float));
    forward(&r);
    backward(&r, grad, lw);
    /* local row of each global position on its owner, -1 elsewhere */
    int *local = malloc(Tg * sizeof(int));
    for (int g = 0; g < Tg; g++) local[g] = -1;
    for (int t = 0; t < Tl; t++) local[gpt_cp_position(&l, t, Tl)] = t;
    double err = 0, scale = 0;
    /* at every position (so on every rank), one entry of each of q, k
     * and v, the column moving with the position */
    for (int e = 0; e < 3 * Tg; e++) {
        const int g = e / 3, b = g % B, k = e % 3 * C + (g * 5 + e) % C, t = local[g];
        float *x = t >= 0 ? &r.qkv[((size_t)b * Tl + t) * 3 * C + k] : NULL;
        const float v = x ? *x : 0.0f;
        if (x) *x = (float)(v + H_STEP);
        const double lp = group_loss(&r, lw);
        if (x) *x = (float)(v - H_STEP);
        const double lm = group_loss(&r, lw);
        if (x) *x = v;
        const double numeric = (lp - lm) / (2 * H_STEP);
        double analytic = x ? grad[((size_t)b * Tl + t) * 3 * C + k] : 0.0;
        comm_allreduce(W, &analytic, &analytic, 1, COMM_DOUBLE, COMM_SUM);
        err = worse(err, analytic, numeric);
        scale = fmax(scale, fabs(numeric));
    }
    const double rel = err / (scale > 0 ? scale : 1);
    double dir_rel = 0;
    for (int d = 0; d < DIRECTIONS; d++) {
        float *ug = randn((size_t)B * Tg * 3 * C, 6 + d);
        take_rows(&l, u, ug, B, Tl, 3 * C);
        free(ug);
        double lp, lm, analytic = 0;
        for (size_t i = 0; i < nl; i++) r.qkv[i] = (float)(x0[i] + H_DIR * u[i]);
        lp = group_loss(&r, lw);
        for (size_t i = 0; i < nl; i++) r.qkv[i] = (float)(x0[i] - H_DIR * u[i]);
        lm = group_loss(&r, lw);
        memcpy(r.qkv, x0, nl * sizeof(float));
        for (size_t i = 0; i < nl; i++) analytic += (double)grad[i] * u[i];
        comm_allreduce(W, &analytic, &analytic, 1, COMM_DOUBLE, COMM_SUM);
        const double numeric = (lp - lm) / (2 * H_DIR);
        const double e = fabs(analytic - numeric) / fmax(fabs(numeric), 1e-3);
        dir_rel = fmax(dir_rel, isfinite(e) ? e : INFINITY);
    }
    g_worst_fd = fmax(g_worst_fd, fmax(rel, dir_rel));
    EXPECT(rel < FD_TOL, "rank %d of %d, %s, B %d T %d C %d NH %d: finite differences, q, k, v "
           "entries at every position: max |analytic - numeric| / max |numeric| = %g (tolerance %g)", W->rank,
           P, algo_name(algo), B, Tg, C, NH, rel, FD_TOL);
    EXPECT(dir_rel < FD_TOL, "rank %d of %d, %s, B %d T %d C %d NH %d: finite differences along "
           "random directions: |analytic - numeric| / |numeric| = %g (tolerance %g)", W->rank, P,
           algo_name(algo), B, Tg, C, NH, dir_rel, FD_TOL);
    run_free(&r);
    free(lw); free(grad); free(x0); free(u); free(local); free(qkv); free(w);
}

int main(int argc, char **argv) {
    program_set_name(argv[0]);
    cli_no_options(argc, argv,
                   "mpirun -np P check_ring_attention (P = 2, 3 or 4)",
                   "Checks lab 07's ring attention (contiguous, zigzag, striped) and Ulysses on P ranks against "
                   "lab 00's attention of the whole sequence, and by finite differences. Exit "
                   "status 0 when every check passes on every rank, 1 when one fails, 3 when a "
                   "function is not implemented.");
    kernels_set_cpu_backward(program_backward_kernels());
    W = comm_init(&argc, &argv);
    /* one thread per rank: the shapes are tiny, and more ranks than cores
     * with OpenMP's spinning threads on each would take minutes */
    omp_set_num_threads(1);
    const int P = W->size;
    const CpAlgo algos[] = {CP_RING, CP_ZIGZAG, CP_STRIPED, CP_ULYSSES};
    /* (B, T, C, NH): T a multiple of 2 cp (zigzag); Ulysses where cp
     * divides the heads (4: cp 2, 4; 6: cp 2, 3) */
    const int shapes[][4] = {{2, 8 * P, 16, 4}, {3, 6 * P, 12, 6}, {1, 2 * P, 8, 2}};
    for (int a = 0; a < 4; a++)
        for (int s = 0; s < 3; s++) {
            if (algos[a] == CP_ULYSSES && shapes[s][3] % P != 0) continue;
            check_equal(algos[a], shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3]);
        }
    for (int a = 0; a < 4; a++) {
        const int NH = algos[a] == CP_ULYSSES ? P : 2;
        check_fd(algos[a], 1, 4 * P, 4 * NH, NH);
    }
    /* every rank's failures count: the job fails if any rank failed */
    int failures = g_unit_failures, total = 0;
    comm_allreduce(W, &failures, &total, 1, COMM_INT32, COMM_SUM);
    double worst[4] = {g_worst_out, g_worst_lse, g_worst_dqkv, g_worst_fd};
    comm_allreduce(W, worst, worst, 4, COMM_DOUBLE, COMM_MAX);
    g_unit_failures = total;
    int rc = total ? 1 : 0;
    if (W->rank == 0) {
        printf("check_ring_attention: %d ranks: ring (contiguous, zigzag, striped) and Ulysses vs "
               "the whole sequence's attention, worst: out %.2g, lse %.2g, dqkv %.2g (relative); "
               "finite differences %.2g (relative)\n", P, worst[0], worst[1], worst[2], worst[3]);
        rc = unit_report("check_ring_attention");
    }
    comm_finalize();
    return rc;
}
