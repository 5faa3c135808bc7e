/* train_cp: context-parallel GPT training (lab 07), composed with data
 * parallelism and lab 04's tensor parallelism. The loop is
 * common/train.c's; each rank holds seq / cp positions of every sequence
 * of its data-parallel rows, and the model's attention calls the lab's
 * ring (ring_attention.c: contiguous chunks, or zigzag) or Ulysses
 * (ulysses.c) through the layout (model.h ContextParallelOps). Gradients
 * are averaged over the dp x cp ranks that hold the same parameters by lab
 * 02's bucketed DDP.
 *   mpirun -np 4 train_cp --cp 4 --cp-algo zigzag
 *   mpirun -np 4 train_cp --cp 2 --tp 2 --cp-algo ulysses
 * Mesh (mesh.h): TP innermost, then CP, then DP.
 * Besides the loop's outputs: cp_balance.csv, per rank the attention
 * (query, key) pairs it computed and the seconds it spent in attention
 * (the balance of the split), and, from rank 0, the CP traffic and the
 * memory against the planner's formulas. */
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "backward_kernels.h"
#include "check.h"
#include "checkpoints.h"
#include "cli.h"
#include "comm.h"
#include "cp_layers.h"
#include "ddp_sync.h"
#include "device.h"
#include "kernels.h"
#include "memplan.h"
#include "mesh.h"
#include "preflight.h"
#include "ring_attention.h"
#include "runlog.h"
#include "tp_layers.h"
#include "train.h"

typedef struct {
    int cp, tp;
    CpAlgo algo;
} CpOptions;

static const ExtraOption g_cp_options[] = {
    {"cp", 1, "--cp N               context-parallel degree: ranks sharing each sequence "
              "(default 1); dp = ranks / (tp cp)"},
    {"cp-algo", 1, "--cp-algo NAME       ring | zigzag | ulysses | striped (the extension): how attention "
                   "crosses the split "
                   "(default ring)"},
    {"tp", 1, "--tp N               tensor-parallel degree (lab 04; default 1): heads split by "
              "TP first, Ulysses within what is left"},
};
enum { N_CP_OPTIONS = sizeof g_cp_options / sizeof g_cp_options[0] };

static void on_cp_option(void *ctx, int index, const char *arg) {
    CpOptions *c = ctx;
    if (index == 0) c->cp = cli_int("--cp", arg, 1, 1 << 12);
    else if (index == 1) c->algo = gpt_cp_algo_parse(arg);
    else c->tp = cli_int("--tp", arg, 1, 1 << 16);
}

/* ---- the lab's attention, timed (cp_balance.csv) ---------------------------- */

static const ContextParallelOps *g_lab_ops;
static double g_attention_seconds;

static void timed_forward(const GPTLayout *l, float *out, float *keep, const float *qkv, int B,
                          int T) {
    double t0 = wall_seconds();
    g_lab_ops->attention_forward(l, out, keep, qkv, B, T);
    device_synchronize();
    g_attention_seconds += wall_seconds() - t0;
}

static void timed_backward(const GPTLayout *l, float *dqkv, float *scratch, const float *dout,
                           const float *qkv, const float *out, const float *keep, int B, int T) {
    double t0 = wall_seconds();
    g_lab_ops->attention_backward(l, dqkv, scratch, dout, qkv, out, keep, B, T);
    device_synchronize();
    g_attention_seconds += wall_seconds() - t0;
}

