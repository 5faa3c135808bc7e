/* train_zero: GPT training with ZeRO-sharded model states (lab 03). Every
 * rank runs this; the loop is common/train.c's, the states the lab's
 * (zero.c). At the end rank 0 prints the memory planner's prediction
 * (memplan.h) next to what it measured.
 *   mpirun -np 4 train_zero --zero 3 --config tiny
 *   mpirun -np 2 train_zero --zero 2 --overlap-rs     (the extension: zero_rs_* in zero.h)
 *   mpirun -np 4 train_zero --zero 3 --dp-shard 2     (the second: zero_hsdp_* in zero.h)
 *   mpirun -np 2 train_zero --zero 2 --offload        (the third: zero_offload_* in zero.h) */
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "backward_kernels.h"
#include "check.h"
#include "cli.h"
#include "comm.h"
#include "device.h"
#include "memplan.h"
#include "mesh.h"
#include "plugins.h"
#include "preflight.h"
#include "train.h"
#include "zero.h"
#include "zero_scaled.h"
#ifdef WITH_LAB05
#include "act_layers.h"
#endif

typedef struct {
    int stage, prefetch, overlap_rs;
    int shard_ranks;  /* --dp-shard K; 0: every data-parallel rank (no replicas) */
    int offload;      /* --offload: the optimizer on the host (ZeRO-Offload) */
    int qwz, hpz, qgz; /* ZeRO++: --qwz; --hpz K, --qgz K: K ranks per node (0: off) */
} ZeroOptions;

static const ExtraOption g_zero_options[] = {
    {"zero", 1, "--zero STAGE         1 | 2 | 3: shard moments / + gradients / + parameters (default 1)"},
    {"no-prefetch", 0, "--no-prefetch        ZeRO-3: gather each unit only when it is needed"},
    {"overlap-rs", 0, "--overlap-rs         ZeRO-2/3: reduce-scatter behind the backward pass (the extension)"},
    {"dp-shard", 1, "--dp-shard K         hybrid sharding: shard over groups of K consecutive ranks, "
                    "replicate across the groups (the second extension; default: all ranks)"},
    {"offload", 0, "--offload            ZeRO-2/3: master weights and moments in host memory, AdamW on "
                   "the CPU (ZeRO-Offload, the third extension)"},
    {"qwz", 0, "--qwz                ZeRO++ (ZeRO-3, fp32): the parameters' all-gathers in blockwise "
               "int8 (the fourth extension)"},
    {"hpz", 1, "--hpz K              ZeRO++: a secondary copy of each gathered unit over each node of K "
               "consecutive ranks; the backward gathers inside the node"},
    {"qgz", 1, "--qgz K              ZeRO++: the gradients through int8 all-to-alls, inside each node "
               "of K consecutive ranks, then across the nodes"},
};
enum { N_ZERO_OPTIONS = sizeof g_zero_options / sizeof g_zero_options[0] };

static void on_zero_option(void *ctx, const char *name, const char *arg) {
    ZeroOptions *z = ctx;
    if (!strcmp(name, "zero")) {
        if (strcmp(arg, "1") && strcmp(arg, "2") && strcmp(arg, "3"))
            USER_ERROR("--zero expects 1, 2 or 3, got '%s' (replicated states are lab 02's "
                       "train_ddp)", arg);
        z->stage = arg[0] - '0';
    } else if (!strcmp(name, "no-prefetch")) {
        z->prefetch = 0;
    } else if (!strcmp(name, "offload")) {
        z->offload = 1;
    } else if (!strcmp(name, "dp-shard")) {
        z->shard_ranks = (int)cli_int("--dp-shard", arg, 1, 1 << 20);
    } else if (!strcmp(name, "qwz")) {
        z->qwz = 1;
    } else if (!strcmp(name, "hpz")) {
        z->hpz = (int)cli_int("--hpz", arg, 1, 1 << 20);
    } else if (!strcmp(name, "qgz")) {
        z->qgz = (int)cli_int("--qgz", arg, 1, 1 << 20);
    } else {
        z->overlap_rs = 1;
    }
}

