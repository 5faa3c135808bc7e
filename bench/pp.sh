#!/usr/bin/env bash
# help: lab 06: pipeline bubble measured vs simulated vs formula per schedule and m, activations per stage vs the planner, measured and simulated Gantt charts
# bench/pp.sh: lab 06's figures. `make bench-pp` builds, then runs this.
# train_pp on 2 ranks (pp 2, one thread each: as many ranks as this
# machine's 2 cores, so that a rank waiting is a rank idle), tiny or small.
#
#   bubble   every schedule (gpipe, 1f1b, interleaved with 2 chunks, zb-h1)
#            at m = 2, 4, 8, 16 micro-batches: the bubble of the run's last
#            step as measured (idle time per rank from the executor's op
#            times), as the simulator predicts it with that step's mean
#            forward and backward times, and the formula
#            ((p-1)/(m+p-1), (p-1)/(v m+p-1), ZB-H1's) -> bubble.png. One
#            step is one sample: each case runs BENCH_RUNS times, the
#            measured point is the median run's, its bar the lowest and
#            highest, and the median run gives the rest (simulation, Gantt)
#   memory   at m = 8: each stage's activations peak (memory.csv) against
#            the planner's prediction from the schedule ("ok" or
#            "DIFFERENT"; exit status 1 after a difference) -> memory.png
#   gantt    1f1b, interleaved and zb-h1 at m = 8: the measured timeline of
#            the last step next to the simulated one
#            -> gantt-SCHEDULE-{measured,simulated}.png
# Tables are printed; bubble.csv and memory.csv keep the numbers. Timings
# are printed, never checked.
#
#   BENCH_STEPS    steps of each run (default 6; the report is the last's)
#   BENCH_RUNS     runs of each case (default 3)
#   BENCH_CONFIG   tiny | small (default small)
#   BENCH_TIMEOUT  seconds allowed to each run (default 300)
#   BENCH_OUT      output directory (default runs/06_pipeline-bench)
#   BENCH_COPY     labs or solutions: whose train_pp (bench/common.sh)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
BENCH_NAME=bench-pp
SKIP=1
source bench/common.sh

STEPS=${BENCH_STEPS:-6}
RUNS=${BENCH_RUNS:-3}
LIMIT=${BENCH_TIMEOUT:-300}
CONFIG=${BENCH_CONFIG:-small}
PP=$(bench_program 06_pipeline train_pp)
DATA=build/data/synth.tok
OUT=${BENCH_OUT:-runs/06_pipeline-bench}
SCHEDULES="gpipe 1f1b interleaved zb-h1"
MICRO="2 4 8 16"

check_steps "$STEPS" 2
[[ "$RUNS" =~ ^[1-9]$ ]] || die "BENCH_RUNS must be 1 to 9, got '$RUNS'"
check_timeout "$LIMIT"
[[ "$CONFIG" =~ ^(tiny|small)$ ]] || die "BENCH_CONFIG must be tiny or small, got '$CONFIG'"
[ -x "$PP" ] || die "$PP is missing: run 'make bench-pp'"
[ -f "$DATA" ] || die "$DATA is missing: run 'make data' (or 'make bench-pp')"
command -v gnuplot > /dev/null || die "gnuplot not installed (apt-get install gnuplot-nox)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_NUM_THREADS=1

# schedule_flags SCHEDULE M: train_pp's flags; --batch M, one sequence per
# micro-batch, so that a step's work is the same at every m
schedule_flags() {
    local chunks=
    [ "$1" = interleaved ] && chunks=" --chunks 2"
    echo "--pp 2 --schedule $1$chunks --micro-batches $2 --batch $2"
}

