#!/usr/bin/env bash
# tools/tour.sh (`make tour`): the kit's central claim in one page. The same
# model and batch trained for the same steps in every layout of the
# composed trainer (train_4d: the solution's, or in a handout yours) and on one device (lab 00's
# train_gpt, the reference), then drawn:
#   losses.png   the loss curves overlaid: they coincide (the table gives
#                each layout's largest distance from one device);
#   memory.png   the busiest rank's bytes by category (memory.csv, which
#                each run checks against the planner);
#   traffic.png  bytes on the wire per step, per group (comm.csv's
#                payloads of tp, cp, dp/dcp, pp, embed, ep and edp times
#                what a ring sends of them; the loss's metrics group left
#                out), summed over the ranks and divided by the steps;
#   steps.png    the median step time (on this machine's cores, shared by
#                all the ranks: a picture of the work, not of a cluster);
# and report.html, the four charts and a table.
# Settings (environment): TOUR_CONFIG (default tiny), TOUR_STEPS (100),
# TOUR_OUT (runs/tour), TOUR_TIMEOUT (seconds a run, 300), TOUR_PRECISION
# (fp32, or bf16 / fp16: every run in mixed precision, one device's
# included; the layouts then follow it within lab 11's tolerance, not to
# the bit).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
die() { echo "tour: error: $*" >&2; exit 2; }
CONFIG=${TOUR_CONFIG:-tiny}
STEPS=${TOUR_STEPS:-100}
OUT=${TOUR_OUT:-runs/tour}
LIMIT=${TOUR_TIMEOUT:-300}
PRECISION=${TOUR_PRECISION:-fp32}
[[ "$STEPS" =~ ^[1-9][0-9]*$ ]] || die "TOUR_STEPS must be a positive whole number, got '$STEPS'"
[[ "$PRECISION" =~ ^(fp32|bf16|fp16)$ ]] || die "TOUR_PRECISION must be fp32, bf16 or fp16, got '$PRECISION'"
# the solutions' programs where they are here, else the student's (a handout)
copy_of() { [ -d "solutions/$1" ] && echo solutions || echo labs; }
T4D=build/$(copy_of 10_composed)/10_composed/train_4d
GPT=build/$(copy_of 00_single_device)/00_single_device/train_gpt
[ -x "$T4D" ] && [ -x "$GPT" ] || die "$T4D or $GPT not built (make all)"
command -v gnuplot > /dev/null || die "gnuplot not installed (apt-get install gnuplot-nox)"
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1} OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
rm -rf "$OUT"
mkdir -p "$OUT"

# name|ranks|flags: one device first (the reference), then each dimension
# alone on 4 ranks, then composed on 8
LAYOUTS=(
    "one device|1|"
    "dp 4|4|--dp 4"
    "dp 4 + zero-1|4|--dp 4 --zero 1"
    "tp 4|4|--tp 4"
    "tp 4 + sp|4|--tp 4 --sp"
    "pp 4 (1f1b)|4|--pp 4"
    "cp 4 (zigzag)|4|--cp 4 --cp-algo zigzag"
    "dp 2 x tp 2 x pp 2|8|--dp 2 --tp 2 --pp 2"
    "tp 2 x cp 2 x pp 2|8|--tp 2 --cp 2 --pp 2 --cp-algo zigzag"
    "dp 2 x cp 2 x tp 2 + sp|8|--dp 2 --cp 2 --tp 2 --sp"
)
ARGS=(--config "$CONFIG" --steps "$STEPS" --batch 8 --grad-accum 2 --eval-every 10 --threads 1
      --precision "$PRECISION")

i=0
for entry in "${LAYOUTS[@]}"; do
    IFS='|' read -r name np flags <<< "$entry"
    dir="$OUT/run$i"
    # one device is lab 00's own program, the reference of every lab
    prog=$([ "$np" = 1 ] && echo "$GPT" || echo "$T4D")
    # shellcheck disable=SC2086  # flags is a list
    timeout --kill-after=10 "$LIMIT" mpirun -q --oversubscribe -np "$np" "$prog" "${ARGS[@]}" $flags \
        --out "$dir" > "$dir.log" 2>&1 || { tail -n 15 "$dir.log" >&2; die "$name failed (log: $dir.log)"; }
    [ -f "$dir/comm.csv" ] || echo "rank,group,op,calls,bytes,seconds" > "$dir/comm.csv"
    if grep -q DIFFERENT "$dir.log"; then
        grep DIFFERENT "$dir.log" >&2
        die "$name: a memory check differs from the planner (log: $dir.log)"
    fi
    echo "$name" > "$dir.name"
    echo "tour: $name on $np rank$([ "$np" = 1 ] || echo s): done"
    i=$((i + 1))
