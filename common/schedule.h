/* schedule.h: pipeline schedules as data, their validator and their simulator.
 *
 * A pipeline cuts the model into p v stages over p ranks: each rank holds v
 * model chunks (v = 1 except for interleaved schedules), and chunk c of rank
 * r is stage s = r + c p, so stage s lives on rank s mod p, as local chunk
 * s / p. A step pushes m micro-batches through every stage forward, then
 * back. A schedule says, for each rank, the order of its operations:
 *
 *   F  PIPE_FORWARD           forward of micro-batch i on chunk c
 *   B  PIPE_BACKWARD          its whole backward
 *   I  PIPE_BACKWARD_INPUT    zero-bubble's split backward: the input
 *   W  PIPE_BACKWARD_WEIGHT   gradient (the paper's "B") now, the weight
 *                             gradient later (Qi et al. 2023)
 *   SA PIPE_SEND_ACT          the chunk's output activation to the next stage
 *   RA PIPE_RECV_ACT          the chunk's input activation from the previous one
 *   SG PIPE_SEND_GRAD         the chunk's input gradient to the previous stage
 *   RG PIPE_RECV_GRAD         the chunk's output gradient from the next one
 *
 * Each op names a micro-batch and a local chunk; a communication op also
 * names its peer rank, and the tensor it moves belongs to its own chunk (SA
 * sends the chunk's output, RA receives its input, SG sends the gradient
 * of its input, RG receives the gradient of its output), so SA of
 * micro-batch i on stage s meets RA of micro-batch i on stage s + 1, and
 * SG on stage s meets RG on stage s - 1.
 * GPipe for p = 2, m = 2, as schedule_print writes it (comm ops shown):
 *   rank 0: F0 SA0 F1 SA1 RG1 B1 RG0 B0
 *   rank 1: RA0 F0 RA1 F1 B1 SG1 B0 SG0
 * (with v > 1 each op shows its chunk: F3.1 is micro-batch 3 on chunk 1).
 *
 * DualPipe's placement (DeepSeek-V3, schedule_create_dual): p stages (p
 * even), each held twice, so rank r holds two chunks, chunk 0 = stage r and
 * chunk 1 = stage p - 1 - r. Micro-batches enter from both ends: the first
 * m / 2 at rank 0, flowing r -> r + 1 through the chunks 0, the other m / 2
 * at rank p - 1, flowing r -> r - 1 through the chunks 1. So micro-batch i
 * runs only on chunk d(i) = (i >= m / 2) of every rank (schedule_chunk_of),
 * ranks 0 and p - 1 both read tokens and both end in the loss, and rank r
 * and rank p - 1 - r hold the same two stages, whose gradients the program
 * sums before the update (both copies then take the same step).
 *
 * A schedule is valid (schedule_validate) when, checked in this order:
 *   1. every op names a micro-batch in [0, m) and a chunk in [0, v) (under
 *      DualPipe's placement its direction's, d(i)), a compute op has peer -1, and no rank holds the same op (kind,
 *      micro-batch, chunk) twice. A communication op's peer is its
 *      neighbour stage's rank: with p >= 2 consecutive stages are on
 *      different ranks. The first stage receives no activation (it reads
 *      the tokens) and sends no input gradient, the last sends no
 *      activation and receives no gradient (its forward ends in the loss,
 *      its backward starts there). With p = 1 every stage is on rank 0 and
 *      a schedule has no communication ops at all; a batch (below) holds
 *      communication ops only;
 *   2. every send meets exactly one receive, and the other way round: the
 *      peer holds the matching op, for the same micro-batch and stage;
 *   3. every (micro-batch, stage) has one forward and one backward: one B,
 *      or one I and one W, never both kinds;
 *   4. on each rank the backward (B or I) comes after its forward, W after
 *      I; with p >= 2 a forward on any stage but the first comes after the
 *      RA of its input, a forward on any stage but the last before the SA
 *      of its output; a backward on any stage but the last after its RG,
 *      on any stage but the first before its SG. With p = 1 the data stays
 *      on the rank: stage s's forward follows stage s - 1's on the list,
 *      its backward follows stage s + 1's. An op in a batch (below)
 *      stands at its batch's position;
 *   5. it runs to the end under blocking semantics: each rank executes its
 *      list in order, a compute op always completes, and a send and its
 *      receive complete together, once both ranks have reached them
 *      (rendezvous: a rank at a send or a receive waits for the peer).
 *      Messages are tagged with (kind, micro-batch, stage) (the executor
 *      must do so), so a rank waiting in one receive takes no other
 *      message. A schedule safe under rendezvous is safe with any
 *      buffering MPI may add, which only lets senders go on sooner. The
 *      check runs the lists: while some rank can move (a compute op, or a
 *      send or receive whose partner is the peer's current op, or in the
 *      peer's current batch), it moves;
 *      when none can and some have ops left, that is a deadlock, reported
 *      with each stuck rank's op. So two neighbours that both send first
 *      (1F1B's steady state: rank r's gradient to r - 1 crossing r - 1's
 *      activation to r) deadlock, as do two that both receive first,
 *      unless their sends and receives are batched (below).
 * The first problem found is named with its rank, position and op.
 *
 * Batches. Consecutive communication ops of a rank can form one batch,
 * posted together and completed together: Megatron-LM's
 * send_forward_recv_backward and send_backward_recv_forward, which post an
 * isend and an irecv with torch.distributed.batch_isend_irecv and wait for
 * both. PipeOp.batched = 1 marks an op as batched with the next op on the
 * list (the batch's last op has 0, a lone op is a batch of one);
 * schedule_batch makes the ops just added one batch. schedule_print shows a batch in
 * brackets, so 1F1B's plain placement with its steady state batched reads,
 * for p = 2, m = 2:
 *   rank 0: F0 SA0 F1 [SA1 RG0] B0 RG1 B1
 *   rank 1: RA0 F0 B0 [SG0 RA1] F1 B1 SG1
 * (without the brackets it deadlocks, as in 5 above). The semantics:
 *   - when a rank reaches a batch it posts every op in it; it goes past the
 *     batch (to its next op) only when every op in it has completed;
 *   - under rendezvous a send or receive of a batch completes once its
 *     partner op is posted too: the partner may sit in a batch of its own
 *     rank, completing in any order there, or be a lone op, which waits
 *     for it as for any partner;
 *   - the validator's rules: a batch holds communication ops only and its
 *     last op is not marked batched (rule 1); matching is unchanged (2);
 *     for the order rules (4) each op of a batch stands at the batch's
 *     position, its first op's, so "RA before its F" and "SA after its F"
 *     hold for the batch as a whole; the deadlock check (5) lets a rank at
 *     a batch complete any member whose partner is posted (is a lone op
 *     its rank is at, or an uncompleted member of the batch its rank is
 *     at), and move on once all are done;
 *   - the simulator posts every member at the batch's post time, and the
 *     rank's next op (compute or communication) waits until every member
 *     has ended, as after batch_isend_irecv and a wait on all its requests:
 *     the next compute needs the received tensor, and the sent tensor's
 *     buffer must not be reused before its send ends. A lone op still
 *     holds nothing back.
 *
 * The simulator (schedule_simulate) predicts a valid schedule's timeline
 * from costs per op (time of one micro-batch through one chunk) and a time
 * per message. The model:
 *   - a compute op starts when the rank's previous compute op has ended and,
 *     when its input comes by message (F's RA, B's or I's RG), when that
 *     message has arrived; it lasts its cost;
 *   - a communication op takes no time on its rank: the executor posts it
 *     (isend, irecv) and goes on, except after a batch (above), where the
 *     rank waits for all of the batch's messages to arrive. A message
 *     starts when both ends are posted (an end's post time: when its rank
 *     reaches it, the later of the end of the compute op before it and
 *     the end of the batch before it, 0 if none; every member of a batch
 *     has the batch's post time) and takes `send`; both ops end when it
 *     arrives:
 *     an op's start is its post time, its end the arrival. So a receive
 *     posted right before its forward waits for the compute before it to
 *     end, and one posted earlier moves while that compute runs;
 *   - the makespan is the last end; a rank's busy time the sum of its
 *     compute ops, its idle (bubble) time makespan - busy, its bubble
 *     fraction idle / makespan; the overall fraction is the ranks' idle
 *     time over p makespans.
 * So with no message cost GPipe and 1F1B take (m + p - 1)(t_f + t_b) for
 * forward and backward costs t_f, t_b per stage: every rank is busy
 * m (t_f + t_b) and idle (p - 1)(t_f + t_b), a bubble fraction of
 * (p - 1) / (m + p - 1) whatever t_f and t_b are. Interleaving with v
 * chunks (costs per chunk, so t_f / v of a rank's whole share) makes it
 * (p - 1) / (v m + p - 1) (Narayanan et al. 2021).
 *
 * Activation memory, in units of M_B, one micro-batch's activations on one
 * chunk, counted along the rank's list (memory depends on the order, not on
 * the times): a forward adds M_B; a whole backward frees it. A split
 * backward follows Qi et al. 2023 (Zero Bubble Pipeline Parallelism, Table
 * 2 and section 2.3): I frees all but M_W, what the weight gradients still
 * read (the linear layers' inputs and output gradients, less than M_B),
 * and W frees that. PipeCosts.weight_memory is the ratio M_W / M_B. The
 * paper's rank r (0-based) of ZB-H1 peaks at (p - r) M_B + r M_W, at most
 * p M_B: 1F1B's p - r activations, which is ZB-H1's point. The peak count
 * of activations alone (forward done, its B or I not yet) is kept apart:
 * 1F1B and ZB-H1 hold min(p - r, m) on rank r, GPipe m.
 */
