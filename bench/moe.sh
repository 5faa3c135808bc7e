#!/usr/bin/env bash
# help: lab 08: the router's balance with and without the aux loss (chart), parameters and step time vs experts
# bench/moe.sh (`make bench-moe`): a mixture of experts on one device (lab
# 08's model, common/moe.h), measured:
#   1. the router's balance over training with and without the
#      load-balancing loss (aux coefficient 0, 0.01, 0.1): each expert's
#      share of the kept assignments and the share dropped over capacity,
#      step by step (chart), and over the last 50 steps;
#   2. parameters and step time against the number of experts (E = 2, 4,
#      8, top-2): the parameters grow with E, the work per token with k;
#   3. expert parallelism (train_moe --ep 2, 4): the bytes the all-to-all-v's
#      move in a step against the exchanged counts (exact: 4 crossings of
#      every kept assignment's row), and against uniform routing;
#   4. memory per rank (the planner's check) and step time vs ep and E.
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
echo "bench-moe: parameters and step time vs experts, one device (tiny, top-2, MoE every other block, 20 steps)"
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
MOE=$(bench_program 08_moe train_moe)
C=64  # tiny-moe's channels
echo "bench-moe: expert parallelism, tiny-moe (aux 0.01), step 1 of 3: the rows the all-to-all-v's move"
echo "  every kept assignment crosses four times a step (rows to the owner and back, their gradients"
echo "  out and back): summed over the ranks, 4 x kept x C x 4 bytes, kept from moe.csv's loads"
printf ' %-3s %12s %14s %14s %6s %16s %16s
' ep kept "predicted B" "measured B" equal "leaving/rank" "uniform est."
for ep in 2 4; do
    dir="$OUT/ep$ep"
    run_ranks "$ep" "$dir" "$MOE" --config tiny-moe --ep "$ep" --steps 3 --eval-every 0 --threads 1
    kept=$(awk -F, 'NR == 3 { for (j = 4; j <= NF; j++) s += $j; print s }' "$dir/moe.csv")
    # step 1 of each rank: between its optimizer ends of steps 0 and 1 (no evaluation before
    # the last step); bytes counted by comm.h (a rank's own block included) and leaving it
    read -r measured leaving < <(awk -F, -v ranks="$ep" '
        $2 == "compute" && $3 == "optimizer" { opt[$1, n[$1]++] = $6 }
        $2 == "comm" && $3 == "alltoallv" && $4 == "ep" { ev[++m] = $1 " " $5 " " $7 }
        END {
            for (i = 1; i <= m; i++) {
                split(ev[i], f, " ")
                if (f[2] > opt[f[1], 0] && f[2] <= opt[f[1], 1]) total += f[3]
            }
            print total, total * (ranks - 1) / ranks / ranks
        }' "$dir/trace.csv")
    predicted=$((4 * kept * C * 4))
    tokens=$((8 * 64 / ep))
    estimate=$(awk -v t="$tokens" -v n="$ep" 'BEGIN { printf "%.0f", 4 * 2 * t * 2 * 64 * 4 * (n - 1) / n }')
    printf ' %-3s %12s %14s %14s %6s %16s %16s
' "$ep" "$kept" "$predicted" "$measured" \
        "$([ "$predicted" = "$measured" ] && echo yes || echo NO)" "$leaving" "$estimate"
    [ "$predicted" = "$measured" ] || die "ep $ep: the all-to-all-v's moved $measured bytes, the loads say $predicted"
done
echo "  leaving/rank: (ep-1)/ep of the mean rank's bytes, as under uniform routing; uniform est.: 4 x"
echo "  tokens x k x C x 4 x 2 MoE blocks x (ep-1)/ep with no drops"
echo
echo "bench-moe: memory per rank and step time vs ep and E (tiny, top-2, MoE every other block, 20 steps)"
printf ' %-3s %-3s %14s %14s %10s %10s
' E ep "params bytes" "activations" planner "step ms"
for E in 4 8; do
    for ep in 1 2 4; do
        dir="$OUT/mem-E$E-ep$ep"
        run_ranks "$ep" "$dir" "$MOE" --config tiny --experts "$E" --top-k 2 --moe-every 2 --ep "$ep" \
            --steps 20 --eval-every 0 --threads 1
        ok=$(grep -c '  ok$' "$dir.log" || true)
        printf ' %-3s %-3s %14s %14s %10s %10s
' "$E" "$ep" "$(peak "$dir" params)" \
            "$(peak "$dir" activations)" "$([ "$ok" -ge 6 ] && echo ok || echo DIFFERENT)" \
            "$(median_step_ms "$dir")"
    done
done
echo "  params: the dense part whole on every rank, the experts' E/ep; each rank's run on one core"
echo "  shared by ep ranks: the times are indicative"
echo
echo "bench-moe: wrote $OUT/load.png and the runs in $OUT/"
