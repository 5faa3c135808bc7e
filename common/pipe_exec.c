#include "pipe_exec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "check.h"
#include "comm.h"
#include "device.h"
#include "kernels.h"
#include "trace.h"

/* One (micro-batch, chunk) in flight */
typedef struct PipeSlot {
    GPTActs *acts;          /* from the chunk's pool, or NULL */
    int released;           /* given back this step: using them again is a bug */
    /* The messages (MEM_COMM) are in the run's format (message_dtype:
     * floats, or mixed precision's 2-byte elements, as a bf16 trainer's
     * activations travel) */
    void *act_in;           /* received input, until its forward widens it in */
    void *grad_out;         /* received d(output), until its backward */
    float *grad_out_wide;   /* mixed precision: it widened, during the backward */
    float *grad_in;         /* d(input) (floats, the backward's), until delivered */
    void *grad_wire;        /* mixed precision: it narrowed for the send, as long */
    CommRequest recv_act, recv_grad, send_act, send_grad;
    int recv_act_busy, recv_grad_busy, send_act_busy, send_grad_busy;
    int grad_sent;          /* grad_in's send was posted */
} PipeSlot;

/* A chunk's activation sets: `all` of them, `nfree` of which (the first
 * entries of `free_sets`) are not in use */
typedef struct PipePool {
    GPTActs **all, **free_sets;
    int nall, nfree;
} PipePool;

static int my_rank(const PipeRank *x) { return x->layout->pp_rank; }

/* A message's floats (model.h) */
static size_t io_floats(const PipeRank *x) { return gpt_stage_io_floats(x->layout, x->rows, x->seq); }

/* What the messages travel in: fp32's floats, or mixed precision's
 * 2-byte format; and their bytes */
static CommDtype message_dtype(const PipeRank *x) {
    return comm_dtype_of(x->layout->cfg.precision);
}
static size_t message_bytes(const PipeRank *x) {
    return io_floats(x) * comm_dtype_size(message_dtype(x));
}
static int narrowed(const PipeRank *x) { return message_dtype(x) != COMM_FLOAT; }

void pipe_rank_init(PipeRank *x, const GPTLayout *l, const GPTParams *params, GPTParams *grads,
                    const ModelHooks *hooks, int rows, int seq, Comm *pp_group, int poison) {
    memset(x, 0, sizeof *x);
    x->layout = l;
    x->params = params;
    x->grads = grads;
    x->hooks = hooks;
    x->rows = rows;
    x->seq = seq;
    x->pp_group = pp_group;
    x->poison = poison;
    CHECK(l->pp == 1 || (pp_group && pp_group->size == l->pp),
          "a pipeline of %d ranks needs its pp group", l->pp);
    gpt_scratch_alloc(l, rows, seq, &x->scratch);
    x->pool = calloc((size_t)l->chunks, sizeof *x->pool);
    CHECK(x->pool, "out of memory");
}

void pipe_rank_free(PipeRank *x) {
    for (int c = 0; c < x->layout->chunks; c++) {
        PipePool *p = &x->pool[c];
        for (int k = 0; k < p->nall; k++) {
            gpt_stage_acts_free(p->all[k]);
            free(p->all[k]);
        }
        free(p->all);
        free(p->free_sets);
    }
    free(x->pool);
    free(x->slot);
    free(x->times);
    gpt_scratch_free(&x->scratch);
    memset(x, 0, sizeof *x);
}

static PipeSlot *slot_of(PipeRank *x, int micro, int chunk) {
    const Schedule *s = x->schedule;
    CHECK(s && micro >= 0 && micro < s->micro_batches && chunk >= 0 && chunk < s->chunks,
          "micro-batch %d, chunk %d: not in the running schedule", micro, chunk);
    return &x->slot[chunk * s->micro_batches + micro];
}

static void wait_if(CommRequest *r, int *busy) {
    if (*busy) comm_wait(r);
    *busy = 0;
}

/* ---- activations: taken from the chunk's pool, given back -------------- */

