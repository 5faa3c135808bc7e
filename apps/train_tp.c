/* train_tp: tensor-parallel GPT training (lab 04), with data parallelism
 * over the rest of the ranks. The loop is common/train.c's; the model
 * calls the lab's split layers (tensor_parallel.c) through its layout
 * (layout.h, model.h); gradients are averaged over the ranks that hold the
 * same shard by lab 02's overlapped DDP (ddp_sync.h).
 *   mpirun -np 4 train_tp --tp 2 --config tiny     (tp 2 x dp 2)
 * Built with WITH_LAB05 (build/.../05_activation_memory/train_tp), it also
 * runs lab 05's sequence parallelism (--sp) and activation recomputation
 * (--recompute), through the same layout. */
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "backward_kernels.h"
#include "check.h"
#include "comm.h"
#include "ddp_sync.h"
#include "memplan.h"
#include "mesh.h"
#include "plugins.h"
#include "preflight.h"
#include "tensor_parallel.h"
#include "tp_layers.h"
#include "train.h"
#ifdef WITH_LAB05
#include "act_layers.h"
#endif

typedef struct {
    int fused_ce;     /* the extension's cross-entropy: two all-reduces */
    int sp_regather;  /* lab 05's extension */
} TpOptions;

static const ExtraOption g_tp_options[] = {
    {"fused-ce", 0, "--fused-ce           the cross-entropy with two all-reduces (the lab's "
                    "extension)"},
#ifdef WITH_LAB05
    {"sp-regather", 0, "--sp-regather        sequence parallelism keeping only this rank's rows of "
                       "the layernorm outputs, gathered again in the backward pass (the lab's "
                       "extension; implies --sp)"},
#endif
};
enum { N_TP_OPTIONS = sizeof g_tp_options / sizeof g_tp_options[0] };

static void on_tp_option(void *ctx, const char *name, const char *arg) {
    (void)arg;
    TpOptions *t = ctx;
    if (!strcmp(name, "fused-ce")) t->fused_ce = 1;
    else t->sp_regather = 1;
}

int main(int argc, char **argv) {
    program_set_name(argv[0]);
    kernels_set_cpu_backward(program_backward_kernels());
    Comm *world = comm_init(&argc, &argv);
    TpOptions topt = {0, 0};
    TrainOptions o;
#ifdef WITH_LAB05
    const unsigned dims = PAR_TP | PAR_SP | PAR_RECOMPUTE;
    const char *lab = "05_activation_memory",
               *what = "Tensor-parallel GPT training (Megatron-LM) with lab 05's sequence "
                       "parallelism and activation recomputation: each block's weights split "
                       "over --tp ranks, data parallelism over the rest.";
#else
    const unsigned dims = PAR_TP;
    const char *lab = "04_tensor_parallel",
               *what = "Tensor-parallel GPT training (Megatron-LM): each block's weights split "
                       "over --tp ranks, data parallelism over the rest (lab 04).";
#endif
    const TrainProgram program = {
        .lab = lab,
        .what = what,
        .example_ranks = 2,
        .example = "--tp 2 --steps 50",
        .parallel = dims,
        .extra = g_tp_options, .n_extra = N_TP_OPTIONS, .on_extra = on_tp_option, .ctx = &topt,
        PROGRAM_PLUGINS};
    train_options_parse(argc, argv, &o, &program);
    ParallelFlags *f = &o.parallel;
    if (topt.sp_regather) f->sp = 1;
    const int tp = f->tp;
    const char *why = gpt_layout_problem(&o.model, tp);
    if (why) USER_ERROR("%s", why);
    why = gpt_activation_problem(&o.model, tp, f->sp, f->recompute, o.seq);
    if (why) USER_ERROR("%s", why);
    Mesh *mesh = mesh_create(world, parallel_mesh_degrees(f));
    Comm *dp = mesh->dp_group;
    GPTLayout layout = parallel_layout(f, &o.model, mesh);
    layout.split_layers = 1;  /* the lab's layers, at tp 1 too */
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
#ifdef WITH_LAB05
    /* lab 05's layers and recomputations, as the model calls them (act_layers.h) */
    layout.sp_ops = f->sp ? &sp_layers : NULL;
    layout.sp_regather = topt.sp_regather;
    layout.recompute_ops = &recompute_layers;
#endif
    MemLayout ml = parallel_mem_layout(f, layout.split_layers);
    ml.ranks = dp->size;
    ml.rows = train_micro_batch_rows(&o, dp->size);
    ml.seq = o.seq;
    ml.sp_regather = layout.sp_regather;
    preflight_run(&o, &ml, world);
    Comm *metrics = comm_split(dp, 0, dp->rank, "metrics");
    DdpSync ds;
    ddp_sync_init(&ds, dp, &layout, DDP_OVERLAPPED, 1 << 18, 0);  /* 0.25 MB buckets */
    if (world->rank == 0 && (layout.sp || layout.recompute))
        printf("train_tp: sequence parallelism %s, activation recomputation %s\n",
               layout.sp_regather ? "on, gathered again in the backward pass"
               : layout.sp        ? "on"
                                  : "off",
               gpt_recompute_name(layout.recompute));
    if (world->rank == 0)
        printf("train_tp: tp %d x dp %d; per rank %d of %d heads, %d of %d MLP columns, %d "
               "vocabulary rows of %d (%d padding), %zu of %zu parameters\n",
               tp, dp->size, layout.n_head, o.model.n_head, layout.mlp_width, 4 * o.model.n_embd,
               layout.vocab_rows, layout.vocab_padded, layout.vocab_padded - o.model.vocab_size,
               layout.num_params, gpt_num_params(&o.model));
    TrainParallel par = {.world = world, .dp = dp, .metrics = metrics, .sync = &ds.sync,
                         .layout = &layout};
    train_run_parallel(&o, &par);
    if (world->rank == 0) {
        memplan_print_check("train_tp", &o.model, &ml, train_steps_run(&o));
        train_print_tp_traffic("train_tp", &o, &ml, mesh->tp_group, topt.fused_ce);
    }
    ddp_sync_free(&ds);
    mesh_free(mesh);
    comm_finalize();
    return 0;
}
