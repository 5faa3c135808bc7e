#include "schedule.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "fileio.h"

Schedule *schedule_create(int ranks, int micro_batches, int chunks) {
    if (ranks < 1 || micro_batches < 1 || chunks < 1)
        USER_ERROR(
            "a pipeline schedule needs ranks, micro-batches and chunks >= 1 (got %d, %d, %d)",
            ranks, micro_batches, chunks);
    Schedule *s = calloc(1, sizeof *s);
    CHECK(s, "out of memory for a pipeline schedule");
    s->ranks = ranks;
    s->micro_batches = micro_batches;
    s->chunks = chunks;
    s->rank = calloc((size_t)ranks, sizeof *s->rank);
    CHECK(s->rank, "out of memory for a pipeline schedule's %d ranks", ranks);
    return s;
}

Schedule *schedule_create_dual(int ranks, int micro_batches) {
    if (ranks < 2 || ranks % 2 || micro_batches < 2 || micro_batches % 2)
        USER_ERROR("DualPipe's placement needs an even number of ranks and of micro-batches, "
                   "at least 2 each (got %d ranks, %d micro-batches)", ranks, micro_batches);
    Schedule *s = schedule_create(ranks, micro_batches, 2);
    s->dual = 1;
    return s;
}

void schedule_free(Schedule *s) {
    if (!s) return;
    for (int r = 0; r < s->ranks; r++) free(s->rank[r].ops);
    free(s->rank);
    free(s);
}

void schedule_add(Schedule *s, int rank, PipeOpKind kind, int micro, int chunk, int peer) {
    CHECK(rank >= 0 && rank < s->ranks, "schedule_add: rank %d is not in [0, %d)", rank, s->ranks);
    PipeOpList *l = &s->rank[rank];
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 16;
        l->ops = realloc(l->ops, (size_t)l->cap * sizeof *l->ops);
        CHECK(l->ops, "out of memory for %d ops of pipeline rank %d", l->cap, rank);
    }
    l->ops[l->n++] = (PipeOp){kind, micro, chunk, peer, 0};
}

void schedule_batch(Schedule *s, int rank, int n) {
    CHECK(rank >= 0 && rank < s->ranks, "schedule_batch: rank %d is not in [0, %d)", rank,
          s->ranks);
    PipeOpList *l = &s->rank[rank];
    if (n < 1 || n > l->n)
        USER_ERROR("schedule_batch: a batch of %d ops, but rank %d has %d (want 1 to %d)", n,
                   rank, l->n, l->n);
    for (int i = l->n - n; i < l->n; i++) l->ops[i].batched = i < l->n - 1;
}

/* The first op of the batch holding op i of rank r, and one past its last
 * (a lone op is a batch of one). */
static int batch_start(const Schedule *s, int r, int i) {
    while (i > 0 && s->rank[r].ops[i - 1].batched) i--;
    return i;
}
static int batch_end(const Schedule *s, int r, int i) {
    while (i < s->rank[r].n - 1 && s->rank[r].ops[i].batched) i++;
    return i + 1;
}

static const char *const KIND_NAME[PIPE_KINDS] = {
    "forward", "backward", "backward-input", "backward-weight",
    "send-act", "recv-act", "send-grad", "recv-grad",
};
static const char *const KIND_LETTERS[PIPE_KINDS] = {"F", "B", "I", "W", "SA", "RA", "SG", "RG"};

static int kind_known(PipeOpKind k) { return k >= 0 && k < PIPE_KINDS; }

const char *pipe_op_kind_name(PipeOpKind kind) {
    return kind_known(kind) ? KIND_NAME[kind] : "unknown";
}

const char *pipe_op_label(const Schedule *s, PipeOp op, char *buf, size_t n) {
    const char *letters = kind_known(op.kind) ? KIND_LETTERS[op.kind] : "?";
    if (s->chunks > 1)
        snprintf(buf, n, "%s%d.%d", letters, op.micro, op.chunk);
    else
        snprintf(buf, n, "%s%d", letters, op.micro);
    return buf;
}

void schedule_print(FILE *f, const Schedule *s, int show_comm) {
    char label[32];
    for (int r = 0; r < s->ranks; r++) {
        fprintf(f, "rank %d:", r);
        for (int i = 0; i < s->rank[r].n; i++) {
            PipeOp op = s->rank[r].ops[i];
            if (!show_comm && pipe_op_is_comm(op.kind)) continue;
            int after_batched = i > 0 && s->rank[r].ops[i - 1].batched;
            int opens = show_comm && op.batched && !after_batched;
            int closes = show_comm && !op.batched && after_batched;
            fprintf(f, " %s%s%s", opens ? "[" : "", pipe_op_label(s, op, label, sizeof label),
                    closes ? "]" : "");
        }
        fprintf(f, "\n");
    }
}

