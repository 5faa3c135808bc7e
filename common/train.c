#include "train.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "comm.h"
#include "fileio.h"
#include "check.h"
#include "dataloader.h"
#include "device.h"
#include "kernels.h"
#include "pipe_exec.h"
#include "precision.h"
#include "preflight.h"
#include "profile.h"
#include "runlog.h"
#include "tokens.h"
#include "trace.h"


/* This rank's rows of the global batch: B / (ranks K) per micro-batch.
 * Rank r's rows are [r B/N, (r+1) B/N), micro-batch k the k-th slice of
 * them, so every layout trains on exactly the baseline's sequences. */
typedef struct {
    int ranks, rank, micro, rows;  /* rows per micro-batch */
} BatchSlice;

static int slice_first_row(const BatchSlice *b, int k) { return (b->rank * b->micro + k) * b->rows; }

/* Host memory for a micro-batch's tokens on their way to the activations,
 * NULL where not needed: the sequences whole (under context parallelism,
 * where a rank keeps its positions of each), and the rank's share (on a
 * GPU, where one copy moves it). */
typedef struct {
    int *whole, *staging;
} TokenBuffers;

/* Rows [first_row, first_row + rows) of batch `index` into the activations'
 * inputs and targets (contiguous: targets = inputs + rows * T, T = seq / cp
 * this rank's positions of each sequence, layout.h's placement). The
 * loader writes host memory. */
static void load_batch(const DataLoader *dl, DataSplit split, uint64_t index, int first_row,
                       int rows, int seq, const GPTLayout *l, GPTActs *a,
                       const TokenBuffers *buf) {
    const int T = seq / l->cp;
    int *mine = buf->staging ? buf->staging : a->inputs;
    if (l->cp == 1) {
        dataloader_fill(dl, split, index, first_row, rows, seq, mine, mine + (size_t)rows * seq);
    } else {
        int *w = buf->whole;
        dataloader_fill(dl, split, index, first_row, rows, seq, w, w + (size_t)rows * seq);
        for (int k = 0; k < 2 * rows; k++)  /* the inputs' rows, then the targets' */
            for (int t = 0; t < T; t++)
                mine[(size_t)k * T + t] = w[(size_t)k * seq + gpt_cp_position(l, t, T)];
    }
    if (buf->staging) device_copy(a->inputs, buf->staging, 2 * (size_t)rows * T * sizeof(int));
}

/* Sum over ranks of a per-rank value (a loss), outside the gradient group's
 * counts; identity on one device. */
static double sum_over_ranks(const TrainParallel *par, double x) {
    if (par) comm_allreduce(par->metrics, &x, &x, 1, COMM_DOUBLE, COMM_SUM);
    return x;
}

/* What the executor's loads read: batch `index` of `split`, this rank's
 * slice of it (pipe_exec.h's PipeLoadFn) */
typedef struct {
    const DataLoader *dl;
    DataSplit split;
    uint64_t index;
    const BatchSlice *slice;
    int seq;
    const GPTLayout *layout;
    const TokenBuffers *buf;
} BatchSource;

static void load_micro_batch(void *ctx, int micro, GPTActs *a) {
    const BatchSource *b = ctx;
    load_batch(b->dl, b->split, b->index, slice_first_row(b->slice, micro), b->slice->rows,
               b->seq, b->layout, a, b->buf);
}

/* Mean loss over the fixed held-out batches 0..eval_batches-1: each one's
 * micro-batches forward through the layout's stages */
static float evaluate(const TrainOptions *o, const TrainParallel *par, const BatchSlice *b,
                      const DataLoader *dl, PipeRank *x, const Schedule *forward_only,
                      const GPTLayout *layout, const TokenBuffers *buf) {
    double total = 0.0;
    for (int e = 0; e < o->eval_batches; e++) {
        BatchSource src = {dl, SPLIT_VAL, (uint64_t)e, b, o->seq, layout, buf};
        total += pipe_run(x, forward_only, &pipe_plain_ops, load_micro_batch, &src, NULL, NULL);
    }
    return (float)(sum_over_ranks(par, total) / ((double)o->eval_batches * b->micro * b->ranks));
}

/* moe.csv's row of this step: the MoE statistics (model.h) summed over the
 * data-parallel ranks, the aux loss a mean like the loss's */
