/* Pipeline schedules (common/schedule.h): the validator accepts GPipe, 1F1B,
 * interleaved 1F1B and ZB-H1, built here by a few loops (test scaffolding,
 * not the lab's generators), and rejects each kind of broken schedule with
 * a message naming the rank, the position and the op; the simulator's
 * makespan, bubble and activation peaks equal the formulas. */
#include <stdlib.h>
#include <string.h>

#include "schedule.h"
#include "unit.h"

/* ---- schedules from text: "F0 SA0 RG0 B0" per rank ---------------------- */

/* One rank's ops from their labels (schedule_print's, comm ops shown), each
 * optionally "@peer"; a comm op's peer is by default its neighbour stage's
 * rank, the right one. A batch is in brackets: "[SA1 RG0]". */
static void parse_rank(Schedule *s, int r, const char *line) {
    static const char *const letters[PIPE_KINDS] = {"F", "B", "I", "W", "SA", "RA", "SG", "RG"};
    char *copy = strdup(line), *save = NULL;
    int batch = 0;  /* ops so far in an open batch, 0 when none is open */
    for (char *tok = strtok_r(copy, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
        if (*tok == '[') batch = 1, tok++;
        else if (batch) batch++;
        size_t len = strlen(tok);
        int closes = len > 0 && tok[len - 1] == ']';
        if (closes) tok[len - 1] = '\0';
        int kind = PIPE_KINDS - 1;
        while (strncmp(tok, letters[kind], strlen(letters[kind])) != 0) kind--;
        char *end;
        int micro = (int)strtol(tok + strlen(letters[kind]), &end, 10), chunk = 0, peer = -1;
        if (*end == '.') chunk = (int)strtol(end + 1, &end, 10);
        if (pipe_op_is_comm(kind)) {
            int stage = schedule_stage_of(s, r, chunk);
            int to = kind == PIPE_SEND_ACT || kind == PIPE_RECV_GRAD ? stage + 1 : stage - 1;
            peer = to >= 0 && to < schedule_stages(s) ? schedule_rank_of(s, to, micro)
                                                      : (to + s->ranks) % s->ranks;
        }
        if (*end == '@') peer = (int)strtol(end + 1, &end, 10);
        schedule_add(s, r, kind, micro, chunk, peer);
        if (closes) schedule_batch(s, r, batch), batch = 0;
    }
    free(copy);
}

static Schedule *parse(int p, int m, int v, const char *const *lines) {
    Schedule *s = schedule_create(p, m, v);
    for (int r = 0; r < p; r++) parse_rank(s, r, lines[r]);
    return s;
}

static void expect_valid(Schedule *s, const char *what) {
    char why[512] = "";
    int rc = schedule_validate(s, why, sizeof why);
    EXPECT(rc == 0, "%s (p %d, m %d, v %d) rejected: %s", what, s->ranks, s->micro_batches,
           s->chunks, why);
}

/* Rejected with exactly this message; frees s. */
static void expect_invalid(Schedule *s, const char *want) {
    char why[512] = "";
    int rc = schedule_validate(s, why, sizeof why);
    EXPECT(rc != 0 && strcmp(why, want) == 0, "got \"%s\", want \"%s\"", rc ? why : "(valid)",
           want);
    schedule_free(s);
}

/* ---- the classic schedules, compute order per rank --------------------- */

/* Append a compute op of rank r (stage r, v = 1) with its messages: the
 * input's receive just before it, the output's send just after. A receive
 * from rank r - 1 goes before the gradients just sent to it (and the W ops
 * after them): r - 1 sends first on that link, so the two do not both wait
 * in a send, as they would in 1F1B's steady state, where rank r sends a
 * gradient to r - 1 while r - 1 sends it an activation. */
static void add(Schedule *s, int r, PipeOpKind kind, int micro) {
    int last = s->ranks - 1;
    int fwd = kind == PIPE_FORWARD, bwd = kind == PIPE_BACKWARD || kind == PIPE_BACKWARD_INPUT;
    if (fwd && r > 0) {
        schedule_add(s, r, PIPE_RECV_ACT, micro, 0, r - 1);
        PipeOp *ops = s->rank[r].ops;
        for (int i = s->rank[r].n - 1; i > 0 && (ops[i - 1].kind == PIPE_SEND_GRAD ||
                                                 ops[i - 1].kind == PIPE_BACKWARD_WEIGHT);
             i--) {
            PipeOp t = ops[i];
            ops[i] = ops[i - 1];
            ops[i - 1] = t;
        }
    }
    if (bwd && r < last) schedule_add(s, r, PIPE_RECV_GRAD, micro, 0, r + 1);
    schedule_add(s, r, kind, micro, 0, -1);
    if (fwd && r < last) schedule_add(s, r, PIPE_SEND_ACT, micro, 0, r + 1);
    if (bwd && r > 0) schedule_add(s, r, PIPE_SEND_GRAD, micro, 0, r - 1);
}

/* GPipe: every forward, then every backward (last micro-batch first). */
static Schedule *gpipe(int p, int m) {
    Schedule *s = schedule_create(p, m, 1);
    for (int r = 0; r < p; r++) {
        for (int i = 0; i < m; i++) add(s, r, PIPE_FORWARD, i);
        for (int i = m - 1; i >= 0; i--) add(s, r, PIPE_BACKWARD, i);
    }
    return s;
}

/* 1F1B: min(p - r - 1, m) warm-up forwards, then one forward one backward,
 * then the remaining backwards. split: each backward as an I, and rank r's
 * W of micro-batch i right after its I of micro-batch i + r (or at the
 * end): ZB-H1. */
static Schedule *one_f_one_b(int p, int m, int split) {
    Schedule *s = schedule_create(p, m, 1);
    PipeOpKind back = split ? PIPE_BACKWARD_INPUT : PIPE_BACKWARD;
    for (int r = 0; r < p; r++) {
        int warm = p - r - 1 < m ? p - r - 1 : m, w = 0;
        for (int i = 0; i < warm; i++) add(s, r, PIPE_FORWARD, i);
        for (int i = 0; i < m; i++) {
            if (warm + i < m) add(s, r, PIPE_FORWARD, warm + i);
            add(s, r, back, i);
            if (split && i - r >= 0) add(s, r, PIPE_BACKWARD_WEIGHT, w++);
        }
        while (split && w < m) add(s, r, PIPE_BACKWARD_WEIGHT, w++);
    }
    return s;
}

/* 1F1B as Megatron-LM places its messages, on rank r (v = 1): each
 * receive right before the compute that needs it, each send right after
 * the compute that made it. In the steady state (after min(p - r - 1, m)
 * warm-up forwards, one forward and one backward per micro-batch) that is
 * F [SA RG] B [SG RA] F ...: with `batched`, those pairs are one batch
 * each (send_forward_recv_backward, send_backward_recv_forward; the
 * steady state's last SG stays alone, as its first RA); without, the
 * same lists deadlock under rendezvous as soon as m >= 2. */
static Schedule *one_f_one_b_plain(int p, int m, int batched) {
    Schedule *s = schedule_create(p, m, 1);
    for (int r = 0; r < p; r++) {
        int warm = p - r - 1 < m ? p - r - 1 : m, steady = m - warm;
        int first = r == 0, last = r == p - 1;
        for (int i = 0; i < warm; i++) {
            if (!first) schedule_add(s, r, PIPE_RECV_ACT, i, 0, r - 1);
            schedule_add(s, r, PIPE_FORWARD, i, 0, -1);
            schedule_add(s, r, PIPE_SEND_ACT, i, 0, r + 1);  /* warm > 0: not the last */
        }
        if (steady > 0 && !first) schedule_add(s, r, PIPE_RECV_ACT, warm, 0, r - 1);
        for (int i = 0; i < steady; i++) {
            int k = warm + i;  /* the forward's micro-batch */
            schedule_add(s, r, PIPE_FORWARD, k, 0, -1);
            if (!last) {
                schedule_add(s, r, PIPE_SEND_ACT, k, 0, r + 1);
                schedule_add(s, r, PIPE_RECV_GRAD, i, 0, r + 1);
                if (batched) schedule_batch(s, r, 2);
            }
            schedule_add(s, r, PIPE_BACKWARD, i, 0, -1);
            if (!first) {
                schedule_add(s, r, PIPE_SEND_GRAD, i, 0, r - 1);
                if (i < steady - 1) {
                    schedule_add(s, r, PIPE_RECV_ACT, k + 1, 0, r - 1);
                    if (batched) schedule_batch(s, r, 2);
                }
            }
        }
        for (int i = steady; i < m; i++) {
            if (!last) schedule_add(s, r, PIPE_RECV_GRAD, i, 0, r + 1);
            schedule_add(s, r, PIPE_BACKWARD, i, 0, -1);
            if (!first) schedule_add(s, r, PIPE_SEND_GRAD, i, 0, r - 1);
        }
    }
    return s;
}

/* Interleaved 1F1B's compute order (Megatron-LM), m a multiple of p: the
 * k-th forward is chunk (k / p) mod v of micro-batch (k / (p v)) p + k mod p,
 * the k-th backward the same with the chunks reversed; rank r first runs
 * 2 (p - r - 1) + (v - 1) p forwards. No messages: check_interleaved has
 * them. */
static Schedule *interleaved_compute(int p, int m, int v) {
    Schedule *s = schedule_create(p, m, v);
    int total = m * v;
    for (int r = 0; r < p; r++) {
        int warm = 2 * (p - r - 1) + (v - 1) * p;
        if (warm > total) warm = total;
#define MICRO(k) ((k) / (p * v) * p + (k) % p)
        for (int k = 0; k < warm; k++) schedule_add(s, r, PIPE_FORWARD, MICRO(k), k / p % v, -1);
        for (int k = 0; k < total; k++) {
            if (warm + k < total)
                schedule_add(s, r, PIPE_FORWARD, MICRO(warm + k), (warm + k) / p % v, -1);
            schedule_add(s, r, PIPE_BACKWARD, MICRO(k), v - 1 - k / p % v, -1);
        }
#undef MICRO
    }
    return s;
}

static PipeTimeline simulate(const Schedule *s, PipeCosts c) {
    PipeTimeline t;
    schedule_simulate(s, &c, &t);
    return t;
}

/* The printer writes what parse reads: GPipe for p = 2, m = 2 (schedule.h's
 * example), with and without its messages; chunks shown when v > 1. */
static void check_printer(void) {
    static const char *const lines[] = {"F0 SA0 F1 SA1 RG1 B1 RG0 B0",
                                        "RA0 F0 RA1 F1 B1 SG1 B0 SG0"};
    Schedule *g = gpipe(2, 2), *back = parse(2, 2, 1, lines);
    Schedule *one = parse(1, 1, 2, (const char *[]){"F0.0 F0.1 I0.1 W0.1 I0.0 W0.0"});
    char *text = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);
    schedule_print(f, g, 1);
    schedule_print(f, g, 0);
    schedule_print(f, one, 0);
    fclose(f);
    EXPECT(strcmp(text, "rank 0: F0 SA0 F1 SA1 RG1 B1 RG0 B0\nrank 1: RA0 F0 RA1 F1 B1 SG1 B0 SG0\n"
                        "rank 0: F0 F1 B1 B0\nrank 1: F0 F1 B1 B0\n"
                        "rank 0: F0.0 F0.1 I0.1 W0.1 I0.0 W0.0\n") == 0,
           "printed\n%s", text);
    for (int r = 0; r < 2; r++)
        EXPECT(back->rank[r].n == g->rank[r].n &&
                   memcmp(back->rank[r].ops, g->rank[r].ops,
                          sizeof(PipeOp) * (size_t)g->rank[r].n) == 0,
               "rank %d: the printed GPipe does not parse back to the same ops", r);
    EXPECT(strcmp(pipe_op_kind_name(PIPE_BACKWARD_WEIGHT), "backward-weight") == 0 &&
               strcmp(pipe_op_kind_name(PIPE_KINDS), "unknown") == 0, "kind names");
    free(text);
    schedule_free(g);
    schedule_free(back);
    schedule_free(one);
}

