#!/usr/bin/env bash
# help: lab 05: activations per rank vs the planner (tp 1, 2, 4; SP; recompute), recompute step times and FLOPs, activations vs seq
# bench/act.sh: lab 05's three figures. `make bench-act` builds, then runs
# this. train_tp with sequence parallelism (--sp) and activation
# recomputation (--recompute), one thread per rank, dp = 1.
#
#   memory     tp = 1, 2, 4 on as many ranks: at tp 1 recompute none,
#              selective, full (SP splits nothing there); at tp 2 and 4 TP
#              alone, TP+SP, TP+SP+selective, TP+SP+full, and TP+SP
#              gathered again (--sp-regather, the extension). Every rank's
#              activations peak (memory.csv) must equal the planner's
#              (memplan --tp N [--sp] --recompute MODE), byte for byte: "ok"
#              or "DIFFERENT", and the exit status is 1 after a difference.
#              The bars stack the planner's parts (memplan --activations
#              --csv) -> memory.png
#   step time  none, selective, full at tp 1 and at tp 2 with SP: median
#              step time over the steps from 3 on and rank 0's FLOPs per
#              step (--profile's profile.csv: the KERNEL macro's counts),
#              both relative to none -> step_time.png
#   seq        the planner alone on gpt2-124m (the kit's long context):
#              activation bytes per rank against the sequence length at tp 1
#              and tp 4, the attention probabilities apart from the rest, and
#              where they outgrow the rest -> seq.png
# Everything lands in memory.csv, time.csv and seq.csv, and tables are
# printed. Timings are printed, never checked.
#
#   BENCH_STEPS    steps of the timed runs (default 12; medians over the
#                  steps after the first 3); the other runs take 2
#   BENCH_CONFIG   tiny | small: the config of the runs (default small)
#   BENCH_TIMEOUT  seconds allowed to each run (default 300)
#   BENCH_OUT      output directory (default runs/05_activation_memory-bench)
#   BENCH_COPY     labs or solutions: whose train_tp (bench/common.sh)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
BENCH_NAME=bench-act
SKIP=3
source bench/common.sh

STEPS=${BENCH_STEPS:-12}
LIMIT=${BENCH_TIMEOUT:-300}
CONFIG=${BENCH_CONFIG:-small}
TP=$(bench_program 05_activation_memory train_tp)
PLAN=build/bin/memplan
DATA=build/data/synth.tok
OUT=${BENCH_OUT:-runs/05_activation_memory-bench}
# the seq figure: the only config whose context is long enough for the
# attention probabilities (T^2) to rival the rest (T), and its degrees
LONG=gpt2-124m
SEQ_DEGREES="1 4"
TIMED="tp1 tp2-sp"  # the step-time figure's layouts (with -selective, -full)

check_steps "$STEPS" $((SKIP + 2))
check_timeout "$LIMIT"
[[ "$CONFIG" =~ ^(tiny|small)$ ]] || die "BENCH_CONFIG must be tiny or small, got '$CONFIG'"
for f in "$TP" "$PLAN"; do [ -x "$f" ] || die "$f is missing: run 'make bench-act'"; done
[ -f "$DATA" ] || die "$DATA is missing: run 'make data' (or 'make bench-act')"
command -v gnuplot > /dev/null || die "gnuplot not installed (apt-get install gnuplot-nox)"

CORES=$(nproc)  # before OMP_NUM_THREADS=1, which nproc would report
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_NUM_THREADS=1

PARTS="residual layernorm_out split attention ends tokens"

# layout_flags LAYOUT: train_tp's and memplan's flags for a layout named as
# memplan --activations names it (tp2, tp2-sp, tp2-sp-selective, tp1-full...)
layout_flags() {
    local n=${1%%-*} mode=none
    [[ "$1" == *-selective ]] && mode=selective
    [[ "$1" == *-full ]] && mode=full
    local sp=
    [[ "$1" == *-sp* ]] && sp=" --sp"
    [[ "$1" == *-sp-regather* ]] && sp=" --sp-regather"  # the lab's extension
    echo "--tp ${n#tp}$sp --recompute $mode"
}

# layouts TP: the memory figure's layouts at degree TP
layouts() {
    if [ "$1" -eq 1 ]; then echo "tp1 tp1-selective tp1-full"
    else echo "tp$1 tp$1-sp tp$1-sp-selective tp$1-sp-full tp$1-sp-regather"; fi
}

