/* Lab 06: pipeline schedules. Read schedules.h first, then README.md. You
 * write four generators: each builds every rank's list of ops with the
 * helpers below and returns the schedule. The helpers take care of the
 * bookkeeping (which rank is a stage's neighbour, which stages send
 * nothing); what you decide is the order, and which messages go together
 * in one batch.
 *
 * Check your work:
 *   ./build/labs/06_pipeline/pipeline_schedule --schedule gpipe -p 4 -m 8 --comm --out /tmp/pp
 * prints each rank's list, what the validator says about it, and the
 * bubble next to its formula; /tmp/pp/gantt.png draws the timeline.
 */
#include "schedules.h"

#include <string.h>

#include "check.h"

/* A compute op (F, B, I or W) of micro-batch `micro` on rank r's chunk. */
static void compute(Schedule *s, int r, PipeOpKind kind, int micro, int chunk) {
    schedule_add(s, r, kind, micro, chunk, -1);
}

/* A message of micro-batch `micro` on rank r's chunk: SA and RG go to or
 * come from the next stage, RA and SG the previous one. Adds the op with
 * its peer and returns 1, or adds nothing and returns 0 when the stage has
 * no such message: the first stage receives no activation (it reads the
 * tokens) and sends no gradient, the last sends no activation and
 * receives no gradient (the loss is computed there), and with one rank
 * every stage is on rank 0. So the messages of one batch can be counted:
 *   end_batch(s, r, message(s, r, PIPE_SEND_ACT, ...) + message(s, r, PIPE_RECV_GRAD, ...));
 */
static int message(Schedule *s, int r, PipeOpKind kind, int micro, int chunk) {
    int stage = schedule_stage_of(s, r, chunk);
    int to = kind == PIPE_SEND_ACT || kind == PIPE_RECV_GRAD ? stage + 1 : stage - 1;
    if (s->ranks == 1 || to < 0 || to >= schedule_stages(s)) return 0;
    schedule_add(s, r, kind, micro, chunk, schedule_rank_of(s, to, micro));
    return 1;
}

/* Make the last n ops of rank r one batch; n = 0 (no message) does nothing. */
static void end_batch(Schedule *s, int r, int n) {
    if (n > 0) schedule_batch(s, r, n);
}

static int min_int(int a, int b) { return a < b ? a : b; }

/* DualPipe's bookkeeping for one rank r (the second extension): which
 * micro-batch each op takes, the messages since the last compute op, and
 * the weight gradients put off. A phase is a direction as r sees it:
 * phase 0 the micro-batches that enter at r's own end of the pipeline
 * (rank 0's for the first half of the ranks, rank p - 1's for the second),
 * phase 1 those from the far end; phase ^ (r >= p/2) is the local chunk. */
typedef struct {
    Schedule *s;
    int r;
    int next[PIPE_KINDS][2];  /* [kind][chunk]: ops of that kind taken so far */
    int pending;              /* messages added since the last compute op */
    int deferred[128][2];     /* (micro-batch, chunk) whose W is put off: a ring, */
    int first_deferred, last_deferred;  /* oldest first */
} DualRank;

static int dual_chunk(const DualRank *d, int phase) {
    return phase ^ (d->r >= d->s->ranks / 2);
}
/* The next micro-batch of `kind` on the phase's chunk: each direction
 * takes its m / 2 micro-batches in order, chunk 1's numbered from m / 2. */
static int dual_take(DualRank *d, PipeOpKind kind, int chunk) {
    return chunk * (d->s->micro_batches / 2) + d->next[kind][chunk]++;
}
/* A message: queued into the batch the next compute op closes, as
 * DeepSeek's DualPipe posts every message between two computations with
 * one batch_isend_irecv and waits for all of it before computing. */
