#!/usr/bin/env bash
# help: lab 03: memory per rank vs the planner, bytes per step, step times (DDP, ZeRO-1/2/3)
# bench/zero.sh: lab 03's three figures. `make bench-zero` builds, then runs
# this.
#
#   memory   config small, N = 1, 2, 4 ranks, DDP and ZeRO-1/2/3: rank 0's
#            measured peaks (memory.csv; every rank holds the same) next to
#            the planner's prediction (memplan --csv) -> memory.csv/.png
#   states   the model states each rank holds (memory.csv's current bytes
#            at the end of the N = 4 runs, when no working buffer is left) in
#            bytes per parameter, by category, next to the formulas (16,
#            8 + 8/N, 4 + 12/N, 16/N in fp32; 16, 4 + 12/N, 2 + 14/N, 16/N
#            in mixed precision) -> states.csv
#   comm     bytes each rank sends per training step, N = 2 and 4, by the
#            difference of a 4-step and a 2-step run (the one evaluation at
#            the end cancels out); wire bytes from comm.csv's payloads with
#            the ring factors: all-reduce 2(N-1)/N, reduce-scatter and
#            all-gather (N-1)/N -> comm.csv/.png, in units of Phi elements
#            (floats; 2-byte numbers in mixed precision)
#   hsdp     hybrid sharding (the second extension), 4 ranks as 2 nodes of 2:
#            ZeRO-3 over each node's 2 ranks, replicated across the nodes
#            (--dp-shard 2), against DDP and plain ZeRO-3 over all 4: per
#            step and rank, the wire elements on groups inside a node (the
#            shard group) and on groups that span the nodes (the replicate
#            group; all of DDP's and ZeRO-3's), measured as in comm, next
#            to the formulas: DDP 2 Phi (N-1)/N across; ZeRO-3 3 Phi (N-1)/N
#            across; hybrid 3 Phi (K-1)/K inside and 2 (Phi/K) (R-1)/R
#            across, R = N/K replicas -> hsdp.csv/.png (needs a train_zero
#            with the extension; skipped, with a line, where it stops as not
#            implemented)
#   offload  ZeRO-Offload (the third extension), config small, 2 ranks:
#            ZeRO-2 and 3 without and with --offload, rank 0's peaks on the
#            device and in host memory (memory.csv's host_ rows), measured,
#            next to memplan (--offload) -> offload.csv/.png (left out, with
#            a line, where train_zero stops as not implemented)
#   speed    config small, 2 and 4 ranks of one thread: median step time and
#            total peak memory per rank for DDP (overlapped), ZeRO-1, ZeRO-2,
#            ZeRO-3 with and without prefetch -> speed.csv and a table
#
#   BENCH_SPEED    0: leave the speed runs out (default 1)
#   BENCH_STEPS    steps of the speed runs (default 30; medians over the
#                  steps after the first 3)
#   BENCH_TIMEOUT  seconds allowed to each run (default 300)
#   BENCH_CONFIG   tiny | small (default small)
#   BENCH_PRECISION  fp32 | bf16: the trainers' --precision (default fp32;
#                  bf16 keeps 2-byte gradients, the ZeRO paper's 2 + 2 + 12)
#   BENCH_OUT      output directory (default runs/03_zero-bench)
#   BENCH_COPY     labs or solutions: whose train_zero (bench/common.sh);
#                  DDP is lab 02's solution when present, else the student's
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
BENCH_NAME=bench-zero
SKIP=3
source bench/common.sh

STEPS=${BENCH_STEPS:-30}
LIMIT=${BENCH_TIMEOUT:-300}
CONFIG=${BENCH_CONFIG:-small}
PRECISION=${BENCH_PRECISION:-fp32}
ZERO=$(bench_program 03_zero train_zero)
DDP=$(earlier_program 02_ddp train_ddp)   # lab 02's: the solution when it is here
PLAN=build/bin/memplan
DATA=build/data/synth.tok
OUT=${BENCH_OUT:-runs/03_zero-bench}

