#!/usr/bin/env bash
# help: lab 10: the step-time model (memplan --advise) against train_4d: predicted vs measured step time per layout
# bench/costmodel.sh (`make bench-costmodel`): the step-time model
# (common/costmodel.h, memplan --advise) against train_4d on this machine.
#   1. the CPU's rate: one rank, one thread, config tiny; the model's FLOPs
#      of that step (memplan --advise's compute at 1 TFLOP/s) over its
#      measured step time. So the rate includes what is not a GEMM
#      (layernorms, softmax, AdamW), and the one-device prediction equals
#      the measurement by construction: the other layouts test the model.
#   2. the shared-memory transport's alpha-beta: lab 01's bench_collectives
#      fits t = 2(p-1) alpha + 2(p-1)/p S beta to the library's all-reduce
#      on 2, 4 and 8 ranks; a layout on p ranks is predicted with the fit
#      of p ranks, so that what p ranks sharing the cores cost a collective
#      (a rank descheduled while the others wait) is in its alpha-beta.
#   3. each layout of the equivalence matrix (tests/composed.bats): the
#      measured step time (metrics.csv's step_ms, median from step SKIP on)
#      and the model's, with this machine's figures. The ranks share the
#      cores: a rank's rate is the per-core rate x min(1, cores / ranks).
#      The MPI transport is the same for every group (one node); DP runs
#      after the backward pass in 256 KiB buckets (train_4d's).
# Settings (environment): BENCH_STEPS (default 8), BENCH_OUT (default
# runs/costmodel-bench). Timings are printed, not checked.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
BENCH_NAME=bench-costmodel
SKIP=2
source bench/common.sh

STEPS=${BENCH_STEPS:-8}
OUT=${BENCH_OUT:-runs/costmodel-bench}
LIMIT=300
CORES=$(nproc)
T4D=build/solutions/10_composed/train_4d
MEMPLAN=build/bin/memplan
COLL=$(earlier_program 01_collectives bench_collectives)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for p in "$T4D" "$MEMPLAN" "$COLL"; do [ -x "$p" ] || die "$p is not built: make all"; done
mkdir -p "$OUT"
COMMON=(--config tiny --steps "$STEPS" --eval-every 1000 --threads 1 --batch 8 --grad-accum 2 --seed 1)

# the model's prediction for train_4d FLAGS on NP ranks at RATE FLOP/s per
# core: predict NP RATE FLAGS... prints "step_s compute_s"
predict() {
    local np=$1 rate=$2
    shift 2
    local share tp=1 cp=1 pp=1 sched=1f1b chunks=1 rec=none algo=zigzag sp=--no-sp
    share=$(awk -v r="$rate" -v n="$np" -v c="$CORES" 'BEGIN { printf "%.6g", r * (n < c ? 1 : c / n) / 1e12 }')
    while [ $# -gt 0 ]; do
        case $1 in
            --tp) tp=$2; shift ;; --cp) cp=$2; shift ;; --pp) pp=$2; shift ;;
            --schedule) sched=$2; shift ;; --chunks) chunks=$2; shift ;;
            --recompute) rec=$2; shift ;; --cp-algo) algo=$2; shift ;; --sp) sp=--sp ;;
            --dp | --micro-batches) shift ;;
        esac
        shift
    done
    local pin=(--tp "$tp" --cp "$cp" --pp "$pp" --recompute "$rec" "$sp" --zero 0 --ep 1 --micro-batches 2)
    [ "$pp" -gt 1 ] && pin+=(--schedule "$sched" --chunks "$chunks")
    [ "$cp" -gt 1 ] && pin+=(--cp-algo "$algo")
    local lat=${LAT[$np]:-${LAT[2]}} bw=${BW[$np]:-${BW[2]}}
    "$MEMPLAN" --advise --config tiny --batch 8 --gpus-per-node "$np" --nodes 1 --gpu-mem 1000 \
        --flops "$share" --intra-bw "$bw" --intra-lat "$lat" --inter-bw "$bw" --inter-lat "$lat" \
        --bucket-mb 0.262144 --no-overlap --csv --top 1 "${pin[@]}" |
        awk -F, 'NR == 2 { print $16, $17 }'
}