# is_timed LAYOUT: the step-time figure runs LAYOUT (longer, --profile)
is_timed() {
    local t
    for t in $TIMED; do [[ "$1" =~ ^$t(-selective|-full)?$ ]] && return 0; done
    return 1
}

# part_bytes CSV LAYOUT: the planner's parts of LAYOUT, comma-separated in
# the order of PARTS, then their sum
part_bytes() {
    awk -F, -v l="$2" -v parts="$PARTS" '$1 == l { b[$2] = $3 }
        END { n = split(parts, p, " "); s = 0
              for (i = 1; i <= n; i++) { printf "%s,", b[p[i]]; s += b[p[i]] }
              printf "%.0f\n", s }' "$1"
}

# ---- memory ----------------------------------------------------------------
mkdir -p "$OUT"
MEM=$OUT/memory.csv
echo "tp,layout,${PARTS// /,},planned,plan_category,measured_min,measured_max,equal" > "$MEM"
different=0
for tp in 1 2 4; do
    "$PLAN" --config "$CONFIG" --tp "$tp" --activations --csv > "$OUT/plan-tp$tp.csv"
    for layout in $(layouts "$tp"); do
        read -ra flags <<< "$(layout_flags "$layout")"
        steps=2
        extra=()
        if is_timed "$layout"; then steps=$STEPS extra=(--profile); fi
        echo "bench-act: $layout on $tp rank(s), $steps steps"
        dir=$OUT/$layout
        run_ranks "$tp" "$dir" "$TP" "${flags[@]}" --config "$CONFIG" --threads 1 \
            --steps "$steps" --eval-every 0 --eval-batches 1 "${extra[@]}"
        parts=$(part_bytes "$OUT/plan-tp$tp.csv" "$layout")
        category=$("$PLAN" --config "$CONFIG" "${flags[@]}" --csv \
            | awk -F, -v l="$layout" '$1 == l && $2 == "activations" { print $4 }')
        read -r lo hi ranks < <(awk -F, '$2 == "activations" { n++
                if (n == 1 || $4 < lo) lo = $4; if (n == 1 || $4 > hi) hi = $4 }
            END { print lo, hi, n }' "$dir/memory.csv")
        equal=ok
        [ "$ranks" = "$tp" ] && [ "$lo" = "${parts##*,}" ] && [ "$hi" = "$lo" ] \
            && [ "$category" = "$lo" ] || { equal=DIFFERENT; different=$((different + 1)); }
        echo "$tp,$layout,$parts,$category,$lo,$hi,$equal" >> "$MEM"
    done
done

# gnuplot's data: the bars left to right with a gap between the degrees;
# each part's box reaches the sum of the parts up to it, so drawing the last
# first leaves every part its own band
awk -F, -v parts="$PARTS" 'NR > 1 {
        if (NR > 2 && $1 != tp) x++
        tp = $1
        # at tp 1 only the recomputation differs; "|" is a line break
        label = $2; sub(/^tp[0-9]+-?/, "", label); sub(/-/, "|+", label); sub(/^sp/, "SP", label)
        if ($1 > 1) label = "TP" (label == "" ? "" : "+" label)
        else if (label == "") label = "none"
        printf "%d,%s,%s", x++, label, $1
        n = split(parts, p, " "); s = 0
        for (i = 1; i <= n; i++) { s += $(i + 2); printf ",%.6f", s / 1048576 }
        printf ",%.6f\n", $(n + 6) / 1048576 }' "$MEM" > "$OUT/memory.dat"