/* ZeRO++'s: ZeRO-3 in fp32 on its own, one node size dividing N */
static void check_zeropp_options(const ZeroOptions *zo, int N, int precision) {
    if (!zo->qwz && !zo->hpz && !zo->qgz) return;
    if (zo->stage != 3 || precision != PRECISION_FP32 || zo->overlap_rs || zo->offload ||
        zo->shard_ranks)
        USER_ERROR("--qwz, --hpz and --qgz (ZeRO++) need --zero 3 in fp32, without --overlap-rs, "
                   "--offload or --dp-shard (they quantize fp32 parameters and gradients, and "
                   "replace ZeRO-3's own collectives)");
    if (zo->hpz && zo->qgz && zo->hpz != zo->qgz)
        USER_ERROR("--hpz %d and --qgz %d: both name the ranks of one node; give the same K",
                   zo->hpz, zo->qgz);
    const int K = zo->hpz ? zo->hpz : zo->qgz;
    if (K && N % K)
        USER_ERROR("--%s %d does not divide the %d ranks into nodes", zo->hpz ? "hpz" : "qgz", K,
                   N);
}

/* The combinations the lab's options do not allow: one error line. Returns
 * whether the run shards over groups of some of the N ranks (hybrid). */
static int check_zero_options(const ZeroOptions *zo, int N) {
    if (zo->overlap_rs && zo->stage < 2)
        USER_ERROR("--overlap-rs needs --zero 2 or 3 (ZeRO-%d reduce-scatters after the backward "
                   "pass, with nothing left to overlap)", zo->stage);
    if (zo->shard_ranks && N % zo->shard_ranks)
        USER_ERROR("--dp-shard %d does not divide the %d ranks into shard groups", zo->shard_ranks,
                   N);
    const int hybrid = zo->shard_ranks && zo->shard_ranks < N;
    if (zo->offload && (zo->stage < 2 || zo->overlap_rs || hybrid))
        USER_ERROR("--offload needs --zero 2 or 3, without --overlap-rs or --dp-shard (it copies "
                   "each unit's gradient shard once its last reduce-scatter is done)");
    return hybrid;
}

/* The lab's states, and fp16's loss scale around them (zero_scaled.h).
 * z comes first: the callbacks below take the run as the Zero it starts
 * with. */
typedef struct {
    Zero z;
    ZeroScaled scaled;
} ZeroRun;

/* ModelStates and ModelHooks (train.h, model.h) on top of the lab's functions */
static void begin_step(void *ctx) { zero_begin_step(ctx); }
/* ZeRO-Offload copies the gradient shards during the last micro-batch's pass */
static void begin_backward(void *ctx, int last) { ((Zero *)ctx)->last_micro = last; }
static double finish_grads(void *ctx, int micro) {
    ZeroRun *r = ctx;
    return zero_scaled_finish(&r->scaled, &r->z, zero_finish_grads(&r->z, micro));
}
static void update(void *ctx, const AdamWStep *s) {
    ZeroRun *r = ctx;
    zero_scaled_update(&r->scaled, &r->z, s);
}
static void gather_params(void *ctx, float *out) { zero_gather_params(ctx, out); }
/* ZeRO-3 gathers each unit (the lab's); ZeRO-1/2 read the whole copy, in
 * mixed precision widened a unit at a time (zero_view_params) */
static void params_needed(void *ctx, int u, int backward) {
    Zero *z = ctx;
    if (z->stage == 3) zero3_params_needed(z, u, backward);
    else if (z->dtype != COMM_FLOAT)
        zero_view_params(z, u, comm_at(z->params_full, z->dtype, z->units[u].padded_offset));
}
static void params_done(void *ctx, int u, int backward) {
    (void)backward;
    Zero *z = ctx;
    zero_unview_params(z, u);
    if (z->stage == 3) zero3_params_done(z, u);
}
/* This rank's copy of the parameters, as its forward pass reads them:
 * ZeRO-1/2 keep them whole on every rank after the update's all-gather, so
 * a rank whose all-gather went wrong holds a different model; ZeRO-3 keeps
 * only shards, and every rank gathers each unit through the lab's own
 * gather (zero3_params_needed), as a forward pass would. */
