#!/usr/bin/env bash
# bench/moe.sh (`make bench-moe`): a mixture of experts on one device (lab
# 08's model, common/moe.h), measured:
#   1. the router's balance over training with and without the
#      load-balancing loss (aux coefficient 0, 0.01, 0.1): each expert's
#      share of the kept assignments and the share dropped over capacity,
#      step by step (chart), and over the last 50 steps;
#   2. parameters and step time against the number of experts (E = 2, 4,
#      8, top-2): the parameters grow with E, the work per token with k.
# Timings are printed, not checked (the machine is shared).
# Settings (environment):
#   BENCH_STEPS    steps of the balance runs (default 300)
#   BENCH_TIMEOUT  seconds allowed to each run (default 300)
#   BENCH_OUT      output directory (default runs/08_moe-bench)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
BENCH_NAME=bench-moe
SKIP=1
source bench/common.sh

STEPS=${BENCH_STEPS:-300}
LIMIT=${BENCH_TIMEOUT:-300}
OUT=${BENCH_OUT:-runs/08_moe-bench}
[[ "$STEPS" =~ ^[0-9]+$ ]] && [ "$STEPS" -ge 60 ] || die "BENCH_STEPS must be a number >= 60, got '$STEPS'"
GPT=$(earlier_program 00_single_device train_gpt)
[ -x "$GPT" ] || die "$GPT not built (make all)"
mkdir -p "$OUT"

# train DIR ARGS...: one run of GPT, its log in DIR.log
train() {
    local dir=$1
    shift
    rm -rf "$dir"
    timeout --kill-after=10 "$LIMIT" "$GPT" "$@" --threads 1 --out "$dir" > "$dir.log" 2>&1 \
        || { tail -n 20 "$dir.log" >&2; die "$GPT $* failed (log: $dir.log)"; }
}

echo "bench-moe: the router's balance, tiny-moe (4 experts, top-2, capacity 1.25), $STEPS steps"
printf ' %-8s %14s %14s %12s %12s\n' "aux coef" "max/min load" "dropped share" "final loss" "loss - aux"
runs=()
for coef in 0 0.01 0.1; do
    dir="$OUT/balance-aux$coef"
    train "$dir" --config tiny-moe --aux-loss-coef "$coef" --steps "$STEPS" --eval-every 0
    runs+=("$dir")
    # over the last 50 steps: mean of max/min kept load, share of assignments dropped
    read -r ratio dropped < <(awk -F, -v last=$((STEPS - 50)) 'NR > 1 && $1 >= last {
            max = 0; min = -1; kept = 0
            for (j = 4; j <= NF; j++) { kept += $j; if ($j > max) max = $j; if (min < 0 || $j < min) min = $j }
            r += (min > 0 ? max / min : 0); d += $3 / (kept + $3); n++ }
        END { printf "%.3f %.4f\n", r / n, d / n }' "$dir/moe.csv")
    read -r loss aux < <(paste -d, <(tail -1 "$dir/metrics.csv") <(tail -1 "$dir/moe.csv") \
        | awk -F, '{ print $2, $9 }')
    printf ' %-8s %14s %14s %12.4f %12.4f\n' "$coef" "$ratio" "$dropped" "$loss" \
        "$(awk -v l="$loss" -v a="$aux" 'BEGIN { print l - a }')"
done
echo "  (loss is the objective, the aux term included; loss - aux the language model's)"
bash tools/plot_moe_load.sh "$OUT/load.png" \
    "tiny-moe, $STEPS steps: each expert's share of the kept assignments, and the share dropped" \
    "${runs[@]}"

echo
echo "bench-moe: parameters and step time vs experts (tiny, top-2, MoE every other block, 20 steps)"
printf ' %-3s %12s %16s %16s %12s\n' E parameters "params bytes" "16 x params" "step ms"
for E in 2 4 8; do
    dir="$OUT/experts-$E"
    train "$dir" --config tiny --experts "$E" --top-k 2 --moe-every 2 --steps 20 --eval-every 0
    n=$(grep -o '"num_params": [0-9]*' "$dir/run.json" | grep -o '[0-9]*$')
    states=$(awk -F, '$2 == "params" || $2 == "grads" || $2 == "optimizer" { s += $4 } END { print s }' \
        "$dir/memory.csv")
    [ "$states" = $((16 * n)) ] || die "E $E: model states $states bytes, want 16 x $n"
    printf ' %-3s %12s %16s %16s %12s\n' "$E" "$n" "$states" $((16 * n)) "$(median_step_ms "$dir")"
done
echo "  (a token meets k = 2 experts whatever E: the parameters grow with E, the arithmetic per token does not)"
echo
echo "bench-moe: wrote $OUT/load.png and the runs in $OUT/"