check_steps "$STEPS" $((SKIP + 2))
check_timeout "$LIMIT"
[[ "$CONFIG" =~ ^(tiny|small)$ ]] || die "BENCH_CONFIG must be tiny or small, got '$CONFIG'"
[[ "$PRECISION" =~ ^(fp32|bf16)$ ]] || die "BENCH_PRECISION must be fp32 or bf16, got '$PRECISION'"
ELEM=$([ "$PRECISION" = fp32 ] && echo 4 || echo 2)  # bytes of what the collectives move
for f in "$ZERO" "$DDP" "$PLAN"; do [ -x "$f" ] || die "$f is missing: run 'make bench-zero'"; done
[ -f "$DATA" ] || die "$DATA is missing: run 'make data' (or 'make bench-zero')"
command -v gnuplot > /dev/null || die "gnuplot not installed (apt-get install gnuplot-nox)"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_NUM_THREADS=1

# train LAYOUT NP DIR ARGS...: one run of LAYOUT (ddp, zero1, zero2, zero3,
# zero3-noprefetch) on NP ranks into DIR
train() {
    local layout=$1 np=$2 dir=$3
    shift 3
    local args=(--config "$CONFIG" --threads 1 --precision "$PRECISION" "$@")
    case $layout in
        ddp) args=("$DDP" --ddp overlapped "${args[@]}") ;;
        zero3-noprefetch) args=("$ZERO" --zero 3 --no-prefetch "${args[@]}") ;;
        hsdp*) args=("$ZERO" --zero 3 --dp-shard "${layout#hsdp}" "${args[@]}") ;;
        offload*) args=("$ZERO" --zero "${layout#offload}" --offload "${args[@]}") ;;
        zero*) args=("$ZERO" --zero "${layout#zero}" "${args[@]}") ;;
    esac
    run_ranks "$np" "$dir" "${args[@]}"
}

# ---- memory ----------------------------------------------------------------
MEM=$OUT/memory.csv
mkdir -p "$OUT"
echo "label,ranks,layout,params,grads,optimizer,comm,activations,workspace,predicted_states,predicted_total,measured_total" > "$MEM"
for np in 1 2 4; do
    "$PLAN" --config "$CONFIG" --ranks "$np" --precision "$PRECISION" --csv > "$OUT/plan-$np.csv"
    for layout in ddp zero1 zero2 zero3; do
        echo "bench-zero: memory, $layout on $np rank(s)"
        dir=$OUT/run-$layout-$np-2  # comm's 2-step run too
        train "$layout" "$np" "$dir" --steps 2 --eval-every 0 --eval-batches 1
        plan_layout=$([ "$layout" = ddp ] && echo replicated || echo "$layout")
        read -r pstates ptotal < <(awk -F, -v l="$plan_layout" '$1 == l {
                t += $4; if ($2 == "params" || $2 == "grads" || $2 == "optimizer" || $2 == "comm") s += $4 }
            END { print s, t }' "$OUT/plan-$np.csv")
        row="$layout N=$np,$np,$layout"
        total=0
        for c in params grads optimizer comm activations workspace; do
            b=$(peak "$dir" "$c")
            row="$row,$b"
            total=$((total + b))
        done
        echo "$row,$pstates,$ptotal,$total" >> "$MEM"
    done
    echo ",,,0,0,0,0,0,0,NaN,NaN,NaN" >> "$MEM"  # a gap between the groups of N
