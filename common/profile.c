/* profile.c: the per-kernel table and the roofline (profile.h). */
#include "profile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "device.h"
#include "fileio.h"
#include "kernels.h"
#include "runlog.h"

enum { MAX_KERNELS = 32 };

typedef struct {
    const char *name;
    long calls;
    double seconds, flops, bytes;
} KernelTotals;

static struct {
    int enabled, active, steps;
    double step_seconds;
    int n;
    KernelTotals k[MAX_KERNELS];
} g_prof;

void profile_enable(void) { g_prof.enabled = 1; }
void profile_set_active(int on) { g_prof.active = g_prof.enabled && on; }

double profile_begin(void) {
    if (!g_prof.active) return 0.0;
    device_synchronize();  /* what was queued before is not this kernel's */
    return wall_seconds();
}

void profile_end(const char *name, double t0, double flops, double bytes) {
    if (!g_prof.active) return;
    device_synchronize();
    double dt = wall_seconds() - t0;
    int i = 0;
    while (i < g_prof.n && strcmp(g_prof.k[i].name, name) != 0) i++;
    if (i == g_prof.n) {
        CHECK(g_prof.n < MAX_KERNELS, "profile: more than %d kernels", MAX_KERNELS);
        g_prof.k[g_prof.n++] = (KernelTotals){name, 0, 0.0, 0.0, 0.0};
    }
    g_prof.k[i].calls++;
    g_prof.k[i].seconds += dt;
    g_prof.k[i].flops += flops;
    g_prof.k[i].bytes += bytes;
}

void profile_add_step(double step_seconds) {
    if (!g_prof.active) return;
    g_prof.steps++;
    g_prof.step_seconds += step_seconds;
}

/* ---- the ceilings -------------------------------------------------------- */

static float *scratch_floats(size_t n) {
    float *p;
    if (device_current() == DEVICE_CUDA) {
        p = device_alloc(n * sizeof(float));
    } else {
        p = malloc(n * sizeof(float));
        if (p) memset(p, 0, n * sizeof(float));  /* touched: no page faults in the timing */
    }
    CHECK(p != NULL, "profile: out of memory for the ceilings' %zu floats", n);
    return p;
}

static void scratch_free(float *p) {
    if (device_current() == DEVICE_CUDA) device_free(p);
    else free(p);
}

/* Fastest of 7 runs of a GEMM (which = 0) or a streaming add (1), after
 * one not counted: a ceiling is the best the machine does, and other work
 * on it only ever slows a run down. */
static double best_seconds(int which, float **b, int M, int N, int K, size_t n) {
    double best = 1e30;
    for (int r = -1; r < 7; r++) {
        device_synchronize();
        double t0 = wall_seconds();
        if (which == 0) sgemm_rowmajor(0, 1, M, N, K, 1.0f, b[0], K, b[1], K, 0.0f, b[2], N);
        else add_inplace(b[3], b[4], n);
        device_synchronize();
        double dt = wall_seconds() - t0;
        if (r >= 0 && dt < best) best = dt;
    }
    return best;
}

/* P: GFLOP/s of the MLP's up-projection as matmul_forward lays it out,
 * (rows x C) times (4C x C)^T. W: GB/s of x += y over 2 x 128 MB, 12 bytes
 * per element (read x and y, write x). */
static void measure_ceilings(int rows, int C, double *gflops, double *gbps) {
    const size_t n = (size_t)32 << 20;
    float *b[5] = {scratch_floats((size_t)rows * C), scratch_floats((size_t)4 * C * C),
                   scratch_floats((size_t)rows * 4 * C), scratch_floats(n), scratch_floats(n)};
    *gflops = 2.0 * rows * C * 4.0 * C / best_seconds(0, b, rows, 4 * C, C, 0) / 1e9;
    *gbps = 12.0 * n / best_seconds(1, b, 0, 0, 0, n) / 1e9;
    for (int i = 0; i < 5; i++) scratch_free(b[i]);
}

/* ---- the report ---------------------------------------------------------- */

