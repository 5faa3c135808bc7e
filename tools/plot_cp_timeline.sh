#!/usr/bin/env bash
# plot_cp_timeline.sh DIR PNG [TITLE] [T0 T1]: the ring's overlap in one
# training step of train_cp, from DIR/trace.csv, as a Gantt chart in PNG.
#
# Each rank gets three rows: its attention blocks (kernels.c's "attention
# block forward/backward" compute events, over light boxes for the forward
# and backward passes around them), its sends on the "cp" group and its
# receives there. A transfer is drawn from the moment it was posted to the
# moment the rank saw it complete, so a ring step's transfer of the next
# block's keys and values lies under the current block's compute when the
# two overlap, and a block that starts late shows the wait. In the backward
# pass two rings run at once (the keys and values, and the dK dV sums
# going round): their transfers are stacked in lanes.
#
# The window is one training step: by default the second (step 1; the
# last step begins with the held-out evaluation), from the first rank's end
# of step 0's optimizer to the last rank's end of step 1's; or T0..T1 in
# seconds on the run's shared clock (trace.csv's start_s/end_s).
set -euo pipefail

usage="usage: plot_cp_timeline.sh DIR PNG [TITLE] [T0 T1]"
die() {
    echo "plot_cp_timeline: error: $*" >&2
    exit 2
}

if [ $# -lt 2 ] || [ $# -gt 5 ] || [ $# -eq 4 ]; then die "$usage"; fi
dir=$1
png=$2
title=${3:-$(basename "$dir")}
title=${title//\"/\'}
t0=${4:-}
t1=${5:-}
csv="$dir/trace.csv"
# shellcheck source=tools/timeline_window.sh
source "$(dirname "${BASH_SOURCE[0]}")/timeline_window.sh"
timeline_check_inputs "$csv" train_cp "$t0" "$t1"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# ---- the window: "T0 T1 RANKS" ----------------------------------------------
window=$(awk -F, -v t0="$t0" -v t1="$t1" -v csv="$csv" '
    function fail(msg) { print "plot_cp_timeline: error: " csv ": " msg > "/dev/stderr"; failed = 1; exit 2 }
    NR == 1 {
        sub(/\r$/, "")
        if ($0 != "rank,category,name,group,start_s,end_s,bytes")
            fail("line 1 is not the header rank,category,name,group,start_s,end_s,bytes")
        next
    }
    {
        sub(/\r$/, "")
        if (NF != 7 || $1 !~ /^[0-9]+$/ || $6 + 0 < $5 + 0)
            fail("line " NR " is not rank,category,name,group,start_s,end_s,bytes: " substr($0, 1, 80))
        r = $1 + 0
        if (r + 1 > ranks) ranks = r + 1
        if ($2 == "compute" && $3 == "optimizer") opt_end[r, nopt[r]++] = $6 + 0
        if ($3 ~ /^attention block/) blocks++
    }
    END {
        if (failed) exit 2
        if (!blocks) fail("no \"attention block\" events: a ring run (--cp-algo ring, zigzag or striped) with --cp > 1 draws them")
        if (t0 != "") { printf "%.9f %.9f %d\n", t0, t1, ranks; exit 0 }
        n = nopt[0]
        for (r = 1; r < ranks; r++) if (nopt[r] < n) n = nopt[r]
        if (n < 2) fail("fewer than 2 steps: give the window as T0 T1")
        for (r = 0; r < ranks; r++) {
            if (r == 0 || opt_end[r, 0] < start) start = opt_end[r, 0]
            if (r == 0 || opt_end[r, 1] > end) end = opt_end[r, 1]
        }
        pad = (end - start) * 0.01
        printf "%.9f %.9f %d\n", start - pad, end + pad, ranks
    }' "$csv") || exit 2
read -r w0 w1 ranks <<< "$window"

# ---- the boxes: KIND X1 X2 Y1 Y2, x in ms from w0 ----------------------------
# Rank r's band is y in [R-r-1, R-r] (rank 0 on top): compute in the upper
# third, sends in the middle, receives in the lower third, each in lanes
# (a transfer takes the lowest lane free when it is posted).
tail -n +2 "$csv" | tr -d '\r' | sort -t, -k1,1n -k5,5g | awk -F, -v w0="$w0" -v w1="$w1" \
    -v ranks="$ranks" -v boxes="$work/boxes" -v info="$work/info" '
    $6 + 0 <= w0 || $5 + 0 >= w1 { next }
    {
        r = $1 + 0
        if ($2 == "compute") {
            if ($3 == "attention block forward") kind = "block_fwd"
            else if ($3 == "attention block backward") kind = "block_bwd"
            else if ($3 == "forward" || $3 == "backward") kind = "pass"
            else next
            row = 0; lane = 0
        } else if ($2 == "comm" && $4 == "cp" && ($3 == "send" || $3 == "recv")) {
            kind = $3; row = ($3 == "send" ? 1 : 2)
            for (lane = 0; (r, row, lane) in busy && busy[r, row, lane] > $5 + 0; lane++) ;
            busy[r, row, lane] = $6 + 0
            if (lane + 1 > lanes) lanes = lane + 1
        } else next
        s = ($5 + 0 < w0 ? w0 : $5 + 0); e = ($6 + 0 > w1 ? w1 : $6 + 0)
        n++; K[n] = kind; R[n] = r; S[n] = s; E[n] = e; W[n] = row; L[n] = lane
        count[kind]++
    }
    END {
        if (lanes < 1) lanes = 1
        for (i = 1; i <= n; i++) {
            top = ranks - R[i] - 0.04 - W[i] * 0.32
            if (W[i] == 0) {
                # the pass behind, the block in front
                if (K[i] == "pass") { y2 = top - 0.02; y1 = top - 0.28 }
                else { y2 = top - 0.05; y1 = top - 0.25 }
            } else {
                h = 0.28 / lanes
                y2 = top - L[i] * h; y1 = y2 - h * 0.8
            }
            printf "%s %.5f %.5f %.4f %.4f\n", K[i], (S[i] - w0) * 1e3, (E[i] - w0) * 1e3, y1, y2 > boxes
        }
        printf "%d", n > info
        for (k in count) printf " %s", k > info
        printf "\n" > info
    }'
read -r nboxes kinds < "$work/info"
[ "$nboxes" -gt 0 ] || die "no events between $w0 s and $w1 s in $csv"

plots=""
for kind in pass block_fwd block_bwd send recv; do
    [[ " $kinds " == *" $kind "* ]] || continue
    case $kind in
        pass)      fill="#eeeeee"; line="#bdbdbd"; label="forward / backward pass" ;;
        block_fwd) fill="#6baed6"; line="#08519c"; label="attention block forward" ;;
        block_bwd) fill="#fd8d3c"; line="#a63603"; label="attention block backward" ;;
        send)      fill="#74c476"; line="#006d2c"; label="send on cp (posted to complete)" ;;
        recv)      fill="#bcbddc"; line="#54278f"; label="receive on cp (posted to complete)" ;;
    esac
    plots+="${plots:+, }\"$work/boxes\" using (strcol(1) eq \"$kind\" ? (\$2+\$3)/2 : NaN):((\$4+\$5)/2):2:3:4:5 "
    plots+="with boxxyerror fs solid 0.9 border lc rgb \"$line\" fc rgb \"$fill\" title \"$label\""
