#include "parallel_flags.h"

#include <string.h>

#include "check.h"
#include "cli.h"
#include "schedule.h"

/* In the order --help lists them; the help lines as the trainers' extra
 * options print theirs (train_options.h) */
const ParallelFlag PARALLEL_FLAGS[PARALLEL_FLAG_COUNT] = {
    {"dp", 1, PAR_DP, "--dp N               data-parallel degree (default: the ranks the "
                      "other degrees leave)"},
    {"tp", 1, PAR_TP, "--tp N               tensor-parallel degree: each block's heads and MLP "
                      "split over N ranks; divides the heads and the ranks (default 1)"},
    {"sp", 0, PAR_SP, "--sp                 sequence parallelism: the rows between the split "
                      "layers split over the TP group (--seq must divide by --tp)"},
    {"recompute", 1, PAR_RECOMPUTE, RECOMPUTE_OPTION_HELP},
    {"pp", 1, PAR_PP, "--pp P               pipeline stages (default 1)"},
    {"schedule", 1, PAR_PP, "--schedule NAME      gpipe | 1f1b | interleaved | zb-h1, or the "
                            "extensions 1f1b-unbatched | dualpipe (train_pp's) (default 1f1b)"},
    {"micro-batches", 1, PAR_PP, "--micro-batches M    micro-batches per step and pipeline "
                                 "(takes --grad-accum's place; default --grad-accum's)"},
    {"chunks", 1, PAR_PP, "--chunks V           model chunks per rank, interleaved only "
                          "(default 2 for interleaved and dualpipe, else 1)"},
    {"cp", 1, PAR_CP, "--cp N               context-parallel degree: ranks sharing each "
                      "sequence (default 1)"},
    {"cp-algo", 1, PAR_CP, "--cp-algo NAME       ring | zigzag | ulysses | striped (the "
                           "extension): how attention crosses the split (default ring)"},
    {"ep", 1, PAR_EP, "--ep N               expert-parallel degree: ranks sharing each MoE "
                      "block's experts; divides the experts and the data-parallel ranks "
                      "(default 1)"},
};

ParallelFlags parallel_flags_default(void) {
    return (ParallelFlags){.tp = 1, .pp = 1, .cp = 1, .ep = 1, .recompute = RECOMPUTE_NONE,
                           .schedule = "1f1b", .cp_algo = CP_RING};
}

/* The one set of bounds: the DP and TP degrees up to 2^16 ranks, the
 * pipeline's stages and the CP and EP degrees up to 2^12 (each needs at
 * least a block, a position, an expert), micro-batches up to 2^16, chunks
 * up to 2^10; the model's own limits are the layout's problems (layout.h) */
void parallel_flags_set(ParallelFlags *f, const char *name, const char *arg) {
    if (!strcmp(name, "dp")) f->dp = cli_int("--dp", arg, 1, 1 << 16);
    else if (!strcmp(name, "tp")) f->tp = cli_int("--tp", arg, 1, 1 << 16);
    else if (!strcmp(name, "sp")) f->sp = 1;
    else if (!strcmp(name, "recompute")) f->recompute = gpt_recompute_parse(arg);
    else if (!strcmp(name, "pp")) f->pp = cli_int("--pp", arg, 1, 1 << 12);
    else if (!strcmp(name, "schedule")) {
        cli_string(f->schedule, sizeof f->schedule, "--schedule", arg);
        f->schedule_given = 1;
    } else if (!strcmp(name, "micro-batches")) {
        f->micro_batches = cli_int("--micro-batches", arg, 1, 1 << 16);
    } else if (!strcmp(name, "chunks")) {
        f->chunks = cli_int("--chunks", arg, 1, 1 << 10);
    } else if (!strcmp(name, "cp")) {
        f->cp = cli_int("--cp", arg, 1, 1 << 12);
    } else if (!strcmp(name, "cp-algo")) {
        f->cp_algo = gpt_cp_algo_parse(arg);
    } else {
        CHECK(!strcmp(name, "ep"), "--%s is no parallel flag", name);
        f->ep = cli_int("--ep", arg, 1, 1 << 12);
    }
}

MeshDegrees parallel_mesh_degrees(const ParallelFlags *f) {
    return (MeshDegrees){.tp = f->tp, .cp = f->cp, .dp = f->dp, .pp = f->pp, .ep = f->ep};
}

GPTLayout parallel_layout(const ParallelFlags *f, const GPTConfig *cfg, const Mesh *mesh) {
    GPTLayout l = gpt_layout_make(cfg, f->tp, mesh->tp_rank);
    l.tp_group = mesh->tp_group;
    l.split_layers = f->tp > 1;
    l.sp = f->sp;
    l.recompute = f->recompute;
    if (f->exposed & PAR_PP) {
        if (pipe_schedule_dual(f->schedule))
            gpt_layout_set_dual_pipeline(&l, f->pp, mesh->pp_rank);
        else
            gpt_layout_set_pipeline(&l, f->pp, mesh->pp_rank, f->chunks);
        l.pp_group = mesh->pp_group;
    }
    if (f->exposed & PAR_CP) {
        gpt_layout_set_context(&l, f->cp, mesh->cp_rank, f->cp_algo);
        l.cp_group = mesh->cp_group;
    }
    if ((f->exposed & PAR_EP) && cfg->n_experts > 0) {
        gpt_layout_set_experts(&l, f->ep, mesh->ep_rank);
        l.ep_group = mesh->ep_group;
    }
    return l;
}

MemLayout parallel_mem_layout(const ParallelFlags *f, int split_layers) {
    return (MemLayout){.tp = split_layers ? f->tp : 0, .sp = f->sp, .recompute = f->recompute,
                       .pp = f->pp, .chunks = f->chunks,
                       .dual = pipe_schedule_dual(f->schedule), .cp = f->cp, .cp_algo = f->cp_algo,
                       .ep = f->ep};
}
