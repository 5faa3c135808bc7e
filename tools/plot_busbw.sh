#!/usr/bin/env bash
# plot_busbw.sh DIR [TITLE]: draw DIR/busbw.csv (bench_collectives) as bus
# bandwidth against buffer size, one line per implementation, into
# DIR/busbw.png (gnuplot, PNG), with the memcpy ceiling from DIR/run.json
# when there. A point is the median of the timed blocks; its bar spans the
# slowest and the fastest block (the CSV's busbw_lo_GBps, busbw_hi_GBps).
set -euo pipefail
dir=${1:?usage: plot_busbw.sh DIR [TITLE]}
csv="$dir/busbw.csv"
[ -s "$csv" ] || { echo "plot_busbw: $csv not found or empty" >&2; exit 2; }
command -v gnuplot >/dev/null || { echo "plot_busbw: gnuplot not installed (apt-get install gnuplot-nox)" >&2; exit 2; }

json_value() { sed -n "s/.*\"$1\": *\"\{0,1\}\([^\",]*\)\"\{0,1\},\{0,1\}\$/\1/p" "$dir/run.json" 2>/dev/null | head -n 1; }
op=$(json_value op)
ranks=$(json_value ranks)
memcpy=$(json_value memcpy_GBps)
title=${2:-"${op:-collective} on ${ranks:-?} ranks: bus bandwidth"}

# one "plot" clause per implementation present in the CSV, in a fixed colour,
# and its spread as error bars when the CSV has it
spread=0
head -n 1 "$csv" | grep -q ',busbw_hi_GBps' && spread=1
plots=""
for impl in student library; do
    grep -q ",$impl," "$csv" || continue
    case $impl in
        student) color="#d62728"; label="student (collectives.c)" ;;
        library) color="#1f77b4"; label="library (comm.h, MPI)" ;;
    esac
    [ "$spread" = 0 ] ||
        plots+="${plots:+, }\"$csv\" using 1:(strcol(3) eq \"$impl\" ? \$6 : NaN):7:8 with yerrorbars pt -1 lw 1 lc rgb \"$color\" notitle"
    plots+="${plots:+, }\"$csv\" using 1:(strcol(3) eq \"$impl\" ? \$6 : NaN) with linespoints pt 7 ps 0.9 lw 2 lc rgb \"$color\" title \"$label\""
done
[ -n "$plots" ] || { echo "plot_busbw: no student or library rows in $csv" >&2; exit 2; }
# x tics from the smallest size up, every factor of 4 (2 over a short sweep),
# labelled 1K, 4K, ... 64M, a little room on both sides; top = highest busbw
read -r xlo xhi top xtics < <(awk -F, '
    NR > 1 { s = $1 + 0; if (!lo || s < lo) lo = s; if (s > hi) hi = s
             y = NF >= 8 ? $8 + 0 : $6 + 0; if (y > top) top = y }
    END { printf "%g %g %g ", lo / 1.3, hi * 1.3, top
          for (t = lo; t <= hi; t *= (hi / lo >= 64 ? 4 : 2)) {
              if (t >= 1073741824) l = t / 1073741824 "G"
              else if (t >= 1048576) l = t / 1048576 "M"
              else if (t >= 1024) l = t / 1024 "K"
              else l = t
              printf "%s\"%s\" %d", sep, l, t; sep = ", " }
          printf "\n" }' "$csv")

# The memcpy ceiling as a dashed line, unless it would squash the curves
# (above 2.5 x the highest busbw): then only named in the key. Room is left
# above the highest line for the key.
ymax=$(awk -v t="$top" 'BEGIN { printf "%g", 1.35 * t }')
if [ -n "$memcpy" ]; then
    if awk -v m="$memcpy" -v t="$top" 'BEGIN { exit !(m <= 2.5 * t) }'; then
        ymax=$(awk -v m="$memcpy" -v t="$top" 'BEGIN { printf "%g", 1.35 * (m > t ? m : t) }')
        plots+=", $memcpy with lines dt 2 lw 1.5 lc rgb \"#555555\" title \"memcpy, one core ($memcpy GB/s)\""
    else
        plots+=", NaN with lines dt 2 lw 1.5 lc rgb \"#555555\" title \"memcpy, one core: $memcpy GB/s (off the chart)\""
    fi
fi

gnuplot <<EOF_GP
set terminal pngcairo size 900,540 font ",11" noenhanced
set output "$dir/busbw.png"
set datafile separator ","
# the rows of the other implementation are skipped without breaking the line
set datafile missing NaN
set title "$title"
set xlabel "buffer size S (bytes)"
set ylabel "bus bandwidth (GB/s)"
set logscale x 2
set xtics ($xtics)
set xrange [$xlo:$xhi]
set yrange [0:$ymax]
set grid
set key top left opaque
plot $plots
EOF_GP
echo "plot_busbw: wrote $dir/busbw.png"
