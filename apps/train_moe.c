/* train_moe: expert-parallel training of a mixture of experts (lab 08),
 * over data parallelism, with tensor parallelism for the dense parts. The
 * loop is common/train.c's; each data-parallel rank takes its rows of the
 * batch, and the ep ranks of an expert-parallel group (mesh.h: ep
 * consecutive DP ranks of one tp_rank) hold E / ep experts each of every
 * MoE block (layout.h), the model's MoE branch calling the lab's exchange
 * (expert_parallel.c) through the layout (model.h ExpertParallelOps).
 * Under --tp the attention and the dense MLPs run lab 04's split layers
 * and the experts stay whole on every TP rank. Gradients: the tensors
 * every EP rank holds averaged over DP, the experts' over the ranks that
 * hold the same experts (ep_sync_grads).
 *   mpirun -np 2 train_moe --config tiny-moe --ep 2
 *   mpirun -np 4 train_moe --config tiny-moe --ep 2     (ep 2 x edp 2)
 *   mpirun -np 4 train_moe --config tiny-moe --ep 2 --tp 2
 *   mpirun -np 2 train_moe --config tiny-moe --ep 2 --ep-overlap   (the extension)
 * Besides the loop's outputs, from rank 0: its EP and TP traffic against
 * the formulas, and the memory against the planner's. */
#include <stdio.h>

#include "backward_kernels.h"
#include "check.h"
#include "comm.h"
#include "ep_sync.h"
#include "expert_parallel.h"
#include "memplan.h"
#include "mesh.h"
#include "plugins.h"
#include "preflight.h"
#include "tp_layers.h"
#include "train.h"

static const ExtraOption g_moe_options[] = {
    {"ep-overlap", 0, "--ep-overlap         the forward's row exchange as point-to-point messages "
                      "behind the experts (ep_moe_forward_overlapped, the extension)"},
};
enum { N_MOE_OPTIONS = sizeof g_moe_options / sizeof g_moe_options[0] };

static void on_moe_option(void *ctx, const char *name, const char *arg) {
    (void)name, (void)arg;  /* --ep-overlap, the only one */
    *(int *)ctx = 1;
}

/* Rank 0's EP traffic (comm.csv's ep group) against the formulas. Per MoE
 * block, a forward pass makes one all-to-all of the E / ep counts per peer
 * (E ints sent) and two all-to-all-v's of rows (dispatch: its A kept rows;
 * return: the R rows its experts received), a backward pass two more (d eo
 * out, d xd back): b C (A + R) bytes per pass, b the rows' bytes per
 * element (comm_act_dtype: 4, or 2 in mixed precision). A and R depend on the
 * routing; they are at most A_max and R_max (moe.h). Overlapped, the
 * forward's two all-to-all-v's are 2 (ep - 1) sends and as many receives
 * (expert_parallel.h), the same rows less the own block's. */
static void print_traffic(const TrainOptions *o, const GPTLayout *l, const Comm *ep, int rows,
                          int overlapped) {
    if (l->ep == 1) {  /* every expert here: the MoE blocks exchange nothing */
        printf("train_moe: ep 1: no EP all-to-alls (%llu calls)\n",
               (unsigned long long)(comm_op_stats(ep, OP_ALLTOALL).calls +
                                     comm_op_stats(ep, OP_ALLTOALLV).calls));
        return;
    }
    const size_t blocks = (size_t)gpt_num_moe_blocks(&o->model);
    const size_t passes = train_forward_passes(o), backwards = (size_t)o->grad_accum * train_steps_run(o);
    MoEShape s;
    const GPTConfig *c = &o->model;
    moe_shape_init(&s, rows * o->seq, o->seq, c->n_embd, c->n_experts, c->top_k,
                   c->capacity_factor, c->aux_loss_coef);
    moe_shape_set_ep(&s, l->ep);
    const CommOpStats counts = comm_op_stats(ep, OP_ALLTOALL), moved = comm_op_stats(ep, OP_ALLTOALLV);
    const size_t count_calls = blocks * passes, count_bytes = count_calls * c->n_experts * 4;
    const size_t row_bound = blocks * (passes + backwards) * (size_t)c->n_embd *
                             comm_wire_size(comm_act_dtype(c->precision)) * (s.A_max + s.R_max);
    printf("train_moe: EP counts all-to-alls on rank 0, predicted vs measured: %zu calls %zu "
           "bytes vs %llu calls %llu bytes  %s\n", count_calls, count_bytes,
           (unsigned long long)counts.calls, (unsigned long long)counts.bytes,
           counts.calls == count_calls && counts.bytes == count_bytes ? "ok" : "DIFFERENT");
    if (overlapped) {
        const size_t row_calls = 2 * blocks * backwards;
        const size_t messages = 2 * (size_t)(l->ep - 1) * blocks * passes;
        const CommOpStats sent = comm_op_stats(ep, OP_SEND), received = comm_op_stats(ep, OP_RECV);
        const unsigned long long bytes = moved.bytes + sent.bytes;
        printf("train_moe: EP rows on rank 0 (overlapped forward): %zu all-to-all-v's, %zu sends, "
               "%zu receives, at most %zu bytes (A_max %d + R_max %d rows a pass) vs %llu, %llu, "
               "%llu, %llu bytes (%.0f per step)  %s\n", row_calls, messages, messages, row_bound,
               s.A_max, s.R_max, (unsigned long long)moved.calls,
               (unsigned long long)sent.calls, (unsigned long long)received.calls, bytes,
               (double)bytes / train_steps_run(o),
               moved.calls == row_calls && sent.calls == messages &&
               received.calls == messages && bytes <= row_bound ? "ok" : "DIFFERENT");
        return;
    }
    const size_t row_calls = 2 * blocks * (passes + backwards);
    printf("train_moe: EP row all-to-all-v's on rank 0: %zu calls, at most %zu bytes (A_max %d + "
           "R_max %d rows a pass) vs %llu calls %llu bytes (%.0f per step)  %s\n", row_calls,
           row_bound, s.A_max, s.R_max, (unsigned long long)moved.calls,
           (unsigned long long)moved.bytes, (double)moved.bytes / train_steps_run(o),
           moved.calls == row_calls && moved.bytes <= row_bound ? "ok" : "DIFFERENT");
}

