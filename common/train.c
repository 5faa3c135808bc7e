#include "train.h"

#include <getopt.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "comm.h"
#include "fileio.h"
#include "check.h"
#include "cli.h"
#include "dataloader.h"
#include "device.h"
#include "kernels.h"
#include "pipe_exec.h"
#include "preflight.h"
#include "profile.h"
#include "runlog.h"
#include "tokens.h"
#include "trace.h"

static const char *const g_usage =
    "  --config NAME        tiny | small | medium | gpt2-124m   (default tiny)\n"
    "  --data FILE          token file                (default build/data/synth.tok)\n"
    "  --out DIR            run directory                (default runs/LAB-CONFIG)\n"
    "  --steps N            optimizer steps                             (default 200)\n"
    "  --batch B            sequences per step, all ranks  (default: tiny 8, small 16, gpt2 8)\n"
    "  --grad-accum K       micro-batches per rank and step               (default 1)\n"
    "  --dump-params FILE   write the final parameters (raw float32) to FILE\n"
    "  --save DIR           checkpoints into DIR/step-NNNNNN (checkpoint.h): at the end,\n"
    "                       and every --save-every K steps; --keep K keeps the newest K\n"
    "                       of this run's lineage (default all); --save-async writes them\n"
    "                       in the background, committed at the next save or the end.\n"
    "                       DIR holds one lineage: a fresh run refuses a DIR of\n"
    "                       checkpoints; a rewind moves the later ones to DIR/abandoned-N\n"
    "  --resume PATH        continue from a checkpoint, or DIR's newest; any layout\n"
    "                       of the same model and --seed (--steps stays the total)\n"
    "  --seq T              tokens per sequence, <= ctx  (default: the config's ctx)\n"
    "  --lr X               peak learning rate                         (default 1e-3)\n"
    "  --min-lr-frac X      cosine floor as a fraction of --lr          (default 0.1)\n"
    "  --warmup N           linear warmup steps                (default min(10, steps))\n"
    "  --weight-decay X     AdamW decoupled decay, all parameters        (default 0.1)\n"
    "  --beta1 X --beta2 X --eps X   AdamW                (default 0.9, 0.95, 1e-8)\n"
    "  --grad-clip X        clip the global grad norm; 0 = off           (default 1.0)\n"
    "  --seed N             init and data seed                            (default 1)\n"
    "  --eval-every K       held-out loss every K steps; 0 = only last   (default 50)\n"
    "  --eval-batches N     batches per held-out evaluation              (default 4)\n"
    "  --val-fraction X     tail of the token file held out              (default 0.1)\n"
    "  --progress MODE      rank 0's console: lines (one every --log-every steps, with an\n"
    "                       ETA), bar (one line redrawn in place), or auto: the bar when\n"
    "                       stdout is a terminal (under mpirun: mpirun's stdout), else\n"
    "                       lines                                        (default auto)\n"
    "  --log-every N        --progress lines: a line every N steps, the first, the last\n"
    "                       and those with a held-out loss               (default 10)\n"
    "  --threads N          OpenMP/BLAS threads (default: OMP_NUM_THREADS or all cores)\n"
    "  --profile            time every kernel of the training steps after the first:\n"
    "                       a table of time, FLOPs, bytes and roofline bound, and\n"
    "                       OUT/profile.csv (tools/plot_roofline.sh draws it)\n"
    "  --device cpu|cuda    where to compute; cuda needs `make CUDA=1`     (default cpu)\n"
    COMM_TIMEOUT_HELP
    "  --n-layer L --n-head H --n-embd C --ctx T --vocab V   override the named config\n"
    "  --experts E          a mixture of experts (lab 08): E expert MLPs in every\n"
    "                       --moe-every n-th block; 0 = dense   (default: the config's)\n"
    "  --top-k K --capacity-factor F --aux-loss-coef A --moe-every N   the experts' routing:\n"
    "                       K experts per token (default 1), F (0 = dropless; 1.25),\n"
    "                       the load-balancing loss's weight (0.01), MoE blocks (every 1)\n"
    "  -h, --help           this text\n";

enum {
    OPT_CONFIG = 1000, OPT_DATA, OPT_OUT, OPT_STEPS, OPT_BATCH, OPT_SEQ, OPT_LR, OPT_MIN_LR,
    OPT_WARMUP, OPT_WD, OPT_BETA1, OPT_BETA2, OPT_EPS, OPT_CLIP, OPT_SEED, OPT_EVAL_EVERY,
    OPT_EVAL_BATCHES, OPT_VAL_FRACTION, OPT_LOG_EVERY, OPT_THREADS, OPT_DEVICE, OPT_N_LAYER,
    OPT_N_HEAD, OPT_N_EMBD, OPT_CTX, OPT_VOCAB, OPT_EXPERTS, OPT_TOP_K, OPT_CAPACITY, OPT_AUX,
    OPT_MOE_EVERY, OPT_GRAD_ACCUM, OPT_DUMP_PARAMS, OPT_SAVE, OPT_SAVE_EVERY, OPT_KEEP,
    OPT_SAVE_ASYNC, OPT_PROGRESS,
    OPT_RESUME, OPT_COMM_TIMEOUT, OPT_PROFILE, OPT_EXTRA  /* OPT_EXTRA + i: extra[i] */
};

/* A checkpoint flag given to a program built without checkpoint ops: one
 * clear error naming the flag (the first of them checked here) */
static void refuse_checkpoints_without_ops(const TrainOptions *o, const TrainProgram *p) {
    if (p->checkpoints) return;
    const char *flag = o->save[0] ? "--save" : o->resume[0] ? "--resume"
                       : o->save_every ? "--save-every" : o->keep ? "--keep"
                       : o->save_async ? "--save-async" : NULL;
    if (flag) USER_ERROR("%s: this build has no checkpoints: %s", flag, p->no_checkpoints);
}

