#!/usr/bin/env bash
# help: lab 09: a job killed at exponential times and resumed, wall time per save interval against Young/Daly
# bench/failures.sh (`make bench-failures`): lab 09's time budget, predicted
# and then simulated. A job that saves every tau seconds of work at a cost of
# C seconds a save, restarts in R seconds and fails at a mean time between
# failures M loses C/tau of its time to saves and, at each failure, the
# work since the last save plus the restart. Young's interval minimizes the
# loss to first order, tau* = sqrt(2 C M); Daly (2006) gives the expected
# wall time for exponential failures exactly, a segment of tau work and one
# save at a time:
#     E[T] = M e^(R/M) (e^((tau + C)/M) - 1)   for each segment
# (summed over the job's segments; plus the first launch's start-up S).
# This benchmark measures C, R, S and the time a step takes with lab 09's
# train_gpt, predicts E[T] for five intervals around Young's, then runs the
# job with each interval under tools/run_with_failures.sh (SIGKILL at
# exponential times of mean M, relaunched from the newest checkpoint) for
# several failure seeds (the same seeds for every interval), and prints and
# draws the measured wall times against the prediction, and against the
# model replayed with each job's own failure times (Daly's E[T] is an
# average over all failure sequences; a few seeds' mean strays from it, by
# chance, and the replay shows how much). Every finished job's
# parameters are compared with the uninterrupted run's: bit for bit, or the
# benchmark fails.
# M is seconds here, not hours: what sets the optimum and the loss is the
# ratios C/M and R/M, so a small model failing every few seconds plays a
# large one failing every few hours. Timings are printed, not checked.
# Settings (environment):
#   BENCH_MTBF     the mean time between failures, seconds (default 6)
#   BENCH_SEEDS    failure seeds per interval (default 4)
#   BENCH_WORK     seconds of training per job, about (default 15)
#   BENCH_OUT      output directory (default runs/failures-bench)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
BENCH_NAME=bench-failures
SKIP=0
source bench/common.sh

M=${BENCH_MTBF:-6}
SEEDS=${BENCH_SEEDS:-4}
WORK=${BENCH_WORK:-15}
OUT=${BENCH_OUT:-runs/failures-bench}
LIMIT=600
awk -v m="$M" -v w="$WORK" 'BEGIN { exit !(m + 0 > 0 && w + 0 > 0) }' \
    || die "BENCH_MTBF and BENCH_WORK must be positive seconds, got '$M' and '$WORK'"
[[ "$SEEDS" =~ ^[1-9][0-9]*$ ]] || die "BENCH_SEEDS must be a positive whole number, got '$SEEDS'"
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1} OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
GPT=$(bench_program 09_checkpoint train_gpt)
[ -x "$GPT" ] || die "$GPT not built (make all)"
rm -rf "$OUT"
mkdir -p "$OUT"
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.3f\n", b - a }'; }

# medium's 7.3 M parameters make a save (88 MB, flushed) cost several steps
# of its short batches: the trade-off Young/Daly is about
ARGS=(--config medium --batch 2 --seq 64 --lr 3e-4 --eval-every 0 --eval-batches 1 --threads 1)

# 1. a step's time, roughly, to size the job: N steps of about BENCH_WORK s
mean_step() {  # the mean, not the median: N steps take N times the mean; the
    # first three warm caches and BLAS up and count in the start-up
    awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "step_ms") c = i; next }
        NR > 4 { s += $c; n++ } END { printf "%.4f\n", s / n / 1000 }' "$1/metrics.csv"
}
run_ranks 1 "$OUT/probe" "$GPT" "${ARGS[@]}" --steps 20
N=$(awk -v w="$WORK" -v s="$(mean_step "$OUT/probe")" 'BEGIN { n = int(w / s); print n < 20 ? 20 : n }')

# 2. the uninterrupted run of N steps, no saves: the reference parameters,
#    the step's time and the start-up S (its wall time less N steps)
t0=$(now)
run_ranks 1 "$OUT/straight" "$GPT" "${ARGS[@]}" --steps "$N" --dump-params "$OUT/straight.bin"
T0=$(elapsed "$t0")
STEP=$(mean_step "$OUT/straight")
S=$(awk -v t="$T0" -v n="$N" -v s="$STEP" 'BEGIN { printf "%.3f\n", t - n * s }')

# 3. the save cost C (the trainer's own figure, median of 5 saves) and the
#    restart R: a launch that loads the last checkpoint and runs 2 steps,
#    less 2 steps' time (what a relaunch costs beyond the work: start-up,
#    load, and the first steps' warm-up)
run_ranks 1 "$OUT/saves" "$GPT" "${ARGS[@]}" --steps 10 --save "$OUT/saves.ck" --save-every 2 --keep 1
C=$(sed -n 's/.*: saved .* in \([0-9.]*\) s$/\1/p' "$OUT/saves.log" | middle_value)
t0=$(now)
run_ranks 1 "$OUT/restart" "$GPT" "${ARGS[@]}" --steps 12 --resume "$OUT/saves.ck"
R=$(awk -v t="$(elapsed "$t0")" -v s="$STEP" 'BEGIN { printf "%.3f\n", t - 2 * s }')

