#!/usr/bin/env bats
# Fused attention (--attention fused; config.h's GPTAttention, kernels.h):
# its kernels equal the materialized ones on the same q, k, v; every trainer
# takes it, and each layout follows the one-device fused run (losses within
# the grader's tolerance, parameters within 1e-5) with every category of
# memory as the planner predicts; the fused run follows the materialized
# one; what it keeps grows linearly in T where the materialized run's grows
# with T^2. Runs use T = 320: three tiles of the CPU kernels' 128 queries,
# two of their 256 keys (the last ones partial), so that the online softmax
# merges tiles.
load helpers

S="$BUILD/solutions"
GPT="$S/00_single_device/train_gpt"
COMMON=(--config tiny --ctx 320 --batch 4 --steps 3 --eval-every 100 --threads 1)

setup_file() {
    export FUSED="$BATS_FILE_TMPDIR/fused" MATERIALIZED="$BATS_FILE_TMPDIR/materialized"
    have_solution 00 05 || return 0
    t 60 "$GPT" "${COMMON[@]}" --attention fused --out "$FUSED" \
        --dump-params "$FUSED/params.bin" > /dev/null
    t 60 "$GPT" "${COMMON[@]}" --out "$MATERIALIZED" \
        --dump-params "$MATERIALIZED/params.bin" > /dev/null
}

# fused_follows NAME NP PROGRAM FLAGS...: PROGRAM's fused run on NP ranks
# follows BASE's (default: the one-device fused run), memory as predicted
fused_follows() {
    local name=$1 np=$2 out="$BATS_TEST_TMPDIR/$1"
    shift 2
    run mpirun_t 120 "$np" "$@" "${COMMON[@]}" --attention fused --out "$out" \
        --dump-params "$out/params.bin"
    [ "$status" -eq 0 ] || { echo "$name: $output"; return 1; }
    [[ "$output" != *DIFFERENT* ]] || { echo "$name: $output"; return 1; }
    follows_base "${BASE:-$FUSED}" "$out" "$name"
}

@test "attention: the fused kernels give the materialized output, each row's log-sum-exp and the same gradients, over one tile, a partial one and several" {
    require_solution 00 05
    run t 60 "$BUILD/tests/test_fused_attention"
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"test_fused_attention: "*" checks, 0 failed"* ]]
}

@test "attention: every lab's trainer runs --attention fused and follows the one-device fused run, memory as planned" {
    require_solution 00 02 03 04 05 06 07 08
    fused_follows ddp 2 "$S/02_ddp/train_ddp"
    fused_follows zero3 2 "$S/03_zero/train_zero" --zero 3
    fused_follows tp 2 "$S/04_tensor_parallel/train_tp" --tp 2
    fused_follows sp-selective 2 "$S/05_activation_memory/train_tp" --tp 2 --sp --recompute selective
    fused_follows pp 2 "$S/06_pipeline/train_pp" --pp 2
    fused_follows ring 2 "$S/07_context_parallel/train_cp" --cp 2 --cp-algo zigzag
    fused_follows ulysses 2 "$S/07_context_parallel/train_cp" --cp 2 --cp-algo ulysses
    # a mixture of experts: ep 2 follows its own one-device run
    local moe="$BATS_TEST_TMPDIR/moe-one"
    t 60 "$S/08_moe/train_moe" "${COMMON[@]}" --config tiny-moe --attention fused --out "$moe" \
        --dump-params "$moe/params.bin" > /dev/null
    COMMON=("${COMMON[@]}" --config tiny-moe)
    BASE="$moe" fused_follows ep 2 "$S/08_moe/train_moe" --ep 2
}

@test "attention: the composed trainer's fused layouts (pretend GPUs: SP, Ulysses and ZB-H1 with selective recomputation, striped, interleaved with ZeRO-1) follow the one-device fused run" {
    require_solution 00 02 03 04 05 06 07 08 09 10
    t 600 make -s -C "$ROOT" fake-gpu > /dev/null
    local layout np flags
    for layout in "4 --pp 2 --tp 2 --sp --recompute selective" \
        "4 --tp 2 --cp 2 --cp-algo ulysses --recompute selective" \
        "4 --pp 2 --tp 2 --schedule zb-h1 --micro-batches 4 --recompute selective" \
        "4 --dp 2 --cp 2 --cp-algo striped" \
        "8 --pp 2 --tp 2 --dp 2 --schedule interleaved --chunks 2 --micro-batches 2 --zero 1"; do
        read -r np flags <<< "$layout"
        # shellcheck disable=SC2086  # flags is a list
        fused_follows "4d ${flags// /_}" "$np" env FAKE_GPUS="$np" \
            "$BUILD/fake_gpu/10_composed/train_4d" $flags --device cuda
    done
}

@test "attention: fused follows materialized within the grader's tolerance, and keeps no T x T: bf16 too, memory as planned" {
    require_solution 00 05 11
    BASE="$MATERIALIZED" same_run "$FUSED"
    act() { awk -F, '$1 == 0 && $2 == "activations" { print $4 }' "$1/memory.csv"; }
    # tiny: 4 blocks, 4 heads, B 4, T 320: the probabilities were 4 x 4 x 4 x 320^2 floats,
    # the lse is 4 x 4 x 4 x 320 (4 bytes each)
    [ "$(act "$MATERIALIZED")" -eq $(($(act "$FUSED") + 4 * 4 * 4 * 4 * 320 * 319)) ]
    local out="$BATS_TEST_TMPDIR/bf16"
    run t 60 "$GPT" "${COMMON[@]}" --attention fused --precision bf16 --out "$out"
    [ "$status" -eq 0 ] && [[ "$output" != *DIFFERENT* ]] || { echo "$output"; false; }
}

@test "attention: the planner's fused activations grow linearly in T, the materialized ones faster; its --advise takes --attention" {
    act_of() {
        "$BUILD/bin/memplan" --config gpt2-124m --tp 1 --ranks 1 --batch 1 --seq "$1" --csv \
            --attention "$2" | awk -F, '$2 == "activations" { print $4 }'
    }
    local f512 f1024 m512 m1024
    f512=$(act_of 512 fused) f1024=$(act_of 1024 fused)
    m512=$(act_of 512 materialized) m1024=$(act_of 1024 materialized)
    echo "fused $f512 -> $f1024, materialized $m512 -> $m1024"
    [ "$f1024" -eq $((2 * f512)) ]
    [ "$m1024" -gt $((2 * m512 + m512 / 2)) ]
    # --advise: more of GPT-2's layouts fit 1 GiB when attention keeps no T x T
    fits() {
        "$BUILD/bin/memplan" --advise --config gpt2-124m --batch 8 --gpus-per-node 8 --nodes 1 \
            --gpu-mem 1 --top 1 --attention "$1" | sed -n 's/.* layouts tried, \([0-9]*\) fit.*/\1/p'
    }
    local fm ff
    fm=$(fits materialized) ff=$(fits fused)
    echo "layouts that fit 1 GiB: materialized $fm, fused $ff"
    [ "$ff" -gt "$fm" ] && [ "$fm" -gt 0 ]
}

@test "attention: an unknown --attention is one clear error, in the trainers and the planner" {
    require_solution 00
    run t 30 "$GPT" --attention flash --out "$BATS_TEST_TMPDIR/bad"
    assert_user_error
    [[ "$output" == *"--attention expects materialized or fused, got 'flash'"* ]]
    [ ! -e "$BATS_TEST_TMPDIR/bad" ]
    run t 30 "$BUILD/bin/memplan" --config tiny --attention flash
    assert_user_error
}