static void local_params(void *ctx, float *out) {
    Zero *z = ctx;
    for (int u = 0; u < z->nunits; u++) {
        const ZeroUnit *x = &z->units[u];
        /* the view's first tensor of the unit: where the pass reads it */
        params_needed(z, u, 0);
        const float *unit = u == GPT_UNIT_EMBED ? z->p.wte
                          : u == z->nunits - 1 ? z->p.lnfw : z->p.blocks[u - 1].ln1w;
        device_copy(out + x->offset, unit, x->count * sizeof(float));
        params_done(z, u, 0);
    }
}
static void held(void *ctx, CkptHeld *h) { zero_held(ctx, h); }
static void loaded(void *ctx) { zero_loaded(ctx); }

/* ZeRO-2/3 reduce-scatter each unit (the lab's); ZeRO-1 with 2-byte
 * gradients accumulates a unit at a time in fp32 (zero_view_grads) */
static void grads_begin(void *ctx, int u) {
    Zero *z = ctx;
    if (z->stage >= 2) zero_grads_begin(z, u);
    else zero_view_grads(z, u);
}
static void grads_ready(void *ctx, int u) {
    Zero *z = ctx;
    if (z->stage >= 2) zero_grads_ready(z, u);
    else zero_unview_grads(z, u);
}