static void log_moe_step(const TrainParallel *par, RunLog *log, int step, int micro_batches,
                         int experts, int is_root) {
    const MoEStats *s = gpt_moe_stats();
    const int E = experts;  /* every rank's: log is open on the root only */
    double v[2 + MOE_STATS_MAX_EXPERTS];
    v[0] = s->aux;
    v[1] = (double)s->dropped;
    for (int e = 0; e < E; e++) v[2 + e] = (double)s->load[e];
    if (par) comm_allreduce(par->metrics, v, v, 2 + (size_t)E, COMM_DOUBLE, COMM_SUM);
    const int ranks = par ? par->metrics->size : 1;
    if (is_root) runlog_moe_step(log, step, v[0] / ((double)micro_batches * ranks), v[1], v + 2);
}

/* Wraps a layout's hooks to draw the timeline's "backward" bars: the
 * compute between one unit's gradients being ready and the next's. */
typedef struct {
    const ModelHooks *inner;
    double t_last;
} TracedHooks;

static void traced_needed(void *ctx, int unit, int backward) {
    const ModelHooks *h = ((TracedHooks *)ctx)->inner;
    if (h && h->params_needed) h->params_needed(h->ctx, unit, backward);
}
static void traced_done(void *ctx, int unit, int backward) {
    const ModelHooks *h = ((TracedHooks *)ctx)->inner;
    if (h && h->params_done) h->params_done(h->ctx, unit, backward);
}
static void traced_begin(void *ctx, int unit) {
    const ModelHooks *h = ((TracedHooks *)ctx)->inner;
    if (h && h->grads_begin) h->grads_begin(h->ctx, unit);
}
static void traced_ready(void *ctx, int unit) {
    TracedHooks *t = ctx;
    trace_event("compute", "backward", NULL, t->t_last, trace_now(), 0);
    if (t->inner && t->inner->grads_ready) t->inner->grads_ready(t->inner->ctx, unit);
    t->t_last = trace_now();
}

/* Before each backward op: the model states' begin_backward (DDP
 * communicates on the last), and the first backward bar starts now */
typedef struct {
    const ModelStates *st;
    TracedHooks *traced;
} BeforeBackward;

static void before_backward(void *ctx, int last) {
    BeforeBackward *b = ctx;
    b->st->begin_backward(b->st->ctx, last);
    b->traced->t_last = trace_now();
}

/* memory.csv of every rank, written by rank 0 */
static void write_memory_csv(const TrainParallel *par, const char *path) {
    if (!par) {
        mem_write_csv(path, 0);
        return;
    }
    char rows[2048];
    mem_csv_rows(rows, sizeof rows, par->world->rank);
    comm_write_gathered(par->world, path, MEM_CSV_HEADER, rows);
}

/* params_checksum.csv of every rank, written by rank 0 after the other
 * outputs (a sharded layout's gathers here are not the training's traffic
 * nor its memory): FNV-1a 64 of this rank's parameter bits, standard layout. */
static void write_params_checksum(const TrainParallel *par, const ModelStates *st, size_t n,
                                  const char *path) {
    if (!st->local_params) return;
    float *mine = malloc(n * sizeof(float));
    CHECK(mine, "out of memory for the parameters' checksum");
    st->local_params(st->ctx, mine);
    char row[64];
    snprintf(row, sizeof row, "%d,%016llx\n", par->world->rank,
             (unsigned long long)tokens_checksum(mine, n * sizeof(float)));
    free(mine);
    comm_write_gathered(par->world, path, "rank,checksum\n", row);
}

void train_run(TrainOptions *o) { train_run_parallel(o, NULL); }

/* ---- checkpoints (checkpoint.h) ------------------------------------------ */

/* Load --resume's checkpoint (preflight_run verified it) into this rank's
 * states, its lineage into *lineage, and an fp16 run's loss scale into
 * scaler (when both have one); returns the steps it had done: the first
 * step to run */
static int resume_from(const TrainOptions *o, const GPTLayout *l, const CkptHeld *held,
                       LossScaler *scaler, CkptLineage *lineage, int is_root) {
    char dir[1100], why[1400];
    CkptIndex ix;
    if (ckpt_resolve(o->resume, dir, sizeof dir, why, sizeof why) ||
        ckpt_index_read(dir, &ix, why, sizeof why))
        USER_ERROR("--resume: %s", why);
    *lineage = ix.lineage;
    if (scaler && scaler->interval > 0 && ix.has_loss_scale) {
        scaler->scale = ix.loss_scale;
        scaler->clean = ix.loss_scale_clean;
    }
    ckpt_index_free(&ix);
    double t0 = wall_seconds();
    const int step = o->checkpoints->load(dir, l, held);
    if (is_root)
        printf("%s: resumed from %s: %d steps done, %d to go (loaded in %.3f s)\n",
               g_program_name, dir, step, o->steps - step, wall_seconds() - t0);
    return step;
}