done
tail -n +2 "$MEM" > "$OUT/memory.dat"  # gnuplot: no header line
read -r act work < <(awk -F, 'NR == 2 { printf "%.1f %.1f\n", $8 / 1048576, $9 / 1048576 }' "$MEM")
gnuplot <<EOF_GP
set terminal pngcairo size 1100,620 font ",11" noenhanced
set output "$OUT/memory.png"
set datafile separator ","
set datafile missing NaN
set title "Memory per rank, config $CONFIG, $PRECISION: model states by category, measured (bars) and memplan's prediction (diamonds)\nnot drawn: activations and backward scratch, the same in every layout for a given N ($act + $work MiB at N = 1)"
set style data histograms
set style histogram rowstacked
set style fill solid 0.85 border -1
set boxwidth 0.75
set ylabel "MiB per rank (peak)"
set yrange [0:*]
set grid ytics
set xtics rotate by -35 left
set key top right
plot "$OUT/memory.dat" using (\$4/1048576):xtic(1) title "parameters" lc rgb "#1f77b4", \\
     "" using (\$5/1048576) title "gradients" lc rgb "#ff7f0e", \\
     "" using (\$6/1048576) title "optimizer (moments; fp32 master in mixed precision)" lc rgb "#2ca02c", \\
     "" using (\$7/1048576) title "reduce-scatter scratch" lc rgb "#9467bd", \\
     "" using 0:(\$10/1048576) with points pt 13 ps 2 lc rgb "black" title "predicted (memplan)"
EOF_GP
echo "bench-zero: wrote $OUT/memory.png"

# ---- model states ----------------------------------------------------------
PHI=$("$PLAN" --config "$CONFIG" --csv | awk -F, '$1 == "replicated" && $2 == "params" { print $3 / 4 }')
STATES=$OUT/states.csv
echo "layout,params_per_phi,grads_per_phi,optimizer_per_phi,total_per_phi,formula_per_phi" > "$STATES"
for layout in ddp zero1 zero2 zero3; do
    stage=$([ "$layout" = ddp ] && echo 0 || echo "${layout#zero}")
    awk -F, -v phi="$PHI" -v l="$layout" -v s="$stage" -v p="$PRECISION" '
        $1 == 0 && ($2 == "params" || $2 == "grads" || $2 == "optimizer") { b[$2] = $3 / phi }
        END {
            P = p == "fp32" ? 4 : 2; G = P; K = p == "fp32" ? 8 : 12; n = 4
            f = s == 0 ? P + G + K : s == 1 ? P + G + K / n : s == 2 ? P + (G + K) / n : (P + G + K) / n
            printf "%s,%.4f,%.4f,%.4f,%.4f,%.4f\n", l, b["params"], b["grads"], b["optimizer"],
                   b["params"] + b["grads"] + b["optimizer"], f }' "$OUT/run-$layout-4-2/memory.csv" >> "$STATES"
done

# ---- communication ---------------------------------------------------------
COMM=$OUT/comm.csv
echo "label,ranks,layout,wire_elements_per_step,in_phi,formula_in_phi" > "$COMM"
# wire DIR N [GROUPS]: wire elements (of ELEM bytes) rank 0 sends in DIR on
# the groups GROUPS (a regular expression; default dp) of N ranks each
wire() {
    awk -F, -v n="$2" -v e="$ELEM" -v g="^(${3:-dp})\$" '$1 == 0 && $2 ~ g {
            f = ($3 == "allreduce") ? 2 * (n - 1) / n : (n - 1) / n; w += f * $5 / e }
        END { printf "%.0f\n", w }' "$1/comm.csv"
}
for np in 2 4; do
    for layout in ddp zero1 zero2 zero3; do
        echo "bench-zero: communication, $layout on $np ranks"
        # the 2-step run is memory's
        train "$layout" "$np" "$OUT/run-$layout-$np-4" --steps 4 --eval-every 0 --eval-batches 1
        a=$(wire "$OUT/run-$layout-$np-2" "$np")
        b=$(wire "$OUT/run-$layout-$np-4" "$np")
        per_step=$(((b - a) / 2))
        formula=$(awk -v n="$np" -v l="$layout" 'BEGIN { printf "%.4f", (l == "zero3" ? 3 : 2) * (n - 1) / n }')
        echo "$layout N=$np,$np,$layout,$per_step,$(awk -v x="$per_step" -v p="$PHI" 'BEGIN { printf "%.4f", x / p }'),$formula" >> "$COMM"
    done
