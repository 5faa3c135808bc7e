/* The mixture-of-experts layer (moe.h) against a reference written here in
 * double precision, independent of moe.c's algorithms: top-k and capacity
 * by ranks (an assignment is kept when fewer than cap of its group's
 * assignments to the same expert outrank it) instead of sorting.
 *   (a) gradients of x, Wr and every expert tensor against central
 *       differences of the reference's loss sum(w * y) + aux, with drops
 *       and dropless, k = 1 and 2. Top-k and capacity are piecewise
 *       constant in the inputs: the check first measures the margins (the
 *       probability gaps at every top-k and capacity boundary) and needs
 *       them far wider than the differences' step and float's rounding;
 *   (b) the routing (choices, kept and dropped, order, counts, weights)
 *       against the reference's, on random probabilities and on ties;
 *   (c) the phases on expert ranges [e0, e0 + n), assembled, equal the
 *       whole layer (expert parallelism's contract);
 *   (d) the aux loss against its formula, and its closed form alpha under
 *       a uniform router; the memory counts against the allocator's.
 *
 *     test_moe                       run the checks
 *     test_moe --dump FILE K CF      write one layer's numbers for
 *                                    tests/torch_moe.py (format there)
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "backward_kernels.h"
#include "check.h"
#include "kernels.h"
#include "math_shared.h"
#include "moe.h"
#include "rng.h"
#include "unit.h"

/* ---- a layer's numbers in host memory (the CPU device) ---- */

/* the tensors of the flat vector, in order: x, wr, fcw, fcb, fcprojw, fcprojb */
enum { T_X, T_WR, T_FCW, T_FCB, T_FCPROJW, T_FCPROJB, T_COUNT };
static const char *TENSOR_NAMES[T_COUNT] = {"x", "wr", "fcw", "fcb", "fcprojw", "fcprojb"};

typedef struct {
    MoEShape s;
    size_t off[T_COUNT + 1];  /* offsets of the tensors in a flat vector */
    float *theta;             /* x and the parameters */
    float *w;                 /* (N, C): the loss's weights, dy */
} Case;

static void case_offsets(Case *c) {
    const size_t N = c->s.N, C = c->s.C, E = c->s.E;
    const size_t sizes[T_COUNT] = {N * C, E * C, E * 4 * C * C, E * 4 * C, E * C * 4 * C, E * C};
    c->off[0] = 0;
    for (int i = 0; i < T_COUNT; i++) c->off[i + 1] = c->off[i] + sizes[i];
}

static MoEParams params_of(const Case *c, float *v) {
    MoEParams p = {v + c->off[T_WR], v + c->off[T_FCW], v + c->off[T_FCB], v + c->off[T_FCPROJW],
                   v + c->off[T_FCPROJB]};
    return p;
}

/* x ~ N(0, 1), Wr ~ N(0, wr_scale^2) (spread probabilities), experts ~
 * N(0, 0.3^2), w ~ N(0, 1); tag picks the draw */
static void case_init(Case *c, int G, int S, int C, int E, int k, float cf, float alpha,
                      float wr_scale, uint32_t tag) {
    moe_shape_init(&c->s, G * S, S, C, E, k, cf, alpha);
    case_offsets(c);
    c->theta = malloc(c->off[T_COUNT] * sizeof(float));
    c->w = malloc((size_t)c->s.N * C * sizeof(float));
    CHECK(c->theta && c->w, "out of memory");
    for (int t = 0; t < T_COUNT; t++) {
        const float scale = t == T_X ? 1.0f : t == T_WR ? wr_scale : 0.3f;
        for (size_t i = c->off[t]; i < c->off[t + 1]; i++)
            c->theta[i] = scale * rng_normal(7, RNG_STREAM_TEST, i, tag);
    }
    for (size_t i = 0; i < (size_t)c->s.N * C; i++)
        c->w[i] = rng_normal(7, RNG_STREAM_TEST, i, tag + 1000);
}

static void case_free(Case *c) { free(c->theta), free(c->w); }

/* ---- the reference, in double ---- */

typedef struct {
    double *probs;  /* (N, E) */
    int *rank;      /* (N, E): the expert's rank among the token's choices, -1 not chosen */
    int *kept;      /* (N, E): 1 kept, 0 dropped or not chosen */
    int *assigned;  /* (G, E) */
} RefRoute;