/* GPipe and 1F1B for p = 2..4, m = 1..8: valid; with no message cost the
 * makespan is (m + p - 1)(t_f + t_b) and every rank's bubble fraction
 * (p - 1) / (m + p - 1); GPipe holds m activations, 1F1B min(p - r, m).
 * ZB-H1 (1F1B split, W delayed r micro-batches on rank r) is valid too and,
 * for m >= p, idle (p - 1)(t_f + t_i - t_w) per rank with its memory peak
 * at (p - r) M_B + r M_W, as in the paper. */
static void check_classics(void) {
    const PipeCosts fb = {.forward = 1, .backward = 2};
    for (int p = 2; p <= 4; p++) {
        for (int m = 1; m <= 8; m++) {
            Schedule *g = gpipe(p, m), *o = one_f_one_b(p, m, 0), *z = one_f_one_b(p, m, 1);
            expect_valid(g, "GPipe");
            expect_valid(o, "1F1B");
            expect_valid(z, "ZB-H1");
            PipeTimeline tg = simulate(g, fb), to = simulate(o, fb);
            double want = pipe_bubble_fraction(p, m, 1);
            EXPECT(tg.makespan == (m + p - 1) * 3.0 && to.makespan == (m + p - 1) * 3.0,
                   "p %d m %d: makespans GPipe %g, 1F1B %g, want %g", p, m, tg.makespan,
                   to.makespan, (m + p - 1) * 3.0);
            EXPECT(tg.bubble_fraction == want && to.bubble_fraction == want,
                   "p %d m %d: bubble GPipe %g, 1F1B %g, want %g", p, m, tg.bubble_fraction,
                   to.bubble_fraction, want);
            for (int r = 0; r < p; r++) {
                PipeRankTimeline *a = &tg.rank[r], *b = &to.rank[r];
                int in_flight = p - r < m ? p - r : m;
                EXPECT(a->bubble_fraction == want && b->bubble_fraction == want,
                       "p %d m %d rank %d: bubble GPipe %g, 1F1B %g, want %g", p, m, r,
                       a->bubble_fraction, b->bubble_fraction, want);
                EXPECT(a->peak_activations == m && b->peak_activations == in_flight,
                       "p %d m %d rank %d: peak activations GPipe %d (want %d), 1F1B %d (want %d)",
                       p, m, r, a->peak_activations, m, b->peak_activations, in_flight);
                EXPECT(b->count[PIPE_FORWARD] == m && b->count[PIPE_BACKWARD] == m &&
                           b->count[PIPE_SEND_ACT] == (r < p - 1 ? m : 0) &&
                           b->count[PIPE_RECV_ACT] == (r > 0 ? m : 0) &&
                           b->count[PIPE_SEND_GRAD] == (r > 0 ? m : 0) &&
                           b->count[PIPE_RECV_GRAD] == (r < p - 1 ? m : 0) &&
                           b->count[PIPE_BACKWARD_INPUT] == 0,
                       "p %d m %d rank %d: 1F1B's op counts", p, m, r);
            }
            if (m >= p) {
                /* each W no longer than F and I: the paper's formula, exact */
                const PipeCosts equal = {1, 0, 1, 1, 0, 0.5}, uneven = {3, 0, 2, 1.5, 0, 0.25};
                PipeTimeline te = simulate(z, equal), tu = simulate(z, uneven);
                EXPECT(te.bubble_fraction == pipe_bubble_fraction_zb_h1(p, m, &equal) &&
                           tu.bubble_fraction == pipe_bubble_fraction_zb_h1(p, m, &uneven),
                       "p %d m %d: ZB-H1 bubble %g and %g, want %g and %g", p, m,
                       te.bubble_fraction, tu.bubble_fraction,
                       pipe_bubble_fraction_zb_h1(p, m, &equal),
                       pipe_bubble_fraction_zb_h1(p, m, &uneven));
                for (int r = 0; r < p; r++) {
                    EXPECT(te.rank[r].idle == p - 1 && te.rank[r].peak_activations == p - r &&
                               te.rank[r].peak_memory == p - r + 0.5 * r,
                           "p %d m %d rank %d: ZB-H1 idle %g (want %d: a third of 1F1B's), "
                           "activations %d, memory %g (want %d + %d / 2)", p, m, r, te.rank[r].idle,
                           p - 1, te.rank[r].peak_activations, te.rank[r].peak_memory, p - r, r);
                    EXPECT(te.rank[r].count[PIPE_BACKWARD_INPUT] == m &&
                               te.rank[r].count[PIPE_BACKWARD_WEIGHT] == m &&
                               te.rank[r].count[PIPE_BACKWARD] == 0,
                           "p %d m %d rank %d: ZB-H1's op counts", p, m, r);
                }
                /* a W longer than F or I: the bubble stays
                 * (p - 1)(t_f + t_i - min(t_f, t_i)) */
                const PipeCosts long_w = {1, 0, 2, 1.5, 0, 0};
                PipeTimeline tl = simulate(z, long_w);
                EXPECT(tl.bubble_fraction == pipe_bubble_fraction_zb_h1(p, m, &long_w) &&
                           tl.rank[0].idle == (p - 1) * 2.0,
                       "p %d m %d: ZB-H1 with a long W: bubble %g, want %g", p, m,
                       tl.bubble_fraction, pipe_bubble_fraction_zb_h1(p, m, &long_w));
                pipe_timeline_free(&te);
                pipe_timeline_free(&tu);
                pipe_timeline_free(&tl);
            }
            pipe_timeline_free(&tg);
            pipe_timeline_free(&to);
            schedule_free(g);
            schedule_free(o);
            schedule_free(z);
        }
    }
}

