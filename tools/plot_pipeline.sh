#!/usr/bin/env bash
# plot_pipeline.sh CSV PNG "TITLE": a pipeline schedule's timeline as a
# Gantt chart, one row per rank (rank 0 at the top), x = time.
#
# CSV is what pipeline_schedule --out writes (lab 06), simulated, and what
# the pipeline trainer writes from its measured trace:
#   rank,index,label,kind,micro,chunk,start,end
# one row per op of a rank's list (index: its position there), kind as
# schedule.h's pipe_op_kind_name: forward, backward, backward-input,
# backward-weight (drawn, each in its colour, labelled with its letter and
# micro-batch, F3, or micro-batch.chunk, F3.1, when some op has a chunk
# above 0) and send-act,
# recv-act, send-grad, recv-grad (messages: not drawn). The bubble is the
# white space between the bars. Bad input: one error line, exit status 2.
set -euo pipefail

die() {
    echo "plot_pipeline: error: $*" >&2
    exit 2
}

[ $# -eq 3 ] || die 'usage: plot_pipeline.sh CSV PNG "TITLE"'
csv=$1
png=$2
title=${3//\"/\'}   # a double quote would end gnuplot's string
[ -s "$csv" ] || die "$csv not found or empty"
command -v gnuplot > /dev/null || die "gnuplot not installed (apt-get install gnuplot-nox)"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# ---- 1. check the file, keep the compute ops --------------------------------
# $work/bars: KIND X1 X2 Y LABEL per compute op; prints "RANKS MAKESPAN
# WIDTH LABELLED KINDS" (LABELLED: chunked when an op has a chunk above 0, else plain). Rank r's row is centred on y = r, the y axis reversed: rank 0
# at the top. The chart is wide enough for the shortest bar to be about 30
# px (1200 to 2400 px; the plot itself some 200 px narrower), and a bar is
# labelled only when its label fits (a character about 7 px), else its
# label is "-".
summary=$(tr -d '\r' < "$csv" | awk -F, -v csv="$csv" -v bars="$work/bars" '
    function fail(msg) { print "plot_pipeline: error: " csv ": " msg > "/dev/stderr"; failed = 1; exit 2 }
    function num(s) { return s ~ /^-?[0-9]+([.][0-9]*)?([eE][-+]?[0-9]+)?$/ }
    NR == 1 {
        if ($0 != "rank,index,label,kind,micro,chunk,start,end")
            fail("line 1 is not the header rank,index,label,kind,micro,chunk,start,end")
        next
    }
    {
        if (NF != 8 || $1 !~ /^[0-9]+$/ || $5 !~ /^[0-9]+$/ || $6 !~ /^[0-9]+$/ || !num($7) ||
            !num($8) || $8 + 0 < $7 + 0)
            fail("line " NR " is not rank,index,label,kind,micro,chunk,start,end with end >= start: " substr($0, 1, 80))
        if ($1 + 1 > ranks) ranks = $1 + 1
        if ($8 + 0 > makespan) makespan = $8 + 0
        if ($4 ~ /^(send|recv)-(act|grad)$/) next
        if ($4 !~ /^(forward|backward|backward-input|backward-weight)$/)
            fail("line " NR ": unknown kind \"" $4 "\"")
        n++; K[n] = $4; R[n] = $1; S[n] = $7; E[n] = $8; M[n] = $5; C[n] = $6
        if ($6 > 0) chunked = 1
        if ($8 > $7 && (shortest == "" || $8 - $7 < shortest)) shortest = $8 - $7
        present[$4] = 1
    }
    END {
        if (failed) exit 2
        if (!n) fail("no compute ops (forward, backward...) after the header")
        if (shortest == "") fail("every compute op takes no time: nothing to draw")
        width = 30 * makespan / shortest + 200
        width = width < 1200 ? 1200 : width > 2400 ? 2400 : int(width)
        letter["forward"] = "F"; letter["backward"] = "B"
        letter["backward-input"] = "I"; letter["backward-weight"] = "W"
        for (i = 1; i <= n; i++) {
            label = letter[K[i]] (chunked ? M[i] "." C[i] : M[i])
            if ((E[i] - S[i]) / makespan * (width - 200) < 7 * length(label) + 4) label = "-"
            printf "%s %.6g %.6g %d %s\n", K[i], S[i], E[i], R[i], label > bars
        }
        printf "%d %.6g %d %s", ranks, makespan, width, chunked ? "chunked" : "plain"
        for (k in present) printf " %s", k
        printf "\n"
    }') || exit 2
read -r ranks makespan width labelled kinds <<< "$summary"

# ---- 2. the chart -----------------------------------------------------------
# One clause per kind present (in a fixed colour, for the legend), then the
# labels; the other kinds' rows get x = NaN, which gnuplot skips.
plots=""
for kind in forward backward backward-input backward-weight; do
    [[ " $kinds " == *" $kind "* ]] || continue
    case $kind in
        forward)         fill="#9ecae1"; line="#3182bd"; name="forward (F)" ;;
        backward)        fill="#3182bd"; line="#08306b"; name="backward (B)" ;;
        backward-input)  fill="#fd8d3c"; line="#a63603"; name="backward, input gradient (I)" ;;
        backward-weight) fill="#74c476"; line="#006d2c"; name="backward, weight gradient (W)" ;;
    esac
    plots+="${plots:+, }\"$work/bars\" using (strcol(1) eq \"$kind\" ? (\$2+\$3)/2 : NaN):4:2:3:(\$4-0.35):(\$4+0.35) "
    plots+="with boxxyerror fs solid 0.9 border lc rgb \"$line\" fc rgb \"$fill\" title \"$name\""
done
plots+=", \"$work/bars\" using (strcol(5) eq \"-\" ? NaN : (\$2+\$3)/2):4:5 with labels font \",9\" notitle"

ytics=""
for ((r = 0; r < ranks; r++)); do ytics+="${ytics:+, }\"rank $r\" $r"; done
height=$((160 + 60 * ranks))

gnuplot <<EOF_GP || die "gnuplot could not draw $png"
set terminal pngcairo size $width,$height font ",11" noenhanced
set output "$png"
set title "$title"
set xlabel "time (bars: the op and its micro-batch$([ "$labelled" = chunked ] && echo ".chunk"), F3 forward, B3 backward)"
set ylabel "pipeline rank"
set xrange [0:$makespan]
set yrange [$ranks - 0.5:-0.5]
set ytics ($ytics) scale 0
set grid xtics lc rgb "#dddddd"
set key outside below horizontal
plot $plots
EOF_GP
