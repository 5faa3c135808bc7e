#include "train_options.h"

#include <getopt.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cli.h"
#include "comm.h"
#include "device.h"
#include "kernels.h"
#include "precision.h"
#include "runlog.h"
#include "schedule.h"

/* --help's groups of the options every trainer shares, after the
 * program's own; each line fits 100 columns */
static const char *const g_help_groups[][2] = {
    {"The model and its data",
     "  --config NAME        tiny | small | medium | gpt2-124m   (default tiny)\n"
     "  --n-layer L --n-head H --n-embd C --ctx T --vocab V   override the named config\n"
     "  --experts E          a mixture of experts (lab 08): E expert MLPs in every\n"
     "                       --moe-every n-th block; 0 = dense   (default: the config's)\n"
     "  --top-k K --capacity-factor F --aux-loss-coef A --moe-every N   the experts' routing:\n"
     "                       K experts per token (default 1), F (0 = dropless; 1.25),\n"
     "                       the load-balancing loss's weight (0.01), MoE blocks (every 1)\n"
     "  --data FILE          token file                (default build/data/synth.tok)\n"
     "  --seq T              tokens per sequence, <= ctx  (default: the config's ctx)\n"
     "  --batch B            sequences per step, all ranks  (default: tiny 8, small 16, gpt2 8)\n"
     "  --grad-accum K       micro-batches per rank and step               (default 1)\n"
     "  --val-fraction X     tail of the token file held out              (default 0.1)\n"},
    {"Optimization",
     "  --steps N            optimizer steps                             (default 200)\n"
     "  --lr X               peak learning rate                         (default 1e-3)\n"
     "  --min-lr-frac X      cosine floor as a fraction of --lr          (default 0.1)\n"
     "  --warmup N           linear warmup steps                (default min(10, steps))\n"
     "  --weight-decay X     AdamW decoupled decay, all parameters        (default 0.1)\n"
     "  --beta1 X --beta2 X --eps X   AdamW                (default 0.9, 0.95, 1e-8)\n"
     "  --grad-clip X        clip the global grad norm; 0 = off           (default 1.0)\n"
     "  --seed N             init and data seed                            (default 1)\n"},
    {"Compute",
     "  --device cpu|cuda    where to compute; cuda needs `make CUDA=1`     (default cpu)\n"
     "  --threads N          OpenMP/BLAS threads (default: OMP_NUM_THREADS, else this node's cores\n"
     "                       shared among its ranks)\n"
     "  --precision P        fp32, or mixed precision: bf16 or fp16 compute weights,\n"
     "                       activations and their gradients over fp32 master weights\n"
     "                       and moments (model.h)                       (default fp32)\n"
     "  --fp32-grads         bf16/fp16: fp32 weight gradients (Megatron's main_grad)\n"
     "                       instead of 2-byte ones (the ZeRO paper's 2 + 2 + 12)\n"
     "  --loss-scale S       fp16: the dynamic loss scale's start      (default 65536)\n"
     "  --loss-scale-interval N  fp16: double the scale after N steps without an\n"
     "                       overflow, halve it on one (and skip the step); 0 keeps\n"
     "                       S fixed (with S 1: no loss scaling)        (default 2000)\n"
     "  --count-flushed      fp16 with --fp32-grads: metrics.csv's flushed column, the\n"
     "                       nonzero gradients fp16 would round to 0 (lab 11's extension)\n"
     "  --attention A        materialized (the T x T probabilities kept for the backward\n"
     "                       pass) or fused (tiles with an online softmax, only each row's\n"
     "                       log-sum-exp kept: lab 05's extension)  (default materialized)\n"},
    {"Checkpoints",
     "  --save DIR           checkpoints into DIR/step-NNNNNN (checkpoint.h): at the end,\n"
     "                       and every --save-every K steps; --keep K keeps the newest K\n"
     "                       of this run's lineage (default all); --save-async writes them\n"
     "                       in the background, committed at the next save or the end.\n"
     "                       DIR holds one lineage: a fresh run refuses a DIR of\n"
     "                       checkpoints; a rewind moves the later ones to DIR/abandoned-N\n"
     "  --resume PATH        continue from a checkpoint, or DIR's newest; any layout\n"
     "                       of the same model and --seed (--steps stays the total)\n"},
    {"Outputs and the console",
     "  --out DIR            run directory                (default runs/LAB-CONFIG)\n"
     "  --eval-every K       held-out loss every K steps; 0 = only last   (default 50)\n"
     "  --eval-batches N     batches per held-out evaluation              (default 4)\n"
     "  --progress MODE      rank 0's console: lines (one every --log-every steps, with an\n"
     "                       ETA), bar (one line redrawn in place), or auto: the bar when\n"
     "                       stdout is a terminal (under mpirun: mpirun's stdout), else\n"
     "                       lines                                        (default auto)\n"
     "  --log-every N        --progress lines: a line every N steps, the first, the last\n"
     "                       and those with a held-out loss               (default 10)\n"
     "  --profile            time every kernel of the training steps after the first:\n"
     "                       a table of time, FLOPs, bytes and roofline bound, and\n"
     "                       OUT/profile.csv (tools/plot_roofline.sh draws it)\n"
     "  --dump-params FILE   write the final parameters (raw float32) to FILE\n"
     COMM_TIMEOUT_HELP
     "  -h, --help           this text\n"},
};