/* Rendered as schedule_print writes it, comm ops shown; the caller frees. */
static char *printed(const Schedule *s, int show_comm) {
    char *text = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);
    schedule_print(f, s, show_comm);
    fclose(f);
    return text;
}

static int same_ops(const Schedule *a, const Schedule *b) {
    int same = a->ranks == b->ranks;
    for (int r = 0; same && r < a->ranks; r++)
        same = a->rank[r].n == b->rank[r].n &&
               memcmp(a->rank[r].ops, b->rank[r].ops, sizeof(PipeOp) * (size_t)a->rank[r].n) == 0;
    return same;
}

/* 1F1B in Megatron-LM's plain placement, p = 2..4, m = 1..8: with its
 * steady state's send/receive pairs batched it is valid and, with no
 * message cost, takes exactly the time of the 1F1B above, (m + p - 1)
 * (t_f + t_b), every rank's bubble (p - 1) / (m + p - 1); without the
 * batches it deadlocks once m >= 2 (with m = 1 there is no steady-state
 * pair to cross). The printer shows the batches and parse reads them back;
 * p = 2, m = 2 is schedule.h's example, and unbatched the deadlock that
 * check_rejects also lists. */
static void check_batched_1f1b(void) {
    const PipeCosts fb = {.forward = 1, .backward = 2};
    for (int p = 2; p <= 4; p++) {
        for (int m = 1; m <= 8; m++) {
            Schedule *b = one_f_one_b_plain(p, m, 1), *plain = one_f_one_b_plain(p, m, 0);
            expect_valid(b, "1F1B, plain placement, steady state batched");
            char why[512] = "";
            int rc = schedule_validate(plain, why, sizeof why);
            const char *dead = "deadlock under blocking send and receive: ";
            if (m >= 2)
                EXPECT(rc != 0 && strncmp(why, dead, strlen(dead)) == 0,
                       "p %d m %d: 1F1B's plain placement unbatched: got \"%s\", want a deadlock",
                       p, m, rc ? why : "(valid)");
            else
                EXPECT(rc == 0, "p %d m 1: 1F1B's plain placement rejected: %s", p, why);
            PipeTimeline t = simulate(b, fb);
            double want = pipe_bubble_fraction(p, m, 1);
            EXPECT(t.makespan == (m + p - 1) * 3.0 && t.bubble_fraction == want,
                   "p %d m %d: batched 1F1B: makespan %g, bubble %g, want %g and %g", p, m,
                   t.makespan, t.bubble_fraction, (m + p - 1) * 3.0, want);
            for (int r = 0; r < p; r++) {
                int in_flight = p - r < m ? p - r : m;
                EXPECT(t.rank[r].bubble_fraction == want &&
                           t.rank[r].peak_activations == in_flight,
                       "p %d m %d rank %d: batched 1F1B: bubble %g (want %g), activations %d "
                       "(want %d)", p, m, r, t.rank[r].bubble_fraction, want,
                       t.rank[r].peak_activations, in_flight);
            }
            char *text = printed(b, 1);
            const char **lines = calloc((unsigned)p, sizeof *lines);
            char *save = NULL;
            for (int r = 0; r < p; r++) {
                char *line = strtok_r(r ? NULL : text, "\n", &save);
                lines[r] = line && strchr(line, ':') ? strchr(line, ':') + 2 : "";
            }
            Schedule *back = parse(p, m, 1, lines);
            EXPECT(same_ops(back, b), "p %d m %d: the printed batched 1F1B does not parse back",
                   p, m);
            schedule_free(back);
            free(lines);
            free(text);
            if (p == 2 && m == 2) {
                char *shown = printed(b, 1), *bare = printed(plain, 1);
                EXPECT(strcmp(shown, "rank 0: F0 SA0 F1 [SA1 RG0] B0 RG1 B1\n"
                                     "rank 1: RA0 F0 B0 [SG0 RA1] F1 B1 SG1\n") == 0 &&
                           strcmp(bare, "rank 0: F0 SA0 F1 SA1 RG0 B0 RG1 B1\n"
                                        "rank 1: RA0 F0 B0 SG0 RA1 F1 B1 SG1\n") == 0,
                       "printed\n%s%s", shown, bare);
                free(shown);
                free(bare);
            }
            pipe_timeline_free(&t);
            schedule_free(b);
            schedule_free(plain);
        }
    }
}

