#include "runlog.h"

#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "device.h"
#include "fileio.h"
#include "git_rev.h"

double wall_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

void runlog_open(RunLog *r, const TrainOptions *o) {
    make_dirs(o->out_dir);
    snprintf(r->path, sizeof r->path, "%s/metrics.csv", o->out_dir);
    r->metrics = fopen(r->path, "w");
    IO_CHECK(r->metrics != NULL, "cannot create %s", r->path);
    fprintf(r->metrics, "step,loss,val_loss,lr,grad_norm,tokens_per_s,step_ms\n");
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
    r->tty = isatty(STDOUT_FILENO);
    r->log_every = o->log_every;
    r->total_steps = o->steps;
    r->t_start = wall_seconds();
}

static void format_duration(char *buf, size_t n, double s) {
    long t = (long)(s + 0.5) % (100L * 3600 * 24);  /* caps the width: < 100 days */
    snprintf(buf, n, "%ld:%02ld", t / 60, t % 60);
}

void runlog_step(RunLog *r, int step, float loss, float val_loss, float lr, float grad_norm,
                 double tokens_per_s, double step_ms) {
    char val[32] = "";
    if (val_loss >= 0) snprintf(val, sizeof val, "%.9g", val_loss);
    IO_CHECK(fprintf(r->metrics, "%d,%.9g,%s,%.9g,%.9g,%.1f,%.3f\n", step, loss, val, lr,
                     grad_norm, tokens_per_s, step_ms) > 0 && fflush(r->metrics) == 0,
             "cannot write %s", r->path);

    int last = step == r->total_steps - 1;
    double elapsed = wall_seconds() - r->t_start;
    char eta[32];
    format_duration(eta, sizeof eta, elapsed / (step + 1) * (r->total_steps - step - 1));
    char valtxt[32] = "";
    if (val_loss >= 0) snprintf(valtxt, sizeof valtxt, " | val %.4f", val_loss);
    if (r->tty) {
        printf("\rstep %*d/%d | loss %.4f%s | lr %.2e | %.1fk tok/s | ETA %s   ", 6, step + 1,
               r->total_steps, loss, valtxt, lr, tokens_per_s / 1000, eta);
        if (last) printf("\n");
        fflush(stdout);
        check_set_open_line(!last);
    } else if (step % r->log_every == 0 || last || val_loss >= 0) {
        printf("step %d/%d | loss %.4f%s | lr %.2e | %.1fk tok/s | %.1f ms\n", step + 1,
               r->total_steps, loss, valtxt, lr, tokens_per_s / 1000, step_ms);
        fflush(stdout);
    }
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
    fprintf(f, "},\n");
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
