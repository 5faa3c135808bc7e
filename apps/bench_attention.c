/* bench_attention: materialized against fused attention (config.h's
 * GPTAttention), the kernels alone, for `make bench-attention`. At each
 * sequence length T of a head shape (default GPT-2's: 12 heads of 64), the
 * median wall time of the forward and the backward pass over --reps calls
 * after one to warm up, all of OpenMP's threads, and the bytes each path
 * keeps for its backward pass (materialized: the probabilities, B NH T^2
 * floats; fused: the lse, B NH T) and its backward scratch (datt, or D):
 *   path,T,forward_ms,backward_ms,total_ms,kept_bytes,scratch_bytes
 * The CPU's fused forward pass is lab 05's extension (the build's: absent,
 * the fused rows are left out and said so). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "backward_kernels.h"
#include "check.h"
#include "cli.h"
#include "config.h"
#include "fused_attention_ops.h"
#include "kernels.h"
#include "model.h"
#include "rng.h"
#include "runlog.h"

enum { MAX_SEQS = 32 };

/* random inputs (tag > 0), or zeros for what the passes write */
static float *filled(size_t n, uint32_t tag) {
    float *x = mem_alloc(MEM_WORKSPACE, n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = tag ? rng_normal(5, RNG_STREAM_TEST, i, tag) : 0.0f;
    return x;
}

/* One path at one T: its median forward and backward milliseconds */
static void time_path(int fused, int B, int T, int C, int NH, int reps, double *fwd_ms,
                      double *bwd_ms) {
    const size_t BTC = (size_t)B * T * C, kept = gpt_attention_whole_keep_floats(fused, B, T, NH);
    float *qkv = filled(3 * BTC, 1), *dout = filled(BTC, 2), *out = filled(BTC, 0);
    float *keep = filled(kept, 0), *scratch = filled(kept, 0), *dqkv = filled(3 * BTC, 0);
    double *f = malloc(reps * sizeof *f), *b = malloc(reps * sizeof *b);
    CHECK(f && b, "out of memory");
    for (int r = -1; r < reps; r++) {
        double t0 = wall_seconds();
        gpt_attention_whole_forward(fused, out, keep, qkv, B, T, C, NH);
        double t1 = wall_seconds();
        gpt_attention_whole_backward(fused, dqkv, scratch, dout, qkv, out, keep, B, T, C, NH);
        double t2 = wall_seconds();
        if (r >= 0) f[r] = 1e3 * (t1 - t0), b[r] = 1e3 * (t2 - t1);
    }
    timings_sort(f, reps);
    timings_sort(b, reps);
    *fwd_ms = f[reps / 2], *bwd_ms = b[reps / 2];
    free(f), free(b);
    float *all[] = {qkv, dout, out, keep, scratch, dqkv};
    for (int i = 0; i < 6; i++) mem_free(all[i]);
}

/* "128,256,..." into seqs; returns how many */
static int parse_seqs(const char *arg, int *seqs) {
    int n = 0;
    char buf[256];
    cli_string(buf, sizeof buf, "--seqs", arg);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        if (n == MAX_SEQS) USER_ERROR("--seqs takes at most %d lengths", MAX_SEQS);
        seqs[n++] = (int)cli_int("--seqs", tok, 1, 1 << 16);
    }
    if (n == 0) USER_ERROR("--seqs wants lengths like 128,256, got '%s'", arg);
    return n;
}

int main(int argc, char **argv) {
    program_set_name(argv[0]);
    kernels_set_cpu_backward(program_backward_kernels());
    static const struct option opts[] = {{"seqs", required_argument, 0, 's'},
                                         {"batch", required_argument, 0, 'b'},
                                         {"heads", required_argument, 0, 'n'},
                                         {"head-size", required_argument, 0, 'd'},
                                         {"reps", required_argument, 0, 'r'},
                                         {"path", required_argument, 0, 'p'},
                                         {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    int seqs[MAX_SEQS] = {128, 256, 512, 1024, 2048}, n_seqs = 5, B = 1, NH = 12, hs = 64;
    int reps = 3, ch, only = -1;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (ch) {
        case 's': n_seqs = parse_seqs(optarg, seqs); break;
        case 'b': B = (int)cli_int("--batch", optarg, 1, 1024); break;
        case 'n': NH = (int)cli_int("--heads", optarg, 1, 1024); break;
        case 'd': hs = (int)cli_int("--head-size", optarg, 1, 1024); break;
        case 'r': reps = (int)cli_int("--reps", optarg, 1, 1000); break;
        case 'p':
            if (gpt_attention_parse(optarg, &only) != 0)
                USER_ERROR("--path expects materialized or fused, got '%s'", optarg);
            break;
        case 'h':
            printf("usage: %s [--seqs T1,T2,...] [--batch B] [--heads NH] [--head-size HS]\n"
                   "       [--reps N] [--path materialized|fused]\n"
                   "Time materialized and fused attention's kernels (forward, backward) at\n"
                   "each T, B sequences of NH heads of HS (default 128..2048, 1, 12, 64: one\n"
                   "GPT-2 layer), the median of N calls (default 3); CSV on stdout. --path:\n"
                   "that one only (default both).\n",
                   g_program_name);
            return 0;
        default: cli_bad_option(argv[optind - 1], "see --help");
        }
    }
    if (optind < argc) USER_ERROR("unexpected argument '%s'; see --help", argv[optind]);
    const int have_fused = program_fused_attention() != NULL;
    if (have_fused) kernels_set_cpu_fused_forward(program_fused_attention());
    else if (only == ATTENTION_FUSED)
        USER_ERROR("--path fused: this build has no fused attention (lab 05's extension)");
    else fprintf(stderr, "%s: no fused attention in this build (lab 05's extension): "
                 "materialized only\n", g_program_name);
    printf("path,T,forward_ms,backward_ms,total_ms,kept_bytes,scratch_bytes\n");
    for (int i = 0; i < n_seqs; i++)
        for (int fused = 0; fused <= have_fused; fused++) {
            if (only >= 0 && fused != only) continue;
            const int T = seqs[i];
            double f, b;
            time_path(fused, B, T, NH * hs, NH, reps, &f, &b);
            const size_t kept = sizeof(float) * gpt_attention_whole_keep_floats(fused, B, T, NH);
            printf("%s,%d,%.3f,%.3f,%.3f,%zu,%zu\n", gpt_attention_name(fused), T, f, b, f + b,
                   kept, kept);
            fflush(stdout);
        }
    return 0;
}