COLORS=("#1f77b4" "#ff7f0e" "#2ca02c" "#d62728" "#9467bd" "#8c564b")
TITLES=("residual stream (res1, res2, LN statistics)" "layernorm outputs (ln1, ln2)"
        "TP-split (qkv, atty, fc, fc GELU)" "attention probabilities"
        "ends (embedding out, lnf, logits, losses)" "token ids")
{
    echo "set terminal pngcairo size 1300,600 font \",11\" noenhanced"
    echo "set output \"$OUT/memory.png\""
    echo "set datafile separator \",\""
    echo "set title \"Activation memory per rank, config $CONFIG, dp 1, ranks = tp\\nbars: memplan --activations by part; diamonds: the measured peak of every rank (memory.csv)\""
    echo "set style fill solid 0.85 border -1"
    echo "set boxwidth 0.75"
    echo "set ylabel \"activations, MiB per rank (peak)\""
    echo "set yrange [0:*]"
    echo "set offsets 0.6, 0.6, graph 0.12, 0"
    echo "set grid ytics"
    echo "set key inside right top reverse Left"
    echo "set xtics scale 0"
    echo "set bmargin 6"
    echo "br(s) = strstrt(s, \"|\") ? s[1:strstrt(s, \"|\") - 1].\"\\n\".s[strstrt(s, \"|\") + 1:] : s"
    # each degree's name under the middle of its bars
    awk -F, '{ if (!($3 in lo)) lo[$3] = $1; hi[$3] = $1 }
        END { for (t in lo) printf "set label \"tp %d (%d rank%s)\" at %.1f, graph -0.15 center\n",
                  t, t, (t > 1 ? "s" : ""), (lo[t] + hi[t]) / 2 }' "$OUT/memory.dat"
    plot="plot"
    for i in 5 4 3 2 1 0; do
        xtic=
        [ "$i" -gt 0 ] || xtic=":xtic(br(strcol(2)))"
        plot="$plot \"$OUT/memory.dat\" using 1:$((i + 4))$xtic with boxes lc rgb \"${COLORS[$i]}\" title \"${TITLES[$i]}\","
    done
    plot="$plot \"\" using 1:10 with points pt 13 ps 2 lc rgb \"black\" title \"measured, every rank\","
    plot="$plot \"\" using 1:10:(sprintf(\"%.2f\", \$10)) with labels offset 0,1.2 notitle"
    echo "$plot"
} | gnuplot
echo "bench-act: wrote $OUT/memory.png"

# ---- step time and FLOPs ---------------------------------------------------
TIME=$OUT/time.csv
echo "layout,recompute,median_step_ms,gflop_per_step,time_vs_none,flop_vs_none,q1_vs_none,q3_vs_none" > "$TIME"
for base in $TIMED; do
    ms0= gf0=
    for mode in none selective full; do
        dir=$OUT/$base$([ "$mode" = none ] || echo "-$mode")
        read -r q1 ms q3 < <(step_quartiles_ms "$dir") || die "no timed steps in $dir/metrics.csv"
        [ -s "$dir/profile.csv" ] || die "$dir/profile.csv is missing (train_tp --profile)"
        gf=$(awk -F, 'NR > 1 { s += $5 } END { printf "%.6f\n", s }' "$dir/profile.csv")
        ms0=${ms0:-$ms} gf0=${gf0:-$gf}
        echo "$base,$mode,$ms,$gf,$(awk -v a="$ms" -v b="$ms0" -v f="$gf" -v g="$gf0" -v l="$q1" -v h="$q3" \
            'BEGIN { printf "%.3f,%.3f,%.3f,%.3f", a / b, f / g, l / b, h / b }')" >> "$TIME"
    done
done
# one cluster per layout and measure, one bar per mode: its value, then the
# ends of its bar (the step time's quartiles; a FLOP count has none)
awk -F, 'NR > 1 { k = $1; if (!(k in seen)) { seen[k] = 1; order[++n] = k }
        tr[k, $2] = $5 "," $7 "," $8; fr[k, $2] = $6 "," $6 "," $6 }
    END { for (i = 1; i <= n; i++) { k = order[i]; name = k; sub(/^tp/, "tp ", name); sub(/-sp$/, " + SP", name)
            printf "%s: step time,%s,%s,%s\n", name, tr[k, "none"], tr[k, "selective"], tr[k, "full"]
            printf "%s: FLOPs,%s,%s,%s\n", name, fr[k, "none"], fr[k, "selective"], fr[k, "full"] } }' \
    "$TIME" > "$OUT/time.dat"
{
    echo "set terminal pngcairo size 1000,560 font \",11\" noenhanced"
    echo "set output \"$OUT/step_time.png\""
    echo "set datafile separator \",\""
    echo "set title \"The price of activation recomputation, config $CONFIG, 1 thread per rank (cores here: $CORES), relative to none\\nstep time: median over steps $SKIP..$((STEPS - 1)) of metrics.csv (bars: its quartiles); FLOPs: rank 0's, --profile\\nnone: $(awk -F, '$2 == "none" { l = $1; sub(/^tp/, "tp ", l); sub(/-sp$/, " + SP", l)
        printf "%s%s %.1f ms, %.3f GFLOP", n++ ? "; " : "", l, $3, $4 }' "$TIME")\""
    echo "set style data histograms"
    echo "set style histogram errorbars gap 1 lw 1"
    echo "set style fill solid 0.85 border -1"
    echo "set ylabel \"relative to recompute none\""
    echo "set yrange [0:*]"
    echo "set offsets 0, 0, graph 0.15, 0"
    echo "set grid ytics"
    echo "set key below horizontal"
    echo "set xtics scale 0"
    echo "set xrange [-0.6:$(($(wc -l < "$OUT/time.dat") - 1)).6]"
    plot="plot"
    i=0
    for mode in none selective full; do
        xtic=
        [ "$i" -gt 0 ] || xtic=":xtic(1)"
        plot="$plot \"$OUT/time.dat\" using $((3 * i + 2)):$((3 * i + 3)):$((3 * i + 4))$xtic title \"recompute $mode\" lc rgb \"${COLORS[$((i * 2))]}\","
        # bar j of cluster x stands at x + (j - 1) / (3 bars + gap 1)
        plot="$plot \"\" using (\$0 + ($i - 1) / 4.0):$((3 * i + 4)):(sprintf(\"%.2f\", \$$((3 * i + 2)))) with labels offset 0,0.8 notitle,"
        i=$((i + 1))
    done
    echo "${plot%,}"
} | gnuplot
echo "bench-act: wrote $OUT/step_time.png"

