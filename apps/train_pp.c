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
#include "comm.h"
#include "ddp_sync.h"
#include "memplan.h"
#include "mesh.h"
#include "pipe_exec.h"
#include "pipeline.h"
#include "plugins.h"
#include "preflight.h"
#include "schedules.h"
#include "tp_layers.h"
#include "train.h"

/* The checks that need no communication, in the order a user fixes them */
static void check_options(const TrainOptions *o) {
    const ParallelFlags *p = &o->parallel;
    char why[256];
    if (pipe_schedule_problem(p->schedule, p->pp, o->grad_accum, p->chunks, why, sizeof why))
        USER_ERROR("%s", why);
    const char *problem = gpt_layout_problem(&o->model, p->tp);
    if (problem) USER_ERROR("%s", problem);
    problem = gpt_pipeline_problem(&o->model, p->pp, p->chunks, pipe_schedule_dual(p->schedule));
    if (problem) USER_ERROR("%s (--pp %d, --chunks %d)", problem, p->pp, p->chunks);
    /* the planner's TP traffic counts one stage's collectives per forward,
     * but a DualPipe end rank's forwards alternate between two stages */
    if (pipe_schedule_dual(p->schedule) && p->tp > 1)
        USER_ERROR("--schedule dualpipe runs with data parallelism here, not with --tp %d: "
                   "give --tp 1", p->tp);
}

int main(int argc, char **argv) {
    program_set_name(argv[0]);
    kernels_set_cpu_backward(program_backward_kernels());
    Comm *world = comm_init(&argc, &argv);
    TrainOptions o;
    const TrainProgram program = {
        .lab = "06_pipeline",
        .what = "Pipeline-parallel GPT training (lab 06): the blocks cut into "
                "stages over --pp ranks, each step a schedule of micro-batches; "
                "tensor parallelism inside a stage, data parallelism over the rest.",
        .example_ranks = 4,
        .example = "--pp 4 --micro-batches 8 --steps 50",
        .parallel = PAR_PP | PAR_TP,
        PROGRAM_PLUGINS};
    train_options_parse(argc, argv, &o, &program);
    check_options(&o);
    const ParallelFlags *f = &o.parallel;
    const int pp = f->pp, tp = f->tp, m = o.grad_accum, v = f->chunks;
    Mesh *mesh = mesh_create(world, parallel_mesh_degrees(f));
    Comm *dp = mesh->dp_group;
    GPTLayout layout = parallel_layout(f, &o.model, mesh);
    if (layout.split_layers) layout.tp_ops = &tp_layers;  /* lab 04's (tp_layers.h) */
    /* what two ranks of a pipeline both hold: wte at its first and last
     * stage, or under DualPipe every stage, at ranks r and pp - 1 - r */
    if (layout.dual) {
        layout.sum_pipeline_copies = pipeline_sum_dual_copies;
        layout.dual_group = mesh_pipeline_mirrors(mesh);
    } else {
        layout.sum_pipeline_copies = pipeline_sum_tied_embedding;
        layout.embed_group = mesh_pipeline_ends(mesh);
    }

    Schedule *schedule = schedule_by_name(f->schedule, pp, m, v);
    char why[512];
    if (pipe_generated_problem(schedule, f->schedule, pp, m, v, NULL, why, sizeof why))
        die_at(__FILE__, __LINE__, "%s (p %d, m %d, v %d)", why, pp, m, v);
    const PipeStageOps stage_ops = {pipeline_forward, pipeline_backward, pipeline_backward_input,
                                    pipeline_backward_weight, 1, "pipeline_"};

    const int rows = train_micro_batch_rows(&o, dp->size);
    MemLayout ml = parallel_mem_layout(f, layout.split_layers);
    ml.ranks = dp->size;
    ml.rows = rows;
    ml.seq = o.seq;
    ml.pp_rank = mesh->pp_rank;
    ml.schedule = schedule;
    preflight_run(&o, &ml, world);
    /* the loss is on the last stage: metrics span the data-parallel ranks
     * of every stage (one TP rank's copy) */
    Comm *metrics = comm_split(world, mesh->tp_rank, world->rank, "metrics");
    DdpSync ds;
    ddp_sync_init(&ds, dp, &layout, DDP_BUCKETED, 1 << 18, 0);  /* 0.25 MB buckets */
    const int stages = pipe_stages(pp, v, layout.dual);
    if (world->rank == 0) {
        printf("train_pp: pp %d x tp %d x dp %d; schedule %s, %d micro-batches of %d "
               "sequence%s, %d chunk%s per rank: %d stages of %d block%s\n",
               pp, tp, dp->size, f->schedule, m, rows, rows == 1 ? "" : "s", v,
               v == 1 ? "" : "s", stages, o.model.n_layer / stages,
               o.model.n_layer / stages == 1 ? "" : "s");
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
    if (layout.dual_group) comm_free(layout.dual_group);
    mesh_free(mesh);
    comm_finalize();
    return 0;
}
