#!/usr/bin/env bash
# plot_failures.sh PNG CSV STEP C R M S N YOUNG: the wall time of a job that
# fails and restarts, against its checkpoint interval (bench/failures.sh).
# CSV has the columns interval,steps,tau_s,seed,wall_s,failures,predicted_s,
# replayed_s (one row a simulated job); STEP is a step's seconds, C the save cost, R
# the restart, M the mean time between failures, S the first start-up, N
# the job's steps and YOUNG Young's interval sqrt(2 C M), all measured.
# Drawn: each job (small dots), the mean per interval with its min-max
# bar, the model replayed with the jobs' own failures (its mean per
# interval), Daly's expected time for exponential failures as a curve
#     S + (N STEP / tau) M e^(R/M) (e^((tau + C)/M) - 1),
# the failure-free time with no saves (S + N STEP), and Young's tau*.
set -euo pipefail

die() {
    echo "plot_failures: error: $*" >&2
    exit 2
}

[ $# -eq 9 ] || die "usage: plot_failures.sh PNG CSV STEP C R M S N YOUNG"
png=$1 csv=$2
shift 2
for v in "$@"; do
    [[ "$v" =~ ^[0-9]+([.][0-9]+)?$ ]] || die "STEP C R M S N YOUNG must be numbers, got '$v'"
done
step=$1 c=$2 r=$3 m=$4 s=$5 n=$6 young=$7
[ -s "$csv" ] || die "$csv not found or empty (bench/failures.sh writes it)"
head -n 1 "$csv" | grep -q '^interval,steps,tau_s,seed,wall_s,failures,predicted_s,replayed_s$' \
    || die "$csv: line 1 is not interval,steps,tau_s,seed,wall_s,failures,predicted_s,replayed_s"
command -v gnuplot > /dev/null || die "gnuplot not installed (apt-get install gnuplot-nox)"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# per interval: tau, mean, min, max, the replays' mean
awk -F, 'NR > 1 { k = $3; n[k]++; w[k] += $5; y[k] += $8; if (!(k in lo) || $5 < lo[k]) lo[k] = $5; if ($5 > hi[k]) hi[k] = $5 }
    END { for (k in n) print k, w[k] / n[k], lo[k], hi[k], y[k] / n[k] }' "$csv" | sort -g > "$work/mean"
awk -F, 'NR > 1 { print $3, $5 }' "$csv" > "$work/jobs"
lo=$(awk 'NR == 1 { print $1 / 1.6 }' "$work/mean")
hi=$(awk 'END { print $1 * 1.6 }' "$work/mean")

gnuplot <<EOF || die "gnuplot failed"
set terminal pngcairo size 900,560 font 'sans,11' noenhanced
set output '$png'
set title "A job of $n steps that fails every M = $m s on average, restarted from its newest checkpoint\n(save C = $c s, restart R = $r s, a step $step s; SIGKILL at exponential times)"
set xlabel 'checkpoint interval tau: seconds of work between saves (log scale)'
set ylabel 'wall time to finish the job (s)'
set logscale x
set xrange [$lo:$hi]
set yrange [0:*]
set key top left box opaque
set grid
daly(t) = $s + ($n * $step / t) * $m * exp($r / $m) * (exp((t + $c) / $m) - 1)
set arrow from $young, graph 0 to $young, graph 1 nohead dt 2 lc rgb '#888888'
set label sprintf("Young tau* = %.2f s", $young) at $young, graph 0.05 offset 0.5,0 tc rgb "#555555"
set samples 400
plot daly(x) with lines lw 2 lc rgb '#1f77b4' title "Daly's expected time (measured C, R, S, step)", \
     ($s + $n * $step) with lines dt 3 lw 2 lc rgb '#2ca02c' title 'no failures, no saves', \
     '$work/jobs' using 1:2 with points pt 7 ps 0.6 lc rgb '#bbbbbb' title 'one job (one failure seed)', \
     '$work/mean' using 1:5 with points pt 6 ps 2.2 lw 2 lc rgb '#ff7f0e' title 'the model replayed with these failures (mean)', \
     '$work/mean' using 1:2:3:4 with yerrorbars pt 7 ps 1.4 lw 2 lc rgb '#d62728' title 'measured: mean over seeds, min-max'
EOF
