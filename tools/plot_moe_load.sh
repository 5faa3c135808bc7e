#!/usr/bin/env bash
# plot_moe_load.sh PNG TITLE DIR...: how a mixture of experts spreads its
# tokens over the experts, step by step, from each DIR/moe.csv (runs of
# the same model and batch, e.g. with and without the load-balancing loss).
# One panel per run: each expert's share of the step's kept assignments
# (1/E each when balanced; a line far above it is an expert the router
# favours, one near 0 a collapsed expert), and the share of all assignments
# dropped over capacity (what an imbalance costs: those tokens skip the
# MoE block). The panel's title gives the run's aux loss coefficient, read
# from DIR/run.json's command line when present, else DIR's name.
set -euo pipefail

die() {
    echo "plot_moe_load: error: $*" >&2
    exit 2
}

[ $# -ge 3 ] || die "usage: plot_moe_load.sh PNG TITLE DIR...  (each DIR holding a moe.csv)"
png=$1
title=${2//\"/\'}
shift 2
command -v gnuplot > /dev/null || die "gnuplot not installed (apt-get install gnuplot-nox)"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# per run: "step share_0 .. share_{E-1} dropped_share" and its expert count
experts=""
i=0
for dir in "$@"; do
    csv=$dir/moe.csv
    [ -s "$csv" ] || die "$csv not found or empty (a run with --experts writes it)"
    i=$((i + 1))
    e=$(awk -F, -v csv="$csv" -v out="$work/run$i" '
        function fail(msg) { print "plot_moe_load: error: " csv ": " msg > "/dev/stderr"; failed = 1; exit 2 }
        NR == 1 {
            sub(/\r$/, "")
            if ($1 != "step" || $2 != "aux_loss" || $3 != "dropped" || $4 != "load_0")
                fail("line 1 is not the header step,aux_loss,dropped,load_0,...")
            E = NF - 3
            next
        }
        {
            sub(/\r$/, "")
            if (NF != E + 3 || $1 !~ /^[0-9]+$/) fail("line " NR " does not have the header'"'"'s " E + 3 " fields")
            kept = 0
            for (j = 4; j <= NF; j++) kept += $j
            all = kept + $3
            if (all <= 0) fail("line " NR ": no assignments")
            printf "%d", $1 > out
            for (j = 4; j <= NF; j++) printf " %.6f", (kept > 0 ? $j / kept : 0) > out
            printf " %.6f\n", $3 / all > out
            rows++
        }
        END { if (failed) exit 2; if (!rows) fail("no steps after the header"); print E }' "$csv") || exit 2
    [ -z "$experts" ] || [ "$experts" = "$e" ] || die "$csv has $e experts, an earlier one $experts"
    experts=$e
    label=$(basename "$dir")
    if [ -s "$dir/run.json" ]; then
        coef=$(grep -o '"aux_loss_coef": *[0-9.eE+-]*' "$dir/run.json" | grep -o '[0-9.eE+-]*$' || true)
        [ -n "$coef" ] && label="aux loss coefficient $coef"
    fi
    echo "$label" > "$work/label$i"
done
runs=$i

{
    echo "set terminal pngcairo size $((420 * runs + 120)),520 font 'sans,11' noenhanced"
    echo "set output '$png'"
    echo "set multiplot layout 1,$runs title \"$title\""
    echo "set grid ytics"
    echo "set key outside bottom center horizontal maxrows 2"
    echo "set xlabel 'step'"
    echo "set ylabel 'share'"
    echo "set yrange [0:*]"
    for ((i = 1; i <= runs; i++)); do
        echo "set title \"$(cat "$work/label$i")\""
        p="1.0 / $experts title 'balanced (1/E)' with lines dashtype 2 lw 2 lc rgb '#777777'"
        for ((j = 0; j < experts; j++)); do
            p+=", '$work/run$i' using 1:$((j + 2)) with lines lw 1.5 title 'expert $j'"
        done
        p+=", '$work/run$i' using 1:$((experts + 2)) with lines lw 2 lc rgb '#000000' title 'dropped'"
        echo "plot $p"
    done
    echo "unset multiplot"
} > "$work/plot.gp"
gnuplot "$work/plot.gp"
echo "plot_moe_load: wrote $png"
