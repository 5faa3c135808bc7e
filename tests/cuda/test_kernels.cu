/* test_kernels (CUDA): every kernel of kernels_cuda.cu against its CPU twin.
 *
 *     build/cuda/tests/test_kernels          (one GPU; no MPI needed)
 *
 * Each case draws random inputs (a fixed-seed xorshift, values ~U(-1,1),
 * tokens and targets uniform in range), runs the _cpu kernel on host copies
 * and the _cuda kernel on device copies of the same bytes, and compares the
 * outputs element by element. Backward kernels get their gradient buffers
 * pre-filled with the same random values on both sides, so a kernel that
 * overwrites instead of accumulating (+=) fails. Shapes are small and odd on
 * purpose: N = B*T not a multiple of 32, T above and below a warp, C not a
 * multiple of the column tile, V above and below a block of threads.
 *
 * Tolerances, |gpu - cpu| <= atol + rtol |cpu| for every element:
 *   EXACT   rtol 0,    atol 0     the same IEEE operations in the same order
 *                                 (one add or multiply per element, the
 *                                 cross-entropy gradient, dwpe's in-order
 *                                 sums): any difference is a bug.
 *   ELEM    rtol 1e-5, atol 1e-6  per-element math (math_shared.h): nvcc and
 *                                 gcc may fuse a*b+c into an FMA at different
 *                                 places, a few ulps.
 *   ROW     rtol 1e-4, atol 1e-5  sums over a row or column (<= 64 terms
 *                                 here) taken in another order: layernorm,
 *                                 the embedding gradients (atomics), the mean
 *                                 loss. Expected ~1e-6.
 *   GEMM    rtol 1e-4, atol 1e-4  cuBLAS and OpenBLAS sum up to K = 300
 *                                 products in different orders; an entry
 *                                 near 0 can be the cancellation of partial
 *                                 sums of size ~sqrt(K)/3 ~ 6, whose rounding
 *                                 is ~1e-5 absolute.
 *   SOFTMAX rtol 1e-3, atol 1e-5  attention and cross-entropy chain expf
 *                                 (CUDA's is within 2 ulp, glibc's 1), row
 *                                 reductions and up to three GEMMs: ~1e-6
 *                                 relative expected, the margin is wide.
 *   TF32    rtol 1e-2, atol 5e-2  GEMMs with TF32 on: inputs keep 10 mantissa
 *                                 bits, ~1e-3 relative per product.
 * sum_squares is compared with rtol 1e-10 (double sums of up to 3e6 exact
 * terms in another order). A wrong index, transpose, scale, or overwrite
 * instead of accumulate gives errors of order 0.1 to 1, far outside all of
 * these.
 *
 * Exit status: 0 all close, 1 a difference, 77 no CUDA device (skipped).
 */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "backward_kernels.h"  /* lab 00's CPU backward passes, the reference */
#include "cuda_check.h"
#include "kernels_backend.h"
#include "math_shared.h"
#include "gpu_present.h"
#include "precision.h"
#include "unit.h"


typedef struct {
    double rtol, atol;
} Tol;

static const Tol TOL_EXACT = {0.0, 0.0};
static const Tol TOL_ELEM = {1e-5, 1e-6};
static const Tol TOL_ROW = {1e-4, 1e-5};
static const Tol TOL_GEMM = {1e-4, 1e-4};
static const Tol TOL_SOFTMAX = {1e-3, 1e-5};
static const Tol TOL_TF32 = {1e-2, 5e-2};
static const Tol TOL_SUMSQ = {1e-10, 0.0};

static char g_case[96];   /* the shape under test, for failure messages */

/* ---- random inputs: xorshift64*, fixed seed ---- */

static uint64_t g_rng_state = 0x2545F4914F6CDD1Dull;

static uint32_t rng_u32(void) {
    g_rng_state ^= g_rng_state >> 12;
    g_rng_state ^= g_rng_state << 25;
    g_rng_state ^= g_rng_state >> 27;
    return (uint32_t)((g_rng_state * 0x2545F4914F6CDD1Dull) >> 32);
}

/* U(-1, 1) on a grid of 2^-23 */
static float rng_uniform(void) { return (float)(rng_u32() >> 8) / 8388608.0f - 1.0f; }

static int rng_int(int n) { return (int)(rng_u32() % (uint32_t)n); }

/* ---- buffers ---- */

static void *host_alloc(size_t bytes) {
    void *p = malloc(bytes + 1);   /* + 1: a real pointer for n = 0 too */
    CHECK(p, "out of memory");
    return p;
}

static void *device_alloc(size_t bytes) {
    void *d;
    CUDA_CHECK(cudaMalloc(&d, bytes + 1));
    return d;
}

/* The same floats on both sides: h for the CPU kernel, d for the GPU one. */
typedef struct {
    float *h, *d;
    size_t n;
} Pair;

static Pair pair_of(const float *values, size_t n) {
    Pair p = {(float *)host_alloc(n * sizeof(float)), (float *)device_alloc(n * sizeof(float)),
              n};
    memcpy(p.h, values, n * sizeof(float));
    CUDA_CHECK(cudaMemcpy(p.d, values, n * sizeof(float), cudaMemcpyHostToDevice));
    return p;
}

/* elements ~U(-scale, scale) */
static Pair pair_random(size_t n, float scale) {
    float *v = (float *)host_alloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) v[i] = scale * rng_uniform();
    Pair p = pair_of(v, n);
    free(v);
    return p;
}