#ifndef SCHEDULE_H
#define SCHEDULE_H

#include <stddef.h>
#include <stdio.h>

typedef enum {
    PIPE_FORWARD,
    PIPE_BACKWARD,
    PIPE_BACKWARD_INPUT,
    PIPE_BACKWARD_WEIGHT,
    PIPE_SEND_ACT,
    PIPE_RECV_ACT,
    PIPE_SEND_GRAD,
    PIPE_RECV_GRAD,
    PIPE_KINDS
} PipeOpKind;

typedef struct {
    PipeOpKind kind;
    int micro;  /* micro-batch, 0..m-1 */
    int chunk;  /* local chunk on the op's rank, 0..v-1: stage rank + chunk p */
    int peer;   /* communication ops: the other rank; compute ops: -1 */
    int batched; /* 1: in one batch with the next op (posted and completed
                  * together, see above); 0: the last of a batch, or alone */
} PipeOp;

typedef struct {
    PipeOp *ops;  /* in execution order */
    int n, cap;
} PipeOpList;

typedef struct Schedule {
    int ranks;          /* p */
    int micro_batches;  /* m */
    int chunks;         /* v, model chunks per rank */
    int dual;           /* 1: DualPipe's placement (above), v = 2 */
    PipeOpList *rank;   /* rank[r]: rank r's list */
} Schedule;

