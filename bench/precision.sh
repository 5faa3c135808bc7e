#!/usr/bin/env bash
# help: lab 11: mixed precision: tokens/s and memory of fp32, bf16 and fp16 (small, medium; the GPU too when built), and their loss curves
# bench/precision.sh: what --precision buys on this machine. `make
# bench-precision` builds, then runs this. Lab 00's train_gpt on one device,
# in fp32, bf16 and fp16 (2-byte gradients, the default), on small and
# medium, all the cores: the median tokens/s over the steps from 3 on, each
# against fp32's of the same config, and the peak bytes of the parameters
# (the compute copy), the gradients, the activations and the whole
# run (memory.csv), with
# which GEMM each ran (run.json's half_gemm: oneDNN's kernel, or the
# emulated sgemm on rounded values). With a GPU and the CUDA build
# (`make bench-gpu` makes build/gpu), the same on the GPU.
# Then the loss curves of fp32, bf16, fp16 (dynamic loss scale) and fp16
# without scaling (--loss-scale 1 --loss-scale-interval 0), CPU, over
# BENCH_CURVE_STEPS steps of small -> curves.png, with the steps fp16 skipped.
# Lands in precision.csv and curves.csv; timings are printed, never checked.
#
#   BENCH_STEPS    steps of each run (default 12; medians over the steps after
#                  the first 3)
#   BENCH_CONFIGS  the configs (default "small medium")
#   BENCH_DEVICES  cpu, cuda or both (default: cpu, and cuda where there is
#                  a GPU and the CUDA build)
#   BENCH_TIMEOUT  seconds allowed to each run (default 600)
#   BENCH_CURVE_STEPS  steps of the curves' runs (default 300; 0: no curves)
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
CURVE_STEPS=${BENCH_CURVE_STEPS:-300}

check_steps "$STEPS" $((SKIP + 2))
check_timeout "$LIMIT"
[[ "$CURVE_STEPS" =~ ^[0-9]{1,6}$ ]] && { [ "$CURVE_STEPS" -eq 0 ] || [ "$CURVE_STEPS" -ge 10 ]; } \
    || die "BENCH_CURVE_STEPS must be 0 or an integer of at least 10, got '$CURVE_STEPS'"
[ "$CURVE_STEPS" -eq 0 ] || command -v gnuplot > /dev/null \
    || die "gnuplot not installed (apt-get install gnuplot-nox)"
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

# one_run DEVICE CONFIG PRECISION STEPS [FLAGS...]: the run into
# $OUT/DEVICE-CONFIG-PRECISION (its name: PRECISION, or the first flag's
# value after it, e.g. fp16-unscaled)
one_run() {
    local dev=$1 config=$2 p=${3%%-*} steps=$4 prog=$CPU_TRAIN dir="$OUT/$1-$2-$3"
    local -a flags=()
    shift 4
    [ "$dev" = cpu ] || prog=$GPU_TRAIN
    [ "$p" = fp32 ] || flags=(--precision "$p")
    rm -rf "$dir"
    mkdir -p "$dir"
    timeout --kill-after=10 "$LIMIT" "$prog" --config "$config" --steps "$steps" \
        --eval-every 0 --device "$dev" "${flags[@]}" "$@" --out "$dir" > "$dir.log" 2>&1 \
        || { tail -n 20 "$dir.log" >&2; die "$prog --config $config --precision $p failed (log: $dir.log)"; }
    echo "$dir"
}

mkdir -p "$OUT"
CSV="$OUT/precision.csv"
echo "device,config,precision,gemm,tokens_per_s,vs_fp32,params_bytes,grads_bytes,activation_bytes,total_peak_bytes" > "$CSV"
for dev in $devices; do
    for config in $CONFIGS; do
        base=
        for p in $PRECISIONS; do
            dir=$(one_run "$dev" "$config" "$p" "$STEPS")
            tps=$(median_column "$dir" tokens_per_s) || die "no timed steps in $dir/metrics.csv"
            [ -n "$base" ] || base=$tps
            gemm=$(sed -n 's/.*"half_gemm": "\([^"]*\)".*/\1/p' "$dir/run.json")
            [ -n "$gemm" ] || gemm=$([ "$dev" = cpu ] && echo "openblas sgemm" || echo cublas)
            total=$(awk -F, '$1 == 0 { s += $4 } END { print s }' "$dir/memory.csv")
            echo "$dev,$config,$p,$gemm,$tps,$(awk -v a="$tps" -v b="$base" 'BEGIN { printf "%.2f", a / b }'),$(peak "$dir" params),$(peak "$dir" grads),$(peak "$dir" activations),$total" >> "$CSV"
        done
    done
