#!/usr/bin/env bash
# help: lab 04: memory per rank vs the planner, TP all-reduce bytes per step, step times (tp 1, 2, 4)
# bench/tp.sh: lab 04's three figures. `make bench-tp` builds, then runs
# this. Pure tensor parallelism: tp = 1, 2, 4 on as many ranks (dp = 1), one
# thread per rank, configs tiny and small.
#
#   memory     rank 0's measured peaks by category (memory.csv; every rank
#              holds the same) next to the planner's (memplan --tp N --csv)
#              -> memory.png
#   comm       the TP group's all-reduce bytes per training step, by the
#              difference of a BENCH_STEPS-step and a 2-step run (the one
#              evaluation at the end cancels out): the payload comm.csv
#              counts, the bytes each rank sends over the wire (ring:
#              2 (tp-1)/tp of it; nothing at tp 1) and memplan's formula
#              (per forward + per backward pass, plus the gradient norm's
#              one double) -> comm.png; the dp group's bytes as well
#   step time  median step time over the steps from 3 on -> step_time.png
# Everything lands in tp.csv, and a table is printed.
#
#   BENCH_STEPS    steps of the long runs (default 10; medians over the steps
#                  after the first 3)
#   BENCH_CONFIGS  the configs, in order (default "tiny small"; any of them)
#   BENCH_TIMEOUT  seconds allowed to each run (default 300)
#   BENCH_OUT      output directory (default runs/04_tensor_parallel-bench)
#   BENCH_COPY     labs or solutions: whose train_tp (bench/common.sh)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
BENCH_NAME=bench-tp
SKIP=3
source bench/common.sh

STEPS=${BENCH_STEPS:-10}
LIMIT=${BENCH_TIMEOUT:-300}
CONFIGS=${BENCH_CONFIGS:-tiny small}
DEGREES="1 2 4"
TP=$(bench_program 04_tensor_parallel train_tp)
PLAN=build/bin/memplan
DATA=build/data/synth.tok
OUT=${BENCH_OUT:-runs/04_tensor_parallel-bench}

check_steps "$STEPS" $((SKIP + 2))
check_timeout "$LIMIT"
[ -n "${CONFIGS// /}" ] || die "BENCH_CONFIGS is empty"
for c in $CONFIGS; do
    [[ "$c" =~ ^(tiny|small)$ ]] || die "BENCH_CONFIGS holds tiny and/or small, got '$CONFIGS'"
done
for f in "$TP" "$PLAN"; do [ -x "$f" ] || die "$f is missing: run 'make bench-tp'"; done
[ -f "$DATA" ] || die "$DATA is missing: run 'make data' (or 'make bench-tp')"
command -v gnuplot > /dev/null || die "gnuplot not installed (apt-get install gnuplot-nox)"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_NUM_THREADS=1

# train CONFIG TP DIR ARGS...: train_tp --tp TP on TP ranks into DIR
train() {
    local config=$1 tp=$2 dir=$3
    shift 3
    run_ranks "$tp" "$dir" "$TP" --tp "$tp" --config "$config" --threads 1 --eval-every 0 \
        --eval-batches 1 "$@"
}

# rank 0's all-reduce payload bytes over GROUP in DIR/comm.csv
allreduce_bytes() {
    awk -F, -v g="$2" '$1 == 0 && $2 == g && $3 == "allreduce" { b += $5 } END { printf "%.0f\n", b }' "$1/comm.csv"
}