# ---- activations vs sequence length (planner only) ------------------------
SEQ=$OUT/seq.csv
# the planner's defaults: its micro-batch and, for --seq, the context
read -r MICRO CTX < <("$PLAN" --config "$LONG" --tp 1 \
    | sed -n 's/.*micro-batch \([0-9]*\) x \([0-9]*\) per rank.*/\1 \2/p')
[ -n "${CTX:-}" ] || die "memplan --config $LONG printed no micro-batch line"
echo "layout,seq,attention,other,total" > "$SEQ"
for tp in $SEQ_DEGREES; do
    for ((seq = 64; seq <= CTX; seq += 64)); do
        "$PLAN" --config "$LONG" --tp "$tp" --seq "$seq" --activations --csv \
            | awk -F, -v tp="$tp" -v seq="$seq" 'NR > 1 && !(tp == 1 && $1 ~ /-sp/) {
                  if (!($1 in t)) order[++n] = $1
                  t[$1] += $3; if ($2 == "attention") a[$1] = $3 }
                END { for (i = 1; i <= n; i++) { l = order[i]
                      printf "%s,%d,%.0f,%.0f,%.0f\n", l, seq, a[l], t[l] - a[l], t[l] } }'
    done
done >> "$SEQ"
[ "$(wc -l < "$SEQ")" -gt 1 ] || die "memplan gave no activation parts for $LONG"
# Each part is a polynomial in T (the probabilities B NH/tp T^2, the rest
# linear): a parabola through three of the planner's points, checked against
# all of them, finds where the probabilities outgrow the rest even past
# the context, where the planner cannot go.
CROSS=$OUT/crossover.csv
awk -F, 'NR > 1 { l = $1; if (!(l in n)) order[++m] = l
        k = ++n[l]; T[l, k] = $2; A[l, k] = $3; O[l, k] = $4 }
    function fit(l, Y,    x1, x2, x3, d1, d2) {
        x1 = T[l, 1]; x2 = T[l, int((n[l] + 1) / 2)]; x3 = T[l, n[l]]
        d1 = (Y[l, int((n[l] + 1) / 2)] - Y[l, 1]) / (x2 - x1)
        d2 = (Y[l, n[l]] - Y[l, int((n[l] + 1) / 2)]) / (x3 - x2)
        c2 = (d2 - d1) / (x3 - x1); c1 = d1 - c2 * (x1 + x2); c0 = Y[l, 1] - c1 * x1 - c2 * x1 * x1 }
    function worst(l, Y,    k, e, w) {
        for (k = 1; k <= n[l]; k++) { e = Y[l, k] - (c2 * T[l, k] ^ 2 + c1 * T[l, k] + c0)
            if (e < 0) e = -e; if (e > w) w = e }
        return w }
    BEGIN { print "layout,a2,a1,a0,o2,o1,o0,crossover,worst_fit_bytes" }
    END { for (i = 1; i <= m; i++) { l = order[i]
            fit(l, A); a2 = c2; a1 = c1; a0 = c0; w = worst(l, A)
            fit(l, O); o2 = c2; o1 = c1; o0 = c0; v = worst(l, O); if (v > w) w = v
            # attention - rest = p T^2 + q T + r turns positive at its larger root
            p = a2 - o2; q = a1 - o1; r = a0 - o0; x = "never"
            if (p > 0) x = sprintf("%.1f", (-q + sqrt(q * q - 4 * p * r)) / (2 * p))
            else if (p == 0 && q > 0) x = sprintf("%.1f", -r / q)
            printf "%s,%.6f,%.6f,%.3f,%.6f,%.6f,%.3f,%s,%.3f\n", l, a2, a1, a0, o2, o1, o0, x, w } }' \
    "$SEQ" > "$CROSS"