static void dual_message(DualRank *d, PipeOpKind kind, int phase) {
    int c = dual_chunk(d, phase);
    d->pending += message(d->s, d->r, kind, dual_take(d, kind, c), c);
}
static void dual_compute(DualRank *d, PipeOpKind kind, int phase) {
    end_batch(d->s, d->r, d->pending);
    d->pending = 0;
    /* B and I take the same turns: a split backward is still the backward */
    int c = dual_chunk(d, phase);
    int micro = dual_take(d, kind == PIPE_BACKWARD_INPUT ? PIPE_BACKWARD : kind, c);
    compute(d->s, d->r, kind, micro, c);
    if (kind == PIPE_BACKWARD_INPUT) {  /* its W later, in the order the I's ran */
        CHECK(d->last_deferred - d->first_deferred < 128,
              "DualPipe: more than 128 weight gradients put off");
        int *w = d->deferred[d->last_deferred++ % 128];
        w[0] = micro;
        w[1] = c;
    }
}
/* The oldest weight gradient put off (zero-bubble's W). */
static void dual_weight(DualRank *d) {
    end_batch(d->s, d->r, d->pending);
    d->pending = 0;
    CHECK(d->first_deferred < d->last_deferred, "DualPipe: a W with no I before it");
    int *w = d->deferred[d->first_deferred++ % 128];
    compute(d->s, d->r, PIPE_BACKWARD_WEIGHT, w[0], w[1]);
}

/* SOLUTION ONLY BEGIN */
/* Forward and backward (B or I) with lone messages: receive the input just
 * before, send the result just after. Safe where the neighbours' messages
 * do not cross: in GPipe, and in 1F1B's warm-up and cool-down. */
static void forward_alone(Schedule *s, int r, int micro) {
    message(s, r, PIPE_RECV_ACT, micro, 0);
    compute(s, r, PIPE_FORWARD, micro, 0);
    message(s, r, PIPE_SEND_ACT, micro, 0);
}
static void backward_alone(Schedule *s, int r, PipeOpKind kind, int micro) {
    message(s, r, PIPE_RECV_GRAD, micro, 0);
    compute(s, r, kind, micro, 0);
    message(s, r, PIPE_SEND_GRAD, micro, 0);
}

/* 1F1B, with whole backwards (split = 0) or split ones (ZB-H1). Rank r
 * starts with p - r - 1 forwards (capped at m), one for each stage after
 * it: when micro-batch 0 reaches the last stage every rank is busy, and
 * from then on each backward frees an activation before the next forward
 * makes one, so rank r holds at most p - r. In the steady state, after
 * forward k rank r sends k's activation to r + 1 while r + 1 sends it the
 * gradient of micro-batch i, and after backward i it sends i's gradient
 * to r - 1 while r - 1 sends it the activation of k + 1: both ranks send
 * first, so under rendezvous each such crossing pair must be one batch
 * (Megatron-LM's send_forward_recv_backward, send_backward_recv_forward).
 * Warm-up and cool-down messages go one way only: lone ops.
 * With split backwards (ZB-H1), rank r's W of micro-batch i runs right
 * after its I of micro-batch i + r: r weight gradients stay pending, and
 * the last r W's fill the cool-down's gaps. There the pair after I is not
 * batched: a batch would hold the rank until the next activation arrives,
 * and the W that should fill that wait would run after it. Lone, the
 * receive goes first: r - 1 sends that activation before it waits for
 * this gradient, so neither rank waits for the other in a send. */
static Schedule *one_forward_one_backward(int p, int m, int split) {
    Schedule *s = schedule_create(p, m, 1);
    PipeOpKind backward = split ? PIPE_BACKWARD_INPUT : PIPE_BACKWARD;
    for (int r = 0; r < p; r++) {
        int warm = min_int(p - r - 1, m), steady = m - warm, weights = 0;
        for (int i = 0; i < warm; i++) forward_alone(s, r, i);
        if (steady > 0) message(s, r, PIPE_RECV_ACT, warm, 0);
        for (int i = 0; i < m; i++) {  /* backward i, with forward warm + i before it */
            if (i < steady) {
                int k = warm + i;
                compute(s, r, PIPE_FORWARD, k, 0);
                end_batch(s, r, message(s, r, PIPE_SEND_ACT, k, 0) +
                                    message(s, r, PIPE_RECV_GRAD, i, 0));
                compute(s, r, backward, i, 0);
                int next = i < steady - 1;  /* another forward follows: receive its input */
                if (split) {
                    if (next) message(s, r, PIPE_RECV_ACT, k + 1, 0);
                    message(s, r, PIPE_SEND_GRAD, i, 0);
                } else {
                    end_batch(s, r, message(s, r, PIPE_SEND_GRAD, i, 0) +
                                        (next ? message(s, r, PIPE_RECV_ACT, k + 1, 0) : 0));
                }
            } else {
                backward_alone(s, r, backward, i);
            }
            if (split && i >= r) compute(s, r, PIPE_BACKWARD_WEIGHT, weights++, 0);
        }
        while (split && weights < m) compute(s, r, PIPE_BACKWARD_WEIGHT, weights++, 0);
    }
    return s;
}