YOUNG=$(awk -v c="$C" -v m="$M" 'BEGIN { printf "%.3f\n", sqrt(2 * c * m) }')
KSTAR=$(awk -v t="$YOUNG" -v s="$STEP" 'BEGIN { k = int(t / s + 0.5); print k < 1 ? 1 : k }')
printf 'measured: a step %.3f s, start-up S %.2f s, save C %.2f s, restart R %.2f s (medium, --batch 2 --seq 64, one rank)\n' \
    "$STEP" "$S" "$C" "$R"
printf 'job: %d steps = %.1f s of work; failures every M = %s s on average\n' "$N" \
    "$(awk -v n="$N" -v s="$STEP" 'BEGIN { print n * s }')" "$M"
printf "Young: tau* = sqrt(2 C M) = %.2f s = %d steps; Daly's first-order optimum sqrt(2 C M) - C = %.2f s\n" \
    "$YOUNG" "$KSTAR" "$(awk -v y="$YOUNG" -v c="$C" 'BEGIN { printf "%.3f", y - c }')"

# predict K: Daly's expected wall time for N steps saved every K steps
predict() {
    awk -v k="$1" -v n="$N" -v s="$STEP" -v c="$C" -v r="$R" -v m="$M" -v start="$S" 'BEGIN {
        t = start
        for (done = 0; done < n; done += k) {
            w = (n - done < k ? n - done : k) * s
            t += m * exp(r / m) * (exp((w + c) / m) - 1)
        }
        printf "%.2f\n", t }'
}

# replay K SEED: the same model's wall time for the very failures job SEED
# meets (the draws of tools/run_with_failures.sh): each launch costs S from
# the start, or R from a checkpoint, then steps and saves until its
# failure; what it saved is kept. Daly's E[T] averages over all failure
# sequences; a few seeds' mean strays from it (the draws of 4 seeds can be
# shorter or longer than M on average), the replay does not.
replay() {
    awk -v k="$1" -v seed="$2" -v n="$N" -v s="$STEP" -v c="$C" -v r="$R" -v m="$M" -v start="$S" 'BEGIN {
        srand(seed)
        t = 0; saved = 0
        while (1) {
            d = -m * log(1 - rand())
            el = saved == 0 ? start : r
            if (el >= d) { t += d; continue }
            at = saved
            while (at < n) {
                next_save = at + k < n ? at + k : n
                if (el + (next_save - at) * s + c > d) break
                el += (next_save - at) * s + c
                at = next_save
            }
            if (at == n) { t += el; break }
            t += d; saved = at
        }
        printf "%.2f\n", t }'
}

echo "interval,steps,tau_s,seed,wall_s,failures,predicted_s,replayed_s" > "$OUT/failures.csv"
printf '\n%8s %8s %11s %11s %11s %11s %9s\n' "every K" "tau s" "predicted s" "replayed s" "measured s" \
    "min-max s" failures
for f in 0.25 0.5 1 2 4; do
    K=$(awk -v k="$KSTAR" -v f="$f" 'BEGIN { k = int(k * f + 0.5); print k < 1 ? 1 : k }')
    P=$(predict "$K")
    for seed in $(seq 1 "$SEEDS"); do
        job="$OUT/every-$K-seed-$seed"
        tools/run_with_failures.sh --dir "$job" --mtbf "$M" --seed "$seed" --limit "$LIMIT" -- \
            "$GPT" "${ARGS[@]}" --steps "$N" --save-every "$K" --keep 2 --dump-params "$job.bin" \
            > "$job.log" 2>&1 || { tail -n 5 "$job.log" >&2; die "the job in $job did not finish"; }
        cmp -s "$job.bin" "$OUT/straight.bin" \
            || die "$job ended with other parameters than the uninterrupted run ($job.bin)"
        wall=$(sed -n 's/.*finished in \([0-9.]*\) s of wall time.*/\1/p' "$job.log")
        fails=$(sed -n 's/.* \([0-9]*\) failures,.*/\1/p' "$job.log")
        echo "$f,$K,$(awk -v k="$K" -v s="$STEP" 'BEGIN { printf "%.3f", k * s }'),$seed,$wall,$fails,$P,$(replay "$K" "$seed")" \
            >> "$OUT/failures.csv"
        rm -rf "$job/ck" "$job.bin"
    done
    awk -F, -v f="$f" '$1 == f { n++; w += $5; x += $6; y += $8; if (!lo || $5 < lo) lo = $5; if ($5 > hi) hi = $5; k = $2; tau = $3; p = $7 }
        END { printf "%8d %8.2f %11.1f %11.1f %11.1f %5.1f-%-5.1f %9.1f\n", k, tau, p, y / n, w / n, lo, hi, x / n }' "$OUT/failures.csv"
done
echo "(predicted: Daly's expectation; replayed: the model for these very failures; measured and"
echo " replayed: the mean over $SEEDS failure seeds, the same for every interval.)"
echo "Every job ended bit for bit on the uninterrupted run's parameters."
rm -rf "$OUT/saves.ck"

tools/plot_failures.sh "$OUT/failures.png" "$OUT/failures.csv" "$STEP" "$C" "$R" "$M" "$S" "$N" "$YOUNG"
echo "chart: $OUT/failures.png"
