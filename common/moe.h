/* moe.h: a mixture-of-experts MLP (lab 08), the layer that takes the place
 * of a block's MLP: x2 = x1 + MoE(ln2(x1)), the caller adding the residual.
 *
 * Shapes. x (N, C), rows = tokens, N = G groups of S tokens. A routing
 * group is one sequence (S = T): capacity and the auxiliary loss then
 * depend only on a sequence's tokens, so every data- or expert-parallel
 * layout routes a token exactly as one device does.
 *
 * The layer (Switch Transformer / GShard style):
 *   router    logits (N, E) = x Wr^T (Wr (E, C), no bias), probs = softmax
 *             over the E experts of each row;
 *   top-k     each token picks its k most probable experts (ties: the lower
 *             expert index first); an assignment's weight is that expert's
 *             softmax probability, NOT renormalized over the k chosen (so a
 *             token's weights sum to less than 1 when k < E, and the router
 *             learns through the size of the weights, as in Switch);
 *   capacity  per group and expert at most cap = ceil(S k / E * capacity_factor)
 *             assignments (capacity_factor 0: dropless, cap = S; never more
 *             than S, as a token picks an expert once); an expert keeps the
 *             ones with the highest probability (ties: the lower token index
 *             first) and drops the rest. A dropped assignment contributes
 *             nothing; a token with all k dropped passes only through the
 *             caller's residual;
 *   experts   E MLPs, expert e: out = fcproj(gelu_tanh(fc(in))), fc (4C, C)
 *             + b, fcproj (C, 4C) + b, stored stacked so that a shard map can
 *             hold a range of experts: fcw (E 4C, C), fcb (E 4C), fcprojw
 *             (E C, 4C), fcprojb (E C);
 *   combine   y[t] = sum over t's kept assignments of weight * expert output;
 *   aux loss  alpha E sum_i f_i P_i per group, averaged over the G groups:
 *             f_i the fraction of the group's S k assignments routed to
 *             expert i before drops (a count: no gradient), P_i the mean of
 *             probs[:, i] over the group's tokens (the gradient's path).
 *             Uniform routing gives alpha; collapse onto one expert, alpha E.
 *
 * Phases, so that expert parallelism can put an all-to-all-v between them:
 *   (1) route     router, top-k, capacity -> the routing (MoERouting): per
 *                 expert its kept rows, assignments ordered by expert then
 *                 token (expert e's rows are offsets[e] .. offsets[e+1] of
 *                 the dispatched buffer, A = offsets[E] of them);
 *   (2) dispatch  xd (A, C) = the kept assignments' rows of x, in that order;
 *   (3) experts   on a contiguous range of experts [e0, e0 + n): their
 *                 counts[e0..], their rows of xd, their slices of the
 *                 stacked weights (moe_params_from);
 *   (4) combine   y from the expert outputs, through each token's slots.
 * and the backward of each, in reverse order. Backward functions ACCUMULATE
 * into their gradients (kernels.h's convention), the caller zeroes them.
 *
 * The routing decisions are made on the host: the probabilities (N E
 * floats) are copied there (device_copy, which waits for the GPU) and the
 * index lists and weights copied back; the router's backward likewise
 * builds d probs (N, E) on the host from the A combine-weight gradients.
 * That is O(N E + A) bytes each way per layer and call, against the
 * experts' O(A C) work on the device; a device-side router would remove it.
 *
 * Memory. Everything the backward pass needs is in MoEActs, sized for the
 * worst case A_max = min(N k, G E cap), so the bytes do not depend on the
 * routing: the device buffers are MEM_ACTIVATIONS (MoEActs) and
 * MEM_WORKSPACE (MoEScratch), moe_kept_floats and moe_scratch_floats count
 * them for the memory planner. The routing's host bookkeeping (O(N E + N k)
 * ints and floats) is plain host memory, not counted.
 *
 * Expert parallelism (lab 08; moe_shape_set_ep): ep ranks each hold E / ep
 * experts, and the experts phase runs on the rows the owner RECEIVES from
 * the ep ranks, not on its own xd. From one source, at most min(A_max,
 * (E/ep) G cap) rows go to one owner (its experts' capacity in the
 * source's groups), so an owner gets at most R_max = ep min(A_max, (E/ep)
 * G cap) rows; the experts' h and act then have R_max rows (X_max below:
 * A_max without expert parallelism), and the received rows xr, their
 * outputs eor and, in the scratch, d_eor and d_xr R_max rows each.
 */