/* Megatron-LM's order for the interleaved schedule: every rank's k-th
 * forward (and k-th backward) is this micro-batch, on the chunk below. */
static int interleaved_micro(const Schedule *s, int k) {
    int p = s->ranks;
    return k / (p * s->chunks) * p + k % p;
}
static int interleaved_chunk(const Schedule *s, int k, int forward) {
    int c = k / s->ranks % s->chunks;
    return forward ? c : s->chunks - 1 - c;
}

/* The message of rank r's k-th forward (forward = 1: RA or SA) or k-th
 * backward (RG or SG) in the interleaved order; 0 past the last one. */
static int interleaved_message(Schedule *s, int r, PipeOpKind kind, int k, int forward) {
    if (k >= s->micro_batches * s->chunks) return 0;
    return message(s, r, kind, interleaved_micro(s, k), interleaved_chunk(s, k, forward));
}
static void interleaved_compute(Schedule *s, int r, PipeOpKind kind, int k, int forward) {
    compute(s, r, kind, interleaved_micro(s, k), interleaved_chunk(s, k, forward));
}

/* DualPipe's compound steps, each receiving what its computation needs in
 * the batch before it and queueing what it made for the batch after. */
static void dual_forward(DualRank *d, int phase, int recv, int send) {
    if (recv) dual_message(d, PIPE_RECV_ACT, phase);
    dual_compute(d, PIPE_FORWARD, phase);
    if (send) dual_message(d, PIPE_SEND_ACT, phase);
}
static void dual_backward(DualRank *d, int phase, int split, int send) {
    dual_message(d, PIPE_RECV_GRAD, phase);
    dual_compute(d, split ? PIPE_BACKWARD_INPUT : PIPE_BACKWARD, phase);
    if (send) dual_message(d, PIPE_SEND_GRAD, phase);
}
/* A forward of one phase and a whole backward of the other, the pair
 * DualPipe overlaps (F&B; here one after the other). */
static void dual_forward_backward(DualRank *d, int forward, int backward, int recv) {
    if (recv) dual_message(d, PIPE_RECV_ACT, forward);
    dual_message(d, PIPE_RECV_GRAD, backward);
    dual_compute(d, PIPE_FORWARD, forward);
    dual_compute(d, PIPE_BACKWARD, backward);
    dual_message(d, PIPE_SEND_ACT, forward);
    dual_message(d, PIPE_SEND_GRAD, backward);
}

/* Rank r's list, DeepSeek-V3's eight steps with h = min(r, p - 1 - r) the
 * rank's distance from its end and H = p / 2: phase 0 fills the pipeline
 * from this end, phase 1 arrives from the other; in the middle each
 * forward of one direction pairs with a backward of the other; the
 * backwards drain, some split so their W's fill the last gaps. */
