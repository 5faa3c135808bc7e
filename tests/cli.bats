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