done

echo "mixed precision on this machine ($(nproc) cores; median tokens/s over steps $SKIP..$((STEPS - 1)); peak bytes, memory.csv):"
column -s, -t "$CSV"
echo "(bf16 and fp16: parameters (the compute copy) 2 bytes, gradients 2, the optimizer's fp32 masters and moments 12;"
echo " the blocks' activations 2 bytes, the LM head's logits fp32)"
echo "wrote $CSV"
[ "$CURVE_STEPS" -gt 0 ] || exit 0

# the curves: each run's losses, and fp16's skipped steps
CURVES="$OUT/curves.csv"
echo "run,step,loss,skipped" > "$CURVES"
for run in fp32 bf16 fp16 fp16-unscaled; do
    extra=()
    [ "$run" != fp16-unscaled ] || extra=(--loss-scale 1 --loss-scale-interval 0)
    dir=$(one_run cpu small "$run" "$CURVE_STEPS" --log-every 100 "${extra[@]}")
    awk -F, -v run="$run" 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
        { print run "," $c["step"] "," $c["loss"] "," (c["skipped"] ? $c["skipped"] : 0) }' \
        "$dir/metrics.csv" >> "$CURVES"
done
summary=$(awk -F, 'NR > 1 { last[$1] = $3; skipped[$1] += $4 }
    END { for (r in last) printf "%s %.4f (%d skipped)\n", r, last[r], skipped[r] }' "$CURVES" | sort)
# each run's loss minus fp32's at the same step (the lower panel)
awk -F, 'NR > 1 { loss[$1, $2] = $3; if ($2 > n) n = $2 }
    END { for (s = 0; s <= n; s++)
              printf "%d,%.9g,%.9g,%.9g\n", s, loss["bf16", s] - loss["fp32", s],
                     loss["fp16", s] - loss["fp32", s], loss["fp16-unscaled", s] - loss["fp32", s] }' \
    "$CURVES" > "$OUT/curves_diff.dat"
{
    echo "set terminal pngcairo size 1100,900 font \",11\" noenhanced"
    echo "set output \"$OUT/curves.png\""
    echo "set datafile separator \",\""
    echo "set multiplot layout 2,1 title \"small in four precisions, one device, $CURVE_STEPS steps (CPU; fp32 master weights, 2-byte gradients)\\nfp16 scaled: dynamic loss scale from 65536; unscaled: --loss-scale 1 --loss-scale-interval 0\""
    echo "set grid"
    echo "set key top right"
    echo "set ylabel \"training loss\""
    echo "plot \"< grep '^fp32,' $CURVES\" using 2:3 with lines lw 2 lc rgb \"black\" title \"fp32\", \\"
    echo "     \"< grep '^bf16,' $CURVES\" using 2:3 with lines lw 2 lc rgb \"#1f77b4\" title \"bf16\", \\"
    echo "     \"< grep '^fp16,' $CURVES\" using 2:3 with lines lw 2 dt 2 lc rgb \"#2ca02c\" title \"fp16, loss scaled\", \\"
    echo "     \"< grep '^fp16-unscaled,' $CURVES\" using 2:3 with lines lw 2 dt 3 lc rgb \"#d62728\" title \"fp16, no loss scaling\""
    echo "set xlabel \"step\""
    echo "set ylabel \"loss minus fp32's loss at the step\""
    echo "plot 0 with lines lc rgb \"black\" notitle, \\"
    echo "     \"$OUT/curves_diff.dat\" using 1:2 with lines lw 1.5 lc rgb \"#1f77b4\" title \"bf16\", \\"
    echo "     \"\" using 1:3 with lines lw 1.5 lc rgb \"#2ca02c\" title \"fp16, loss scaled\", \\"
    echo "     \"\" using 1:4 with lines lw 1.5 lc rgb \"#d62728\" title \"fp16, no loss scaling\""
    echo "unset multiplot"
} | gnuplot
echo "final loss after $CURVE_STEPS steps of small (fp16's skipped steps):"
echo "$summary" | sed 's/^/  /'
echo "wrote $CURVES and $OUT/curves.png"