enum {
    OPT_CONFIG = 1000, OPT_DATA, OPT_OUT, OPT_STEPS, OPT_BATCH, OPT_SEQ, OPT_LR, OPT_MIN_LR,
    OPT_WARMUP, OPT_WD, OPT_BETA1, OPT_BETA2, OPT_EPS, OPT_CLIP, OPT_SEED, OPT_EVAL_EVERY,
    OPT_EVAL_BATCHES, OPT_VAL_FRACTION, OPT_LOG_EVERY, OPT_THREADS, OPT_DEVICE, OPT_N_LAYER,
    OPT_N_HEAD, OPT_N_EMBD, OPT_CTX, OPT_VOCAB, OPT_EXPERTS, OPT_TOP_K, OPT_CAPACITY, OPT_AUX,
    OPT_MOE_EVERY, OPT_GRAD_ACCUM, OPT_DUMP_PARAMS, OPT_SAVE, OPT_SAVE_EVERY, OPT_KEEP,
    OPT_SAVE_ASYNC, OPT_PROGRESS,
    OPT_RESUME, OPT_COMM_TIMEOUT, OPT_PROFILE, OPT_PRECISION, OPT_FP32_GRADS, OPT_LOSS_SCALE,
    OPT_LOSS_SCALE_INTERVAL, OPT_COUNT_FLUSHED, OPT_ATTENTION,
    OPT_PARALLEL, OPT_EXTRA  /* a parallel flag, a program's own option: by name */
};

static const struct option g_common_options[] = {
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
    {"precision", required_argument, 0, OPT_PRECISION},
    {"fp32-grads", no_argument, 0, OPT_FP32_GRADS},
    {"loss-scale", required_argument, 0, OPT_LOSS_SCALE},
    {"loss-scale-interval", required_argument, 0, OPT_LOSS_SCALE_INTERVAL},
    {"count-flushed", no_argument, 0, OPT_COUNT_FLUSHED},
    {"attention", required_argument, 0, OPT_ATTENTION},
    {"help", no_argument, 0, 'h'}};

/* The model flags, unset (0, or -1 where 0 is a value) until given: they
 * override the named config's shape and routing */
typedef struct {
    int n_layer, n_head, n_embd, ctx_len, vocab;
    int experts, top_k, moe_every;
    double capacity, aux;
    Precision precision;
    int fp32_grads;
    int attention;
} ModelFlags;

/* The defaults of every option but the model's (the named config's) */
static void set_defaults(TrainOptions *o, const TrainProgram *p) {
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
    o->loss_scale = -1.0;          /* default: 65536 under fp16 */
    o->loss_scale_interval = -1;   /* default: 2000 under fp16 */
    o->parallel = parallel_flags_default();
    o->parallel.exposed = p->parallel;
}

/* One common option (c: its OPT_ code) with its argument into o or m;
 * 0 when c is none of them */
