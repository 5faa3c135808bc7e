#!/usr/bin/env bash
# plot_stacked_bars.sh PNG DAT LAST_COLUMN YLABEL TITLE: a bar per row of
# DAT (column 1 its name, columns 2..LAST_COLUMN bytes headed by their
# names in the first line), the columns stacked in MB (make tour's memory
# and traffic charts, the slides' ZeRO-1 chart).
#
# plot_stacked_bars.sh --memory-row NAME MEMORY_CSV: print DAT's row for a
# run, from its memory.csv: the busiest rank's (the largest sum of peaks)
# bytes per category, params grads optimizer activations comm workspace.
set -euo pipefail
die() { echo "plot_stacked_bars.sh: error: $*" >&2; exit 2; }

if [ "${1:-}" = --memory-row ]; then
    [ $# -eq 3 ] && [ -s "$3" ] || die "usage: plot_stacked_bars.sh --memory-row NAME MEMORY_CSV"
    awk -F, -v name="$2" 'NR > 1 { m[$1, $2] = $4; tot[$1] += $4 }
        END { for (r in tot) if (tot[r] > best) { best = tot[r]; b = r }
              printf "\"%s\" %d %d %d %d %d %d\n", name, m[b, "params"], m[b, "grads"],
                     m[b, "optimizer"], m[b, "activations"], m[b, "comm"], m[b, "workspace"] }' "$3"
    exit 0
fi
[ $# -eq 5 ] && [ -s "$2" ] || die "usage: plot_stacked_bars.sh PNG DAT LAST_COLUMN YLABEL TITLE"
gnuplot <<EOF || die "gnuplot failed drawing $1"
set terminal pngcairo size 1000,600 font 'sans,11' noenhanced
set output '$1'
set title "$5"
set style data histograms
set style histogram rowstacked
set style fill solid 0.85 border -1
set boxwidth 0.7
set ylabel '$4'
set xtics rotate by -30
set key outside right top
set grid ytics
plot for [c=2:$3] '$2' using (column(c) / 1e6):xtic(1) title columnhead(c)
EOF