/* This run's lineage, from the resumed one's (n 0 for a fresh run), and
 * on rank 0 what a rewind left in --save's DIR moved aside (checkpoint.h) */
static void start_lineage(const TrainOptions *o, CkptSaveTo *to, const CkptLineage *parent,
                          int first_step, int is_root) {
    ckpt_lineage_extend(&to->lineage, parent, first_step);
    int aside;
    const int moved = is_root ? ckpt_set_branches_aside(to, &aside) : 0;
    if (moved)
        printf("%s: %d checkpoint%s of %s past the resumed step %d (another branch) moved to "
               "%s/abandoned-%d: --resume %s/abandoned-%d continues them\n", g_program_name, moved,
               moved == 1 ? "" : "s", o->save, first_step, o->save, aside, o->save, aside);
}

/* Commit --save-async's pending checkpoint, if any (collective) */
static void finish_saves(const TrainOptions *o, CkptAsync *async, int is_root) {
    if (!async->pending) return;
    double t0 = wall_seconds();
    const int steps = async->steps;
    ckpt_save_finish(async);
    if (is_root) check_end_open_line();
    if (is_root)
        printf("%s: committed %s/step-%06d (waited %.3f s for its writer and the commit)\n",
               g_program_name, o->save, steps, wall_seconds() - t0);
}

/* Save `steps` steps done: at once, or (--save-async) the snapshot now and
 * the commit at the next save or finish_saves, the previous one's first */
static void save_checkpoint(const TrainOptions *o, const CkptSaveTo *to, int steps,
                            const GPTLayout *l, const CkptHeld *held, const CkptRank *who,
                            CkptAsync *async, int is_root) {
    finish_saves(o, async, is_root);
    double t0 = wall_seconds();
    if (o->save_async)
        ckpt_save_async(async, to, steps, l, held, who);
    else
        ckpt_save(to, steps, l, held, who);
    if (is_root) check_end_open_line();
    if (is_root)
        printf("%s: %s %s/step-%06d in %.3f s%s\n", g_program_name,
               o->save_async ? "snapshot" : "saved", o->save, steps, wall_seconds() - t0,
               o->save_async ? " (written in the background)" : "");
}

/* A run's state from its setup to its end (train_run_parallel): the data,
 * the model states and the executor that runs the schedule, and what the
 * checkpoints need. It does not move: its members point at each other. */
typedef struct {
    int ranks, is_root, pipelined;
    BatchSlice slice;
    TokenFile tf;
    DataLoader dl;
    GPTLayout whole;
    const GPTLayout *layout;      /* the program's, or whole */
    ReplicatedStates replicated;  /* own's, when the program brings no states */
    ModelStates own;
    Comm *overflow;               /* fp16 on several ranks: the overflow check's group */
    const ModelStates *st;
    /* a pipeline's schedule and stage ops, or the loop's own: the trivial
     * schedule of K micro-batches, F0 B0 F1 B1 ... (pipe_exec.h) */
    Schedule *trivial, *forward_only;
    const Schedule *schedule;
    const PipeStageOps *stage_ops;
    TracedHooks traced;
    ModelHooks hooks;
    PipeRank exec;
    BeforeBackward bb;
    TokenBuffers tokens;
    RunLog log;  /* rank 0's */
    double sync_seconds, step_seconds;
    CkptHeld held;
    CkptAsync async;
    CkptRank who;
    CkptSaveTo save_to;
} Run;

/* The token file and the loader of its batches */
static void open_data(const TrainOptions *o, Run *r) {
    char err[512];
    if (tokens_load(o->data_path, &r->tf, err, sizeof err) != 0) {
        if (strcmp(o->data_path, "build/data/synth.tok") == 0)
            USER_ERROR("%s (make it with `make data`, or pass --data FILE)", err);
        USER_ERROR("%s", err);
    }
    if (r->tf.vocab_size > (uint32_t)o->model.vocab_size)
        USER_ERROR("%s has vocabulary %u, larger than the model's %d", o->data_path,
                   r->tf.vocab_size, o->model.vocab_size);
    const char *why = dataloader_init(&r->dl, &r->tf, o->val_fraction, o->seq, o->seed);
    if (why) USER_ERROR("%s: %s", o->data_path, why);
}