void train_options_parse(int argc, char **argv, TrainOptions *o, const TrainProgram *p) {
    const ExtraOption *extra = p->extra;
    const int n_extra = p->n_extra;
    static const struct option common_opts[] = {
        {"config", required_argument, 0, OPT_CONFIG}, {"data", required_argument, 0, OPT_DATA},
        {"out", required_argument, 0, OPT_OUT}, {"steps", required_argument, 0, OPT_STEPS},
        {"batch", required_argument, 0, OPT_BATCH}, {"seq", required_argument, 0, OPT_SEQ},
        {"lr", required_argument, 0, OPT_LR}, {"min-lr-frac", required_argument, 0, OPT_MIN_LR},
        {"warmup", required_argument, 0, OPT_WARMUP},
        {"weight-decay", required_argument, 0, OPT_WD},
        {"beta1", required_argument, 0, OPT_BETA1}, {"beta2", required_argument, 0, OPT_BETA2},
        {"eps", required_argument, 0, OPT_EPS}, {"grad-clip", required_argument, 0, OPT_CLIP},
        {"seed", required_argument, 0, OPT_SEED},
        {"eval-every", required_argument, 0, OPT_EVAL_EVERY},
        {"eval-batches", required_argument, 0, OPT_EVAL_BATCHES},
        {"val-fraction", required_argument, 0, OPT_VAL_FRACTION},
        {"log-every", required_argument, 0, OPT_LOG_EVERY},
        {"progress", required_argument, 0, OPT_PROGRESS},
        {"threads", required_argument, 0, OPT_THREADS},
        {"device", required_argument, 0, OPT_DEVICE},
        {"n-layer", required_argument, 0, OPT_N_LAYER},
        {"n-head", required_argument, 0, OPT_N_HEAD},
        {"n-embd", required_argument, 0, OPT_N_EMBD}, {"ctx", required_argument, 0, OPT_CTX},
        {"vocab", required_argument, 0, OPT_VOCAB},
        {"experts", required_argument, 0, OPT_EXPERTS},
        {"top-k", required_argument, 0, OPT_TOP_K},
        {"capacity-factor", required_argument, 0, OPT_CAPACITY},
        {"aux-loss-coef", required_argument, 0, OPT_AUX},
        {"moe-every", required_argument, 0, OPT_MOE_EVERY},
        {"grad-accum", required_argument, 0, OPT_GRAD_ACCUM},
        {"dump-params", required_argument, 0, OPT_DUMP_PARAMS},
        {"save", required_argument, 0, OPT_SAVE},
        {"save-every", required_argument, 0, OPT_SAVE_EVERY},
        {"keep", required_argument, 0, OPT_KEEP},
        {"save-async", no_argument, 0, OPT_SAVE_ASYNC},
        {"resume", required_argument, 0, OPT_RESUME},
        {"comm-timeout", required_argument, 0, OPT_COMM_TIMEOUT},
        {"profile", no_argument, 0, OPT_PROFILE},
        {"help", no_argument, 0, 'h'}};
    enum { N_COMMON = sizeof common_opts / sizeof *common_opts, MAX_EXTRA = 16 };
    CHECK(n_extra <= MAX_EXTRA, "too many extra options (%d)", n_extra);
    struct option long_opts[N_COMMON + MAX_EXTRA + 1];
    memcpy(long_opts, common_opts, sizeof common_opts);
    for (int i = 0; i < n_extra; i++)
        long_opts[N_COMMON + i] = (struct option){extra[i].name, extra[i].has_arg ? required_argument
                                                                                  : no_argument,
                                                  0, OPT_EXTRA + i};
    long_opts[N_COMMON + n_extra] = (struct option){0, 0, 0, 0};
    memset(o, 0, sizeof *o);
    snprintf(o->lab, sizeof o->lab, "%s", p->lab);
    o->checkpoints = p->checkpoints;
    o->grad_accum = 1;
    snprintf(o->config_name, sizeof o->config_name, "tiny");
    snprintf(o->data_path, sizeof o->data_path, "build/data/synth.tok");
    snprintf(o->device, sizeof o->device, "cpu");
    o->steps = 200;
    o->lr = 1e-3;
    o->min_lr_frac = 0.1;
    o->warmup = -1;  /* default: min(10, steps) */
    o->weight_decay = 0.1;
    o->beta1 = 0.9;
    o->beta2 = 0.95;
    o->eps = 1e-8;
    o->grad_clip = 1.0;
    o->seed = 1;
    o->eval_every = 50;
    o->eval_batches = 4;
    o->val_fraction = 0.1;
    o->log_every = 10;
    int n_layer = 0, n_head = 0, n_embd = 0, ctx_len = 0, vocab = 0;
    int experts = -1, top_k = 0, moe_every = 0;   /* unset: the config's */
    double capacity = -1.0, aux = -1.0;
    const char *hint = "see --help";
    opterr = 0;  /* we print our own one-line message */
    int c;
    while ((c = getopt_long(argc, argv, "h", long_opts, NULL)) != -1) {
        const char *f = argv[optind - 1];
        switch (c) {
        case OPT_CONFIG: cli_string(o->config_name, sizeof o->config_name, "--config", optarg); break;
        case OPT_DATA: cli_string(o->data_path, sizeof o->data_path, "--data", optarg); break;
        case OPT_OUT: cli_string(o->out_dir, sizeof o->out_dir, "--out", optarg); break;
        case OPT_STEPS: o->steps = cli_int("--steps", optarg, 1, 10000000); break;
        case OPT_BATCH: o->batch = cli_int("--batch", optarg, 1, 1 << 16); break;
        case OPT_SEQ: o->seq = cli_int("--seq", optarg, 1, 1 << 20); break;
        case OPT_LR: o->lr = cli_double("--lr", optarg, 1e-12, 10.0); break;
        case OPT_MIN_LR: o->min_lr_frac = cli_double("--min-lr-frac", optarg, 0.0, 1.0); break;
        case OPT_WARMUP: o->warmup = cli_int("--warmup", optarg, 0, 10000000); break;
        case OPT_WD: o->weight_decay = cli_double("--weight-decay", optarg, 0.0, 10.0); break;
        case OPT_BETA1: o->beta1 = cli_double("--beta1", optarg, 0.0, 0.999999); break;
        case OPT_BETA2: o->beta2 = cli_double("--beta2", optarg, 0.0, 0.999999); break;
        case OPT_EPS: o->eps = cli_double("--eps", optarg, 1e-30, 1.0); break;
        case OPT_CLIP: o->grad_clip = cli_double("--grad-clip", optarg, 0.0, 1e9); break;
        case OPT_SEED: o->seed = cli_u64("--seed", optarg); break;
        case OPT_EVAL_EVERY: o->eval_every = cli_int("--eval-every", optarg, 0, 10000000); break;
        case OPT_EVAL_BATCHES: o->eval_batches = cli_int("--eval-batches", optarg, 1, 100000); break;
        case OPT_VAL_FRACTION: o->val_fraction = cli_double("--val-fraction", optarg, 1e-6, 0.5); break;
        case OPT_LOG_EVERY: o->log_every = cli_int("--log-every", optarg, 1, 10000000); break;
        case OPT_PROGRESS: o->progress = runlog_progress_by_name(optarg); break;
        case OPT_THREADS: o->threads = cli_int("--threads", optarg, 1, 1024); break;
        case OPT_DEVICE: cli_string(o->device, sizeof o->device, "--device", optarg); break;
        case OPT_N_LAYER: n_layer = cli_int("--n-layer", optarg, 1, 1024); break;
        case OPT_N_HEAD: n_head = cli_int("--n-head", optarg, 1, 1024); break;
        case OPT_N_EMBD: n_embd = cli_int("--n-embd", optarg, 1, 65536); break;
        case OPT_CTX: ctx_len = cli_int("--ctx", optarg, 1, 1 << 20); break;
        case OPT_VOCAB: vocab = cli_int("--vocab", optarg, 2, 65536); break;
        case OPT_EXPERTS: experts = cli_int("--experts", optarg, 0, 1024); break;
        case OPT_TOP_K: top_k = cli_int("--top-k", optarg, 1, 1024); break;
        case OPT_CAPACITY: capacity = cli_double("--capacity-factor", optarg, 0.0, 1024.0); break;
        case OPT_AUX: aux = cli_double("--aux-loss-coef", optarg, 0.0, 100.0); break;
        case OPT_MOE_EVERY: moe_every = cli_int("--moe-every", optarg, 1, 1024); break;
        case OPT_GRAD_ACCUM: o->grad_accum = cli_int("--grad-accum", optarg, 1, 1 << 16); break;
        case OPT_DUMP_PARAMS:
            cli_string(o->dump_params, sizeof o->dump_params, "--dump-params", optarg);
            break;
        case OPT_SAVE: cli_string(o->save, sizeof o->save, "--save", optarg); break;
        case OPT_SAVE_EVERY: o->save_every = cli_int("--save-every", optarg, 1, 1 << 30); break;
        case OPT_KEEP: o->keep = cli_int("--keep", optarg, 1, 1 << 20); break;
        case OPT_SAVE_ASYNC: o->save_async = 1; break;
        case OPT_RESUME: cli_string(o->resume, sizeof o->resume, "--resume", optarg); break;
        case OPT_COMM_TIMEOUT: comm_set_timeout(cli_double("--comm-timeout", optarg, 0, 1e7)); break;
        case OPT_PROFILE: o->profile = 1; break;
        case 'h':
            printf("usage: %s [options]\n%s\n\n%s", g_program_name, p->what, g_usage);
            for (int i = 0; i < n_extra; i++) printf("  %s\n", extra[i].help);
            exit(0);
        default:
            if (c >= OPT_EXTRA && c < OPT_EXTRA + n_extra) {
                p->on_extra(p->ctx, c - OPT_EXTRA, optarg);
                break;
            }
            cli_bad_option(f, hint);
        }
    }
    if (optind < argc) USER_ERROR("unexpected argument '%s'; %s", argv[optind], hint);
    refuse_checkpoints_without_ops(o, p);

    if (strcmp(o->device, "cpu") != 0 && strcmp(o->device, "cuda") != 0)
        USER_ERROR("--device expects cpu or cuda, got '%s'", o->device);
    if (gpt_config_by_name(o->config_name, &o->model) != 0)
        USER_ERROR("unknown --config '%s' (known: %s)", o->config_name, gpt_config_names());
    if (n_layer) o->model.n_layer = n_layer;
    if (n_head) o->model.n_head = n_head;
    if (n_embd) o->model.n_embd = n_embd;
    if (ctx_len) o->model.ctx_len = ctx_len;
    if (vocab) o->model.vocab_size = vocab;
    GPTConfig *m = &o->model;
    if (experts > 0 && m->n_experts == 0) {  /* a dense config made MoE: the defaults */
        m->top_k = 1;
        m->capacity_factor = 1.25f;
        m->aux_loss_coef = 0.01f;
        m->moe_every = 1;
    }
    if (experts >= 0) m->n_experts = experts;
    if (m->n_experts == 0 && (top_k || capacity >= 0 || aux >= 0 || moe_every))
        USER_ERROR("--top-k, --capacity-factor, --aux-loss-coef and --moe-every set up experts: "
                   "give --experts E too (config %s is dense)", o->config_name);
    if (m->n_experts == 0) m->top_k = m->moe_every = 0, m->capacity_factor = m->aux_loss_coef = 0;
    if (top_k) m->top_k = top_k;
    if (capacity >= 0) m->capacity_factor = (float)capacity;
    if (aux >= 0) m->aux_loss_coef = (float)aux;
    if (moe_every) m->moe_every = moe_every;
    const char *problem = gpt_config_problem(&o->model);
    if (problem)
        USER_ERROR("config %s can't be built: %s (n_layer %d, n_head %d, n_embd %d)",
                   o->config_name, problem, o->model.n_layer, o->model.n_head, o->model.n_embd);
    if (o->batch == 0) o->batch = strcmp(o->config_name, "small") == 0 ? 16 : 8;
    if (o->seq == 0) o->seq = o->model.ctx_len;
    if (o->seq > o->model.ctx_len)
        USER_ERROR("--seq %d is longer than the model's context (%d)", o->seq, o->model.ctx_len);
    if (o->warmup < 0) o->warmup = o->steps < 10 ? o->steps : 10;
    if (o->warmup > o->steps)
        USER_ERROR("--warmup %d is longer than the run (--steps %d)", o->warmup, o->steps);
    if (!o->save[0] && (o->save_every || o->keep))
        USER_ERROR("--save-every and --keep say when and how many checkpoints to keep: give "
                   "--save DIR too");
    if (!o->save[0] && o->save_async)
        USER_ERROR("--save-async writes the checkpoints of --save DIR in the background: give "
                   "--save DIR too");
    if (o->out_dir[0] == '\0')
        snprintf(o->out_dir, sizeof o->out_dir, "runs/%s-%s", o->lab, o->config_name);
    if (o->threads == 0) o->threads = omp_get_max_threads();
    device_select(o->device);
}

