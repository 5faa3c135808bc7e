/* train_tp: tensor-parallel GPT training (lab 04), with data parallelism
 * over the rest of the ranks. The loop is common/train.c's; the model
 * calls the lab's split layers (tensor_parallel.c) through its layout
 * (layout.h, model.h); gradients are averaged over the ranks that hold the
 * same shard by lab 02's overlapped DDP (ddp_sync.h).
 *   mpirun -np 4 train_tp --tp 2 --config tiny     (tp 2 x dp 2) */
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "check.h"
#include "cli.h"
#include "comm.h"
#include "ddp_sync.h"
#include "memplan.h"
#include "mesh.h"
#include "preflight.h"
#include "tensor_parallel.h"
#include "train.h"

typedef struct {
    int tp;
    int fused_ce;  /* the extension's cross-entropy: two all-reduces */
} TpOptions;

static const ExtraOption g_tp_options[] = {
    {"tp", 1, "--tp N               tensor-parallel degree: divides the heads and the ranks "
              "(default 1); dp = ranks / tp"},
    {"fused-ce", 0, "--fused-ce           the cross-entropy with two all-reduces (the lab's "
                    "extension)"},
};

static void on_tp_option(void *ctx, int index, const char *arg) {
    TpOptions *t = ctx;
    if (index == 0) t->tp = cli_int("--tp", arg, 1, 1 << 16);
    else t->fused_ce = 1;
}

/* Forward passes in the run: K per step, and K per held-out batch at each
 * evaluation. */
static size_t forward_passes(const TrainOptions *o) {
    size_t evals = 0;
    for (int s = 0; s < o->steps; s++) evals += train_evaluates_at(o, s);
    return (size_t)o->grad_accum * ((size_t)o->steps + evals * o->eval_batches);
}

/* Rank 0: the planner's memory and TP traffic next to what the run measured. */
static void print_checks(const TrainOptions *o, const MemLayout *ml, const Comm *tp,
                         int fused_ce) {
    memplan_print_check("train_tp", &o->model, ml);
    if (tp->size == 1) return;
    CommCount fwd, bwd;
    memplan_tp_comm(&o->model, ml->rows, ml->seq, &fwd, &bwd);
    fwd.calls -= fused_ce;  /* the same bytes in one all-reduce fewer */
    /* plus the gradient norm's sum over the group: one double per step */
    const size_t passes = forward_passes(o), backwards = (size_t)o->grad_accum * o->steps;
    size_t calls = fwd.calls * passes + bwd.calls * backwards + o->steps;
    size_t bytes = fwd.bytes * passes + bwd.bytes * backwards + sizeof(double) * o->steps;
    const CommOpStats *s = &tp->stats[OP_ALLREDUCE];
    printf("train_tp: TP all-reduces per rank, predicted vs measured: per forward %zu calls "
           "%zu bytes, per backward %zu calls %zu bytes; run: %zu calls %zu bytes vs %llu "
           "calls %llu bytes  %s\n",
           fwd.calls, fwd.bytes, bwd.calls, bwd.bytes, calls, bytes,
           (unsigned long long)s->calls, (unsigned long long)s->bytes,
           s->calls == calls && s->bytes == bytes ? "ok" : "DIFFERENT");
}

int main(int argc, char **argv) {
    program_set_name(argv[0]);
    Comm *world = comm_init(&argc, &argv);
    TpOptions topt = {1, 0};
    TrainOptions o;
    train_options_parse_with(argc, argv, &o, "04_tensor_parallel",
                             "Tensor-parallel GPT training (Megatron-LM): each block's weights "
                             "split over --tp ranks, data parallelism over the rest (lab 04).",
                             g_tp_options, 2, on_tp_option, &topt);
    const int tp = topt.tp;
    const char *why = gpt_layout_problem(&o.model, tp);
    if (why) USER_ERROR("%s", why);
    Mesh *mesh = mesh_create(world, (MeshDegrees){.tp = tp, .cp = 1, .dp = 0, .pp = 1, .ep = 1});
    Comm *dp = mesh->dp_group;
    GPTLayout layout = gpt_layout_make(&o.model, tp, mesh->tp_rank);
    layout.split_layers = 1;
    layout.tp_group = mesh->tp_group;
    /* the lab's layers, as the model calls them (model.h) */
    const TensorParallelOps ops = {
        column_parallel_forward,          column_parallel_backward,
        row_parallel_forward,             row_parallel_backward,
        vocab_parallel_embedding_forward, vocab_parallel_embedding_backward,
        topt.fused_ce ? vocab_parallel_crossentropy_forward_fused
                      : vocab_parallel_crossentropy_forward,
        vocab_parallel_crossentropy_backward,
    };
    layout.tp_ops = &ops;
    MemLayout ml = {.ranks = dp->size, .rows = train_micro_batch_rows(&o, dp->size),
                    .seq = o.seq, .tp = tp};
    preflight_run(&o, &ml, world);
    Comm *metrics = comm_split(dp, 0, dp->rank, "metrics");
    DdpSync ds;
    ddp_sync_init(&ds, dp, &layout, DDP_OVERLAPPED, 1 << 18, 0);  /* 0.25 MB buckets */
    if (world->rank == 0)
        printf("train_tp: tp %d x dp %d; per rank %d of %d heads, %d of %d MLP columns, %d "
               "vocabulary rows of %d (%d padding), %zu of %zu parameters\n",
               tp, dp->size, layout.n_head, o.model.n_head, layout.mlp_width, 4 * o.model.n_embd,
               layout.vocab_rows, layout.vocab_padded, layout.vocab_padded - o.model.vocab_size,
               layout.num_params, gpt_num_params(&o.model));
    TrainParallel par = {.world = world, .dp = dp, .metrics = metrics, .sync = &ds.sync,
                         .layout = &layout};
    train_run_parallel(&o, &par);
    if (world->rank == 0) print_checks(&o, &ml, mesh->tp_group, topt.fused_ce);
    ddp_sync_free(&ds);
    mesh_free(mesh);
    comm_finalize();
    return 0;
}