/* An empty schedule; p, m, v >= 1, else a user error. */
Schedule *schedule_create(int ranks, int micro_batches, int chunks);
/* An empty schedule of DualPipe's placement: p ranks (even), m
 * micro-batches (even: m / 2 from each end), two chunks per rank; else a
 * user error. */
Schedule *schedule_create_dual(int ranks, int micro_batches);
void schedule_free(Schedule *s);

/* Append an op to rank's list (the list grows as needed); rank must be in
 * [0, p). The other fields are the validator's to check. */
void schedule_add(Schedule *s, int rank, PipeOpKind kind, int micro, int chunk, int peer);

/* Make the last n ops on rank's list one batch (batched = 1 on all but
 * the last, 0 on the last); 1 <= n <= the list's length, else a user
 * error. E.g. Megatron-LM's send_forward_recv_backward on rank r:
 *   schedule_add(s, r, PIPE_SEND_ACT, k, 0, r + 1);
 *   schedule_add(s, r, PIPE_RECV_GRAD, i, 0, r + 1);
 *   schedule_batch(s, r, 2);
 * Communication ops only, which the validator checks. */
void schedule_batch(Schedule *s, int rank, int n);

/* The stage local chunk `chunk` of rank `rank` holds in a pipeline of p
 * ranks: rank + chunk p, or under DualPipe's placement (dual) rank for
 * chunk 0 and p - 1 - rank for chunk 1. Shared with the layout (layout.h). */
