/* Ring attention's block kernels (kernels.h) on one process, against lab
 * 00's attention of the whole sequence: split a random qkv over cp
 * pretend ranks by each placement (math_shared.h cp_global_position), run
 * every (query run, key run) block under the mask that the blocks'
 * global positions call for, merge, and get attention_forward's output
 * and the log-sum-exp of each row; the blocks' backward with the row dots
 * gives attention_backward's dq, dk, dv. Then the pieces alone:
 * lse_merge_row (halves merge into the whole, large scores, -inf), the
 * placements (each a permutation), the pair counts and copy_strided. The
 * mask of a block is derived here from the positions, not from the lab's
 * rule, so the test also checks that every block of every placement is
 * one of the three masks. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backward_kernels.h"
#include "kernels.h"
#include "math_shared.h"
#include "rng.h"
#include "unit.h"

enum { SKIP = -1, NO_MASK = -2 };

/* the worst differences over every case, printed at the end */
static double g_worst_out, g_worst_lse, g_worst_dqkv;

static float *randn(size_t n, uint32_t tag) {
    float *x = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = rng_normal(7, RNG_STREAM_TEST, i, tag);
    return x;
}

static float *zeros(size_t n) { return calloc(n, sizeof(float)); }

static const char *const PLACE_NAMES[] = {"contiguous", "zigzag", "striped"};

/* The mask for queries at global positions qp[0..n) against keys at
 * kp[0..n): which keys each query sees (key position <= query position),
 * matched against the block kernels' patterns. */
static int mask_of(const int *qp, const int *kp, int n) {
    int none = 1, all = 1, causal = 1, strict = 1;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            const int seen = kp[j] <= qp[i];
            none &= !seen;
            all &= seen;
            causal &= seen == (j <= i);
            strict &= seen == (j < i);
        }
    return none ? SKIP : all ? ATTN_FULL : causal ? ATTN_CAUSAL : strict ? ATTN_CAUSAL_STRICT
                                                                       : NO_MASK;
}

static double block_pairs_of(int n, int mask) {
    return mask == ATTN_FULL ? (double)n * n : mask == ATTN_CAUSAL ? n * (n + 1.0) / 2
                                                                  : n * (n - 1.0) / 2;
}

static unsigned long long pairs_now(void) {
    unsigned long long p;
    double s;
    attention_block_stats(&p, &s);
    return p;
}

/* max |a - b| over n, NaN counted as infinite */
static double max_diff(const float *a, const double *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        const double e = fabs(a[i] - b[i]);
        m = fmax(m, isfinite(e) ? e : INFINITY);
    }
    return m;
}

/* One shape, cp ranks, one placement: forward and backward by blocks
 * against the whole attention. */