int train_micro_batch_rows(const TrainOptions *o, int ranks) {
    if (o->batch % (ranks * o->grad_accum) != 0)
        USER_ERROR("--batch %d must be a multiple of ranks x --grad-accum = %d x %d", o->batch,
                   ranks, o->grad_accum);
    return o->batch / (ranks * o->grad_accum);
}

void train_pipeline_options(TrainOptions *o, const char *schedule, int micro_batches,
                            int *chunks) {
    if (*chunks == 0) *chunks = strcmp(schedule, "interleaved") == 0 ? 2 : 1;
    if (micro_batches && o->grad_accum != 1 && o->grad_accum != micro_batches)
        USER_ERROR("--micro-batches %d and --grad-accum %d: a pipeline's micro-batches are its "
                   "accumulation steps; give one of them", micro_batches, o->grad_accum);
    if (micro_batches) o->grad_accum = micro_batches;
}

float lr_at_step(const TrainOptions *o, int step) {
    if (step < o->warmup) return (float)(o->lr * (step + 1) / o->warmup);
    int decay_steps = o->steps - 1 - o->warmup;
    double progress = decay_steps > 0 ? (double)(step - o->warmup) / decay_steps : 1.0;
    double min_lr = o->lr * o->min_lr_frac;
    return (float)(min_lr + 0.5 * (o->lr - min_lr) * (1.0 + cos(M_PI * progress)));
}

int train_evaluates_at(const TrainOptions *o, int step) {
    return step == o->steps - 1 || (o->eval_every > 0 && step % o->eval_every == 0);
}

static int g_first_step;  /* the run's: 0, or the resumed checkpoint's steps done */

int train_steps_run(const TrainOptions *o) { return o->steps - g_first_step; }

size_t train_forward_passes(const TrainOptions *o) {
    size_t evals = 0;
    for (int s = g_first_step; s < o->steps; s++) evals += train_evaluates_at(o, s);
    return (size_t)o->grad_accum * ((size_t)train_steps_run(o) + evals * o->eval_batches);
}

