#include "train.h"

#include <getopt.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "check.h"
#include "cli.h"
#include "dataloader.h"
#include "kernels.h"
#include "runlog.h"
#include "tokens.h"

static const char *const g_usage =
    "usage: %s [options]\n"
    "Train a GPT on one device (lab 00's reference trainer).\n"
    "\n"
    "  --config NAME        tiny | small | gpt2-124m            (default tiny)\n"
    "  --data FILE          token file                (default build/data/synth.tok)\n"
    "  --out DIR            run directory      (default runs/00_single_device-CONFIG)\n"
    "  --steps N            optimizer steps                             (default 200)\n"
    "  --batch B            sequences per step       (default: tiny 8, small 16, gpt2 8)\n"
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
    "  --log-every N        console line every N steps (not on a terminal) (default 10)\n"
    "  --threads N          OpenMP/BLAS threads (default: OMP_NUM_THREADS or all cores)\n"
    "  --device cpu         backend                                    (default cpu)\n"
    "  --n-layer L --n-head H --n-embd C --ctx T   override the named config\n"
    "  -h, --help           this text\n";

enum {
    OPT_CONFIG = 1000, OPT_DATA, OPT_OUT, OPT_STEPS, OPT_BATCH, OPT_SEQ, OPT_LR, OPT_MIN_LR,
    OPT_WARMUP, OPT_WD, OPT_BETA1, OPT_BETA2, OPT_EPS, OPT_CLIP, OPT_SEED, OPT_EVAL_EVERY,
    OPT_EVAL_BATCHES, OPT_VAL_FRACTION, OPT_LOG_EVERY, OPT_THREADS, OPT_DEVICE, OPT_N_LAYER,
    OPT_N_HEAD, OPT_N_EMBD, OPT_CTX
};

void train_options_parse(int argc, char **argv, TrainOptions *o) {
    static const struct option long_opts[] = {
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
        {"threads", required_argument, 0, OPT_THREADS},
        {"device", required_argument, 0, OPT_DEVICE},
        {"n-layer", required_argument, 0, OPT_N_LAYER},
        {"n-head", required_argument, 0, OPT_N_HEAD},
        {"n-embd", required_argument, 0, OPT_N_EMBD}, {"ctx", required_argument, 0, OPT_CTX},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    memset(o, 0, sizeof *o);
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
    int n_layer = 0, n_head = 0, n_embd = 0, ctx = 0;
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
        case OPT_THREADS: o->threads = cli_int("--threads", optarg, 1, 1024); break;
        case OPT_DEVICE: cli_string(o->device, sizeof o->device, "--device", optarg); break;
        case OPT_N_LAYER: n_layer = cli_int("--n-layer", optarg, 1, 1024); break;
        case OPT_N_HEAD: n_head = cli_int("--n-head", optarg, 1, 1024); break;
        case OPT_N_EMBD: n_embd = cli_int("--n-embd", optarg, 1, 65536); break;
        case OPT_CTX: ctx = cli_int("--ctx", optarg, 1, 1 << 20); break;
        case 'h': printf(g_usage, g_program_name); exit(0);
        default: cli_bad_option(f, hint);
        }
    }
    if (optind < argc) USER_ERROR("unexpected argument '%s'; %s", argv[optind], hint);

    if (strcmp(o->device, "cpu") != 0) {
        if (strcmp(o->device, "cuda") == 0)
            USER_ERROR("--device cuda: this build has no CUDA backend yet; use --device cpu");
        USER_ERROR("--device expects cpu or cuda, got '%s'", o->device);
    }
    if (gpt_config_by_name(o->config_name, &o->model) != 0)
        USER_ERROR("unknown --config '%s' (known: %s)", o->config_name, gpt_config_names());
    if (n_layer) o->model.n_layer = n_layer;
    if (n_head) o->model.n_head = n_head;
    if (n_embd) o->model.n_embd = n_embd;
    if (ctx) o->model.ctx_len = ctx;
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
    if (o->out_dir[0] == '\0')
        snprintf(o->out_dir, sizeof o->out_dir, "runs/00_single_device-%s", o->config_name);
    if (o->threads == 0) o->threads = omp_get_max_threads();
}

float lr_at_step(const TrainOptions *o, int step) {
    if (step < o->warmup) return (float)(o->lr * (step + 1) / o->warmup);
    int decay_steps = o->steps - 1 - o->warmup;
    double progress = decay_steps > 0 ? (double)(step - o->warmup) / decay_steps : 1.0;
    double min_lr = o->lr * o->min_lr_frac;
    return (float)(min_lr + 0.5 * (o->lr - min_lr) * (1.0 + cos(M_PI * progress)));
}

