#!/usr/bin/env bash
# help: lab 02: naive/bucketed/overlapped step and wait times, bucket sweep, timelines
# bench/ddp.sh: lab 02's three ways of averaging gradients, timed on the
# 'small' config with 2 ranks of one thread each, and a sweep of the bucket
# size. `make bench-ddp` builds, then runs this.
#
#   BENCH_STEPS    training steps per run (default 40); medians are taken
#                  over the steps after the first 3
#   BENCH_SIZES    --bucket-mb values of the sweep (default
#                  "0.0001 0.01 0.05 0.25 1 64": one tensor per bucket up to
#                  the whole model in one bucket)
#   BENCH_TIMEOUT  seconds allowed to each run (default 300)
#   BENCH_COPY     labs or solutions: whose train_ddp (bench/common.sh)
#
# Two waits, because on a shared machine they differ a lot:
#   wait     what train_ddp's summary line prints: rank 0's mean time in the
#            gradient sync after its backward pass. It includes the time
#            rank 0 idles for a slower rank, which no bucketing can hide.
#   exposed  from trace.csv: per step, the wait of the rank that finished its
#            backward pass LAST. That rank waits for no one, so its wait is
#            communication alone: the part the backward pass did not hide.
#            Median over the steps.
# bucket_sweep.csv keeps, besides each median, the lower and upper quartiles
# over the steps (step_q1_ms, step_q3_ms, exposed_q1_ms, exposed_q3_ms): the
# chart's bars, so a difference inside them is read as noise.
# hidden = 1 - exposed(overlapped) / exposed(bucketed), same bucket size:
#   bucketed starts communicating only after the backward pass, so its
#   exposed time is all the communication; overlapped hides the rest.
#
# Writes runs/02_ddp-bench/: one run directory per case (naive/, MODE-MB/),
# bucket_sweep.csv and .png, timeline-naive.png and timeline-overlapped.png,
# and ends with a table of the figures.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
BENCH_NAME=bench-ddp
source bench/common.sh

STEPS=${BENCH_STEPS:-40}
SIZES=${BENCH_SIZES:-0.0001 0.01 0.05 0.25 1 64}
LIMIT=${BENCH_TIMEOUT:-300}
SKIP=3      # warm-up steps left out of the medians (page faults, first MPI calls)
MAIN_MB=0.25
NP=2
TRAIN=$(bench_program 02_ddp train_ddp)
DATA=build/data/synth.tok
OUT=runs/02_ddp-bench
CSV=$OUT/bucket_sweep.csv

check_steps "$STEPS" $((SKIP + 2)) "the first $SKIP steps are not timed"
check_timeout "$LIMIT"
for mb in $SIZES; do
    [[ "$mb" =~ ^[0-9]*[.]?[0-9]+$ ]] && awk -v x="$mb" 'BEGIN { exit !(x > 0) }' \
        || die "BENCH_SIZES must list positive bucket sizes in MB, got '$mb'"
done
[[ " $SIZES " == *" $MAIN_MB "* ]] || die "BENCH_SIZES must include $MAIN_MB (the size the three modes are compared at)"
[ -x "$TRAIN" ] || die "$TRAIN is missing: run 'make all' (or 'make bench-ddp')"
[ -f "$DATA" ] || die "$DATA is missing: run 'make data' (or 'make bench-ddp')"
command -v gnuplot > /dev/null || die "gnuplot not installed (apt-get install gnuplot-nox)"

# Open MPI refuses root without these; CI containers run as root.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_NUM_THREADS=1

# Exposed communication (ms) of DIR/trace.csv, as defined above, its
# quartiles "Q1 MEDIAN Q3" over the steps. A
# step of rank r runs from the end of its previous optimizer event to the end
# of its own; within it, the wait is the last dp-group event's end minus the
# last backward event's end (0 if the communication finished first).
exposed_quartiles_ms() {
    awk -F, -v skip="$SKIP" '
        NR == 1 { next }
        { n++; rank[n] = $1 + 0; cat[n] = $2; name[n] = $3; group[n] = $4; stop[n] = $6 + 0
          if ($1 + 1 > ranks) ranks = $1 + 1
          if ($2 == "compute" && $3 == "optimizer") step_end[$1 + 0, steps_of[$1 + 0]++] = $6 + 0 }
        END {
            steps = steps_of[0]
            for (r = 1; r < ranks; r++) if (steps_of[r] < steps) steps = steps_of[r]
            for (i = 1; i <= n; i++) {
                r = rank[i]
                for (k = 0; k < steps && stop[i] > step_end[r, k]; k++) ;
                if (k == steps) continue
                if (cat[i] == "compute" && name[i] == "backward" && stop[i] > bw[r, k]) bw[r, k] = stop[i]
                if (cat[i] == "comm" && group[i] == "dp" && stop[i] > dp[r, k]) dp[r, k] = stop[i]
            }
            for (k = skip; k < steps; k++) {
                least = -1
                for (r = 0; r < ranks; r++) {
                    w = dp[r, k] > bw[r, k] ? dp[r, k] - bw[r, k] : 0
                    if (least < 0 || w < least) least = w
                }
                print least * 1e3
            }
        }' "$1/trace.csv" | quartiles
}