double train_print_traffic(const char *program, const char *what, const TrainOptions *o,
                           const Comm *group, const TrafficRow *rows, int n) {
    const size_t passes = train_forward_passes(o), steps = (size_t)train_steps_run(o);
    const size_t backwards = (size_t)o->grad_accum * steps;
    double wire = 0;
    for (int i = 0; i < n; i++) {
        const TrafficRow *r = &rows[i];
        const size_t calls = r->per_forward.calls * passes + r->per_backward.calls * backwards +
                             r->per_step.calls * steps;
        const size_t bytes = r->per_forward.bytes * passes + r->per_backward.bytes * backwards +
                             r->per_step.bytes * steps;
        const CommOpStats s = comm_op_stats(group, r->op);
        wire += r->wire * (double)s.bytes;
        if (calls == 0 && s.calls == 0) continue;
        printf("%s: %s %s per rank, predicted vs measured: per forward %zu calls %zu bytes, "
               "per backward %zu calls %zu bytes; run: %zu calls %zu bytes vs %llu calls %llu "
               "bytes  %s\n",
               program, what, r->name, r->per_forward.calls, r->per_forward.bytes,
               r->per_backward.calls, r->per_backward.bytes, calls, bytes,
               (unsigned long long)s.calls, (unsigned long long)s.bytes,
               s.calls == calls && s.bytes == bytes ? "ok" : "DIFFERENT");
    }
    return wire;
}

void train_print_tp_traffic(const char *program, const TrainOptions *o, const MemLayout *ml,
                            const Comm *tp, int fused_ce) {
    if (tp->size == 1) return;
    TpTraffic fwd, bwd;
    memplan_tp_comm(&o->model, ml, &fwd, &bwd);
    fwd.allreduce.calls -= fused_ce;  /* the same bytes in one all-reduce fewer */
    const double p = tp->size;
    const TrafficRow rows[] = {
        {OP_ALLREDUCE, "all-reduces", fwd.allreduce, bwd.allreduce,
         memplan_tp_step_comm(&o->model, ml), 2.0 * (p - 1) / p},
        {OP_REDUCE_SCATTER, "reduce-scatters", fwd.reduce_scatter, bwd.reduce_scatter, {0, 0},
         (p - 1) / p},
        {OP_ALLGATHER, "all-gathers", fwd.allgather, bwd.allgather, {0, 0}, (p - 1) / p},
    };
    const double wire = train_print_traffic(program, "TP", o, tp, rows, 3);
    printf("%s: TP traffic on the wire per rank (ring: all-reduce 2(p-1)/p, "
           "reduce-scatter and all-gather (p-1)/p of the bytes): %.0f bytes\n", program, wire);
}

void train_print_cp_traffic(const char *program, const TrainOptions *o, const MemLayout *ml,
                            const Comm *cp) {
    if (cp->size == 1) return;
    CpTraffic fwd, bwd;
    memplan_cp_comm(&o->model, ml, &fwd, &bwd);
    const double p = cp->size;
    const TrafficRow rows[] = {
        {OP_SEND, "ring sends", fwd.send, bwd.send, {0, 0}, 1.0},
        {OP_ALLTOALL, "all-to-alls", fwd.alltoall, bwd.alltoall, {0, 0}, (p - 1) / p},
        {OP_ALLREDUCE, "loss all-reduces", fwd.allreduce, bwd.allreduce, {0, 0}, 2.0 * (p - 1) / p},
    };
    const double wire = train_print_traffic(program, "CP", o, cp, rows, 3);
    printf("%s: CP traffic leaving each rank per step: %.0f bytes\n", program, wire / train_steps_run(o));
}

float grad_clip_factor(double norm, double max_norm) {
    if (max_norm <= 0 || norm <= max_norm) return 1.0f;
    return (float)(max_norm / norm);
}

/* This rank's rows of the global batch: B / (ranks K) per micro-batch.
 * Rank r's rows are [r B/N, (r+1) B/N), micro-batch k the k-th slice of
 * them, so every layout trains on exactly the baseline's sequences. */
typedef struct {
    int ranks, rank, micro, rows;  /* rows per micro-batch */
} BatchSlice;

static int slice_first_row(const BatchSlice *b, int k) { return (b->rank * b->micro + k) * b->rows; }

/* Host memory for a micro-batch's tokens on their way to the activations,
 * NULL where not needed: the sequences whole (under context parallelism,
 * where a rank keeps its positions of each), and the rank's share (on a
 * GPU, where one copy moves it). */
typedef struct {
    int *whole, *staging;
} TokenBuffers;

/* Rows [first_row, first_row + rows) of batch `index` into the activations'
 * inputs and targets (contiguous: targets = inputs + rows * T, T = seq / cp
 * this rank's positions of each sequence, layout.h's placement). The
 * loader writes host memory. */
static void load_batch(const DataLoader *dl, DataSplit split, uint64_t index, int first_row,
                       int rows, int seq, const GPTLayout *l, GPTActs *a,
                       const TokenBuffers *buf) {
    const int T = seq / l->cp;
    int *mine = buf->staging ? buf->staging : a->inputs;
    if (l->cp == 1) {
        dataloader_fill(dl, split, index, first_row, rows, seq, mine, mine + (size_t)rows * seq);
    } else {
        int *w = buf->whole;
        dataloader_fill(dl, split, index, first_row, rows, seq, w, w + (size_t)rows * seq);
        for (int k = 0; k < 2 * rows; k++)  /* the inputs' rows, then the targets' */
            for (int t = 0; t < T; t++)
                mine[(size_t)k * T + t] = w[(size_t)k * seq + gpt_cp_position(l, t, T)];
    }
    if (buf->staging) device_copy(a->inputs, buf->staging, 2 * (size_t)rows * T * sizeof(int));
}

/* Sum over ranks of a per-rank value (a loss), outside the gradient group's
 * counts; identity on one device. */
static double sum_over_ranks(const TrainParallel *par, double x) {
    if (par) comm_allreduce(par->metrics, &x, &x, 1, COMM_DOUBLE, COMM_SUM);
    return x;
}

/* What the executor's loads read: batch `index` of `split`, this rank's
 * slice of it (pipe_exec.h's PipeLoadFn) */
typedef struct {
    const DataLoader *dl;
    DataSplit split;
    uint64_t index;
    const BatchSlice *slice;
    int seq;
    const GPTLayout *layout;
    const TokenBuffers *buf;
} BatchSource;

static void load_micro_batch(void *ctx, int micro, GPTActs *a) {
    const BatchSource *b = ctx;
    load_batch(b->dl, b->split, b->index, slice_first_row(b->slice, micro), b->slice->rows,
               b->seq, b->layout, a, b->buf);
}

/* Mean loss over the fixed held-out batches 0..eval_batches-1: each one's
 * micro-batches forward through the layout's stages */
static float evaluate(const TrainOptions *o, const TrainParallel *par, const BatchSlice *b,
                      const DataLoader *dl, PipeRank *x, const Schedule *forward_only,
                      const GPTLayout *layout, const TokenBuffers *buf) {
    double total = 0.0;
    for (int e = 0; e < o->eval_batches; e++) {
        BatchSource src = {dl, SPLIT_VAL, (uint64_t)e, b, o->seq, layout, buf};
        total += pipe_run(x, forward_only, &pipe_plain_ops, load_micro_batch, &src, NULL, NULL);
    }
    return (float)(sum_over_ranks(par, total) / ((double)o->eval_batches * b->micro * b->ranks));
}