static inline int pipe_stage_of(int p, int dual, int rank, int chunk) {
    return dual ? (chunk == 0 ? rank : p - 1 - rank) : rank + chunk * p;
}
static inline int pipe_stages(int p, int chunks, int dual) { return dual ? p : p * chunks; }

static inline int schedule_stages(const Schedule *s) {
    return pipe_stages(s->ranks, s->chunks, s->dual);
}
static inline int schedule_stage_of(const Schedule *s, int rank, int chunk) {
    return pipe_stage_of(s->ranks, s->dual, rank, chunk);
}
/* Where micro-batch `micro` runs stage `stage`: the local chunk and the
 * rank. Stage s is on rank s mod p as chunk s / p, or under DualPipe's
 * placement on chunk d = (micro >= m / 2) of rank s (d = 0) or p - 1 - s. */
static inline int schedule_chunk_of(const Schedule *s, int stage, int micro) {
    return s->dual ? micro >= s->micro_batches / 2 : stage / s->ranks;
}
static inline int schedule_rank_of(const Schedule *s, int stage, int micro) {
    if (!s->dual) return stage % s->ranks;
    return schedule_chunk_of(s, stage, micro) ? s->ranks - 1 - stage : stage;
}

/* "forward", "backward", "backward-input", "backward-weight", "send-act",
 * "recv-act", "send-grad", "recv-grad"; "unknown" for anything else */
const char *pipe_op_kind_name(PipeOpKind kind);
static inline int pipe_op_is_comm(PipeOpKind kind) {
    return kind >= PIPE_SEND_ACT && kind < PIPE_KINDS;
}

/* The op's short label into buf: "F3", "SA3", "I3.1" (chunk shown when
 * v > 1); returns buf. */
const char *pipe_op_label(const Schedule *s, PipeOp op, char *buf, size_t n);

/* One line per rank, "rank r: F0 F1 B1 B0", communication ops left out
 * unless show_comm; a batch of two or more ops in brackets, "[SA1 RG0]". */
void schedule_print(FILE *f, const Schedule *s, int show_comm);

/* 0 when the schedule is valid (the checks above), else -1 with the first
 * problem in why (n bytes, truncated to fit). */
int schedule_validate(const Schedule *s, char *why, size_t n);

/* Costs of one op on one chunk for one micro-batch, in any time unit; all
 * >= 0. weight_memory = M_W / M_B (above), in [0, 1]. */
typedef struct {
    double forward, backward, backward_input, backward_weight;
    double send;           /* one message, activation or gradient */
    double weight_memory;
} PipeCosts;

typedef struct {
    double start, end;  /* compute: runs [start, end); comm: posted at start, arrived at end */
} PipeOpTime;

typedef struct {
    PipeOpTime *op;         /* op[i]: the rank's i-th op */
    double busy, idle;      /* compute time; makespan - busy */
    double bubble_fraction; /* idle / makespan */
    int peak_activations;   /* most forwards whose B or I has not run yet */
    double peak_memory;     /* most activation memory held, in units of M_B */
    int count[PIPE_KINDS];  /* ops of each kind */
} PipeRankTimeline;

typedef struct {
    int ranks;
    double makespan;
    double bubble_fraction; /* sum of idle over ranks / (p makespan) */
    PipeRankTimeline *rank;
} PipeTimeline;

/* The timeline of a valid schedule under the model above; an invalid
 * schedule or a negative cost is a user error (validate first to report
 * it yourself). Free with pipe_timeline_free. */
void schedule_simulate(const Schedule *s, const PipeCosts *c, PipeTimeline *out);
void pipe_timeline_free(PipeTimeline *t);

