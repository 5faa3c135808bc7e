#!/usr/bin/env bats
# Bad input to the trainer: one clear line, exit status 2, no crash, no hang.
load helpers

# every test here runs lab 00's solution
setup() {
    require_solution 00
}

trainer() {
    run t 30 "$SOL00/train_gpt" --data "$SYNTH" --steps 2 --out "$BATS_TEST_TMPDIR/run" "$@"
    echo "$output"
}

@test "unknown flag" {
    trainer --stepz 3
    assert_user_error
    [[ "$output" == *"--stepz"* ]]
}
@test "flag missing its value" {
    run t 30 "$SOL00/train_gpt" --steps
    assert_user_error
}
@test "stray argument" {
    trainer extra
    assert_user_error
}
@test "non-numeric, negative, zero and out-of-range numbers" {
    for bad in "--steps abc" "--steps -1" "--steps 0" "--steps 5x" "--batch 0" "--lr nan" \
               "--lr -1" "--lr inf" "--seed -3" "--threads 0" "--val-fraction 0.9" "--eval-batches 0"; do
        # shellcheck disable=SC2086
        trainer $bad
        assert_user_error
        [[ "$output" == *"${bad%% *}"* ]]
    done
}
@test "unknown config names the known ones" {
    trainer --config huge
    assert_user_error
    [[ "$output" == *"tiny, small, medium, gpt2-124m"* ]]
}
@test "a config that can't be built: heads that don't divide the channels" {
    trainer --config tiny --n-head 3
    assert_user_error
    [[ "$output" == *"divisible"* ]]
}
@test "a sequence longer than the context" {
    trainer --config tiny --seq 65
    assert_user_error
    [[ "$output" == *"context"* ]]
}
@test "warmup longer than the run" {
    trainer --warmup 5
    assert_user_error
}
@test "unknown device; cuda not built" {
    trainer --device tpu
    assert_user_error
    trainer --device cuda
    assert_user_error
    [[ "$output" == *"CUDA"* ]]
}
@test "missing token file" {
    trainer --data "$BATS_TEST_TMPDIR/nope.tok"
    assert_user_error
    [[ "$output" == *"nope.tok"* ]]
}
@test "corrupt token file (one payload byte flipped)" {
    cp "$SYNTH" "$BATS_TEST_TMPDIR/bad.tok"
    printf '\x7f' | dd of="$BATS_TEST_TMPDIR/bad.tok" bs=1 seek=1000 conv=notrunc status=none
    trainer --data "$BATS_TEST_TMPDIR/bad.tok"
    assert_user_error
    [[ "$output" == *"corrupt"* ]]
}
@test "truncated token file" {
    head -c 5000 "$SYNTH" > "$BATS_TEST_TMPDIR/short.tok"
    trainer --data "$BATS_TEST_TMPDIR/short.tok"
    assert_user_error
    [[ "$output" == *"truncated"* ]]
}
@test "not a token file at all" {
    echo "hello world, this is text" > "$BATS_TEST_TMPDIR/text.tok"
    trainer --data "$BATS_TEST_TMPDIR/text.tok"
    assert_user_error
}
@test "a token file too small for one sequence" {
    printf 'abc' > "$BATS_TEST_TMPDIR/tiny.txt"
    t 10 "$BUILD/bin/text_to_tokens" "$BATS_TEST_TMPDIR/tiny.txt" "$BATS_TEST_TMPDIR/tiny.tok"
    trainer --data "$BATS_TEST_TMPDIR/tiny.tok"
    assert_user_error
    [[ "$output" == *"shorter than one sequence"* ]]
}
@test "a token file whose vocabulary is larger than the model's" {
    # a GPT-2-vocabulary file (header vocab 50257) fed to a 256-vocab model
    /usr/bin/python3 - "$BATS_TEST_TMPDIR/big.tok" <<'PY'
import struct, sys
toks = bytes(range(200)) * 10
payload = b"".join(struct.pack("<H", b) for b in toks)
h = 0xcbf29ce484222325
for b in payload:
    h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
open(sys.argv[1], "wb").write(b"DTLTOKEN" + struct.pack("<IIQQ", 1, 50257, len(toks), h) + payload)
PY
    trainer --data "$BATS_TEST_TMPDIR/big.tok"
    assert_user_error
    [[ "$output" == *"vocabulary"* ]]
}

