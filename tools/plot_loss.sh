#!/usr/bin/env bash
# plot_loss.sh RUN_DIR [TITLE]: draw RUN_DIR/metrics.csv's training and
# held-out loss against the step into RUN_DIR/loss.png (gnuplot, PNG).
set -euo pipefail
run=${1:?usage: plot_loss.sh RUN_DIR [TITLE]}
title=${2:-$(basename "$run")}
csv="$run/metrics.csv"
[ -s "$csv" ] || { echo "plot_loss: $csv not found or empty" >&2; exit 2; }
command -v gnuplot >/dev/null || { echo "plot_loss: gnuplot not installed (apt-get install gnuplot-nox)" >&2; exit 2; }
gnuplot <<EOF_GP
set terminal pngcairo size 900,540 font ",11" noenhanced
set output "$run/loss.png"
set datafile separator ","
set datafile missing ""
set key autotitle columnhead top right
set title "$title"
set xlabel "step"
set ylabel "loss (nats/token)"
set grid
plot "$csv" using 1:2 with lines lw 1.5 lc rgb "#1f77b4" title "training loss", \
     "$csv" using 1:3 with linespoints pt 7 ps 0.8 lw 2 lc rgb "#d62728" title "held-out loss"
EOF_GP
echo "plot_loss: wrote $run/loss.png"