/* Ops [from, to) of rank r as the printer shows them: "[SA1 RG0]" */
static const char *batch_label(const Schedule *s, int r, int from, int to, char *buf, size_t n) {
    char label[32];
    size_t len = 0;
    for (int i = from; i < to && len < n; i++) {
        int w = snprintf(buf + len, n - len, "%s%s%s", i == from ? "[" : " ",
                         pipe_op_label(s, s->rank[r].ops[i], label, sizeof label),
                         i == to - 1 ? "]" : "");
        len += w > 0 ? (size_t)w : 0;
    }
    return buf;
}

/* ---- the index: where each (rank, kind, chunk, micro-batch) op is ------- */

/* pos[...] = the op's position in its rank's list, -1 when absent */
static int *index_alloc(const Schedule *s) {
    size_t n = (size_t)s->ranks * PIPE_KINDS * s->chunks * s->micro_batches;
    int *pos = malloc(n * sizeof *pos);
    CHECK(pos, "out of memory for a pipeline schedule's index (%zu entries)", n);
    for (size_t i = 0; i < n; i++) pos[i] = -1;
    return pos;
}

static size_t slot(const Schedule *s, int rank, PipeOpKind kind, int chunk, int micro) {
    return (((size_t)rank * PIPE_KINDS + kind) * s->chunks + chunk) * s->micro_batches + micro;
}
static int where(const Schedule *s, const int *pos, int rank, PipeOpKind kind, int chunk,
                 int micro) {
    return pos[slot(s, rank, kind, chunk, micro)];
}

/* A communication op's stage and the neighbour stage its message goes to
 * or comes from: SA and RG look at the next stage, RA and SG the previous. */
static int neighbour_stage(PipeOpKind kind, int stage) {
    return kind == PIPE_SEND_ACT || kind == PIPE_RECV_GRAD ? stage + 1 : stage - 1;
}

/* The op at the other end of a communication op's message. */
static PipeOp partner(const Schedule *s, int rank, PipeOp op) {
    static const PipeOpKind other[PIPE_KINDS] = {
        [PIPE_SEND_ACT] = PIPE_RECV_ACT, [PIPE_RECV_ACT] = PIPE_SEND_ACT,
        [PIPE_SEND_GRAD] = PIPE_RECV_GRAD, [PIPE_RECV_GRAD] = PIPE_SEND_GRAD,
    };
    int to = neighbour_stage(op.kind, schedule_stage_of(s, rank, op.chunk));
    return (PipeOp){other[op.kind], op.micro, schedule_chunk_of(s, to, op.micro), rank, 0};
}

static int fail(char *why, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *why, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, n, fmt, ap);
    va_end(ap);
    return -1;
}

/* ---- the validator, one function per group of checks -------------------- */

/* What a communication op moves, for messages: its direction and tensor. */
static const char *const COMM_WHAT[PIPE_KINDS] = {
    [PIPE_SEND_ACT] = "send an activation to", [PIPE_RECV_ACT] = "receive an activation from",
    [PIPE_SEND_GRAD] = "send an input gradient to", [PIPE_RECV_GRAD] = "receive a gradient from",
};

/* Fields in range, the peer right, no op twice; fills the index. */
static int check_ops(const Schedule *s, int *pos, char *why, size_t n) {
    int p = s->ranks, S = schedule_stages(s);
    char label[32];
    for (int r = 0; r < p; r++) {
        for (int i = 0; i < s->rank[r].n; i++) {
            PipeOp op = s->rank[r].ops[i];
            if (!kind_known(op.kind))
                return fail(why, n, "rank %d, op %d: unknown kind %d", r, i, (int)op.kind);
            pipe_op_label(s, op, label, sizeof label);
            if (op.micro < 0 || op.micro >= s->micro_batches)
                return fail(why, n, "rank %d, op %d (%s): micro-batch %d is not in [0, %d)", r, i,
                            label, op.micro, s->micro_batches);
            if (op.chunk < 0 || op.chunk >= s->chunks)
                return fail(why, n, "rank %d, op %d (%s): chunk %d is not in [0, %d)", r, i, label,
                            op.chunk, s->chunks);
            int stage = schedule_stage_of(s, r, op.chunk);
            int chunk = schedule_chunk_of(s, stage, op.micro);
            if (s->dual && chunk != op.chunk)
                return fail(why, n,
                            "rank %d, op %d (%s): micro-batch %d enters at rank %d, so it runs "
                            "on chunk %d of every rank (DualPipe's placement), not chunk %d",
                            r, i, label, op.micro, chunk ? p - 1 : 0, chunk, op.chunk);
            if (!pipe_op_is_comm(op.kind) && op.peer != -1)
                return fail(why, n,
                            "rank %d, op %d (%s): a compute op has no peer (peer %d, want -1)", r,
                            i, label, op.peer);
            if (pipe_op_is_comm(op.kind)) {
                if (p == 1)
                    return fail(why, n,
                                "rank 0, op %d (%s): a one-rank pipeline has no communication "
                                "(every stage is on rank 0)",
                                i, label);
                int to = neighbour_stage(op.kind, stage);
                if (to < 0 || to >= S)
                    return fail(why, n, "rank %d, op %d (%s): stage %d has no %s stage to %s", r, i,
                                label, stage, to < 0 ? "previous" : "next", COMM_WHAT[op.kind]);
                int peer = schedule_rank_of(s, to, op.micro);
                if (op.peer != peer)
                    return fail(why, n,
                                "rank %d, op %d (%s): peer rank %d, but stage %d's %s stage %d "
                                "is on rank %d",
                                r, i, label, op.peer, stage, to < stage ? "previous" : "next", to,
                                peer);
            }
            int from = batch_start(s, r, i);
            if (!pipe_op_is_comm(op.kind) && (op.batched || from < i)) {
                char batch[128];
                int to = batch_end(s, r, i);
                return fail(why, n,
                            "rank %d, op %d (%s): a compute op in the batch at op %d (%s); a "
                            "batch holds communication ops only",
                            r, i, label, from, batch_label(s, r, from, to, batch, sizeof batch));
            }
            if (op.batched && i == s->rank[r].n - 1)
                return fail(why, n,
                            "rank %d, op %d (%s): batched with the next op, but it is the "
                            "rank's last",
                            r, i, label);
            int *at = &pos[slot(s, r, op.kind, op.chunk, op.micro)];
            if (*at >= 0)
                return fail(why, n,
                            "rank %d, op %d (%s): a second %s of micro-batch %d on stage %d "
                            "(the first at op %d)",
                            r, i, label, KIND_NAME[op.kind], op.micro, stage, *at);
            *at = i;
        }
    }
    return 0;
}

