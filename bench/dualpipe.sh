#!/usr/bin/env bash
# help: lab 06's DualPipe: idle time per rank against 1F1B and ZB-H1 (simulated, with the formulas), parameters and activations per rank (measured, against the planner)
# bench/dualpipe.sh: DualPipe (lab 06's second extension) against the
# schedules it improves on. `make bench-dualpipe` builds, then runs this.
#
#   idle     pipeline_schedule for p = 2, 4, 6, 8 at m = 4p, costs F 1,
#            B 2, I = W = 1: each rank's idle time as the simulator
#            computes it, next to the formulas, 1F1B's (p-1)(F+B),
#            ZB-H1's (p-1)(F+I-W) and DualPipe's (p/2-1)(F&B+B-3W) with
#            F&B = F+B (the simulator runs the pair in turn) -> idle.csv.
#            The simulator is exact arithmetic: nothing here is timed.
#   memory   train_pp, pp 4 on 4 ranks, 8 blocks of CONFIG, m = 8, 2 steps,
#            with 1f1b, zb-h1 and dualpipe: each rank's peak bytes of
#            parameters and activations (memory.csv), and the planner's
#            verdict on every category of every rank ("ok" or "DIFFERENT";
#            exit status 1 after a difference) -> memory.csv
# Both in dualpipe.png: idle per rank against p (formula lines, simulated
# points), and each rank's parameters and activations per schedule.
#
#   BENCH_CONFIG   tiny | small (default tiny)
#   BENCH_TIMEOUT  seconds allowed to each run (default 300)
#   BENCH_OUT      output directory (default runs/06_pipeline-dualpipe)
#   BENCH_COPY     labs or solutions: whose programs (bench/common.sh)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
BENCH_NAME=bench-dualpipe
source bench/common.sh

CONFIG=${BENCH_CONFIG:-tiny}
LIMIT=${BENCH_TIMEOUT:-300}
OUT=${BENCH_OUT:-runs/06_pipeline-dualpipe}
SCHED=$(bench_program 06_pipeline pipeline_schedule)
PP=$(bench_program 06_pipeline train_pp)

[[ "$CONFIG" =~ ^(tiny|small)$ ]] || die "BENCH_CONFIG must be tiny or small, got '$CONFIG'"
check_timeout "$LIMIT"
for f in "$SCHED" "$PP"; do [ -x "$f" ] || die "$f is missing: run 'make bench-dualpipe'"; done
[ -f build/data/synth.tok ] || die "build/data/synth.tok is missing: run 'make data' (or 'make bench-dualpipe')"
command -v gnuplot > /dev/null || die "gnuplot not installed (apt-get install gnuplot-nox)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
rm -rf "$OUT"
mkdir -p "$OUT"

# idle: one row per schedule and p, rank 0's simulated idle (every rank's is
# the same in these three) and the formula's
echo "schedule,p,simulated_idle,formula_idle" > "$OUT/idle.csv"
for p in 2 4 6 8; do
    for s in 1f1b zb-h1 dualpipe; do
        idle=$("$SCHED" --schedule "$s" -p "$p" -m $((4 * p)) | awk '$1 == "0" && NF == 6 { print $3 }')
        [ -n "$idle" ] || die "pipeline_schedule --schedule $s -p $p printed no idle time"
        case $s in
            1f1b) want=$((3 * (p - 1))) ;;
            zb-h1) want=$((p - 1)) ;;
            dualpipe) want=$((2 * (p / 2 - 1))) ;;
        esac
        echo "$s,$p,$idle,$want" >> "$OUT/idle.csv"
    done
done