static void ref_alloc(RefRoute *r, const MoEShape *s) {
    r->probs = malloc((size_t)s->N * s->E * sizeof(double));
    r->rank = malloc((size_t)s->N * s->E * sizeof(int));
    r->kept = malloc((size_t)s->N * s->E * sizeof(int));
    r->assigned = malloc((size_t)s->G * s->E * sizeof(int));
    CHECK(r->probs && r->rank && r->kept && r->assigned, "out of memory");
}
static void ref_free(RefRoute *r) { free(r->probs), free(r->rank), free(r->kept), free(r->assigned); }

/* b outranks a: higher, or equal and first */
static int outranks(double pb, int b, double pa, int a) { return pb > pa || (pb == pa && b < a); }

/* the routing from r->probs, by ranks */
static void ref_route(RefRoute *r, const MoEShape *s) {
    const int N = s->N, E = s->E, S = s->S;
    for (int t = 0; t < N; t++)
        for (int e = 0; e < E; e++) {
            const double *p = r->probs + (size_t)t * E;
            int above = 0;
            for (int f = 0; f < E; f++) above += f != e && outranks(p[f], f, p[e], e);
            r->rank[t * E + e] = above < s->k ? above : -1;
        }
    for (int g = 0; g < s->G; g++)
        for (int e = 0; e < E; e++) {
            int n = 0;
            for (int t = g * S; t < (g + 1) * S; t++) {
                if (r->rank[t * E + e] < 0) {
                    r->kept[t * E + e] = 0;
                    continue;
                }
                n++;
                int above = 0;
                for (int u = g * S; u < (g + 1) * S; u++)
                    above += u != t && r->rank[u * E + e] >= 0 &&
                             outranks(r->probs[u * E + e], u, r->probs[t * E + e], t);
                r->kept[t * E + e] = above < s->cap;
            }
            r->assigned[g * E + e] = n;
        }
}