awk -F, 'NR > 1 && $9 > 1 { exit 1 }' "$CROSS" \
    || die "the planner's activation parts are not polynomials of degree 2 in seq ($CROSS): the crossover cannot be extrapolated"

# the chart's range: past the crossovers of the layouts without recomputation
XMAX=$(awk -F, -v ctx="$CTX" 'NR > 1 && $1 !~ /selective|full/ && $8 != "never" && $8 > x { x = $8 }
    END { x = (x > ctx ? x : ctx) * 1.15; print int((x + 255) / 256) * 256 }' "$CROSS")
# per layout: the planner's points (GiB), and the fit from the context on
for l in $(awk -F, 'NR > 1 { print $1 }' "$CROSS"); do
    awk -F, -v l="$l" 'NR > 1 && $1 == l { printf "%d,%.6f,%.6f,%.6f\n", $2, $3 / 2^30, $4 / 2^30, $5 / 2^30 }' \
        "$SEQ" > "$OUT/seq-$l.dat"
    awk -F, -v l="$l" -v ctx="$CTX" -v xmax="$XMAX" '$1 == l {
            for (T = ctx; T <= xmax; T += 32) { a = $2 * T * T + $3 * T + $4; o = $5 * T * T + $6 * T + $7
                printf "%d,%.6f,%.6f,%.6f\n", T, a / 2^30, o / 2^30, (a + o) / 2^30 } }' \
        "$CROSS" > "$OUT/seq-$l-beyond.dat"
done
# seq_name LAYOUT: its name in the seq chart's legend
seq_name() {
    local base
    base=$([ "${1%%-*}" = tp1 ] && echo "" || echo "TP")
    case ${1#tp[0-9]} in
        "") echo "${base:-none}${base:+ alone}" ;;
        -selective) echo "${base}${base:+ + }selective" ;;
        -sp) echo "TP + SP" ;;
        -sp-selective) echo "TP + SP + selective" ;;
    esac
}

# curve LAYOUT COLUMN COLOR POINT TITLE: a plot clause for the planner's
# points of LAYOUT's column COLUMN (2 attention, 3 the rest, 4 total) and one
# for its dotted extrapolation past the context
curve() {
    printf '"%s" using 1:%s with linespoints pt %s ps 0.7 lw 2 lc rgb "%s" title "%s", ' \
        "$OUT/seq-$1.dat" "$2" "$4" "$3" "$5"
    printf '"%s" using 1:%s with lines lw 2 dt 3 lc rgb "%s" notitle, ' "$OUT/seq-$1-beyond.dat" "$2" "$3"
}

