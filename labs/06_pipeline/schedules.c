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

Schedule *schedule_gpipe(int p, int m) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

Schedule *schedule_1f1b(int p, int m) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

Schedule *schedule_interleaved(int p, int m, int v) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

Schedule *schedule_zb_h1(int p, int m) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

/* The extension (README.md). */
Schedule *schedule_1f1b_unbatched(int p, int m) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
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