static void check_blocks(int B, int T, int C, int NH, int cp, int place) {
    const int Tl = T / cp, c = place == CP_PLACE_ZIGZAG ? Tl / 2 : Tl, runs = Tl / c;
    const int hs = C / NH;
    const char *pn = PLACE_NAMES[place];
    /* the whole sequence: lab 00's attention */
    float *qkv = randn((size_t)B * T * 3 * C, 1), *dout = randn((size_t)B * T * C, 2);
    float *out = zeros((size_t)B * T * C), *att = zeros((size_t)B * NH * T * T);
    float *datt = zeros((size_t)B * NH * T * T), *dqkv = zeros((size_t)B * T * 3 * C);
    attention_forward(out, att, qkv, B, T, C, NH);
    attention_backward(dqkv, datt, dout, qkv, att, B, T, C, NH);
    /* the log-sum-exp of each causal row, in double */
    double *lse_ref = malloc((size_t)B * NH * T * sizeof(double));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float *q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
                double m = -INFINITY, *s = malloc((t + 1) * sizeof(double)), sum = 0;
                for (int j = 0; j <= t; j++) {
                    const float *k = qkv + ((size_t)b * T + j) * 3 * C + C + h * hs;
                    s[j] = 0;
                    for (int d = 0; d < hs; d++) s[j] += (double)q[d] * k[d];
                    s[j] /= sqrt((double)hs);
                    m = fmax(m, s[j]);
                }
                for (int j = 0; j <= t; j++) sum += exp(s[j] - m);
                lse_ref[((size_t)b * NH + h) * T + t] = m + log(sum);
                free(s);
            }

    /* each rank's rows: its positions, in increasing order */
    int *pos = malloc((size_t)cp * Tl * sizeof(int));
    float **lq = malloc(cp * sizeof(float *)), **lkv = malloc(cp * sizeof(float *));
    float **lout = malloc(cp * sizeof(float *)), **llse = malloc(cp * sizeof(float *));
    float **ldout = malloc(cp * sizeof(float *)), **ldq = malloc(cp * sizeof(float *));
    float **ldkv = malloc(cp * sizeof(float *));
    for (int r = 0; r < cp; r++) {
        lq[r] = zeros((size_t)B * Tl * 3 * C);
        ldout[r] = zeros((size_t)B * Tl * C);
        for (int t = 0; t < Tl; t++) {
            const int g = pos[r * Tl + t] = cp_global_position(t, Tl, cp, r, place);
            for (int b = 0; b < B; b++) {
                memcpy(lq[r] + ((size_t)b * Tl + t) * 3 * C, qkv + ((size_t)b * T + g) * 3 * C,
                       3 * C * sizeof(float));
                memcpy(ldout[r] + ((size_t)b * Tl + t) * C, dout + ((size_t)b * T + g) * C,
                       C * sizeof(float));
            }
        }
        lkv[r] = zeros((size_t)B * Tl * 2 * C);  /* [k | v], as the ring sends it */
        copy_strided(lkv[r], 2 * C, lq[r] + C, 3 * C, B * Tl, 2 * C, 0);
        lout[r] = zeros((size_t)B * Tl * C);
        llse[r] = malloc((size_t)B * NH * Tl * sizeof(float));
        fill_value(llse[r], -INFINITY, (size_t)B * NH * Tl);
        ldq[r] = zeros((size_t)B * Tl * 3 * C);
        ldkv[r] = zeros((size_t)B * Tl * 2 * C);
    }

    /* forward: every block, merged into its query rows */
    float *out_b = zeros((size_t)B * Tl * C), *lse_b = zeros((size_t)B * NH * Tl);
    double pairs = 0;
    int bad_masks = 0, bad_counts = 0;
    for (int r = 0; r < cp; r++)
        for (int s = 0; s < cp; s++)
            for (int i = 0; i < runs; i++)
                for (int j = 0; j < runs; j++) {
                    const int mask = mask_of(pos + r * Tl + i * c, pos + s * Tl + j * c, c);
                    bad_masks += mask == NO_MASK;
                    if (mask < 0) continue;
                    const unsigned long long p0 = pairs_now();
                    attention_block_forward(out_b, lse_b, lq[r], lkv[s], B, Tl, C, NH, i * c,
                                            j * c, c, mask);
                    attention_merge(lout[r], llse[r], out_b, lse_b, B, Tl, C, NH, i * c, c);
                    const double want = (double)B * NH * block_pairs_of(c, mask);
                    bad_counts += (double)(pairs_now() - p0) != want;
                    pairs += want;
                }
    EXPECT(bad_masks == 0, "%s cp %d T %d: %d blocks fit no mask", pn, cp, T, bad_masks);
    EXPECT(bad_counts == 0, "%s cp %d T %d: %d blocks counted other than n^2, n(n+1)/2, n(n-1)/2 "
           "pairs", pn, cp, T, bad_counts);
    /* every causal pair (b, h, query, key <= query) computed exactly once */
    EXPECT(pairs == (double)B * NH * T * (T + 1) / 2, "%s cp %d T %d: %.0f pairs, want %d", pn, cp,
           T, pairs, B * NH * T * (T + 1) / 2);

    double out_err = 0, lse_err = 0;
    for (int r = 0; r < cp; r++)
        for (int b = 0; b < B; b++)
            for (int t = 0; t < Tl; t++) {
                const int g = pos[r * Tl + t];
                for (int k = 0; k < C; k++) {
                    const double e = fabs(lout[r][((size_t)b * Tl + t) * C + k] -
                                          out[((size_t)b * T + g) * C + k]);
                    out_err = fmax(out_err, isfinite(e) ? e : INFINITY);
                }
                for (int h = 0; h < NH; h++) {
                    const double e = fabs(llse[r][((size_t)b * NH + h) * Tl + t] -
                                          lse_ref[((size_t)b * NH + h) * T + g]);
                    lse_err = fmax(lse_err, isfinite(e) ? e : INFINITY);
                }
            }
    g_worst_out = fmax(g_worst_out, out_err);
    g_worst_lse = fmax(g_worst_lse, lse_err);
    EXPECT(out_err < 1e-5, "%s cp %d B %d T %d C %d NH %d: merged blocks' output differs from "
           "attention_forward's by %g", pn, cp, B, T, C, NH, out_err);
    EXPECT(lse_err < 1e-5, "%s cp %d B %d T %d C %d NH %d: merged lse differs from the direct "
           "log-sum-exp by %g", pn, cp, B, T, C, NH, lse_err);

    /* backward: D per rank, then every block; dk, dv land in the key
     * rank's dkv and are added into its dqkv's k, v columns */
    float **D = malloc(cp * sizeof(float *));
    for (int r = 0; r < cp; r++) {
        D[r] = zeros((size_t)B * NH * Tl);
        attention_row_dot(D[r], ldout[r], lout[r], B, Tl, C, NH);
    }
    bad_counts = 0;
    for (int r = 0; r < cp; r++)
        for (int s = 0; s < cp; s++)
            for (int i = 0; i < runs; i++)
                for (int j = 0; j < runs; j++) {
                    const int mask = mask_of(pos + r * Tl + i * c, pos + s * Tl + j * c, c);
                    if (mask < 0) continue;
                    const unsigned long long p0 = pairs_now();
                    attention_block_backward(ldq[r], ldkv[s], ldout[r], lq[r], lkv[s], llse[r],
                                             D[r], B, Tl, C, NH, i * c, j * c, c, mask);
                    bad_counts += (double)(pairs_now() - p0) != (double)B * NH * block_pairs_of(c, mask);
                }
    EXPECT(bad_counts == 0, "%s cp %d: backward blocks counted the wrong pairs", pn, cp);
    double dq_err = 0, dkv_err = 0, scale = 0;
    for (size_t i = 0; i < (size_t)B * T * 3 * C; i++) scale = fmax(scale, fabs(dqkv[i]));
    for (int r = 0; r < cp; r++) {
        copy_strided(ldq[r] + C, 3 * C, ldkv[r], 2 * C, B * Tl, 2 * C, 1);
        for (int b = 0; b < B; b++)
            for (int t = 0; t < Tl; t++) {
                const int g = pos[r * Tl + t];
                for (int k = 0; k < 3 * C; k++) {
                    const double e = fabs(ldq[r][((size_t)b * Tl + t) * 3 * C + k] -
                                          dqkv[((size_t)b * T + g) * 3 * C + k]);
                    double *worst = k < C ? &dq_err : &dkv_err;
                    *worst = fmax(*worst, isfinite(e) ? e : INFINITY);
                }
            }
    }
    g_worst_dqkv = fmax(g_worst_dqkv, fmax(dq_err, dkv_err) / fmax(1, scale));
    EXPECT(dq_err < 1e-5 * fmax(1, scale), "%s cp %d B %d T %d C %d NH %d: blocks' dq differs from "
           "attention_backward's by %g (max |dqkv| %g)", pn, cp, B, T, C, NH, dq_err, scale);
    EXPECT(dkv_err < 1e-5 * fmax(1, scale), "%s cp %d B %d T %d C %d NH %d: blocks' dk, dv differ "
           "from attention_backward's by %g (max |dqkv| %g)", pn, cp, B, T, C, NH, dkv_err, scale);

    for (int r = 0; r < cp; r++) {
        free(lq[r]); free(lkv[r]); free(lout[r]); free(llse[r]); free(ldout[r]);
        free(ldq[r]); free(ldkv[r]); free(D[r]);
    }
    free(lq); free(lkv); free(lout); free(llse); free(ldout); free(ldq); free(ldkv); free(D);
    free(pos); free(out_b); free(lse_b); free(lse_ref);
    free(qkv); free(dout); free(out); free(att); free(datt); free(dqkv);
}