static void pair_free(Pair *p) {
    free(p->h);
    CUDA_CHECK(cudaFree(p->d));
}

/* Random ints in [0, range) on both sides. */
typedef struct {
    int *h, *d;
} IntPair;

static IntPair int_pair_random(size_t n, int range) {
    IntPair p = {(int *)host_alloc(n * sizeof(int)), (int *)device_alloc(n * sizeof(int))};
    for (size_t i = 0; i < n; i++) p.h[i] = rng_int(range);
    CUDA_CHECK(cudaMemcpy(p.d, p.h, n * sizeof(int), cudaMemcpyHostToDevice));
    return p;
}

static void int_pair_free(IntPair *p) {
    free(p->h);
    CUDA_CHECK(cudaFree(p->d));
}

/* ---- comparisons ---- */

/* n floats of the GPU at dev against want (host); one EXPECT per buffer,
 * naming the worst element when some are out of tolerance. */
static void expect_close(const char *what, const float *dev, const float *want, size_t n,
                         Tol tol) {
    float *got = (float *)host_alloc(n * sizeof(float));
    CUDA_CHECK(cudaMemcpy(got, dev, n * sizeof(float), cudaMemcpyDeviceToHost));
    size_t bad = 0, worst = 0;
    double worst_excess = -1.0;
    for (size_t i = 0; i < n; i++) {
        double err = fabs((double)got[i] - (double)want[i]);
        double limit = tol.atol + tol.rtol * fabs((double)want[i]);
        if (!(err <= limit)) {   /* NaN counts as bad */
            double excess = isnan(err) ? INFINITY : err - limit;
            if (bad++ == 0 || excess > worst_excess) {
                worst_excess = excess;
                worst = i;
            }
        }
    }
    EXPECT(bad == 0, "%s [%s]: %zu of %zu elements off; worst [%zu] gpu %.9g cpu %.9g "
           "(tol %g + %g |cpu|)", what, g_case, bad, n, worst, bad ? got[worst] : 0.0f,
           bad ? want[worst] : 0.0f, tol.atol, tol.rtol);
    free(got);
}

static void expect_pair(const char *what, const Pair *p, Tol tol) {
    expect_close(what, p->d, p->h, p->n, tol);
}

static void expect_scalar(const char *what, double got, double want, Tol tol) {
    double err = fabs(got - want), limit = tol.atol + tol.rtol * fabs(want);
    EXPECT(err <= limit, "%s [%s]: gpu %.17g cpu %.17g (tol %g + %g |cpu|)", what, g_case, got,
           want, tol.atol, tol.rtol);
}

/* ---- the kernels, one shape at a time ---- */

typedef struct {
    int B, T, C, NH, V;
} Shape;

static void check_encoder(const Shape *s) {
    int B = s->B, T = s->T, C = s->C, V = s->V;
    size_t btc = (size_t)B * T * C;
    IntPair tokens = int_pair_random((size_t)B * T, V);
    /* a repeated token, so two positions add into one row of dwte */
    tokens.h[B * T - 1] = tokens.h[0];
    CUDA_CHECK(cudaMemcpy(tokens.d, tokens.h, (size_t)B * T * sizeof(int),
                          cudaMemcpyHostToDevice));
    Pair wte = pair_random((size_t)V * C, 1.0f), wpe = pair_random((size_t)T * C, 1.0f);
    Pair out = pair_random(btc, 1.0f);
    encoder_forward_cpu(out.h, tokens.h, wte.h, wpe.h, B, T, C);
    encoder_forward_cuda(out.d, tokens.d, wte.d, wpe.d, B, T, C);
    expect_pair("encoder_forward out", &out, TOL_EXACT);

    Pair dout = pair_random(btc, 1.0f);
    Pair dwte = pair_random((size_t)V * C, 1.0f), dwpe = pair_random((size_t)T * C, 1.0f);
    encoder_backward_cpu(dwte.h, dwpe.h, dout.h, tokens.h, B, T, C);
    encoder_backward_cuda(dwte.d, dwpe.d, dout.d, tokens.d, B, T, C);
    expect_pair("encoder_backward dwte", &dwte, TOL_ROW);   /* atomics: any order */
    expect_pair("encoder_backward dwpe", &dwpe, TOL_EXACT); /* the CPU's order */

    Pair *all[] = {&wte, &wpe, &out, &dout, &dwte, &dwpe};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) pair_free(all[i]);
    int_pair_free(&tokens);
}

static void check_layernorm(const Shape *s) {
    int N = s->B * s->T, C = s->C;
    size_t nc = (size_t)N * C;
    Pair inp = pair_random(nc, 2.0f), w = pair_random((size_t)C, 1.0f);
    Pair b = pair_random((size_t)C, 1.0f), out = pair_random(nc, 1.0f);
    Pair mean = pair_random((size_t)N, 1.0f), rstd = pair_random((size_t)N, 1.0f);
    layernorm_forward_cpu(out.h, mean.h, rstd.h, inp.h, w.h, b.h, N, C);
    layernorm_forward_cuda(out.d, mean.d, rstd.d, inp.d, w.d, b.d, N, C);
    expect_pair("layernorm_forward out", &out, TOL_ROW);
    expect_pair("layernorm_forward mean", &mean, TOL_ROW);
    expect_pair("layernorm_forward rstd", &rstd, TOL_ROW);

    /* the backward pass reads the CPU's mean and rstd on both sides */
    Pair cpu_mean = pair_of(mean.h, (size_t)N), cpu_rstd = pair_of(rstd.h, (size_t)N);
    Pair dout = pair_random(nc, 1.0f), dinp = pair_random(nc, 1.0f);
    Pair dw = pair_random((size_t)C, 1.0f), db = pair_random((size_t)C, 1.0f);
    layernorm_backward_cpu(dinp.h, dw.h, db.h, dout.h, inp.h, w.h, cpu_mean.h, cpu_rstd.h, N, C);
    layernorm_backward_cuda(dinp.d, dw.d, db.d, dout.d, inp.d, w.d, cpu_mean.d, cpu_rstd.d, N,
                            C);
    expect_pair("layernorm_backward dinp", &dinp, TOL_ROW);
    expect_pair("layernorm_backward dw", &dw, TOL_ROW);
    expect_pair("layernorm_backward db", &db, TOL_ROW);

    Pair *all[] = {&inp, &w, &b, &out, &mean, &rstd, &cpu_mean, &cpu_rstd,
                   &dout, &dinp, &dw, &db};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) pair_free(all[i]);
}