# memory: every rank's params and activations, and the planner's verdicts
echo "schedule,rank,params_bytes,activations_bytes,planner" > "$OUT/memory.csv"
different=0
for s in 1f1b zb-h1 dualpipe; do
    echo "$BENCH_NAME: train_pp --pp 4 --schedule $s, $CONFIG with 8 blocks, m = 8, 2 steps"
    run_ranks 4 "$OUT/$s" "$PP" --pp 4 --n-layer 8 --schedule "$s" --micro-batches 8 \
        --config "$CONFIG" --steps 2 --eval-every 0 --eval-batches 1 --threads 1
    verdicts=$(grep -cE '^  [a-z]+ +predicted +[0-9]+ +measured +[0-9]+ +ok$' "$OUT/$s.log" || true)
    wrong=$(grep -c 'DIFFERENT' "$OUT/$s.log" || true)
    [ "$wrong" -eq 0 ] && [ "$verdicts" -ge 24 ] || different=1   # 6 categories x 4 ranks
    verdict=$([ "$wrong" -eq 0 ] && [ "$verdicts" -ge 24 ] && echo ok || echo DIFFERENT)
    awk -F, -v s="$s" -v v="$verdict" '$2 == "params" { p[$1] = $4 } $2 == "activations" { a[$1] = $4 }
        END { for (r = 0; r < 4; r++) printf "%s,%d,%s,%s,%s\n", s, r, p[r], a[r], v }' \
        "$OUT/$s/memory.csv" >> "$OUT/memory.csv"
done

echo
echo "$BENCH_NAME: idle time per rank, simulated (F 1, B 2, I = W = 1, m = 4p) vs formula"
printf "%-9s %3s %10s %8s\n" schedule p simulated formula
tail -n +2 "$OUT/idle.csv" | while IFS=, read -r s p si fo; do printf "%-9s %3s %10s %8s\n" "$s" "$p" "$si" "$fo"; done
echo
echo "$BENCH_NAME: peak bytes per rank, pp 4, $CONFIG with 8 blocks, m = 8 (planner: every category of every rank)"
printf "%-9s %4s %12s %12s %9s\n" schedule rank params activations planner
tail -n +2 "$OUT/memory.csv" | while IFS=, read -r s r pa ac v; do printf "%-9s %4s %12s %12s %9s\n" "$s" "$r" "$pa" "$ac" "$v"; done

# the bars: one group per schedule and rank, params and activations in MiB
awk -F, 'NR > 1 { printf "%s r%s,%.4f,%.4f\n", $1, $2, $3 / 1048576, $4 / 1048576 }' "$OUT/memory.csv" > "$OUT/memory.dat"
gnuplot <<EOF_GP
set terminal pngcairo size 1300,560 font ",11" noenhanced
set output "$OUT/dualpipe.png"
set datafile separator ","
set multiplot layout 1,2 title "DualPipe (lab 06's second extension) against 1F1B and ZB-H1"
set title "Idle time per rank (simulated points, formula lines)\nF 1, B 2, I = W = 1, m = 4p"
set xlabel "pipeline ranks p"
set ylabel "idle time per rank (units of F)"
set xrange [1.5:8.5]
set xtics 2
set yrange [0:*]
set grid ytics
set key top left
plot "< awk -F, '\$1 == \"1f1b\"' $OUT/idle.csv" using 2:4 with lines lw 2 lc rgb "#1f77b4" title "1F1B (p-1)(F+B)", \
     "" using 2:3 with points pt 7 ps 1.5 lc rgb "#1f77b4" notitle, \
     "< awk -F, '\$1 == \"zb-h1\"' $OUT/idle.csv" using 2:4 with lines lw 2 lc rgb "#2ca02c" title "ZB-H1 (p-1)(F+I-W)", \
     "" using 2:3 with points pt 7 ps 1.5 lc rgb "#2ca02c" notitle, \
     "< awk -F, '\$1 == \"dualpipe\"' $OUT/idle.csv" using 2:4 with lines lw 2 lc rgb "#d62728" title "DualPipe (p/2-1)(F&B+B-3W)", \
     "" using 2:3 with points pt 7 ps 1.5 lc rgb "#d62728" notitle
set title "Peak memory per rank, train_pp pp 4, $CONFIG, 8 blocks, m = 8\n(measured; the planner agrees on every rank: see memory.csv)"
unset xlabel
set xrange [*:*]
set xtics rotate by -45 left
set ylabel "MiB"
set key top left
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
plot "$OUT/memory.dat" using 2:xtic(1) title "parameters" lc rgb "#7f7f7f", \
     "" using 3 title "activations" lc rgb "#ff7f0e"
unset multiplot
EOF_GP
echo
echo "$BENCH_NAME: wrote $OUT/{idle.csv,memory.csv,dualpipe.png}"
[ "$different" -eq 0 ] || die "a rank's memory differs from the planner's (see $OUT/*.log)"