/* The layout, its model states, the schedule and the executor that runs
 * it, and the token buffers */
static void setup_model(const TrainOptions *o, const TrainParallel *par, Run *r) {
    r->whole = gpt_layout_whole(&o->model);
    r->layout = par && par->layout ? par->layout : &r->whole;
    r->st = par ? par->states : NULL;
    /* every rank of the run agrees on fp16's overflows (lab 11): a group
     * of its own, so that comm.csv shows what the agreement moves */
    r->overflow = NULL;
    if (par && o->model.precision == PRECISION_FP16)
        r->overflow = comm_split(par->world, 0, par->world->rank, "overflow");
    const ReplicatedMixed mixed = {o->mixed,
                                   {(float)o->loss_scale, o->loss_scale_interval, 0, 0, 0, -1},
                                   r->overflow, o->count_flushed};
    if (!r->st) {
        replicated_states_init(&r->replicated, r->layout, o->seed, par ? par->sync : NULL,
                               &mixed, &r->own);
        r->st = &r->own;
    }
    CHECK(r->st->scaler || o->model.precision != PRECISION_FP16, "fp16 on states without a "
          "loss scaler (the preflight refuses it)");
    r->pipelined = par && par->schedule;
    r->trivial = r->pipelined ? NULL : pipe_schedule_trivial(o->grad_accum);
    r->schedule = r->pipelined ? par->schedule : r->trivial;
    r->stage_ops = r->pipelined ? par->stage_ops : &pipe_plain_ops;
    CHECK(r->schedule->micro_batches == o->grad_accum, "a schedule of %d micro-batches for "
          "--grad-accum %d", r->schedule->micro_batches, o->grad_accum);
    r->forward_only = pipe_schedule_forward_only(r->layout->pp, o->grad_accum,
                                                 r->layout->chunks, r->layout->dual);
    /* the backward bars of the DDP timelines: the traced hooks' (a
     * pipeline's are its ops', pipe_exec.c) */
    r->traced = (TracedHooks){r->st->hooks, 0.0};
    r->hooks = (ModelHooks){&r->traced, traced_needed, traced_done, traced_begin, traced_ready,
                            r->st->hooks ? r->st->hooks->loss_scale : NULL};
    pipe_rank_init(&r->exec, r->layout, r->st->params, r->st->grads,
                   r->pipelined ? r->st->hooks : &r->hooks, r->slice.rows, o->seq / r->layout->cp,
                   r->layout->pp_group, r->pipelined);
    r->bb = (BeforeBackward){r->st, &r->traced};
    const size_t batch_ints = 2 * (size_t)r->slice.rows * o->seq;
    const int cuda = device_current() == DEVICE_CUDA;
    if (r->layout->cp > 1) r->tokens.whole = malloc(batch_ints * sizeof(int));
    if (cuda) r->tokens.staging = malloc(batch_ints * sizeof(int));
    CHECK((r->layout->cp == 1 || r->tokens.whole) && (!cuda || r->tokens.staging),
          "out of memory for the token batches");
}

/* What this rank holds for --save and --resume, --resume's checkpoint
 * loaded, and --save's lineage started; returns the first step to run */
static int setup_checkpoints(const TrainOptions *o, const TrainParallel *par, Run *r) {
    if (o->save[0] || o->resume[0]) {
        CHECK(r->st->held, "these model states can't be checkpointed (ModelStates.held)");
        r->st->held(r->st->ctx, &r->held);
    }
    r->who = (CkptRank){par ? par->world : NULL, par ? par->dp->rank : 0, par ? par->dp->size : 1};
    CkptLineage resumed = {0};
    LossScaler *scaler = o->model.precision == PRECISION_FP16 ? r->st->scaler : NULL;
    const int first_step =
        o->resume[0] ? resume_from(o, r->layout, &r->held, scaler, &resumed, r->is_root) : 0;
    if (o->resume[0] && r->st->loaded) r->st->loaded(r->st->ctx);
    r->save_to = (CkptSaveTo){o->checkpoints, o->save, o->keep, o->seed, g_program_name, {0},
                              scaler ? &scaler->scale : NULL, scaler ? &scaler->clean : NULL};
    if (o->save[0]) start_lineage(o, &r->save_to, &resumed, first_step, r->is_root);
    return first_step;
}