done
tail -n +2 "$COMM" > "$OUT/comm.dat"
gnuplot <<EOF_GP
$(bars_plot "$OUT/comm.png" 900 "Elements ($ELEM bytes, $PRECISION) each rank sends per training step (config $CONFIG, Phi = $PHI), measured from comm.csv\ndiamonds: 2 Phi (N-1)/N (DDP, ZeRO-1, ZeRO-2) and 3 Phi (N-1)/N (ZeRO-3)" "clustered gap 0.6")
set ylabel "sent per step, in units of Phi"
set yrange [0:3]
set xtics rotate by -35 left
plot "$OUT/comm.dat" using 5:xtic(1) title "measured" lc rgb "#1f77b4", \\
     "" using 0:6 with points pt 13 ps 2 lc rgb "black" title "formula"
EOF_GP
echo "bench-zero: wrote $OUT/comm.png"

# ---- hybrid sharding -------------------------------------------------------
HSDP=$OUT/hsdp.csv
# wire_groups LAYOUT NP GROUPS: wire per step of the 4-rank 4-step run less
# the 2-step run of LAYOUT, on the groups GROUPS of NP ranks, in units of Phi
wire_groups() {
    for s in 2 4; do wire "$OUT/run-$1-4-$s" "$2" "$3"; done |
        awk -v p="$PHI" 'NR == 1 { a = $1 } NR == 2 { printf "%.4f\n", ($1 - a) / 2 / p }'
}
echo "bench-zero: hybrid sharding, ZeRO-3 over 2 of 4 ranks (--dp-shard 2)"
# extension_run LAYOUT NP DIR ARGS...: train's run of an extension's layout;
# 0 when it ran, 1 when train_zero stopped at the extension's TODO (a
# student's copy without it); any other failure ends the bench
extension_run() {
    local layout=$1 np=$2 dir=$3
    shift 3
    (train "$layout" "$np" "$dir" "$@") 2> /dev/null && return 0
    grep -q "not implemented" "$dir.log" || die "$layout failed (log: $dir.log)"
    return 1
}
hsdp_ok=1
for s in 2 4; do
    extension_run hsdp2 4 "$OUT/run-hsdp2-4-$s" --steps "$s" --eval-every 0 --eval-batches 1 ||
        { hsdp_ok=0; break; }
done
if [ "$hsdp_ok" = 1 ]; then
    # rank 0's model states at the end of LAYOUT's 4-step run, bytes per parameter
    states_of() {
        awk -F, -v p="$PHI" '$1 == 0 && ($2 == "params" || $2 == "grads" || $2 == "optimizer") { s += $3 }
            END { printf "%g\n", s / p }' "$OUT/run-$1-4-4/memory.csv"
    }
    echo "layout,inside_phi,across_phi,formula_inside_phi,formula_across_phi,states_bytes_per_param" > "$HSDP"
    # N = 4 ranks, K = 2 per shard group (a node), R = 2 replicas
    echo "DDP,0,$(wire_groups ddp 4 dp),0,1.5,$(states_of ddp)" >> "$HSDP"
    echo "ZeRO-3 over 4,0,$(wire_groups zero3 4 dp),0,2.25,$(states_of zero3)" >> "$HSDP"
    echo "hybrid K=2,$(wire_groups hsdp2 2 shard),$(wire_groups hsdp2 2 replicate),1.5,0.5,$(states_of hsdp2)" >> "$HSDP"
    tail -n +2 "$HSDP" > "$OUT/hsdp.dat"
    gnuplot <<EOF_GP