/* (N, C) -> (N, V): odd output widths, with and without bias, in every
 * precision (the 2-byte ones: half_gemm.h against cuBLAS's GemmEx, both
 * exact products of the rounded inputs summed in fp32) */
static void check_matmul(const Shape *s) {
    int N = s->B * s->T, IC = s->C, OC = s->V;
    char what[96];
#define LABEL(text) (snprintf(what, sizeof what, "%s, %s", (text), precision_name((Precision)p)), what)
    for (int p = 0; p < PRECISION_NUM; p++)
    for (int with_bias = 0; with_bias <= 1; with_bias++) {
        const char *fwd = with_bias ? "matmul_forward (bias) out" : "matmul_forward out";
        Pair inp = pair_random((size_t)N * IC, 1.0f), w = pair_random((size_t)OC * IC, 1.0f);
        Pair bias = pair_random((size_t)OC, 1.0f), out = pair_random((size_t)N * OC, 1.0f);
        matmul_forward_cpu(out.h, inp.h, w.h, with_bias ? bias.h : NULL, N, IC, OC, p);
        matmul_forward_cuda(out.d, inp.d, w.d, with_bias ? bias.d : NULL, N, IC, OC, p);
        expect_pair(LABEL(fwd), &out, TOL_GEMM);

        Pair dout = pair_random((size_t)N * OC, 1.0f), dinp = pair_random((size_t)N * IC, 1.0f);
        Pair dw = pair_random((size_t)OC * IC, 1.0f), dbias = pair_random((size_t)OC, 1.0f);
        matmul_backward_cpu(dinp.h, dw.h, with_bias ? dbias.h : NULL, dout.h, inp.h, w.h, N,
                            IC, OC, p);
        matmul_backward_cuda(dinp.d, dw.d, with_bias ? dbias.d : NULL, dout.d, inp.d, w.d, N,
                             IC, OC, p);
        expect_pair(LABEL(with_bias ? "matmul_backward (bias) dinp" : "matmul_backward dinp"),
                    &dinp, TOL_GEMM);
        expect_pair(LABEL(with_bias ? "matmul_backward (bias) dw" : "matmul_backward dw"), &dw,
                    TOL_GEMM);
        /* without a bias dbias must stay as it was: EXACT against the untouched CPU copy */
        expect_pair(LABEL(with_bias ? "matmul_backward dbias" : "matmul_backward dbias untouched"),
                    &dbias, with_bias ? TOL_GEMM : TOL_EXACT);

        Pair *all[] = {&inp, &w, &bias, &out, &dout, &dinp, &dw, &dbias};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) pair_free(all[i]);
    }
#undef LABEL
}

static void check_attention(const Shape *s) {
    int B = s->B, T = s->T, C = s->C, NH = s->NH;
    size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C;
    size_t natt = (size_t)B * NH * T * T;
    Pair qkv = pair_random(nqkv, 1.0f), out = pair_random(nout, 1.0f);
    Pair att = pair_random(natt, 1.0f);   /* garbage: the forward pass overwrites all of it */
    attention_forward_cpu(out.h, att.h, qkv.h, B, T, C, NH);
    attention_forward_cuda(out.d, att.d, qkv.d, B, T, C, NH);
    expect_pair("attention_forward att", &att, TOL_SOFTMAX);
    expect_pair("attention_forward out", &out, TOL_SOFTMAX);
    /* selective recomputation (lab 05): P alone, the same bits as above */
    Pair again = pair_random(natt, 1.0f);
    attention_probs_forward_cpu(again.h, qkv.h, B, T, C, NH);
    attention_probs_forward_cuda(again.d, qkv.d, B, T, C, NH);
    expect_pair("attention_probs_forward att", &again, TOL_SOFTMAX);
    EXPECT(memcmp(again.h, att.h, natt * sizeof(float)) == 0,
           "attention_probs_forward [%s]: the CPU's P differs from attention_forward's", g_case);
    {
        float *pa = (float *)host_alloc(natt * sizeof(float));
        float *pb = (float *)host_alloc(natt * sizeof(float));
        CUDA_CHECK(cudaMemcpy(pa, again.d, natt * sizeof(float), cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(pb, att.d, natt * sizeof(float), cudaMemcpyDeviceToHost));
        EXPECT(memcmp(pa, pb, natt * sizeof(float)) == 0,
               "attention_probs_forward [%s]: the GPU's P differs from attention_forward's", g_case);
        free(pa), free(pb);
    }
    pair_free(&again);

    /* the causal mask is exact zeros */
    float *p = (float *)host_alloc(natt * sizeof(float));
    CUDA_CHECK(cudaMemcpy(p, att.d, natt * sizeof(float), cudaMemcpyDeviceToHost));
    size_t nonzero = 0;
    for (size_t r = 0; r < (size_t)B * NH * T; r++)
        for (int j = (int)(r % T) + 1; j < T; j++) nonzero += p[r * T + j] != 0.0f;
    EXPECT(nonzero == 0, "attention_forward [%s]: %zu nonzero entries above the diagonal",
           g_case, nonzero);
    free(p);

    /* the backward pass reads the CPU's P on both sides; datt is scratch */
    Pair cpu_att = pair_of(att.h, natt);
    Pair dout = pair_random(nout, 1.0f), dqkv = pair_random(nqkv, 1.0f);
    Pair datt = pair_random(natt, 1.0f);
    attention_backward_cpu(dqkv.h, datt.h, dout.h, qkv.h, cpu_att.h, B, T, C, NH);
    attention_backward_cuda(dqkv.d, datt.d, dout.d, qkv.d, cpu_att.d, B, T, C, NH);
    expect_pair("attention_backward dqkv", &dqkv, TOL_SOFTMAX);

    Pair *all[] = {&qkv, &out, &att, &cpu_att, &dout, &dqkv, &datt};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) pair_free(all[i]);
}

