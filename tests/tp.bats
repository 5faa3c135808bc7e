#!/usr/bin/env bats
# Lab 04, tensor parallelism: tp = 1, 2 and 4, and tp x dp = 2 x 2 with
# accumulation, follow the single-device run (losses within the grader's
# tolerance, gathered parameters within 1e-5), also with a vocabulary that
# must be padded; memory.csv equals the planner's prediction and the TP
# group's all-reduces the formula's bytes (memplan.h), on every rank; the
# ranks' own copies agree; bad degrees are one clear error.
load helpers

TP="$BUILD/solutions/04_tensor_parallel/train_tp"
COMMON=(--config tiny --steps 12 --eval-every 4 --threads 1)

setup_file() {
    export BASE="$BATS_FILE_TMPDIR/base" BASE257="$BATS_FILE_TMPDIR/base257"
    have_solution 00 || return 0   # a handout without it: the tests that need it skip
    t 120 "$BUILD/solutions/00_single_device/train_gpt" "${COMMON[@]}" --out "$BASE" \
        --dump-params "$BASE/params.bin" > /dev/null
    t 120 "$BUILD/solutions/00_single_device/train_gpt" "${COMMON[@]}" --vocab 257 \
        --out "$BASE257" --dump-params "$BASE257/params.bin" > /dev/null
}

# tp_run DIR NP FLAGS...: train_tp on NP ranks into DIR, dumping params
tp_run() {
    local out=$1 np=$2
    shift 2
    mpirun_t 180 "$np" "$TP" "${COMMON[@]}" "$@" --out "$out" --dump-params "$out/params.bin"
}

@test "tp: tp = 1, 2, 4 and tp 2 x dp 2 with accumulation follow the single-device run" {
    require_solution 00 04
    cd "$ROOT"
    for case in "1 --tp 1" "2 --tp 2" "4 --tp 4" "4 --tp 2 --grad-accum 2"; do
        read -r np flags <<<"$case"
        out="$BATS_TEST_TMPDIR/tp-$np-${flags// /_}"
        run tp_run "$out" "$np" $flags
        [ "$status" -eq 0 ] || { echo "$flags: $output"; false; }
        [[ "$output" != *DIFFERENT* ]] || { echo "$flags: $output"; false; }
        run same_run "$out"
        echo "$flags: $output"
        [ "$status" -eq 0 ]
        # every rank's own copy of the whole model agrees (replicated tensors included)
        [ "$(tail -n +2 "$out/params_checksum.csv" | cut -d, -f2 | sort -u | wc -l)" -eq 1 ]
    done
}

@test "tp: a vocabulary that tp does not divide is padded, and training still follows one device" {
    require_solution 00 04
    cd "$ROOT"
    for np in 2 4; do
        out="$BATS_TEST_TMPDIR/v257-$np"
        run tp_run "$out" "$np" --tp "$np" --vocab 257
        [ "$status" -eq 0 ] || { echo "$output"; false; }
        padding=$(( (257 + np - 1) / np * np - 257 ))
        [[ "$output" == *"($padding padding)"* ]]
        run env BASE="$BASE257" bash -c "source '$BATS_TEST_DIRNAME/helpers.bash'; same_run '$out'"
        echo "np $np: $output"
        [ "$status" -eq 0 ]
    done
}

@test "tp: memory.csv is the planner's prediction and TP traffic the formula's, on every rank" {
    require_solution 00 04
    cd "$ROOT"
    out="$BATS_TEST_TMPDIR/tp4"
    run tp_run "$out" 4 --tp 2 --grad-accum 2
    [ "$status" -eq 0 ]
    [ "$(grep -c ' ok$' <<<"$output")" -ge 6 ]
    [[ "$output" == *"TP all-reduces per rank"*"ok"* ]]
    # every rank's memory equals rank 0's, category by category (the shards are equal)
    for c in params grads optimizer activations workspace; do
        [ "$(awk -F, -v c="$c" '$2 == c { print $4 }' "$out/memory.csv" | sort -u | wc -l)" -eq 1 ]
    done
    # the tp group's all-reduce bytes are the same on every rank
    [ "$(awk -F, '$2 == "tp" && $3 == "allreduce" { print $5 }' "$out/comm.csv" | sort -u | wc -l)" -eq 1 ]
    # split tensors: rank memory for params is about half of one device's
    one=$(awk -F, '$2 == "params" { print $4 }' "$BASE/memory.csv")
    two=$(awk -F, '$1 == 0 && $2 == "params" { print $4 }' "$out/memory.csv")
    [ "$two" -lt "$one" ] && [ "$((2 * two))" -gt "$one" ]
}

@test "tp: degrees that do not divide the heads or the ranks are one clear error" {
    require_solution 04
    run mpirun_t 60 3 "$TP" "${COMMON[@]}" --tp 3 --out "$BATS_TEST_TMPDIR/bad"
    assert_user_error
    [[ "$output" == *"does not divide n_head 4"* ]]
    run mpirun_t 60 2 "$TP" "${COMMON[@]}" --tp 4 --out "$BATS_TEST_TMPDIR/bad"
    assert_user_error
    run t 30 "$TP" "${COMMON[@]}" --tp 0 --out "$BATS_TEST_TMPDIR/bad"
    assert_user_error
}

@test "tp --fused-ce (the extension): the same training with one TP all-reduce fewer per forward pass, the same bytes" {
    require_solution 00 04
    cd "$ROOT"
    for fused in "" --fused-ce; do
        run tp_run "$BATS_TEST_TMPDIR/ce$fused" 2 --tp 2 $fused
        [ "$status" -eq 0 ] && [[ "$output" == *"TP all-reduces per rank"*" ok"* ]]
    done
    run same_run "$BATS_TEST_TMPDIR/ce--fused-ce"
    [ "$status" -eq 0 ]
    calls() { awk -F, '$1 == 0 && $2 == "tp" && $3 == "allreduce" { print $4, $5 }' "$1/comm.csv"; }
    read -r c3 b3 <<<"$(calls "$BATS_TEST_TMPDIR/ce")"
    read -r c2 b2 <<<"$(calls "$BATS_TEST_TMPDIR/ce--fused-ce")"
    [ "$b2" -eq "$b3" ]
    # 12 steps, evaluations at steps 0, 4, 8 and 11 of 4 batches: 12 + 16 forward passes
    [ "$((c3 - c2))" -eq 28 ]
}