/* Every send's receive is on its peer, and every receive's send. */
static int check_matches(const Schedule *s, const int *pos, char *why, size_t n) {
    char label[32], other[32];
    for (int r = 0; r < s->ranks; r++) {
        for (int i = 0; i < s->rank[r].n; i++) {
            PipeOp op = s->rank[r].ops[i];
            if (!pipe_op_is_comm(op.kind)) continue;
            PipeOp m = partner(s, r, op);
            if (where(s, pos, op.peer, m.kind, m.chunk, m.micro) < 0)
                return fail(why, n, "rank %d, op %d (%s): no matching %s on rank %d (%s)", r, i,
                            pipe_op_label(s, op, label, sizeof label),
                            op.kind == PIPE_SEND_ACT || op.kind == PIPE_SEND_GRAD ? "receive"
                                                                                  : "send",
                            op.peer, pipe_op_label(s, m, other, sizeof other));
        }
    }
    return 0;
}

/* Each (micro-batch, stage) once forward, once backward (B, or I and W). */
static int check_coverage(const Schedule *s, const int *pos, char *why, size_t n) {
    for (int stage = 0; stage < schedule_stages(s); stage++) {
        for (int i = 0; i < s->micro_batches; i++) {
            int r = schedule_rank_of(s, stage, i), c = schedule_chunk_of(s, stage, i);
            int f = where(s, pos, r, PIPE_FORWARD, c, i), b = where(s, pos, r, PIPE_BACKWARD, c, i);
            int bi = where(s, pos, r, PIPE_BACKWARD_INPUT, c, i);
            int bw = where(s, pos, r, PIPE_BACKWARD_WEIGHT, c, i);
            if (f < 0)
                return fail(why, n, "rank %d: no forward of micro-batch %d on stage %d", r, i,
                            stage);
            if (b >= 0 && (bi >= 0 || bw >= 0))
                return fail(why, n,
                            "rank %d: micro-batch %d on stage %d has a whole backward (op %d) "
                            "and a split one (op %d)",
                            r, i, stage, b, bi >= 0 ? bi : bw);
            if (b < 0 && bi < 0 && bw < 0)
                return fail(why, n, "rank %d: no backward of micro-batch %d on stage %d", r, i,
                            stage);
            if (bi >= 0 && bw < 0)
                return fail(why, n, "rank %d: micro-batch %d on stage %d has its input-gradient "
                            "backward (op %d) but no weight-gradient one", r, i, stage, bi);
            if (bw >= 0 && bi < 0)
                return fail(why, n, "rank %d: micro-batch %d on stage %d has its weight-gradient "
                            "backward (op %d) but no input-gradient one", r, i, stage, bw);
        }
    }
    return 0;
}

/* Op `user` (at `at` on rank r) needs `input` (at input_at, -1 if absent)
 * before it; `what` says what the input is. An op in a batch stands at
 * its batch's position (a compute op is never in one). */
static int need_before(const Schedule *s, int r, int at, PipeOp user, int input_at, PipeOp input,
                       const char *what, char *why, size_t n) {
    char a[32], b[32];
    pipe_op_label(s, user, a, sizeof a);
    pipe_op_label(s, input, b, sizeof b);
    if (input_at < 0)
        return fail(why, n, "rank %d, op %d (%s): needs %s (%s), but rank %d has none", r, at, a,
                    what, b, r);
    if (batch_start(s, r, input_at) > batch_start(s, r, at))
        return fail(why, n, "rank %d, op %d (%s): needs %s (%s), which comes after it, at op %d", r,
                    at, a, what, b, input_at);
    return 0;
}