done
N=$i

# bytes on the wire per step, per group, summed over the ranks (comm.csv's
# payloads, times what the ring algorithms send of a payload from each
# rank of a group of p: all-reduce 2(p-1)/p, reduce-scatter, all-gather
# and all-to-all (p-1)/p, a point-to-point send all of it). The groups'
# sizes come from the layout's degrees.
groups="tp cp dp dcp pp embed ep edp"
traffic="$OUT/traffic.dat"
echo "layout $groups" > "$traffic"
# degree NAME FLAGS DEFAULT: --NAME's value in FLAGS
degree() { sed -n "s/.*--$1 \([0-9]*\).*/\1/p" <<< "$2" | grep . || echo "$3"; }
for ((i = 0; i < N; i++)); do
    IFS='|' read -r name np flags <<< "${LAYOUTS[$i]}"
    tp=$(degree tp "$flags" 1) cp=$(degree cp "$flags" 1) pp=$(degree pp "$flags" 1) ep=$(degree ep "$flags" 1)
    dp=$((np / (tp * cp * pp)))
    awk -F, -v name="$name" -v steps="$STEPS" -v groups="$groups" \
        -v sizes="$tp $cp $dp $((dp * cp)) $pp 2 $ep $((dp / ep))" '
        BEGIN { n = split(groups, g, " "); split(sizes, z, " "); for (k = 1; k <= n; k++) p[g[k]] = z[k] }
        NR > 1 {
            q = p[$2]
            if ($3 == "allreduce") f = 2 * (q - 1) / q
            else if ($3 ~ /^(reduce_scatter|allgather|alltoall)/) f = (q - 1) / q
            else if ($3 == "send") f = 1
            else f = 0  # receives: their senders count them
            b[$2] += f * $5
        }
        END { printf "\"%s\"", name; for (k = 1; k <= n; k++) printf " %.0f", b[g[k]] / steps; printf "\n" }' \
        "$OUT/run$i/comm.csv" >> "$traffic"
done

# the table: one row a layout
table="$OUT/table.tsv"
printf 'layout\tranks\tfinal loss\tmax |loss - one device|\tbusiest rank bytes\tbytes on the wire per step\tstep ms\n' > "$table"
for ((i = 0; i < N; i++)); do
    dir="$OUT/run$i"
    np=$(awk -F, 'NR > 1 { r[$1] = 1 } END { print length(r) }' "$dir/memory.csv")
    awk -F, -v name="$(cat "$dir.name")" -v np="$np" -v steps="$STEPS" \
        -v ref="$OUT/run0/metrics.csv" -v mem="$dir/memory.csv" -v traffic="$traffic" -v want="$i" -v ng="$(wc -w <<< "$groups")" '
        BEGIN {
            while ((getline line < ref) > 0) { split(line, f, ","); if (f[1] ~ /^[0-9]+$/) base[f[1]] = f[2] }
            while ((getline line < mem) > 0) { split(line, f, ","); if (f[1] ~ /^[0-9]+$/) m[f[1]] += f[4] }
            for (r in m) if (m[r] > busiest) busiest = m[r]
            row = 0
            while ((getline line < traffic) > 0) if (row++ == want + 1) { k = split(line, f, " "); for (j = k - ng + 1; j <= k; j++) sent += f[j] }
        }
        NR == 1 { for (j = 1; j <= NF; j++) c[$j] = j; next }
        { d = $c["loss"] - base[$1]; if (d < 0) d = -d; if (d > worst) worst = d; last = $c["loss"]; ms[++n] = $c["step_ms"] }
        END {
            asort_ms(ms, n)
            printf "%s\t%d\t%.4f\t%.2g\t%d\t%.0f\t%.1f\n", name, np, last, worst, busiest, sent, med
        }
        function asort_ms(a, n,   i, j, t) {
            for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
            med = n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
        }' "$dir/metrics.csv" >> "$table"
done
column -t -s $'\t' "$table"