float grad_clip_factor(double norm, double max_norm) {
    if (max_norm <= 0 || norm <= max_norm) return 1.0f;
    return (float)(max_norm / norm);
}

/* Mean loss over the fixed held-out batches 0..eval_batches-1. */
static float evaluate(const TrainOptions *o, const DataLoader *dl, const GPTParams *p,
                      GPTActs *a) {
    double total = 0.0;
    for (int e = 0; e < o->eval_batches; e++) {
        dataloader_fill(dl, SPLIT_VAL, (uint64_t)e, 0, o->batch, o->seq, a->inputs, a->targets);
        total += gpt_forward(&o->model, p, a);
    }
    return (float)(total / o->eval_batches);
}

void train_run(const TrainOptions *o) {
    const GPTConfig *cfg = &o->model;
    omp_set_num_threads(o->threads);

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

    /* Model states: 4 bytes each of params and grads, 8 of AdamW moments. */
    const size_t nparams = gpt_num_params(cfg);
    float *params = mem_alloc(MEM_PARAMS, nparams * sizeof(float));
    float *grads = mem_alloc(MEM_GRADS, nparams * sizeof(float));
    float *adam_m = mem_alloc(MEM_OPTIMIZER, nparams * sizeof(float));
    float *adam_v = mem_alloc(MEM_OPTIMIZER, nparams * sizeof(float));
    gpt_init_params(cfg, o->seed, 0, nparams, params);
    GPTParams p, g;
    gpt_params_view(cfg, params, &p);
    gpt_params_view(cfg, grads, &g);
    GPTActs acts;
    BackwardScratch scratch;
    gpt_acts_alloc(cfg, o->batch, o->seq, &acts, &scratch);

    printf("%s: config %s, %zu parameters, batch %d x %d tokens, %d steps, %d thread%s, data %s\n",
           g_program_name, o->config_name, nparams, o->batch, o->seq, o->steps, o->threads,
           o->threads == 1 ? "" : "s", o->data_path);
    RunLog log;
    runlog_open(&log, o);
    const double tokens_per_step = (double)o->batch * o->seq;
    for (int step = 0; step < o->steps; step++) {
        int last = step == o->steps - 1;
        float val_loss = -1.0f;
        if (last || (o->eval_every > 0 && step % o->eval_every == 0))
            val_loss = evaluate(o, &dl, &p, &acts);

        double t0 = wall_seconds();
        float lr = lr_at_step(o, step);
        dataloader_fill(&dl, SPLIT_TRAIN, (uint64_t)step, 0, o->batch, o->seq, acts.inputs,
                        acts.targets);
        memset(grads, 0, nparams * sizeof(float));
        float loss = gpt_forward(cfg, &p, &acts);
        if (!isfinite(loss))
            die_at(__FILE__, __LINE__, "loss is %f at step %d: training diverged", loss, step);
        gpt_backward(cfg, &p, &g, &acts, &scratch);
        double norm = sqrt(sum_squares(grads, nparams));
        float clip = grad_clip_factor(norm, o->grad_clip);
        if (clip < 1.0f) scale_inplace(grads, clip, nparams);
        adamw_update(params, grads, adam_m, adam_v, nparams, lr, (float)o->beta1,
                     (float)o->beta2, (float)o->eps, (float)o->weight_decay, step + 1);
        double dt = wall_seconds() - t0;
        runlog_step(&log, step, loss, val_loss, lr, (float)norm, tokens_per_step / dt, dt * 1e3);
    }
    runlog_close(&log);

    char path[1024];
    snprintf(path, sizeof path, "%s/memory.csv", o->out_dir);
    mem_write_csv(path, 0);
    snprintf(path, sizeof path, "%s/run.json", o->out_dir);
    runlog_write_run_json(path, o, "00_single_device", 1, nparams);
    printf("%s: wrote %s/{metrics.csv,memory.csv,run.json}\n", g_program_name, o->out_dir);

    gpt_acts_free(&acts, &scratch);
    gpt_params_view_free(&p);
    gpt_params_view_free(&g);
    mem_free(params);
    mem_free(grads);
    mem_free(adam_m);
    mem_free(adam_v);
    tokens_free(&tf);
}
