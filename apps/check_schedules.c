/* check_schedules (`make check LAB=06`): lab 06's generators (schedules.h) for p = 1..6 ranks and m = 1..12
 * micro-batches (interleaved: v = 2..4 chunks, m a multiple of p): every
 * schedule passes the validator; with no message cost the simulated bubble
 * is the formula's, on every rank; each rank holds the activations the
 * schedule promises and runs its compute ops in the schedule's order; and
 * pipe_schedule_problem turns away what cannot be built. Built for each
 * copy of lab 06: build/labs/ checks the student's generators. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cli.h"
#include "schedule.h"
#include "schedules.h"
#include "unit.h"

#define MAX_P 6
#define MAX_M 12

static int min_int(int a, int b) { return a < b ? a : b; }

/* Any t_f, t_b: the 1F1B family's bubble does not depend on them. */
static const PipeCosts UNEQUAL = {.forward = 1, .backward = 2, .backward_input = 1,
                                  .backward_weight = 1, .send = 0, .weight_memory = 0.5};

/* Valid, or the validator's reason; returns whether it is. */
static int valid(const Schedule *s, const char *name) {
    char why[512] = "";
    int ok = schedule_validate(s, why, sizeof why) == 0;
    EXPECT(ok, "%s p %d m %d v %d: %s", name, s->ranks, s->micro_batches, s->chunks, why);
    return ok;
}

/* The overall and every rank's bubble fraction equal `want`. */
static void expect_bubble(const PipeTimeline *t, double want, const char *name, int p, int m,
                          int v) {
    EXPECT(fabs(t->bubble_fraction - want) < 1e-9, "%s p %d m %d v %d: bubble %.12f, want %.12f",
           name, p, m, v, t->bubble_fraction, want);
    for (int r = 0; r < p; r++)
        EXPECT(fabs(t->rank[r].bubble_fraction - want) < 1e-9,
               "%s p %d m %d v %d rank %d: bubble %.12f, want %.12f", name, p, m, v, r,
               t->rank[r].bubble_fraction, want);
}

/* Each rank's ops of each kind: one F and one backward (B, or I and W) per
 * micro-batch and chunk; a message for every stage boundary: rank r
 * receives activations (and sends gradients) for each of its chunks but
 * stage 0's, and sends activations (receives gradients) for each but the
 * last stage's. */
static void expect_counts(const PipeTimeline *t, const char *name, int p, int m, int v, int split) {
    for (int r = 0; r < p; r++) {
        const int *n = t->rank[r].count;
        int from_prev = p == 1 ? 0 : m * (v - (r == 0));
        int to_next = p == 1 ? 0 : m * (v - (r == p - 1));
        EXPECT(n[PIPE_FORWARD] == m * v && n[PIPE_BACKWARD] == (split ? 0 : m * v) &&
                   n[PIPE_BACKWARD_INPUT] == (split ? m * v : 0) &&
                   n[PIPE_BACKWARD_WEIGHT] == (split ? m * v : 0) &&
                   n[PIPE_RECV_ACT] == from_prev && n[PIPE_SEND_GRAD] == from_prev &&
                   n[PIPE_SEND_ACT] == to_next && n[PIPE_RECV_GRAD] == to_next,
               "%s p %d m %d v %d rank %d: F %d B %d I %d W %d RA %d SG %d SA %d RG %d (want F "
               "%d, %s %d, RA and SG %d, SA and RG %d)", name, p, m, v, r, n[PIPE_FORWARD],
               n[PIPE_BACKWARD], n[PIPE_BACKWARD_INPUT], n[PIPE_BACKWARD_WEIGHT],
               n[PIPE_RECV_ACT], n[PIPE_SEND_GRAD], n[PIPE_SEND_ACT], n[PIPE_RECV_GRAD], m * v,
               split ? "I and W" : "B", m * v, from_prev, to_next);
    }
}

/* Forwards on rank r's list before its first backward (B or I). */
static int forwards_first(const Schedule *s, int r) {
    int n = 0;
    for (int i = 0; i < s->rank[r].n; i++) {
        PipeOpKind k = s->rank[r].ops[i].kind;
        if (k == PIPE_BACKWARD || k == PIPE_BACKWARD_INPUT) break;
        n += k == PIPE_FORWARD;
    }
    return n;
}

