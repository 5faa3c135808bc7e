/* Kernels against plain loops in double, and invariants the gradient check
 * does not see: AdamW's update, the LR schedule, causality, softmax rows. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "math_shared.h"
#include "rng.h"
#include "train.h"
#include "unit.h"

static void fill(float *x, size_t n, uint32_t tag) {
    for (size_t i = 0; i < n; i++) x[i] = rng_normal(3, RNG_STREAM_TEST, i, tag);
}

int main(void) {
    /* matmul_forward vs a double loop */
    enum { N = 7, IC = 13, OC = 5 };
    float inp[N * IC], w[OC * IC], bias[OC], out[N * OC];
    fill(inp, N * IC, 1); fill(w, OC * IC, 2); fill(bias, OC, 3);
    matmul_forward(out, inp, w, bias, N, IC, OC);
    double maxerr = 0;
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double s = bias[o];
            for (int i = 0; i < IC; i++) s += (double)inp[n * IC + i] * w[o * IC + i];
            maxerr = fmax(maxerr, fabs(s - out[n * OC + o]));
        }
    EXPECT(maxerr < 1e-5, "matmul max error %g", maxerr);

    /* the vectorizable exp and tanh behind GELU, against libm in double over
     * every float step of 1/64 in [-100, 100] (plus extreme arguments) */
    double exp_rel = 0, tanh_abs = 0;
    for (int i = -6400; i <= 6400; i++) {
        float x = i / 64.0f;
        if (x <= 0 && x > -80) exp_rel = fmax(exp_rel, fabs(exp_nonpositive(x) / exp((double)x) - 1));
        tanh_abs = fmax(tanh_abs, fabs(tanh_fast(x) - tanh((double)x)));
    }
    EXPECT(exp_rel < 5e-7, "exp_nonpositive relative error %g", exp_rel);
    EXPECT(tanh_abs < 2e-7, "tanh_fast absolute error %g", tanh_abs);
    EXPECT(tanh_fast(1e30f) == 1.0f && tanh_fast(-1e30f) == -1.0f && exp_nonpositive(-1e30f) == 0.0f,
           "tanh_fast/exp_nonpositive at extreme arguments");
    EXPECT(tanh_fast(0.0f) == 0.0f && exp_nonpositive(0.0f) == 1.0f, "tanh(0) = 0, e^0 = 1");

    /* ZeRO++'s blockwise int8: 600 values in 3 blocks (the last short), the
     * second all zero; each value back within half its block's scale, the
     * block's largest magnitude exactly, the zero block exactly zero, and
     * accumulate adds */
    {
        enum { Q = 600 };
        static float x[Q], y[Q];
        static char packed[4 * 3 + Q];
        fill(x, Q, 9);
        for (int i = 256; i < 512; i++) x[i] = 0.0f;
        x[3] = -7.5f;  /* block 0's largest magnitude */
        EXPECT(quant_blocks(Q) == 3 && quant_packed_bytes(Q) == 12 + Q, "packed size %zu",
               quant_packed_bytes(Q));
        quantize_int8(packed, x, Q);
        dequantize_int8(y, packed, Q, 0);
        const float *scales = (const float *)packed;
        double worst = 0;
        for (int i = 0; i < Q; i++) worst = fmax(worst, fabs(y[i] - x[i]) / scales[i / 256]);
        EXPECT(worst <= 0.5 + 1e-6 && y[3] == -7.5f && scales[1] == 0.0f && y[300] == 0.0f,
               "int8 round trip: worst error %g scales, y[3] %g, zero block scale %g", worst,
               y[3], scales[1]);
        dequantize_int8(y, packed, Q, 1);
        EXPECT(fabs(y[3] + 15.0f) < 1e-6, "dequantize_int8 accumulates (got %g)", y[3]);
    }

    /* attention: rows of P sum to 1, P is zero above the diagonal, and the
     * output at time t does not change when a later token's q/k/v changes */
    enum { B = 2, T = 6, C = 8, NH = 2 };
    float qkv[B * T * 3 * C], att[B * NH * T * T], y[B * T * C], y2[B * T * C];
    fill(qkv, sizeof qkv / sizeof(float), 4);
    attention_forward(y, att, qkv, B, T, C, NH);
    double rowerr = 0, upper = 0;
    for (int r = 0; r < B * NH * T; r++) {
        int t = r % T;
        double s = 0;
        for (int j = 0; j < T; j++) {
            s += att[r * T + j];
            if (j > t) upper = fmax(upper, fabs(att[r * T + j]));
        }
        rowerr = fmax(rowerr, fabs(s - 1.0));
    }
    EXPECT(rowerr < 1e-6, "softmax rows sum to 1 +- %g", rowerr);
    EXPECT(upper == 0.0, "attention looks ahead: %g", upper);
    for (int i = 0; i < 3 * C; i++) qkv[(T - 1) * 3 * C + i] += 1.0f;  /* b=0, t=T-1 */
    attention_forward(y2, att, qkv, B, T, C, NH);
    EXPECT(memcmp(y, y2, (T - 1) * C * sizeof(float)) == 0, "future token changed the past");
    /* selective recomputation (lab 05) rebuilds P alone: the same bits, also
     * past one block of query rows (T = 70 > 64) */
    for (int t_long = 0; t_long < 2; t_long++) {
        const int LT = t_long ? 70 : T;
        size_t nq = (size_t)B * LT * 3 * C, na = (size_t)B * NH * LT * LT;
        float *q = malloc(nq * sizeof(float)), *p1 = malloc(na * sizeof(float));
        float *p2 = malloc(na * sizeof(float)), *yl = malloc((size_t)B * LT * C * sizeof(float));
        fill(q, nq, 5);
        attention_forward(yl, p1, q, B, LT, C, NH);
        for (size_t i = 0; i < na; i++) p2[i] = 7.0f;  /* overwritten, diagonal and mask */
        attention_probs_forward(p2, q, B, LT, C, NH);
        EXPECT(memcmp(p1, p2, na * sizeof(float)) == 0,
               "attention_probs_forward differs from attention_forward's probabilities (T = %d)", LT);
        free(q), free(p1), free(p2), free(yl);
    }

    /* crossentropy: loss is -log softmax(target), in place or not */
    float logits[2 * 4] = {1, 2, 3, 4, -1, 0, 0, 5}, probs[8], losses[2];
    int targets[2] = {2, 3};
    float mean = crossentropy_forward(losses, probs, logits, targets, 2, 4);
    double l0 = -log(exp(3.0) / (exp(1.0) + exp(2.0) + exp(3.0) + exp(4.0)));
    EXPECT(fabs(losses[0] - l0) < 1e-6, "loss %g vs %g", losses[0], l0);
    float inplace_losses[2];
    float mean2 = crossentropy_forward(inplace_losses, logits, logits, targets, 2, 4);
    EXPECT(mean == mean2 && memcmp(probs, logits, sizeof probs) == 0, "in-place differs");

    /* The vocabulary-parallel pieces, joined by hand as the TP group's
     * all-reduces would (max, then sums), over 3 "ranks" of a vocabulary of
     * 10 padded to 12 (4 rows each; the last has 2 real): the whole
     * softmax, loss and dlogits, and the whole embedding, come back. */
    {
        enum { RN = 5, RV = 10, RANKS = 3, ROWS = 4, EC = 3, ET = 5 };
        float z[RN * RV], whole_p[RN * RV], whole_l[RN];
        int tg[RN] = {0, 9, 4, 5, 8};
        fill(z, RN * RV, 9);
        float whole_mean = crossentropy_forward(whole_l, whole_p, z, tg, RN, RV);
        float part[RANKS][RN * ROWS], mx[RANKS][RN], tl[RANKS][RN], sm[RANKS][RN];
        for (int r = 0; r < RANKS; r++) {
            int valid = r < RANKS - 1 ? ROWS : RV - (RANKS - 1) * ROWS;
            for (int n = 0; n < RN; n++)
                for (int j = 0; j < ROWS; j++)
                    part[r][n * ROWS + j] = j < valid ? z[n * RV + r * ROWS + j] : 0.0f;
            vocab_logits_max(mx[r], part[r], RN, ROWS, valid);
        }
        for (int r = 1; r < RANKS; r++)
            for (int n = 0; n < RN; n++) mx[0][n] = fmaxf(mx[0][n], mx[r][n]);
        for (int r = 0; r < RANKS; r++) {
            int valid = r < RANKS - 1 ? ROWS : RV - (RANKS - 1) * ROWS;
            vocab_target_logit(tl[r], part[r], tg, r * ROWS, RN, ROWS);
            vocab_softmax_exp(part[r], sm[r], part[r], mx[0], RN, ROWS, valid);
        }
        float sum[RN], target[RN], loss[RN], mean_r = 0;
        for (int n = 0; n < RN; n++) {
            sum[n] = sm[0][n] + sm[1][n] + sm[2][n];
            target[n] = tl[0][n] + tl[1][n] + tl[2][n];
        }
        double perr = 0, pad = 0, lerr = 0;
        for (int r = 0; r < RANKS; r++) {
            mean_r = vocab_crossentropy_finish(loss, part[r], sum, mx[0], target, RN, ROWS);
            vocab_crossentropy_backward(part[r], tg, 0.5f, r * ROWS, RN, ROWS);
            for (int n = 0; n < RN; n++)
                for (int j = 0; j < ROWS; j++) {
                    if (r * ROWS + j >= RV) {
                        pad = fmax(pad, fabs(part[r][n * ROWS + j]));
                        continue;
                    }
                    float want = whole_p[n * RV + r * ROWS + j];
                    perr = fmax(perr, fabs(part[r][n * ROWS + j] - 0.5f * want +
                                           (tg[n] == r * ROWS + j ? 0.5f : 0.0f)));
                }
        }
        for (int n = 0; n < RN; n++) lerr = fmax(lerr, fabs(loss[n] - whole_l[n]));
        EXPECT(perr < 1e-6 && lerr < 1e-5 && fabsf(mean_r - whole_mean) < 1e-5,
               "vocab-parallel softmax/loss/dlogits vs whole: %g %g", perr, lerr);
        EXPECT(pad == 0.0, "a padding column got probability or gradient %g", pad);

        /* embedding: the ranks' lookups summed, plus positions = encoder_forward */
        float wte[RV * EC], wpe[ET * EC], enc[ET * EC], sumr[ET * EC] = {0}, one[ET * EC];
        int tok[ET] = {9, 0, 4, 4, 7};
        fill(wte, RV * EC, 10);
        fill(wpe, ET * EC, 11);
        encoder_forward(enc, tok, wte, wpe, 1, ET, EC);
        float dwte[RV * EC] = {0}, dwpe[ET * EC] = {0}, dwte_r[RV * EC] = {0}, dwpe_r[ET * EC] = {0};
        encoder_backward(dwte, dwpe, wpe /* any dout */, tok, 1, ET, EC);
        for (int r = 0; r < RANKS; r++) {
            int rows = r < RANKS - 1 ? ROWS : RV - (RANKS - 1) * ROWS;
            vocab_embedding_forward(one, tok, wte + r * ROWS * EC, r * ROWS, rows, ET, EC);
            for (int i = 0; i < ET * EC; i++) sumr[i] += one[i];
            vocab_embedding_backward(dwte_r + r * ROWS * EC, wpe, tok, r * ROWS, rows, ET, EC);
        }
        position_forward(sumr, wpe, 0, ET, ET, EC);
        /* a sequence-parallel rank's rows, from a row offset: the same rows */
        float rows_part[ET * EC] = {0}, whole_pos[ET * EC] = {0};
        position_forward(whole_pos, wpe, 0, ET, ET, EC);
        position_forward(rows_part + 2 * EC, wpe, 2, ET - 2, ET, EC);
        EXPECT(memcmp(rows_part + 2 * EC, whole_pos + 2 * EC, (ET - 2) * EC * sizeof(float)) == 0,
               "position_forward from row 2 differs from the whole's rows");
        position_backward(dwpe_r, wpe, 1, ET, EC);
        EXPECT(memcmp(sumr, enc, sizeof enc) == 0, "vocab-parallel embedding differs from the encoder");
        EXPECT(memcmp(dwte_r, dwte, sizeof dwte) == 0 && memcmp(dwpe_r, dwpe, sizeof dwpe) == 0,
               "vocab-parallel embedding backward differs from the encoder's");

        /* bias after the GEMM = the GEMM with its bias, to rounding */
        float nob[N * OC];
        matmul_forward(nob, inp, w, NULL, N, IC, OC);
        bias_forward(nob, bias, N, OC);
        double berr = 0;
        for (int i = 0; i < N * OC; i++) berr = fmax(berr, fabs(nob[i] - out[i]));
        EXPECT(berr < 1e-6, "bias_forward after the GEMM: %g", berr);
    }

    /* AdamW: two steps against the formula in double */
    float p = 0.5f, m = 0, v = 0;
    double pd = 0.5, md = 0, vd = 0;
    const double lr = 0.01, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1;
    const float g[2] = {0.3f, -0.2f};
    for (int t = 1; t <= 2; t++) {
        adamw_update(&p, &g[t - 1], &m, &v, 1, lr, b1, b2, eps, wd, t);
        md = b1 * md + (1 - b1) * g[t - 1];
        vd = b2 * vd + (1 - b2) * g[t - 1] * g[t - 1];
        pd -= lr * ((md / (1 - pow(b1, t))) / (sqrt(vd / (1 - pow(b2, t))) + eps) + wd * pd);
    }
    EXPECT(fabs(p - pd) < 1e-6, "adamw %.9g vs %.9g", p, pd);

    /* grad clipping factor */
    EXPECT(grad_clip_factor(0.5, 1.0) == 1.0f, "no clip below the max");
    EXPECT(fabsf(grad_clip_factor(4.0, 1.0) - 0.25f) < 1e-7f, "clip to max/norm");
    EXPECT(grad_clip_factor(4.0, 0.0) == 1.0f, "0 disables clipping");

    /* sum of squares in double */
    float xs[3] = {3, 4, 12};
    EXPECT(sum_squares(xs, 3) == 169.0, "sum_squares");

    return unit_report("test_kernels");
}
