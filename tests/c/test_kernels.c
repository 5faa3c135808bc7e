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

    /* crossentropy: loss is -log softmax(target), in place or not */
    float logits[2 * 4] = {1, 2, 3, 4, -1, 0, 0, 5}, probs[8], losses[2];
    int targets[2] = {2, 3};
    float mean = crossentropy_forward(losses, probs, logits, targets, 2, 4);
    double l0 = -log(exp(3.0) / (exp(1.0) + exp(2.0) + exp(3.0) + exp(4.0)));
    EXPECT(fabs(losses[0] - l0) < 1e-6, "loss %g vs %g", losses[0], l0);
    float inplace_losses[2];
    float mean2 = crossentropy_forward(inplace_losses, logits, logits, targets, 2, 4);
    EXPECT(mean == mean2 && memcmp(probs, logits, sizeof probs) == 0, "in-place differs");

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