# run_case MODE [MB]: train into $OUT/MODE-MB ($OUT/naive: naive has no
# buckets), then append MODE,MB,buckets,mean step,median step,wait,exposed
# (the median), then the quartiles of the step and of the exposed wait, to
# the CSV (MB "NA" for naive).
run_case() {
    local mode=$1 mb=${2:-NA} dir log line buckets mean wait median exposed sq1 sq3 eq1 eq3
    local args=(--ddp "$mode" --config small --steps "$STEPS" --threads 1 --eval-every 0)
    if [ "$mode" = naive ]; then
        dir=$OUT/naive
    else
        dir=$OUT/$mode-$mb
        args+=(--bucket-mb "$mb")
    fi
    log=$dir.log
    echo "bench-ddp: train_ddp ${args[*]}"
    run_ranks "$NP" "$dir" "$TRAIN" "${args[@]}"
    # "train_ddp: naive, 52 tensors" or "... overlapped, 52 tensors in 13 buckets of >= 0.25 MB"
    line=$(grep -m 1 '^train_ddp: [a-z]*, [0-9]* tensors' "$log") || die "no mode line in $log"
    if [[ "$line" =~ in\ ([0-9]+)\ buckets ]]; then buckets=${BASH_REMATCH[1]}
    else buckets=$(sed 's/.*, \([0-9]*\) tensors.*/\1/' <<< "$line"); fi  # naive: one per tensor
    line=$(grep -m 1 'mean step .* ms waiting for gradients' "$log") || die "no summary line in $log"
    read -r mean wait < <(sed 's/.*mean step \([0-9.]*\) ms, of which \([0-9.]*\) ms.*/\1 \2/' <<< "$line")
    read -r sq1 median sq3 < <(step_quartiles_ms "$dir") || die "no timed steps in $dir/metrics.csv"
    read -r eq1 exposed eq3 < <(exposed_quartiles_ms "$dir") || die "no steps to measure in $dir/trace.csv"
    echo "$mode,$mb,$buckets,$mean,$median,$wait,$exposed,$sq1,$sq3,$eq1,$eq3" >> "$CSV"
}

mkdir -p "$OUT"
echo "mode,bucket_mb,buckets,mean_step_ms,median_step_ms,wait_ms,exposed_ms,step_q1_ms,step_q3_ms,exposed_q1_ms,exposed_q3_ms" > "$CSV"
run_case naive
for mb in $SIZES; do
    run_case bucketed "$mb"
    run_case overlapped "$mb"
done

# ---- charts ----------------------------------------------------------------
field() { awk -F, -v m="$1" -v b="$2" -v c="$3" '$1 == m && $2 == b { print $c }' "$CSV"; }
naive_median=$(field naive NA 5)
naive_exposed=$(field naive NA 7)

# x tics at the measured sizes, each with its number of buckets under it
# (the upper chart gets the tics without the labels)
xtics=$(awk -F, '$1 == "overlapped" { printf "%s\"%s\\n(%s)\" %s", sep, $2, $3, $2; sep = ", " }' "$CSV")
xmarks=$(awk -F, '$1 == "overlapped" { printf "%s\"\" %s", sep, $2; sep = ", " }' "$CSV")
read -r xlo xhi ymax < <(awk -F, 'NR > 1 { if ($1 != "naive") { b = $2 + 0; if (!lo || b < lo) lo = b; if (b > hi) hi = b }
        if ($11 + 0 > top) top = $11 + 0 }
    END { printf "%g %g %g\n", lo / 2, hi * 2, 1.5 * top }' "$CSV")