static int parse_common_option(int c, const char *optarg, TrainOptions *o, ModelFlags *m) {
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
    case OPT_N_LAYER: m->n_layer = cli_int("--n-layer", optarg, 1, 1024); break;
    case OPT_N_HEAD: m->n_head = cli_int("--n-head", optarg, 1, 1024); break;
    case OPT_N_EMBD: m->n_embd = cli_int("--n-embd", optarg, 1, 65536); break;
    case OPT_CTX: m->ctx_len = cli_int("--ctx", optarg, 1, 1 << 20); break;
    case OPT_VOCAB: m->vocab = cli_int("--vocab", optarg, 2, 65536); break;
    case OPT_EXPERTS: m->experts = cli_int("--experts", optarg, 0, 1024); break;
    case OPT_TOP_K: m->top_k = cli_int("--top-k", optarg, 1, 1024); break;
    case OPT_CAPACITY: m->capacity = cli_double("--capacity-factor", optarg, 0.0, 1024.0); break;
    case OPT_AUX: m->aux = cli_double("--aux-loss-coef", optarg, 0.0, 100.0); break;
    case OPT_MOE_EVERY: m->moe_every = cli_int("--moe-every", optarg, 1, 1024); break;
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
    case OPT_PRECISION:
        if (precision_parse(optarg, &m->precision) != 0)
            USER_ERROR("--precision expects fp32, bf16 or fp16, got '%s'", optarg);
        break;
    case OPT_FP32_GRADS: m->fp32_grads = 1; break;
    case OPT_ATTENTION:
        if (gpt_attention_parse(optarg, &m->attention) != 0)
            USER_ERROR("--attention expects materialized or fused, got '%s'", optarg);
        break;
    case OPT_LOSS_SCALE: o->loss_scale = cli_double("--loss-scale", optarg, 1.0, 1e30); break;
    case OPT_LOSS_SCALE_INTERVAL:
        o->loss_scale_interval = cli_int("--loss-scale-interval", optarg, 0, 1 << 30);
        break;
    case OPT_COUNT_FLUSHED: o->count_flushed = 1; break;
    default: return 0;
    }
    return 1;
}

/* The named config with the model flags applied, checked */
static void resolve_model(TrainOptions *o, const ModelFlags *f) {
    if (gpt_config_by_name(o->config_name, &o->model) != 0)
        USER_ERROR("unknown --config '%s' (known: %s)", o->config_name, gpt_config_names());
    GPTConfig *m = &o->model;
    if (f->n_layer) m->n_layer = f->n_layer;
    if (f->n_head) m->n_head = f->n_head;
    if (f->n_embd) m->n_embd = f->n_embd;
    if (f->ctx_len) m->ctx_len = f->ctx_len;
    if (f->vocab) m->vocab_size = f->vocab;
    if (f->experts > 0 && m->n_experts == 0) {  /* a dense config made MoE: the defaults */
        m->top_k = 1;
        m->capacity_factor = 1.25f;
        m->aux_loss_coef = 0.01f;
        m->moe_every = 1;
    }
    if (f->experts >= 0) m->n_experts = f->experts;
    if (m->n_experts == 0 && (f->top_k || f->capacity >= 0 || f->aux >= 0 || f->moe_every))
        USER_ERROR("--top-k, --capacity-factor, --aux-loss-coef and --moe-every set up experts: "
                   "give --experts E too (config %s is dense)", o->config_name);
    if (m->n_experts == 0) m->top_k = m->moe_every = 0, m->capacity_factor = m->aux_loss_coef = 0;
    if (f->top_k) m->top_k = f->top_k;
    if (f->capacity >= 0) m->capacity_factor = (float)f->capacity;
    if (f->aux >= 0) m->aux_loss_coef = (float)f->aux;
    if (f->moe_every) m->moe_every = f->moe_every;
    m->precision = f->precision;
    m->fp32_grads = f->fp32_grads;
    m->attention = f->attention;
    const char *problem = gpt_config_problem(m);
    if (problem)
        USER_ERROR("config %s can't be built: %s (n_layer %d, n_head %d, n_embd %d)",
                   o->config_name, problem, m->n_layer, m->n_head, m->n_embd);
}

/* --precision's companions: fp32 gradient buffers only under mixed
 * precision, the loss scale only under fp16; mixed precision only in a
 * build with its ops */