/* Ring attention's blocks (lab 07): T split into two halves of n = T / 2,
 * each mask on its own block, merged into a running out and lse, then the
 * backward of each block into dqkv and dkv; GPU against CPU throughout. */
static void check_attention_blocks(const Shape *s) {
    int B = s->B, T = s->T - s->T % 2, C = s->C, NH = s->NH, n = T / 2;
    if (n == 0) return;
    size_t nqkv = (size_t)B * T * 3 * C, nkv = (size_t)B * T * 2 * C, nout = (size_t)B * T * C;
    size_t nlse = (size_t)B * NH * T;
    Pair qkv = pair_random(nqkv, 1.0f), kv = pair_random(nkv, 1.0f);
    Pair out = pair_random(nout, 1.0f), out_b = pair_random(nout, 1.0f);
    Pair lse = pair_random(nlse, 1.0f), lse_b = pair_random(nlse, 1.0f);
    set_zero_cpu(out.h, nout);
    set_zero_cuda(out.d, nout);
    fill_value_cpu(lse.h, -INFINITY, nlse);
    fill_value_cuda(lse.d, -INFINITY, nlse);
    const int masks[3] = {ATTN_CAUSAL, ATTN_FULL, ATTN_CAUSAL_STRICT};
    const int q0s[3] = {0, n, n}, k0s[3] = {0, 0, n};
    for (int b = 0; b < 3; b++) {
        attention_block_forward_cpu(out_b.h, lse_b.h, qkv.h, kv.h, B, T, C, NH, q0s[b], k0s[b], n,
                                    masks[b]);
        attention_block_forward_cuda(out_b.d, lse_b.d, qkv.d, kv.d, B, T, C, NH, q0s[b], k0s[b],
                                     n, masks[b]);
        attention_merge_cpu(out.h, lse.h, out_b.h, lse_b.h, B, T, C, NH, q0s[b], n);
        attention_merge_cuda(out.d, lse.d, out_b.d, lse_b.d, B, T, C, NH, q0s[b], n);
    }
    expect_pair("attention_block_forward + merge out", &out, TOL_SOFTMAX);
    expect_pair("attention_block_forward + merge lse", &lse, TOL_SOFTMAX);
    /* the backward pass reads the CPU's out and lse on both sides */
    Pair cpu_out = pair_of(out.h, nout), cpu_lse = pair_of(lse.h, nlse);
    Pair dout = pair_random(nout, 1.0f), D = pair_random(nlse, 1.0f);
    attention_row_dot_cpu(D.h, dout.h, cpu_out.h, B, T, C, NH);
    attention_row_dot_cuda(D.d, dout.d, cpu_out.d, B, T, C, NH);
    expect_pair("attention_row_dot", &D, TOL_ROW);
    Pair cpu_D = pair_of(D.h, nlse), dqkv = pair_random(nqkv, 1.0f), dkv = pair_random(nkv, 1.0f);
    for (int b = 0; b < 3; b++) {
        attention_block_backward_cpu(dqkv.h, dkv.h, dout.h, qkv.h, kv.h, cpu_lse.h, cpu_D.h, B, T,
                                     C, NH, q0s[b], k0s[b], n, masks[b]);
        attention_block_backward_cuda(dqkv.d, dkv.d, dout.d, qkv.d, kv.d, cpu_lse.d, cpu_D.d, B,
                                      T, C, NH, q0s[b], k0s[b], n, masks[b]);
    }
    expect_pair("attention_block_backward dqkv", &dqkv, TOL_SOFTMAX);
    expect_pair("attention_block_backward dkv", &dkv, TOL_SOFTMAX);
    /* k and v out of qkv, and added back */
    copy_strided_cpu(kv.h, 2 * C, qkv.h + C, 3 * C, B * T, 2 * C, 0);
    copy_strided_cuda(kv.d, 2 * C, qkv.d + C, 3 * C, B * T, 2 * C, 0);
    expect_pair("copy_strided", &kv, TOL_EXACT);
    copy_strided_cpu(dqkv.h + C, 3 * C, kv.h, 2 * C, B * T, 2 * C, 1);
    copy_strided_cuda(dqkv.d + C, 3 * C, kv.d, 2 * C, B * T, 2 * C, 1);
    expect_pair("copy_strided accumulate", &dqkv, TOL_SOFTMAX);
    Pair *all[] = {&qkv, &kv, &out, &out_b, &lse, &lse_b, &cpu_out, &cpu_lse, &dout, &D,
                   &cpu_D, &dqkv, &dkv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) pair_free(all[i]);
}

