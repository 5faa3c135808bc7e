#!/usr/bin/env bash
# slide_figures.sh OUT_DIR: the charts the decks show, made by the labs'
# own benchmarks and copied to OUT_DIR/fig/NN/ (slides/*.md name them so).
# Nothing is drawn by hand: each figure is the PNG its benchmark writes.
#
#   SLIDES_QUICK=1  short runs (a few steps, small buffers): the same
#                   charts with noisier numbers, for tests
#
# Lab 00's two come from train_gpt (a loss curve of tiny; the --profile
# roofline of small), lab 01's from bench/collectives.sh, lab 02's from
# bench/ddp.sh, lab 03's from bench/zero.sh, lab 04's from bench/tp.sh,
# lab 05's from bench/act.sh.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=${1:?usage: slide_figures.sh OUT_DIR}
BENCH_NAME=slides
source bench/common.sh
quick=${SLIDES_QUICK:-0}
[[ "$quick" =~ ^[01]$ ]] || die "SLIDES_QUICK must be 0 or 1, got '$quick'"
mkdir -p "$out"/fig/{00,01,02,03,04,05} "$out/runs"

# copy SRC DST: a benchmark's chart into the decks' figures, or die naming it
copy() {
    [ -s "$1" ] || die "the benchmark wrote no $1"
    cp "$1" "$2"
}

train=$(bench_program 00_single_device train_gpt)
steps=$([ "$quick" = 1 ] && echo 60 || echo 300)
"$train" --config tiny --steps "$steps" --eval-every 20 --threads 2 --out "$out/runs/00-tiny" > /dev/null
bash tools/plot_loss.sh "$out/runs/00-tiny" "tiny, $steps steps, 2 threads" > /dev/null
copy "$out/runs/00-tiny/loss.png" "$out/fig/00/loss-tiny.png"
"$train" --config small --steps "$([ "$quick" = 1 ] && echo 3 || echo 10)" --eval-every 0 \
    --threads 1 --profile --out "$out/runs/00-small-profile" > /dev/null
bash tools/plot_roofline.sh "$out/runs/00-small-profile" "small, 1 thread" > /dev/null
copy "$out/runs/00-small-profile/roofline.png" "$out/fig/00/roofline-small.png"

if [ "$quick" = 1 ]; then
    export BENCH_MAX=1M BENCH_STEPS=6 BENCH_SIZES="0.01 0.25" BENCH_CONFIG=tiny
fi
bash bench/collectives.sh > "$out/runs/bench-collectives.log"
for np in 2 4; do
    copy "runs/01_collectives-allreduce-np$np/busbw.png" "$out/fig/01/busbw-np$np.png"
done
bash bench/ddp.sh > "$out/runs/bench-ddp.log"
for f in bucket_sweep timeline-naive timeline-overlapped; do
    copy "runs/02_ddp-bench/$f.png" "$out/fig/02/$f.png"
done
BENCH_OUT="$out/runs/03_zero-bench" bash bench/zero.sh > "$out/runs/bench-zero.log"
for f in memory comm; do
    copy "$out/runs/03_zero-bench/$f.png" "$out/fig/03/$f.png"
done
BENCH_OUT="$out/runs/04_tensor_parallel-bench" bash bench/tp.sh > "$out/runs/bench-tp.log"
for f in memory comm step_time; do
    copy "$out/runs/04_tensor_parallel-bench/$f.png" "$out/fig/04/$f.png"
done
BENCH_OUT="$out/runs/05_activation_memory-bench" bash bench/act.sh > "$out/runs/bench-act.log"
for f in memory step_time seq; do
    copy "$out/runs/05_activation_memory-bench/$f.png" "$out/fig/05/$f.png"
done
echo "slides: figures in $out/fig/ (benchmark logs in $out/runs/)"
