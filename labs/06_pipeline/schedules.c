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

/* The second extension (README.md). */
Schedule *schedule_dualpipe(int p, int m) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
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