/* lse_merge_row: two halves of a row's keys merge into the whole row */
static void check_merge(void) {
    enum { N = 9, HS = 3 };
    double s[N], v[N][HS];
    for (int j = 0; j < N; j++) {
        s[j] = 3.0 * rng_normal(7, RNG_STREAM_TEST, j, 20);
        for (int d = 0; d < HS; d++) v[j][d] = rng_normal(7, RNG_STREAM_TEST, j * HS + d, 21);
    }
    /* softmax-weighted values and log-sum-exp over keys [a, b), in double */
    float y[2][HS], lse[2];
    double yw[HS] = {0}, lw = 0;
    for (int half = 0; half < 3; half++) {
        const int a = half == 1 ? 4 : 0, b = half == 0 ? 4 : N;
        double m = -INFINITY, sum = 0, acc[HS] = {0};
        for (int j = a; j < b; j++) m = fmax(m, s[j]);
        for (int j = a; j < b; j++) {
            sum += exp(s[j] - m);
            for (int d = 0; d < HS; d++) acc[d] += exp(s[j] - m) * v[j][d];
        }
        if (half < 2) {
            lse[half] = (float)(m + log(sum));
            for (int d = 0; d < HS; d++) y[half][d] = (float)(acc[d] / sum);
        } else {
            lw = m + log(sum);
            for (int d = 0; d < HS; d++) yw[d] = acc[d] / sum;
        }
    }
    float lm = lse_merge_row(y[0], lse[0], y[1], lse[1], HS);
    EXPECT(fabs(lm - lw) < 1e-5, "merged halves' lse %g, whole %g", lm, lw);
    EXPECT(max_diff(y[0], yw, HS) < 1e-6, "merged halves' output differs from the whole's by %g",
           max_diff(y[0], yw, HS));

    /* large scores: e^1000 overflows a float (and a double); the shift by
     * the larger lse keeps every exponential <= 1. Exact up to the float
     * resolution of the merged lse: its rounding error, eps |lse|, passes
     * into the weights e^(lse_a - lse') as a relative error. */
    const float big[][2] = {{1000.0f, 1010.0f}, {1010.0f, 1000.0f}, {-1000.0f, -1010.0f},
                            {1000.0f, 1000.0f}, {88.0f, 89.5f}};
    for (size_t k = 0; k < sizeof big / sizeof big[0]; k++) {
        const double la = big[k][0], lb = big[k][1], mx = fmax(la, lb);
        const double want = mx + log(exp(la - mx) + exp(lb - mx));
        const double wa = exp(la - want), wb = exp(lb - want);
        float ya[2] = {1.0f, -2.0f}, yb[2] = {3.0f, 0.5f};
        const double wy[2] = {wa * 1.0 + wb * 3.0, wa * -2.0 + wb * 0.5};
        float got = lse_merge_row(ya, big[k][0], yb, big[k][1], 2);
        EXPECT(isfinite(got) && fabs(got - want) <= 1e-6 * fabs(want) + 1e-6,
               "lse %g and %g merge to %g, want %.9g", la, lb, got, want);
        const double tol = 4 * FLT_EPSILON * fmax(1, fabs(want)) * 3;  /* |y| <= 3 */
        EXPECT(isfinite(ya[0]) && isfinite(ya[1]) && max_diff(ya, wy, 2) < tol,
               "lse %g and %g: merged output (%g, %g), want (%g, %g)", la, lb, ya[0], ya[1],
               wy[0], wy[1]);
    }
    /* -inf is "no keys yet": the other side comes back exactly */
    float ya[2] = {5.0f, -6.0f}, yb[2] = {0.25f, 7.0f};
    float got = lse_merge_row(ya, -INFINITY, yb, 2.5f, 2);
    EXPECT(got == 2.5f && ya[0] == 0.25f && ya[1] == 7.0f,
           "-inf merged with lse 2.5: lse %g, y (%g, %g), want 2.5, (0.25, 7)", got, ya[0], ya[1]);
    float yc[2] = {5.0f, -6.0f};
    got = lse_merge_row(yc, 2.5f, yb, -INFINITY, 2);
    EXPECT(got == 2.5f && yc[0] == 5.0f && yc[1] == -6.0f,
           "lse 2.5 merged with -inf: lse %g, y (%g, %g), want 2.5, (5, -6)", got, yc[0], yc[1]);
    float yd[2] = {0.0f, 0.0f};
    got = lse_merge_row(yd, -INFINITY, yb, -INFINITY, 2);
    EXPECT(got == -INFINITY && yd[0] == 0.0f && yd[1] == 0.0f,
           "-inf merged with -inf: lse %g, y (%g, %g)", got, yd[0], yd[1]);
}