/* A batch under a message cost (t_f = 1, t_b = 2, send 0.5), p = 2, m = 2:
 * its members are posted together, at the end of the compute before it,
 * and the rank goes on when all have arrived. Rank 0 posts [SA1 RG0] at 2,
 * rank 1 [SG0 RA1] at 4.5 (after F0 from 1.5 and B0): both messages arrive
 * at 5, when rank 0's B0 and rank 1's F1 start. A batch may meet lone ops:
 * rank 1 sending SG0 and receiving RA1 one at a time, which rank 0's batch
 * serves in either order (makespan 9 with no message cost, as 1F1B's);
 * rank 1 receiving both activations in one batch first is valid too, but
 * its F0 waits for SA1, posted after rank 0's F1: 10. */
static void check_batch_times(void) {
    Schedule *s = one_f_one_b_plain(2, 2, 1);
    PipeTimeline t = simulate(s, (PipeCosts){.forward = 1, .backward = 2, .send = 0.5});
    PipeOpTime *r0 = t.rank[0].op, *r1 = t.rank[1].op;
    EXPECT(r0[3].start == 2 && r0[4].start == 2 && r0[3].end == 5 && r0[4].end == 5 &&
               r0[5].start == 5 && r1[3].start == 4.5 && r1[4].start == 4.5 &&
               r1[3].end == 5 && r1[4].end == 5 && r1[5].start == 5 && t.makespan == 10.5,
           "rank 0's [SA1 RG0] [%g, %g] [%g, %g], B0 at %g; rank 1's [SG0 RA1] [%g, %g] "
           "[%g, %g], F1 at %g; makespan %g (want 10.5)", r0[3].start, r0[3].end, r0[4].start,
           r0[4].end, r0[5].start, r1[3].start, r1[3].end, r1[4].start, r1[4].end, r1[5].start,
           t.makespan);
    pipe_timeline_free(&t);
    schedule_free(s);
    static const char *const batched_r0 = "F0 SA0 F1 [SA1 RG0] B0 RG1 B1";
    const char *lone_r1[] = {"RA0 F0 B0 SG0 RA1 F1 B1 SG1", "RA0 F0 B0 [RA1 SG0] F1 B1 SG1",
                             "[RA0 RA1] F0 B0 SG0 F1 B1 SG1"};
    const double makespan[] = {9, 9, 10};
    for (int k = 0; k < 3; k++) {
        s = parse(2, 2, 1, (const char *[]){batched_r0, lone_r1[k]});
        expect_valid(s, lone_r1[k]);
        t = simulate(s, (PipeCosts){.forward = 1, .backward = 2});
        EXPECT(t.makespan == makespan[k], "rank 1 %s: makespan %g, want %g", lone_r1[k],
               t.makespan, makespan[k]);
        pipe_timeline_free(&t);
        schedule_free(s);
    }
}