/* One optimizer step (0-based), with the held-out loss before it when due,
 * its row of metrics.csv, and the checkpoint after it when due */
static void train_step(const TrainOptions *o, const TrainParallel *par, Run *r, int step) {
    const ModelStates *st = r->st;
    float val_loss = -1.0f;
    if (train_evaluates_at(o, step))
        val_loss = evaluate(o, par, &r->slice, &r->dl, &r->exec, r->forward_only, r->layout,
                            &r->tokens);
    profile_set_active(step >= 1);  /* the first step warms caches and BLAS up */

    double t0 = wall_seconds();
    float lr = lr_at_step(o, step);
    st->begin_step(st->ctx);
    /* gradients accumulate over micro-batches; only the last one's
     * backward pass communicates (before_backward) */
    BatchSource src = {&r->dl, SPLIT_TRAIN, (uint64_t)step, &r->slice, o->seq, r->layout,
                       &r->tokens};
    gpt_moe_stats_reset();  /* this step's micro-batches only, not the evaluation's */
    double loss_sum = pipe_run(&r->exec, r->schedule, r->stage_ops, load_micro_batch, &src,
                               before_backward, &r->bb);
    if (!isfinite(loss_sum))
        die_at(__FILE__, __LINE__, "loss is %f at step %d: training diverged", loss_sum, step);
    /* what the backward pass did not hide: the wait for the gradients */
    double ts = wall_seconds();
    double norm = sqrt(st->finish_grads(st->ctx, r->stage_ops->dloss_scaled ? 1 : o->grad_accum));
    r->sync_seconds += wall_seconds() - ts;
    double loss_mean = sum_over_ranks(par, loss_sum) / ((double)r->ranks * o->grad_accum);
    AdamWStep adamw = {lr, (float)o->beta1, (float)o->beta2, (float)o->eps,
                       (float)o->weight_decay, grad_clip_factor(norm, o->grad_clip), step + 1};
    /* the scale the backward used, before update moves it */
    const LossScaler seen = st->scaler ? *st->scaler : (LossScaler){.scale = 1.0f};
    double to = trace_now();
    st->update(st->ctx, &adamw);
    trace_event("compute", "optimizer", NULL, to, trace_now(), 0);
    if (par && par->after_step && st == &r->own)
        par->after_step(par->after_step_ctx, step, r->replicated.params, r->replicated.n);
    device_synchronize();  /* the step's kernels are queued, not yet done */
    double dt = wall_seconds() - t0;
    r->step_seconds += dt;
    profile_add_step(dt);
    profile_set_active(0);
    const double tokens_per_step = (double)o->batch * o->seq;
    if (r->is_root)
        runlog_step(&r->log, step, (float)loss_mean, val_loss, lr, (float)norm,
                    tokens_per_step / dt, dt * 1e3, &seen);
    if (o->model.n_experts > 0)
        log_moe_step(par, &r->log, step, o->grad_accum, o->model.n_experts, r->is_root);
    if (o->save[0] && ((o->save_every && (step + 1) % o->save_every == 0) || step + 1 == o->steps))
        save_checkpoint(o, &r->save_to, step + 1, r->layout, &r->held, &r->who, &r->async,
                        r->is_root);
}

/* --dump-params: the final parameters in the standard layout, from rank 0 */
static void dump_params(const TrainOptions *o, const Run *r) {
    const size_t nparams = gpt_num_params(&o->model);
    float *all = r->is_root ? malloc(nparams * sizeof(float)) : NULL;
    CHECK(!r->is_root || all, "out of memory for --dump-params");
    r->st->gather_params(r->st->ctx, all);
    if (r->is_root) {
        AtomicFile af;
        FILE *f = atomic_open(&af, o->dump_params);
        IO_CHECK(fwrite(all, sizeof(float), nparams, f) == nparams, "writing %s", o->dump_params);
        atomic_commit(&af);
    }
    free(all);
}