static void dualpipe_rank(Schedule *s, int r) {
    const int p = s->ranks, H = p / 2, h = min_int(r, p - 1 - r), half = s->micro_batches / 2;
    const int middle = h == H - 1;
    DualRank d = {.s = s, .r = r};
    /* 1: 2 (H - h - 1) forwards of phase 0, before phase 1's first arrives */
    for (int i = 0; i < 2 * (H - h - 1); i++) dual_forward(&d, 0, 1, 1);
    /* 2: h + 1 pairs F0 F1; F0's send waits for the next batch but on the
     * middle ranks, which pass it straight to each other */
    dual_message(&d, PIPE_RECV_ACT, 0);
    for (int i = 0; i <= h; i++) {
        dual_forward(&d, 0, 0, middle);
        dual_message(&d, PIPE_RECV_ACT, 0);
        dual_forward(&d, 1, 1, !middle || i < h);
        if (!middle) dual_message(&d, PIPE_SEND_ACT, 0);
    }
    /* 3: H - h - 1 rounds B1 (split) W1 F1 */
    for (int i = 0; i < H - h - 1; i++) {
        dual_backward(&d, 1, 1, 1);
        dual_message(&d, PIPE_RECV_ACT, 1);
        dual_weight(&d);
        dual_forward(&d, 1, 0, 1);
    }
    /* 4, the steady state: m/2 - p + h + 1 rounds F0&B1, F1&B0 */
    for (int i = 0; i < half - p + h + 1; i++) {
        if (i == 0 && middle) {  /* not paired: the middle ranks wait for each other */
            dual_forward(&d, 0, 0, 0);
            dual_message(&d, PIPE_SEND_ACT, 1);
            dual_backward(&d, 1, 0, 0);
            dual_message(&d, PIPE_SEND_ACT, 0);
            dual_message(&d, PIPE_SEND_GRAD, 1);
        } else {
            dual_forward_backward(&d, 0, 1, i > 0);
        }
        dual_forward_backward(&d, 1, 0, 1);
    }
    /* 5: H - h - 1 rounds B1, F1&B0 */
    for (int i = 0; i < H - h - 1; i++) {
        dual_backward(&d, 1, 0, 1);
        dual_forward_backward(&d, 1, 0, 1);
    }
    /* 6: h + 1 rounds B1 B0, split from the middle round on */
    for (int i = 0, split = 0; i <= h; i++) {
        if (i == (h + 1) / 2 && h % 2 == 1) split = 1;
        dual_backward(&d, 1, split, 1);
        if (i == (h + 1) / 2 && h % 2 == 0) split = 1;
        dual_backward(&d, 0, split, 1);
    }
    /* 7: H - h - 1 rounds W, B0 (split) */
    for (int i = 0; i < H - h - 1; i++) {
        dual_weight(&d);
        dual_backward(&d, 0, 1, 1);
    }
    /* 8: the W's left */
    while (d.first_deferred < d.last_deferred) dual_weight(&d);
    end_batch(s, r, d.pending);
}
/* SOLUTION ONLY END */

Schedule *schedule_gpipe(int p, int m) {
    /* BEGIN SOLUTION */
    /* Every message goes one way down the pipeline (activations), then the
     * other (gradients): no two neighbours ever wait in a send to each
     * other, so lone messages are safe. The backwards go last micro-batch
     * first, as in GPipe's figure: the last stage has just computed
     * micro-batch m - 1's loss, and every rank then frees activations in
     * the reverse order it made them. With equal costs the timeline is the
     * same either way. */
    Schedule *s = schedule_create(p, m, 1);
    for (int r = 0; r < p; r++) {
        for (int i = 0; i < m; i++) forward_alone(s, r, i);
        for (int i = m - 1; i >= 0; i--) backward_alone(s, r, PIPE_BACKWARD, i);
    }
    return s;
    /* END SOLUTION */
}

Schedule *schedule_1f1b(int p, int m) {
    /* BEGIN SOLUTION */
    return one_forward_one_backward(p, m, 0);
    /* END SOLUTION */
}