done

ytics=""
marks=""
for ((r = 0; r < ranks; r++)); do
    top=$((ranks - r))
    for row in 0 1 2; do
        name=(blocks sends recvs)
        y=$(awk -v t=$top -v w=$row 'BEGIN { print t - 0.04 - w * 0.32 - 0.15 }')
        ytics+="${ytics:+, }\"rank $r ${name[$row]}\" $y"
    done
    [ "$r" -gt 0 ] && marks+="set arrow from graph 0, first $top to graph 1, first $top nohead lw 1 lc rgb \"#969696\" back"$'\n'
done
width=$(awk -v a="$w0" -v b="$w1" 'BEGIN { printf "%.4f", (b - a) * 1e3 }')
from=$(awk -v a="$w0" 'BEGIN { printf "%.3f", a }')
height=$((200 + 170 * ranks))

gnuplot <<EOF_GP
set terminal pngcairo size 1400,$height font ",11" noenhanced
set output "$png"
set title "$title"
set xlabel "time (ms), from $from s into the run"
set xrange [0:$width]
set yrange [0:$ranks]
set ytics ($ytics) scale 0
set grid xtics lc rgb "#e0e0e0"
set key above center horizontal maxcols 5 width 1 reverse Left samplen 2
$marks
plot $plots
EOF_GP
echo "plot_cp_timeline: wrote $png"