mkdir -p "$OUT"
CSV=$OUT/tp.csv
CATS="params grads optimizer activations comm workspace"
echo "config,tp,ranks,params,grads,optimizer,activations,comm,workspace,total,predicted_total,plan_equal,tp_payload_per_step,tp_wire_per_step,tp_predicted_per_step,dp_payload_per_step,median_step_ms,step_q1_ms,step_q3_ms" > "$CSV"
for config in $CONFIGS; do
    for tp in $DEGREES; do
        echo "bench-tp: $config, tp $tp on $tp rank(s): 2 and $STEPS steps"
        short=$OUT/$config-tp$tp-2
        long=$OUT/$config-tp$tp-$STEPS
        train "$config" "$tp" "$short" --steps 2
        train "$config" "$tp" "$long" --steps "$STEPS"
        "$PLAN" --config "$config" --tp "$tp" --csv > "$OUT/plan-$config-tp$tp.csv"
        row="$config,$tp,$tp"
        total=0 equal=yes
        for c in $CATS; do
            b=$(peak "$long" "$c")
            p=$(awk -F, -v c="$c" '$2 == c { print $4 }' "$OUT/plan-$config-tp$tp.csv")
            [ -n "$b" ] && [ "$b" = "$p" ] || equal=NO
            row="$row,$b"
            total=$((total + b))
        done
        ptotal=$(awk -F, 'NR > 1 { t += $4 } END { print t }' "$OUT/plan-$config-tp$tp.csv")
        steps=$((STEPS - 2))
        tp_step=$((($(allreduce_bytes "$long" tp) - $(allreduce_bytes "$short" tp)) / steps))
        dp_step=$((($(allreduce_bytes "$long" dp) - $(allreduce_bytes "$short" dp)) / steps))
        wire=$(awk -v b="$tp_step" -v n="$tp" 'BEGIN { printf "%.0f\n", b * 2 * (n - 1) / n }')
        if [ "$tp" -gt 1 ]; then
            # memplan's forward + backward pass (grad-accum 1), plus the
            # gradient norm's sum over the group: one double (train_tp.c)
            predicted=$("$PLAN" --config "$config" --tp "$tp" \
                | awk '$1 == "forward" || $1 == "backward" { b += $4 } END { print b + 8 }')
        else
            predicted=NaN  # a group of one: nothing to predict
        fi
        read -r q1 median q3 < <(step_quartiles_ms "$long") || die "no timed steps in $long/metrics.csv"
        echo "$row,$total,$ptotal,$equal,$tp_step,$wire,$predicted,$dp_step,$median,$q1,$q3" >> "$CSV"
    done
done

# gnuplot's data: one file per config, no header
for config in $CONFIGS; do
    awk -F, -v c="$config" 'NR > 1 && $1 == c' "$CSV" > "$OUT/tp-$config.dat"
done
set -- $CONFIGS
NCONF=$#
COLORS=("#1f77b4" "#d62728")

# ---- memory.png: one panel per config, stacked categories per tp ----------
{
    echo "set terminal pngcairo size $((480 * NCONF + 160)),560 font \",11\" noenhanced"
    echo "set output \"$OUT/memory.png\""
    echo "set datafile separator \",\""
    echo "set datafile missing \"NaN\""
    echo "set multiplot layout 1,$NCONF title \"Memory per rank vs tensor-parallel degree (pure TP, ranks = tp): measured peaks by category (bars), memplan --tp (diamonds)\""
    echo "set style data histograms"
    echo "set style histogram rowstacked"
    echo "set style fill solid 0.85 border -1"
    echo "set boxwidth 0.6"
    echo "set ylabel \"MiB per rank (peak)\""
    echo "set yrange [0:*]"
    echo "set grid ytics"
    echo "set key top right"
    for config in $CONFIGS; do
        echo "set title \"config $config\""
        echo "plot \"$OUT/tp-$config.dat\" using (\$4/1048576):xtic(sprintf(\"tp %d\", \$2)) title \"parameters\" lc rgb \"#1f77b4\", \\"
        echo "     \"\" using (\$5/1048576) title \"gradients\" lc rgb \"#ff7f0e\", \\"
        echo "     \"\" using (\$6/1048576) title \"AdamW moments\" lc rgb \"#2ca02c\", \\"
        echo "     \"\" using (\$7/1048576) title \"activations\" lc rgb \"#9467bd\", \\"
        echo "     \"\" using (\$8/1048576) title \"comm scratch\" lc rgb \"#8c564b\", \\"
        echo "     \"\" using (\$9/1048576) title \"backward scratch\" lc rgb \"#bcbd22\", \\"
        echo "     \"\" using 0:(\$11/1048576) with points pt 13 ps 2 lc rgb \"black\" title \"predicted total\""
    done
    echo "unset multiplot"
} | gnuplot
echo "bench-tp: wrote $OUT/memory.png"

