#include "runlog.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "device.h"
#include "fileio.h"
#include "git_rev.h"
#include "half_gemm.h"
#include "precision.h"

double wall_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static int by_value(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void timings_sort(double *x, size_t n) { qsort(x, n, sizeof *x, by_value); }

ProgressMode runlog_progress_by_name(const char *name) {
    if (strcmp(name, "auto") == 0) return PROGRESS_AUTO;
    if (strcmp(name, "lines") == 0) return PROGRESS_LINES;
    if (strcmp(name, "bar") == 0) return PROGRESS_BAR;
    USER_ERROR("--progress expects auto, lines or bar, got '%s'", name);
}

/* Whether a person watches stdout. Under Open MPI (OMPI_COMM_WORLD_SIZE
 * set) stdout is a pseudo-terminal that the parent reads and forwards:
 * mpirun, to its own stdout (a log file as often as a terminal), or on
 * another node orted (never a terminal). So the parent's stdout decides,
 * opened through /proc (O_NOCTTY: it never becomes our controlling
 * terminal); where /proc refuses, no one is assumed to watch. */
static int person_watches(void) {
    if (!isatty(STDOUT_FILENO)) return 0;
    if (!getenv("OMPI_COMM_WORLD_SIZE")) return 1;
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/1", (int)getppid());
    const int fd = open(path, O_RDONLY | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) return 0;
    const int tty = isatty(fd);
    close(fd);
    return tty;
}

void runlog_open(RunLog *r, const TrainOptions *o) {
    make_dirs(o->out_dir);
    snprintf(r->path, sizeof r->path, "%s/metrics.csv", o->out_dir);
    r->metrics = fopen(r->path, "w");
    IO_CHECK(r->metrics != NULL, "cannot create %s", r->path);
    r->scaled = o->model.precision == PRECISION_FP16;
    r->flush_counted = o->count_flushed;
    fprintf(r->metrics, "step,loss,val_loss,lr,grad_norm,tokens_per_s,step_ms%s%s\n",
            r->scaled ? ",loss_scale,skipped" : "", r->flush_counted ? ",flushed" : "");
    r->moe = NULL;
    r->experts = o->model.n_experts;
    if (r->experts > 0) {
        snprintf(r->moe_path, sizeof r->moe_path, "%s/moe.csv", o->out_dir);
        r->moe = fopen(r->moe_path, "w");
        IO_CHECK(r->moe != NULL, "cannot create %s", r->moe_path);
        IO_CHECK(fprintf(r->moe, "step,aux_loss,dropped") > 0, "cannot write %s", r->moe_path);
        for (int e = 0; e < r->experts; e++) fprintf(r->moe, ",load_%d", e);
        IO_CHECK(fprintf(r->moe, "\n") > 0, "cannot write %s", r->moe_path);
    }
    r->bar = o->progress == PROGRESS_BAR || (o->progress == PROGRESS_AUTO && person_watches());
    r->log_every = o->log_every;
    r->total_steps = o->steps;
    r->first_step = -1;
}

static void format_duration(char *buf, size_t n, double s) {
    long t = (long)(s + 0.5) % (100L * 3600 * 24);  /* caps the width: < 100 days */
    snprintf(buf, n, "%ld:%02ld", t / 60, t % 60);
}

/* The step's progress line on the console (runlog.h), if this step has one */
static void print_progress(RunLog *r, int step, float loss, float val_loss, float lr,
                           double tokens_per_s, double step_ms) {
    if (r->first_step < 0) {  /* the clock starts with the step, not before a resume's load */
        r->first_step = step;
        r->t_start = wall_seconds() - step_ms * 1e-3;
    }
    const int kept = val_loss >= 0 || step == r->total_steps - 1;  /* stays in either mode */
    if (!r->bar && !kept && step != r->first_step && step % r->log_every != 0) return;
    const int open = r->bar && !kept;  /* left for the next step's line to overwrite */
    const double pace = (wall_seconds() - r->t_start) / (step - r->first_step + 1);
    char eta[32], valtxt[32] = "";
    format_duration(eta, sizeof eta, pace * (r->total_steps - step - 1));
    if (val_loss >= 0) snprintf(valtxt, sizeof valtxt, " | val %.4f", val_loss);
    /* numbered as metrics.csv numbers it, from 0 to the last, total_steps - 1,
     * padded to the last's width: a bar does not jitter, lines align; a
     * bar's trailing blanks cover what a longer line left */
    const int last = r->total_steps - 1;
    printf("%sstep %*d/%d | loss %.4f%s | lr %.2e | %.1fk tok/s | %.1f ms | ETA %s%s%s",
           r->bar ? "\r" : "", snprintf(NULL, 0, "%d", last), step, last,
           loss, valtxt, lr, tokens_per_s / 1000, step_ms, eta, r->bar ? "   " : "",
           open ? "" : "\n");
    fflush(stdout);
    check_set_open_line(open);
}

void runlog_step(RunLog *r, int step, float loss, float val_loss, float lr, float grad_norm,
                 double tokens_per_s, double step_ms, const LossScaler *scaler) {
    char val[32] = "", scaling[80] = "";
    if (val_loss >= 0) snprintf(val, sizeof val, "%.9g", val_loss);
    if (r->scaled && r->flush_counted)
        snprintf(scaling, sizeof scaling, ",%.9g,%d,%lld", scaler->scale, scaler->overflowed,
                 scaler->flushed);
    else if (r->scaled)
        snprintf(scaling, sizeof scaling, ",%.9g,%d", scaler->scale, scaler->overflowed);
    IO_CHECK(fprintf(r->metrics, "%d,%.9g,%s,%.9g,%.9g,%.1f,%.3f%s\n", step, loss, val, lr,
                     grad_norm, tokens_per_s, step_ms, scaling) > 0 && fflush(r->metrics) == 0,
             "cannot write %s", r->path);
    print_progress(r, step, loss, val_loss, lr, tokens_per_s, step_ms);
}

void runlog_moe_step(RunLog *r, int step, double aux_loss, double dropped, const double *load) {
    IO_CHECK(fprintf(r->moe, "%d,%.9g,%.0f", step, aux_loss, dropped) > 0, "cannot write %s",
             r->moe_path);
    for (int e = 0; e < r->experts; e++) fprintf(r->moe, ",%.0f", load[e]);
    IO_CHECK(fprintf(r->moe, "\n") > 0 && fflush(r->moe) == 0, "cannot write %s", r->moe_path);
}

void runlog_close(RunLog *r) {
    IO_CHECK(fclose(r->metrics) == 0, "cannot write %s", r->path);
    r->metrics = NULL;
    if (r->moe) IO_CHECK(fclose(r->moe) == 0, "cannot write %s", r->moe_path);
    r->moe = NULL;
}

static void json_str(FILE *f, const char *key, const char *v, int comma) {
    fprintf(f, "  \"%s\": \"", key);
    for (const char *c = v; *c; c++) {
        if (*c == '"' || *c == '\\') fputc('\\', f);
        if ((unsigned char)*c >= 0x20) fputc(*c, f);
    }
    fprintf(f, "\"%s\n", comma ? "," : "");
}

void runlog_write_run_json(const char *path, const TrainOptions *o, const char *lab,
                           int world_size, int dp, const GPTLayout *l, size_t num_params) {
    AtomicFile af;
    FILE *f = atomic_open(&af, path);
    const GPTConfig *m = &o->model;
    fprintf(f, "{\n");
    json_str(f, "lab", lab, 1);
    json_str(f, "config", o->config_name, 1);
    fprintf(f, "  \"model\": {\"vocab_size\": %d, \"ctx_len\": %d, \"n_layer\": %d, "
               "\"n_head\": %d, \"n_embd\": %d, \"num_params\": %zu, \"flops_per_token\": %.0f",
            m->vocab_size, m->ctx_len, m->n_layer, m->n_head, m->n_embd, num_params,
            gpt_flops_per_token(m, o->seq));
    if (m->n_experts > 0)  /* a mixture of experts (config.h) */
        fprintf(f, ", \"n_experts\": %d, \"top_k\": %d, \"capacity_factor\": %.6g, "
                   "\"aux_loss_coef\": %.6g, \"moe_every\": %d",
                m->n_experts, m->top_k, m->capacity_factor, m->aux_loss_coef, m->moe_every);
    fprintf(f, ", \"precision\": \"%s\", \"fp32_grads\": %s},\n",
            precision_name((Precision)m->precision), m->fp32_grads ? "true" : "false");
    fprintf(f, "  \"train\": {\"steps\": %d, \"batch\": %d, \"seq\": %d, \"lr\": %.9g, "
               "\"min_lr_frac\": %.9g, \"warmup\": %d, \"weight_decay\": %.9g, "
               "\"beta1\": %.9g, \"beta2\": %.9g, \"eps\": %.9g, \"grad_clip\": %.9g, "
               "\"seed\": %llu, \"eval_every\": %d, \"eval_batches\": %d, "
               "\"val_fraction\": %.9g},\n",
            o->steps, o->batch, o->seq, o->lr, o->min_lr_frac, o->warmup, o->weight_decay,
            o->beta1, o->beta2, o->eps, o->grad_clip, o->seed, o->eval_every, o->eval_batches,
            o->val_fraction);
    json_str(f, "data", o->data_path, 1);
    fprintf(f, "  \"world\": {\"size\": %d, \"dp\": %d, \"tp\": %d, \"pp\": %d, \"cp\": %d, "
               "\"ep\": 1},\n", world_size, dp, l->tp, l->pp, l->cp);
    const int gpu = device_current() == DEVICE_CUDA;
    fprintf(f, "  \"backend\": {\"device\": \"%s\", \"threads\": %d, \"blas\": \"%s\"",
            o->device, o->threads, gpu ? "cublas" : "openblas");
    if (!gpu && m->precision != PRECISION_FP32)  /* the linear layers' GEMMs */
        fprintf(f, ", \"half_gemm\": \"%s\"", half_gemm_backend(m->precision));
    /* the driver's count at the end of the run: context and library
     * workspaces included, unlike memory.csv's logical bytes */
    if (gpu)
        fprintf(f, ", \"gpu\": \"%s\", \"gpu_memory_in_use_bytes\": %zu", device_description(),
                device_driver_used_bytes());
    fprintf(f, "},\n");
    json_str(f, "git_revision", DTLAB_GIT_REV, 0);
    fprintf(f, "}\n");
    atomic_commit(&af);
}
