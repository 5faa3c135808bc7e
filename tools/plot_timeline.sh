#!/usr/bin/env bash
# plot_timeline.sh DIR [TITLE] [T0 T1]: a Gantt chart of DIR/trace.csv (what
# train_ddp and the later parallel trainers write) into DIR/timeline.png.
#
# Each rank gets two rows: what it computes (forward, each backward range,
# optimizer) and what it communicates (the dp group's gradient all-reduces,
# other collectives in grey). A collective is drawn from the moment it was
# started to the moment the rank saw it complete, so in overlapped DDP
# several are in flight at once: they are stacked in lanes instead of hiding
# each other. Whether the red boxes sit under the backward boxes or after
# them is the whole point of lab 02's overlap.
#
# The window is two training steps: by default the two before the last one
# (the last step begins with the held-out evaluation, which is not traced and
# would show as a long blank), found from the "optimizer" events; or T0..T1,
# in seconds since the run's shared clock zero (trace.csv's start_s/end_s).
set -euo pipefail

usage="usage: plot_timeline.sh DIR [TITLE] [T0 T1]  (T0 < T1 in seconds, as in DIR/trace.csv)"
die() {
    echo "plot_timeline: error: $*" >&2
    exit 2
}

if [ $# -lt 1 ] || [ $# -gt 4 ] || [ $# -eq 3 ]; then die "$usage"; fi
dir=$1
title=${2:-$(basename "$dir")}
title=${title//\"/\'}   # a double quote would end gnuplot's string
t0=${3:-}
t1=${4:-}
csv="$dir/trace.csv"
png="$dir/timeline.png"
# shellcheck source=tools/timeline_window.sh
source "$(dirname "${BASH_SOURCE[0]}")/timeline_window.sh"
timeline_check_inputs "$csv" train_ddp "$t0" "$t1"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# ---- 1. check the file and choose the window ------------------------------
# Prints "T0 T1 RANKS FIRST_STEP" (FIRST_STEP: the 0-based step the window
# starts at, or -1 for a window given by hand), and the step boundaries
# ("step K END_S", rank 0's optimizer ends) to $work/steps. A malformed file
# is one error line, exit 2, whatever is wrong with it.
window=$(awk -F, -v t0="$t0" -v t1="$t1" -v csv="$csv" -v steps="$work/steps" '
    function fail(msg) { print "plot_timeline: error: " csv ": " msg > "/dev/stderr"; failed = 1; exit 2 }
    function num(s) { return s ~ /^-?[0-9]+([.][0-9]*)?([eE][-+]?[0-9]+)?$/ }
    NR == 1 {
        sub(/\r$/, "")
        if ($0 != "rank,category,name,group,start_s,end_s,bytes")
            fail("line 1 is not the header rank,category,name,group,start_s,end_s,bytes")
        next
    }
    {
        sub(/\r$/, "")
        if (NF != 7 || $1 !~ /^[0-9]+$/ || !num($5) || !num($6) || $6 + 0 < $5 + 0 || $2 == "")
            fail("line " NR " is not rank,category,name,group,start_s,end_s,bytes with end_s >= start_s: " substr($0, 1, 80))
        r = $1 + 0
        if (r + 1 > ranks) ranks = r + 1
        seen[r] = 1
        events++
        if ($2 == "compute" && $3 == "forward" && (first_fwd == "" || $5 + 0 < first_fwd)) first_fwd = $5 + 0
        if ($2 == "compute" && $3 == "optimizer") opt_end[r, nopt[r]++] = $6 + 0
    }
    END {
        if (failed) exit 2
        if (!events) fail("no events after the header")
        for (r = 0; r < ranks; r++) if (!(r in seen)) fail("no events of rank " r " (ranks 0.." ranks - 1 " expected)")
        # steps every rank finished
        n = nopt[0]
        for (r = 1; r < ranks; r++) if (nopt[r] < n) n = nopt[r]
        # (step 0 starts at the first forward pass: boundary "-1")
        if (first_fwd != "") printf "-1 %.9f\n", first_fwd > steps
        for (k = 0; k < n; k++) printf "%d %.9f\n", k, opt_end[0, k] > steps
        if (t0 != "") { printf "%.9f %.9f %d -1\n", t0, t1, ranks; exit 0 }
        if (n == 0) fail("no \"optimizer\" events to find the steps by: give the window as T0 T1")
        last = n >= 3 ? n - 2 : n - 1          # the last step drawn (0-based)
        first = last >= 1 ? last - 1 : last
        # a step starts when the one before it ended (its optimizer, on the
        # rank that got there first, so that no rank has its step cut), the first
        # one at the first forward pass; it ends on the rank that finished last
        if (first == 0) start = first_fwd
        else for (r = 0; r < ranks; r++) if (r == 0 || opt_end[r, first - 1] < start) start = opt_end[r, first - 1]
        for (r = 0; r < ranks; r++) if (r == 0 || opt_end[r, last] > end) end = opt_end[r, last]
        pad = (end - start) * 0.02
        printf "%.9f %.9f %d %d\n", start - pad, end + pad, ranks, first
    }' "$csv") || exit 2
read -r w0 w1 ranks first_step <<< "$window"

# ---- 2. the boxes ----------------------------------------------------------
# One line per box: KIND X1 X2 Y1 Y2 (x in ms from the window start). Rank r's
# band is y in [R-r-1, R-r] for R ranks (rank 0 at the top): compute in its
# upper part, communication lanes in the lower part. Lanes: a collective goes into the
# lowest lane free at its start (events sorted by start time).
tail -n +2 "$csv" | tr -d '\r' | sort -t, -k1,1n -k5,5g | awk -F, -v w0="$w0" -v w1="$w1" -v ranks="$ranks" \
    -v boxes="$work/boxes" -v info="$work/info" '
    $6 + 0 <= w0 || $5 + 0 >= w1 { next }
    {
        s = ($5 + 0 < w0 ? w0 : $5 + 0); e = ($6 + 0 > w1 ? w1 : $6 + 0)
        r = $1 + 0
        if ($2 == "compute") {
            kind = ($3 == "forward" || $3 == "backward" || $3 == "optimizer") ? $3 : "compute_other"
            lane = -1
        } else {
            kind = ($4 == "dp") ? "dp" : "comm_other"
            if (kind == "dp") dp_ops[$3] = 1
            for (lane = 0; (r, lane) in lane_end && lane_end[r, lane] > $5 + 0; lane++) ;
            lane_end[r, lane] = $6 + 0
            if (lane + 1 > lanes) lanes = lane + 1
        }
        n++; K[n] = kind; R[n] = r; S[n] = s; E[n] = e; L[n] = lane
        count[kind]++
    }
    END {
        if (lanes < 1) lanes = 1
        for (i = 1; i <= n; i++) {
            top = ranks - R[i]     # rank 0 at the top
            if (L[i] < 0) { y1 = top - 0.45; y2 = top - 0.08 }
            else {
                h = 0.40 / lanes
                y2 = top - 0.52 - L[i] * h; y1 = y2 - h * 0.85
            }
            printf "%s %.4f %.4f %.4f %.4f\n", K[i], (S[i] - w0) * 1e3, (E[i] - w0) * 1e3, y1, y2 > boxes
            present[K[i]] = 1
        }
        ops = ""
        for (op in dp_ops) ops = ops (ops == "" ? "" : "/") op
        # more backward boxes than forward ones: the backward pass hands its
        # gradients over range by range (overlapped DDP), worth saying
        printf "%d %s %d", n, (ops == "" ? "-" : ops), (count["backward"] > count["forward"] + 1) > info
        for (k in present) printf " %s", k > info
        printf "\n" > info
    }'
read -r nboxes dp_ops split kinds < "$work/info"
[ "$nboxes" -gt 0 ] || die "no events between $w0 s and $w1 s in $csv (the run spans $(awk -F, 'NR > 1 { if (NR == 2 || $5 < a) a = $5; if ($6 > b) b = $6 } END { printf "%.3f..%.3f s", a, b }' "$csv"))"

# ---- 3. the chart ----------------------------------------------------------
# One plot clause per kind present, in a fixed colour; boxes get a darker
# outline so that consecutive backward ranges stay distinguishable.
plots=""
for kind in forward backward optimizer compute_other dp comm_other; do
    [[ " $kinds " == *" $kind "* ]] || continue
    case $kind in
        forward)       fill="#9ecae1"; line="#3182bd"; label="forward" ;;
        backward)      fill="#3182bd"; line="#08306b"; label="backward"
                       [ "$split" = 1 ] && label="backward (a box per gradient range handed to DDP)" ;;
        optimizer)     fill="#74c476"; line="#238b45"; label="optimizer (AdamW)" ;;
        compute_other) fill="#fdd0a2"; line="#d94801"; label="other compute" ;;
        dp)            fill="#ef3b2c"; line="#67000d"; label="gradient $dp_ops (group dp): start to completion" ;;
        comm_other)    fill="#bdbdbd"; line="#525252"; label="other communication (loss sums...)" ;;
    esac
    # (the x of the other kinds' rows is NaN: gnuplot skips them)
    plots+="${plots:+, }\"$work/boxes\" using (strcol(1) eq \"$kind\" ? (\$2+\$3)/2 : NaN):((\$4+\$5)/2):2:3:4:5 "
    plots+="with boxxyerror fs solid 0.9 border lc rgb \"$line\" fc rgb \"$fill\" title \"$label\""