/* Fused attention (kernels.h): the GPU's tiles against the CPU's
 * materialized output and its lse (one causal block over the whole
 * sequence, attention_block_forward_cpu), then the GPU's backward against
 * the library's CPU one from the CPU's out and lse. */
static void check_attention_fused(const Shape *s) {
    int B = s->B, T = s->T, C = s->C, NH = s->NH;
    size_t nqkv = (size_t)B * T * 3 * C, nkv = (size_t)B * T * 2 * C, nout = (size_t)B * T * C;
    size_t nlse = (size_t)B * NH * T;
    Pair qkv = pair_random(nqkv, 1.0f), out = pair_random(nout, 1.0f);
    Pair lse = pair_random(nlse, 1.0f), kv = pair_random(nkv, 1.0f);
    float *att = (float *)host_alloc((size_t)B * NH * T * T * sizeof(float));
    attention_forward_cpu(out.h, att, qkv.h, B, T, C, NH);
    copy_strided_cpu(kv.h, 2 * C, qkv.h + C, 3 * C, B * T, 2 * C, 0);
    float *out_b = (float *)host_alloc(nout * sizeof(float));
    attention_block_forward_cpu(out_b, lse.h, qkv.h, kv.h, B, T, C, NH, 0, 0, T, ATTN_CAUSAL);
    attention_fused_forward_cuda(out.d, lse.d, qkv.d, B, T, C, NH);
    expect_pair("attention_fused_forward out", &out, TOL_SOFTMAX);
    expect_pair("attention_fused_forward lse", &lse, TOL_SOFTMAX);
    Pair cpu_out = pair_of(out.h, nout), cpu_lse = pair_of(lse.h, nlse);
    Pair dout = pair_random(nout, 1.0f), D = pair_random(nlse, 1.0f);
    Pair dqkv = pair_random(nqkv, 1.0f);
    attention_fused_backward_cpu(dqkv.h, D.h, dout.h, qkv.h, cpu_out.h, cpu_lse.h, B, T, C, NH);
    attention_fused_backward_cuda(dqkv.d, D.d, dout.d, qkv.d, cpu_out.d, cpu_lse.d, B, T, C, NH);
    expect_pair("attention_fused_backward D", &D, TOL_ROW);
    expect_pair("attention_fused_backward dqkv", &dqkv, TOL_SOFTMAX);
    free(att), free(out_b);
    Pair *all[] = {&qkv, &out, &lse, &kv, &cpu_out, &cpu_lse, &dout, &D, &dqkv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) pair_free(all[i]);
}

static void check_crossentropy(const Shape *s) {
    int N = s->B * s->T, V = s->V;
    size_t nv = (size_t)N * V;
    IntPair targets = int_pair_random((size_t)N, V);
    Pair logits = pair_random(nv, 3.0f);   /* U(-3, 3): far from uniform probabilities */
    Pair probs = pair_random(nv, 1.0f), losses = pair_random((size_t)N, 1.0f);
    float mean_cpu = crossentropy_forward_cpu(losses.h, probs.h, logits.h, targets.h, N, V);
    float mean_gpu = crossentropy_forward_cuda(losses.d, probs.d, logits.d, targets.d, N, V);
    expect_pair("crossentropy_forward probs", &probs, TOL_SOFTMAX);
    expect_pair("crossentropy_forward losses", &losses, TOL_SOFTMAX);
    expect_scalar("crossentropy_forward mean loss", mean_gpu, mean_cpu, TOL_ROW);

    /* in place: probs written over the logits */
    float mean_inplace = crossentropy_forward_cuda(losses.d, logits.d, logits.d, targets.d, N, V);
    expect_close("crossentropy_forward in place probs", logits.d, probs.h, nv, TOL_SOFTMAX);
    expect_close("crossentropy_forward in place losses", losses.d, losses.h, (size_t)N,
                 TOL_SOFTMAX);
    expect_scalar("crossentropy_forward in place mean loss", mean_inplace, mean_cpu, TOL_ROW);

    /* backward from the CPU's probs on both sides */
    Pair d = pair_of(probs.h, nv);
    crossentropy_backward_cpu(d.h, targets.h, 1.0f / N, N, V);
    crossentropy_backward_cuda(d.d, targets.d, 1.0f / N, N, V);
    expect_pair("crossentropy_backward dlogits", &d, TOL_EXACT);

    Pair *all[] = {&logits, &probs, &losses, &d};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) pair_free(all[i]);
    int_pair_free(&targets);
}

/* The vocabulary-parallel pieces of lab 04 on one rank's shard: rows
 * [first, first + rows) of the vocabulary, of which `valid` are real. */