static GPTActs *pool_take(PipeRank *x, int chunk) {
    PipePool *p = &x->pool[chunk];
    if (p->nfree > 0) return p->free_sets[--p->nfree];
    GPTActs *a = malloc(sizeof *a);
    GPTActs **all = realloc(p->all, (size_t)(p->nall + 1) * sizeof *all);
    GPTActs **free_sets = realloc(p->free_sets, (size_t)(p->nall + 1) * sizeof *free_sets);
    CHECK(a && all && free_sets, "out of memory");
    p->all = all;
    p->free_sets = free_sets;
    const GPTStage st = gpt_stage(x->layout, chunk);
    gpt_stage_acts_alloc(x->layout, &st, x->rows, x->seq, a);
    gpt_acts_use_scratch(a, &x->scratch);
    p->all[p->nall++] = a;
    return a;
}

GPTActs *pipe_acts(PipeRank *x, int micro, int chunk) {
    PipeSlot *sl = slot_of(x, micro, chunk);
    CHECK(!sl->released, "the activations of micro-batch %d on chunk %d were released before "
          "this op that reads them", micro, chunk);
    if (!sl->acts) {
        sl->acts = pool_take(x, chunk);
        if (sl->acts->stage.embedding || sl->acts->stage.head)
            x->load(x->load_ctx, micro, sl->acts);
    }
    return sl->acts;
}

void pipe_acts_release(PipeRank *x, int micro, int chunk) {
    PipeSlot *sl = slot_of(x, micro, chunk);
    CHECK(sl->acts && !sl->released, "releasing the activations of micro-batch %d on chunk %d, "
          "which are not held", micro, chunk);
    wait_if(&sl->send_act, &sl->send_act_busy);  /* the send reads the last block's output */
    GPTActs *a = sl->acts;
    if (x->poison) gpt_stage_acts_poison(x->layout, a);
    PipePool *p = &x->pool[chunk];
    p->free_sets[p->nfree++] = a;
    sl->acts = NULL;
    sl->released = 1;
}

const float *pipe_grad_out(PipeRank *x, int micro, int chunk) {
    PipeSlot *sl = slot_of(x, micro, chunk);
    const GPTStage st = gpt_stage(x->layout, chunk);
    if (st.head) return NULL;
    if (x->layout->pp == 1) return slot_of(x, micro, chunk + 1)->grad_in;  /* same rank */
    CHECK(sl->grad_out, "micro-batch %d on chunk %d: its output gradient was never received "
          "(no RG before its backward)", micro, chunk);
    if (!narrowed(x)) return sl->grad_out;
    if (!sl->grad_out_wide) {
        sl->grad_out_wide = mem_alloc(MEM_COMM, io_floats(x) * sizeof(float));
        widen_from_half(sl->grad_out_wide, sl->grad_out, io_floats(x), x->layout->cfg.precision);
    }
    return sl->grad_out_wide;
}

float *pipe_grad_in(PipeRank *x, int micro, int chunk) {
    PipeSlot *sl = slot_of(x, micro, chunk);
    if (gpt_stage(x->layout, chunk).embedding) return NULL;
    if (!sl->grad_in) sl->grad_in = mem_alloc(MEM_COMM, io_floats(x) * sizeof(float));
    return sl->grad_in;
}

/* ---- messages ----------------------------------------------------------- */

/* (activation or gradient, receiving stage, micro-batch): unique in a step */
static int message_tag(const Schedule *s, int is_grad, int stage, int micro) {
    return 2 * (stage * s->micro_batches + micro) + is_grad;
}