/* The send `out` (at out_at, -1 if absent) must follow the op that
 * computes what it sends, `producer` at `at`. */
static int send_after(const Schedule *s, int r, int at, PipeOp producer, int out_at, PipeOp out,
                      char *why, size_t n) {
    char a[32], b[32];
    pipe_op_label(s, producer, a, sizeof a);
    pipe_op_label(s, out, b, sizeof b);
    if (out_at < 0)
        return fail(why, n, "rank %d, op %d (%s): its result goes to rank %d (%s), but rank %d has "
                    "no such send", r, at, a, out.peer, b, r);
    if (batch_start(s, r, out_at) < batch_start(s, r, at))
        return fail(why, n, "rank %d, op %d (%s): sends before %s (op %d) has computed it", r,
                    out_at, b, a, at);
    return 0;
}

/* What runs a (micro-batch, chunk)'s backward: B, else (split) I. */
static PipeOpKind backward_kind(const Schedule *s, const int *pos, int r, int chunk, int micro) {
    return where(s, pos, r, PIPE_BACKWARD, chunk, micro) >= 0 ? PIPE_BACKWARD : PIPE_BACKWARD_INPUT;
}

/* Backward after forward, W after I, inputs received (or, on one rank,
 * computed) before they are used and outputs sent after they are made. */
static int check_order(const Schedule *s, const int *pos, char *why, size_t n) {
    int p = s->ranks, S = schedule_stages(s);
    char what[64];
    for (int stage = 0; stage < S; stage++) {
        for (int i = 0; i < s->micro_batches; i++) {
            int r = schedule_rank_of(s, stage, i), c = schedule_chunk_of(s, stage, i);
            PipeOp F = {PIPE_FORWARD, i, c, -1, 0};
            int f = where(s, pos, r, PIPE_FORWARD, c, i);
            PipeOp B = {backward_kind(s, pos, r, c, i), i, c, -1, 0};
            int b = where(s, pos, r, B.kind, c, i);
            if (need_before(s, r, b, B, f, F, "its forward", why, n)) return -1;
            if (B.kind == PIPE_BACKWARD_INPUT &&
                need_before(s, r, where(s, pos, r, PIPE_BACKWARD_WEIGHT, c, i),
                            (PipeOp){PIPE_BACKWARD_WEIGHT, i, c, -1, 0}, b, B,
                            "its input gradient", why, n))
                return -1;
            if (p == 1) {  /* the neighbour stages are this rank's other chunks */
                if (stage > 0) {
                    snprintf(what, sizeof what, "stage %d's forward", stage - 1);
                    if (need_before(s, r, f, F, where(s, pos, r, PIPE_FORWARD, c - 1, i),
                                    (PipeOp){PIPE_FORWARD, i, c - 1, -1, 0}, what, why, n))
                        return -1;
                }
                if (stage < S - 1) {
                    PipeOpKind k = backward_kind(s, pos, r, c + 1, i);
                    snprintf(what, sizeof what, "stage %d's backward", stage + 1);
                    if (need_before(s, r, b, B, where(s, pos, r, k, c + 1, i),
                                    (PipeOp){k, i, c + 1, -1, 0}, what, why, n))
                        return -1;
                }
                continue;
            }
            int prev = schedule_rank_of(s, stage > 0 ? stage - 1 : stage, i);
            int next = schedule_rank_of(s, stage < S - 1 ? stage + 1 : stage, i);
            if (stage > 0) {
                snprintf(what, sizeof what, "its input from rank %d", prev);
                if (need_before(s, r, f, F, where(s, pos, r, PIPE_RECV_ACT, c, i),
                                (PipeOp){PIPE_RECV_ACT, i, c, prev, 0}, what, why, n) ||
                    send_after(s, r, b, B, where(s, pos, r, PIPE_SEND_GRAD, c, i),
                               (PipeOp){PIPE_SEND_GRAD, i, c, prev, 0}, why, n))
                    return -1;
            }
            if (stage < S - 1) {
                snprintf(what, sizeof what, "its output gradient from rank %d", next);
                if (send_after(s, r, f, F, where(s, pos, r, PIPE_SEND_ACT, c, i),
                               (PipeOp){PIPE_SEND_ACT, i, c, next, 0}, why, n) ||
                    need_before(s, r, b, B, where(s, pos, r, PIPE_RECV_GRAD, c, i),
                                (PipeOp){PIPE_RECV_GRAD, i, c, next, 0}, what, why, n))
                    return -1;
            }
        }
    }
    return 0;
}

/* Run the lists under rendezvous semantics (schedule.h): a compute op
 * always goes; at a batch (a lone op is a batch of one) a rank has posted
 * every member, and a member completes with its partner once the partner
 * is posted too: in the batch its rank is at, not yet completed. The rank
 * goes past the batch when every member has completed. */