# seq_panel TP: totals of none and selective (at tp > 1 also with SP), and
# none's attention probabilities and the rest, their crossings marked
seq_panel() {
    local tp=$1 plot="plot " l x y pt=6
    echo "set title \"tp $tp ($tp rank$([ "$tp" -gt 1 ] && echo s)), $LONG, micro-batch $MICRO sequences per rank\""
    echo "unset arrow; unset label"
    echo "set arrow from $CTX, graph 0 to $CTX, graph 1 nohead lc rgb \"gray40\" lw 2"
    echo "set label \"context $CTX\" at $CTX, graph 0.5 center rotate by 90 offset -1,0 tc rgb \"gray40\""
    plot="$plot$(curve "tp$tp" 4 "#d62728" 7 "total, $(seq_name "tp$tp")")"
    plot="$plot$(curve "tp$tp-selective" 4 "#1f77b4" 7 "total, $(seq_name "tp$tp-selective")")"
    if [ "$tp" -gt 1 ]; then
        plot="$plot$(curve "tp$tp-sp" 4 "#ff7f0e" 7 "total, TP + SP")"
        plot="$plot$(curve "tp$tp-sp-selective" 4 "#17becf" 7 "total, TP + SP + selective")"
    fi
    plot="$plot$(curve "tp$tp" 2 "#9467bd" 5 "attention probabilities, $(seq_name "tp$tp")$([ "$tp" -gt 1 ] && echo " (the same with SP)")")"
    plot="$plot$(curve "tp$tp" 3 "#2ca02c" 9 "everything else, $(seq_name "tp$tp")")"
    [ "$tp" -eq 1 ] || plot="$plot$(curve "tp$tp-sp" 3 "#bcbd22" 9 "everything else, TP + SP")"
    for l in "tp$tp" "tp$tp-sp"; do
        [ -s "$OUT/seq-$l.dat" ] || continue
        read -r x y < <(awk -F, -v l="$l" '$1 == l && $8 != "never" {
            printf "%s %.6f\n", $8, ($2 * $8 * $8 + $3 * $8 + $4) / 2^30 }' "$CROSS")
        [ -n "${x:-}" ] || continue
        echo "set arrow from $x, graph 0 to $x, $y nohead dt 2 lc rgb \"black\""
        plot="$plot'+' using ($x):($y) every ::0::0 with points pt $pt ps 2.5 lw 2 lc rgb \"black\" title \"attention = the rest, $(seq_name "$l"): T = ${x%.*}\", "
        pt=4
    done
    echo "${plot%, }"
}
{
    echo "set terminal pngcairo size 1400,640 font \",11\" noenhanced"
    echo "set output \"$OUT/seq.png\""
    echo "set datafile separator \",\""
    echo "set multiplot layout 1,2 title \"Activations per rank vs sequence length, from the planner (memplan --activations), without a run\\npoints: the planner up to the context; dotted past it: its parabolas extrapolated; open symbols: where the attention probabilities outgrow everything else\""
    echo "set xlabel \"sequence length T (tokens)\""
    echo "set ylabel \"activations, GiB per rank\""
    echo "set xrange [0:$XMAX]"
    echo "set yrange [0:*]"
    echo "set grid"
    echo "set key top left reverse Left"
    for tp in $SEQ_DEGREES; do seq_panel "$tp"; done
    echo "unset multiplot"
} | gnuplot
echo "bench-act: wrote $OUT/seq.png"

# ---- tables ----------------------------------------------------------------
echo
echo "activations per rank, config $CONFIG (bytes): the planner's parts, their sum, and every rank's measured peak"
printf '  %-2s %-17s %10s %10s %10s %10s %10s %7s %10s %10s %s\n' \
    tp layout residual ln_out split attention ends tokens planned measured plan
awk -F, 'NR > 1 { printf "  %-2s %-17s %10s %10s %10s %10s %10s %7s %10s %10s %s\n",
    $1, $2, $3, $4, $5, $6, $7, $8, $9, ($11 == $12 ? $11 : $11 ".." $12), $13 }' "$MEM"
echo "recomputation's price, config $CONFIG (median step ms over steps $SKIP..$((STEPS - 1)); rank 0's GFLOP per step)"
printf '  %-7s %-10s %9s %9s %8s %8s\n' layout recompute step_ms GFLOP time_x flop_x
awk -F, 'NR > 1 { printf "  %-7s %-10s %9s %9s %8s %8s\n", $1, $2, $3, $4, $5, $6 }' "$TIME"
echo "  (full runs every block's forward twice: about 4/3 of none's FLOPs; selective only the attention)"
echo "where the attention probabilities outgrow everything else, $LONG (context $CTX), from the planner"
echo "(selective and full keep one block's probabilities, not every block's: much later)"
awk -F, -v ctx="$CTX" 'NR > 1 { x = $8
        printf "  %-17s T = %s%s\n", $1, x, x == "never" ? "" : (x + 0 > ctx ? "  (past the context: extrapolated)" : "") }' "$CROSS"
echo "bench-act: wrote $MEM, $TIME, $SEQ and the charts memory.png, step_time.png, seq.png in $OUT"
if [ "$different" -gt 0 ]; then
    echo "$BENCH_NAME: error: $different run(s) measured activations that differ from the planner (DIFFERENT above)" >&2
    exit 1
fi