#ifndef MOE_H
#define MOE_H

#include <stddef.h>

typedef struct {
    int N, S, G;   /* rows, tokens per routing group, groups N / S */
    int C, E, k;   /* channels, experts, experts per token (k <= E) */
    int cap;       /* kept assignments per expert per group */
    int A_max;     /* min(N k, G E cap): the most assignments kept */
    float capacity_factor, aux_alpha;
    /* expert parallelism: ep ranks of E / ep experts each (1: none); the
     * rows an owner receives at most (0 without), and the rows the experts
     * phase runs on at most: A_max without, R_max with */
    int ep, R_max, X_max;
} MoEShape;

/* ceil(S k / E * capacity_factor) in double, at most S; S when
 * capacity_factor is 0 (dropless) */
int moe_capacity(int S, int E, int k, float capacity_factor);
/* N a multiple of S; dies on a shape that is not */
void moe_shape_init(MoEShape *s, int N, int S, int C, int E, int k, float capacity_factor,
                    float aux_alpha);
/* the same layer with its experts split over ep ranks (ep divides E): sets
 * ep, R_max and X_max */
void moe_shape_set_ep(MoEShape *s, int ep);

/* The layer's parameters, or their gradients: pointers into the caller's
 * buffers, shapes as above (wr (E, C); expert tensors stacked). */
typedef struct {
    float *wr, *fcw, *fcb, *fcprojw, *fcprojb;
} MoEParams;
/* p with its expert tensors advanced to expert e0 (wr unchanged): the
 * weights of experts [e0, ...) as the experts phase takes them */
MoEParams moe_params_from(const MoEParams *p, int e0, int C);

/* an assignment competing for a place: token t's j-th choice, probability p */
typedef struct {
    float p;
    int t, j;
} MoECandidate;

/* The routing of one call. Host arrays (_h) and their device copies. */
typedef struct {
    int A;            /* kept assignments */
    int dropped;      /* N k - A: assignments over capacity */
    float aux;        /* the auxiliary loss (alpha included) */
    int *counts;      /* (E) kept assignments per expert: its load */
    int *offsets;     /* (E + 1) first row of each expert in xd; offsets[E] = A */
    int *token_h;     /* (A_max) token of kept assignment a */
    float *weight_h;  /* (A_max) its weight, probs[token, expert] */
    int *expert_h;    /* (A_max) its expert */
    int *slots_h;     /* (N k) kept assignment of token t's j-th choice, -1 if dropped */
    int *choice;      /* (N k) token t's j-th expert, most probable first */
    int *assigned;    /* (G E) assignments per group and expert before drops */
    float *probs_h;   /* (N E) host copy of probs */
    float *dprobs_h;  /* (N E) the router backward's d probs, built here */
    float *dweight_h; /* (A_max) host copy of the weights' gradients */
    MoECandidate *cand; /* (S) one expert's candidates in a group, sorted */
    /* device copies (the current device's memory; MEM_ACTIVATIONS) */
    int *token, *slots;
    float *weight;
} MoERouting;

/* What the forward pass keeps for the backward pass (device, MEM_ACTIVATIONS) */
typedef struct {
    MoEShape shape;
    MoERouting route;
    float *probs;  /* (N, E) router probabilities */
    float *xd;     /* (A_max, C) dispatched rows of x, by expert */
    float *h;      /* (X_max, 4C) fc outputs, before GELU */
    float *act;    /* (X_max, 4C) after GELU */
    float *eo;     /* (A_max, C) expert outputs (under ep, back from the owners) */
    /* expert parallelism only (else NULL): the rows this rank's experts
     * received, by source rank then local expert, and their outputs */
    float *xr;     /* (R_max, C) */
    float *eor;    /* (R_max, C) */
    int *peer_counts; /* host (ep E/ep): rows from source s for local expert e at
                         s E/ep + e (not counted: host bookkeeping) */
} MoEActs;

