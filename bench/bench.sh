#!/usr/bin/env bash
# bench/bench.sh: how fast the CPU trainer is, and where its time goes.
# `make bench` builds everything and the corpus, then runs this.
#
#   1. 'small' on one rank at each thread count of THREADS, against the same
#      model in PyTorch eager on the same threads when the system python has
#      torch: tokens/s and the ratio.
#   2. 'small' and 'medium' (C = 384: GEMMs dominate) with --profile at the
#      first thread count: the per-kernel table against the measured GEMM
#      and memory ceilings, the GEMMs' share of the step, model FLOP/s
#      against the GEMM ceiling, and each roofline drawn to
#      build/bench/CONFIG/roofline.png.
#
#   BENCH_STEPS   training steps for part 1 (default 40); the median tokens/s
#                 is taken over the steps after the first 5
#   THREADS       thread counts, e.g. "1 2" (default: 1 and nproc)
#   BENCH_TIMEOUT seconds allowed to each program (default 1200)
#   BENCH_COPY    labs or solutions: whose train_gpt (bench/common.sh)
#
# Prints a summary block of key=value lines at the end: per thread count T,
# ours_tokens_per_s_T, torch_tokens_per_s_T and ratio_T (ours/torch; NA
# without torch); per profiled config, CONFIG_gemm_share (of the step) and
# CONFIG_model_vs_gemm (model FLOP/s over the measured GEMM rate).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
BENCH_NAME=bench
source bench/common.sh

CONFIG=small
STEPS=${BENCH_STEPS:-40}
THREADS=${THREADS:-$( (echo 1; nproc) | sort -un | tr "\n" " ")}
LIMIT=${BENCH_TIMEOUT:-1200}
SKIP=5   # steps left out of the median: first-touch page faults, BLAS warm-up
TRAIN=$(bench_program 00_single_device train_gpt)
DATA=build/data/synth.tok
PY=/usr/bin/python3

# int_at_least VALUE MIN: VALUE is a decimal integer >= MIN.
int_at_least() { [[ "$1" =~ ^[0-9]{1,9}$ ]] && [ "$1" -ge "$2" ]; }

int_at_least "$STEPS" $((SKIP + 1)) \
    || die "BENCH_STEPS must be an integer above $SKIP (the first $SKIP steps are not timed), got '$STEPS'"
for t in $THREADS; do
    int_at_least "$t" 1 || die "THREADS must be positive integers, got '$THREADS'"
done
[ -n "${THREADS// /}" ] || die "THREADS is empty"
int_at_least "$LIMIT" 1 || die "BENCH_TIMEOUT must be a positive integer, got '$LIMIT'"
[ -x "$TRAIN" ] || die "$TRAIN is missing: run 'make all' (or 'make bench')"
[ -f "$DATA" ] || die "$DATA is missing: run 'make data' (or 'make bench')"

# Other work on the machine makes the threads wait on each other; say so.
# (Busy share of all cores over half a second, from /proc/stat's cpu line.)
cpu_busy_percent() {
    local a b
    a=$(head -n 1 /proc/stat)
    sleep 0.5
    b=$(head -n 1 /proc/stat)
    awk -v a="$a" -v b="$b" 'BEGIN {
        n = split(a, x, " "); split(b, y, " ")
        for (i = 2; i <= 9 && i <= n; i++) { d = y[i] - x[i]; total += d; if (i == 5 || i == 6) idle += d }
        printf "%d\n", (total > 0) ? 100 * (total - idle) / total : 0 }'
}
busy=$(cpu_busy_percent)
if [ "$busy" -gt 25 ]; then
    echo "bench: warning: the CPUs are ${busy}% busy before we start: other work is running, timings will be low"
fi

