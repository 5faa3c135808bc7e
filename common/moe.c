/* moe.c: the mixture-of-experts MLP of moe.h. */
#include "moe.h"

#include <math.h>
#include <stdlib.h>

#include "alloc.h"
#include "check.h"
#include "device.h"
#include "kernels.h"

int moe_capacity(int S, int E, int k, float capacity_factor) {
    if (capacity_factor <= 0.0f) return S;
    const double cap = ceil((double)S * k / E * capacity_factor);
    return cap < S ? (int)cap : S;
}

void moe_shape_init(MoEShape *s, int N, int S, int C, int E, int k, float capacity_factor,
                    float aux_alpha) {
    CHECK(S > 0 && N > 0 && N % S == 0, "MoE: %d rows are not whole groups of %d", N, S);
    CHECK(E > 0 && k > 0 && k <= E, "MoE: top-%d of %d experts", k, E);
    CHECK(capacity_factor >= 0.0f, "MoE: capacity factor %g < 0", capacity_factor);
    s->N = N, s->S = S, s->G = N / S, s->C = C, s->E = E, s->k = k;
    s->capacity_factor = capacity_factor, s->aux_alpha = aux_alpha;
    s->cap = moe_capacity(S, E, k, capacity_factor);
    const long long by_tokens = (long long)N * k, by_cap = (long long)s->G * E * s->cap;
    s->A_max = (int)(by_tokens < by_cap ? by_tokens : by_cap);
    s->ep = 1;
    s->R_max = 0;
    s->X_max = s->A_max;
}

void moe_shape_set_ep(MoEShape *s, int ep) {
    CHECK(ep >= 1 && s->E % ep == 0, "MoE: %d experts do not split over %d ranks", s->E, ep);
    s->ep = ep;
    if (ep == 1) {
        s->R_max = 0;
        s->X_max = s->A_max;
        return;
    }
    /* one source sends an owner at most its A_max rows, and at most cap
     * per group for each of the owner's E/ep experts */
    const long long by_cap = (long long)(s->E / ep) * s->G * s->cap;
    s->R_max = ep * (int)(s->A_max < by_cap ? s->A_max : by_cap);
    s->X_max = s->R_max;
}

MoEParams moe_params_from(const MoEParams *p, int e0, int C) {
    const size_t fc = (size_t)4 * C * C;
    MoEParams r = {p->wr, p->fcw + e0 * fc, p->fcb + (size_t)e0 * 4 * C, p->fcprojw + e0 * fc,
                   p->fcprojb + (size_t)e0 * C};
    return r;
}

size_t moe_kept_floats(const MoEShape *s) {
    const size_t C = s->C;
    return (size_t)s->N * s->E + (size_t)s->A_max * (2 * C + 2) + (size_t)s->X_max * 8 * C +
           (size_t)s->N * s->k + (size_t)s->R_max * 2 * C;
}

size_t moe_scratch_floats(const MoEShape *s) {
    const size_t C = s->C;
    return (size_t)s->N * s->E + (size_t)s->A_max * (2 * C + 1) + (size_t)s->X_max * 8 * C +
           (size_t)s->R_max * 2 * C;
}

static void *host_calloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size);
    CHECK(p, "MoE: out of host memory (%zu x %zu bytes)", n, size);
    return p;
}

static float *dev_floats(MemCategory c, size_t n) { return mem_alloc(c, n * sizeof(float)); }

/* n floats of c, or NULL when n is 0 (the expert-parallel buffers without it) */
static float *dev_floats_or_null(MemCategory c, size_t n) { return n ? dev_floats(c, n) : NULL; }

