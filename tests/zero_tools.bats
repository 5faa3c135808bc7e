#!/usr/bin/env bats
# Lab 03's benchmark (bench/zero.sh, `make bench-zero`) on the tiny config:
# its memory table equals the planner, its model states and per-step
# traffic equal the formulas (hybrid sharding's inside and across the
# nodes too), ZeRO-Offload's device and host memory the planner's, and it
# draws the charts. Its timings are printed, not tested. (Its bf16 table:
# tests/precision.bats.)
load helpers

@test "bench-zero (tiny): measured memory equals the prediction, traffic equals 2 or 3 Phi (N-1)/N, hybrid sharding's and ZeRO-Offload's as planned, charts drawn" {
    require_solution 02 03  # it benchmarks the solutions (BENCH_COPY below)
    out="$BATS_TEST_TMPDIR/bench"
    BENCH_COPY=solutions BENCH_CONFIG=tiny BENCH_STEPS=5 BENCH_OUT="$out" run t 600 bash "$ROOT/bench/zero.sh"
    echo "$output" | tail -40
    [ "$status" -eq 0 ]
    # 12 layouts x N; predicted_states == the measured params+grads+optimizer+comm
    [ "$(awk -F, 'NR > 1 && $1 != "" && $4 + $5 + $6 + $7 == $10 && $11 == $12' "$out/memory.csv" | wc -l)" -eq 12 ]
    [ "$(awk -F, 'NR > 1 && $5 == $6' "$out/comm.csv" | wc -l)" -eq 8 ]
    [ "$(grep -c ',zero3,[0-9]*,2.2500,2.2500$' "$out/comm.csv")" -eq 1 ]
    # the model states at N = 4 in bytes per parameter: 16, 8 + 8/4, 4 + 12/4, 16/4
    [ "$(cut -d, -f1,5,6 "$out/states.csv" | tail -n +2 | tr '\n' ' ')" = \
      "ddp,16.0000,16.0000 zero1,10.0000,10.0000 zero2,7.0000,7.0000 zero3,4.0000,4.0000 " ]
    # hybrid sharding: DDP, ZeRO-3 and K = 2, inside and across the nodes as the formulas
    [ "$(awk -F, 'NR > 1 && $2 == $4 && $3 == $5' "$out/hsdp.csv" | wc -l)" -eq 3 ]
    grep -q '^hybrid K=2,1.5000,0.5000,1.5,0.5,8$' "$out/hsdp.csv"
    # ZeRO-Offload: the device's and the host's model states as planned; no
    # optimizer bytes left on the device
    [ "$(awk -F, 'NR > 1 && $2 + $3 + $4 == $7 && $5 + $6 == $8' "$out/offload.csv" | wc -l)" -eq 4 ]
    [ "$(awk -F, '$1 ~ /^offload/ && $4 == 0 && $6 > 0' "$out/offload.csv" | wc -l)" -eq 2 ]
    for png in memory comm hsdp offload; do is_png "$out/$png.png"; done
    [ "$(awk -F, 'NR > 1' "$out/speed.csv" | wc -l)" -eq 10 ]
}

@test "bench-zero: bad settings are one clear error" {
    for bad in "BENCH_STEPS=2" "BENCH_CONFIG=huge" "BENCH_TIMEOUT=0" "BENCH_PRECISION=fp64"; do
        run t 30 env "$bad" bash "$ROOT/bench/zero.sh"
        echo "$bad: $output"
        assert_user_error
    done
}