/* Every placement gives each position of a sequence to exactly one rank,
 * a rank's rows in increasing position order */
static void check_placements(void) {
    for (int cp = 1; cp <= 8; cp++)
        for (int place = 0; place < 3; place++)
            for (int T = 2 * cp; T <= 6 * cp; T += 2 * cp) {
                const int Tl = T / cp;
                int *seen = calloc(T, sizeof(int)), out_of_range = 0, unordered = 0, twice = 0;
                for (int r = 0; r < cp; r++)
                    for (int t = 0; t < Tl; t++) {
                        const int g = cp_global_position(t, Tl, cp, r, place);
                        if (g < 0 || g >= T) {
                            out_of_range++;
                            continue;
                        }
                        twice += seen[g]++ > 0;
                        unordered += t > 0 && g <= cp_global_position(t - 1, Tl, cp, r, place);
                    }
                EXPECT(!out_of_range && !twice && !unordered,
                       "%s cp %d T %d: %d positions out of range, %d given twice, %d out of order",
                       PLACE_NAMES[place], cp, T, out_of_range, twice, unordered);
                free(seen);
            }
}

/* copy_strided: columns between strided rows, = and += ; untouched
 * columns stay */
static void check_copy(void) {
    enum { ROWS = 5, SRC_LD = 7, DST_LD = 4, COLS = 3 };
    float src[ROWS * SRC_LD], dst[ROWS * DST_LD + 1];
    for (int i = 0; i < ROWS * SRC_LD; i++) src[i] = (float)(i + 1);
    for (int i = 0; i < ROWS * DST_LD + 1; i++) dst[i] = -1.0f;
    copy_strided(dst + 1, DST_LD, src + 2, SRC_LD, ROWS, COLS, 0);
    int wrong = 0;
    for (int r = 0; r < ROWS; r++)
        for (int k = 0; k < DST_LD; k++) {
            const float want = k >= 1 && k <= COLS ? src[r * SRC_LD + 2 + k - 1] : -1.0f;
            wrong += dst[r * DST_LD + k] != want;
        }
    wrong += dst[ROWS * DST_LD] != -1.0f;  /* past the last row */
    EXPECT(wrong == 0, "copy_strided: %d elements wrong", wrong);
    copy_strided(dst + 1, DST_LD, src + 2, SRC_LD, ROWS, COLS, 1);
    wrong = 0;
    for (int r = 0; r < ROWS; r++)
        for (int k = 0; k < DST_LD; k++) {
            const float want = k >= 1 && k <= COLS ? 2 * src[r * SRC_LD + 2 + k - 1] : -1.0f;
            wrong += dst[r * DST_LD + k] != want;
        }
    EXPECT(wrong == 0, "copy_strided accumulate: %d elements wrong", wrong);
    float x[5] = {1, 2, 3, 4, 5};
    fill_value(x + 1, -INFINITY, 3);
    EXPECT(x[0] == 1 && x[1] == -INFINITY && x[3] == -INFINITY && x[4] == 5, "fill_value");
}

