#!/usr/bin/env bash
# demo.sh CONFIG STEPS: what `make demo` runs after building: train CONFIG on
# the synthetic corpus on the CPU and draw the loss chart.
set -euo pipefail
config=${1:-small}
steps=${2:-300}
out="runs/00_single_device-$config"
./build/solutions/00_single_device/train_gpt --config "$config" --steps "$steps" \
    --eval-every 25 --data build/data/synth.tok --out "$out"
bash tools/plot_loss.sh "$out" "lab 00: $config on the synthetic corpus, 1 CPU rank"
echo "demo: the loss chart is $out/loss.png (metrics in $out/metrics.csv)"
