/* train_pp: pipeline-parallel GPT training (lab 06), composed with data
 * parallelism and lab 04's tensor parallelism. The loop is common/train.c's;
 * each step runs the lab's schedule (schedules.c: GPipe, 1F1B, interleaved
 * 1F1B, ZB-H1) through the executor (pipe_exec.h), whose compute ops are
 * the lab's stage functions (pipeline.c). Gradients are averaged over the
 * ranks that hold the same stage by lab 02's bucketed DDP, after the step's
 * micro-batches (the pipeline's backward passes end at different times on
 * different stages).
 *   mpirun -np 4 train_pp --pp 4 --schedule 1f1b --micro-batches 8
 *   mpirun -np 4 train_pp --pp 2 --tp 2 --schedule interleaved --chunks 2 --micro-batches 4
 * Mesh (mesh.h): TP innermost, then DP, then PP. */
#include <stdio.h>

#include "backward_kernels.h"
#include "check.h"
#include "checkpoints.h"
#include "cli.h"
#include "comm.h"
#include "ddp_sync.h"
#include "memplan.h"
#include "mesh.h"
#include "pipe_exec.h"
#include "pipeline.h"
#include "preflight.h"
#include "schedules.h"
#include "tp_layers.h"
#include "train.h"

typedef struct {
    int pp, tp, micro_batches, chunks;
    char schedule[32];
} PpOptions;

static const ExtraOption g_pp_options[] = {
    {"pp", 1, "--pp P               pipeline stages' ranks (default 1); dp = ranks / (tp pp)"},
    {"schedule", 1, "--schedule NAME      gpipe | 1f1b | interleaved | zb-h1 | 1f1b-unbatched (the "
                    "extension) (default 1f1b)"},
    {"micro-batches", 1, "--micro-batches M    micro-batches per step and pipeline (takes "
                         "--grad-accum's place; default --grad-accum's)"},
    {"chunks", 1, "--chunks V           model chunks per rank, interleaved only (default 2 "
                  "for interleaved, else 1)"},
    {"tp", 1, "--tp N               tensor-parallel degree inside each stage (lab 04; "
              "default 1)"},
};
enum { N_PP_OPTIONS = sizeof g_pp_options / sizeof g_pp_options[0] };

static void on_pp_option(void *ctx, int index, const char *arg) {
    PpOptions *p = ctx;
    switch (index) {
    case 0: p->pp = cli_int("--pp", arg, 1, 1 << 12); break;
    case 1: cli_string(p->schedule, sizeof p->schedule, "--schedule", arg); break;
    case 2: p->micro_batches = cli_int("--micro-batches", arg, 1, 1 << 16); break;
    case 3: p->chunks = cli_int("--chunks", arg, 1, 1 << 10); break;
    default: p->tp = cli_int("--tp", arg, 1, 1 << 16);
    }
}

/* The checks that need no communication, in the order a user fixes them */
static void check_options(TrainOptions *o, PpOptions *p) {
    train_pipeline_options(o, p->schedule, p->micro_batches, &p->chunks);
    char why[256];
    if (pipe_schedule_problem(p->schedule, p->pp, o->grad_accum, p->chunks, why, sizeof why))
        USER_ERROR("%s", why);
    const char *problem = gpt_layout_problem(&o->model, p->tp);
    if (problem) USER_ERROR("%s", problem);
    problem = gpt_pipeline_problem(&o->model, p->pp, p->chunks);
    if (problem) USER_ERROR("%s (--pp %d, --chunks %d)", problem, p->pp, p->chunks);
}