static int posted(const Schedule *s, const int *pc, char *const *done, int r, int i) {
    return i >= pc[r] && i < batch_end(s, r, pc[r]) && !done[r][i];
}

static int check_deadlock(const Schedule *s, const int *pos, char *why, size_t n) {
    int p = s->ranks, *pc = calloc((size_t)p, sizeof *pc);
    char **done = calloc((size_t)p, sizeof *done);
    CHECK(pc && done, "out of memory for %d ranks", p);
    for (int r = 0; r < p; r++) {
        done[r] = calloc((size_t)s->rank[r].n + 1, 1);
        CHECK(done[r], "out of memory for %d ops", s->rank[r].n);
    }
    for (int moved = 1; moved;) {
        moved = 0;
        for (int r = 0; r < p; r++) {
            while (pc[r] < s->rank[r].n) {
                int end = batch_end(s, r, pc[r]), open = 0;
                for (int i = pc[r]; i < end; i++) {
                    PipeOp op = s->rank[r].ops[i];
                    if (!pipe_op_is_comm(op.kind) || done[r][i]) continue;
                    PipeOp m = partner(s, r, op);
                    int at = where(s, pos, op.peer, m.kind, m.chunk, m.micro);
                    if (!posted(s, pc, done, op.peer, at)) {
                        open++;
                        continue;
                    }
                    done[r][i] = done[op.peer][at] = 1;
                    moved = 1;
                }
                if (open) break;
                pc[r] = end;
                moved = 1;
            }
        }
    }
    int stuck = 0;
    size_t len = 0;
    char label[32], batch[128];
    for (int r = 0; r < p; r++) {
        if (pc[r] == s->rank[r].n) continue;
        int end = batch_end(s, r, pc[r]), w;
        const char *head = stuck++ ? "," : "deadlock under blocking send and receive:";
        if (end - pc[r] > 1)
            w = snprintf(why + len, n - len, "%s rank %d waits at op %d (%s:", head, r, pc[r],
                         batch_label(s, r, pc[r], end, batch, sizeof batch));
        else
            w = snprintf(why + len, n - len, "%s rank %d waits at op %d (", head, r, pc[r]);
        len = w > 0 && len + (size_t)w < n ? len + (size_t)w : (n ? n - 1 : 0);  /* truncated */
        for (int i = pc[r], first = 1; i < end; i++) {
            PipeOp op = s->rank[r].ops[i];
            if (done[r][i]) continue;
            int sends = op.kind == PIPE_SEND_ACT || op.kind == PIPE_SEND_GRAD;
            w = snprintf(why + len, n - len, "%s%s %s rank %d",
                         first ? (end - pc[r] > 1 ? " " : "") : ", ",
                         pipe_op_label(s, op, label, sizeof label), sends ? "to" : "from",
                         op.peer);
            first = 0;
            len = w > 0 && len + (size_t)w < n ? len + (size_t)w : (n ? n - 1 : 0);
        }
        w = snprintf(why + len, n - len, ")");
        len = w > 0 && len + (size_t)w < n ? len + (size_t)w : (n ? n - 1 : 0);
    }
    for (int r = 0; r < p; r++) free(done[r]);
    free(done);
    free(pc);
    return stuck ? -1 : 0;
}

/* Every check, in order; pos: an index from index_alloc, filled here. */
static int validate_into(const Schedule *s, int *pos, char *why, size_t n) {
    CHECK(s->ranks >= 1 && s->micro_batches >= 1 && s->chunks >= 1,
          "a schedule not made by schedule_create (%d ranks, %d micro-batches, %d chunks)",
          s->ranks, s->micro_batches, s->chunks);
    if (check_ops(s, pos, why, n) || check_matches(s, pos, why, n) ||
        check_coverage(s, pos, why, n) || check_order(s, pos, why, n) ||
        check_deadlock(s, pos, why, n))
        return -1;
    return 0;
}

int schedule_validate(const Schedule *s, char *why, size_t n) {
    int *pos = index_alloc(s);
    int rc = validate_into(s, pos, why, n);
    free(pos);
    return rc;
}

/* ---- the simulator ------------------------------------------------------ */

static double cost_of(const PipeCosts *c, PipeOpKind kind) {
    switch (kind) {
    case PIPE_FORWARD: return c->forward;
    case PIPE_BACKWARD: return c->backward;
    case PIPE_BACKWARD_INPUT: return c->backward_input;
    case PIPE_BACKWARD_WEIGHT: return c->backward_weight;
    default: return 0;
    }
}

/* The position of the receive a compute op reads its input from, or -1
 * (the first stage's forward, the last stage's backward, W, p = 1). */
