#!/usr/bin/env bash
# plot_roofline.sh RUN_DIR [TITLE]: draw RUN_DIR/profile.csv (a trainer's
# --profile) as a roofline into RUN_DIR/roofline.png: each kernel at its
# arithmetic intensity (FLOP/byte, x) and achieved rate (GFLOP/s, y), under
# the roof min(P, I x W) of the machine's measured GEMM rate P and memory
# bandwidth W (the file's last two columns). Log-log, gnuplot, PNG.
set -euo pipefail
run=${1:?usage: plot_roofline.sh RUN_DIR [TITLE]}
title=${2:-$(basename "$run")}
csv="$run/profile.csv"
[ -s "$csv" ] || { echo "plot_roofline: $csv not found or empty (run a trainer with --profile)" >&2; exit 2; }
command -v gnuplot >/dev/null || { echo "plot_roofline: gnuplot not installed (apt-get install gnuplot-nox)" >&2; exit 2; }
read -r P W < <(awk -F, 'NR == 2 { printf "%.1f %.1f\n", $12, $13 }' "$csv")
[[ "$P" =~ ^[0-9.]+$ && "$W" =~ ^[0-9.]+$ ]] \
    || { echo "plot_roofline: $csv has no ceilings in its peak_gflops,peak_gbps columns" >&2; exit 2; }
gnuplot <<EOF_GP
set terminal pngcairo size 1000,640 font ",11" noenhanced
set output "$run/roofline.png"
set datafile separator ","
set logscale xy
set xrange [0.02:1000]
set yrange [0.1:*]
set grid
set key bottom right
set title "$title: kernels under the roofline (P = $P GFLOP/s, W = $W GB/s, ridge = " . sprintf("%.1f", $P / $W) . " FLOP/byte)"
set xlabel "arithmetic intensity (FLOP per byte the kernel must move)"
set ylabel "achieved GFLOP/s"
roof(x) = (x * $W < $P) ? x * $W : $P
# a kernel with no arithmetic (set_zero) has no place on a log axis; rows
# next to each other in time often sit close on the chart too, so their
# labels go alternately above and below the point
plot roof(x) with lines lw 3 lc rgb "#444444" title "roof: min(P, I x W)", \
     "$csv" using (\$8 > 0 ? \$7 : 1/0):8:(sqrt(\$4) * 6 + 1) every ::1 with points pt 7 ps variable lc rgb "#d62728" title "kernels (size: share of the step)", \
     "$csv" using (\$8 > 0 ? \$7 : 1/0):8:1 every 2::1 with labels offset 1.2,0.7 left font ",9" notitle, \
     "$csv" using (\$8 > 0 ? \$7 : 1/0):8:1 every 2::2 with labels offset 1.2,-0.7 left font ",9" notitle
EOF_GP
echo "plot_roofline: wrote $run/roofline.png"