/* GPipe: all m forwards first, m activations held, bubble (p-1)/(m+p-1). */
static void check_gpipe(int p, int m) {
    Schedule *s = schedule_gpipe(p, m);
    if (valid(s, "gpipe")) {
        PipeTimeline t;
        schedule_simulate(s, &UNEQUAL, &t);
        expect_bubble(&t, pipe_bubble_fraction(p, m, 1), "gpipe", p, m, 1);
        expect_counts(&t, "gpipe", p, m, 1, 0);
        for (int r = 0; r < p; r++)
            EXPECT(t.rank[r].peak_activations == m && forwards_first(s, r) == m,
                   "gpipe p %d m %d rank %d: %d activations, %d forwards before the first "
                   "backward (want %d and %d)", p, m, r, t.rank[r].peak_activations,
                   forwards_first(s, r), m, m);
        pipe_timeline_free(&t);
    }
    schedule_free(s);
}

/* 1F1B and ZB-H1: min(p - r - 1, m) warm-up forwards, then one forward per
 * backward, so min(p - r, m) activations held. 1F1B's bubble is GPipe's;
 * ZB-H1's, for m >= p, pipe_bubble_fraction_zb_h1 (equal costs: a third
 * of 1F1B's idle time; and uneven ones with W shorter than F and I), with
 * (p - r) M_B + r M_W at the memory peak, as in the paper. */
static void check_1f1b_family(int p, int m, int split) {
    const char *name = split ? "zb-h1" : "1f1b";
    Schedule *s = split ? schedule_zb_h1(p, m) : schedule_1f1b(p, m);
    if (valid(s, name)) {
        const PipeCosts equal = {1, 0, 1, 1, 0, 0.5}, uneven = {3, 0, 2, 1.5, 0, 0.25};
        PipeTimeline t;
        schedule_simulate(s, split ? &equal : &UNEQUAL, &t);
        if (!split) expect_bubble(&t, pipe_bubble_fraction(p, m, 1), name, p, m, 1);
        else if (m >= p) expect_bubble(&t, pipe_bubble_fraction_zb_h1(p, m, &equal), name, p, m, 1);
        expect_counts(&t, name, p, m, 1, split);
        for (int r = 0; r < p; r++) {
            int in_flight = min_int(p - r, m);
            EXPECT(t.rank[r].peak_activations == in_flight && forwards_first(s, r) == in_flight,
                   "%s p %d m %d rank %d: %d activations, %d forwards before the first backward "
                   "(want %d)", name, p, m, r, t.rank[r].peak_activations, forwards_first(s, r),
                   in_flight);
            if (split && m >= p)
                EXPECT(fabs(t.rank[r].peak_memory - (p - r + 0.5 * r)) < 1e-9,
                       "zb-h1 p %d m %d rank %d: peak memory %g M_B, want %g", p, m, r,
                       t.rank[r].peak_memory, p - r + 0.5 * r);
        }
        pipe_timeline_free(&t);
        if (split && m >= p) {
            schedule_simulate(s, &uneven, &t);
            expect_bubble(&t, pipe_bubble_fraction_zb_h1(p, m, &uneven), "zb-h1 (f 3, i 2, w 1.5)",
                          p, m, 1);
            pipe_timeline_free(&t);
        }
    }
    schedule_free(s);
}

/* Interleaved: the k-th forward is micro-batch (k / (p v)) p + k % p on
 * chunk (k / p) % v, the k-th backward the same micro-batch on chunk
 * v - 1 - (k / p) % v; bubble (p - 1) / (v m + p - 1). Megatron-LM's
 * warm-up w_r = min(2 (p - r - 1) + (v - 1) p, m v) forwards, then a
 * forward before each backward: rank r holds min(w_r + 1, m v) chunks'
 * activations at its peak, each 1/v of a whole rank's share. Rank 0, with
 * m v large enough: v p + p - 1 chunks, p + (p - 1) / v micro-batches'
 * worth of its layers, against 1F1B's p. */
static void check_interleaved(int p, int m, int v) {
    Schedule *s = schedule_interleaved(p, m, v);
    if (valid(s, "interleaved")) {
        PipeTimeline t;
        schedule_simulate(s, &UNEQUAL, &t);
        expect_bubble(&t, pipe_bubble_fraction(p, m, v), "interleaved", p, m, v);
        expect_counts(&t, "interleaved", p, m, v, 0);
        for (int r = 0; r < p; r++) {
            int warm = min_int(2 * (p - r - 1) + (v - 1) * p, m * v);
            int peak = min_int(warm + 1, m * v);
            EXPECT(t.rank[r].peak_activations == peak && forwards_first(s, r) == peak,
                   "interleaved p %d m %d v %d rank %d: %d activations, %d forwards before the "
                   "first backward (want %d)", p, m, v, r, t.rank[r].peak_activations,
                   forwards_first(s, r), peak);
            int f = 0, b = 0, in_order = 1;
            for (int i = 0; i < s->rank[r].n; i++) {
                PipeOp op = s->rank[r].ops[i];
                if (op.kind != PIPE_FORWARD && op.kind != PIPE_BACKWARD) continue;
                int k = op.kind == PIPE_FORWARD ? f++ : b++, c = k / p % v;
                in_order &= op.micro == k / (p * v) * p + k % p &&
                            op.chunk == (op.kind == PIPE_FORWARD ? c : v - 1 - c);
            }
            EXPECT(in_order, "interleaved p %d m %d v %d rank %d: not Megatron-LM's order", p, m,
                   v, r);
        }
        pipe_timeline_free(&t);
    }
    schedule_free(s);
}