/* A message costs time. With one micro-batch GPipe's fill and drain each
 * pay it p - 1 times. A message starts once both ends are posted: rank 1's
 * receive of micro-batch 1 posted right before its forward waits for F0 to
 * end, posted before F0 it moves while F0 runs. */
static void check_send_cost(void) {
    const PipeCosts c = {.forward = 1, .backward = 2, .send = 0.5};
    for (int p = 2; p <= 4; p++) {
        Schedule *g = gpipe(p, 1);
        PipeTimeline t = simulate(g, c);
        double want = p * 3.0 + 2 * (p - 1) * 0.5;
        EXPECT(t.makespan == want, "p %d: GPipe with messages: makespan %g, want %g", p, t.makespan,
               want);
        EXPECT(t.rank[1].op[0].start == 0 && t.rank[1].op[0].end == 1.5 &&
                   t.rank[1].op[1].start == 1.5 && t.rank[1].op[1].end == 2.5,
               "p %d: rank 1's RA0 [%g, %g], F0 [%g, %g]", p, t.rank[1].op[0].start,
               t.rank[1].op[0].end, t.rank[1].op[1].start, t.rank[1].op[1].end);
        pipe_timeline_free(&t);
        schedule_free(g);
    }
    static const char *const r0 = "F0 SA0 F1 SA1 RG1 B1 RG0 B0";
    Schedule *late = parse(2, 2, 1, (const char *[]){r0, "RA0 F0 RA1 F1 B1 SG1 B0 SG0"});
    Schedule *early = parse(2, 2, 1, (const char *[]){r0, "RA0 RA1 F0 F1 B1 SG1 B0 SG0"});
    expect_valid(early, "GPipe, receives posted early");
    PipeTimeline tl = simulate(late, c), te = simulate(early, c);
    EXPECT(tl.rank[1].op[2].end == 3 && tl.rank[1].op[3].start == 3,
           "late RA1 arrives at %g, F1 at %g", tl.rank[1].op[2].end, tl.rank[1].op[3].start);
    EXPECT(te.rank[1].op[1].end == 2.5 && te.rank[1].op[3].start == 2.5,
           "early RA1 arrives at %g, F1 at %g", te.rank[1].op[1].end, te.rank[1].op[3].start);
    pipe_timeline_free(&tl);
    pipe_timeline_free(&te);
    schedule_free(late);
    schedule_free(early);
}