# tp_axes YLABEL: the gnuplot axes of the charts against tp (1, 2, 4)
tp_axes() {
    echo "set xlabel \"tensor-parallel degree tp (ranks)\""
    echo "set ylabel \"$1\""
    echo "set logscale x 2"
    echo "set xrange [0.8:5]"
    echo "set xtics (\"1\" 1, \"2\" 2, \"4\" 4)"
    echo "set yrange [0:*]"
    echo "set grid"
    echo "set key top left"
}

# ---- comm.png: TP bytes per step vs tp --------------------------------------
{
    echo "set terminal pngcairo size 1000,560 font \",11\" noenhanced"
    echo "set output \"$OUT/comm.png\""
    echo "set datafile separator \",\""
    echo "set datafile missing \"NaN\""
    echo "set title \"TP all-reduce bytes per training step and rank (measured from comm.csv, $STEPS- minus 2-step run)\\nsolid: payload of the all-reduces; dashed: sent over the wire by a ring, 2 (tp-1)/tp of it; diamonds: memplan's formula\\n(at tp 1 the group has one rank: its all-reduces are called but send nothing)\""
    tp_axes "MiB per step"
    plot="plot"
    i=0
    for config in $CONFIGS; do
        f="$OUT/tp-$config.dat" col=${COLORS[$((i % 2))]}
        plot="$plot \"$f\" using 2:(\$13/1048576) with linespoints lw 2 pt 7 lc rgb \"$col\" title \"$config payload\","
        plot="$plot \"$f\" using 2:(\$14/1048576) with linespoints lw 2 dt 2 pt 6 lc rgb \"$col\" title \"$config wire\","
        key=notitle
        [ "$i" -gt 0 ] || key="title \"predicted payload\""
        plot="$plot \"$f\" using 2:(\$15/1048576) with points pt 13 ps 2 lc rgb \"black\" $key,"
        i=$((i + 1))
    done
    echo "${plot%,}"
} | gnuplot
echo "bench-tp: wrote $OUT/comm.png"

# ---- step_time.png: median step time vs tp ----------------------------------
{
    echo "set terminal pngcairo size 900,540 font \",11\" noenhanced"
    echo "set output \"$OUT/step_time.png\""
    echo "set datafile separator \",\""
    echo "set title \"Median step time vs tensor-parallel degree (ranks = tp, 1 thread each, cores here: $(env -u OMP_NUM_THREADS nproc))\\nmedian over steps $SKIP..$((STEPS - 1)) of metrics.csv's step_ms, bars from the lower to the upper quartile\""
    tp_axes "ms per step"
    plot="plot"
    i=0
    for config in $CONFIGS; do
        plot="$plot \"$OUT/tp-$config.dat\" using 2:17:18:19 with yerrorbars pt -1 lc rgb \"${COLORS[$((i % 2))]}\" notitle,"
        plot="$plot \"\" using 2:17 with linespoints lw 2 pt 7 ps 1.5 lc rgb \"${COLORS[$((i % 2))]}\" title \"$config\","
        plot="$plot \"\" using 2:17:(sprintf(\"%.1f\", \$17)) with labels offset 0,1 notitle,"
        i=$((i + 1))
    done
    echo "${plot%,}"
} | gnuplot
echo "bench-tp: wrote $OUT/step_time.png"

echo
echo "per rank, rank 0 (bytes; plan: all six categories equal memplan --tp); TP bytes per step, payload (wire; formula)"
printf '  %-3s %-6s %9s %9s %10s %12s %5s %12s %12s %12s %12s %9s\n' \
    tp config params grads optimizer activations plan tp_payload tp_wire tp_formula dp_payload step_ms
awk -F, 'NR > 1 { printf "  %-3s %-6s %9s %9s %10s %12s %5s %12s %12s %12s %12s %9s\n",
    $2, $1, $4, $5, $6, $7, $12, $13, $14, ($15 == "NaN" ? "-" : $15), $16, $17 }' "$CSV"
echo "bench-tp: wrote $CSV and the charts memory.png, comm.png, step_time.png in $OUT"