static int input_message(const Schedule *s, const int *pos, int r, PipeOp op) {
    int stage = schedule_stage_of(s, r, op.chunk), p = s->ranks;
    if (p == 1) return -1;
    if (op.kind == PIPE_FORWARD && stage > 0)
        return where(s, pos, r, PIPE_RECV_ACT, op.chunk, op.micro);
    if ((op.kind == PIPE_BACKWARD || op.kind == PIPE_BACKWARD_INPUT) &&
        stage < schedule_stages(s) - 1)
        return where(s, pos, r, PIPE_RECV_GRAD, op.chunk, op.micro);
    return -1;
}

/* Post the communication ops [from, to) of rank r at time `at` (those not
 * posted yet), and give each whose partner is posted its message's
 * arrival; returns the latest arrival, or -1 while some has none yet. */
static double post(const Schedule *s, const int *pos, const PipeCosts *c, PipeTimeline *t, int r,
                   int from, int to, double at, int *moved) {
    double last = at;
    for (int i = from; i < to; i++) {
        PipeOp op = s->rank[r].ops[i];
        PipeOpTime *mine = &t->rank[r].op[i];
        if (mine->start < 0) {
            mine->start = at;
            *moved = 1;
        }
        if (mine->end < 0) {
            PipeOp m = partner(s, r, op);
            PipeOpTime *other =
                &t->rank[op.peer].op[where(s, pos, op.peer, m.kind, m.chunk, m.micro)];
            if (other->start >= 0)
                mine->end = other->end =
                    (mine->start > other->start ? mine->start : other->start) + c->send;
        }
        if (mine->end < 0) last = -1;
        else if (last >= 0 && mine->end > last) last = mine->end;
    }
    return last;
}

/* Each op's start and end: ranks move in turn as far as they can; a compute
 * op waits for its input message's arrival, known once both ends are
 * posted, and the op after a batch for every message of the batch. A
 * valid schedule runs to the end under rendezvous, so it does here too,
 * where communication holds a rank back less: a lone op never does, a
 * batch only until its partners are posted. */
static void simulate_times(const Schedule *s, const int *pos, const PipeCosts *c, PipeTimeline *t) {
    int p = s->ranks, *pc = calloc((size_t)p, sizeof *pc), left = 0;
    double *clock = calloc((size_t)p, sizeof *clock);
    CHECK(pc && clock, "out of memory for %d ranks", p);
    for (int r = 0; r < p; r++) left += s->rank[r].n;
    while (left > 0) {
        int moved = 0;
        for (int r = 0; r < p; r++) {
            while (pc[r] < s->rank[r].n) {
                PipeOp op = s->rank[r].ops[pc[r]];
                PipeOpTime *at = &t->rank[r].op[pc[r]];
                if (pipe_op_is_comm(op.kind)) {
                    int end = batch_end(s, r, pc[r]);
                    double arrived = post(s, pos, c, t, r, pc[r], end, clock[r], &moved);
                    if (end - pc[r] > 1) {  /* a batch: wait for all of it */
                        if (arrived < 0) break;
                        clock[r] = arrived;
                    }
                    left -= end - pc[r];
                    pc[r] = end;
                    moved = 1;
                    continue;
                }
                double ready = clock[r];
                int in = input_message(s, pos, r, op);
                if (in >= 0) {
                    double arrived = t->rank[r].op[in].end;
                    if (arrived < 0) break;  /* the sender has not posted it yet */
                    if (arrived > ready) ready = arrived;
                }
                at->start = ready;
                at->end = clock[r] = ready + cost_of(c, op.kind);
                pc[r]++;
                left--;
                moved = 1;
            }
        }
        CHECK(moved, "the simulation of a valid pipeline schedule stalled (%d ops left)", left);
    }
    free(pc);
    free(clock);
}

/* Busy and idle time, the activation memory along the list, op counts. */
static void rank_stats(const Schedule *s, int r, const PipeCosts *c, double makespan,
                       PipeRankTimeline *t) {
    int activations = 0;
    double memory = 0;
    for (int i = 0; i < s->rank[r].n; i++) {
        PipeOpKind kind = s->rank[r].ops[i].kind;
        t->count[kind]++;
        if (!pipe_op_is_comm(kind)) t->busy += t->op[i].end - t->op[i].start;
        if (kind == PIPE_FORWARD) {
            activations++;
            memory += 1;
        } else if (kind == PIPE_BACKWARD) {
            activations--;
            memory -= 1;
        } else if (kind == PIPE_BACKWARD_INPUT) {
            activations--;
            memory -= 1 - c->weight_memory;
        } else if (kind == PIPE_BACKWARD_WEIGHT) {
            memory -= c->weight_memory;
        }
        if (activations > t->peak_activations) t->peak_activations = activations;
        if (memory > t->peak_memory) t->peak_memory = memory;
    }
    t->idle = makespan - t->busy;
    t->bubble_fraction = makespan > 0 ? t->idle / makespan : 0;
}