static double gelu_ref(double x) {
    return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

/* y (N, C) and the aux loss of theta (doubles, Case's layout) */
static double ref_forward(double *y, RefRoute *r, const Case *c, const double *v) {
    const MoEShape *s = &c->s;
    const int N = s->N, C = s->C, E = s->E, S = s->S, H = 4 * C;
    const double *x = v + c->off[T_X], *wr = v + c->off[T_WR];
    for (int t = 0; t < N; t++) {
        double *p = r->probs + (size_t)t * E, mx = -INFINITY, sum = 0.0;
        for (int e = 0; e < E; e++) {
            double z = 0.0;
            for (int i = 0; i < C; i++) z += x[t * C + i] * wr[e * C + i];
            p[e] = z;
            mx = fmax(mx, z);
        }
        for (int e = 0; e < E; e++) sum += (p[e] = exp(p[e] - mx));
        for (int e = 0; e < E; e++) p[e] /= sum;
    }
    ref_route(r, s);
    double *hid = malloc((size_t)H * sizeof(double));
    CHECK(hid, "out of memory");
    for (int t = 0; t < N; t++) {
        for (int i = 0; i < C; i++) y[t * C + i] = 0.0;
        for (int e = 0; e < E; e++) {
            if (!r->kept[t * E + e]) continue;
            const double *fcw = v + c->off[T_FCW] + (size_t)e * H * C, *fcb = v + c->off[T_FCB] + e * H;
            const double *pw = v + c->off[T_FCPROJW] + (size_t)e * C * H, *pb = v + c->off[T_FCPROJB] + e * C;
            for (int o = 0; o < H; o++) {
                double z = fcb[o];
                for (int i = 0; i < C; i++) z += fcw[o * C + i] * x[t * C + i];
                hid[o] = gelu_ref(z);
            }
            for (int o = 0; o < C; o++) {
                double z = pb[o];
                for (int i = 0; i < H; i++) z += pw[o * H + i] * hid[i];
                y[t * C + o] += r->probs[t * E + e] * z;
            }
        }
    }
    free(hid);
    double aux = 0.0;
    for (int g = 0; g < s->G; g++)
        for (int e = 0; e < E; e++) {
            double P = 0.0;
            for (int t = g * S; t < (g + 1) * S; t++) P += r->probs[t * E + e];
            aux += (double)r->assigned[g * E + e] / ((double)S * s->k) * (P / S);
        }
    return s->aux_alpha * E * aux / s->G;
}

static double ref_loss(double *y, RefRoute *r, const Case *c, const double *v, double *aux) {
    *aux = ref_forward(y, r, c, v);
    double L = *aux;
    for (size_t i = 0; i < (size_t)c->s.N * c->s.C; i++) L += c->w[i] * y[i];
    return L;
}

/* The narrowest probability gap at a decision, relative to the larger
 * side (a step moves a probability in proportion to itself): a token's
 * k-th choice against its (k+1)-th, and an expert's last kept assignment in
 * a group against its first dropped one. */
static double ref_margin(const RefRoute *r, const MoEShape *s) {
    const int E = s->E, S = s->S;
    double margin = INFINITY;
    for (int t = 0; t < s->N; t++) {
        double lo_in = INFINITY, hi_out = -INFINITY;
        for (int e = 0; e < E; e++) {
            const double p = r->probs[t * E + e];
            if (r->rank[t * E + e] >= 0) lo_in = fmin(lo_in, p);
            else hi_out = fmax(hi_out, p);
        }
        if (s->k < E) margin = fmin(margin, (lo_in - hi_out) / lo_in);
    }
    for (int g = 0; g < s->G; g++)
        for (int e = 0; e < E; e++) {
            double lo_in = INFINITY, hi_out = -INFINITY;
            for (int t = g * S; t < (g + 1) * S; t++) {
                if (r->rank[t * E + e] < 0) continue;
                const double p = r->probs[t * E + e];
                if (r->kept[t * E + e]) lo_in = fmin(lo_in, p);
                else hi_out = fmax(hi_out, p);
            }
            if (hi_out > -INFINITY) margin = fmin(margin, (lo_in - hi_out) / lo_in);
        }
    return margin;
}

/* ---- the C layer on a case ---- */

typedef struct {
    MoEActs a;
    MoEScratch sc;
    float *y, *grads;  /* grads: Case's layout (dx first) */
} Run;

static void run_layer(Run *run, const Case *c) {
    const size_t NC = (size_t)c->s.N * c->s.C;
    moe_acts_alloc(&run->a, &c->s);
    moe_scratch_alloc(&run->sc, &c->s);
    run->y = malloc(NC * sizeof(float));
    run->grads = calloc(c->off[T_COUNT], sizeof(float));
    CHECK(run->y && run->grads, "out of memory");
    MoEParams p = params_of(c, c->theta), g = params_of(c, run->grads);
    moe_forward(run->y, &run->a, &p, c->theta + c->off[T_X]);
    moe_backward(run->grads + c->off[T_X], &g, c->w, &run->a, &run->sc, &p,
                 c->theta + c->off[T_X], 1.0f);
}

static void run_free(Run *run) {
    moe_acts_free(&run->a);
    moe_scratch_free(&run->sc);
    free(run->y), free(run->grads);
}

/* ---- (a) and (d): forward, aux and gradients against the reference ---- */

static void check_gradients(int k, float cf, uint32_t tag) {
    Case c;
    case_init(&c, 2, 12, 8, 4, k, cf, 0.5f, 1.0f, tag);
    const MoEShape *s = &c.s;
    const size_t n = c.off[T_COUNT], NC = (size_t)s->N * s->C;
    Run run;
    run_layer(&run, &c);

    double *v = malloc(n * sizeof(double)), *y = malloc(NC * sizeof(double)), aux;
    CHECK(v && y, "out of memory");
    for (size_t i = 0; i < n; i++) v[i] = c.theta[i];
    RefRoute r;
    ref_alloc(&r, s);
    ref_loss(y, &r, &c, v, &aux);
    const double margin = ref_margin(&r, s);
    /* a step of h = 1e-6 moves a logit by ~1e-5 at most, a probability by
     * that fraction of itself; float rounds it at ~1e-7: 1e-4 is 10x both */
    EXPECT(margin > 1e-4, "k=%d cf=%g: decision margin %g too narrow for the check", k, cf, margin);
    double yerr = 0, ymax = 0;
    for (size_t i = 0; i < NC; i++) {
        yerr = fmax(yerr, fabs(run.y[i] - y[i]));
        ymax = fmax(ymax, fabs(y[i]));
    }
    EXPECT(yerr <= 1e-5 * ymax, "k=%d cf=%g: y differs by %g (max |y| %g)", k, cf, yerr, ymax);
    EXPECT(fabs(run.a.route.aux - aux) <= 1e-6 * fabs(aux),
           "k=%d cf=%g: aux %.9g, its formula %.9g", k, cf, run.a.route.aux, aux);
    int ref_kept = 0;
    for (int i = 0; i < s->N * s->E; i++) ref_kept += r.kept[i];
    EXPECT(run.a.route.A == ref_kept && run.a.route.dropped == s->N * k - ref_kept,
           "k=%d cf=%g: %d kept, the reference %d", k, cf, run.a.route.A, ref_kept);
    EXPECT(cf == 0.0f ? run.a.route.dropped == 0 : run.a.route.dropped > 0,
           "k=%d cf=%g: %d dropped (the case wants %s)", k, cf, run.a.route.dropped,
           cf == 0.0f ? "none" : "some");

    /* central differences of the double loss, step 1e-6: truncation
     * ~1e-12, rounding ~1e-10, and no decision moves (margin above) */
    const double h = 1e-6;
    double worst = 0;
    for (int t = 0; t < T_COUNT; t++) {
        double err = 0, gmax = 0;
        for (size_t i = c.off[t]; i < c.off[t + 1]; i++) {
            const double v0 = v[i];
            double a1, a2;
            v[i] = v0 + h;
            const double lp = ref_loss(y, &r, &c, v, &a1);
            v[i] = v0 - h;
            const double lm = ref_loss(y, &r, &c, v, &a2);
            v[i] = v0;
            const double fd = (lp - lm) / (2 * h);
            err = fmax(err, fabs(run.grads[i] - fd));
            gmax = fmax(gmax, fabs(fd));
        }
        const double rel = err / gmax;
        worst = fmax(worst, rel);
        EXPECT(rel < 1e-4, "k=%d cf=%g: d%s off by %g of its largest entry %g", k, cf,
               TENSOR_NAMES[t], rel, gmax);
    }
    printf("gradcheck k=%d cf=%g: dropped %d of %d, margin %.2e, y err %.1e, aux err %.1e, "
           "worst gradient error %.1e (of each tensor's max)\n", k, cf, run.a.route.dropped,
           s->N * k, margin, yerr / ymax, fabs(run.a.route.aux - aux) / aux, worst);
    ref_free(&r);
    free(v), free(y);
    run_free(&run);
    case_free(&c);
}

/* ---- (b) the routing against the reference's, on the layer's own probs ---- */

static void check_routing_against_ref(const MoEActs *a, const char *what) {
    const MoEShape *s = &a->shape;
    const MoERouting *rt = &a->route;
    const int N = s->N, E = s->E, k = s->k;
    RefRoute r;
    ref_alloc(&r, s);
    for (int i = 0; i < N * E; i++) r.probs[i] = rt->probs_h[i];
    ref_route(&r, s);
    int bad = 0, kept = 0;
    for (int t = 0; t < N; t++)
        for (int j = 0; j < k; j++) {
            const int e = rt->choice[t * k + j], sl = rt->slots_h[t * k + j];
            bad += r.rank[t * E + e] != j;
            bad += (sl >= 0) != r.kept[t * E + e];
            if (sl >= 0) bad += rt->token_h[sl] != t || rt->expert_h[sl] != e ||
                                rt->weight_h[sl] != rt->probs_h[t * E + e];
        }
    for (int i = 0; i < N * E; i++) kept += r.kept[i];
    for (int g = 0; g < s->G; g++)
        for (int e = 0; e < E; e++) bad += rt->assigned[g * E + e] != r.assigned[g * E + e];
    /* by expert, then token; counts and offsets agree */
    for (int e = 0; e < E; e++) {
        bad += rt->offsets[e + 1] - rt->offsets[e] != rt->counts[e];
        for (int i = rt->offsets[e]; i < rt->offsets[e + 1]; i++)
            bad += rt->expert_h[i] != e || (i > rt->offsets[e] && rt->token_h[i] <= rt->token_h[i - 1]);
    }
    EXPECT(bad == 0 && rt->A == kept && rt->dropped == N * k - kept,
           "%s: %d disagreements with the reference; kept %d, the reference %d", what, bad,
           rt->A, kept);
    ref_free(&r);
}

static void route_case(Case *c, MoEActs *a) {
    moe_acts_alloc(a, &c->s);
    moe_route(a, c->theta + c->off[T_X], c->theta + c->off[T_WR]);
}

static void check_routing(void) {
    /* random, drops in most groups; k = 1, 2, 3 */
    for (int k = 1; k <= 3; k++) {
        Case c;
        case_init(&c, 3, 16, 8, 5, k, 1.0f, 0.01f, 1.5f, 50 + k);
        MoEActs a;
        route_case(&c, &a);
        char what[64];
        snprintf(what, sizeof what, "random routing k=%d", k);
        check_routing_against_ref(&a, what);
        EXPECT(a.route.dropped > 0, "%s: no drop to test", what);
        moe_acts_free(&a);
        case_free(&c);
    }
    /* ties everywhere: Wr = 0, every probability 1/E. Top-k takes experts
     * 0..k-1, and each keeps the first cap tokens of every group. */
    for (int k = 1; k <= 2; k++) {
        Case c;
        case_init(&c, 2, 12, 8, 4, k, 1.0f, 0.01f, 0.0f, 60);
        MoEActs a;
        route_case(&c, &a);
        check_routing_against_ref(&a, "uniform router (ties)");
        const MoERouting *r = &a.route;
        const int S = c.s.S, cap = c.s.cap;
        int bad = 0;
        for (int t = 0; t < c.s.N; t++)
            for (int j = 0; j < k; j++)
                bad += r->choice[t * k + j] != j || (r->slots_h[t * k + j] >= 0) != (t % S < cap);
        EXPECT(bad == 0 && r->A == k * c.s.G * cap, "ties k=%d: %d wrong, %d kept", k, bad, r->A);
        /* (d) f = 1/k on k experts, P = 1/E: aux = alpha E k (1/k)(1/E) = alpha */
        EXPECT(fabsf(r->aux - c.s.aux_alpha) <= 1e-7f, "uniform router: aux %.9g, want alpha %g",
               r->aux, c.s.aux_alpha);
        moe_acts_free(&a);
        case_free(&c);
    }
    /* equal rows: tokens 1, 4, 7... of each group are copies of token 0 of
     * theirs, so their probabilities tie at every expert; the lower token
     * index wins a place. */
    {
        Case c;
        case_init(&c, 2, 12, 8, 4, 2, 0.5f, 0.01f, 1.5f, 70);
        float *x = c.theta + c.off[T_X];
        for (int t = 0; t < c.s.N; t++)
            if (t % 3 == 1) memcpy(x + (size_t)t * 8, x + (size_t)(t - t % c.s.S) * 8, 8 * sizeof(float));
        MoEActs a;
        route_case(&c, &a);
        check_routing_against_ref(&a, "equal rows (ties between tokens)");
        moe_acts_free(&a);
        case_free(&c);
    }
    /* capacities */
    EXPECT(moe_capacity(12, 4, 1, 1.0f) == 3 && moe_capacity(12, 4, 2, 1.25f) == 8 &&
               moe_capacity(12, 4, 2, 0.0f) == 12 && moe_capacity(12, 4, 2, 4.0f) == 12 &&
               moe_capacity(10, 4, 1, 1.0f) == 3,
           "moe_capacity");
}

/* ---- (c) expert ranges assembled equal the whole layer ---- */

static double max_diff(const float *a, const float *b, size_t n) {
    double d = 0;
    for (size_t i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - b[i]));
    return d;
}

