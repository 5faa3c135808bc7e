#!/usr/bin/env bats
# The step-time model (common/costmodel.h) and memplan --advise (issue 22):
# the model's unit test (links from the mesh order, the alpha-beta
# formulas, compute against FLOP/s, GPipe's bubble), the ranked table and
# its CSV, bad input as one clear error, and the CPU benchmark's ratios.
load helpers

MEMPLAN="$BUILD/bin/memplan"

@test "advise: unit: links from the mesh order, alpha-beta formulas, compute halves at twice the FLOP/s, GPipe's bubble (p-1)/(m+p-1)" {
    run t 60 "$BUILD/tests/test_costmodel"
    echo "$output"
    [ "$status" -eq 0 ]
}

@test "advise: a ranked table whose layouts fit, fastest first, and the reasons for the rest" {
    run t 30 "$MEMPLAN" --advise --config small --batch 16 --gpus-per-node 4 --nodes 2 --gpu-mem 0.01 --top 5
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"layouts tried"* ]]
    [[ "$output" == *"memory: over 0.009 GiB per device (after the headroom)"* ]]   # and which category
    # one header row, units in it, the rows under it aligned (an interleaved schedule's "(v2)" too)
    printf '%s\n' "$output" | grep -q ' mem GiB   step ms compute ms bubble    tp ms    cp ms    dp ms   MFU$'
    [ "$(printf '%s\n' "$output" | sed -n '/^ *# /,/^left out/p' | sed '$d' | awk '{ print length }' | sort -u | wc -l)" -eq 1 ]
    # every row fits the 0.01 GiB less the headroom, 10% by default; the step times never decrease
    local h
    for h in "" "--headroom 0" "--headroom 0.005" "--headroom 25%"; do
        # shellcheck disable=SC2086  # h is a flag and its value
        run t 30 "$MEMPLAN" --advise --config small --batch 16 --gpus-per-node 4 --nodes 2 --gpu-mem 0.01 --csv --top 1000 $h
        [ "$status" -eq 0 ]
        awk -F, -v budget="$(case $h in "") echo 0.009;; *%) echo 0.0075;; *0) echo 0.01;; *) echo 0.005;; esac)" \
            'NR > 1 { if ($15 > budget * 1073741824 || $16 < last) bad = 1; last = $16; n++ }
             END { exit bad || n < 2 }' <<<"$output"
    done
}

@test "advise: pinned dimensions; TP inside a node is intra, DP across nodes inter" {
    run t 30 "$MEMPLAN" --advise --config small --batch 16 --gpus-per-node 2 --nodes 2 --tp 2 --pp 1 --cp 1 --csv
    echo "$output"
    [ "$status" -eq 0 ]
    local row
    row=$(sed -n 2p <<<"$output")
    [[ "$row" == 1,2,1,1,2,* ]]
    [[ "$row" == *",intra,intra,inter,intra" ]]   # tp, cp, dp, pp links
}

@test "advise: more FLOP/s, a faster step; a slower inter-node link, a slower step across nodes" {
    local base fast slow
    base=$(t 30 "$MEMPLAN" --advise --config small --batch 16 --gpus-per-node 2 --nodes 2 --tp 1 --cp 1 --pp 1 --csv | sed -n 2p | cut -d, -f16)
    fast=$(t 30 "$MEMPLAN" --advise --config small --batch 16 --gpus-per-node 2 --nodes 2 --tp 1 --cp 1 --pp 1 --flops 2000 --csv | sed -n 2p | cut -d, -f16)
    slow=$(t 30 "$MEMPLAN" --advise --config small --batch 16 --gpus-per-node 2 --nodes 2 --tp 1 --cp 1 --pp 1 --inter-bw 0.001 --csv | sed -n 2p | cut -d, -f16)
    echo "base $base fast $fast slow $slow"
    awk -v b="$base" -v f="$fast" -v s="$slow" 'BEGIN { exit !(f < b && s > b) }'
}

@test "advise: bad input is one clear error and exit 2" {
    run t 30 "$MEMPLAN" --advise --gpus-per-node 0
    assert_user_error
    [[ "$output" == *"--gpus-per-node"* ]]
    run t 30 "$MEMPLAN" --advise --no-such-flag
    assert_user_error
    run t 30 "$MEMPLAN" --advise --flops abc
    assert_user_error
    run t 30 "$MEMPLAN" --advise --ranks 4
    assert_user_error
    run t 30 "$MEMPLAN" --pp 2
    assert_user_error
    run t 30 "$MEMPLAN" --advise --n-head 5
    assert_user_error
    run t 30 "$MEMPLAN" --advise --headroom 80
    assert_user_error
    [[ "$output" == *"--headroom 80 GiB leaves nothing of --gpu-mem 80 GiB for the plan"* ]]
    run t 30 "$MEMPLAN" --advise --headroom 10x
    assert_user_error
    # a schedule it does not rank (a typo, or lab 06's extensions): not an empty table
    for s in pipedream dualpipe; do
        run t 30 "$MEMPLAN" --advise --schedule "$s"
        assert_user_error
        [[ "$output" == *"--advise ranks the schedules 1f1b, gpipe, interleaved and zb-h1: not --schedule $s"* ]]
    done
}

@test "advise: a 405B-sized model on 16K GPUs is planned within the time limit" {
    run t 60 "$MEMPLAN" --advise --n-layer 128 --n-head 128 --n-embd 16384 --vocab 65536 --ctx 8192 \
        --batch 2048 --gpus-per-node 8 --nodes 2048 --tp 8 --pp 16 --top 3
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"  1   8 "* ]]
}

@test "advise: the CPU benchmark prints predicted vs measured step times and their ratios" {
    require_solution 00 01 02 04 05 06 07 08 09
    cd "$ROOT"
    run t 600 env BENCH_STEPS=4 BENCH_OUT="$BATS_TEST_TMPDIR/cm" bash bench/costmodel.sh
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"GFLOP/s"*"alpha"* ]]
    [ "$(grep -cE ' [0-9]+\.[0-9]{2}$' <<<"$output")" -ge 10 ]
    [ "$(wc -l < "$BATS_TEST_TMPDIR/cm/compare.csv")" -eq 11 ]
}