# 2. alpha-beta of the transport, per rank count
declare -A LAT BW
for np in 2 4 8; do
    log="$OUT/collectives-$np.log"
    timeout --kill-after=10 "$LIMIT" mpirun -q --oversubscribe -np "$np" "$COLL" --impl library \
        --max-bytes 4M --iters 20 --out "$OUT/collectives-$np" > "$log" 2>&1 ||
        { tail -n 20 "$log" >&2; die "bench_collectives on $np ranks failed"; }
    fit=$(grep -E '^ +library: alpha = ' "$log") || die "no alpha-beta fit in $log"
    lat=$(sed -E 's/.*alpha = ([0-9.e+-]+) us.*/\1/' <<<"$fit")
    bw=$(sed -E 's/.*1\/beta = ([0-9.e+-]+) GB\/s.*/\1/' <<<"$fit")
    # oversubscribed ranks on a busy machine can make the sizes' times noise
    # and the fitted line fall: then each term is bounded by one end of the
    # sweep, t = 2(p-1) alpha + 2(p-1)/p S beta, alpha by the smallest
    # size's time and beta by the largest's
    if ! awk -v a="$lat" -v b="$bw" 'BEGIN { exit !(a > 0 && b > 0) }'; then
        read -r lat bw < <(awk -F, -v p="$np" '$3 == "library" {
                if (!lo || $1 + 0 < lo) { lo = $1 + 0; tlo = $4 }
                if ($1 + 0 > hi) { hi = $1 + 0; thi = $4 } }
            END { printf "%.3f %.4f\n", tlo / (2 * (p - 1)), 1e-3 * 2 * (p - 1) / p * hi / thi }' \
            "$OUT/collectives-$np/busbw.csv")
        echo "$BENCH_NAME: $np ranks: the fitted line falls (noise): alpha and 1/beta bounded by the sweep's ends, $lat us and $bw GB/s" >&2
    fi
    LAT[$np]=$lat
    BW[$np]=$bw
done

# 1. the CPU's rate
run_ranks 1 "$OUT/one" "$T4D" "${COMMON[@]}"
one_ms=$(median_step_ms "$OUT/one")
flops_at_1t=$(predict 1 1e12 | awk '{ print $2 }')  # seconds at 1 TFLOP/s
RATE=$(awk -v s="$flops_at_1t" -v ms="$one_ms" 'BEGIN { printf "%.6g", s * 1e12 / (ms / 1000) }')

echo "$BENCH_NAME: $CORES cores; one rank: $(awk -v r="$RATE" 'BEGIN { printf "%.2f", r / 1e9 }') GFLOP/s" \
     "(the model's FLOPs of a tiny step over its $one_ms ms); shared-memory all-reduce:" \
     "alpha ${LAT[2]}, ${LAT[4]}, ${LAT[8]} us and 1/beta ${BW[2]}, ${BW[4]}, ${BW[8]} GB/s" \
     "on 2, 4, 8 ranks"
printf '%-58s %5s %12s %12s %7s\n' layout ranks predicted_ms measured_ms ratio
echo "layout,ranks,predicted_ms,measured_ms,ratio" > "$OUT/compare.csv"
while IFS='|' read -r np flags; do
    dir="$OUT/np$np-${flags// /_}"
    # (stdin: mpirun would read this loop's list)
    # shellcheck disable=SC2086  # flags is a list
    [ -z "$flags" ] && dir="$OUT/one" || run_ranks "$np" "$dir" "$T4D" "${COMMON[@]}" $flags < /dev/null
    measured=$(median_step_ms "$dir")
    # shellcheck disable=SC2086
    predicted=$(predict "$np" "$RATE" $flags | awk '{ printf "%.3f", $1 * 1000 }')
    ratio=$(awk -v p="$predicted" -v m="$measured" 'BEGIN { printf "%.2f", p / m }')
    printf '%-58s %5d %12s %12s %7s\n' "${flags:-one device}" "$np" "$predicted" "$measured" "$ratio"
    echo "${flags:-one device},$np,$predicted,$measured,$ratio" >> "$OUT/compare.csv"
done <<'LAYOUTS'
1|
2|--dp 2
2|--tp 2
2|--pp 2
4|--pp 2 --tp 2 --schedule zb-h1 --recompute selective
4|--pp 2 --cp 2 --cp-algo ulysses --recompute full
8|--dp 2 --tp 2 --pp 2
8|--tp 2 --cp 2 --pp 2 --cp-algo zigzag
8|--dp 2 --cp 2 --tp 2 --sp
8|--pp 2 --tp 2 --dp 2 --schedule interleaved --chunks 2 --micro-batches 2
LAYOUTS
echo "$BENCH_NAME: wrote $OUT/compare.csv"
