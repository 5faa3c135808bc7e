#!/usr/bin/env bash
# bench/gpu.sh: the GPU backend's throughput and model FLOP utilization,
# and NCCL's bus bandwidth. `make bench-gpu` builds the CUDA flavour into
# build/gpu and runs this; `make bench` runs it too when a GPU is present.
#
#   BENCH_STEPS    training steps per config (default 30); the median over
#                  the steps after the first 5 is reported
#   BENCH_CONFIGS  configs to train (default "small gpt2-124m")
#   KIT_TF32       1 (default here): GEMMs in TF32 on tensor cores, and MFU
#                  against the TF32 peak; 0: full fp32 and the fp32 peak
#   GPU_PEAK_TFLOPS  the peak to divide by, when the GPU is not in the table
#   BENCH_TIMEOUT  seconds allowed to each program (default 1200)
#
# MFU = (FLOPs per token x tokens/s) / peak, FLOPs per token from run.json
# (6 x parameters + attention's 6 x n_layer x seq x n_embd x 2, as in the
# PaLM paper's appendix B). Peaks are dense (no sparsity), from NVIDIA's
# datasheets. Prints key=value lines at the end.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BENCH_NAME=bench-gpu
SKIP=5
source bench/common.sh

STEPS=${BENCH_STEPS:-30}
CONFIGS=${BENCH_CONFIGS:-"small gpt2-124m"}
LIMIT=${BENCH_TIMEOUT:-1200}
export KIT_TF32=${KIT_TF32:-1}
GPU_BUILD=build/gpu
TRAIN=$(bench_program 00_single_device train_gpt "$GPU_BUILD")
BUSBW=$(bench_program 01_collectives bench_collectives "$GPU_BUILD")
DATA=build/data/synth.tok
OUT=build/bench/gpu

[[ "$STEPS" =~ ^[0-9]{1,6}$ ]] && [ "$STEPS" -gt "$SKIP" ] \
    || die "BENCH_STEPS must be an integer above $SKIP, got '$STEPS'"
[[ "$LIMIT" =~ ^[0-9]{1,6}$ ]] && [ "$LIMIT" -gt 0 ] || die "BENCH_TIMEOUT must be a positive integer"
[[ "$KIT_TF32" =~ ^[01]$ ]] || die "KIT_TF32 must be 0 or 1, got '$KIT_TF32'"

gpus=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null || true)
if [ -z "$gpus" ]; then
    echo "$BENCH_NAME: skipped: no GPU (nvidia-smi lists none); no GPU figures measured"
    exit 0
fi
name=$(printf '%s\n' "$gpus" | head -n 1)
ngpus=$(printf '%s\n' "$gpus" | wc -l)
[ -x "$TRAIN" ] && [ -x "$BUSBW" ] || die "the CUDA build is missing: run 'make bench-gpu'"
[ -f "$DATA" ] || die "$DATA is missing: run 'make data'"

# Dense peak TFLOP/s of a GPU by name: TF32 tensor cores, or plain fp32.
peak_tflops() {
    local tf32=$1 n=$2
    case "$n" in
        *H100*PCIe*) [ "$tf32" = 1 ] && echo 378 || echo 51.2 ;;
        *H100*|*H200*|*GH200*) [ "$tf32" = 1 ] && echo 494.7 || echo 66.9 ;;
        *A100*) [ "$tf32" = 1 ] && echo 156 || echo 19.5 ;;
        *L40S*) [ "$tf32" = 1 ] && echo 91.6 || echo 91.6 ;;
        *A10*) [ "$tf32" = 1 ] && echo 62.5 || echo 31.2 ;;
        *"RTX 4090"*) [ "$tf32" = 1 ] && echo 82.6 || echo 82.6 ;;
        *"RTX 3090"*) [ "$tf32" = 1 ] && echo 35.6 || echo 35.6 ;;
        *) echo "" ;;
    esac
}
peak=${GPU_PEAK_TFLOPS:-$(peak_tflops "$KIT_TF32" "$name")}
echo "$BENCH_NAME: $name ($ngpus GPU(s)), TF32 $([ "$KIT_TF32" = 1 ] && echo on || echo off)," \
     "peak ${peak:-unknown (set GPU_PEAK_TFLOPS)} TFLOP/s"

mkdir -p "$OUT"
summary=()
for config in $CONFIGS; do
    dir=$OUT/$config
    rm -rf "$dir"
    log=$OUT/$config.log
    if ! timeout "$LIMIT" "$TRAIN" --device cuda --config "$config" --steps "$STEPS" \
            --eval-every 0 --out "$dir" > "$log" 2>&1; then
        tail -n 20 "$log" >&2
        die "train_gpt --device cuda --config $config failed (log: $log)"
    fi
    tps=$(median_column "$dir" tokens_per_s) || die "no timed steps in $dir"
    fpt=$(grep -o '"flops_per_token": *[0-9.eE+-]*' "$dir/run.json" | sed 's/.*: *//')
    mfu=NA
    [ -n "$peak" ] && mfu=$(awk -v t="$tps" -v f="$fpt" -v p="$peak" 'BEGIN { printf "%.1f", 100 * t * f / (p * 1e12) }')
    echo "$BENCH_NAME: $config: $tps tokens/s, MFU ${mfu}%  ($(grep 'MiB in use' "$log" | sed 's/.*: rank 0: //'))"
    summary+=("${config}_tokens_per_s=$tps" "${config}_mfu_percent=$mfu")
done

# NCCL bus bandwidth of the all-reduce on every GPU of this machine
# (MPI with host staging when there is one GPU).
ranks=$(( ngpus > 1 ? ngpus : 2 ))
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if ! timeout "$LIMIT" mpirun -q --oversubscribe -np "$ranks" "$BUSBW" --device cuda --impl library \
        --min-bytes 1M --max-bytes 256M --out "$OUT/busbw" > "$OUT/busbw.log" 2>&1; then
    tail -n 20 "$OUT/busbw.log" >&2
    die "bench_collectives --device cuda failed (log: $OUT/busbw.log)"
fi
busbw=$(awk -F, 'NR > 1 { b = $6 } END { print b }' "$OUT/busbw/busbw.csv")
path=$(grep -o 'over NCCL\|MPI with host staging' "$OUT/busbw.log" | head -n 1)
echo "$BENCH_NAME: all-reduce on $ranks ranks, 256 MiB: busbw $busbw GB/s ($path)"

echo
echo "gpu=$name"
echo "tf32=$KIT_TF32"
echo "peak_tflops=${peak:-NA}"
printf '%s\n' "${summary[@]}"
echo "allreduce_busbw_GBps=$busbw"
echo "allreduce_ranks=$ranks"