static void post(PipeRank *x, const PipeOp *op) {
    const Schedule *s = x->schedule;
    PipeSlot *sl = slot_of(x, op->micro, op->chunk);
    const int stage = schedule_stage_of(s, my_rank(x), op->chunk);
    const size_t n = io_floats(x);
    const CommDtype dtype = message_dtype(x);
    const int precision = x->layout->cfg.precision;
    const void *sent;
    switch (op->kind) {
    case PIPE_RECV_ACT:  /* into a buffer of its own: the activations are taken at F */
        if (!sl->act_in) sl->act_in = mem_alloc(MEM_COMM, message_bytes(x));
        comm_irecv(x->pp_group, sl->act_in, n, dtype, op->peer,
                   message_tag(s, 0, stage, op->micro), &sl->recv_act);
        sl->recv_act_busy = 1;
        break;
    case PIPE_SEND_ACT:  /* the output's floats hold the format's values: on comm.h's
                          * 2-byte wire, held until the send is waited for */
        comm_isend(x->pp_group, gpt_stage_output(pipe_acts(x, op->micro, op->chunk)), n,
                   comm_act_dtype(precision), op->peer, message_tag(s, 0, stage + 1, op->micro),
                   &sl->send_act);
        sl->send_act_busy = 1;
        break;
    case PIPE_RECV_GRAD:
        if (!sl->grad_out) sl->grad_out = mem_alloc(MEM_COMM, message_bytes(x));
        comm_irecv(x->pp_group, sl->grad_out, n, dtype, op->peer,
                   message_tag(s, 1, stage, op->micro), &sl->recv_grad);
        sl->recv_grad_busy = 1;
        break;
    case PIPE_SEND_GRAD:
        CHECK(sl->grad_in, "micro-batch %d on chunk %d: sending an input gradient its backward "
              "never wrote", op->micro, op->chunk);
        sent = sl->grad_in;
        if (narrowed(x)) {  /* rounded to the format here, as a bf16 backward writes it */
            sl->grad_wire = mem_alloc(MEM_COMM, message_bytes(x));
            narrow_to_half(sl->grad_wire, sent, n, precision);
            sent = sl->grad_wire;
        }
        comm_isend(x->pp_group, sent, n, dtype, op->peer,
                   message_tag(s, 1, stage - 1, op->micro), &sl->send_grad);
        sl->send_grad_busy = sl->grad_sent = 1;
        break;
    default: CHECK(0, "not a communication op");
    }
}

/* The members of a posted batch, all completed */
static void wait_batch(PipeRank *x, const PipeOp *ops, int n) {
    for (int k = 0; k < n; k++) {
        PipeSlot *sl = slot_of(x, ops[k].micro, ops[k].chunk);
        switch (ops[k].kind) {
        case PIPE_RECV_ACT: wait_if(&sl->recv_act, &sl->recv_act_busy); break;
        case PIPE_SEND_ACT: wait_if(&sl->send_act, &sl->send_act_busy); break;
        case PIPE_RECV_GRAD: wait_if(&sl->recv_grad, &sl->recv_grad_busy); break;
        default: wait_if(&sl->send_grad, &sl->send_grad_busy); break;
        }
    }
}

/* Gradient sends: testing lets MPI move them (it progresses messages only
 * inside its calls); their buffers are freed at fixed points, before each
 * backward and at the step's end, once the sends are waited for, so that
 * the peak of MEM_COMM is the schedule's, not the timing's
 * (pipe_comm_peak_bytes). */
static void progress_sent_grads(PipeRank *x) {
    const int n = x->schedule->micro_batches * x->schedule->chunks;
    for (int k = 0; k < n; k++)
        if (x->slot[k].send_grad_busy && comm_test(&x->slot[k].send_grad))
            x->slot[k].send_grad_busy = 0;
}

static void free_sent_grads(PipeRank *x) {
    const int n = x->schedule->micro_batches * x->schedule->chunks;
    for (int k = 0; k < n; k++) {
        PipeSlot *sl = &x->slot[k];
        if (!sl->grad_sent || !sl->grad_in) continue;
        wait_if(&sl->send_grad, &sl->send_grad_busy);
        mem_free(sl->grad_in);
        sl->grad_in = NULL;
        if (sl->grad_wire) mem_free(sl->grad_wire);
        sl->grad_wire = NULL;
    }
}

/* ---- compute ops ------------------------------------------------------- */

static const char *const g_compute_names[] = {"forward", "backward", "backward-input",
                                              "backward-weight"};

