#!/usr/bin/env bash
# help: mixed precision: tokens/s and memory of fp32, bf16 and fp16 (lab 00's trainer; small, medium; the GPU too when built)
# bench/precision.sh: what --precision buys on this machine. `make
# bench-precision` builds, then runs this. Lab 00's train_gpt on one device,
# in fp32, bf16 and fp16 (both with --fp32-grads), on small and medium, all
# the cores: the median tokens/s over the steps from 3 on, each against
# fp32's of the same config, and the peak bytes of the parameters (master
# and compute copy), the activations and the whole run (memory.csv), with
# which GEMM each ran (run.json's half_gemm: oneDNN's kernel, or the
# emulated sgemm on rounded values). With a GPU and the CUDA build
# (`make bench-gpu` makes build/gpu), the same on the GPU.
# Lands in precision.csv; timings are printed, never checked.
#
#   BENCH_STEPS    steps of each run (default 12; medians over the steps after
#                  the first 3)
#   BENCH_CONFIGS  the configs (default "small medium")
#   BENCH_DEVICES  cpu, cuda or both (default: cpu, and cuda where there is
#                  a GPU and the CUDA build)
#   BENCH_TIMEOUT  seconds allowed to each run (default 600)
#   BENCH_OUT      output directory (default runs/precision-bench)
#   BENCH_COPY     labs or solutions: whose train_gpt (bench/common.sh)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
BENCH_NAME=bench-precision
SKIP=3
source bench/common.sh

STEPS=${BENCH_STEPS:-12}
LIMIT=${BENCH_TIMEOUT:-600}
CONFIGS=${BENCH_CONFIGS:-small medium}
OUT=${BENCH_OUT:-runs/precision-bench}
DATA=build/data/synth.tok
PRECISIONS="fp32 bf16 fp16"

[[ "$STEPS" =~ ^[0-9]{1,6}$ ]] && [ "$STEPS" -ge $((SKIP + 2)) ] \
    || die "BENCH_STEPS must be an integer of at least $((SKIP + 2)), got '$STEPS'"
[[ "$LIMIT" =~ ^[1-9][0-9]*$ ]] || die "BENCH_TIMEOUT must be a positive integer, got '$LIMIT'"
for c in $CONFIGS; do
    [[ "$c" =~ ^(tiny|small|medium|gpt2-124m)$ ]] \
        || die "BENCH_CONFIGS: '$c' is none of tiny, small, medium, gpt2-124m"
done
[ -f "$DATA" ] || die "$DATA is missing: run 'make data' (or 'make bench-precision')"
CPU_TRAIN=$(bench_program 00_single_device train_gpt)
[ -x "$CPU_TRAIN" ] || die "$CPU_TRAIN is missing: run 'make bench-precision'"
GPU_TRAIN=build/gpu/${CPU_TRAIN#build/}
gpu=0
if nvidia-smi -L 2> /dev/null | grep -q '^GPU' && [ -x "$GPU_TRAIN" ]; then gpu=1; fi
default_devices=cpu
[ "$gpu" = 0 ] || default_devices="cpu cuda"
devices=${BENCH_DEVICES:-$default_devices}
for dev in $devices; do
    [[ "$dev" =~ ^(cpu|cuda)$ ]] || die "BENCH_DEVICES: '$dev' is neither cpu nor cuda"
    [ "$dev" = cpu ] || [ "$gpu" = 1 ] || die "BENCH_DEVICES has cuda: no GPU, or no $GPU_TRAIN ('make bench-gpu' builds it)"
done

# one_run DEVICE CONFIG PRECISION: the run into $OUT/DEVICE-CONFIG-PRECISION
one_run() {
    local dev=$1 config=$2 p=$3 prog=$CPU_TRAIN dir="$OUT/$1-$2-$3"
    local -a flags=()
    [ "$dev" = cpu ] || prog=$GPU_TRAIN
    [ "$p" = fp32 ] || flags=(--precision "$p" --fp32-grads)
    rm -rf "$dir"
    mkdir -p "$dir"
    timeout --kill-after=10 "$LIMIT" "$prog" --config "$config" --steps "$STEPS" \
        --eval-every 0 --device "$dev" "${flags[@]}" --out "$dir" > "$dir.log" 2>&1 \
        || { tail -n 20 "$dir.log" >&2; die "$prog --config $config --precision $p failed (log: $dir.log)"; }
    echo "$dir"
}

mkdir -p "$OUT"
CSV="$OUT/precision.csv"
echo "device,config,precision,gemm,tokens_per_s,vs_fp32,params_bytes,activation_bytes,total_peak_bytes" > "$CSV"
for dev in $devices; do
    for config in $CONFIGS; do
        base=
        for p in $PRECISIONS; do
            dir=$(one_run "$dev" "$config" "$p")
            tps=$(median_column "$dir" tokens_per_s) || die "no timed steps in $dir/metrics.csv"
            [ -n "$base" ] || base=$tps
            gemm=$(sed -n 's/.*"half_gemm": "\([^"]*\)".*/\1/p' "$dir/run.json")
            [ -n "$gemm" ] || gemm=$([ "$dev" = cpu ] && echo "openblas sgemm" || echo cublas)
            total=$(awk -F, '$1 == 0 { s += $4 } END { print s }' "$dir/memory.csv")
            echo "$dev,$config,$p,$gemm,$tps,$(awk -v a="$tps" -v b="$base" 'BEGIN { printf "%.2f", a / b }'),$(peak "$dir" params),$(peak "$dir" activations),$total" >> "$CSV"
        done
    done
done

echo "mixed precision on this machine ($(nproc) cores; median tokens/s over steps $SKIP..$((STEPS - 1)); peak bytes, memory.csv):"
column -s, -t "$CSV"
echo "(bf16 and fp16 keep fp32 masters and fp32 gradients (--fp32-grads): parameters 4 + 2 bytes;"
echo " the blocks' activations 2 bytes, the LM head's logits fp32)"
echo "wrote $CSV"