/* The run directory's files after the last step, and rank 0's summary */
static void write_outputs(const TrainOptions *o, const TrainParallel *par, const Run *r) {
    const size_t nparams = gpt_num_params(&o->model);
    char path[1024];
    snprintf(path, sizeof path, "%s/memory.csv", o->out_dir);
    write_memory_csv(par, path);
    if (par) {
        snprintf(path, sizeof path, "%s/comm.csv", o->out_dir);
        comm_write_csv(path);
        snprintf(path, sizeof path, "%s/trace.json", o->out_dir);
        trace_write_json(path);
        snprintf(path, sizeof path, "%s/trace.csv", o->out_dir);
        trace_write_csv(path);
        snprintf(path, sizeof path, "%s/params_checksum.csv", o->out_dir);
        write_params_checksum(par, r->st, nparams, path);
    }
    /* for comparing layouts parameter by parameter (tests, the DDP and ZeRO labs) */
    if (o->dump_params[0]) dump_params(o, r);
    if (!r->is_root) return;
    snprintf(path, sizeof path, "%s/run.json", o->out_dir);
    runlog_write_run_json(path, o, o->lab, par ? par->world->size : 1, r->ranks, r->layout, nparams);
    printf("%s: wrote %s/{metrics.csv,memory.csv,run.json%s}\n", g_program_name, o->out_dir,
           par ? ",comm.csv,trace.json,trace.csv,params_checksum.csv" : "");
    const int steps_run = o->steps > o->first_step ? o->steps - o->first_step : 1;
    if (par)
        printf("%s: mean step %.1f ms, of which %.1f ms waiting for gradients after the "
               "backward pass\n",
               g_program_name, 1e3 * r->step_seconds / steps_run, 1e3 * r->sync_seconds / steps_run);
}

/* The kit's logical bytes (memory.csv) against what the driver sees: the
 * difference is the CUDA context, cuBLAS/NCCL workspaces and the
 * allocator's rounding */
static void report_gpu_memory(const TrainParallel *par) {
    size_t logical = 0;
    for (int c = 0; c < MEM_NUM_CATEGORIES; c++) logical += mem_peak_bytes(c);
    printf("%s: rank %d: peak %.1f MiB counted in memory.csv, %.1f MiB in use on the GPU "
           "(cudaMemGetInfo, whole device)\n",
           g_program_name, par ? par->world->rank : 0, logical / 1048576.0,
           device_driver_used_bytes() / 1048576.0);
}

static void free_run(Run *r) {
    free(r->tokens.whole);
    free(r->tokens.staging);
    pipe_rank_free(&r->exec);
    schedule_free(r->trivial);
    schedule_free(r->forward_only);
    if (r->st == &r->own) replicated_states_free(&r->replicated);
    if (r->overflow) comm_free(r->overflow);
    tokens_free(&r->tf);
}

void train_run_parallel(TrainOptions *o, const TrainParallel *par) {
    CHECK(preflight_passed(), "the trainer did not call preflight_run (preflight.h) before "
          "allocating: bad outputs or a run too big for memory would be found too late");
    omp_set_num_threads(o->threads);
    Run r;
    memset(&r, 0, sizeof r);
    r.ranks = par ? par->dp->size : 1;
    r.is_root = !par || par->world->rank == 0;
    r.slice = (BatchSlice){r.ranks, par ? par->dp->rank : 0, o->grad_accum,
                           train_micro_batch_rows(o, r.ranks)};
    open_data(o, &r);
    setup_model(o, par, &r);
    if (r.is_root)
        printf("%s: config %s, %zu parameters, batch %d x %d tokens (%d rank%s x %d micro-batch%s "
               "x %d), %d steps, %d thread%s, data %s, device %s\n",
               g_program_name, o->config_name, gpt_num_params(&o->model), o->batch, o->seq,
               r.ranks, r.ranks == 1 ? "" : "s", o->grad_accum, o->grad_accum == 1 ? "" : "es",
               r.slice.rows, o->steps, o->threads, o->threads == 1 ? "" : "s", o->data_path,
               device_description());
    if (r.is_root) runlog_open(&r.log, o);
    if (o->profile) profile_enable();
    o->first_step = setup_checkpoints(o, par, &r);
    for (int step = o->first_step; step < o->steps; step++) train_step(o, par, &r, step);
    finish_saves(o, &r.async, r.is_root);
    if (r.is_root) runlog_close(&r.log);
    /* the timeline of the last step (none when a resumed run had none to go) */
    if (r.pipelined && o->steps > o->first_step)
        pipe_report_timeline(&r.exec, r.schedule, par->world, o->out_dir, g_program_name);
    write_outputs(o, par, &r);
    if (r.is_root) profile_report(o->out_dir, r.slice.rows * (o->seq / r.layout->cp), o->model.n_embd);
    if (device_current() == DEVICE_CUDA) report_gpu_memory(par);
    free_run(&r);
}