static void check_ranges(void) {
    Case c;
    case_init(&c, 2, 16, 8, 5, 2, 1.0f, 0.01f, 1.5f, 80);
    const MoEShape *s = &c.s;
    const int C = s->C, E = s->E;
    Run run;
    run_layer(&run, &c);
    const MoERouting *r = &run.a.route;
    MoEParams p = params_of(&c, c.theta);
    float *g = calloc(c.off[T_COUNT], sizeof(float)), *dx = calloc(c.off[1], sizeof(float));
    float *eo = calloc((size_t)s->A_max * C, sizeof(float));
    float *d_xd = calloc((size_t)s->A_max * C, sizeof(float));
    CHECK(g && dx && eo && d_xd, "out of memory");
    MoEParams gp = params_of(&c, g);
    /* each range in buffers of its own, holding only its rows, as an
     * expert-parallel rank would */
    const int bounds[] = {0, 1, 3, E};
    for (int b = 0; b < 3; b++) {
        const int e0 = bounds[b], n = bounds[b + 1] - e0;
        const int rows = r->offsets[e0 + n] - r->offsets[e0];
        const size_t rc = (size_t)rows * C, rh = rc * 4;
        float *in = malloc(rc * sizeof(float) + 1), *out = malloc(rc * sizeof(float) + 1);
        float *h = malloc(rh * sizeof(float) + 1), *act = malloc(rh * sizeof(float) + 1);
        float *da = malloc(rh * sizeof(float) + 1), *dp = malloc(rh * sizeof(float) + 1);
        float *din = calloc(rc + 1, sizeof(float));
        CHECK(in && out && h && act && da && dp && din, "out of memory");
        memcpy(in, run.a.xd + (size_t)r->offsets[e0] * C, rc * sizeof(float));
        MoEParams pr = moe_params_from(&p, e0, C), gr = moe_params_from(&gp, e0, C);
        moe_experts_forward(out, h, act, in, r->counts + e0, n, &pr, C);
        memcpy(eo + (size_t)r->offsets[e0] * C, out, rc * sizeof(float));
        moe_experts_backward(din, &gr, da, dp, run.sc.d_eo + (size_t)r->offsets[e0] * C, in, h,
                             act, r->counts + e0, n, &pr, C);
        memcpy(d_xd + (size_t)r->offsets[e0] * C, din, rc * sizeof(float));
        free(in), free(out), free(h), free(act), free(da), free(dp), free(din);
    }
    const size_t AC = (size_t)r->A * C;
    double worst = max_diff(eo, run.a.eo, AC);
    worst = fmax(worst, max_diff(d_xd, run.sc.d_xd, AC));
    for (int t = T_FCW; t < T_COUNT; t++)
        worst = fmax(worst, max_diff(g + c.off[t], run.grads + c.off[t], c.off[t + 1] - c.off[t]));
    /* combine and dispatch backward from the assembled rows */
    float *y = malloc((size_t)s->N * C * sizeof(float));
    CHECK(y, "out of memory");
    moe_combine(y, &run.a, eo);
    moe_dispatch_backward(dx, d_xd, &run.a);
    worst = fmax(worst, max_diff(y, run.y, (size_t)s->N * C));
    EXPECT(worst <= 1e-6, "expert ranges [0,1) [1,3) [3,5) differ from the whole by %g", worst);
    printf("expert ranges: assembled outputs and gradients differ from the whole by %g\n", worst);
    free(g), free(dx), free(eo), free(d_xd), free(y);
    run_free(&run);
    case_free(&c);
}