void schedule_simulate(const Schedule *s, const PipeCosts *c, PipeTimeline *out) {
    if (!(c->forward >= 0 && c->backward >= 0 && c->backward_input >= 0 &&
          c->backward_weight >= 0 && c->send >= 0))
        USER_ERROR("pipeline costs must be >= 0 (forward %g, backward %g, backward-input %g, "
                   "backward-weight %g, send %g)", c->forward, c->backward, c->backward_input,
                   c->backward_weight, c->send);
    if (!(c->weight_memory >= 0 && c->weight_memory <= 1))
        USER_ERROR(
            "the weight gradient's share of the activation memory must be in [0, 1] (got %g)",
            c->weight_memory);
    int *pos = index_alloc(s);
    char why[512];
    if (validate_into(s, pos, why, sizeof why)) USER_ERROR("invalid pipeline schedule: %s", why);
    int p = s->ranks;
    *out = (PipeTimeline){.ranks = p, .rank = calloc((size_t)p, sizeof *out->rank)};
    CHECK(out->rank, "out of memory for a timeline of %d ranks", p);
    for (int r = 0; r < p; r++) {
        int ops = s->rank[r].n;
        out->rank[r].op = malloc((size_t)ops * sizeof *out->rank[r].op);  /* valid: ops > 0 */
        CHECK(out->rank[r].op, "out of memory for a timeline of %d ops", ops);
        for (int i = 0; i < ops; i++) out->rank[r].op[i] = (PipeOpTime){-1, -1};
    }
    simulate_times(s, pos, c, out);
    free(pos);
    for (int r = 0; r < p; r++)
        for (int i = 0; i < s->rank[r].n; i++)
            if (out->rank[r].op[i].end > out->makespan) out->makespan = out->rank[r].op[i].end;
    double idle = 0;
    for (int r = 0; r < p; r++) {
        rank_stats(s, r, c, out->makespan, &out->rank[r]);
        idle += out->rank[r].idle;
    }
    out->bubble_fraction = out->makespan > 0 ? idle / (p * out->makespan) : 0;
}

void pipe_timeline_free(PipeTimeline *t) {
    for (int r = 0; r < t->ranks; r++) free(t->rank[r].op);
    free(t->rank);
    *t = (PipeTimeline){0};
}

/* ---- the formulas ------------------------------------------------------- */

double pipe_bubble_fraction(int p, int m, int v) {
    if (p < 1 || m < 1 || v < 1)
        USER_ERROR("the bubble formula needs p, m, v >= 1 (got %d, %d, %d)", p, m, v);
    if (v > 1 && m % p != 0)
        USER_ERROR("the interleaved bubble formula needs m a multiple of p (m %d, p %d)", m, p);
    return (double)(p - 1) / ((double)v * m + p - 1);
}

double pipe_bubble_fraction_zb_h1(int p, int m, const PipeCosts *c) {
    if (p < 1 || m < p) USER_ERROR("the ZB-H1 bubble formula needs m >= p >= 1 (m %d, p %d)", m, p);
    double f = c->forward, i = c->backward_input, w = c->backward_weight;
    double filled = w < f ? (w < i ? w : i) : (f < i ? f : i);  /* min(t_w, t_f, t_i) */
    double idle = (p - 1) * (f + i - filled), busy = m * (f + i + w);
    return idle / (busy + idle);
}

double pipe_idle_dualpipe(int p, const PipeCosts *c) {
    if (p < 2 || p % 2) USER_ERROR("the DualPipe bubble formula needs an even p >= 2 (p %d)", p);
    double f_and_b = c->forward + c->backward;  /* in turn: no overlap in the simulator */
    return (p / 2 - 1) * (f_and_b + c->backward - 3 * c->backward_weight);
}

double pipe_bubble_fraction_dualpipe(int p, int m, const PipeCosts *c) {
    double idle = pipe_idle_dualpipe(p, c), busy = m * (c->forward + c->backward);
    return busy + idle > 0 ? idle / (busy + idle) : 0;
}

/* ---- the schedules' names and what each needs --------------------------- */

const char *const PIPE_SCHEDULE_NAMES[] = {"gpipe", "1f1b", "interleaved", "zb-h1",
                                           "1f1b-unbatched", "dualpipe", NULL};

int pipe_schedule_dual(const char *name) { return strcmp(name, "dualpipe") == 0; }

