#!/usr/bin/env bats
# Lab 05, activation memory: sequence parallelism at tp 2, tp 4 and tp 2 x
# dp 2 follows the single-device run and lab 04's TP (losses within the
# grader's tolerance, gathered parameters within 1e-5), with memory.csv
# equal to the planner and every TP collective as the formula; it moves the
# same bytes on the wire as TP alone but for the layernorm gradients' sums;
# recomputation (full, selective) changes no bit on any layout (one device,
# DDP, ZeRO, TP, TP + SP); bad input is one clear error.
load helpers

ACT="$BUILD/solutions/05_activation_memory/train_tp"
ACT_ZERO="$BUILD/solutions/05_activation_memory/train_zero"
COMMON=(--config tiny --steps 12 --eval-every 4 --threads 1)

setup_file() {
    export BASE="$BATS_FILE_TMPDIR/base" TP2="$BATS_FILE_TMPDIR/tp2"
    have_solution 00 || return 0   # a handout without it: the tests that need it skip
    t 120 "$BUILD/solutions/00_single_device/train_gpt" "${COMMON[@]}" --out "$BASE" \
        --dump-params "$BASE/params.bin" > /dev/null
}

# act_run DIR NP PROGRAM FLAGS...: a lab 05 program on NP ranks into DIR, dumping params
act_run() {
    local out=$1 np=$2 prog=$3
    shift 3
    mpirun_t 180 "$np" "$prog" "${COMMON[@]}" "$@" --out "$out" --dump-params "$out/params.bin"
}

# wire_bytes DIR: rank 0's TP traffic on the wire, ring algorithms, from
# comm.csv (all-reduce 2(p-1)/p of its payload, reduce-scatter and
# all-gather (p-1)/p)
wire_bytes() {
    awk -F, -v p="$2" '$1 == 0 && $2 == "tp" {
        f = ($3 == "allreduce") ? 2 * (p - 1) / p : ($3 == "reduce_scatter" || $3 == "allgather") ? (p - 1) / p : 0
        s += f * $5 } END { printf "%.0f\n", s }' "$1/comm.csv"
}

@test "act: TP + SP at tp 2, tp 4 and tp 2 x dp 2 follow one device and TP alone, memory and traffic as planned" {
    require_solution 00 04 05
    cd "$ROOT"
    run mpirun_t 180 2 "$BUILD/solutions/04_tensor_parallel/train_tp" "${COMMON[@]}" --tp 2 \
        --out "$TP2" --dump-params "$TP2/params.bin"
    [ "$status" -eq 0 ]
    for case in "2 --tp 2" "4 --tp 4" "4 --tp 2 --grad-accum 2"; do
        read -r np flags <<<"$case"
        out="$BATS_TEST_TMPDIR/sp-$np-${flags// /_}"
        run act_run "$out" "$np" "$ACT" $flags --sp
        [ "$status" -eq 0 ] || { echo "$flags: $output"; false; }
        [[ "$output" == *"sequence parallelism on"* ]]
        # memory per category, and each kind of TP collective, as predicted
        [[ "$output" != *DIFFERENT* ]] || { echo "$flags: $output"; false; }
        [ "$(grep -c '^  [a-z]* *predicted .* ok$' <<<"$output")" -eq 6 ]
        [[ "$output" == *"TP reduce-scatters per rank"*" ok"* ]]
        [[ "$output" == *"TP all-gathers per rank"*" ok"* ]]
        run same_run "$out"
        echo "$flags vs one device: $output"
        [ "$status" -eq 0 ]
        # the TP replicas of the layernorms stay equal: every rank's copy agrees
        [ "$(tail -n +2 "$out/params_checksum.csv" | cut -d, -f2 | sort -u | wc -l)" -eq 1 ]
    done
    run env BASE="$TP2" bash -c "source '$BATS_TEST_DIRNAME/helpers.bash'; same_run '$BATS_TEST_TMPDIR/sp-2---tp_2'"
    echo "tp 2 + SP vs tp 2: $output"
    [ "$status" -eq 0 ]
}