void moe_acts_alloc(MoEActs *a, const MoEShape *s) {
    const size_t N = s->N, E = s->E, k = s->k, A = s->A_max, C = s->C, X = s->X_max;
    const size_t R = s->R_max;
    a->shape = *s;
    MoERouting *r = &a->route;
    r->A = r->dropped = 0;
    r->aux = 0.0f;
    r->counts = host_calloc(E, sizeof(int));
    r->offsets = host_calloc(E + 1, sizeof(int));
    r->token_h = host_calloc(A, sizeof(int));
    r->weight_h = host_calloc(A, sizeof(float));
    r->expert_h = host_calloc(A, sizeof(int));
    r->slots_h = host_calloc(N * k, sizeof(int));
    r->choice = host_calloc(N * k, sizeof(int));
    r->assigned = host_calloc((size_t)s->G * E, sizeof(int));
    r->probs_h = host_calloc(N * E, sizeof(float));
    r->dprobs_h = host_calloc(N * E, sizeof(float));
    r->dweight_h = host_calloc(A, sizeof(float));
    r->cand = host_calloc((size_t)s->S, sizeof *r->cand);
    r->token = mem_alloc(MEM_ACTIVATIONS, A * sizeof(int));
    r->slots = mem_alloc(MEM_ACTIVATIONS, N * k * sizeof(int));
    r->weight = dev_floats(MEM_ACTIVATIONS, A);
    a->probs = dev_floats(MEM_ACTIVATIONS, N * E);
    a->xd = dev_floats(MEM_ACTIVATIONS, A * C);
    a->h = dev_floats(MEM_ACTIVATIONS, X * 4 * C);
    a->act = dev_floats(MEM_ACTIVATIONS, X * 4 * C);
    a->eo = dev_floats(MEM_ACTIVATIONS, A * C);
    a->xr = dev_floats_or_null(MEM_ACTIVATIONS, R * C);
    a->eor = dev_floats_or_null(MEM_ACTIVATIONS, R * C);
    a->peer_counts = s->ep > 1 ? host_calloc(E, sizeof(int)) : NULL;
}

void moe_acts_free(MoEActs *a) {
    MoERouting *r = &a->route;
    void *host[] = {r->counts,   r->offsets, r->token_h,  r->weight_h, r->expert_h, r->slots_h,
                    r->choice,   r->assigned, r->probs_h, r->dprobs_h, r->dweight_h, r->cand,
                    a->peer_counts};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) free(host[i]);
    void *dev[] = {r->token, r->slots, r->weight, a->probs, a->xd, a->h, a->act, a->eo,
                   a->xr, a->eor};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) mem_free(dev[i]);
}

void moe_scratch_alloc(MoEScratch *sc, const MoEShape *s) {
    const size_t A = s->A_max, C = s->C, X = s->X_max, R = s->R_max;
    sc->d_eo = dev_floats(MEM_WORKSPACE, A * C);
    sc->d_xd = dev_floats(MEM_WORKSPACE, A * C);
    sc->d_act = dev_floats(MEM_WORKSPACE, X * 4 * C);
    sc->d_pre = dev_floats(MEM_WORKSPACE, X * 4 * C);
    sc->dweight = dev_floats(MEM_WORKSPACE, A);
    sc->dprobs = dev_floats(MEM_WORKSPACE, (size_t)s->N * s->E);
    sc->d_eor = dev_floats_or_null(MEM_WORKSPACE, R * C);
    sc->d_xr = dev_floats_or_null(MEM_WORKSPACE, R * C);
}

void moe_scratch_free(MoEScratch *sc) {
    float *dev[] = {sc->d_eo, sc->d_xd, sc->d_act, sc->d_pre, sc->dweight, sc->dprobs,
                    sc->d_eor, sc->d_xr};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) mem_free(dev[i]);
}

/* ---- routing (host) ---- */

/* qsort's order for one expert's candidates in a group: probability
 * descending, then token ascending. Tokens are distinct, so the order is
 * total and the result does not depend on qsort's algorithm. */
static int by_prob_then_token(const void *pa, const void *pb) {
    const MoECandidate *a = pa, *b = pb;
    if (a->p != b->p) return a->p > b->p ? -1 : 1;
    return (a->t > b->t) - (a->t < b->t);
}

/* token t's k most probable experts into choice[t k ..], ties to the lower
 * index (strict >: the first maximum wins) */
static void top_k(int *choice, const float *p, int E, int k) {
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            int taken = 0;
            for (int i = 0; i < j; i++) taken |= choice[i] == e;
            if (!taken && (best < 0 || p[e] > p[best])) best = e;
        }
        choice[j] = best;
    }
}