int main(int argc, char **argv) {
    program_set_name(argv[0]);
    kernels_set_cpu_backward(program_backward_kernels());
    Comm *world = comm_init(&argc, &argv);
    PpOptions popt = {.pp = 1, .tp = 1, .schedule = "1f1b"};
    TrainOptions o;
    const TrainProgram program = {
        .lab = "06_pipeline",
        .what = "Pipeline-parallel GPT training (lab 06): the blocks cut into "
                "stages over --pp ranks, each step a schedule of micro-batches; "
                "tensor parallelism inside a stage, data parallelism over the rest.",
        .extra = g_pp_options, .n_extra = N_PP_OPTIONS, .on_extra = on_pp_option, .ctx = &popt,
        .checkpoints = program_checkpoints(), .no_checkpoints = PROGRAM_NO_CHECKPOINTS};
    train_options_parse(argc, argv, &o, &program);
    check_options(&o, &popt);
    const int pp = popt.pp, tp = popt.tp, m = o.grad_accum, v = popt.chunks;
    Mesh *mesh = mesh_create(world, (MeshDegrees){.tp = tp, .cp = 1, .dp = 0, .pp = pp, .ep = 1});
    Comm *dp = mesh->dp_group;
    GPTLayout layout = gpt_layout_make(&o.model, tp, mesh->tp_rank);
    gpt_layout_set_pipeline(&layout, pp, mesh->pp_rank, v);
    if (tp > 1) {
        layout.split_layers = 1;
        layout.tp_ops = &tp_layers;  /* lab 04's (tp_layers.h) */
    }
    layout.tp_group = mesh->tp_group;
    layout.pp_group = mesh->pp_group;
    layout.sum_tied_embedding = pipeline_sum_tied_embedding;
    /* the embedding group: the first and last stage of each pipeline */
    layout.embed_group = mesh_pipeline_ends(mesh);

    Schedule *schedule = schedule_by_name(popt.schedule, pp, m, v);
    char why[512];
    if (pipe_generated_problem(schedule, popt.schedule, pp, m, v, NULL, why, sizeof why))
        die_at(__FILE__, __LINE__, "%s (p %d, m %d, v %d)", why, pp, m, v);
    const PipeStageOps stage_ops = {pipeline_forward, pipeline_backward, pipeline_backward_input,
                                    pipeline_backward_weight, 1, "pipeline_"};

    const int rows = train_micro_batch_rows(&o, dp->size);
    MemLayout ml = {.ranks = dp->size, .rows = rows, .seq = o.seq, .tp = tp > 1 ? tp : 0,
                    .pp = pp, .pp_rank = mesh->pp_rank, .chunks = v, .schedule = schedule};
    preflight_run(&o, &ml, world);
    /* the loss is on the last stage: metrics span the data-parallel ranks
     * of every stage (one TP rank's copy) */
    Comm *metrics = comm_split(world, mesh->tp_rank, world->rank, "metrics");
    DdpSync ds;
    ddp_sync_init(&ds, dp, &layout, DDP_BUCKETED, 1 << 18, 0);  /* 0.25 MB buckets */
    if (world->rank == 0) {
        printf("train_pp: pp %d x tp %d x dp %d; schedule %s, %d micro-batches of %d "
               "sequence%s, %d chunk%s per rank: %d stages of %d block%s\n",
               pp, tp, dp->size, popt.schedule, m, rows, rows == 1 ? "" : "s", v,
               v == 1 ? "" : "s", pp * v, o.model.n_layer / (pp * v),
               o.model.n_layer / (pp * v) == 1 ? "" : "s");
        schedule_print(stdout, schedule, 0);
    }
    TrainParallel par = {.world = world, .dp = dp, .metrics = metrics, .sync = &ds.sync,
                         .layout = &layout, .schedule = schedule, .stage_ops = &stage_ops};
    train_run_parallel(&o, &par);
    /* each stage's memory against the planner's, from the first pipeline,
     * one stage after the other */
    for (int stage = 0; stage < pp; stage++) {
        comm_barrier(world);
        if (mesh->tp_rank == 0 && mesh->dp_rank == 0 && mesh->pp_rank == stage) {
            char name[64];
            snprintf(name, sizeof name, "train_pp stage %d", stage);
            memplan_print_check(name, &o.model, &ml, train_steps_run(&o));
            train_print_tp_traffic(name, &o, &ml, mesh->tp_group, 0);
            fflush(stdout);
        }
    }
    ddp_sync_free(&ds);
    schedule_free(schedule);
    if (layout.embed_group) comm_free(layout.embed_group);
    mesh_free(mesh);
    comm_finalize();
    return 0;
}