/* Interleaved 1F1B, p = 2, m = 4, v = 2: Megatron-LM's compute order, each
 * rank's messages in one global order (that of a run with t_f = 1,
 * t_b = 2: a send right after its producer, a receive in the first gap by
 * whose end its data exists, each gap sorted by that time), which no
 * rendezvous can deadlock. Its bubble is (p - 1) / (v m + p - 1).
 * One rank, two chunks: no messages, chunk 1 after chunk 0. */
static void check_interleaved(void) {
    Schedule *s = parse(2, 4, 2, (const char *[]){
        "F0.0 SA0.0 F1.0 SA1.0 RA0.1 F0.1 SA0.1 RA1.1 F1.1 SA1.1 F2.0 SA2.0 RG0.1 B0.1 SG0.1 F3.0 "
        "SA3.0 RG1.1 B1.1 RA2.1 SG1.1 F2.1 SA2.1 RG0.0 B0.0 RA3.1 F3.1 SA3.1 RG1.0 B1.0 RG2.1 B2.1 "
        "SG2.1 RG3.1 B3.1 SG3.1 RG2.0 B2.0 RG3.0 B3.0",
        "RA0.0 F0.0 RA1.0 SA0.0 F1.0 RA0.1 SA1.0 F0.1 RA1.1 B0.1 RA2.0 SG0.1 F1.1 B1.1 RG0.0 RA3.0 "
        "SG1.1 F2.0 SA2.0 B0.0 RG1.0 RA2.1 SG0.0 F3.0 SA3.0 B1.0 RA3.1 SG1.0 F2.1 B2.1 SG2.1 F3.1 "
        "B3.1 RG2.0 SG3.1 B2.0 RG3.0 SG2.0 B3.0 SG3.0"});
    expect_valid(s, "interleaved 1F1B");
    Schedule *order = interleaved_compute(2, 4, 2);
    for (int r = 0; r < 2; r++) {
        int n = 0, same = 1;
        for (int i = 0; i < s->rank[r].n; i++)
            if (!pipe_op_is_comm(s->rank[r].ops[i].kind))
                same &= n < order->rank[r].n &&
                        memcmp(&s->rank[r].ops[i], &order->rank[r].ops[n++], sizeof(PipeOp)) == 0;
        EXPECT(same && n == order->rank[r].n, "rank %d: not Megatron-LM's interleaved order", r);
    }
    schedule_free(order);
    PipeTimeline t = simulate(s, (PipeCosts){.forward = 1, .backward = 2});
    EXPECT(t.makespan == (2 * 4 + 2 - 1) * 3.0 &&
               t.bubble_fraction == pipe_bubble_fraction(2, 4, 2),
           "interleaved: makespan %g, bubble %g, want %g and %g", t.makespan, t.bubble_fraction,
           (2 * 4 + 2 - 1) * 3.0, pipe_bubble_fraction(2, 4, 2));
    pipe_timeline_free(&t);
    schedule_free(s);

    Schedule *one = parse(1, 2, 2, (const char *[]){"F0.0 F0.1 F1.0 F1.1 B0.1 B0.0 B1.1 B1.0"});
    expect_valid(one, "one rank, two chunks");
    t = simulate(one, (PipeCosts){.forward = 1, .backward = 2});
    EXPECT(t.makespan == 12 && t.bubble_fraction == 0 && t.rank[0].peak_activations == 4,
           "one rank: makespan %g, bubble %g, activations %d", t.makespan, t.bubble_fraction,
           t.rank[0].peak_activations);
    pipe_timeline_free(&t);
    schedule_free(one);
}