Schedule *schedule_interleaved(int p, int m, int v) {
    /* BEGIN SOLUTION */
    /* Megatron-LM's forward_backward_pipelining_with_interleaving: after
     * each round of compute, one batch sends what the round made and
     * receives what the next round needs (the next forward's input, the
     * next backward's output gradient), so the messages of the round
     * between two neighbours all cross in one batch. Warm-up: rank r runs
     * (p - r - 1) 2 + (v - 1) p forwards: the first group's p micro-batches
     * on every chunk but the last, and two for each rank after it
     * (micro-batch 0's forward on the last chunk goes down to rank p - 1,
     * its backward comes back up). By then that gradient is arriving (the
     * batch after the last warm-up forward receives it), and in the steady
     * state forward and backward never wait for each other. */
    Schedule *s = schedule_create(p, m, v);
    int total = m * v;  /* forwards per rank, one per micro-batch and chunk */
    for (int r = 0; r < p; r++) {
        int warm = min_int((p - r - 1) * 2 + (v - 1) * p, total), steady = total - warm;
        interleaved_message(s, r, PIPE_RECV_ACT, 0, 1);
        for (int k = 0; k < warm; k++) {
            interleaved_compute(s, r, PIPE_FORWARD, k, 1);
            int n = interleaved_message(s, r, PIPE_SEND_ACT, k, 1) +
                    interleaved_message(s, r, PIPE_RECV_ACT, k + 1, 1);
            if (k == warm - 1) n += interleaved_message(s, r, PIPE_RECV_GRAD, 0, 0);
            end_batch(s, r, n);
        }
        for (int k = 0; k < total; k++) {  /* backward k, with forward warm + k before it */
            int f = warm + k;
            if (k < steady) interleaved_compute(s, r, PIPE_FORWARD, f, 1);
            interleaved_compute(s, r, PIPE_BACKWARD, k, 0);
            int n = (k < steady ? interleaved_message(s, r, PIPE_SEND_ACT, f, 1) : 0) +
                    interleaved_message(s, r, PIPE_SEND_GRAD, k, 0) +
                    (k < steady ? interleaved_message(s, r, PIPE_RECV_ACT, f + 1, 1) : 0) +
                    interleaved_message(s, r, PIPE_RECV_GRAD, k + 1, 0);
            end_batch(s, r, n);
        }
    }
    return s;
    /* END SOLUTION */
}

Schedule *schedule_zb_h1(int p, int m) {
    /* BEGIN SOLUTION */
    return one_forward_one_backward(p, m, 1);
    /* END SOLUTION */
}

/* The extension (README.md). */
Schedule *schedule_1f1b_unbatched(int p, int m) {
    /* BEGIN SOLUTION */
    /* The crossing is an order problem, not a batching one: in the steady
     * state rank r receives the next activation from r - 1 BEFORE it sends
     * r - 1 the gradient, and r - 1 sends that activation before it waits
     * for the gradient. Each link then carries one message at a time, in
     * the order both ends have it: r - 1 at SA(k + 1) meets r at RA(k + 1),
     * then r - 1 at RG(i) meets r at SG(i). */
    Schedule *s = schedule_create(p, m, 1);
    for (int r = 0; r < p; r++) {
        int warm = min_int(p - r - 1, m), steady = m - warm;
        for (int i = 0; i < warm; i++) forward_alone(s, r, i);
        if (steady > 0) message(s, r, PIPE_RECV_ACT, warm, 0);
        for (int i = 0; i < steady; i++) {
            int k = warm + i;
            compute(s, r, PIPE_FORWARD, k, 0);
            message(s, r, PIPE_SEND_ACT, k, 0);
            message(s, r, PIPE_RECV_GRAD, i, 0);
            compute(s, r, PIPE_BACKWARD, i, 0);
            if (i < steady - 1) message(s, r, PIPE_RECV_ACT, k + 1, 0);
            message(s, r, PIPE_SEND_GRAD, i, 0);
        }
        for (int i = steady; i < m; i++) backward_alone(s, r, PIPE_BACKWARD, i);
    }
    return s;
    /* END SOLUTION */
}

/* The second extension (README.md). */
Schedule *schedule_dualpipe(int p, int m) {
    /* BEGIN SOLUTION */
    Schedule *s = schedule_create_dual(p, m);
    for (int r = 0; r < p; r++) dualpipe_rank(s, r);
    return s;
    /* END SOLUTION */
}

Schedule *schedule_by_name(const char *name, int p, int m, int v) {
    char why[256];
    if (pipe_schedule_problem(name, p, m, v, why, sizeof why)) USER_ERROR("%s", why);
    if (strcmp(name, "1f1b-unbatched") == 0) return schedule_1f1b_unbatched(p, m);
    if (strcmp(name, "dualpipe") == 0) return schedule_dualpipe(p, m);
    if (strcmp(name, "gpipe") == 0) return schedule_gpipe(p, m);
    if (strcmp(name, "1f1b") == 0) return schedule_1f1b(p, m);
    if (strcmp(name, "interleaved") == 0) return schedule_interleaved(p, m, v);
    return schedule_zb_h1(p, m);  /* the one name left */
}