static void check_vocab_parallel(const Shape *s) {
    int B = s->B, T = s->T, C = s->C, N = B * T, V = s->V;
    int rows = (V + 1) / 2, first = rows, valid = V - first;  /* rank 1 of 2, padded when V is odd */
    size_t nr = (size_t)N * rows, nc = (size_t)N * C;
    IntPair tokens = int_pair_random((size_t)N, V);
    Pair wte = pair_random((size_t)rows * C, 1.0f), out = pair_random(nc, 1.0f);
    vocab_embedding_forward_cpu(out.h, tokens.h, wte.h, first, rows, N, C);
    vocab_embedding_forward_cuda(out.d, tokens.d, wte.d, first, rows, N, C);
    expect_pair("vocab_embedding_forward out", &out, TOL_EXACT);
    Pair wpe = pair_random((size_t)T * C, 1.0f);
    position_forward_cpu(out.h, wpe.h, 0, N, T, C);
    position_forward_cuda(out.d, wpe.d, 0, N, T, C);
    /* a sequence-parallel rank's rows (lab 05): the last third, from mid-sequence */
    position_forward_cpu(out.h + (size_t)(N - N / 3) * C, wpe.h, N - N / 3, N / 3, T, C);
    position_forward_cuda(out.d + (size_t)(N - N / 3) * C, wpe.d, N - N / 3, N / 3, T, C);
    expect_pair("position_forward out", &out, TOL_EXACT);
    Pair dout = pair_random(nc, 1.0f), dwte = pair_random((size_t)rows * C, 1.0f);
    Pair dwpe = pair_random((size_t)T * C, 1.0f);
    vocab_embedding_backward_cpu(dwte.h, dout.h, tokens.h, first, rows, N, C);
    vocab_embedding_backward_cuda(dwte.d, dout.d, tokens.d, first, rows, N, C);
    expect_pair("vocab_embedding_backward dwte", &dwte, TOL_ROW);  /* atomics */
    position_backward_cpu(dwpe.h, dout.h, B, T, C);
    position_backward_cuda(dwpe.d, dout.d, B, T, C);
    expect_pair("position_backward dwpe", &dwpe, TOL_EXACT);
    Pair bias = pair_random((size_t)C, 1.0f);
    bias_forward_cpu(out.h, bias.h, N, C);
    bias_forward_cuda(out.d, bias.d, N, C);
    expect_pair("bias_forward out", &out, TOL_EXACT);

    IntPair targets = int_pair_random((size_t)N, V);
    Pair logits = pair_random(nr, 3.0f), maxes = pair_random((size_t)N, 1.0f);
    Pair tl = pair_random((size_t)N, 1.0f), sums = pair_random((size_t)N, 1.0f);
    Pair losses = pair_random((size_t)N, 1.0f);
    vocab_logits_max_cpu(maxes.h, logits.h, N, rows, valid);
    vocab_logits_max_cuda(maxes.d, logits.d, N, rows, valid);
    expect_pair("vocab_logits_max", &maxes, TOL_EXACT);
    vocab_target_logit_cpu(tl.h, logits.h, targets.h, first, N, rows);
    vocab_target_logit_cuda(tl.d, logits.d, targets.d, first, N, rows);
    expect_pair("vocab_target_logit", &tl, TOL_EXACT);
    vocab_softmax_exp_cpu(logits.h, sums.h, logits.h, maxes.h, N, rows, valid);
    vocab_softmax_exp_cuda(logits.d, sums.d, logits.d, maxes.d, N, rows, valid);
    expect_pair("vocab_softmax_exp probs", &logits, TOL_SOFTMAX);
    expect_pair("vocab_softmax_exp sums", &sums, TOL_ROW);
    /* finish and backward from the CPU's values on both sides */
    Pair p = pair_of(logits.h, nr), sm = pair_of(sums.h, (size_t)N);
    float mean_cpu = vocab_crossentropy_finish_cpu(losses.h, p.h, sm.h, maxes.h, tl.h, N, rows);
    float mean_gpu = vocab_crossentropy_finish_cuda(losses.d, p.d, sm.d, maxes.d, tl.d, N, rows);
    expect_pair("vocab_crossentropy_finish probs", &p, TOL_ELEM);
    expect_pair("vocab_crossentropy_finish losses", &losses, TOL_ROW);
    expect_scalar("vocab_crossentropy_finish mean", mean_gpu, mean_cpu, TOL_ROW);
    Pair d = pair_of(p.h, nr);
    vocab_crossentropy_backward_cpu(d.h, targets.h, 1.0f / N, first, N, rows);
    vocab_crossentropy_backward_cuda(d.d, targets.d, 1.0f / N, first, N, rows);
    expect_pair("vocab_crossentropy_backward dlogits", &d, TOL_EXACT);

    Pair *all[] = {&wte, &out, &wpe, &dout, &dwte, &dwpe, &bias, &logits, &maxes, &tl, &sums,
                   &losses, &p, &sm, &d};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) pair_free(all[i]);
    int_pair_free(&tokens);
    int_pair_free(&targets);
}

/* The mixture of experts' row movers and router softmax (moe.h) on N = B T
 * tokens of C channels, E = 5 experts, k = 2 slots a token: n = 2N
 * assignment rows gathered by a random index list, each token's slots
 * random in [-1, n) (-1: dropped). gather_rows' product is one multiply
 * (EXACT); gather_sum_rows adds in the CPU's slot order, where nvcc may
 * contract a multiply-add (ELEM). */