void moe_route(MoEActs *a, const float *x, const float *wr) {
    const MoEShape *s = &a->shape;
    MoERouting *r = &a->route;
    const int N = s->N, S = s->S, E = s->E, k = s->k, C = s->C;
    matmul_forward(a->probs, x, wr, NULL, N, C, E);
    softmax_rows_forward(a->probs, a->probs, N, E);
    device_copy(r->probs_h, a->probs, (size_t)N * E * sizeof(float));

    for (int t = 0; t < N; t++) top_k(r->choice + (size_t)t * k, r->probs_h + (size_t)t * E, E, k);
    /* capacity: per group and expert, the candidates sorted; kept ones get
     * slot 0 for now (numbered below), dropped ones -1 */
    for (int i = 0; i < N * k; i++) r->slots_h[i] = -1;
    double aux = 0.0;
    for (int g = 0; g < s->G; g++) {
        for (int e = 0; e < E; e++) {
            int n = 0;
            for (int t = g * S; t < (g + 1) * S; t++)
                for (int j = 0; j < k; j++)
                    if (r->choice[(size_t)t * k + j] == e) {
                        r->cand[n].p = r->probs_h[(size_t)t * E + e];
                        r->cand[n].t = t;
                        r->cand[n++].j = j;
                    }
            r->assigned[g * E + e] = n;
            qsort(r->cand, (size_t)n, sizeof *r->cand, by_prob_then_token);
            for (int i = 0; i < n && i < s->cap; i++)
                r->slots_h[(size_t)r->cand[i].t * k + r->cand[i].j] = 0;
            /* f_e P_e = (n / (S k)) (sum_t p[t, e] / S) */
            double P = 0.0;
            for (int t = g * S; t < (g + 1) * S; t++) P += r->probs_h[(size_t)t * E + e];
            aux += (double)n / ((double)S * k) * (P / S);
        }
    }
    r->aux = (float)(s->aux_alpha * E * aux / s->G);

    /* number the kept assignments by expert, then token */
    int A = 0;
    for (int e = 0; e < E; e++) {
        r->offsets[e] = A;
        for (int t = 0; t < N; t++)
            for (int j = 0; j < k; j++) {
                const size_t i = (size_t)t * k + j;
                if (r->choice[i] != e || r->slots_h[i] < 0) continue;
                r->slots_h[i] = A;
                r->token_h[A] = t;
                r->expert_h[A] = e;
                r->weight_h[A] = r->probs_h[(size_t)t * E + e];
                A++;
            }
        r->counts[e] = A - r->offsets[e];
    }
    r->offsets[E] = A;
    r->A = A;
    r->dropped = N * k - A;
    device_copy(r->token, r->token_h, (size_t)A * sizeof(int));
    device_copy(r->weight, r->weight_h, (size_t)A * sizeof(float));
    device_copy(r->slots, r->slots_h, (size_t)N * k * sizeof(int));
}

/* ---- the other phases (device) ---- */

void moe_dispatch(float *xd, const MoEActs *a, const float *x) {
    gather_rows(xd, x, a->route.token, NULL, a->route.A, a->shape.C);
}

void moe_experts_forward(float *out, float *h, float *act, const float *in, const int *counts,
                         int n, const MoEParams *p, int C) {
    size_t row = 0;
    for (int e = 0; e < n; e++) {
        const int m = counts[e];
        if (m > 0) {
            const size_t fc = (size_t)4 * C * C;
            float *he = h + row * 4 * C, *ae = act + row * 4 * C;
            matmul_forward(he, in + row * C, p->fcw + e * fc, p->fcb + (size_t)e * 4 * C, m, C,
                           4 * C);
            gelu_forward(ae, he, (size_t)m * 4 * C);
            matmul_forward(out + row * C, ae, p->fcprojw + e * fc, p->fcprojb + (size_t)e * C, m,
                           4 * C, C);
        }
        row += (size_t)m;
    }
}

void moe_combine(float *y, const MoEActs *a, const float *eo) {
    gather_sum_rows(y, eo, a->route.slots, a->route.weight, a->shape.N, a->shape.k, a->shape.C,
                    0);
}

void moe_forward(float *y, MoEActs *a, const MoEParams *p, const float *x) {
    const MoEShape *s = &a->shape;
    moe_route(a, x, p->wr);
    moe_dispatch(a->xd, a, x);
    moe_experts_forward(a->eo, a->h, a->act, a->xd, a->route.counts, s->E, p, s->C);
    moe_combine(y, a, a->eo);
}