/* moe.csv's row of this step: the MoE statistics (model.h) summed over the
 * data-parallel ranks, the aux loss a mean like the loss's */
static void log_moe_step(const TrainParallel *par, RunLog *log, int step, int micro_batches,
                         int experts, int is_root) {
    const MoEStats *s = gpt_moe_stats();
    const int E = experts;  /* every rank's: log is open on the root only */
    double v[2 + MOE_STATS_MAX_EXPERTS];
    v[0] = s->aux;
    v[1] = (double)s->dropped;
    for (int e = 0; e < E; e++) v[2 + e] = (double)s->load[e];
    if (par) comm_allreduce(par->metrics, v, v, 2 + (size_t)E, COMM_DOUBLE, COMM_SUM);
    const int ranks = par ? par->metrics->size : 1;
    if (is_root) runlog_moe_step(log, step, v[0] / ((double)micro_batches * ranks), v[1], v + 2);
}

/* ---- the layout's whole-model view ----------------------------------------- */

/* Whether this rank's buffer is the whole model in the standard layout (no
 * tensor, pipeline or expert split): then the norm and the gathers below
 * take it as it is */
static int holds_whole_model(const GPTLayout *l) { return l->tp == 1 && l->pp == 1 && l->ep == 1; }

double layout_counted_sum_squares(const GPTLayout *l, const TensorInfo *t, size_t first,
                                  size_t n, const float *g) {
    double sum = 0.0;
    for (int i = 0; i < gpt_num_tensors(l); i++) {
        if (!(t[i].split || l->tp_rank == 0) || !(t[i].expert_split || l->ep_rank == 0) ||
            t[i].tied_copy)
            continue;
        const size_t lo = t[i].offset > first ? t[i].offset : first;
        const size_t hi = t[i].offset + t[i].count < first + n ? t[i].offset + t[i].count
                                                               : first + n;
        if (lo < hi) sum += sum_squares(g + (lo - first), hi - lo);
    }
    return sum;
}

double layout_model_sum(const GPTLayout *l, double x) {
    if (l->tp > 1) comm_allreduce(l->tp_group, &x, &x, 1, COMM_DOUBLE, COMM_SUM);
    if (l->pp > 1) comm_allreduce(l->pp_group, &x, &x, 1, COMM_DOUBLE, COMM_SUM);
    if (l->ep > 1) comm_allreduce(l->ep_group, &x, &x, 1, COMM_DOUBLE, COMM_SUM);
    return x;
}

/* The sum of squares of the gradients of the whole model, each parameter
 * counted once (layout_counted_sum_squares, then layout_model_sum; t is
 * the layout's tensor table). On one rank of the whole model, the whole
 * buffer at once. */
static double layout_sum_squares(const GPTLayout *l, const TensorInfo *t, const float *grads) {
    if (holds_whole_model(l)) return sum_squares(grads, l->num_params);
    return layout_model_sum(l, layout_counted_sum_squares(l, t, 0, l->num_params, grads));
}

/* The layout of the rank at tp_rank r and ep_rank e of l's stage */
static GPTLayout layout_of_rank(const GPTLayout *l, int r, int e) {
    GPTLayout lr = gpt_layout_make(&l->cfg, l->tp, r);
    gpt_layout_set_pipeline(&lr, l->pp, l->pp_rank, l->chunks);
    if (l->ep > 1) gpt_layout_set_experts(&lr, l->ep, e);
    return lr;
}

float *layout_gather_standard(const GPTLayout *l, const float *local, int mine) {
    const size_t n = l->num_params, total = gpt_num_params(&l->cfg);
    const int tp = l->tp, ep = l->ep, ranks = tp * ep;  /* n floats each */
    float *own = malloc(n * sizeof(float)), *of_ep = malloc(n * ep * sizeof(float));
    float *all = malloc(n * ranks * sizeof(float)), *whole = calloc(total, sizeof(float));
    CHECK(own && of_ep && all && whole, "out of memory for gathering the parameters");
    device_copy(own, local, n * sizeof(float));
    if (ep > 1) comm_allgather_untraced(l->ep_group, own, of_ep, n * ep, COMM_FLOAT);
    else memcpy(of_ep, own, n * sizeof(float));
    if (tp > 1) comm_allgather_untraced(l->tp_group, of_ep, all, n * ranks, COMM_FLOAT);
    else memcpy(all, of_ep, n * ep * sizeof(float));
    free(own);
    free(of_ep);
    /* buffer i = r ep + e; the winner's last */
    const int last = mine ? l->tp_rank * ep + l->ep_rank : 0;
    for (int k = 1; k <= ranks; k++) {
        const int i = (last + k) % ranks;
        const GPTLayout lr = layout_of_rank(l, i / ep, i % ep);
        gpt_layout_to_standard(&lr, all + (size_t)i * n, whole);
    }
    free(all);
    if (l->pp == 1) return whole;
    /* every stage's tensors, whole after the TP gather, from their stage;
     * this rank's own last, so that they win when mine */
    float *stages = malloc(total * l->pp * sizeof(float));
    TensorInfo *t = malloc((size_t)gpt_num_tensors(l) * sizeof *t);
    CHECK(stages && t, "out of memory for gathering the parameters");
    comm_allgather_untraced(l->pp_group, whole, stages, total * l->pp, COMM_FLOAT);
    for (int k = 1; k <= l->pp; k++) {
        const int q = (l->pp_rank + k) % l->pp;
        GPTLayout lq = *l;
        gpt_layout_set_pipeline(&lq, l->pp, q, l->chunks);
        gpt_tensor_table(&lq, t);
        for (int i = 0; i < gpt_num_tensors(&lq); i++) {
            if (t[i].count == 0 || (t[i].tied_copy && !(mine && q == l->pp_rank))) continue;
            const size_t off = t[i].global_offset, size = (size_t)t[i].global_rows * t[i].global_cols;
            memcpy(whole + off, stages + (size_t)q * total + off, size * sizeof(float));
        }
    }
    free(t);
    free(stages);
    return whole;
}

/* ---- replicated model states: every rank holds all of its layout's -------
 * Lab 00 (one rank), DDP (a GradSync averages the gradients over dp) and
 * tensor parallelism (each rank holds its shard whole, layout.h). */
typedef struct {
    const GPTLayout *layout;
    TensorInfo *tensors;    /* the layout's table, for the gradient norm */
    const GradSync *sync;  /* NULL on one device */
    size_t n;
    float *params, *grads, *adam_m, *adam_v;
    GPTParams p, g;
    ModelHooks hooks;
    CkptRun all;            /* the whole local buffer, for checkpoints */
} Replicated;

static void replicated_begin_step(void *ctx) {
    Replicated *r = ctx;
    set_zero(r->grads, r->n);
}

static void replicated_begin_backward(void *ctx, int last) {
    Replicated *r = ctx;
    if (r->sync && r->sync->begin_backward) r->sync->begin_backward(r->sync->ctx, r->grads, last);
}

static void replicated_grads_ready(void *ctx, int unit) {
    Replicated *r = ctx;
    size_t offset, count;
    gpt_unit_range(r->layout, unit, &offset, &count);
    r->sync->grads_ready(r->sync->ctx, offset, count);
}