mkdir -p "$OUT"
BUBBLE=$OUT/bubble.csv
MEM=$OUT/memory.csv
echo "schedule,m,measured,simulated,formula,step_ms,measured_lo,measured_hi" > "$BUBBLE"
echo "schedule,stage,measured_bytes,planned_bytes,equal" > "$MEM"
different=0
for s in $SCHEDULES; do
    for m in $MICRO; do
        read -ra flags <<< "$(schedule_flags "$s" "$m")"
        echo "bench-pp: $s, m = $m, $STEPS steps, $RUNS runs"
        : > "$OUT/runs.txt"
        for ((r = 1; r <= RUNS; r++)); do
            dir=$OUT/$s-m$m-run$r
            run_ranks 2 "$dir" "$PP" "${flags[@]}" --config "$CONFIG" --threads 1 --steps "$STEPS" \
                --eval-every 0 --eval-batches 1
            # "measured 0.241, simulated 0.273 with ... formula 0.273": MEASURED
            # SIMULATED FORMULA DIR, a line per run
            line=$(sed -n 's/.*bubble of the last step: measured \([0-9.]*\), simulated \([0-9.]*\) .*formula \([0-9.]*\);.*/\1 \2 \3/p' \
                "$dir.log")
            [ -n "$line" ] || die "no bubble report in $dir.log"
            echo "$line $dir" >> "$OUT/runs.txt"
        done
        # the median run stands for the case; the others give the bar
        read -r lo hi measured simulated formula dir < <(sort -g "$OUT/runs.txt" | awk '{ r[NR] = $0 }
            END { split(r[1], a); split(r[NR], b); print a[1], b[1], r[int((NR + 1) / 2)] }')
        echo "$s,$m,$measured,$simulated,$formula,$(median_step_ms "$dir"),$lo,$hi" >> "$BUBBLE"
        [ "$m" -eq 8 ] || continue
        # the planner's lines, one block per stage: "train_pp stage R: ..."
        for stage in 0 1; do
            read -r planned measured_b verdict < <(awk -v h="train_pp stage $stage:" '
                index($0, h) == 1 { on = 1; next }
                on && $1 == "activations" { print $3, $5, $6; exit }' "$dir.log")
            [ -n "${verdict:-}" ] || die "no planner check of stage $stage in $dir.log"
            [ "$verdict" = ok ] || different=1
            echo "$s,$stage,$measured_b,$planned,$([ "$verdict" = ok ] && echo yes || echo no)" >> "$MEM"
        done
        if [ "$s" != gpipe ]; then
            tools/plot_pipeline.sh "$dir/pipeline.csv" "$OUT/gantt-$s-measured.png" \
                "$s, p 2, m 8, measured (last step of $CONFIG, the median of $RUNS runs)"
            tools/plot_pipeline.sh "$dir/pipeline_sim.csv" "$OUT/gantt-$s-simulated.png" \
                "$s, p 2, m 8, simulated with the measured mean costs"
        fi
    done
done

rm -f "$OUT/runs.txt"
echo
echo "bench-pp: bubble fraction, pp 2 on 2 ranks, $CONFIG (last step of $STEPS)"
printf "%-12s %4s %9s %13s %10s %8s %9s\n" schedule m measured "(of $RUNS runs)" simulated formula "step ms"
tail -n +2 "$BUBBLE" | while IFS=, read -r s m me si fo ms lo hi; do
    printf "%-12s %4s %9s %13s %10s %8s %9s\n" "$s" "$m" "$me" "$lo-$hi" "$si" "$fo" "$ms"
done
echo
echo "bench-pp: activations peak per stage at m = 8, measured (memory.csv) vs the planner"
printf "%-12s %5s %14s %14s %6s\n" schedule stage measured planned equal
tail -n +2 "$MEM" | while IFS=, read -r s st me pl eq; do
    printf "%-12s %5s %14s %14s %6s\n" "$s" "$st" "$me" "$pl" "$eq"
done

# bubble.png: a panel per schedule: the formula as a line, the simulated
# bubble (the measured step's mean costs) and the measured one as points
gnuplot <<EOF
set terminal pngcairo size 1100,760 font "sans,11"
set output "$OUT/bubble.png"
set datafile separator ","
set multiplot layout 2,2 title "Pipeline bubble, p = 2 on 2 ranks ($CONFIG), last step of $STEPS: formula, simulated, measured"
set logscale x 2
set xrange [1.6:20]
set yrange [0:*]   # from the data: a measured bubble under load may pass any fixed top
set offsets 0, 0, graph 0.4, 0   # room above the data for the key
set grid ytics
set key top right opaque
set xlabel "micro-batches per step (m)"
set ylabel "bubble fraction (idle / time)"
do for [s in "gpipe 1f1b interleaved zb-h1"] {
    set title s
    plot "< awk -F, -v s=".s." '\$1 == s' $BUBBLE" using 2:5 with lines lw 2 lc rgb "#444444" title "formula", \
         "" using 2:4 with points pt 6 ps 2 lc rgb "#1f77b4" title "simulated", \
         "" using 2:3:7:8 with yerrorbars pt -1 lc rgb "#d62728" notitle, \\
         "" using 2:3 with linespoints pt 7 ps 1.3 dt 2 lc rgb "#d62728" title "measured: median of $RUNS runs, bar the range"
}
unset multiplot
EOF

# memory.png: activations per stage and schedule, measured bars, planner ticks
gnuplot <<EOF
set terminal pngcairo size 900,560 font "sans,11"
set output "$OUT/memory.png"
set datafile separator ","
set title "Activations held per stage at m = 8, p = 2 ($CONFIG): measured = planned"
set ylabel "peak activation memory (MiB)"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set key top right
set grid ytics
set yrange [0:*]
plot "< awk -F, 'NR > 1 && \$2 == 0' $MEM" using (\$3/1048576):xtic(1) title "stage 0" lc rgb "#1f77b4", \
     "< awk -F, 'NR > 1 && \$2 == 1' $MEM" using (\$3/1048576) title "stage 1" lc rgb "#ff7f0e"
EOF
echo
echo "bench-pp: wrote $OUT/{bubble.csv,memory.csv,bubble.png,memory.png,gantt-*.png}"
[ "$different" -eq 0 ] || die "a stage's activations differ from the planner's (memory.csv)"