static void check_moe(const Shape *s) {
    const int N = s->B * s->T, C = s->C, E = 5, k = 2, n = 2 * N;
    size_t nc = (size_t)N * C, ac = (size_t)n * C;
    IntPair idx = int_pair_random((size_t)n, N), slots = int_pair_random((size_t)N * k, n + 1);
    for (int i = 0; i < N * k; i++) slots.h[i] -= 1;
    CUDA_CHECK(cudaMemcpy(slots.d, slots.h, (size_t)N * k * sizeof(int), cudaMemcpyHostToDevice));
    Pair x = pair_random(nc, 1.0f), rows = pair_random(ac, 1.0f), w = pair_random((size_t)n, 1.0f);
    gather_rows_cpu(rows.h, x.h, idx.h, NULL, n, C);
    gather_rows_cuda(rows.d, x.d, idx.d, NULL, n, C);
    expect_pair("gather_rows", &rows, TOL_EXACT);
    Pair wrows = pair_random(ac, 1.0f);
    gather_rows_cpu(wrows.h, x.h, idx.h, w.h, n, C);
    gather_rows_cuda(wrows.d, x.d, idx.d, w.d, n, C);
    expect_pair("gather_rows weighted", &wrows, TOL_EXACT);
    Pair y = pair_random(nc, 1.0f);
    gather_sum_rows_cpu(y.h, wrows.h, slots.h, w.h, N, k, C, 0);
    gather_sum_rows_cuda(y.d, wrows.d, slots.d, w.d, N, k, C, 0);
    expect_pair("gather_sum_rows weighted", &y, TOL_ELEM);
    gather_sum_rows_cpu(y.h, rows.h, slots.h, NULL, N, k, C, 1);
    gather_sum_rows_cuda(y.d, rows.d, slots.d, NULL, N, k, C, 1);
    expect_pair("gather_sum_rows accumulate", &y, TOL_ELEM);
    Pair dot = pair_random((size_t)n, 1.0f);
    gather_row_dot_cpu(dot.h, rows.h, x.h, idx.h, n, C);
    gather_row_dot_cuda(dot.d, rows.d, x.d, idx.d, n, C);
    expect_pair("gather_row_dot", &dot, TOL_ROW);

    size_t ne = (size_t)N * E;
    Pair logits = pair_random(ne, 3.0f), probs = pair_random(ne, 1.0f);
    softmax_rows_forward_cpu(probs.h, logits.h, N, E);
    softmax_rows_forward_cuda(probs.d, logits.d, N, E);
    expect_pair("softmax_rows_forward", &probs, TOL_ELEM);
    softmax_rows_forward_cuda(logits.d, logits.d, N, E);   /* in place */
    expect_close("softmax_rows_forward in place", logits.d, probs.h, ne, TOL_ELEM);
    /* backward from the CPU's probabilities on both sides */
    Pair p = pair_of(probs.h, ne), d = pair_random(ne, 1.0f);
    softmax_rows_backward_cpu(d.h, p.h, N, E);
    softmax_rows_backward_cuda(d.d, p.d, N, E);
    expect_pair("softmax_rows_backward", &d, TOL_ROW);

    Pair *all[] = {&x, &rows, &w, &wrows, &y, &dot, &logits, &probs, &p, &d};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) pair_free(all[i]);
    int_pair_free(&idx);
    int_pair_free(&slots);
}

static void check_shape(const Shape *s) {
    snprintf(g_case, sizeof g_case, "B=%d T=%d C=%d NH=%d V=%d", s->B, s->T, s->C, s->NH,
             s->V);
    check_encoder(s);
    check_layernorm(s);
    check_matmul(s);
    check_attention(s);
    check_attention_blocks(s);
    check_attention_fused(s);
    check_crossentropy(s);
    check_vocab_parallel(s);
    check_moe(s);
}

/* ---- shape-free kernels ---- */

/* All four transpose combinations, non-square, with leading dimensions
 * wider than the rows (padding the GEMM must neither read nor write). */
static void check_sgemm(int M, int N, int K, Tol tol, const char *label) {
    const float alpha = 0.75f, beta = -0.5f;
    for (int ta = 0; ta <= 1; ta++)
        for (int tb = 0; tb <= 1; tb++) {
            snprintf(g_case, sizeof g_case, "%s M=%d N=%d K=%d trans_a=%d trans_b=%d", label, M,
                     N, K, ta, tb);
            int a_rows = ta ? K : M, lda = (ta ? M : K) + 3;
            int b_rows = tb ? N : K, ldb = (tb ? K : N) + 2;
            int ldc = N + 1;
            Pair a = pair_random((size_t)a_rows * lda, 1.0f);
            Pair b = pair_random((size_t)b_rows * ldb, 1.0f);
            Pair c = pair_random((size_t)M * ldc, 1.0f);
            sgemm_rowmajor_cpu(ta, tb, M, N, K, alpha, a.h, lda, b.h, ldb, beta, c.h, ldc);
            sgemm_rowmajor_cuda(ta, tb, M, N, K, alpha, a.d, lda, b.d, ldb, beta, c.d, ldc);
            expect_pair("sgemm_rowmajor C", &c, tol);
            pair_free(&a);
            pair_free(&b);
            pair_free(&c);
        }
}