/* the pair counter: n(n+1)/2, n(n-1)/2 and n^2 per head and sequence */
static void check_stats(void) {
    enum { B = 2, T = 5, C = 4, NH = 2 };
    float *qkv = randn(B * T * 3 * C, 30), *kv = zeros(B * T * 2 * C), *out = zeros(B * T * C);
    float *lse = zeros(B * NH * T), *dq = zeros(B * T * 3 * C), *dkv = zeros(B * T * 2 * C);
    float *dout = randn(B * T * C, 31), *D = zeros(B * NH * T);
    copy_strided(kv, 2 * C, qkv + C, 3 * C, B * T, 2 * C, 0);
    const int masks[3] = {ATTN_FULL, ATTN_CAUSAL, ATTN_CAUSAL_STRICT};
    const unsigned long long want[3] = {B * NH * 4 * 4, B * NH * 4 * 5 / 2, B * NH * 4 * 3 / 2};
    for (int m = 0; m < 3; m++) {
        unsigned long long p0 = pairs_now();
        attention_block_forward(out, lse, qkv, kv, B, T, C, NH, 1, 0, 4, masks[m]);
        unsigned long long p1 = pairs_now();
        attention_block_backward(dq, dkv, dout, qkv, kv, lse, D, B, T, C, NH, 1, 0, 4, masks[m]);
        unsigned long long p2 = pairs_now();
        EXPECT(p1 - p0 == want[m] && p2 - p1 == want[m],
               "mask %d, n 4: counted %llu forward, %llu backward, want %llu", masks[m], p1 - p0,
               p2 - p1, want[m]);
    }
    free(qkv); free(kv); free(out); free(lse); free(dq); free(dkv); free(dout); free(D);
}

int main(void) {
    kernels_set_cpu_backward(program_backward_kernels());
    check_placements();
    check_merge();
    check_copy();
    check_stats();
    /* (B, T, C, NH) and the degrees that split T for every placement
     * (zigzag: T a multiple of 2 cp) */
    static const int shapes[][4] = {{2, 12, 16, 2}, {1, 16, 24, 3}};
    static const int degrees[][4] = {{1, 2, 3, 6}, {1, 2, 4, 8}};
    for (int k = 0; k < 2; k++)
        for (int d = 0; d < 4; d++)
            for (int place = 0; place < 3; place++)
                check_blocks(shapes[k][0], shapes[k][1], shapes[k][2], shapes[k][3],
                             degrees[k][d], place);
    printf("test_cp_kernels: blocks vs whole attention, worst: out %.2g, lse %.2g, dqkv %.2g "
           "(relative to max |dqkv| when above 1)\n", g_worst_out, g_worst_lse, g_worst_dqkv);
    return unit_report("test_cp_kernels");
}