static void resolve_precision(TrainOptions *o, const TrainProgram *program) {
    const Precision p = (Precision)o->model.precision;
    if (p != PRECISION_FP32 && !program->mixed)
        USER_ERROR("--precision %s: this build has no mixed precision: %s", precision_name(p),
                   program->no_mixed);
    o->mixed = p != PRECISION_FP32 ? program->mixed : NULL;
    if (p == PRECISION_FP32 && o->model.fp32_grads)
        USER_ERROR("--fp32-grads keeps fp32 gradients under --precision bf16 or fp16; "
                   "fp32's are fp32 already");
    if (p != PRECISION_FP16 && (o->loss_scale >= 0 || o->loss_scale_interval >= 0))
        USER_ERROR("--loss-scale and --loss-scale-interval scale fp16's gradients: give "
                   "--precision fp16 (%s needs none)", precision_name(p));
    if (o->count_flushed && (p != PRECISION_FP16 || !o->model.fp32_grads))
        USER_ERROR("--count-flushed counts the fp32 gradients fp16 would round to zero: give "
                   "--precision fp16 --fp32-grads (2-byte gradients have lost them already)");
    if (o->loss_scale < 0) o->loss_scale = p == PRECISION_FP16 ? 65536.0 : 1.0;
    if (o->loss_scale_interval < 0) o->loss_scale_interval = p == PRECISION_FP16 ? 2000 : 0;
}

/* --attention fused: only in a build with its CPU forward pass (lab 05's),
 * which the kernels then run */
static void resolve_attention(const TrainOptions *o, const TrainProgram *program) {
    if (o->model.attention != ATTENTION_FUSED) return;
    if (!program->fused_forward)
        USER_ERROR("--attention fused: this build has no fused attention: %s", program->no_fused);
    kernels_set_cpu_fused_forward(program->fused_forward);
}

/* --threads' default: OMP_NUM_THREADS when set, else this node's cores
 * shared among its ranks (Open MPI's OMPI_COMM_WORLD_LOCAL_SIZE): 4 ranks
 * on 2 cores that each took both would run 8 threads on 2 cores, and every
 * step would wait on whichever thread the scheduler left out. */
static int default_threads(void) {
    if (getenv("OMP_NUM_THREADS")) return omp_get_max_threads();
    const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    const int ranks = local && atoi(local) > 0 ? atoi(local) : 1;
    const int threads = omp_get_num_procs() / ranks;
    return threads > 0 ? threads : 1;
}

/* The options that depend on others: the defaults that follow the model
 * and the run, and the combinations that can't be */
static void resolve_run(TrainOptions *o) {
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
    if (o->threads == 0) o->threads = default_threads();
}

/* A checkpoint flag given to a program built without checkpoint ops: one
 * clear error naming the flag (the first of them checked here) */
static void refuse_checkpoints_without_ops(const TrainOptions *o, const TrainProgram *p) {
    if (p->checkpoints) return;
    const char *flag = o->save[0] ? "--save" : o->resume[0] ? "--resume"
                       : o->save_every ? "--save-every" : o->keep ? "--keep"
                       : o->save_async ? "--save-async" : NULL;
    if (flag) USER_ERROR("%s: this build has no checkpoints: %s", flag, p->no_checkpoints);
}

/* The pipeline's flags: chunks 0 (not given) becomes 2 for the
 * interleaved schedule, else 1; --micro-batches (0: not given) takes
 * --grad-accum's place, since a pipeline's micro-batches are its
 * accumulation steps: both given and different is one clear error. */
static void resolve_pipeline(TrainOptions *o) {
    ParallelFlags *f = &o->parallel;
    if (f->chunks == 0)
        f->chunks = strcmp(f->schedule, "interleaved") == 0 || pipe_schedule_dual(f->schedule) ? 2 : 1;
    if (f->micro_batches && o->grad_accum != 1 && o->grad_accum != f->micro_batches)
        USER_ERROR("--micro-batches %d and --grad-accum %d: a pipeline's micro-batches are its "
                   "accumulation steps; give one of them", f->micro_batches, o->grad_accum);
    if (f->micro_batches) o->grad_accum = f->micro_batches;
}

/* getopt_long's table: the common options, p's parallel flags and p's own
 * (out has room for N_COMMON + PARALLEL_FLAG_COUNT + MAX_EXTRA + 1) */