int main(int argc, char **argv) {
    program_set_name(argv[0]);
    kernels_set_cpu_backward(program_backward_kernels());
    Comm *world = comm_init(&argc, &argv);
    CpOptions copt = {1, 1, CP_RING};
    TrainOptions o;
    const TrainProgram program = {
        .lab = "07_context_parallel",
        .what = "Context-parallel GPT training (lab 07): each sequence's positions "
                "split over --cp ranks, attention across the split by ring "
                "attention or Ulysses; tensor parallelism inside, data parallelism "
                "over the rest.",
        .extra = g_cp_options, .n_extra = N_CP_OPTIONS, .on_extra = on_cp_option, .ctx = &copt,
        .checkpoints = program_checkpoints(), .no_checkpoints = PROGRAM_NO_CHECKPOINTS};
    train_options_parse(argc, argv, &o, &program);
    const int cp = copt.cp, tp = copt.tp;
    const char *why = gpt_layout_problem(&o.model, tp);
    if (why) USER_ERROR("%s", why);
    why = gpt_context_problem(&o.model, tp, cp, copt.algo, o.seq);
    if (why) USER_ERROR("%s", why);
    Mesh *mesh = mesh_create(world, (MeshDegrees){.tp = tp, .cp = cp, .dp = 0, .pp = 1, .ep = 1});
    GPTLayout layout = gpt_layout_make(&o.model, tp, mesh->tp_rank);
    if (tp > 1) {
        layout.split_layers = 1;
        layout.tp_ops = &tp_layers;  /* lab 04's (tp_layers.h) */
    }
    layout.tp_group = mesh->tp_group;
    /* the lab's attention (model.h), timed for the balance */
    const ContextParallelOps timed = {timed_forward, timed_backward, context_parallel_loss_mean};
    g_lab_ops = cp_layers_of(copt.algo);  /* cp_layers.h */
    gpt_layout_set_context(&layout, cp, mesh->cp_rank, copt.algo);
    layout.cp_group = mesh->cp_group;
    layout.cp_ops = &timed;

    /* the rows of the batch: one slice per DP rank, shared by its CP (and TP) group */
    Comm *dp = mesh->dp_group;
    const int rows = train_micro_batch_rows(&o, dp->size);
    MemLayout ml = {.ranks = dp->size, .rows = rows, .seq = o.seq / cp, .tp = tp > 1 ? tp : 0,
                    .cp = cp, .cp_algo = copt.algo};
    preflight_run(&o, &ml, world);
    /* the loss is the CP group's mean already: sum it over DP only */
    Comm *metrics = comm_split(dp, 0, dp->rank, "metrics");
    DdpSync ds;
    ddp_sync_init(&ds, mesh->dcp_group, &layout, DDP_BUCKETED, 1 << 18, 0);  /* 0.25 MB buckets */
    if (world->rank == 0)
        printf("train_cp: cp %d x tp %d x dp %d; %s attention, %d of %d positions of each "
               "sequence per rank%s; gradients averaged over dp x cp = %d ranks\n",
               cp, tp, dp->size, gpt_cp_algo_name(copt.algo), o.seq / cp, o.seq,
               copt.algo == CP_ZIGZAG ? " (2 chunks)" : "", mesh->dcp_group->size);
    TrainParallel par = {.world = world, .dp = dp, .metrics = metrics, .sync = &ds.sync,
                         .layout = &layout};
    train_run_parallel(&o, &par);

    /* the balance: the ring's block work per rank, and the time in
     * attention around it (the rest: waiting for the ring's slowest rank) */
    unsigned long long pairs;
    double block_seconds;
    attention_block_stats(&pairs, &block_seconds);
    char row[192], path[1024];
    snprintf(row, sizeof row, "%d,%d,%s,%llu,%.6f,%.6f\n", world->rank, mesh->cp_rank,
             gpt_cp_algo_name(copt.algo), pairs, block_seconds, g_attention_seconds);
    snprintf(path, sizeof path, "%s/cp_balance.csv", o.out_dir);
    comm_write_gathered(world, path,
                        "rank,cp_rank,algo,block_pairs,block_seconds,attention_seconds\n", row);
    if (world->rank == 0) {
        memplan_print_check("train_cp", &o.model, &ml, train_steps_run(&o));
        train_print_cp_traffic("train_cp", &o, &ml, mesh->cp_group);
    }
    ddp_sync_free(&ds);
    mesh_free(mesh);
    comm_finalize();
    return 0;
}