static int by_time(const void *a, const void *b) {
    const KernelTotals *x = a, *y = b;
    return (x->seconds < y->seconds) - (x->seconds > y->seconds);
}

void profile_report(const char *out_dir, int rows, int C) {
    if (!g_prof.enabled) return;
    profile_set_active(0);
    if (g_prof.steps == 0) {
        printf("%s: --profile: no step after the first to profile (use --steps 2 or more)\n",
               g_program_name);
        return;
    }
    double P, W;
    measure_ceilings(rows, C, &P, &W);
    const double ridge = P / W, steps = g_prof.steps, step_ms = 1e3 * g_prof.step_seconds / steps;
    qsort(g_prof.k, g_prof.n, sizeof g_prof.k[0], by_time);

    char path[1024];
    snprintf(path, sizeof path, "%s/profile.csv", out_dir);
    AtomicFile af;
    FILE *csv = atomic_open(&af, path);
    fprintf(csv, "kernel,calls_per_step,ms_per_step,share,gflop_per_step,mb_per_step,"
                 "flop_per_byte,gflops,gbps,bound,roof_fraction,peak_gflops,peak_gbps\n");
    printf("\n%s: profile of %d steps (the first and the evaluations left out), %.1f ms a step\n"
           "ceilings measured now on %s: GEMM %.1f GFLOP/s ((%d x %d) x (%d x %d)), memory "
           "%.1f GB/s (x += y, 2 x 128 MB);\nridge %.1f FLOP/byte: below it a kernel is "
           "memory-bound, above it compute-bound\n\n",
           g_program_name, g_prof.steps, step_ms, device_description(), P, rows, C, C, 4 * C, W,
           ridge);
    printf("%-22s %6s %9s %6s %9s %9s %8s %8s %8s  %-7s %6s\n", "kernel", "calls", "ms/step",
           "share", "GFLOP", "MB", "FLOP/B", "GFLOP/s", "GB/s", "bound", "roof");
    double kernels_ms = 0.0, gemm_ms = 0.0;
    for (int i = 0; i < g_prof.n; i++) {
        const KernelTotals *k = &g_prof.k[i];
        double ms = 1e3 * k->seconds / steps, gflop = k->flops / steps / 1e9;
        double mb = k->bytes / steps / 1e6, ai = k->bytes > 0 ? k->flops / k->bytes : 0.0;
        double rate = k->seconds > 0 ? k->flops / k->seconds / 1e9 : 0.0;
        double bw = k->seconds > 0 ? k->bytes / k->seconds / 1e9 : 0.0;
        /* the roofline's bound at this intensity, and the share of it reached */
        double roof = ai < ridge ? ai * W : P;
        const char *bound = ai < ridge ? "memory" : "compute";
        double frac = roof > 0 ? rate / roof : 0.0;
        kernels_ms += ms;
        if (strncmp(k->name, "matmul_", 7) == 0) gemm_ms += ms;
        printf("%-22s %6.0f %9.3f %5.1f%% %9.4f %9.2f %8.2f %8.1f %8.1f  %-7s %5.0f%%\n",
               k->name, k->calls / steps, ms, 100 * ms / step_ms, gflop, mb, ai, rate, bw, bound,
               100 * frac);
        fprintf(csv, "%s,%.2f,%.4f,%.4f,%.6f,%.4f,%.4f,%.3f,%.3f,%s,%.4f,%.3f,%.3f\n", k->name,
                k->calls / steps, ms, ms / step_ms, gflop, mb, ai, rate, bw, bound, frac, P, W);
    }
    double other = step_ms - kernels_ms;
    printf("%-22s %6s %9.3f %5.1f%%  (communication, data loading, the loop's own work)\n",
           "outside kernels", "", other, 100 * other / step_ms);
    printf("\nGEMMs (matmul_forward + matmul_backward): %.1f%% of the step\n",
           100 * gemm_ms / step_ms);
    atomic_commit(&af);
    printf("%s: wrote %s/profile.csv (tools/plot_roofline.sh %s draws its roofline)\n",
           g_program_name, out_dir, out_dir);
}
