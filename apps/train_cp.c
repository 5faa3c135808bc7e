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
#include "comm.h"
#include "cp_layers.h"
#include "ddp_sync.h"
#include "device.h"
#include "kernels.h"
#include "memplan.h"
#include "mesh.h"
#include "plugins.h"
#include "preflight.h"
#include "ring_attention.h"
#include "runlog.h"
#include "tp_layers.h"
#include "train.h"

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
    TrainOptions o;
    const TrainProgram program = {
        .lab = "07_context_parallel",
        .what = "Context-parallel GPT training (lab 07): each sequence's positions "
                "split over --cp ranks, attention across the split by ring "
                "attention or Ulysses; tensor parallelism inside, data parallelism "
                "over the rest.",
        .example_ranks = 2,
        .example = "--cp 2 --cp-algo zigzag --steps 50",
        .parallel = PAR_CP | PAR_TP,
        PROGRAM_PLUGINS};
    train_options_parse(argc, argv, &o, &program);
    const ParallelFlags *f = &o.parallel;
    const int cp = f->cp, tp = f->tp;
    const char *why = gpt_layout_problem(&o.model, tp);
    if (why) USER_ERROR("%s", why);
    why = gpt_context_problem(&o.model, tp, cp, f->cp_algo, o.seq);
    if (why) USER_ERROR("%s", why);
    Mesh *mesh = mesh_create(world, parallel_mesh_degrees(f));
    GPTLayout layout = parallel_layout(f, &o.model, mesh);
    if (layout.split_layers) layout.tp_ops = &tp_layers;  /* lab 04's (tp_layers.h) */
    /* the lab's attention (model.h), timed for the balance */
    const ContextParallelOps timed = {timed_forward, timed_backward, context_parallel_loss_mean};
    g_lab_ops = cp_layers_of(f->cp_algo);  /* cp_layers.h */
    layout.cp_ops = &timed;

    /* the rows of the batch: one slice per DP rank, shared by its CP (and TP) group */
    Comm *dp = mesh->dp_group;
    const int rows = train_micro_batch_rows(&o, dp->size);
    MemLayout ml = parallel_mem_layout(f, layout.split_layers);
    ml.ranks = dp->size;
    ml.rows = rows;
    ml.seq = o.seq / cp;
    preflight_run(&o, &ml, world);
    /* the loss is the CP group's mean already: sum it over DP only */
    Comm *metrics = comm_split(dp, 0, dp->rank, "metrics");
    DdpSync ds;
    ddp_sync_init(&ds, mesh->dcp_group, &layout, DDP_BUCKETED, 1 << 18, 0);  /* 0.25 MB buckets */
    if (world->rank == 0)
        printf("train_cp: cp %d x tp %d x dp %d; %s attention, %d of %d positions of each "
               "sequence per rank%s; gradients averaged over dp x cp = %d ranks\n",
               cp, tp, dp->size, gpt_cp_algo_name(f->cp_algo), o.seq / cp, o.seq,
               f->cp_algo == CP_ZIGZAG ? " (2 chunks)" : "", mesh->dcp_group->size);
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
             gpt_cp_algo_name(f->cp_algo), pairs, block_seconds, g_attention_seconds);
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
