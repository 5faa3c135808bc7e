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
    schedule_add(s, r, kind, micro, chunk, to % s->ranks);
    return 1;
}

/* Make the last n ops of rank r one batch; n = 0 (no message) does nothing. */
static void end_batch(Schedule *s, int r, int n) {
    if (n > 0) schedule_batch(s, r, n);
}

static int min_int(int a, int b) { return a < b ? a : b; }

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

Schedule *schedule_by_name(const char *name, int p, int m, int v) {
    char why[256];
    if (pipe_schedule_problem(name, p, m, v, why, sizeof why)) USER_ERROR("%s", why);
    if (strcmp(name, "1f1b-unbatched") == 0) return schedule_1f1b_unbatched(p, m);
    if (strcmp(name, "gpipe") == 0) return schedule_gpipe(p, m);
    if (strcmp(name, "1f1b") == 0) return schedule_1f1b(p, m);
    if (strcmp(name, "interleaved") == 0) return schedule_interleaved(p, m, v);
    return schedule_zb_h1(p, m);  /* the one name left */
}