int main(int argc, char **argv) {
    program_set_name(argv[0]);
    kernels_set_cpu_backward(program_backward_kernels());
    Comm *world = comm_init(&argc, &argv);
    int overlap = 0;  /* --ep-overlap */
    TrainOptions o;
    const TrainProgram program = {
        .lab = "08_moe",
        .what = "Expert-parallel training of a mixture of experts (lab 08): each "
                "MoE block's experts split over --ep ranks, tokens sent to their "
                "experts' ranks and back by all-to-alls; tensor parallelism for "
                "the dense parts (--tp), data parallelism over the rest.",
        .example_ranks = 4,
        .example = "--experts 4 --ep 2 --steps 50",
        .parallel = PAR_EP | PAR_TP,
        .extra = g_moe_options, .n_extra = N_MOE_OPTIONS, .on_extra = on_moe_option, .ctx = &overlap,
        PROGRAM_PLUGINS};
    train_options_parse(argc, argv, &o, &program);
    const ParallelFlags *f = &o.parallel;
    const int ep = f->ep, tp = f->tp;
    if (o.model.n_experts == 0)
        USER_ERROR("train_moe trains a mixture of experts: --config tiny-moe, or --experts E");
    const char *why = gpt_expert_problem(&o.model, ep);
    if (!why) why = gpt_layout_problem(&o.model, tp);
    if (why) USER_ERROR("%s", why);
    if (overlap && ep == 1)
        USER_ERROR("--ep-overlap needs --ep 2 or more (at --ep 1 every expert is local: there is "
                   "no exchange to overlap)");
    /* ranks = tp x dp; ep must divide dp (mesh.h: a user error) */
    Mesh *mesh = mesh_create(world, parallel_mesh_degrees(f));
    GPTLayout layout = parallel_layout(f, &o.model, mesh);
    if (layout.split_layers) layout.tp_ops = &tp_layers;  /* lab 04's (tp_layers.h) */
    const ExpertParallelOps lab_ops = {overlap ? ep_moe_forward_overlapped : ep_moe_forward,
                                       ep_moe_backward};
    layout.ep_ops = &lab_ops;

    Comm *dp = mesh->dp_group;
    const int rows = train_micro_batch_rows(&o, dp->size);
    MemLayout ml = parallel_mem_layout(f, layout.split_layers);
    ml.ranks = dp->size;
    ml.rows = rows;
    ml.seq = o.seq;
    ml.ep_overlap = overlap;
    comm_wire_reserve(mesh->ep_group, gpt_ep_wire_elements(&layout, rows, o.seq, overlap));
    preflight_run(&o, &ml, world);
    /* a separate communicator for the losses, so that comm.csv's dp traffic
     * is the gradients' alone */
    Comm *metrics = comm_split(dp, 0, dp->rank, "metrics");
    EpSync es;
    ep_sync_init(&es, &layout, dp, mesh->edp_group);
    if (world->rank == 0)
        printf("train_moe: tp %d x (ep %d x edp %d = dp %d); %d of %d experts per rank in each "
               "of %d MoE blocks, %d of %d heads, %zu of %zu parameters\n", tp, ep,
               mesh->edp_group->size, dp->size, gpt_local_experts(&layout), o.model.n_experts,
               gpt_num_moe_blocks(&o.model), layout.n_head, o.model.n_head, layout.num_params,
               gpt_num_params(&o.model));
    TrainParallel par = {.world = world, .dp = dp, .metrics = metrics, .sync = &es.sync,
                         .layout = &layout};
    train_run_parallel(&o, &par);

    if (world->rank == 0) {
        print_traffic(&o, &layout, mesh->ep_group, rows, overlap);
        train_print_tp_traffic("train_moe", &o, &ml, mesh->tp_group, 0);
        memplan_print_check("train_moe", &o.model, &ml, train_steps_run(&o));
    }
    ep_sync_free(&es);
    mesh_free(mesh);
    comm_finalize();
    return 0;
}