# (a) the loss curves
{
    echo "set terminal pngcairo size 1000,600 font 'sans,11' noenhanced"
    echo "set output '$OUT/losses.png'"
    echo "set datafile separator ','"
    echo "set title 'The same model and batch in $N layouts ($CONFIG, $PRECISION, $STEPS steps): one curve'"
    echo "set xlabel 'step'; set ylabel 'training loss (nats/token)'; set grid"
    echo "set key top right box opaque"
    printf "plot "
    for ((i = 0; i < N; i++)); do
        [ "$i" = 0 ] || printf ", "
        printf "'%s/run%d/metrics.csv' every ::1 using 1:2 with lines lw %s dt %d title '%s'" \
            "$OUT" "$i" "$([ "$i" = 0 ] && echo 4 || echo 1.5)" "$((i % 5 + 1))" "$(cat "$OUT/run$i.name")"
    done
    echo
} | gnuplot || die "gnuplot failed drawing the losses"

# (b) memory of the busiest rank by category, stacked
mem="$OUT/memory.dat"
echo "layout params grads optimizer activations comm workspace" > "$mem"
for ((i = 0; i < N; i++)); do
    bash tools/plot_stacked_bars.sh --memory-row "$(cat "$OUT/run$i.name")" "$OUT/run$i/memory.csv" >> "$mem"
done
bash tools/plot_stacked_bars.sh "$OUT/memory.png" "$mem" 7 MB \
    "Memory of each layout's busiest rank, by category (peak bytes, checked against the planner)"

bash tools/plot_stacked_bars.sh "$OUT/traffic.png" "$traffic" 9 "MB per step" \
    "Bytes on the wire per step, all ranks, per group (comm.csv's payloads x the ring algorithms' share)"

# (d) step time
awk -F'\t' 'NR > 1 { printf "\"%s\" %s\n", $1, $7 }' "$table" > "$OUT/steps.dat"
gnuplot <<EOF || die "gnuplot failed drawing the step times"
set terminal pngcairo size 1000,560 font 'sans,11' noenhanced
set output '$OUT/steps.png'
set title "Median step time ($(nproc) cores shared by all the ranks of a layout)"
set style fill solid 0.85 border -1
set boxwidth 0.6
set ylabel 'ms'
set xtics rotate by -30
set yrange [0:*]
set grid ytics
plot '$OUT/steps.dat' using 0:2:xtic(1) with boxes lc rgb '#1f77b4' notitle
EOF

# the report
{
    echo "<!doctype html><html><head><meta charset='utf-8'><title>The tour: one model, every layout</title>"
    echo "<style>body{font-family:sans-serif;max-width:1040px;margin:2em auto;color:#222}"
    echo "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #bbb;padding:4px 8px;text-align:right}"
    echo "td:first-child,th:first-child{text-align:left}img{max-width:100%;border:1px solid #ddd;margin:0.5em 0}</style></head><body>"
    echo "<h1>One model, every layout</h1>"
    echo "<p>Config <code>$CONFIG</code>, $STEPS steps of the same batches, with the composed trainer"
    echo "(<code>$T4D</code>) on this machine's $(nproc) CPU cores. Every run's memory per rank"
    echo "was checked against the planner's prediction, category by category. The losses coincide:"
    echo "every layout trains the same model.</p>"
    echo "<table><tr>"
    head -n 1 "$table" | tr '\t' '\n' | sed 's|.*|<th>&</th>|' | tr -d '\n'
    echo "</tr>"
    tail -n +2 "$table" | while IFS= read -r row; do
        echo "<tr>$(tr '\t' '\n' <<< "$row" | sed 's|.*|<td>&</td>|' | tr -d '\n')</tr>"
    done
    echo "</table>"
    for png in losses memory traffic steps; do echo "<p><img src='$png.png' alt='$png'></p>"; done
    echo "<p>Bytes on the wire per step: each collective's payload (comm.csv) times what a ring"
    echo "algorithm sends of it from each of the p ranks of its group (all-reduce 2(p-1)/p,"
    echo "reduce-scatter, all-gather and all-to-all (p-1)/p, a point-to-point send all of it), summed"
    echo "over the ranks. Sequence parallelism's reduce-scatter and all-gather send what TP's"
    echo "all-reduce sends. Step times are of ranks sharing $(nproc) cores, so they show how much work"
    echo "each layout adds, not how fast it would run on a cluster.</p></body></html>"
} > "$OUT/report.html"
echo "tour: wrote $OUT/report.html ($OUT/{losses,memory,traffic,steps}.png, table.tsv)"