@test "the parallel flags: one parser and one set of bounds for every trainer; a flag a trainer does not expose is unknown to it" {
    require_solution 02 04 06 07 08 10
    local S="$BUILD/solutions" prog
    for prog in 04_tensor_parallel/train_tp 06_pipeline/train_pp 07_context_parallel/train_cp \
                08_moe/train_moe 10_composed/train_4d; do
        run mpirun_t 30 1 "$S/$prog" --tp 70000
        assert_user_error
        [[ "$output" == *"error: --tp expects an integer in 1..65536, got '70000'"* ]] || { echo "$prog: $output"; false; }
    done
    run mpirun_t 30 1 "$S/07_context_parallel/train_cp" --cp 0
    assert_user_error
    [[ "$output" == *"error: --cp expects an integer in 1..4096, got '0'"* ]]
    # train_ddp is data parallelism alone: no --tp
    run mpirun_t 30 1 "$S/02_ddp/train_ddp" --tp 2
    assert_user_error
    [[ "$output" == *"--tp"* ]]
    # and --help lists exactly the flags a trainer exposes
    run t 30 "$S/08_moe/train_moe" --help
    [ "$status" -eq 0 ]
    [[ "$output" == *"  --ep N "* && "$output" == *"  --tp N "* && "$output" == *"  --ep-overlap "* ]]
    [[ "$output" != *"  --pp P "* && "$output" != *"  --cp N "* ]]
}

# --help, as a user reads it: every program's lines fit 100 columns; a
# trainer's starts with what it is, an example command and its own options
# (its layout's flags first), then the shared ones in groups
@test "--help: every program's fits 100 columns; a trainer's gives an example, then its own options before the shared ones" {
    local lab prog f own
    cd "$ROOT"   # the example names the program as run: build/... as a user types it
    while read -r lab prog; do
        f="build/solutions/$lab/$prog"
        [ -x "$f" ] || f="build/labs/$lab/$prog"   # a handout: --help needs none of the student's code
        [ -x "$f" ] || f="build/bin/$prog"
        case $prog in check_ckpt) continue ;; esac   # its usage is its error
        run t 30 "$f" --help
        [ "$status" -eq 0 ] || { echo "$lab/$prog: status $status"; return 1; }
        ! printf '%s\n' "$output" | awk -v p="$lab/$prog" 'length > 100 { print p ": " $0; bad = 1 } END { exit !bad }' || return 1
        [[ $prog == train_* ]] || continue
        [ "${lines[0]}" = "usage: $prog [options]" ]
        [[ "$output" == *$'\nexample'*$'\n'"  "*"$f "*"--steps 50"$'\n'* ]] || { echo "$lab/$prog: no example"; return 1; }
        [[ "$output" == *$'\nThe model and its data:\n  --config NAME '* ]]
        own=$(printf '%s\n' "$output" | sed -n "/^$prog's own options:$/{n;p}")
        [ "$prog" = train_gpt ] || [ -n "$own" ] || { echo "$lab/$prog: no own options"; return 1; }
        [ "${output%%The model and its data:*}" != "$output" ]
        [[ "${output%%The model and its data:*}" != *"--config NAME"* ]]
    done < <(make -s -C "$ROOT" print-programs)
    run t 30 "$(ls "$BUILD"/{solutions,labs}/10_composed/train_4d 2> /dev/null | head -n 1)" --help
    [[ "$(printf '%s\n' "$output" | sed -n "/^train_4d's own options:$/{n;p}")" == "  --dp N "* ]]
    # the single-rank example, and a 2-rank one, run as printed (with 2 steps)
    local ex
    for f in "$SOL00/train_gpt" "$BUILD/solutions/04_tensor_parallel/train_tp"; do
        [ -x "$f" ] || continue   # a handout without lab 04's solution
        ex=$("$f" --help | sed -n '/^example/{n;p}')
        # shellcheck disable=SC2086  # the example's words
        run t 120 ${ex/mpirun -np /mpirun --oversubscribe -np } --steps 2 --out "$BATS_TEST_TMPDIR/ex"
        [ "$status" -eq 0 ] || { echo "$ex: $output"; return 1; }
    done
}