int pipe_schedule_problem(const char *name, int p, int m, int v, char *why, size_t n) {
    int known = 0;
    char names[128] = "";
    for (int k = 0; PIPE_SCHEDULE_NAMES[k]; k++) {
        known |= strcmp(name, PIPE_SCHEDULE_NAMES[k]) == 0;
        size_t len = strlen(names);
        snprintf(names + len, sizeof names - len, "%s%s", k ? ", " : "", PIPE_SCHEDULE_NAMES[k]);
    }
    if (!known) return fail(why, n, "unknown pipeline schedule '%s' (known: %s)", name, names);
    if (p < 1 || m < 1 || v < 1)
        return fail(why, n,
                    "a pipeline needs at least 1 rank, 1 micro-batch and 1 chunk per rank (got p "
                    "%d, m %d, v %d)", p, m, v);
    int interleaved = strcmp(name, "interleaved") == 0;
    if (pipe_schedule_dual(name)) {
        if (v != 2)
            return fail(why, n, "dualpipe holds two chunks per rank, stages r and p-1-r (got v "
                        "%d)", v);
        if (p < 2 || p % 2)
            return fail(why, n, "dualpipe needs an even number of ranks, at least 2 (got p %d): "
                        "rank r and rank p-1-r hold the same two stages", p);
        if (m % 2 || m < 2 * p)
            return fail(why, n, "dualpipe needs an even number of micro-batches, at least 2p "
                        "(m %d, p %d): m/2 enter from each end, and every rank's warm-up from "
                        "both ends must fit", m, p);
        return 0;
    }
    if (!interleaved && v != 1)
        return fail(why, n,
                    "%s holds one chunk per rank (got v %d): only the interleaved schedule has "
                    "more", name, v);
    if (interleaved && v < 2)
        return fail(why, n,
                    "interleaved needs v >= 2 chunks per rank (got v %d; with one chunk it is "
                    "1f1b)", v);
    if (interleaved && m < p)
        return fail(why, n,
                    "interleaved needs at least p micro-batches (m %d, p %d): Megatron-LM's "
                    "interleaved schedule moves micro-batches through the chunks in groups of p",
                    m, p);
    if (interleaved && m % p != 0)
        return fail(why, n,
                    "interleaved needs m a multiple of p (m %d, p %d): Megatron-LM's interleaved "
                    "schedule moves micro-batches through the chunks in groups of p", m, p);
    return 0;
}

/* The compute ops of a rank's list, in order, equal in a and b */
static int same_compute_order(const PipeOpList *a, const PipeOpList *b) {
    int i = 0, j = 0;
    for (;;) {
        while (i < a->n && pipe_op_is_comm(a->ops[i].kind)) i++;
        while (j < b->n && pipe_op_is_comm(b->ops[j].kind)) j++;
        if (i == a->n || j == b->n) return i == a->n && j == b->n;
        if (a->ops[i].kind != b->ops[j].kind || a->ops[i].micro != b->ops[j].micro ||
            a->ops[i].chunk != b->ops[j].chunk)
            return 0;
        i++, j++;
    }
}

int pipe_generated_problem(const Schedule *s, const char *name, int p, int m, int v,
                           const Schedule *one_f_one_b, char *why, size_t n) {
    if (!s) return fail(why, n, "the %s generator returned NULL", name);
    if (s->ranks != p || s->micro_batches != m || s->chunks != v)
        return fail(why, n, "the %s generator made a schedule for p %d, m %d, v %d, asked for p "
                    "%d, m %d, v %d", name, s->ranks, s->micro_batches, s->chunks, p, m, v);
    if (s->dual != pipe_schedule_dual(name))
        return fail(why, n, "the %s generator made a schedule %s DualPipe's placement (%s)", name,
                    s->dual ? "of" : "without",
                    s->dual ? "schedule_create_dual is for dualpipe alone" : "build it with "
                    "schedule_create_dual");
    char reason[400];
    if (schedule_validate(s, reason, sizeof reason))
        return fail(why, n, "the %s schedule is not valid: %s", name, reason);
    if (strcmp(name, "1f1b-unbatched") != 0) return 0;
    for (int r = 0; r < p; r++)
        for (int i = 0; i < s->rank[r].n; i++)
            if (s->rank[r].ops[i].batched)
                return fail(why, n, "1f1b-unbatched holds a batch (rank %d, op %d): every message "
                            "must be a lone op", r, i);
    if (!one_f_one_b) return 0;
    CHECK(one_f_one_b->ranks == p && one_f_one_b->micro_batches == m,
          "1f1b-unbatched is compared with a 1F1B schedule of the same p and m");
    for (int r = 0; r < p; r++)
        if (!same_compute_order(&s->rank[r], &one_f_one_b->rank[r]))
            return fail(why, n, "1f1b-unbatched: rank %d's forwards and backwards are not in the "
                        "order of your schedule_1f1b's (if that one is right, this one is not)",
                        r);
    return 0;
}

void schedule_write_timeline_csv(const char *path, const Schedule *s, const PipeTimeline *t,
                                 double t0) {
    AtomicFile af;
    FILE *f = atomic_open(&af, path);
    char label[32];
    fprintf(f, "rank,index,label,kind,micro,chunk,start,end\n");
    for (int r = 0; r < s->ranks; r++)
        for (int i = 0; i < s->rank[r].n; i++) {
            PipeOp op = s->rank[r].ops[i];
            fprintf(f, "%d,%d,%s,%s,%d,%d,%.9g,%.9g\n", r, i,
                    pipe_op_label(s, op, label, sizeof label), pipe_op_kind_name(op.kind), op.micro,
                    op.chunk, t->rank[r].op[i].start - t0, t->rank[r].op[i].end - t0);
        }
    atomic_commit(&af);
}