/* B and W read their micro-batch's activations last (PipeStageOps) */
static void kept_after_last_read(const PipeStageOps *ops, const PipeSlot *sl, const PipeOp *op,
                                 const char *what) {
    if (sl->acts)
        die_at(__FILE__, __LINE__, "%s%s returned with the activations of micro-batch %d on "
               "chunk %d still held: it reads them last, so it gives them back "
               "(pipe_acts_release)", ops->names, what, op->micro, op->chunk);
}

static void compute(PipeRank *x, const PipeOp *op, PipeOpTime *time, const PipeStageOps *ops,
                    int last_backward, void (*before_backward)(void *ctx, int last),
                    void *bb_ctx) {
    PipeSlot *sl = slot_of(x, op->micro, op->chunk);
    const GPTStage st = gpt_stage(x->layout, op->chunk);
    double t0 = trace_now();  /* taken again after an op's wait for its input */
    if (op->kind == PIPE_FORWARD) {
        GPTActs *a = pipe_acts(x, op->micro, op->chunk);
        wait_if(&sl->recv_act, &sl->recv_act_busy);
        if (sl->act_in) {
            if (narrowed(x))
                widen_from_half(a->encoded, sl->act_in, io_floats(x), x->layout->cfg.precision);
            else
                device_copy(a->encoded, sl->act_in, io_floats(x) * sizeof(float));
            mem_free(sl->act_in);
            sl->act_in = NULL;
        }
        if (!st.embedding && x->layout->pp == 1)  /* the previous stage is on this rank */
            device_copy(a->encoded, gpt_stage_output(pipe_acts(x, op->micro, op->chunk - 1)),
                        io_floats(x) * sizeof(float));
        t0 = trace_now();
        ops->forward(x, op->micro, op->chunk);
        if (x->forward_only) {  /* no backward will read them */
            if (st.head) pipe_acts_release(x, op->micro, op->chunk);
            if (!st.embedding && x->layout->pp == 1)
                pipe_acts_release(x, op->micro, op->chunk - 1);
        }
    } else if (op->kind == PIPE_BACKWARD || op->kind == PIPE_BACKWARD_INPUT) {
        free_sent_grads(x);
        wait_if(&sl->recv_grad, &sl->recv_grad_busy);
        t0 = trace_now();
        if (before_backward) before_backward(bb_ctx, last_backward);
        void (*fn)(PipeRank *, int, int) =
            op->kind == PIPE_BACKWARD ? ops->backward : ops->backward_input;
        CHECK(fn, "this program's pipeline has no split backward (backward-input)");
        fn(x, op->micro, op->chunk);
        if (op->kind == PIPE_BACKWARD) kept_after_last_read(ops, sl, op, "backward");
        if (sl->grad_out) {
            mem_free(sl->grad_out);
            sl->grad_out = NULL;
        }
        if (sl->grad_out_wide) {
            mem_free(sl->grad_out_wide);
            sl->grad_out_wide = NULL;
        }
        if (x->layout->pp == 1 && !st.head) {  /* the next chunk's d(input), read now */
            PipeSlot *next = slot_of(x, op->micro, op->chunk + 1);
            mem_free(next->grad_in);
            next->grad_in = NULL;
        }
    } else {
        CHECK(ops->backward_weight, "this program's pipeline has no split backward "
              "(backward-weight)");
        ops->backward_weight(x, op->micro, op->chunk);
        kept_after_last_read(ops, sl, op, "backward_weight");
    }
    /* a pipeline's timeline: every compute op, labelled (F3, B3.1); the
     * loop's own draws its backward bars per unit (train.c) */
    const int pipeline = x->layout->pp > 1 || x->layout->chunks > 1;
    char label[32];
    *time = (PipeOpTime){t0, trace_now()};
    if (pipeline || op->kind == PIPE_FORWARD)
        trace_event("compute", x->forward_only ? "evaluate" : g_compute_names[op->kind],
                    pipeline ? pipe_op_label(x->schedule, *op, label, sizeof label) : NULL, t0,
                    time->end, 0);
}