int main(int argc, char **argv) {
    program_set_name(argv[0]);
    kernels_set_cpu_backward(program_backward_kernels());
    Comm *world = comm_init(&argc, &argv);
    ZeroOptions zo = {.stage = 1, .prefetch = 1};
    TrainOptions o;
#ifdef WITH_LAB05
    const unsigned dims = PAR_RECOMPUTE;
    const char *lab = "05_activation_memory",
               *what = "GPT training with ZeRO (lab 03) and lab 05's activation recomputation: "
                       "optimizer states, gradients and parameters sharded over the "
                       "data-parallel ranks.";
#else
    const unsigned dims = 0;
    const char *lab = "03_zero",
               *what = "GPT training with ZeRO: optimizer states, gradients and parameters "
                       "sharded over the data-parallel ranks (lab 03).";
#endif
    const TrainProgram program = {
        .lab = lab,
        .what = what,
        .example_ranks = 4,
        .example = "--zero 3 --steps 50",
        .parallel = dims,
        .extra = g_zero_options, .n_extra = N_ZERO_OPTIONS, .on_extra = on_zero_option, .ctx = &zo,
        PROGRAM_PLUGINS};
    train_options_parse(argc, argv, &o, &program);
    const int hybrid = check_zero_options(&zo, world->size);
    check_zeropp_options(&zo, world->size, o.model.precision);
    if (!zo.prefetch && zo.stage != 3 && world->rank == 0)
        printf("train_zero: --no-prefetch has no effect below ZeRO-3\n");

    /* the mesh (mesh.h) is all dp; with hybrid sharding ZeRO's group is
     * this rank's shard group (zero_hsdp_groups). metrics: a copy of dp for
     * the loss sums, norm one of ZeRO's group for the gradient norm's */
    Mesh *mesh = mesh_create(world, parallel_mesh_degrees(&o.parallel));
    Comm *dp = mesh->dp_group, *shard = dp, *replicate = NULL;
    if (hybrid) zero_hsdp_groups(dp, zo.shard_ranks, &shard, &replicate);
    MemLayout layout = {.zero_stage = zo.stage, .ranks = shard->size, .prefetch = zo.prefetch,
                        .offload = zo.offload,
                        .rows = train_micro_batch_rows(&o, dp->size), .seq = o.seq,
                        .overlap_rs = zo.overlap_rs, .recompute = o.parallel.recompute,
                        .qwz = zo.qwz, .hpz = zo.hpz, .qgz = zo.qgz};
    preflight_run(&o, &layout, world);
    Comm *metrics = comm_split(dp, 0, dp->rank, "metrics");
    Comm *norm = hybrid ? comm_split(shard, 0, shard->rank, "norm") : metrics;
    ZeroRun run;
    Zero *z = &run.z;
    zero_scaled_init(&run.scaled, &o, world);
    GPTLayout model = gpt_layout_whole(&o.model);
#ifdef WITH_LAB05
    /* lab 05's recomputations, as the model calls them (act_layers.h) */
    model.recompute = o.parallel.recompute;
    model.recompute_ops = &recompute_layers;
#endif
    zero_init(z, zo.stage, zo.stage == 3 && zo.prefetch, zo.offload, shard, norm, &model, o.seed);
    z->overlap_rs = zo.overlap_rs;
    z->replicate = replicate;
    /* ZeRO++: nodes of K consecutive ranks (mesh.h: consecutive ranks
     * share a node), and the ranks of one index across them */
    const int node_ranks = zo.hpz ? zo.hpz : zo.qgz;
    z->qwz = zo.qwz;
    z->hpz = zo.hpz > 0;
    z->qgz = zo.qgz > 0;
    if (node_ranks) {
        z->node = comm_split(dp, dp->rank / node_ranks, dp->rank % node_ranks, "node");
        z->across = comm_split(dp, dp->rank % node_ranks, dp->rank / node_ranks, "across");
    }
    ModelHooks hooks = {.ctx = z, .loss_scale = zero_scaled_scale(&run.scaled)};
    if (zo.stage >= 2 || z->grad_dtype != COMM_FLOAT) {
        hooks.grads_begin = grads_begin;
        hooks.grads_ready = grads_ready;
    }
    if (zo.stage == 3 || z->dtype != COMM_FLOAT) {
        hooks.params_needed = params_needed;
        hooks.params_done = params_done;
    }
    ModelStates states = {&run, &z->p, &z->g, &hooks, begin_step, begin_backward, finish_grads,
                          update, gather_params, local_params, held, z->master ? loaded : NULL,
                          zero_scaled_scaler(&run.scaled)};
    size_t phi = gpt_num_params(&o.model);
    if (world->rank == 0)
        printf("train_zero: ZeRO-%d%s%s over %d rank%s, %d units, %zu parameters padded to %zu "
               "(%zu padding), %zu per rank\n",
               zo.stage, zo.stage == 3 ? (z->prefetch ? " with prefetch" : " without prefetch") : "",
               z->overlap_rs ? " (reduce-scatter behind the backward pass)"
               : z->offload ? " (optimizer offloaded to the host)" : "", shard->size,
               shard->size == 1 ? "" : "s", z->nunits, phi, z->padded_total, z->padded_total - phi,
               z->shard_total);
    if ((zo.qwz || node_ranks) && world->rank == 0)
        printf("train_zero: ZeRO++: %s%s%s%s%s (nodes of %d ranks)\n", zo.qwz ? "qwZ int8 gathers" : "",
               zo.qwz && zo.hpz ? ", " : "", zo.hpz ? "hpZ secondary copies" : "",
               (zo.qwz || zo.hpz) && zo.qgz ? ", " : "", zo.qgz ? "qgZ int8 all-to-alls" : "",
               node_ranks ? node_ranks : dp->size);
    if (hybrid && world->rank == 0)
        printf("train_zero: hybrid sharding: %d shard groups of %d consecutive ranks, each shard "
               "replicated %d times\n", dp->size / shard->size, shard->size, replicate->size);
    TrainParallel par = {.world = world, .dp = dp, .metrics = metrics, .states = &states,
                         .layout = &model};
    train_run_parallel(&o, &par);
    if (world->rank == 0)
        memplan_print_check("train_zero", &o.model, &layout, train_steps_run(&o));
    zero_free(z);
    zero_scaled_free(&run.scaled);
    if (z->node) comm_free(z->node);
    if (z->across) comm_free(z->across);

    mesh_free(mesh);
    comm_finalize();
    return 0;
}