/* Each kind of mistake, with its message. */
#define GPIPE_R0 "F0 SA0 F1 SA1 RG1 B1 RG0 B0" /* GPipe, p = 2, m = 2, rank 0 */
#define GPIPE_R1 "RA0 F0 RA1 F1 B1 SG1 B0 SG0" /* ... and rank 1 */
static const struct {
    int p, m, v;
    const char *ranks[3];
    const char *want;
} REJECTS[] = {
    /* GPipe with one thing wrong */
    {2, 2, 1, {GPIPE_R0, "RA0 F0 RA1 B1 SG1 B0 SG0"},
     "rank 1: no forward of micro-batch 1 on stage 1"},
    {2, 2, 1, {GPIPE_R0, GPIPE_R1 " B0"},
     "rank 1, op 8 (B0): a second backward of micro-batch 0 on stage 1 (the first at op 6)"},
    {2, 2, 1, {GPIPE_R0, "RA0 F0 F1 B1 SG1 B0 SG0"},
     "rank 0, op 3 (SA1): no matching receive on rank 1 (RA1)"},
    {2, 2, 1, {"F0 SA0 F1 SA1 B1 RG0 B0", GPIPE_R1},
     "rank 1, op 5 (SG1): no matching receive on rank 0 (RG1)"},
    {2, 2, 1, {"F0 SA0 F1 RG1 B1 RG0 B0", GPIPE_R1},
     "rank 1, op 2 (RA1): no matching send on rank 0 (SA1)"},
    {2, 2, 1, {"F0 SA0 F1 RG1 B1 RG0 B0", "RA0 F0 F1 B1 SG1 B0 SG0"},
     "rank 0, op 2 (F1): its result goes to rank 1 (SA1), but rank 0 has no such send"},
    {2, 2, 1, {GPIPE_R0, "F0 RA0 RA1 F1 B1 SG1 B0 SG0"},
     "rank 1, op 0 (F0): needs its input from rank 0 (RA0), which comes after it, at op 1"},
    {2, 2, 1, {"SA0 F0 F1 SA1 RG1 B1 RG0 B0", GPIPE_R1},
     "rank 0, op 0 (SA0): sends before F0 (op 1) has computed it"},
    /* a forward on the wrong rank: with chunks local to their rank, rank 0
     * can only name its own stage, so it is a second forward there */
    {2, 1, 1, {"F0 SA0 F0 RG0 B0", "RA0 B0 SG0"},
     "rank 0, op 2 (F0): a second forward of micro-batch 0 on stage 0 (the first at op 0)"},
    /* a receive from the wrong peer */
    {3, 1, 1, {"F0 SA0 RG0 B0", "RA0 F0 SA0 RG0 B0 SG0", "RA0@0 F0 B0 SG0"},
     "rank 2, op 0 (RA0): peer rank 0, but stage 2's previous stage 1 is on rank 1"},
    /* 1F1B where both ranks send first: rank 1's gradient crosses rank 0's
     * activation; and where both receive first */
    {2, 2, 1, {"F0 SA0 F1 SA1 RG0 B0 RG1 B1", "RA0 F0 B0 SG0 RA1 F1 B1 SG1"},
     "deadlock under blocking send and receive: rank 0 waits at op 3 (SA1 to rank 1), "
     "rank 1 waits at op 3 (SG0 to rank 0)"},
    {2, 2, 1, {"F0 SA0 F1 RG0 SA1 B0 RG1 B1", "RA0 F0 RA1 B0 SG0 F1 B1 SG1"},
     "deadlock under blocking send and receive: rank 0 waits at op 3 (RG0 from rank 1), "
     "rank 1 waits at op 2 (RA1 from rank 0)"},
    /* batches: a compute op in one, and two receives batched on rank 0
     * waiting for rank 1, which waits in a lone receive for rank 0's SA1
     * after the batch */
    {2, 2, 1, {"F0 SA0 [F1 SA1] RG1 B1 RG0 B0", GPIPE_R1},
     "rank 0, op 2 (F1): a compute op in the batch at op 2 ([F1 SA1]); a batch holds "
     "communication ops only"},
    {2, 2, 1, {"F0 [SA0 F1] SA1 RG1 B1 RG0 B0", GPIPE_R1},
     "rank 0, op 2 (F1): a compute op in the batch at op 1 ([SA0 F1]); a batch holds "
     "communication ops only"},
    {2, 2, 1, {"F0 [SA0 SA1] F1 RG1 B1 RG0 B0", GPIPE_R1},
     "rank 0, op 2 (SA1): sends before F1 (op 3) has computed it"},
    {2, 2, 1, {"F0 SA0 F1 [RG0 RG1] SA1 B0 B1", "RA0 F0 RA1 B0 SG0 F1 B1 SG1"},
     "deadlock under blocking send and receive: rank 0 waits at op 3 ([RG0 RG1]: RG0 from "
     "rank 1, RG1 from rank 1), rank 1 waits at op 2 (RA1 from rank 0)"},
    /* on one rank */
    {1, 2, 1, {"F0 B1 F1 B0"},
     "rank 0, op 1 (B1): needs its forward (F1), which comes after it, at op 2"},
    {1, 1, 1, {"F0 W0 I0"},
     "rank 0, op 1 (W0): needs its input gradient (I0), which comes after it, at op 2"},
    {1, 1, 1, {"F0 I0 B0 W0"},
     "rank 0: micro-batch 0 on stage 0 has a whole backward (op 2) and a split one (op 1)"},
    {1, 1, 1, {"F0 I0"},
     "rank 0: micro-batch 0 on stage 0 has its input-gradient backward (op 1) but no "
     "weight-gradient one"},
    {1, 1, 1, {"F0"}, "rank 0: no backward of micro-batch 0 on stage 0"},
    {1, 1, 2, {"F0.1 F0.0 B0.1 B0.0"},
     "rank 0, op 0 (F0.1): needs stage 0's forward (F0.0), which comes after it, at op 1"},
    {1, 1, 2, {"F0.0 SA0.0@0 F0.1 B0.1 B0.0"},
     "rank 0, op 1 (SA0.0): a one-rank pipeline has no communication (every stage is on rank 0)"},
    /* fields out of range, messages past the ends of the pipeline */
    {2, 1, 1, {"F0 SA0 RG0 B0", "RA0 F0 SA0@0 B0 SG0"},
     "rank 1, op 2 (SA0): stage 1 has no next stage to send an activation to"},
    {2, 1, 1, {"RA0@1 F0 SA0 RG0 B0", "RA0 F0 B0 SG0"},
     "rank 0, op 0 (RA0): stage 0 has no previous stage to receive an activation from"},
    {1, 2, 1, {"F0 B0 F2 B2"}, "rank 0, op 2 (F2): micro-batch 2 is not in [0, 2)"},
    {2, 1, 1, {"F0 SA0.1 RG0 B0", "RA0 F0 B0 SG0"}, "rank 0, op 1 (SA0): chunk 1 is not in [0, 1)"},
};

