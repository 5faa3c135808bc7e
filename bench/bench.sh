#!/usr/bin/env bash
# bench/bench.sh: training throughput of the 'small' config on one rank, and
# the same model in PyTorch eager when the system python has torch.
# `make bench` builds everything and the corpus, then runs this.
#
#   BENCH_STEPS   training steps (default 40); the median tokens/s is taken
#                 over the steps after the first 5
#   THREADS       OpenMP/BLAS threads, and torch's (default: nproc)
#   BENCH_TIMEOUT seconds allowed to each program (default 1200)
#   BENCH_COPY    labs or solutions: whose train_gpt (bench/common.sh)
#
# Prints a summary block of key=value lines at the end:
#   ours_tokens_per_s, ours_gflops, torch_tokens_per_s, ratio (ours/torch;
#   NA when torch is absent), with the config, steps and threads they are for.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
BENCH_NAME=bench
source bench/common.sh

CONFIG=small
STEPS=${BENCH_STEPS:-40}
THREADS=${THREADS:-$(nproc)}
LIMIT=${BENCH_TIMEOUT:-1200}
SKIP=5   # steps left out of the median: first-touch page faults, BLAS warm-up
TRAIN=$(bench_program 00_single_device train_gpt)
DATA=build/data/synth.tok
OUT=build/bench/$CONFIG
PY=/usr/bin/python3

# int_at_least VALUE MIN: VALUE is a decimal integer >= MIN.
int_at_least() { [[ "$1" =~ ^[0-9]{1,9}$ ]] && [ "$1" -ge "$2" ]; }

int_at_least "$STEPS" $((SKIP + 1)) \
    || die "BENCH_STEPS must be an integer above $SKIP (the first $SKIP steps are not timed), got '$STEPS'"
int_at_least "$THREADS" 1 || die "THREADS must be a positive integer, got '$THREADS'"
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

# ---- ours -----------------------------------------------------------------
echo "bench: $TRAIN --config $CONFIG --steps $STEPS --threads $THREADS"
rm -rf "$OUT"
mkdir -p "$OUT"
log=build/bench/$CONFIG.train.log
if ! timeout "$LIMIT" "$TRAIN" --config "$CONFIG" --steps "$STEPS" --eval-every 0 \
        --out "$OUT" --threads "$THREADS" > "$log" 2>&1; then
    tail -n 20 "$log" >&2
    die "train_gpt failed (log: $log)"
fi
for f in metrics.csv run.json; do
    [ -f "$OUT/$f" ] || die "train_gpt wrote no $f in $OUT"
done

ours_tps=$(csv_column "$OUT/metrics.csv" tokens_per_s "$SKIP" | median) \
    || die "no timed steps in $OUT/metrics.csv"
ours_ms=$(csv_column "$OUT/metrics.csv" step_ms "$SKIP" | median)
flops_per_token=$(grep -o '"flops_per_token": *[0-9.eE+-]*' "$OUT/run.json" | sed 's/.*: *//')
[ -n "$flops_per_token" ] || die "no flops_per_token in $OUT/run.json"
ours_gflops=$(awk -v t="$ours_tps" -v f="$flops_per_token" 'BEGIN { printf "%.2f", t * f / 1e9 }')
echo "bench: ours  $ours_tps tokens/s (median step $ours_ms ms over steps $SKIP..$((STEPS - 1))), $ours_gflops GFLOP/s at $flops_per_token FLOPs/token"

# ---- PyTorch --------------------------------------------------------------
torch_tps=NA
ratio=NA
if "$PY" -c "import torch" > /dev/null 2>&1; then
    echo "bench: $PY bench/torch_gpt.py --config $CONFIG --steps $STEPS --threads $THREADS"
    tlog=build/bench/$CONFIG.torch.log
    if ! timeout "$LIMIT" "$PY" bench/torch_gpt.py --config "$CONFIG" --steps "$STEPS" \
            --threads "$THREADS" > "$tlog" 2>&1; then
        tail -n 20 "$tlog" >&2
        die "bench/torch_gpt.py failed (log: $tlog)"
    fi
    head -n 1 "$tlog"
    torch_tps=$(sed -n 's/^torch_tokens_per_s=//p' "$tlog")
    torch_ms=$(sed -n 's/^torch_step_ms=//p' "$tlog")
    [ -n "$torch_tps" ] || die "bench/torch_gpt.py printed no torch_tokens_per_s (log: $tlog)"
    ratio=$(awk -v a="$ours_tps" -v b="$torch_tps" 'BEGIN { printf "%.2f", a / b }')
    echo "bench: torch $torch_tps tokens/s (median step $torch_ms ms); ours/torch = $ratio"
else
    echo "bench: PyTorch not installed for $PY (apt-get install python3-torch): no comparison"
fi

echo
echo "config=$CONFIG"
echo "steps=$STEPS"
echo "threads=$THREADS"
echo "flops_per_token=$flops_per_token"
echo "ours_tokens_per_s=$ours_tps"
echo "ours_gflops=$ours_gflops"
echo "torch_tokens_per_s=$torch_tps"
echo "ratio=$ratio"
