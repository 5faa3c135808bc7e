/* profile.h: where a training step's time goes, kernel by kernel, against
 * the machine's own ceilings (the roofline model).
 *
 * Every kernel of kernels.h passes through kernels.c, which, while the
 * profiler is active, times the call (after device_synchronize on a GPU, so
 * that the time is the kernel's and not its launch's) and adds what the
 * call asked for:
 *   FLOPs  the arithmetic of the kernel's formula (a GEMM's 2MNK; an
 *          elementwise kernel's operations per element times n, counted
 *          from math_shared.h);
 *   bytes  the floats it must read and write at least once (4 bytes each):
 *          the traffic to memory if no cache held anything between calls.
 * Arithmetic intensity I = FLOPs / bytes. The roofline bounds a kernel's
 * rate by min(P, I x W), P the machine's GEMM rate and W its memory
 * bandwidth, both measured here by profile_report: a kernel with I < P / W
 * (the ridge) is memory-bound, one above it compute-bound.
 *
 * The trainers turn it on with --profile: train_run activates it for the
 * training steps after the first (evaluation and warm-up left out) and
 * calls profile_report at the end, which prints the table and writes
 * OUT/profile.csv. */
#ifndef PROFILE_H
#define PROFILE_H

void profile_enable(void);   /* --profile: record while active */
void profile_set_active(int on);  /* the training loop: which calls count */

/* kernels.c, around each kernel call: begin returns the start time (0 when
 * not recording); end adds the call to kernel `name` (a string literal). */
double profile_begin(void);
void profile_end(const char *name, double t0, double flops, double bytes);

/* Count one profiled step of step_seconds (the table is per step). */
void profile_add_step(double step_seconds);

/* Measure the ceilings on the current device with the run's threads (a
 * GEMM of the MLP's shape, rows x C by C x 4C, and a streaming add over
 * arrays far larger than the caches), print the table, and write it to
 * out_dir/profile.csv, the ceilings in its last two columns
 * (tools/plot_roofline.sh draws the chart from it). */
void profile_report(const char *out_dir, int rows, int C);

#endif