/* DualPipe's placement, p = 2, m = 2: micro-batch 0 enters at rank 0 and
 * runs on the chunks 0 (stage 0 on rank 0, stage 1 on rank 1), micro-batch
 * 1 at rank 1 on the chunks 1 (stage 0 on rank 1, stage 1 on rank 0). Both
 * ranks send first, so each pair of crossing messages is one batch. */
#define DUAL_R0 "F0.0 [SA0.0 RA1.1] F1.1 B1.1 [SG1.1 RG0.0] B0.0"
#define DUAL_R1 "F1.1 [SA1.1 RA0.0] F0.0 B0.0 [SG0.0 RG1.1] B1.1"
static Schedule *parse_dual(int p, int m, const char *const *lines) {
    Schedule *s = schedule_create_dual(p, m);
    for (int r = 0; r < p; r++) parse_rank(s, r, lines[r]);
    return s;
}

static void check_dual_placement(void) {
    Schedule *s = parse_dual(2, 2, (const char *[]){DUAL_R0, DUAL_R1});
    EXPECT(schedule_stages(s) == 2 && schedule_stage_of(s, 0, 1) == 1 &&
               schedule_stage_of(s, 1, 1) == 0 && schedule_stage_of(s, 1, 0) == 1,
           "DualPipe's placement: %d stages; rank 0 chunk 1 stage %d, rank 1 chunk 1 stage %d",
           schedule_stages(s), schedule_stage_of(s, 0, 1), schedule_stage_of(s, 1, 1));
    expect_valid(s, "DualPipe p 2, m 2");
    PipeTimeline t;
    schedule_simulate(s, &(PipeCosts){1, 2, 1, 1, 0, 0.5}, &t);
    /* every rank F, F, B, B and never idle: each direction's first stage
     * starts at once, at its own end */
    EXPECT(t.makespan == 6 && t.rank[0].peak_activations == 2 && t.rank[1].idle == 0,
           "DualPipe p 2, m 2: makespan %g (want 6), rank 0 peak %d (want 2), rank 1 idle %g",
           t.makespan, t.rank[0].peak_activations, t.rank[1].idle);
    pipe_timeline_free(&t);
    schedule_free(s);
    expect_invalid(parse_dual(2, 2, (const char *[]){"F0.1", DUAL_R1}),
                   "rank 0, op 0 (F0.1): micro-batch 0 enters at rank 0, so it runs on chunk 0 "
                   "of every rank (DualPipe's placement), not chunk 1");
    expect_invalid(parse_dual(2, 2, (const char *[]){"F0.0 [SA0.0@0 RA1.1] F1.1 B1.1 "
                                                     "[SG1.1 RG0.0] B0.0", DUAL_R1}),
                   "rank 0, op 1 (SA0.0): peer rank 0, but stage 0's next stage 1 is on rank 1");
    expect_invalid(parse_dual(2, 2, (const char *[]){"F0.0 SA0.0 RA1.1 F1.1 B1.1 [SG1.1 "
                                                     "RG0.0] B0.0", "F1.1 SA1.1 RA0.0 F0.0 B0.0 "
                                                     "[SG0.0 RG1.1] B1.1"}),
                   "deadlock under blocking send and receive: rank 0 waits at op 1 (SA0.0 to "
                   "rank 1), rank 1 waits at op 1 (SA1.1 to rank 0)");
}
#undef DUAL_R0
#undef DUAL_R1

static void check_rejects(void) {
    for (size_t k = 0; k < sizeof REJECTS / sizeof REJECTS[0]; k++)
        expect_invalid(parse(REJECTS[k].p, REJECTS[k].m, REJECTS[k].v, REJECTS[k].ranks),
                       REJECTS[k].want);
    Schedule *s = parse(1, 1, 1, (const char *[]){"F0 B0"});
    s->rank[0].ops[1].peer = 3;
    expect_invalid(s, "rank 0, op 1 (B0): a compute op has no peer (peer 3, want -1)");
    s = parse(2, 2, 1, (const char *[]){GPIPE_R0, GPIPE_R1});
    s->rank[1].ops[7].batched = 1;
    expect_invalid(s, "rank 1, op 7 (SG0): batched with the next op, but it is the rank's last");
    /* the first deadlock's ranks, rank 1 receiving before it sends */
    s = parse(2, 2, 1,
              (const char *[]){"F0 SA0 F1 SA1 RG0 B0 RG1 B1", "RA0 F0 B0 RA1 SG0 F1 B1 SG1"});
    expect_valid(s, "1F1B, rank 1 receiving before it sends");
    schedule_free(s);
}
#undef GPIPE_R0
#undef GPIPE_R1

int main(void) {
    check_printer();
    check_classics();
    check_send_cost();
    check_batched_1f1b();
    check_batch_times();
    check_interleaved();
    check_rejects();
    check_dual_placement();
    return unit_report("test_schedule");
}