/* Fails with a reason containing `part`, or (part NULL) passes. */
static void expect_problem(const char *name, int p, int m, int v, const char *part) {
    char why[512] = "";
    int rc = pipe_schedule_problem(name, p, m, v, why, sizeof why);
    if (part)
        EXPECT(rc != 0 && strstr(why, part) && !strchr(why, '\n'),
               "%s p %d m %d v %d: got \"%s\", want a reason with \"%s\"", name, p, m, v,
               rc ? why : "(no problem)", part);
    else
        EXPECT(rc == 0, "%s p %d m %d v %d: %s", name, p, m, v, why);
}

static void check_problems(void) {
    expect_problem("pipedream", 2, 4, 1, "known: gpipe, 1f1b, interleaved, zb-h1");
    expect_problem("", 2, 4, 1, "unknown pipeline schedule");
    expect_problem("gpipe", 0, 4, 1, "at least 1 rank");
    expect_problem("1f1b", 2, 0, 1, "at least 1 rank, 1 micro-batch");
    expect_problem("zb-h1", 2, 4, 0, "1 chunk per rank");
    expect_problem("gpipe", 2, 4, 2, "one chunk per rank");
    expect_problem("zb-h1", 2, 4, 3, "only the interleaved schedule");
    expect_problem("interleaved", 2, 4, 1, "v >= 2");
    expect_problem("interleaved", 4, 2, 2, "at least p micro-batches");
    expect_problem("interleaved", 4, 6, 2, "groups of p");
    expect_problem("dualpipe", 4, 8, 1, "two chunks per rank");
    expect_problem("dualpipe", 3, 8, 2, "even number of ranks");
    expect_problem("dualpipe", 4, 6, 2, "at least 2p");
    for (int k = 0; PIPE_SCHEDULE_NAMES[k]; k++)  /* interleaved and dualpipe: two chunks */
        expect_problem(PIPE_SCHEDULE_NAMES[k], 4, 8,
                       k == 2 || pipe_schedule_dual(PIPE_SCHEDULE_NAMES[k]) ? 2 : 1, NULL);
    expect_problem("zb-h1", 4, 2, 1, NULL);  /* valid, with a bubble above the formula's */
    /* schedule_by_name builds what it names */
    Schedule *s = schedule_by_name("interleaved", 2, 4, 3);
    EXPECT(s->ranks == 2 && s->micro_batches == 4 && s->chunks == 3 &&
               s->rank[0].ops[0].kind == PIPE_FORWARD,
           "schedule_by_name(\"interleaved\", 2, 4, 3): p %d m %d v %d", s->ranks,
           s->micro_batches, s->chunks);
    schedule_free(s);
    s = schedule_by_name("zb-h1", 2, 2, 1);
    int splits = 0;
    for (int i = 0; i < s->rank[1].n; i++) splits += s->rank[1].ops[i].kind == PIPE_BACKWARD_INPUT;
    EXPECT(s->ranks == 2 && s->chunks == 1 && splits == 2,
           "schedule_by_name(\"zb-h1\", 2, 2, 1) is not ZB-H1 (%d I ops on rank 1)", splits);
    schedule_free(s);
}

int main(int argc, char **argv) {
    program_set_name(argv[0]);
    cli_no_options(argc, argv,
                   "check_schedules", "Checks lab 06's schedule generators (schedules.c) for "
                   "p = 1..6 ranks and m = 1..12 micro-batches: valid, the formula's bubble, the "
                   "activations promised, each rank's compute order. Exit status 0 when every "
                   "check passes, 1 when one fails, 3 when a generator is not implemented.");
    for (int p = 1; p <= MAX_P; p++) {
        for (int m = 1; m <= MAX_M; m++) {
            check_gpipe(p, m);
            check_1f1b_family(p, m, 0);
            check_1f1b_family(p, m, 1);
            for (int v = 2; v <= 4 && m % p == 0; v++) check_interleaved(p, m, v);
        }
    }
    check_problems();
    return unit_report("check_schedules (lab 06)");
}
