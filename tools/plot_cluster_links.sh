#!/usr/bin/env bash
# plot_cluster_links.sh DIR [RATE]: bench/cluster.sh's two charts.
#   DIR/links.png         the ring all-reduce's time against the buffer size
#                         on each link alone (inside a node, one-way between
#                         nodes, an exchange between two nodes), each with
#                         the line of its fit
#   DIR/hierarchical.png  the flat ring and the hierarchical all-reduce on
#                         2 x 2 and 4 x 1: measured (points) and predicted
#                         from the links (lines); beside it, flat time over
#                         hierarchical time, predicted and measured
# Reads DIR/{intra,one-way,exchange}/busbw.csv, DIR/links.csv and
# DIR/predicted.csv (bench/cluster.sh).
set -euo pipefail
dir=${1:?usage: plot_cluster_links.sh DIR [RATE]}
rate=${2:-shaped}
for f in intra/busbw.csv one-way/busbw.csv exchange/busbw.csv links.csv predicted.csv; do
    [ -s "$dir/$f" ] || { echo "plot_cluster_links: $dir/$f not found or empty" >&2; exit 2; }
done
command -v gnuplot > /dev/null || { echo "plot_cluster_links: gnuplot not installed (apt-get install gnuplot-nox)" >&2; exit 2; }

# a link's alpha_us and inv_beta_GBps from links.csv
fit() { awk -F, -v l="$1" -v c="$2" '$1 == l { print $c }' "$dir/links.csv"; }
ai=$(fit intra 2) bi=$(fit intra 3) ae=$(fit one-way 2) be=$(fit one-way 3) ax=$(fit exchange 2) bx=$(fit exchange 3)

# flat time over hierarchical time per layout and size (layout,size,predicted,measured)
ratios=$(mktemp)
trap 'rm -f "$ratios"' EXIT
awk -F, 'NR > 1 { k = $1 "," $3
                  if ($2 == "flat") { pf[k] = $4; mf[k] = $5 }
                  else if (k in pf) printf "%s,%s,%g,%g\n", $1, $3, pf[k] / $4, mf[k] / $5 }' \
    "$dir/predicted.csv" > "$ratios"

gnuplot <<EOF_GP
set terminal pngcairo size 900,540 font ",11" noenhanced
set datafile separator ","
set datafile missing NaN
set output "$dir/links.png"
set title "The links, each alone: lab 01's ring all-reduce (links shaped to $rate); lines: fits through both ends"
set xlabel "buffer size S (bytes)"
set ylabel "time per all-reduce (us)"
set logscale x 2
set format x "%.0b%B"
set format y "%g"
set logscale y 10
set grid
set key top left opaque
plot "$dir/intra/busbw.csv" using 1:(strcol(3) eq "student" ? \$4 : NaN) with points pt 7 ps 1.1 lc rgb "#2ca02c" title "inside a node, 2 ranks (shared memory)", \
     2 * $ai + x * 1e-3 / $bi with lines lw 2 lc rgb "#2ca02c" title sprintf("  2 alpha + S beta: alpha = %.1f us, 1/beta = %.2f GB/s", $ai, $bi), \
     "$dir/one-way/busbw.csv" using 1:(strcol(3) eq "student" ? \$4 : NaN) with points pt 5 ps 1.1 lc rgb "#d62728" title "one-way between nodes: 3 nodes x 1 (TCP, shaped)", \
     4 * $ae + 4.0 / 3 * x * 1e-3 / $be with lines lw 2 lc rgb "#d62728" title sprintf("  4 alpha + 4/3 S beta: alpha = %.1f us, 1/beta = %.3f GB/s", $ae, $be), \
     "$dir/exchange/busbw.csv" using 1:(strcol(3) eq "student" ? \$4 : NaN) with points pt 9 ps 1.1 lc rgb "#9467bd" title "an exchange between 2 nodes: 2 nodes x 1", \
     2 * $ax + x * 1e-3 / $bx with lines lw 2 lc rgb "#9467bd" title sprintf("  2 alpha + S beta: alpha = %.1f us, 1/beta = %.3f GB/s", $ax, $bx)

set output "$dir/hierarchical.png"
set terminal pngcairo size 1300,540 font ",11" noenhanced
set multiplot layout 1,2 title "Flat ring vs hierarchical all-reduce, 4 ranks (links shaped to $rate): lines predicted from the links, points measured"
set title "time per all-reduce"
set ylabel "time (us)"
row(l, a) = (strcol(1) eq l && strcol(2) eq a)
plot "$dir/predicted.csv" using 3:(row("2x2", "flat") ? \$5 : NaN) with points pt 7 ps 1 lc rgb "#d62728" title "2x2 flat ring", \
     "" using 3:(row("2x2", "flat") ? \$4 : NaN) with lines lw 2 lc rgb "#d62728" notitle, \
     "" using 3:(row("2x2", "hierarchical") ? \$5 : NaN) with points pt 5 ps 1 lc rgb "#1f77b4" title "2x2 hierarchical", \
     "" using 3:(row("2x2", "hierarchical") ? \$4 : NaN) with lines lw 2 lc rgb "#1f77b4" notitle, \
     "" using 3:(row("4x1", "flat") ? \$5 : NaN) with points pt 9 ps 1 lc rgb "#ff7f0e" title "4x1 flat ring", \
     "" using 3:(row("4x1", "flat") ? \$4 : NaN) with lines lw 2 dt 2 lc rgb "#ff7f0e" notitle, \
     "" using 3:(row("4x1", "hierarchical") ? \$5 : NaN) with points pt 11 ps 1 lc rgb "#9467bd" title "4x1 hierarchical", \
     "" using 3:(row("4x1", "hierarchical") ? \$4 : NaN) with lines lw 2 dt 3 lc rgb "#9467bd" notitle
set title "flat time / hierarchical time (above 1: hierarchical wins)"
set ylabel "ratio"
unset logscale y
set yrange [0:*]
plot "$ratios" using 2:(strcol(1) eq "2x2" ? \$3 : NaN) with lines lw 2 lc rgb "#1f77b4" title "2x2 predicted", \
     "" using 2:(strcol(1) eq "2x2" ? \$4 : NaN) with points pt 5 ps 1 lc rgb "#1f77b4" title "2x2 measured", \
     "" using 2:(strcol(1) eq "4x1" ? \$3 : NaN) with lines lw 2 dt 3 lc rgb "#9467bd" title "4x1 predicted", \
     "" using 2:(strcol(1) eq "4x1" ? \$4 : NaN) with points pt 11 ps 1 lc rgb "#9467bd" title "4x1 measured", \
     1 with lines dt 2 lc rgb "#555555" notitle
unset multiplot
EOF_GP
echo "plot_cluster_links: wrote $dir/links.png and $dir/hierarchical.png"