$(bars_plot "$OUT/hsdp.png" 1000 "Hybrid sharding, 4 ranks as 2 nodes of 2, config $CONFIG: elements each rank sends per step (comm.csv)\nbars: on groups inside a node / spanning the nodes; diamonds: the formulas; in brackets: model-state bytes per parameter" rowstacked 560)
set boxwidth 0.6
set ylabel "sent per step, in units of Phi"
set yrange [0:3]
set key top right
plot "$OUT/hsdp.dat" using 2:xtic(stringcolumn(1) . sprintf(" (%g B/param)", column(6))) title "inside a node" lc rgb "#2ca02c", \\
     "" using 3 title "across the nodes" lc rgb "#d62728", \\
     "" using 0:4 with points pt 12 ps 2 lc rgb "black" title "formula, inside", \\
     "" using 0:(\$4 + \$5) with points pt 13 ps 2 lc rgb "black" title "formula, inside + across"
EOF_GP
    echo "bench-zero: wrote $OUT/hsdp.png"
else
    echo "bench-zero: hybrid sharding left out: this train_zero does not run --dp-shard yet"
fi

# ---- ZeRO-Offload -----------------------------------------------------------
OFFLOAD=$OUT/offload.csv
echo "layout,params,grads,optimizer,host_grads,host_optimizer,planned_device,planned_host,device_other" > "$OFFLOAD"
"$PLAN" --config "$CONFIG" --ranks 2 --precision "$PRECISION" --csv > "$OUT/plan-off-0.csv"
"$PLAN" --config "$CONFIG" --ranks 2 --precision "$PRECISION" --offload --csv > "$OUT/plan-off-1.csv"
for layout in zero2 offload2 zero3 offload3; do
    echo "bench-zero: ZeRO-Offload, $layout on 2 ranks"
    dir=$OUT/run-$layout-2-2  # memory's for zero2 and zero3
    [ "${layout#zero}" != "$layout" ] ||
        extension_run "$layout" 2 "$dir" --steps 2 --eval-every 0 --eval-batches 1 ||
        { echo "bench-zero: ZeRO-Offload left out: this train_zero does not run --offload yet"; rm -f "$OFFLOAD"; break; }
    plan=$OUT/plan-off-$([ "${layout#offload}" = "$layout" ] && echo 0 || echo 1).csv
    # peaks: the model states' categories on each side, planned and measured
    awk -F, -v l="$layout" 'FNR == 1 { f++ }
        f == 1 && $1 == "zero" substr(l, length(l)) { if ($2 ~ /^host_/) ph += $4
            else if ($2 ~ /^(params|grads|optimizer)$/) pd += $4 }
        f == 2 && $1 == 0 { b[$2] = $4; if ($2 !~ /^(host_)?(params|grads|optimizer)$/) o += $4 }
        END { printf "%s,%d,%d,%d,%d,%d,%d,%d,%d\n", l, b["params"], b["grads"], b["optimizer"],
              b["host_grads"], b["host_optimizer"], pd, ph, o }' "$plan" "$dir/memory.csv" >> "$OFFLOAD"
done
if [ -f "$OFFLOAD" ]; then
    tail -n +2 "$OFFLOAD" > "$OUT/offload.dat"
    gnuplot <<EOF_GP
$(bars_plot "$OUT/offload.png" 960 "ZeRO-Offload, config $CONFIG, $PRECISION, 2 ranks: rank 0's peak model-state bytes, measured (memory.csv)\nnot drawn: activations, scratch and comm, the same in every layout ($(awk -F, 'NR == 2 { printf "%.1f", $9 / 1048576 }' "$OFFLOAD") MiB)" rowstacked 560)
set boxwidth 0.6
set ylabel "MiB per rank (peak)"
set yrange [0:*]
set key below horizontal
plot "$OUT/offload.dat" using (\$2/1048576):xtic(1) title "device: params" lc rgb "#1f77b4", \\
     "" using (\$3/1048576) title "device: grads" lc rgb "#ff7f0e", \\
     "" using (\$4/1048576) title "device: optimizer" lc rgb "#2ca02c", \\
     "" using (\$5/1048576) title "host: grads" lc rgb "#ffbb78", \\
     "" using (\$6/1048576) title "host: optimizer" lc rgb "#98df8a", \\
     "" using 0:(\$7/1048576) with points pt 13 ps 2 lc rgb "black" title "planned: device", \\
     "" using 0:((\$7 + \$8)/1048576) with points pt 12 ps 2 lc rgb "black" title "planned: device + host"