static void check_elementwise(size_t n) {
    snprintf(g_case, sizeof g_case, "n=%zu", n);
    Pair x = pair_random(n, 3.0f), y = pair_random(n, 1.0f), out = pair_random(n, 1.0f);
    gelu_forward_cpu(out.h, x.h, n);
    gelu_forward_cuda(out.d, x.d, n);
    expect_pair("gelu_forward out", &out, TOL_ELEM);

    Pair dinp = pair_random(n, 1.0f);
    gelu_backward_cpu(dinp.h, x.h, y.h, n);
    gelu_backward_cuda(dinp.d, x.d, y.d, n);
    expect_pair("gelu_backward dinp", &dinp, TOL_ELEM);

    residual_forward_cpu(out.h, x.h, y.h, n);
    residual_forward_cuda(out.d, x.d, y.d, n);
    expect_pair("residual_forward out", &out, TOL_EXACT);
    residual_forward_cpu(out.h, out.h, y.h, n);   /* out aliasing a */
    residual_forward_cuda(out.d, out.d, y.d, n);
    expect_pair("residual_forward in place", &out, TOL_EXACT);

    residual_backward_cpu(dinp.h, y.h, n);
    residual_backward_cuda(dinp.d, y.d, n);
    expect_pair("residual_backward dinp", &dinp, TOL_EXACT);

    add_inplace_cpu(x.h, y.h, n);
    add_inplace_cuda(x.d, y.d, n);
    expect_pair("add_inplace x", &x, TOL_EXACT);

    scale_inplace_cpu(x.h, -0.37f, n);
    scale_inplace_cuda(x.d, -0.37f, n);
    expect_pair("scale_inplace x", &x, TOL_EXACT);

    expect_scalar("sum_squares", sum_squares_cuda(x.d, n), sum_squares_cpu(x.h, n), TOL_SUMSQ);

    set_zero_cpu(x.h, n);
    set_zero_cuda(x.d, n);
    expect_pair("set_zero x", &x, TOL_EXACT);

    pair_free(&x);
    pair_free(&y);
    pair_free(&out);
    pair_free(&dinp);
}

/* Three AdamW steps from zero moments, new gradients each step. */
static void check_adamw(size_t n) {
    snprintf(g_case, sizeof g_case, "n=%zu", n);
    const float lr = 0.01f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, wd = 0.1f;
    Pair params = pair_random(n, 1.0f);
    float *zeros = (float *)host_alloc(n * sizeof(float));
    memset(zeros, 0, n * sizeof(float));
    Pair m = pair_of(zeros, n), v = pair_of(zeros, n);
    free(zeros);
    for (int t = 1; t <= 3; t++) {
        Pair grads = pair_random(n, 1.0f);
        adamw_update_cpu(params.h, grads.h, m.h, v.h, n, lr, beta1, beta2, eps, wd, t);
        adamw_update_cuda(params.d, grads.d, m.d, v.d, n, lr, beta1, beta2, eps, wd, t);
        pair_free(&grads);
    }
    expect_pair("adamw_update params after 3 steps", &params, TOL_ELEM);
    expect_pair("adamw_update m after 3 steps", &m, TOL_ELEM);
    expect_pair("adamw_update v after 3 steps", &v, TOL_ELEM);
    pair_free(&params);
    pair_free(&m);
    pair_free(&v);
}

/* n = 0 launches nothing and fails nothing. */
static void check_empty(void) {
    snprintf(g_case, sizeof g_case, "n=0");
    Pair x = pair_random(1, 1.0f), y = pair_random(1, 1.0f);
    gelu_forward_cuda(x.d, y.d, 0);
    gelu_backward_cuda(x.d, y.d, y.d, 0);
    residual_forward_cuda(x.d, x.d, y.d, 0);
    residual_backward_cuda(x.d, y.d, 0);
    add_inplace_cuda(x.d, y.d, 0);
    scale_inplace_cuda(x.d, 2.0f, 0);
    set_zero_cuda(x.d, 0);
    gather_rows_cuda(x.d, y.d, NULL, NULL, 0, 1);
    gather_sum_rows_cuda(x.d, y.d, NULL, NULL, 0, 1, 1, 1);
    gather_row_dot_cuda(x.d, y.d, y.d, NULL, 0, 1);
    softmax_rows_forward_cuda(x.d, y.d, 0, 1);
    softmax_rows_backward_cuda(x.d, y.d, 0, 1);
    adamw_update_cuda(x.d, y.d, x.d, x.d, 0, 0.1f, 0.9f, 0.95f, 1e-8f, 0.1f, 1);
    EXPECT(sum_squares_cuda(x.d, 0) == 0.0, "sum_squares of nothing is 0");
    CUDA_CHECK(cudaDeviceSynchronize());
    expect_pair("x after n=0 calls", &x, TOL_EXACT);
    pair_free(&x);
    pair_free(&y);
}

int main(int argc, char **argv) {
    (void)argc;
    program_set_name(argv[0]);
    exit_unless_gpu_present();
    CUDA_CHECK(cudaSetDevice(0));
    kernels_cuda_set_tf32(0);

    static const Shape shapes[] = {
        {2, 7, 24, 3, 37},    /* N = 14, T < 32, hs = 8 */
        {3, 16, 64, 4, 101},  /* N = 48, hs = 16 */
        {1, 40, 36, 3, 300},  /* T > 32 (two columns per lane), C % 8 != 0, V > 256 */
        {2, 150, 128, 2, 50}, /* attention's tiles: three of 64 rows, the last partial; hs 64 */
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) check_shape(&shapes[i]);

    check_sgemm(5, 7, 9, TOL_GEMM, "fp32");
    check_sgemm(33, 65, 129, TOL_GEMM, "fp32");
    kernels_cuda_set_tf32(1);
    check_sgemm(33, 65, 32, TOL_TF32, "tf32");
    kernels_cuda_set_tf32(0);
    check_sgemm(33, 65, 32, TOL_GEMM, "fp32 again");

    /* 3000017 elements: more than the elementwise grid's cap of threads,
     * so the grid-stride loops take more than one lap */
    static const size_t sizes[] = {1, 1003, 3000017};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        check_elementwise(sizes[i]);
        check_adamw(sizes[i]);
    }
    check_empty();

    CUDA_CHECK(cudaDeviceSynchronize());
    return unit_report("test_kernels");
}
