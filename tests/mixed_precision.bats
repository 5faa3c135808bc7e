#!/usr/bin/env bats
# Lab 11 (labs/11_mixed_precision): check_precision holds the extension's
# count to the flush thresholds; --count-flushed counts what fp16 without a
# loss scale loses; the untouched skeleton stops at its first TODO. (Mixed precision
# through every layout, with the solution's ops: tests/precision.bats.)
load helpers

LAB="$BUILD/solutions/11_mixed_precision"

# (check_precision's sweep of all 2^32 patterns passes the solution in
# tests/grader.bats, the grader's full marks, and fails the planted
# conversions in tests/grader_planted.bats: not run a third time here.)
@test "lab 11: check_precision passes the solution's flush count; a bad option is one clear error" {
    require_solution 11
    run t 60 "$LAB/check_precision" --flushed
    [ "$status" -eq 0 ]
    [[ "$output" == *"mp_count_flushed counts what fp16 and bf16 round to zero"* ]]
    run t 60 "$LAB/check_precision" --threads 0
    assert_user_error
}

@test "lab 11: --count-flushed: fp16 without a loss scale would flush gradients, with 65536 a hundred times fewer" {
    require_solution 11
    local d="$BATS_TEST_TMPDIR" run
    local common=(--config tiny --steps 8 --eval-every 0 --threads 1 --precision fp16 --fp32-grads
                  --count-flushed)
    run t 60 "$LAB/train_gpt" "${common[@]}" --loss-scale 1 --loss-scale-interval 0 --out "$d/unscaled"
    [ "$status" -eq 0 ]
    run t 60 "$LAB/train_gpt" "${common[@]}" --out "$d/scaled"
    [ "$status" -eq 0 ]
    head -1 "$d/scaled/metrics.csv" | grep -q ',loss_scale,skipped,flushed$'
    local unscaled scaled
    unscaled=$(awk -F, 'NR > 1 { s += $10 } END { print s }' "$d/unscaled/metrics.csv")
    scaled=$(awk -F, 'NR > 1 { s += $10 } END { print s }' "$d/scaled/metrics.csv")
    echo "flushed over 8 steps of tiny: $unscaled without a loss scale, $scaled with 65536"
    [ "$unscaled" -gt $((100 * scaled)) ]
}

@test "lab 11: the untouched skeleton stops at its first TODO, naming it" {
    require_untouched 11
    local b="$BUILD/labs/11_mixed_precision"
    run t 60 "$b/check_precision"
    [ "$status" -eq 3 ]
    [[ "$output" == *"not implemented: mp_float_to_bf16"* ]]
    run t 60 "$b/train_gpt" --config tiny --steps 2 --precision bf16 --out "$BATS_TEST_TMPDIR/r"
    [ "$status" -eq 3 ]
    [[ "$output" == *"not implemented: mp_master_step"* ]]
    # fp32 does not need the lab
    run t 60 "$b/train_gpt" --config tiny --steps 2 --out "$BATS_TEST_TMPDIR/r32"
    [ "$status" -eq 0 ]
}