/* A timeline of s as CSV, one row per op of each rank's list (compute and
 * messages): rank,index,label,kind,micro,chunk,start,end, kind as
 * pipe_op_kind_name, times t->rank[r].op[i] less t0. The simulated one
 * (pipeline_schedule's schedule.csv) and the measured one (train_pp's
 * pipeline.csv) alike: tools/plot_pipeline.sh draws either. Written
 * atomically (fileio.h). */
void schedule_write_timeline_csv(const char *path, const Schedule *s, const PipeTimeline *t,
                                 double t0);

/* The formulas, to compare simulated timelines with (no message cost):
 *   GPipe and 1F1B (v = 1), interleaved 1F1B (v chunks per rank, m a
 *   multiple of p): (p - 1) / (v m + p - 1).
 *   ZB-H1, m >= p, with per-stage costs t_f, t_i (the paper's T_B) and t_w:
 *   each rank is busy m (t_f + t_i + t_w) and idle (p - 1)(t_f + t_i - t_w)
 *   (Qi et al. 2023, Table 2), a third of 1F1B's idle time when the three
 *   are equal. The paper draws it for equal costs; simulating ZB-H1 (rank
 *   r's W of micro-batch i right after its I of micro-batch i + r) gives
 *   exactly that while t_w <= t_f, t_i, and with a longer W an idle time
 *   of (p - 1)(t_f + t_i - min(t_f, t_i, t_w)), which is what this
 *   function uses. The fraction is idle / (busy + idle). */
double pipe_bubble_fraction(int p, int m, int v);
double pipe_bubble_fraction_zb_h1(int p, int m, const PipeCosts *c);
/* DualPipe (DeepSeek-V3 report, Table 2), p even: each rank idle
 * (p/2 - 1)(F&B + B - 3W), F&B the time of a forward and a whole backward
 * (of the other direction) run together, B = c->backward, W =
 * c->backward_weight. The report overlaps the pair's computation with its
 * communication; the simulator runs one after the other, so F&B = F + B
 * here, an idle time of (p/2 - 1)(F + 2B - 3W). Simulating lab 06's
 * schedule_dualpipe gives exactly that when the split backward's parts
 * add up (B = I + W), its input part costs a forward (I = F) and W <= F;
 * other costs move it (as a W longer than F does ZB-H1's). The fraction
 * is idle / (m (F + B) + idle), each rank busy m (F + B) when B = I + W. */
double pipe_idle_dualpipe(int p, const PipeCosts *c);
double pipe_bubble_fraction_dualpipe(int p, int m, const PipeCosts *c);

/* The schedules by name (lab 06's generators, schedule_by_name): "gpipe",
 * "1f1b", "interleaved", "zb-h1" and the lab's extensions "1f1b-unbatched"
 * and "dualpipe", in that order, then NULL. */
extern const char *const PIPE_SCHEDULE_NAMES[];
/* Whether the named schedule places its stages as DualPipe does (dual) */
int pipe_schedule_dual(const char *name);

/* Whether the named schedule can be built for p ranks, m micro-batches and
 * v chunks per rank: 0 when it can, else -1 with the reason in why (n
 * bytes, one line): an unknown name (the known ones listed), p, m or v
 * below 1, v other than 1 for a schedule that is not interleaved, and for
 * the interleaved one v below 2 or m not a multiple of p (Megatron-LM's
 * interleaved schedule moves micro-batches through the chunks in groups
 * of p). Check before building, to report bad input yourself. */
int pipe_schedule_problem(const char *name, int p, int m, int v, char *why, size_t n);

/* What a program checks of a generator's schedule s, made for the name, p,
 * m and v asked: 0 when it is one (not NULL, of that size, valid:
 * schedule_validate) and, for "1f1b-unbatched", the lab's extension,
 * holds no batch and, when one_f_one_b is given (the student's own 1F1B of
 * the same p and m: pipeline_schedule's self-check), runs its compute ops
 * in the same order on every rank; else -1 with the reason in why.
 * Trainers pass NULL: the grader compares every schedule's compute order
 * with the reference's (grader/compare.py, check_schedule), never with
 * the student's own. */
int pipe_generated_problem(const Schedule *s, const char *name, int p, int m, int v,
                           const Schedule *one_f_one_b, char *why, size_t n);

#endif
