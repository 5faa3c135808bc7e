/* train_ddp: data-parallel GPT training (lab 02). Every rank runs this; the
 * loop is common/train.c's, the gradient averaging the lab's (ddp.c).
 *   mpirun -np 2 train_ddp --ddp overlapped --bucket-mb 0.25 --config tiny */
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "backward_kernels.h"
#include "check.h"
#include "cli.h"
#include "comm.h"
#include "ddp_sync.h"
#include "mesh.h"
#include "plugins.h"
#include "preflight.h"
#include "train.h"

typedef struct {
    DdpMode mode;
    double bucket_mb;
    double first_bucket_mb; /* 0: not given, the first bucket is like the others */
    int check_every;    /* 0: no consistency check */
    Comm *metrics;
} DdpOptions;

static const ExtraOption g_ddp_options[] = {
    {"ddp", 1, "--ddp MODE           naive | bucketed | overlapped        (default overlapped)"},
    {"bucket-mb", 1, "--bucket-mb X        bucket size in MB (2^20 bytes)       (default 0.25)"},
    {"check-consistency", 1,
     "--check-consistency K  every K steps, check the parameters agree on all ranks"},
    {"first-bucket-mb", 1,
     "--first-bucket-mb X  the first bucket built (the last tensors) in MB (default: --bucket-mb)"},
};
enum { N_DDP_OPTIONS = sizeof g_ddp_options / sizeof g_ddp_options[0] };

static double positive_mb(const char *flag, const char *arg) {
    double mb = cli_double(flag, arg, 0.0, 1e6);
    if (!(mb > 0)) USER_ERROR("%s must be positive, got '%s'", flag, arg);
    return mb;
}

static void on_ddp_option(void *ctx, const char *name, const char *arg) {
    DdpOptions *d = ctx;
    if (!strcmp(name, "ddp")) {
        if (strcmp(arg, "naive") == 0) d->mode = DDP_NAIVE;
        else if (strcmp(arg, "bucketed") == 0) d->mode = DDP_BUCKETED;
        else if (strcmp(arg, "overlapped") == 0) d->mode = DDP_OVERLAPPED;
        else USER_ERROR("--ddp expects naive, bucketed or overlapped, got '%s'", arg);
    } else if (!strcmp(name, "bucket-mb")) {
        d->bucket_mb = positive_mb("--bucket-mb", arg);
    } else if (!strcmp(name, "check-consistency")) {
        d->check_every = (int)cli_int("--check-consistency", arg, 1, 1 << 30);
    } else {
        d->first_bucket_mb = positive_mb("--first-bucket-mb", arg);
    }
}

static void check_consistency(void *ctx, int step, const float *params, size_t n) {
    DdpOptions *d = ctx;
    if (d->check_every && (step + 1) % d->check_every == 0 &&
        !ddp_params_consistent(d->metrics, params, n))
        die_at(__FILE__, __LINE__, "the parameters differ across ranks after step %d", step);
}

int main(int argc, char **argv) {
    program_set_name(argv[0]);
    kernels_set_cpu_backward(program_backward_kernels());
    Comm *world = comm_init(&argc, &argv);
    DdpOptions dopt = {DDP_OVERLAPPED, 0.25, 0, 0, NULL};
    TrainOptions o;
    const TrainProgram program = {
        .lab = "02_ddp",
        .what = "Data-parallel GPT training: every rank trains on its slice of the "
                "batch, gradients are averaged (lab 02).",
        .example_ranks = 4,
        .example = "--ddp bucketed --steps 50",
        .extra = g_ddp_options, .n_extra = N_DDP_OPTIONS, .on_extra = on_ddp_option, .ctx = &dopt,
        PROGRAM_PLUGINS};
    train_options_parse(argc, argv, &o, &program);
    if (dopt.first_bucket_mb > 0 && dopt.mode == DDP_NAIVE)
        USER_ERROR("--first-bucket-mb sizes a bucket: it needs --ddp bucketed or overlapped, "
                   "not naive (one all-reduce per tensor)");

    /* pure data parallelism: the mesh (mesh.h) is all dp, the dp group
     * every rank; the loss sums go over a copy of it (metrics), so that
     * comm.csv tells the gradients' traffic from theirs */
    Mesh *mesh = mesh_create(world, parallel_mesh_degrees(&o.parallel));
    Comm *dp = mesh->dp_group;
    MemLayout layout = {.ranks = dp->size, .rows = train_micro_batch_rows(&o, dp->size), .seq = o.seq};
    preflight_run(&o, &layout, world);
    dopt.metrics = comm_split(dp, 0, dp->rank, "metrics");
    const GPTLayout model = gpt_layout_whole(&o.model);
    DdpSync ds;
    ddp_sync_init(&ds, dp, &model, dopt.mode, (size_t)(dopt.bucket_mb * (1 << 20)),
                  (size_t)(dopt.first_bucket_mb * (1 << 20)));
    int ntensors = ds.ddp.ntensors;
    if (world->rank == 0)
        printf("train_ddp: %s, %d tensors%s", dopt.mode == DDP_NAIVE ? "naive" :
               dopt.mode == DDP_BUCKETED ? "bucketed" : "overlapped", ntensors,
               dopt.mode == DDP_NAIVE ? "\n" : "");
    if (world->rank == 0 && dopt.mode != DDP_NAIVE && dopt.first_bucket_mb > 0)
        printf(" in %d buckets: the first of >= %g MB, the others of >= %g MB\n", ds.ddp.nbuckets,
               dopt.first_bucket_mb, dopt.bucket_mb);
    else if (world->rank == 0 && dopt.mode != DDP_NAIVE)
        printf(" in %d buckets of >= %g MB\n", ds.ddp.nbuckets, dopt.bucket_mb);
    TrainParallel par = {.world = world, .dp = dp, .metrics = dopt.metrics, .sync = &ds.sync,
                         .after_step = check_consistency, .after_step_ctx = &dopt};
    train_run_parallel(&o, &par);
    if (world->rank == 0 && dopt.check_every)
        printf("train_ddp: parameters identical on all %d ranks (checked every %d steps)\n",
               world->size, dopt.check_every);
    ddp_sync_free(&ds);
    mesh_free(mesh);
    comm_finalize();
    return 0;
}