static double replicated_finish_grads(void *ctx, int micro_batches) {
    Replicated *r = ctx;
    if (r->sync) r->sync->finish(r->sync->ctx, r->grads, r->n);
    /* sequence parallelism: each TP rank's layernorms saw its rows only */
    if (r->layout->sp) r->layout->sp_ops->sum_layernorm_grads(r->layout, &r->g);
    /* a pipeline: wte's two copies, each with its stage's share */
    if (r->layout->pp > 1) r->layout->sum_tied_embedding(r->layout, r->grads);
    /* each micro-batch's backward gave the gradient of its own mean loss */
    if (micro_batches > 1) scale_inplace(r->grads, 1.0f / micro_batches, r->n);
    return layout_sum_squares(r->layout, r->tensors, r->grads);
}

static void replicated_update(void *ctx, const AdamWStep *s) {
    Replicated *r = ctx;
    if (s->clip < 1.0f) scale_inplace(r->grads, s->clip, r->n);
    adamw_update(r->params, r->grads, r->adam_m, r->adam_v, r->n, s->lr, s->beta1, s->beta2,
                 s->eps, s->weight_decay, s->t);
}

static void replicated_gather_params(void *ctx, float *out) {
    Replicated *r = ctx;
    if (holds_whole_model(r->layout)) {
        if (out) device_copy(out, r->params, r->n * sizeof(float));
        return;
    }
    float *whole = layout_gather_standard(r->layout, r->params, 0);
    if (out) memcpy(out, whole, gpt_num_params(&r->layout->cfg) * sizeof(float));
    free(whole);
}

static void replicated_local_params(void *ctx, float *out) {
    Replicated *r = ctx;
    if (holds_whole_model(r->layout)) {
        device_copy(out, r->params, r->n * sizeof(float));
        return;
    }
    float *whole = layout_gather_standard(r->layout, r->params, 1);
    memcpy(out, whole, gpt_num_params(&r->layout->cfg) * sizeof(float));
    free(whole);
}

/* every rank of a DP group holds all of its layout's buffer */
static void replicated_held(void *ctx, CkptHeld *h) {
    Replicated *r = ctx;
    r->all = (CkptRun){0, r->n, 0};
    *h = (CkptHeld){{r->params, r->adam_m, r->adam_v}, {&r->all, &r->all, &r->all}, {1, 1, 1},
                    {1, 1, 1}, "replicated"};
}

/* Model states: 4 bytes each of params and grads, 8 of AdamW moments, of
 * the layout's num_params. */
static void replicated_init(Replicated *r, const TrainOptions *o, const GPTLayout *layout,
                            const GradSync *sync, ModelStates *st) {
    memset(r, 0, sizeof *r);
    r->layout = layout;
    r->sync = sync;
    r->n = layout->num_params;
    r->tensors = malloc((size_t)gpt_num_tensors(layout) * sizeof *r->tensors);
    CHECK(r->tensors, "out of memory");
    gpt_tensor_table(layout, r->tensors);
    r->params = mem_alloc(MEM_PARAMS, r->n * sizeof(float));
    r->grads = mem_alloc(MEM_GRADS, r->n * sizeof(float));
    r->adam_m = mem_alloc(MEM_OPTIMIZER, r->n * sizeof(float));
    r->adam_v = mem_alloc(MEM_OPTIMIZER, r->n * sizeof(float));
    gpt_init_params(layout, o->seed, 0, r->n, r->params);
    gpt_params_view(layout, r->params, &r->p);
    gpt_params_view(layout, r->grads, &r->g);
    r->hooks = (ModelHooks){.ctx = r};
    if (sync && sync->grads_ready) r->hooks.grads_ready = replicated_grads_ready;
    *st = (ModelStates){r, &r->p, &r->g, &r->hooks, replicated_begin_step,
                        replicated_begin_backward, replicated_finish_grads, replicated_update,
                        replicated_gather_params, replicated_local_params, replicated_held};
}

static void replicated_free(Replicated *r) {
    free(r->tensors);
    gpt_params_view_free(&r->p);
    gpt_params_view_free(&r->g);
    mem_free(r->params);
    mem_free(r->grads);
    mem_free(r->adam_m);
    mem_free(r->adam_v);
}

/* Wraps a layout's hooks to draw the timeline's "backward" bars: the
 * compute between one unit's gradients being ready and the next's. */
typedef struct {
    const ModelHooks *inner;
    double t_last;
} TracedHooks;

static void traced_needed(void *ctx, int unit, int backward) {
    const ModelHooks *h = ((TracedHooks *)ctx)->inner;
    if (h && h->params_needed) h->params_needed(h->ctx, unit, backward);
}
static void traced_done(void *ctx, int unit, int backward) {
    const ModelHooks *h = ((TracedHooks *)ctx)->inner;
    if (h && h->params_done) h->params_done(h->ctx, unit, backward);
}
static void traced_begin(void *ctx, int unit) {
    const ModelHooks *h = ((TracedHooks *)ctx)->inner;
    if (h && h->grads_begin) h->grads_begin(h->ctx, unit);
}
static void traced_ready(void *ctx, int unit) {
    TracedHooks *t = ctx;
    trace_event("compute", "backward", NULL, t->t_last, trace_now(), 0);
    if (t->inner && t->inner->grads_ready) t->inner->grads_ready(t->inner->ctx, unit);
    t->t_last = trace_now();
}

/* Before each backward op: the model states' begin_backward (DDP
 * communicates on the last), and the first backward bar starts now */
typedef struct {
    const ModelStates *st;
    TracedHooks *traced;
} BeforeBackward;

static void before_backward(void *ctx, int last) {
    BeforeBackward *b = ctx;
    b->st->begin_backward(b->st->ctx, last);
    b->traced->t_last = trace_now();
}

/* memory.csv of every rank, written by rank 0 */
static void write_memory_csv(const TrainParallel *par, const char *path) {
    if (!par) {
        mem_write_csv(path, 0);
        return;
    }
    char rows[2048];
    mem_csv_rows(rows, sizeof rows, par->world->rank);
    comm_write_gathered(par->world, path, MEM_CSV_HEADER, rows);
}

/* params_checksum.csv of every rank, written by rank 0 after the other
 * outputs (a sharded layout's gathers here are not the training's traffic
 * nor its memory): FNV-1a 64 of this rank's parameter bits, standard layout. */
static void write_params_checksum(const TrainParallel *par, const ModelStates *st, size_t n,
                                  const char *path) {
    if (!st->local_params) return;
    float *mine = malloc(n * sizeof(float));
    CHECK(mine, "out of memory for the parameters' checksum");
    st->local_params(st->ctx, mine);
    char row[64];
    snprintf(row, sizeof row, "%d,%016llx\n", par->world->rank,
             (unsigned long long)tokens_checksum(mine, n * sizeof(float)));
    free(mine);
    comm_write_gathered(par->world, path, "rank,checksum\n", row);
}

void train_run(const TrainOptions *o) { train_run_parallel(o, NULL); }