enum { N_COMMON = sizeof g_common_options / sizeof *g_common_options, MAX_EXTRA = 16 };
static void long_options(const TrainProgram *p, struct option *out) {
    CHECK(p->n_extra <= MAX_EXTRA, "too many extra options (%d)", p->n_extra);
    memcpy(out, g_common_options, sizeof g_common_options);
    int n = N_COMMON;
    for (int i = 0; i < PARALLEL_FLAG_COUNT; i++)
        if (p->parallel & PARALLEL_FLAGS[i].dim)
            out[n++] = (struct option){PARALLEL_FLAGS[i].name,
                                       PARALLEL_FLAGS[i].has_arg ? required_argument : no_argument,
                                       0, OPT_PARALLEL};
    for (int i = 0; i < p->n_extra; i++)
        out[n++] = (struct option){p->extra[i].name,
                                   p->extra[i].has_arg ? required_argument : no_argument, 0,
                                   OPT_EXTRA};
    out[n] = (struct option){0, 0, 0, 0};
}

/* The program first: what it is, an example, its own options (its
 * parallel flags and extras); then the shared ones, grouped */
static void print_help(const TrainProgram *p, const char *argv0) {
    printf("usage: %s [options]\n", g_program_name);
    cli_print_paragraph(p->what);
    if (p->example_ranks)
        printf("\nexample, %d ranks:\n  mpirun -np %d %s %s\n", p->example_ranks, p->example_ranks,
               argv0, p->example);
    else
        printf("\nexample:\n  %s %s\n", argv0, p->example);
    if (p->parallel || p->n_extra) printf("\n%s's own options:\n", g_program_name);
    for (int i = 0; i < PARALLEL_FLAG_COUNT; i++)
        if (p->parallel & PARALLEL_FLAGS[i].dim) cli_print_option(PARALLEL_FLAGS[i].help);
    for (int i = 0; i < p->n_extra; i++) cli_print_option(p->extra[i].help);
    for (size_t g = 0; g < sizeof g_help_groups / sizeof *g_help_groups; g++)
        printf("\n%s:\n%s", g_help_groups[g][0], g_help_groups[g][1]);
}

void train_options_parse(int argc, char **argv, TrainOptions *o, const TrainProgram *p) {
    struct option long_opts[N_COMMON + PARALLEL_FLAG_COUNT + MAX_EXTRA + 1];
    long_options(p, long_opts);
    set_defaults(o, p);
    ModelFlags model = {.experts = -1, .capacity = -1.0, .aux = -1.0};
    const char *hint = "see --help";
    opterr = 0;  /* we print our own one-line message */
    int c, which;
    while ((c = getopt_long(argc, argv, "h", long_opts, &which)) != -1) {
        if (parse_common_option(c, optarg, o, &model)) continue;
        if (c == 'h') {
            print_help(p, argv[0]);
            exit(0);
        }
        if (c == OPT_PARALLEL) parallel_flags_set(&o->parallel, long_opts[which].name, optarg);
        else if (c == OPT_EXTRA) p->on_extra(p->ctx, long_opts[which].name, optarg);
        else cli_bad_option(argv[optind - 1], hint);
    }
    if (optind < argc) USER_ERROR("unexpected argument '%s'; %s", argv[optind], hint);
    refuse_checkpoints_without_ops(o, p);
    if (strcmp(o->device, "cpu") != 0 && strcmp(o->device, "cuda") != 0)
        USER_ERROR("--device expects cpu or cuda, got '%s'", o->device);
    resolve_model(o, &model);
    resolve_precision(o, p);
    resolve_attention(o, p);
    kernels_set_precision(o->model.precision);
    resolve_run(o);
    device_select(o->device);
    if (p->parallel & PAR_PP) resolve_pipeline(o);
}

int train_micro_batch_rows(const TrainOptions *o, int ranks) {
    if (o->batch % (ranks * o->grad_accum) != 0)
        USER_ERROR("--batch %d must be a multiple of ranks x --grad-accum = %d x %d", o->batch,
                   ranks, o->grad_accum);
    return o->batch / (ranks * o->grad_accum);
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

int train_steps_run(const TrainOptions *o) { return o->steps - o->first_step; }

size_t train_forward_passes(const TrainOptions *o) {
    size_t evals = 0;
    for (int s = o->first_step; s < o->steps; s++) evals += train_evaluates_at(o, s);
    return (size_t)o->grad_accum * ((size_t)train_steps_run(o) + evals * o->eval_batches);
}