double pipe_run(PipeRank *x, const Schedule *s, const PipeStageOps *ops, PipeLoadFn load,
                void *load_ctx, void (*before_backward)(void *ctx, int last), void *bb_ctx) {
    const GPTLayout *l = x->layout;
    CHECK(s->ranks == l->pp && s->chunks == l->chunks,
          "a schedule for %d ranks x %d chunks on a layout of %d x %d", s->ranks, s->chunks,
          l->pp, l->chunks);
    const int nslots = s->micro_batches * s->chunks;
    if (nslots > x->slots_cap) {
        free(x->slot);
        x->slot = malloc((size_t)nslots * sizeof *x->slot);
        CHECK(x->slot, "out of memory");
        x->slots_cap = nslots;
    }
    memset(x->slot, 0, (size_t)nslots * sizeof *x->slot);
    x->schedule = s;
    x->micro_batches = s->micro_batches;
    x->loss_sum = 0.0;
    x->load = load;
    x->load_ctx = load_ctx;
    const PipeOpList *list = &s->rank[my_rank(x)];
    if (list->n > x->times_cap) {
        free(x->times);
        x->times = malloc((size_t)list->n * sizeof *x->times);
        CHECK(x->times, "out of memory");
        x->times_cap = list->n;
    }
    int last_backward = -1;
    for (int i = 0; i < list->n; i++)
        if (list->ops[i].kind == PIPE_BACKWARD || list->ops[i].kind == PIPE_BACKWARD_INPUT)
            last_backward = i;
    /* an evaluation: each micro-batch's activations are released as soon
     * as its output is on its way, so that it needs one set at a time */
    x->forward_only = last_backward < 0;
    for (int i = 0; i < list->n;) {
        const PipeOp *op = &list->ops[i];
        if (!pipe_op_is_comm(op->kind)) {
            compute(x, op, &x->times[i], ops, i == last_backward, before_backward, bb_ctx);
            i++;
        } else {
            int n = 1;  /* a batch: posted together, then completed together */
            while (list->ops[i + n - 1].batched) n++;
            const double t0 = trace_now();
            if (n > 1) comm_batch_begin();
            for (int k = 0; k < n; k++) post(x, &list->ops[i + k]);
            if (n > 1) {
                comm_batch_end();
                wait_batch(x, op, n);
            }
            for (int k = 0; k < n; k++) x->times[i + k] = (PipeOpTime){t0, trace_now()};
            for (int k = 0; k < n && x->forward_only; k++)  /* sent: no longer needed */
                if (list->ops[i + k].kind == PIPE_SEND_ACT)
                    pipe_acts_release(x, list->ops[i + k].micro, list->ops[i + k].chunk);
            i += n;
        }
        if (l->pp > 1) progress_sent_grads(x);
    }
    /* every message delivered; activations no backward released (an
     * evaluation's) go back to their pools */
    for (int k = 0; k < nslots; k++) {
        PipeSlot *sl = &x->slot[k];
        CHECK(!sl->recv_act_busy && !sl->recv_grad_busy && !sl->grad_out && !sl->act_in,
              "a received message no op used (micro-batch %d, chunk %d)",
              k % s->micro_batches, k / s->micro_batches);
        wait_if(&sl->send_act, &sl->send_act_busy);
        if (sl->acts) pipe_acts_release(x, k % s->micro_batches, k / s->micro_batches);
    }
    free_sent_grads(x);
    x->schedule = NULL;
    return x->loss_sum;
}

/* ---- the loop's own ops and schedules ---------------------------------- */

static void plain_forward(PipeRank *x, int micro, int chunk) {
    GPTActs *a = pipe_acts(x, micro, chunk);
    float loss = gpt_stage_forward(x->layout, x->params, a, x->hooks);
    if (a->stage.head) x->loss_sum += loss;
}