/* y[t] = sum_a w_a eo_a over t's kept a: d eo_a = w_a dy[t], d w_a = dy[t] . eo_a */
void moe_combine_backward(float *d_eo, float *dweight, const float *dy, const MoEActs *a,
                          const float *eo) {
    const MoERouting *r = &a->route;
    gather_rows(d_eo, dy, r->token, r->weight, r->A, a->shape.C);
    gather_row_dot(dweight, eo, dy, r->token, r->A, a->shape.C);
}

void moe_experts_backward(float *d_in, const MoEParams *g, float *d_act, float *d_pre,
                          const float *d_out, const float *in, const float *h, const float *act,
                          const int *counts, int n, const MoEParams *p, int C) {
    size_t row = 0;
    for (int e = 0; e < n; e++) {
        const int m = counts[e];
        if (m > 0) {
            const size_t fc = (size_t)4 * C * C, hrow = row * 4 * C, rows4 = (size_t)m * 4 * C;
            set_zero(d_act + hrow, rows4);
            set_zero(d_pre + hrow, rows4);
            matmul_backward(d_act + hrow, g->fcprojw + e * fc, g->fcprojb + (size_t)e * C,
                            d_out + row * C, act + hrow, p->fcprojw + e * fc, m, 4 * C, C);
            gelu_backward(d_pre + hrow, h + hrow, d_act + hrow, rows4);
            matmul_backward(d_in + row * C, g->fcw + e * fc, g->fcb + (size_t)e * 4 * C,
                            d_pre + hrow, in + row * C, p->fcw + e * fc, m, C, 4 * C);
        }
        row += (size_t)m;
    }
}

void moe_dispatch_backward(float *dx, const float *d_xd, const MoEActs *a) {
    gather_sum_rows(dx, d_xd, a->route.slots, NULL, a->shape.N, a->shape.k, a->shape.C, 1);
}

/* d probs[t, e] = d w of (t, e) when kept, plus the aux loss's
 *   d aux / d probs[t, e] = alpha E f_{g,e} / (G S),  f_{g,e} = assigned / (S k)
 * (t in group g); then through the softmax and the router's matmul. */
void moe_route_backward(float *dx, float *dwr, float *dprobs, const float *dweight,
                        MoEActs *a, const float *x, const float *wr, float daux) {
    const MoEShape *s = &a->shape;
    MoERouting *r = &a->route;
    const int N = s->N, E = s->E, S = s->S;
    device_copy(r->dweight_h, dweight, (size_t)r->A * sizeof(float));
    const double unit = (double)daux * s->aux_alpha * E / ((double)s->G * S * S * s->k);
    for (int t = 0; t < N; t++)
        for (int e = 0; e < E; e++)
            r->dprobs_h[(size_t)t * E + e] = (float)(unit * r->assigned[(t / S) * E + e]);
    for (int i = 0; i < r->A; i++)
        r->dprobs_h[(size_t)r->token_h[i] * E + r->expert_h[i]] += r->dweight_h[i];
    device_copy(dprobs, r->dprobs_h, (size_t)N * E * sizeof(float));
    softmax_rows_backward(dprobs, a->probs, N, E);
    matmul_backward(dx, dwr, NULL, dprobs, x, wr, N, s->C, E);
}

void moe_backward(float *dx, const MoEParams *g, const float *dy, MoEActs *a,
                  const MoEScratch *sc, const MoEParams *p, const float *x, float daux) {
    const MoEShape *s = &a->shape;
    const MoERouting *r = &a->route;
    moe_combine_backward(sc->d_eo, sc->dweight, dy, a, a->eo);
    set_zero(sc->d_xd, (size_t)r->A * s->C);
    moe_experts_backward(sc->d_xd, g, sc->d_act, sc->d_pre, sc->d_eo, a->xd, a->h, a->act,
                         r->counts, s->E, p, s->C);
    moe_dispatch_backward(dx, sc->d_xd, a);
    moe_route_backward(dx, g->wr, sc->dprobs, sc->dweight, a, x, p->wr, daux);
}