# Median of the numbers on stdin, one a line.
median() {
    sort -g | awk '{ v[NR] = $1 } END {
        if (NR == 0) exit 1
        if (NR % 2) printf "%.1f\n", v[(NR + 1) / 2]
        else printf "%.1f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# Column $2 of CSV file $1, by its header name, for rows whose step >= $3.
csv_column() {
    awk -F, -v name="$2" -v from="$3" '
        NR == 1 { for (i = 1; i <= NF; i++) if ($i == name) col = i
                  if (!col) { print "no column " name > "/dev/stderr"; exit 1 }
                  next }
        $1 >= from { print $col }' "$1"
}

# run_ours CONFIG THREADS STEPS OUT [FLAGS...]: train_gpt into OUT, or die
# with the log's tail
run_ours() {
    local config=$1 threads=$2 steps=$3 out=$4
    shift 4
    rm -rf "$out"
    mkdir -p "$out"
    echo "bench: $TRAIN --config $config --steps $steps --threads $threads $*"
    if ! timeout "$LIMIT" "$TRAIN" --config "$config" --steps "$steps" --eval-every 0 \
            --out "$out" --threads "$threads" "$@" > "$out.log" 2>&1; then
        tail -n 20 "$out.log" >&2
        die "train_gpt failed (log: $out.log)"
    fi
    for f in metrics.csv run.json; do
        [ -f "$out/$f" ] || die "train_gpt wrote no $f in $out"
    done
}

# flops_per_token DIR: from DIR/run.json
flops_per_token() {
    local f
    f=$(grep -o '"flops_per_token": *[0-9.eE+-]*' "$1/run.json" | sed 's/.*: *//')
    [ -n "$f" ] || die "no flops_per_token in $1/run.json"
    echo "$f"
}

have_torch=0
if "$PY" -c "import torch" > /dev/null 2>&1; then
    have_torch=1
else
    echo "bench: PyTorch not installed for $PY (apt-get install python3-torch): no comparison"
fi

# ---- 1. small: ours and PyTorch at each thread count -----------------------
summary=()
for threads in $THREADS; do
    out=build/bench/$CONFIG-t$threads
    run_ours "$CONFIG" "$threads" "$STEPS" "$out"
    ours_tps=$(csv_column "$out/metrics.csv" tokens_per_s "$SKIP" | median) \
        || die "no timed steps in $out/metrics.csv"
    ours_ms=$(csv_column "$out/metrics.csv" step_ms "$SKIP" | median)
    fpt=$(flops_per_token "$out")
    ours_gflops=$(awk -v t="$ours_tps" -v f="$fpt" 'BEGIN { printf "%.2f", t * f / 1e9 }')
    echo "bench: ours  $ours_tps tokens/s (median step $ours_ms ms over steps $SKIP..$((STEPS - 1))), $ours_gflops GFLOP/s at $fpt FLOPs/token, $threads thread(s)"
    torch_tps=NA
    ratio=NA
    if [ "$have_torch" = 1 ]; then
        echo "bench: $PY bench/torch_gpt.py --config $CONFIG --steps $STEPS --threads $threads"
        tlog=$out.torch.log
        if ! timeout "$LIMIT" "$PY" bench/torch_gpt.py --config "$CONFIG" --steps "$STEPS" \
                --threads "$threads" > "$tlog" 2>&1; then
            tail -n 20 "$tlog" >&2
            die "bench/torch_gpt.py failed (log: $tlog)"
        fi
        head -n 1 "$tlog"
        torch_tps=$(sed -n 's/^torch_tokens_per_s=//p' "$tlog")
        torch_ms=$(sed -n 's/^torch_step_ms=//p' "$tlog")
        [ -n "$torch_tps" ] || die "bench/torch_gpt.py printed no torch_tokens_per_s (log: $tlog)"
        ratio=$(awk -v a="$ours_tps" -v b="$torch_tps" 'BEGIN { printf "%.2f", a / b }')
        echo "bench: torch $torch_tps tokens/s (median step $torch_ms ms); ours/torch = $ratio"
    fi
    summary+=("ours_tokens_per_s_$threads=$ours_tps" "ours_gflops_$threads=$ours_gflops"
              "torch_tokens_per_s_$threads=$torch_tps" "ratio_$threads=$ratio")
done

# ---- 2. the profile of small and medium -----------------------------------
PROFILE_THREADS=${THREADS%% *}
for config in small medium; do
    out=build/bench/$config-profile
    steps=$([ "$config" = medium ] && echo 6 || echo 12)
    run_ours "$config" "$PROFILE_THREADS" "$steps" "$out" --profile
    sed -n '/profile of/,/^GEMMs/p' "$out.log"
    bash tools/plot_roofline.sh "$out" "$config, $PROFILE_THREADS thread(s)"
    # model FLOP/s over the steps the profile timed, against its GEMM ceiling
    # (tokens over time: n / sum of 1 / tokens_per_s over the steps after the first)
    read -r share ratio < <(awk -F, -v fpt="$(flops_per_token "$out")" '
        NR == FNR { if (FNR > 1 && $1 ~ /^matmul_/) gemm += $4; if (FNR == 2) peak = $12; next }
        FNR > 2 { inv += 1 / $6; n++ }
        END { model = fpt * n / inv / 1e9
              printf "%.3f %.3f\n", gemm, model / peak }' "$out/profile.csv" "$out/metrics.csv")
    echo "bench: $config: GEMMs $(awk -v x="$share" 'BEGIN { printf "%.1f", 100 * x }')% of the step; model FLOP/s = $ratio x the measured GEMM rate"
    summary+=("${config}_gemm_share=$share" "${config}_model_vs_gemm=$ratio")
done

echo
echo "config=$CONFIG"
echo "steps=$STEPS"
echo "threads=$THREADS"
printf '%s\n' "${summary[@]}"