static void plain_backward(PipeRank *x, int micro, int chunk) {
    gpt_stage_backward(x->layout, x->params, x->grads, pipe_acts(x, micro, chunk), &x->scratch,
                       pipe_grad_out(x, micro, chunk), pipe_grad_in(x, micro, chunk), 1.0f,
                       x->hooks);
    pipe_acts_release(x, micro, chunk);
}

const PipeStageOps pipe_plain_ops = {plain_forward, plain_backward, NULL, NULL, 0, "plain_"};

Schedule *pipe_schedule_trivial(int m) {
    Schedule *s = schedule_create(1, m, 1);
    for (int i = 0; i < m; i++) {
        schedule_add(s, 0, PIPE_FORWARD, i, 0, -1);
        schedule_add(s, 0, PIPE_BACKWARD, i, 0, -1);
    }
    return s;
}

/* Micro-batch by micro-batch, stage by stage: each forward's input was
 * sent by an op its sender reached before any later message, so blocking
 * semantics cannot deadlock (one chain per micro-batch, in order). */
Schedule *pipe_schedule_forward_only(int p, int m, int v, int dual) {
    Schedule *s = dual ? schedule_create_dual(p, m) : schedule_create(p, m, v);
    const int stages = schedule_stages(s);
    for (int i = 0; i < m; i++)
        for (int st = 0; st < stages; st++) {
            const int r = schedule_rank_of(s, st, i), c = schedule_chunk_of(s, st, i);
            if (st > 0 && p > 1)
                schedule_add(s, r, PIPE_RECV_ACT, i, c, schedule_rank_of(s, st - 1, i));
            schedule_add(s, r, PIPE_FORWARD, i, c, -1);
            if (st < stages - 1 && p > 1)
                schedule_add(s, r, PIPE_SEND_ACT, i, c, schedule_rank_of(s, st + 1, i));
        }
    return s;
}

size_t pipe_activation_peak_bytes(const GPTLayout *l, const Schedule *s, int rows, int seq) {
    const PipeOpList *list = &s->rank[l->pp_rank];
    const size_t ints = gpt_activation_ints(rows, seq) * sizeof(int);
    int *in_use = calloc((size_t)s->chunks, sizeof *in_use);
    int *pool = calloc((size_t)s->chunks, sizeof *pool);
    CHECK(in_use && pool, "out of memory");
    size_t sets = 0, split = 0, peak = 0;  /* bytes: the pools', the split backwards' */
    for (int i = 0; i < list->n; i++) {
        const PipeOp *op = &list->ops[i];
        const GPTStage st = gpt_stage(l, op->chunk);
        const size_t set = gpt_stage_activation_bytes(l, &st, rows, seq) + ints;
        const size_t wg = gpt_stage_weight_grad_floats(l, &st, rows, seq) * sizeof(float);
        if (op->kind == PIPE_FORWARD && ++in_use[op->chunk] > pool[op->chunk])
            pool[op->chunk]++, sets += set;  /* the pool grows by one set */
        if (op->kind == PIPE_BACKWARD_INPUT) split += wg;
        if (op->kind == PIPE_BACKWARD || op->kind == PIPE_BACKWARD_WEIGHT) {
            in_use[op->chunk]--;
            if (op->kind == PIPE_BACKWARD_WEIGHT) split -= wg;
        }
        if (sets + split > peak) peak = sets + split;
    }
    free(in_use);
    free(pool);
    return peak;
}