/* ---- checkpoints (checkpoint.h) ------------------------------------------ */

/* Load --resume's checkpoint (preflight_run verified it) into this rank's
 * states, its lineage into *lineage; returns the steps it had done: the
 * first step to run */
static int resume_from(const TrainOptions *o, const GPTLayout *l, const CkptHeld *held,
                       CkptLineage *lineage, int is_root) {
    char dir[1100], why[1400];
    CkptIndex ix;
    if (ckpt_resolve(o->resume, dir, sizeof dir, why, sizeof why) ||
        ckpt_index_read(dir, &ix, why, sizeof why))
        USER_ERROR("--resume: %s", why);
    *lineage = ix.lineage;
    ckpt_index_free(&ix);
    double t0 = wall_seconds();
    const int step = o->checkpoints->load(dir, l, held);
    if (is_root)
        printf("%s: resumed from %s: %d steps done, %d to go (loaded in %.3f s)\n",
               g_program_name, dir, step, o->steps - step, wall_seconds() - t0);
    return step;
}

/* This run's lineage, from the resumed one's (n 0 for a fresh run), and
 * on rank 0 what a rewind left in --save's DIR moved aside (checkpoint.h) */
static void start_lineage(const TrainOptions *o, CkptSaveTo *to, const CkptLineage *parent,
                          int first_step, int is_root) {
    ckpt_lineage_extend(&to->lineage, parent, first_step);
    int aside;
    const int moved = is_root ? ckpt_set_branches_aside(to, &aside) : 0;
    if (moved)
        printf("%s: %d checkpoint%s of %s past the resumed step %d (another branch) moved to "
               "%s/abandoned-%d: --resume %s/abandoned-%d continues them\n", g_program_name, moved,
               moved == 1 ? "" : "s", o->save, first_step, o->save, aside, o->save, aside);
}

/* Commit --save-async's pending checkpoint, if any (collective) */
static void finish_saves(const TrainOptions *o, CkptAsync *async, int is_root) {
    if (!async->pending) return;
    double t0 = wall_seconds();
    const int steps = async->steps;
    ckpt_save_finish(async);
    if (is_root) check_end_open_line();
    if (is_root)
        printf("%s: committed %s/step-%06d (waited %.3f s for its writer and the commit)\n",
               g_program_name, o->save, steps, wall_seconds() - t0);
}

/* Save `steps` steps done: at once, or (--save-async) the snapshot now and
 * the commit at the next save or finish_saves, the previous one's first */
static void save_checkpoint(const TrainOptions *o, const CkptSaveTo *to, int steps,
                            const GPTLayout *l, const CkptHeld *held, const CkptRank *who,
                            CkptAsync *async, int is_root) {
    finish_saves(o, async, is_root);
    double t0 = wall_seconds();
    if (o->save_async)
        ckpt_save_async(async, to, steps, l, held, who);
    else
        ckpt_save(to, steps, l, held, who);
    if (is_root) check_end_open_line();
    if (is_root)
        printf("%s: %s %s/step-%06d in %.3f s%s\n", g_program_name,
               o->save_async ? "snapshot" : "saved", o->save, steps, wall_seconds() - t0,
               o->save_async ? " (written in the background)" : "");
}