done

# rank labels at the middle of each row, step boundaries as dashed lines
ytics=""
for ((r = 0; r < ranks; r++)); do
    top=$((ranks - r))
    ytics+="${ytics:+, }\"rank $r compute\" $(awk -v t=$top 'BEGIN { print t - 0.265 }')"
    ytics+=", \"rank $r comm\" $(awk -v t=$top 'BEGIN { print t - 0.72 }')"
done
width=$(awk -v a="$w0" -v b="$w1" 'BEGIN { printf "%.4f", (b - a) * 1e3 }')
# Each step boundary (rank 0's optimizer end) as a dashed line, and above the
# chart each step's number and length, so the boxes can be read against
# metrics.csv's step_ms.
marks=$(awk -v w0="$w0" -v w1="$w1" '
    {
        x = ($2 - w0) * 1e3
        if ($1 >= 0 && $2 > w0 && $2 < w1)
            printf "set arrow from %.4f, graph 0 to %.4f, graph 1 nohead dt 2 lw 1 lc rgb \"#636363\" back\n", x, x
        if (NR > 1 && prev >= w0 && $2 <= w1)
            printf "set label \"step %d: %.1f ms\" at %.4f, graph 1 offset 0, 0.7 center tc rgb \"#404040\"\n", $1, x - px, (x + px) / 2
        prev = $2; px = x
    }' "$work/steps")
for ((r = 1; r < ranks; r++)); do
    marks+=$'\n'"set arrow from graph 0, first $r to graph 1, first $r nohead lw 1 lc rgb \"#bdbdbd\" back"
done
from=$(awk -v a="$w0" 'BEGIN { printf "%.3f", a }')
if [ "$first_step" -ge 0 ]; then
    what="steps $first_step and $((first_step + 1))"
    [ "$(grep -vc '^-1 ' "$work/steps")" -le 1 ] && what="step $first_step"
else
    what="window $t0..$t1 s"
fi
height=$((220 + 150 * ranks))

gnuplot <<EOF_GP
set terminal pngcairo size 1200,$height font ",11" noenhanced
set output "$png"
set title "$title: $what" offset 0, 1
set xlabel "time (ms), from $from s into the run"
set xrange [0:$width]
set yrange [0:$ranks]
set ytics ($ytics) scale 0
set grid xtics lc rgb "#e0e0e0"
set key below center horizontal maxcols 3 width 2 reverse Left
set tmargin 4.5
$marks
plot $plots
EOF_GP
echo "plot_timeline: wrote $png"