size_t pipe_comm_peak_bytes(const GPTLayout *l, const Schedule *s, int rows, int seq,
                            size_t forward_extra, size_t backward_extra) {
    const PipeOpList *list = &s->rank[l->pp_rank];
    const size_t n = gpt_stage_io_floats(l, rows, seq), F = sizeof(float);
    /* a message's bytes (pipe_run's message_dtype), and those of its
     * narrowed copy (mixed precision's sends; none in fp32) */
    const size_t M = n * precision_bytes((Precision)l->cfg.precision), W = M < F * n ? M : 0;
    /* received inputs, received gradients, gradients to send and sent
     * (with their narrowed copies), outputs narrowed for a send: in a
     * batch (done at its end) or alone (done when the micro-batch's
     * activations go back: its B or W, held[slot]) */
    int ins = 0, outs = 0, unsent = 0, sent = 0, in_batch = 0, alone = 0;
    int *held = calloc((size_t)s->micro_batches * s->chunks, sizeof *held);
    CHECK(held, "out of memory");
    size_t peak = 0, now;
#define HELD() ((size_t)(ins + outs) * M + (size_t)unsent * F * n + (size_t)sent * (F * n + W) \
                + (size_t)(in_batch + alone) * W)
    for (int i = 0; i < list->n; i++) {
        const PipeOp *op = &list->ops[i];
        const GPTStage st = gpt_stage(l, op->chunk);
        const int slot = op->chunk * s->micro_batches + op->micro;
        const int backward = op->kind == PIPE_BACKWARD || op->kind == PIPE_BACKWARD_INPUT;
        const int batch = op->batched || (i > 0 && list->ops[i - 1].batched);
        if (op->kind == PIPE_RECV_ACT) ins++;
        if (op->kind == PIPE_RECV_GRAD) outs++;
        if (op->kind == PIPE_SEND_GRAD) unsent--, sent++;
        if (op->kind == PIPE_SEND_ACT && batch) in_batch++;
        if (op->kind == PIPE_SEND_ACT && !batch) alone++, held[slot] = 1;
        if (backward) {
            sent = 0;  /* freed first (free_sent_grads) */
            if (!st.embedding) unsent++;  /* the backward writes d(input) */
        }
        now = HELD();
        /* the received d(output) widened (mixed precision), then its own transfers */
        if (backward) now += (l->pp > 1 && !st.head && W ? F * n : 0) + backward_extra;
        peak = now > peak ? now : peak;
        if (!op->batched) in_batch = 0;  /* the batch ends: its sends are done */
        if (op->kind == PIPE_FORWARD && !st.embedding && l->pp > 1) ins--;  /* copied in */
        if (op->kind == PIPE_FORWARD) {  /* its own transfers, the input copied in first */
            now = HELD() + forward_extra;
            peak = now > peak ? now : peak;
        }
        if (backward) {
            if (l->pp > 1 && !st.head) outs--;  /* the received d(output), used */
            if (l->pp == 1 && !st.head) unsent--;  /* the next chunk's d(input), read */
        }
        /* the activations go back at B or W, once the output's send is done */
        if ((op->kind == PIPE_BACKWARD || op->kind == PIPE_BACKWARD_WEIGHT) && held[slot])
            alone--, held[slot] = 0;
    }
#undef HELD
    free(held);
    return peak;
}

/* The closed-form bubble printed next to the measured and simulated ones.
 * GPipe's and 1F1B's hold for any m, the interleaved one's for the m the
 * option checks let through (a multiple of p); ZB-H1's only from m >= p,
 * its steady state. ZB-H1 with fewer micro-batches is still a valid
 * schedule that trains and simulates: it merely has no formula, which must
 * not end a run after its work is done. */
static void bubble_formula(const Schedule *s, int split, const PipeCosts *c, char *out,
                           size_t n) {
    const int p = s->ranks, m = s->micro_batches;
    if (s->dual)  /* DualPipe: whole and split backwards both */
        snprintf(out, n, "formula %.3f", pipe_bubble_fraction_dualpipe(p, m, c));
    else if (split && m < p)
        snprintf(out, n, "no formula (ZB-H1's needs m >= p: m %d, p %d)", m, p);
    else if (split)
        snprintf(out, n, "formula %.3f", pipe_bubble_fraction_zb_h1(p, m, c));
    else
        snprintf(out, n, "formula %.3f", pipe_bubble_fraction(p, m, s->chunks));
}