void train_run_parallel(const TrainOptions *o, const TrainParallel *par) {
    const GPTConfig *cfg = &o->model;
    CHECK(preflight_passed(), "the trainer did not call preflight_run (preflight.h) before "
          "allocating: bad outputs or a run too big for memory would be found too late");
    omp_set_num_threads(o->threads);
    const int ranks = par ? par->dp->size : 1, rank = par ? par->dp->rank : 0;
    const int is_root = !par || par->world->rank == 0;
    BatchSlice slice = {ranks, rank, o->grad_accum, train_micro_batch_rows(o, ranks)};

    TokenFile tf;
    char err[512];
    if (tokens_load(o->data_path, &tf, err, sizeof err) != 0) {
        if (strcmp(o->data_path, "build/data/synth.tok") == 0)
            USER_ERROR("%s (make it with `make data`, or pass --data FILE)", err);
        USER_ERROR("%s", err);
    }
    if (tf.vocab_size > (uint32_t)cfg->vocab_size)
        USER_ERROR("%s has vocabulary %u, larger than the model's %d", o->data_path,
                   tf.vocab_size, cfg->vocab_size);
    DataLoader dl;
    const char *why = dataloader_init(&dl, &tf, o->val_fraction, o->seq, o->seed);
    if (why) USER_ERROR("%s: %s", o->data_path, why);

    const size_t nparams = gpt_num_params(cfg);
    const GPTLayout whole = gpt_layout_whole(cfg);
    const GPTLayout *layout = par && par->layout ? par->layout : &whole;
    Replicated replicated = {0};
    ModelStates own;
    const ModelStates *st = par ? par->states : NULL;
    if (!st) {
        replicated_init(&replicated, o, layout, par ? par->sync : NULL, &own);
        st = &own;
    }
    /* a pipeline's schedule and stage ops, or the loop's own: the trivial
     * schedule of K micro-batches, F0 B0 F1 B1 ... (pipe_exec.h) */
    const int pipelined = par && par->schedule;
    Schedule *trivial = pipelined ? NULL : pipe_schedule_trivial(o->grad_accum);
    const Schedule *schedule = pipelined ? par->schedule : trivial;
    const PipeStageOps *stage_ops = pipelined ? par->stage_ops : &pipe_plain_ops;
    CHECK(schedule->micro_batches == o->grad_accum, "a schedule of %d micro-batches for "
          "--grad-accum %d", schedule->micro_batches, o->grad_accum);
    Schedule *forward_only =
        pipe_schedule_forward_only(layout->pp, o->grad_accum, layout->chunks);
    /* the backward bars of lab 02's timelines: the traced hooks' (a
     * pipeline's are its ops', pipe_exec.c) */
    TracedHooks traced = {st->hooks, 0.0};
    const ModelHooks hooks = {&traced, traced_needed, traced_done, traced_begin, traced_ready};
    PipeRank exec;
    pipe_rank_init(&exec, layout, st->params, st->grads, pipelined ? st->hooks : &hooks,
                   slice.rows, o->seq / layout->cp, layout->pp_group, pipelined);
    BeforeBackward bb = {st, &traced};
    TokenBuffers tokens = {NULL, NULL};
    const size_t batch_ints = 2 * (size_t)slice.rows * o->seq;
    if (layout->cp > 1) tokens.whole = malloc(batch_ints * sizeof(int));
    if (device_current() == DEVICE_CUDA) tokens.staging = malloc(batch_ints * sizeof(int));
    CHECK((layout->cp == 1 || tokens.whole) && (device_current() != DEVICE_CUDA || tokens.staging),
          "out of memory for the token batches");
    if (par && device_current() == DEVICE_CUDA) comm_attach_gpus(par->dp);

    if (is_root)
        printf("%s: config %s, %zu parameters, batch %d x %d tokens (%d rank%s x %d micro-batch%s "
               "x %d), %d steps, %d thread%s, data %s, device %s\n",
               g_program_name, o->config_name, nparams, o->batch, o->seq, ranks,
               ranks == 1 ? "" : "s", o->grad_accum, o->grad_accum == 1 ? "" : "es", slice.rows,
               o->steps, o->threads, o->threads == 1 ? "" : "s", o->data_path,
               device_description());
    RunLog log;
    if (is_root) runlog_open(&log, o);
    if (o->profile) profile_enable();
    const double tokens_per_step = (double)o->batch * o->seq;
    double sync_seconds = 0.0, step_seconds = 0.0;
    CkptHeld held;
    memset(&held, 0, sizeof held);
    if (o->save[0] || o->resume[0]) {
        CHECK(st->held, "these model states can't be checkpointed (ModelStates.held)");
        st->held(st->ctx, &held);
    }
    CkptAsync async = {0};
    const CkptRank who = {par ? par->world : NULL, par ? par->dp->rank : 0, par ? par->dp->size : 1};
    CkptLineage resumed = {0};
    const int first_step = o->resume[0] ? resume_from(o, layout, &held, &resumed, is_root) : 0;
    g_first_step = first_step;
    CkptSaveTo save_to = {o->checkpoints, o->save, o->keep, o->seed, g_program_name, {0}};
    if (o->save[0]) start_lineage(o, &save_to, &resumed, first_step, is_root);
    for (int step = first_step; step < o->steps; step++) {
        float val_loss = -1.0f;
        if (train_evaluates_at(o, step))
            val_loss = evaluate(o, par, &slice, &dl, &exec, forward_only, layout, &tokens);
        profile_set_active(step >= 1);  /* the first step warms caches and BLAS up */

        double t0 = wall_seconds();
        float lr = lr_at_step(o, step);
        st->begin_step(st->ctx);
        /* gradients accumulate over micro-batches; only the last one's
         * backward pass communicates (before_backward) */
        BatchSource src = {&dl, SPLIT_TRAIN, (uint64_t)step, &slice, o->seq, layout, &tokens};
        gpt_moe_stats_reset();  /* this step's micro-batches only, not the evaluation's */
        double loss_sum = pipe_run(&exec, schedule, stage_ops, load_micro_batch, &src,
                                   before_backward, &bb);
        if (!isfinite(loss_sum))
            die_at(__FILE__, __LINE__, "loss is %f at step %d: training diverged", loss_sum, step);
        /* what the backward pass did not hide: the wait for the gradients */
        double ts = wall_seconds();
        double norm =
            sqrt(st->finish_grads(st->ctx, stage_ops->dloss_scaled ? 1 : o->grad_accum));
        sync_seconds += wall_seconds() - ts;
        double loss_mean = sum_over_ranks(par, loss_sum) / ((double)ranks * o->grad_accum);
        AdamWStep adamw = {lr, (float)o->beta1, (float)o->beta2, (float)o->eps,
                           (float)o->weight_decay, grad_clip_factor(norm, o->grad_clip), step + 1};
        double to = trace_now();
        st->update(st->ctx, &adamw);
        trace_event("compute", "optimizer", NULL, to, trace_now(), 0);
        if (par && par->after_step && st == &own)
            par->after_step(par->after_step_ctx, step, replicated.params, replicated.n);
        device_synchronize();  /* the step's kernels are queued, not yet done */
        double dt = wall_seconds() - t0;
        step_seconds += dt;
        profile_add_step(dt);
        profile_set_active(0);
        if (is_root)
            runlog_step(&log, step, (float)loss_mean, val_loss, lr, (float)norm,
                        tokens_per_step / dt, dt * 1e3);
        if (cfg->n_experts > 0)
            log_moe_step(par, &log, step, o->grad_accum, cfg->n_experts, is_root);
        if (o->save[0] && ((o->save_every && (step + 1) % o->save_every == 0) ||
                           step + 1 == o->steps))
            save_checkpoint(o, &save_to, step + 1, layout, &held, &who, &async, is_root);
    }
    finish_saves(o, &async, is_root);
    if (is_root) runlog_close(&log);
    /* the timeline of the last step (none when a resumed run had none to go) */
    if (pipelined && o->steps > first_step)
        pipe_report_timeline(&exec, schedule, par->world, o->out_dir, g_program_name);

    char path[1024];
    snprintf(path, sizeof path, "%s/memory.csv", o->out_dir);
    write_memory_csv(par, path);
    if (par) {
        snprintf(path, sizeof path, "%s/comm.csv", o->out_dir);
        comm_write_csv(path);
        snprintf(path, sizeof path, "%s/trace.json", o->out_dir);
        trace_write_json(path);
        snprintf(path, sizeof path, "%s/trace.csv", o->out_dir);
        trace_write_csv(path);
        snprintf(path, sizeof path, "%s/params_checksum.csv", o->out_dir);
        write_params_checksum(par, st, nparams, path);
    }
    if (o->dump_params[0]) {
        /* for comparing layouts parameter by parameter (tests, labs 02-03) */
        float *all = is_root ? malloc(nparams * sizeof(float)) : NULL;
        CHECK(!is_root || all, "out of memory for --dump-params");
        st->gather_params(st->ctx, all);
        if (is_root) {
            AtomicFile af;
            FILE *f = atomic_open(&af, o->dump_params);
            IO_CHECK(fwrite(all, sizeof(float), nparams, f) == nparams, "writing %s",
                     o->dump_params);
            atomic_commit(&af);
        }
        free(all);
    }
    if (is_root) {
        snprintf(path, sizeof path, "%s/run.json", o->out_dir);
        runlog_write_run_json(path, o, o->lab, par ? par->world->size : 1, ranks, layout,
                              nparams);
        printf("%s: wrote %s/{metrics.csv,memory.csv,run.json%s}\n", g_program_name, o->out_dir,
               par ? ",comm.csv,trace.json,trace.csv,params_checksum.csv" : "");
        const int steps_run = o->steps > first_step ? o->steps - first_step : 1;
        if (par)
            printf("%s: mean step %.1f ms, of which %.1f ms waiting for gradients after the "
                   "backward pass\n",
                   g_program_name, 1e3 * step_seconds / steps_run, 1e3 * sync_seconds / steps_run);
    }
    if (is_root) profile_report(o->out_dir, slice.rows * (o->seq / layout->cp), cfg->n_embd);
    if (device_current() == DEVICE_CUDA) {
        /* the kit's logical bytes (memory.csv) against what the driver sees:
         * the difference is the CUDA context, cuBLAS/NCCL workspaces and the
         * allocator's rounding */
        size_t logical = 0;
        for (int c = 0; c < MEM_NUM_CATEGORIES; c++) logical += mem_peak_bytes(c);
        printf("%s: rank %d: peak %.1f MiB counted in memory.csv, %.1f MiB in use on the GPU "
               "(cudaMemGetInfo, whole device)\n",
               g_program_name, par ? par->world->rank : 0, logical / 1048576.0,
               device_driver_used_bytes() / 1048576.0);
    }

    free(tokens.whole);
    free(tokens.staging);
    pipe_rank_free(&exec);
    schedule_free(trivial);
    schedule_free(forward_only);
    if (st == &own) replicated_free(&replicated);
    tokens_free(&tf);
}