EOF_GP
    echo "bench-zero: wrote $OUT/offload.png"
fi

# ---- speed -----------------------------------------------------------------
SPEED=$OUT/speed.csv
echo "ranks,layout,median_step_ms,peak_mib_per_rank,states_mib_per_rank,step_q1_ms,step_q3_ms" > "$SPEED"
for np in 2 4; do
    [ "${BENCH_SPEED:-1}" = 1 ] || break
    for layout in ddp zero1 zero2 zero3 zero3-noprefetch; do
        echo "bench-zero: speed, $layout on $np ranks, $STEPS steps"
        dir=$OUT/speed-$layout-$np
        train "$layout" "$np" "$dir" --steps "$STEPS" --eval-every 0 --eval-batches 1
        read -r q1 median q3 < <(step_quartiles_ms "$dir") || die "no timed steps in $dir/metrics.csv"
        read -r total states < <(awk -F, '$1 == 0 { t += $4; if ($2 == "params" || $2 == "grads" || $2 == "optimizer") s += $4 }
            END { printf "%.2f %.2f\n", t / 1048576, s / 1048576 }' "$dir/memory.csv")
        echo "$np,$layout,$median,$total,$states,$q1,$q3" >> "$SPEED"
    done
done

echo
echo "memory per rank (MiB; states = params + grads + moments + scratch):"
awk -F, 'NR > 1 && $1 != "" { printf "  %-12s measured states %7.3f  predicted %7.3f  total %7.3f (predicted %7.3f)\n",
    $1, ($4 + $5 + $6 + $7) / 1048576, $10 / 1048576, $12 / 1048576, $11 / 1048576 }' "$MEM"
echo "model states per rank at N = 4 ($PRECISION; bytes per parameter: params + grads + optimizer):"
awk -F, 'NR > 1 { printf "  %-6s %6.3f + %6.3f + %6.3f = %6.3f  (formula %.3f)\n", $1, $2, $3, $4, $5, $6 }' "$STATES"
echo "sent per step (units of Phi elements, $ELEM bytes each):"
awk -F, 'NR > 1 { printf "  %-12s %.4f  (formula %.4f)\n", $1, $5, $6 }' "$COMM"
[ ! -f "$HSDP" ] || {
    echo "hybrid sharding, 4 ranks as 2 nodes of 2 (units of Phi per step and rank: inside a node + across nodes):"
    awk -F, 'NR > 1 { printf "  %-14s %.4f + %.4f  (formula %.4f + %.4f), states %g bytes per parameter\n",
        $1, $2, $3, $4, $5, $6 }' "$HSDP"
}
[ ! -f "$OFFLOAD" ] || {
    echo "ZeRO-Offload, 2 ranks (peak MiB per rank of the model states: device, host; planned):"
    awk -F, 'NR > 1 { printf "  %-9s device %7.3f  host %7.3f  (planned %7.3f, %7.3f)\n", $1,
        ($2 + $3 + $4) / 1048576, ($5 + $6) / 1048576, $7 / 1048576, $8 / 1048576 }' "$OFFLOAD"
}
[ "${BENCH_SPEED:-1}" = 1 ] || exit 0
echo "speed ($CONFIG, 1 thread per rank, median over steps $SKIP..$((STEPS - 1)), and its quartiles:"
echo "medians inside each other's quartiles are the same speed, measured on a busy machine)"
printf '  %-5s %-17s %14s %17s %18s %18s\n' ranks layout median_step_ms quartiles_ms peak_MiB_per_rank states_MiB_per_rank
awk -F, 'NR > 1 { printf "  %-5s %-17s %14s %17s %18s %18s\n", $1, $2, $3, $6 "-" $7, $4, $5 }' "$SPEED"