void pipe_report_timeline(const PipeRank *x, const Schedule *s, Comm *world, const char *dir,
                          const char *program) {
    const int p = s->ranks;
    int maxn = 0;
    for (int r = 0; r < p; r++) maxn = s->rank[r].n > maxn ? s->rank[r].n : maxn;
    double *mine = calloc(2 * (size_t)maxn, sizeof *mine);
    double *all = malloc(2 * (size_t)maxn * p * sizeof *all);
    CHECK(mine && all, "out of memory");
    for (int i = 0; i < s->rank[my_rank(x)].n; i++) {
        mine[2 * i] = x->times[i].start;
        mine[2 * i + 1] = x->times[i].end;
    }
    if (p > 1) {
        comm_allgather_untraced(x->pp_group, mine, all, 2 * (size_t)maxn * p, COMM_DOUBLE);
    } else {
        memcpy(all, mine, 2 * (size_t)maxn * sizeof *all);
    }
    free(mine);
    if (world->rank != 0) {
        free(all);
        return;
    }
    /* measured: each rank's compute time against the step's span, every
     * rank's ops from the first start to the last end */
    PipeTimeline measured = {p, 0, 0, calloc((size_t)p, sizeof(PipeRankTimeline))};
    CHECK(measured.rank, "out of memory");
    double t0 = INFINITY, t1 = -INFINITY, cost[PIPE_KINDS] = {0};
    int count[PIPE_KINDS] = {0};
    for (int r = 0; r < p; r++) {
        const PipeOpTime *t = measured.rank[r].op = (PipeOpTime *)(all + 2 * (size_t)maxn * r);
        for (int i = 0; i < s->rank[r].n; i++) {
            const PipeOp *op = &s->rank[r].ops[i];
            if (pipe_op_is_comm(op->kind)) continue;
            t0 = fmin(t0, t[i].start);
            t1 = fmax(t1, t[i].end);
            measured.rank[r].busy += t[i].end - t[i].start;
            cost[op->kind] += t[i].end - t[i].start;
            count[op->kind]++;
        }
    }
    measured.makespan = t1 - t0;
    double idle = 0;
    for (int r = 0; r < p; r++) idle += measured.makespan - measured.rank[r].busy;
    measured.bubble_fraction = idle / (p * measured.makespan);
    char path[1024];
    snprintf(path, sizeof path, "%s/pipeline.csv", dir);
    schedule_write_timeline_csv(path, s, &measured, t0);
    /* predicted: the simulator with the measured mean costs, no message cost */
    for (int k = 0; k < PIPE_KINDS; k++) cost[k] = count[k] ? cost[k] / count[k] : 0;
    const PipeCosts c = {cost[PIPE_FORWARD], cost[PIPE_BACKWARD], cost[PIPE_BACKWARD_INPUT],
                         cost[PIPE_BACKWARD_WEIGHT], 0.0, 0.5};
    PipeTimeline sim;
    schedule_simulate(s, &c, &sim);
    snprintf(path, sizeof path, "%s/pipeline_sim.csv", dir);
    schedule_write_timeline_csv(path, s, &sim, 0.0);
    const int split = count[PIPE_BACKWARD_INPUT] > 0;
    char formula[96];
    bubble_formula(s, split, &c, formula, sizeof formula);
    char costs[96];
    if (s->dual)
        snprintf(costs, sizeof costs, "F %.2f ms, B %.2f ms, I %.2f ms, W %.2f ms",
                 1e3 * c.forward, 1e3 * c.backward, 1e3 * c.backward_input,
                 1e3 * c.backward_weight);
    else if (split)
        snprintf(costs, sizeof costs, "F %.2f ms, I %.2f ms, W %.2f ms", 1e3 * c.forward,
                 1e3 * c.backward_input, 1e3 * c.backward_weight);
    else
        snprintf(costs, sizeof costs, "F %.2f ms, B %.2f ms", 1e3 * c.forward, 1e3 * c.backward);
    printf("%s: pipeline bubble of the last step: measured %.3f, simulated %.3f with its mean "
           "costs (%s), %s; timelines in %s/pipeline.csv and pipeline_sim.csv\n",
           program, measured.bubble_fraction, sim.bubble_fraction, costs, formula, dir);
    pipe_timeline_free(&sim);
    free(measured.rank);  /* its ops point into all */
    free(all);
}