@test "act: SP puts the same bytes on the wire as TP alone, plus the layernorm gradients' sums" {
    require_solution 05
    cd "$ROOT"
    for np in 2 4; do
        for sp in "" --sp; do
            run act_run "$BATS_TEST_TMPDIR/w$np$sp" "$np" "$ACT" --tp "$np" $sp
            [ "$status" -eq 0 ] && [[ "$output" != *DIFFERENT* ]] || { echo "$output"; false; }
        done
        tp=$(wire_bytes "$BATS_TEST_TMPDIR/w$np" "$np")
        sp=$(wire_bytes "$BATS_TEST_TMPDIR/w$np--sp" "$np")
        # without SP there is no reduce-scatter or all-gather in the group
        ! awk -F, '$2 == "tp" && ($3 == "reduce_scatter" || $3 == "allgather")' \
            "$BATS_TEST_TMPDIR/w$np/comm.csv" | grep -q . || return 1
        # 12 steps x (4L + 2 = 18) all-reduces of C = 64 floats, 2(p-1)/p on the wire
        sums=$(( 12 * 18 * 64 * 4 * 2 * (np - 1) / np ))
        echo "tp $np: TP alone $tp bytes, SP $sp bytes, layernorm sums $sums"
        [ "$((sp - tp))" -eq "$sums" ]
    done
}