/* Backward scratch (device, MEM_WORKSPACE) */
typedef struct {
    float *d_eo;     /* (A_max, C) d expert outputs */
    float *d_xd;     /* (A_max, C) d dispatched rows */
    float *d_act;    /* (X_max, 4C) */
    float *d_pre;    /* (X_max, 4C) */
    float *dweight;  /* (A_max) d combine weights */
    float *dprobs;   /* (N, E) d probs, turned into d logits in place */
    /* expert parallelism only (else NULL): d eor and d xr, (R_max, C) each */
    float *d_eor, *d_xr;
} MoEScratch;

/* 4-byte words (floats, and the int index lists) of MoEActs' device
 * buffers: N E + A_max (2 C + 2) + X_max 8 C + N k + R_max 2 C; and of
 * MoEScratch's: N E + A_max (2 C + 1) + X_max 8 C + R_max 2 C (without
 * expert parallelism N E + A_max (10 C + 2) + N k and N E + A_max (10 C +
 * 1)) */
size_t moe_kept_floats(const MoEShape *s);
size_t moe_scratch_floats(const MoEShape *s);

void moe_acts_alloc(MoEActs *a, const MoEShape *s);
void moe_acts_free(MoEActs *a);
void moe_scratch_alloc(MoEScratch *sc, const MoEShape *s);
void moe_scratch_free(MoEScratch *sc);

/* ---- forward phases ---- */
/* (1) probs, the routing, its statistics (aux, dropped, counts) */
void moe_route(MoEActs *a, const float *x, const float *wr);
/* (2) xd (A, C) = x's rows of the kept assignments */
void moe_dispatch(float *xd, const MoEActs *a, const float *x);
/* (3) experts [e0, e0 + n) on their rows: in, h, act, out are those rows
 * (counts[0..n) of them, expert by expert), p the range's weights
 * (moe_params_from(whole, e0)), counts = route.counts + e0 */
void moe_experts_forward(float *out, float *h, float *act, const float *in, const int *counts,
                         int n, const MoEParams *p, int C);
/* (4) y (N, C) = sum of each token's weighted expert outputs eo (overwritten) */
void moe_combine(float *y, const MoEActs *a, const float *eo);
/* the four on the whole layer: y (N, C) */
void moe_forward(float *y, MoEActs *a, const MoEParams *p, const float *x);

/* ---- backward phases (reverse order) ---- */
/* (4) d_eo (A, C) = weight dy[token] (overwritten), dweight (A) = dy[token] . eo */
void moe_combine_backward(float *d_eo, float *dweight, const float *dy, const MoEActs *a,
                          const float *eo);
/* (3) d_in += rows' gradient, g += the range's weight gradients (g as
 * moe_params_from of the whole gradients); d_act, d_pre: the range's rows
 * of scratch (overwritten) */
void moe_experts_backward(float *d_in, const MoEParams *g, float *d_act, float *d_pre,
                          const float *d_out, const float *in, const float *h, const float *act,
                          const int *counts, int n, const MoEParams *p, int C);
/* (2) dx[token] += d_xd rows (through each token's slots: deterministic) */
void moe_dispatch_backward(float *dx, const float *d_xd, const MoEActs *a);
/* (1) dx += and dwr += through the softmax, from dweight (A) and the aux
 * loss scaled by daux = d(total loss)/d(aux); dprobs (N, E) scratch */
void moe_route_backward(float *dx, float *dwr, float *dprobs, const float *dweight,
                        MoEActs *a, const float *x, const float *wr, float daux);
/* the whole layer's backward from dy (N, C): dx += , g += */
void moe_backward(float *dx, const MoEParams *g, const float *dy, MoEActs *a,
                  const MoEScratch *sc, const MoEParams *p, const float *x, float daux);

#endif