gnuplot <<EOF_GP
set terminal pngcairo size 1000,760 font ",11" noenhanced
set output "$OUT/bucket_sweep.png"
set datafile separator ","
set datafile missing NaN
set logscale x 10
set xrange [$xlo:$xhi]
set grid
# the same margins in both charts, so that their x axes line up
set lmargin 10
set rmargin 3
set multiplot layout 2,1 title "DDP on 2 ranks (small config, 1 thread each): bucket size sweep, medians over steps $SKIP..$((STEPS - 1)), bars from the lower to the upper quartile"
set xtics ($xmarks)
set ylabel "step time (ms, median)"
set yrange [0:*]
set key bottom right opaque
plot "$CSV" using 2:(strcol(1) eq "bucketed" ? \$5 : NaN):8:9 with yerrorbars pt -1 lc rgb "#1f77b4" notitle, \\
     "$CSV" using 2:(strcol(1) eq "overlapped" ? \$5 : NaN):8:9 with yerrorbars pt -1 lc rgb "#d62728" notitle, \\
     "$CSV" using 2:(strcol(1) eq "bucketed" ? \$5 : NaN) with linespoints pt 7 ps 1 lw 2 lc rgb "#1f77b4" title "bucketed", \\
     "$CSV" using 2:(strcol(1) eq "overlapped" ? \$5 : NaN) with linespoints pt 5 ps 1 lw 2 lc rgb "#d62728" title "overlapped", \\
     $naive_median with lines dt 2 lw 1.5 lc rgb "#555555" title "naive (one all-reduce per tensor)"
set xtics ($xtics)
set xlabel "--bucket-mb (MB); number of buckets in parentheses" offset 0, -0.6
set bmargin 4.5
set ylabel "exposed communication (ms, median)"
set yrange [0:$ymax]
set key top left opaque
plot "$CSV" using 2:(strcol(1) eq "bucketed" ? \$7 : NaN):10:11 with yerrorbars pt -1 lc rgb "#1f77b4" notitle, \\
     "$CSV" using 2:(strcol(1) eq "overlapped" ? \$7 : NaN):10:11 with yerrorbars pt -1 lc rgb "#d62728" notitle, \\
     "$CSV" using 2:(strcol(1) eq "bucketed" ? \$7 : NaN) with linespoints pt 7 ps 1 lw 2 lc rgb "#1f77b4" title "bucketed: all of the communication is exposed", \\
     "$CSV" using 2:(strcol(1) eq "overlapped" ? \$7 : NaN) with linespoints pt 5 ps 1 lw 2 lc rgb "#d62728" title "overlapped: what the backward pass did not hide", \\
     $naive_exposed with lines dt 2 lw 1.5 lc rgb "#555555" title "naive"
unset multiplot
EOF_GP
echo "bench-ddp: wrote $OUT/bucket_sweep.png"

bash tools/plot_timeline.sh "$OUT/naive" "DDP naive (one all-reduce per tensor), 2 ranks" > /dev/null
bash tools/plot_timeline.sh "$OUT/overlapped-$MAIN_MB" "DDP overlapped, $MAIN_MB MB buckets, 2 ranks" > /dev/null
cp "$OUT/naive/timeline.png" "$OUT/timeline-naive.png"
cp "$OUT/overlapped-$MAIN_MB/timeline.png" "$OUT/timeline-overlapped.png"
echo "bench-ddp: wrote $OUT/timeline-naive.png and $OUT/timeline-overlapped.png"

# ---- the figures -------------------------------------------------------------
echo
printf '%-11s %9s %7s %13s %15s %11s %12s\n' mode bucket_MB buckets mean_step_ms median_step_ms wait_ms exposed_ms
awk -F, 'NR > 1 { printf "%-11s %9s %7s %13s %15s %11s %12s\n", $1, ($1 == "naive" ? "-" : $2), $3, $4, $5, $6, $7 }' "$CSV"
echo
echo "(wait: rank 0's mean wait after its backward pass, from train_ddp's summary line;"
echo " exposed: median wait of the rank that finished its backward pass last)"
hidden=$(awk -v o="$(field overlapped "$MAIN_MB" 7)" -v b="$(field bucketed "$MAIN_MB" 7)" \
    'BEGIN { if (b > 0) printf "%.0f%%", 100 * (1 - o / b); else print "NA" }')
echo "hidden by overlap at $MAIN_MB MB: 1 - exposed(overlapped) / exposed(bucketed) = 1 - $(field overlapped "$MAIN_MB" 7) / $(field bucketed "$MAIN_MB" 7) = $hidden"
echo "steps=$STEPS ranks=$NP config=small threads=1"