/* ---- (d) memory: the allocator's counts are the planner's formula ---- */

/* the allocator's bytes for s's acts and scratch against the formulas */
static void check_alloc(const MoEShape *s) {
    const size_t act0 = mem_current_bytes(MEM_ACTIVATIONS), ws0 = mem_current_bytes(MEM_WORKSPACE);
    MoEActs a;
    MoEScratch sc;
    moe_acts_alloc(&a, s);
    moe_scratch_alloc(&sc, s);
    EXPECT(mem_current_bytes(MEM_ACTIVATIONS) - act0 == 4 * moe_kept_floats(s),
           "ep %d: activations %zu bytes, moe_kept_floats says %zu", s->ep,
           mem_current_bytes(MEM_ACTIVATIONS) - act0, 4 * moe_kept_floats(s));
    EXPECT(mem_current_bytes(MEM_WORKSPACE) - ws0 == 4 * moe_scratch_floats(s),
           "ep %d: workspace %zu bytes, moe_scratch_floats says %zu", s->ep,
           mem_current_bytes(MEM_WORKSPACE) - ws0, 4 * moe_scratch_floats(s));
    moe_acts_free(&a);
    moe_scratch_free(&sc);
}

static void check_memory(void) {
    MoEShape s;
    moe_shape_init(&s, 64, 16, 8, 4, 2, 0.5f, 0.01f);
    EXPECT(s.cap == 4 && s.A_max == 4 * 4 * 4, "cap %d A_max %d", s.cap, s.A_max);  /* G E cap < N k */
    check_alloc(&s);
    /* expert parallelism: an owner of 2 of the 4 experts gets at most
     * min(A_max, 2 G cap) = 32 rows from each of the 2 sources */
    moe_shape_set_ep(&s, 2);
    EXPECT(s.R_max == 2 * 32 && s.X_max == s.R_max, "ep 2: R_max %d X_max %d", s.R_max, s.X_max);
    check_alloc(&s);
    moe_shape_init(&s, 64, 16, 8, 4, 2, 0.0f, 0.01f);
    EXPECT(s.cap == 16 && s.A_max == 64 * 2, "dropless: cap %d A_max %d", s.cap, s.A_max);
    check_alloc(&s);
    /* dropless over 4 ranks: one expert each, at most min(128, G cap = 64) rows per source */
    moe_shape_set_ep(&s, 4);
    EXPECT(s.R_max == 4 * 64, "dropless ep 4: R_max %d", s.R_max);
    check_alloc(&s);
}