@test "act: recomputation (selective, full) is the same run bit for bit: one device, DDP, ZeRO-1 and 3, TP, TP + SP" {
    require_solution 05
    cd "$ROOT"
    for case in "1 $ACT --tp 1" "2 $ACT --tp 1" "2 $ACT_ZERO --zero 1" "2 $ACT_ZERO --zero 3" \
        "2 $ACT --tp 2" "2 $ACT --tp 2 --sp" "4 $ACT --tp 2 --sp --grad-accum 2"; do
        read -r np prog flags <<<"$case"
        name=$(basename "$prog")-$np${flags// /_}
        for mode in none selective full; do
            out="$BATS_TEST_TMPDIR/$name-$mode"
            run act_run "$out" "$np" "$prog" $flags --steps 6 --eval-every 3 --recompute "$mode"
            [ "$status" -eq 0 ] || { echo "$name $mode: $output"; false; }
            # memory as the planner predicts, for what each mode keeps
            [[ "$output" != *DIFFERENT* ]] || { echo "$name $mode: $output"; false; }
        done
        for mode in selective full; do
            # losses, validation losses and gradient norms, and the parameters: identical
            cmp <(cut -d, -f1-5 "$BATS_TEST_TMPDIR/$name-none/metrics.csv") \
                <(cut -d, -f1-5 "$BATS_TEST_TMPDIR/$name-$mode/metrics.csv")
            cmp "$BATS_TEST_TMPDIR/$name-none/params.bin" "$BATS_TEST_TMPDIR/$name-$mode/params.bin"
        done
        # and it keeps less: full < selective < none
        act() { awk -F, '$1 == 0 && $2 == "activations" { print $4 }' "$BATS_TEST_TMPDIR/$name-$1/memory.csv"; }
        echo "$name: activations none $(act none), selective $(act selective), full $(act full)"
        [ "$(act full)" -lt "$(act selective)" ] && [ "$(act selective)" -lt "$(act none)" ]
    done
}

@test "act: --seq that --tp does not divide, an unknown --recompute, and --sp on lab 04's trainer are one clear error" {
    require_solution 04 05
    run mpirun_t 60 2 "$ACT" "${COMMON[@]}" --tp 2 --sp --seq 63 --out "$BATS_TEST_TMPDIR/bad"
    assert_user_error
    [[ "$output" == *"--seq 63 must be a multiple of --tp 2"* ]]
    run t 30 "$ACT" "${COMMON[@]}" --recompute some --out "$BATS_TEST_TMPDIR/bad"
    assert_user_error
    [[ "$output" == *"--recompute expects none, selective or full, got 'some'"* ]]
    run t 30 "$ACT_ZERO" "${COMMON[@]}" --recompute --out "$BATS_TEST_TMPDIR/bad"
    assert_user_error
    run t 30 "$BUILD/solutions/04_tensor_parallel/train_tp" "${COMMON[@]}" --sp --out "$BATS_TEST_TMPDIR/bad"
    assert_user_error
    run t 30 "$BUILD/bin/memplan" --config tiny --sp
    assert_user_error
    [[ "$output" == *"give --tp N"* ]]
    run t 30 "$BUILD/bin/memplan" --config tiny --tp 2 --sp --seq 63
    assert_user_error
    run t 30 "$BUILD/bin/memplan" --config tiny --tp 2 --recompute most
    assert_user_error
    [ ! -e "$BATS_TEST_TMPDIR/bad" ]
}

@test "act: the student's skeleton stops cleanly at the first function it needs, naming it" {
    untouched 05 || skip "labs/05_activation_memory has been edited: not the handed-out skeleton"
    for flags in "--tp 1 --sp" "--tp 1 --recompute selective" "--tp 1 --recompute full"; do
        run t 60 "$BUILD/labs/05_activation_memory/train_tp" "${COMMON[@]}" $flags \
            --out "$BATS_TEST_TMPDIR/skel"
        echo "$flags: $output"
        [ "$status" -ne 0 ] && [ "$status" -lt 128 ]
        [[ "$output" == *"not implemented: "*"activation_memory.c"*"this is your task in the lab"* ]]
    done
}

# check_act: the layernorm sum on both stages of a pipeline of 2 (what
# lab 10's trainer asks of it): the solution passes, a sum without the
# stages' guards is the planted bug 05-layernorm-sum-ignores-pipeline-stages
@test "act: check_act sums the layernorms each pipeline stage holds; not 2 ranks is one clear error; the skeleton names its function" {
    require_solution 05
    run mpirun_t 60 2 "$BUILD/solutions/05_activation_memory/check_act"
    echo "$output"
    [ "$status" -eq 0 ]
    [ "$(grep -c 'the layernorms it holds summed over TP, nothing else touched' <<<"$output")" -eq 2 ]
    [[ "$output" == *"check_act: ok"* ]]
    run mpirun_t 60 1 "$BUILD/solutions/05_activation_memory/check_act"
    assert_user_error
    if untouched 05; then
        run mpirun_t 60 2 "$BUILD/labs/05_activation_memory/check_act"
        [ "$status" -eq 3 ]
        [[ "$output" == *"not implemented: sp_sum_layernorm_grads"* ]]
    fi
}

@test "act --sp-regather (the extension): the same bits as --sp, fewer activations, 2L + 1 more all-gathers per backward pass" {
    require_solution 05
    cd "$ROOT"
    for flags in --sp --sp-regather; do
        run act_run "$BATS_TEST_TMPDIR/$flags" 2 "$ACT" --tp 2 "$flags"
        [ "$status" -eq 0 ] && [[ "$output" != *DIFFERENT* ]] || { echo "$flags: $output"; false; }
    done
    [[ "$output" == *"sequence parallelism on, gathered again in the backward pass"* ]]
    a="$BATS_TEST_TMPDIR/--sp" b="$BATS_TEST_TMPDIR/--sp-regather"
    cmp <(cut -d, -f1-5 "$a/metrics.csv") <(cut -d, -f1-5 "$b/metrics.csv")
    cmp "$a/params.bin" "$b/params.bin"
    act() { awk -F, '$1 == 0 && $2 == "activations" { print $4 }' "$1/memory.csv"; }
    # ln1 and ln2 of 4 blocks and lnf keep 256 of 512 rows: 9 x 256 x 64 floats fewer
    [ "$(( $(act "$a") - $(act "$b") ))" -eq $(( 9 * 256 * 64 * 4 )) ]
    gathers() { awk -F, '$1 == 0 && $2 == "tp" && $3 == "allgather" { print $4, $5 }' "$1/comm.csv"; }
    read -r ca ba <<<"$(gathers "$a")"
    read -r cb bb <<<"$(gathers "$b")"
    # 12 backward passes x (2L + 1 = 9) all-gathers of N C = 512 x 64 floats
    [ "$((cb - ca))" -eq 108 ] && [ "$((bb - ba))" -eq $(( 108 * 512 * 64 * 4 )) ]
}