/* ---- the dump for tests/torch_moe.py ----
 * Little-endian, no padding:
 *   int32   magic 0x31454F4D ("MOE1"), N, S, C, E, k, cap, dropped
 *   float32 capacity_factor, aux_alpha, aux
 *   int32   counts[E]
 *   float32 x, wr, fcw, fcb, fcprojw, fcprojb   (the inputs, Case's order)
 *   float32 w[N C]                              (dy: loss = sum(w y) + aux)
 *   float32 y[N C]
 *   float32 dx, dwr, dfcw, dfcb, dfcprojw, dfcprojb */
static void write_all(FILE *f, const void *p, size_t size, size_t n, const char *path) {
    IO_CHECK(fwrite(p, size, n, f) == n, "cannot write %s", path);
}

static int dump(const char *path, int k, float cf) {
    Case c;
    case_init(&c, 3, 16, 16, 4, k, cf, 0.1f, 1.5f, 90 + k);
    Run run;
    run_layer(&run, &c);
    const MoEShape *s = &c.s;
    FILE *f = fopen(path, "wb");
    IO_CHECK(f, "cannot open %s", path);
    const int32_t head[8] = {0x31454F4D, s->N, s->S, s->C, s->E, s->k, s->cap, run.a.route.dropped};
    const float fhead[3] = {s->capacity_factor, s->aux_alpha, run.a.route.aux};
    write_all(f, head, sizeof head[0], 8, path);
    write_all(f, fhead, sizeof fhead[0], 3, path);
    write_all(f, run.a.route.counts, sizeof(int), (size_t)s->E, path);
    write_all(f, c.theta, sizeof(float), c.off[T_COUNT], path);
    write_all(f, c.w, sizeof(float), (size_t)s->N * s->C, path);
    write_all(f, run.y, sizeof(float), (size_t)s->N * s->C, path);
    write_all(f, run.grads, sizeof(float), c.off[T_COUNT], path);
    IO_CHECK(fclose(f) == 0, "cannot write %s", path);
    printf("dump: N %d S %d C %d E %d k %d cap %d, %d of %d assignments dropped, aux %.6g\n",
           s->N, s->S, s->C, s->E, k, s->cap, run.a.route.dropped, s->N * k, run.a.route.aux);
    run_free(&run);
    case_free(&c);
    return 0;
}

int main(int argc, char **argv) {
    program_set_name(argv[0]);
    kernels_set_cpu_backward(program_backward_kernels());
    if (argc > 1) {
        if (argc != 5 || strcmp(argv[1], "--dump") != 0)
            USER_ERROR("usage: %s [--dump FILE K CAPACITY_FACTOR]", g_program_name);
        return dump(argv[2], atoi(argv[3]), (float)atof(argv[4]));
    }
    check_gradients(1, 1.0f, 10);
    check_gradients(2, 1.0f, 20);
    check_gradients(1, 0.0f, 30);
    check_gradients(2, 0.0f, 40);
    check_routing();
    check_ranges();
    check_memory();
    return unit_report("test_moe");
}
