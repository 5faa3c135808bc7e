#!/usr/bin/env bats
# shellcheck disable=SC2154  # $stderr and $stderr_lines are set by bats' run
# Tests of the dataset tools and the token-file loader, driven through the
# built programs (the Makefile builds build/bin/* before running them).

bats_require_minimum_version 1.5.0   # run --separate-stderr, run !

setup() {
    ROOT="$BATS_TEST_DIRNAME/.."
    BIN="$ROOT/build/bin"
    T="$BATS_TEST_TMPDIR"
}

# A valid 6-token file: "hello\n" is h=104 e=101 l=108 l o=111 \n; 44 bytes.
make_good() {
    printf 'hello\n' > "$T/hello.txt"
    timeout 30 "$BIN/text_to_tokens" "$T/hello.txt" "$T/good.tok" > /dev/null
}

# Overwrite bytes of file $1 at offset $2 with the printf-format string $3.
patch_bytes() {
    # shellcheck disable=SC2059  # $3 is the format, so that \NNN escapes work
    printf "$3" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none
}

# The program failed as a user error: exit 2 exactly (not a signal), and one
# line on stderr that contains $1.
assert_user_error() {
    [ "$status" -eq 2 ]
    [ "${#stderr_lines[@]}" -eq 1 ]
    [[ "$stderr" == *"error:"* ]]
    [[ "$stderr" == *"$1"* ]]
}

# tokens_info on $1 must fail with a message containing $2 and the path.
assert_rejected() {
    run --separate-stderr timeout 30 "$BIN/tokens_info" "$1"
    assert_user_error "$2"
    [[ "$stderr" == *"$1"* ]]
    [ -z "$output" ]
}

# ---- gen_synthetic --------------------------------------------------------

@test "gen_synthetic: same seed gives a byte-identical file" {
    run timeout 30 "$BIN/gen_synthetic" --out "$T/a.tok" --tokens 20000 --seed 7
    [ "$status" -eq 0 ]
    run timeout 30 "$BIN/gen_synthetic" --out "$T/b.tok" --tokens 20000 --seed 7
    [ "$status" -eq 0 ]
    cmp "$T/a.tok" "$T/b.tok"
}

@test "gen_synthetic: a different seed gives a different file" {
    timeout 30 "$BIN/gen_synthetic" --out "$T/a.tok" --tokens 20000 --seed 1 > /dev/null
    timeout 30 "$BIN/gen_synthetic" --out "$T/b.tok" --tokens 20000 --seed 2 > /dev/null
    run ! cmp -s "$T/a.tok" "$T/b.tok"
}

@test "gen_synthetic: writes exactly --tokens tokens, and the default is 1000000" {
    run timeout 30 "$BIN/gen_synthetic" --out "$T/a.tok" --tokens 12345
    [ "$status" -eq 0 ]
    [ "$(stat -c %s "$T/a.tok")" -eq $((32 + 2 * 12345)) ]
    [[ "$output" == *"tokens=12345"* ]]
    run timeout 30 "$BIN/gen_synthetic" --out "$T/d.tok"
    [ "$status" -eq 0 ]
    [ "$(stat -c %s "$T/d.tok")" -eq $((32 + 2 * 1000000)) ]
}

@test "gen_synthetic: records have the '#k words | words' form" {
    timeout 30 "$BIN/gen_synthetic" --out "$T/a.tok" --tokens 5000 > /dev/null
    # The payload is the text itself, each byte stored as a little-endian
    # uint16 (low byte, then 0): keep the odd bytes.
    tail -c +33 "$T/a.tok" | od -An -v -tu1 -w2 | awk '{ printf "%c", $1 }' > "$T/a.txt"
    head -n -1 "$T/a.txt" > "$T/full.txt"          # the last record may be cut
    [ "$(wc -l < "$T/full.txt")" -gt 50 ]
    # Every complete record matches the pattern and its copy equals its words.
    run grep -Evc '^#[0-7]( [a-z]{2,6}){4} \|( [a-z]{2,6}){4}$' "$T/full.txt"
    [ "$output" = 0 ]
    awk '$2 != $7 || $3 != $8 || $4 != $9 || $5 != $10 { bad++ } END { exit bad > 0 }' "$T/full.txt"
    # The topic digit is long-range information: with 8 topics of 16 words, a
    # word always comes with the same digit.
    awk '{ for (i = 2; i <= 5; i++) { if (($i in t) && t[$i] != $1) exit 1; t[$i] = $1 } }' "$T/full.txt"
}

@test "gen_synthetic: prints statistics, and the entropy floor is below the unigram entropy" {
    run --separate-stderr timeout 30 "$BIN/gen_synthetic" --out "$T/a.tok" --tokens 100000
    [ "$status" -eq 0 ]
    [[ "$output" == *"vocab_size=256"* ]]
    [[ "$output" == *"records="* ]]
    uni=$(grep '^unigram_entropy_nats=' <<< "$output" | cut -d= -f2)
    flo=$(grep '^entropy_floor_nats=' <<< "$output" | cut -d= -f2)
    [ -n "$uni" ] && [ -n "$flo" ]
    # Floats compared in awk: 0 < floor < unigram < ln(256).
    awk -v u="$uni" -v f="$flo" 'BEGIN { exit !(f > 0 && f < u && u < log(256)) }'
    # The floor is a property of the process, not of the seed.
    run timeout 30 "$BIN/gen_synthetic" --out "$T/b.tok" --tokens 100000 --seed 99
    [[ "$output" == *"entropy_floor_nats=$flo"* ]]
}

@test "gen_synthetic: bad flags exit 2 with one line on stderr" {
    for args in "--bogus" "--out $T/x.tok --tokens abc" "--out $T/x.tok --tokens -5" \
                "--out $T/x.tok --tokens 0" "--out $T/x.tok --tokens 999" \
                "--out $T/x.tok --tokens 100000001" "--out $T/x.tok --tokens 12x" \
                "--out $T/x.tok --tokens 99999999999999999999999" \
                "--out $T/x.tok --seed -1" "--out $T/x.tok --seed abc" \
                "--tokens 5000" "--out" "--out $T/x.tok extra"; do
        # shellcheck disable=SC2086  # the words are meant to split
        run --separate-stderr timeout 30 "$BIN/gen_synthetic" $args
        echo "args: $args -> status $status: $stderr"
        assert_user_error "gen_synthetic: error:"
    done
    [ ! -e "$T/x.tok" ]
}

@test "gen_synthetic: --help prints usage and exits 0" {
    run timeout 30 "$BIN/gen_synthetic" --help
    [ "$status" -eq 0 ]
    [[ "$output" == *"usage: gen_synthetic"* ]]
}

# ---- text_to_tokens and tokens_info round trip ----------------------------

@test "text_to_tokens: tokens are the input bytes, tokens_info reads them back" {
    printf 'Hello, world.\nCaf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\n' > "$T/in.txt"
    run timeout 30 "$BIN/text_to_tokens" "$T/in.txt" "$T/in.tok"
    [ "$status" -eq 0 ]
    n=$(stat -c %s "$T/in.txt")
    [ "$output" = "tokens=$n" ]
    # Each byte b is stored as the uint16 b, i.e. the bytes b, 0.
    tail -c +33 "$T/in.tok" | od -An -v -tu1 -w2 | awk '{ if ($2 != 0) exit 1; printf "%c", $1 }' > "$T/back.txt"
    cmp "$T/in.txt" "$T/back.txt"

    run timeout 30 "$BIN/tokens_info" --head 5 "$T/in.tok"
    [ "$status" -eq 0 ]
    [[ "$output" == *"path=$T/in.tok"* ]]
    [[ "$output" == *"version=1"* ]]
    [[ "$output" == *"vocab_size=256"* ]]
    [[ "$output" == *"count=$n"* ]]
    [[ "$output" =~ checksum=0x[0-9a-f]{16} ]]
    [[ "$output" == *"head=Hello"* ]]
}

@test "tokens_info: reads a generated corpus (count and vocab)" {
    timeout 30 "$BIN/gen_synthetic" --out "$T/a.tok" --tokens 4321 > /dev/null
    run timeout 30 "$BIN/tokens_info" --head 3 "$T/a.tok"
    [ "$status" -eq 0 ]
    [[ "$output" == *"count=4321"* ]]
    [[ "$output" == *"vocab_size=256"* ]]
    [[ "$output" =~ head=#[0-7]\  ]]
}

@test "text_to_tokens: invalid UTF-8 is rejected with its offset and line, nothing written" {
    # offset 9 on line 2: a stray continuation byte
    printf 'abc\ndefg\x80\n' > "$T/bad1.txt"
    # overlong encoding of '/', a UTF-16 surrogate, a truncated sequence, an
    # invalid byte, and a sequence cut by the end of the file
    printf 'ab\xc0\xaf\n' > "$T/bad2.txt"
    printf 'ab\xed\xa0\x80\n' > "$T/bad3.txt"
    printf 'ab\xe2\x82x\n' > "$T/bad4.txt"
    printf 'ab\xff\n' > "$T/bad5.txt"
    printf 'ab\xf0\x9f\x98' > "$T/bad6.txt"
    run --separate-stderr timeout 30 "$BIN/text_to_tokens" "$T/bad1.txt" "$T/out.tok"
    assert_user_error "byte offset 8, line 2"
    for i in 2 3 4 5 6; do
        run --separate-stderr timeout 30 "$BIN/text_to_tokens" "$T/bad$i.txt" "$T/out.tok"
        echo "bad$i: $stderr"
        assert_user_error "byte offset 2, line 1"
    done
    run --separate-stderr timeout 30 "$BIN/text_to_tokens" "$T/bad2.txt" "$T/out.tok"
    [[ "$stderr" == *"overlong"* ]]
    run --separate-stderr timeout 30 "$BIN/text_to_tokens" "$T/bad3.txt" "$T/out.tok"
    [[ "$stderr" == *"surrogate"* ]]
    [ ! -e "$T/out.tok" ]
    [ -z "$(find "$T" -name 'out.tok*')" ]
}

@test "text_to_tokens: empty and missing inputs are rejected" {
    : > "$T/empty.txt"
    run --separate-stderr timeout 30 "$BIN/text_to_tokens" "$T/empty.txt" "$T/out.tok"
    assert_user_error "empty"
    run --separate-stderr timeout 30 "$BIN/text_to_tokens" "$T/nope.txt" "$T/out.tok"
    assert_user_error "cannot open $T/nope.txt: No such file or directory"
    [ ! -e "$T/out.tok" ]
}

@test "text_to_tokens: an unwritable destination fails cleanly, leaving no temp file" {
    printf 'hi\n' > "$T/in.txt"
    run --separate-stderr timeout 30 "$BIN/text_to_tokens" "$T/in.txt" "$T/no/such/dir/out.tok"
    assert_user_error "No such file or directory"
    [ -z "$(find "$T" -name '*.tmp.*')" ]
}

@test "tokens_save: a failed write keeps the old file and removes the temp file" {
    echo old > "$T/keep.tok"
    # A file-size limit makes write() fail with EFBIG (signal ignored) midway.
    run --separate-stderr bash -c "ulimit -f 10; trap '' XFSZ;
        timeout 30 '$BIN/gen_synthetic' --out '$T/keep.tok' --tokens 100000"
    assert_user_error "cannot save $T/keep.tok"
    [ "$(cat "$T/keep.tok")" = old ]
    [ -z "$(find "$T" -name '*.tmp.*')" ]
}

@test "text_to_tokens and tokens_info: bad arguments exit 2 with one line" {
    printf 'hi\n' > "$T/in.txt"
    for args in "--bogus $T/in.txt $T/o.tok" "$T/in.txt" "" "$T/in.txt $T/o.tok extra"; do
        # shellcheck disable=SC2086
        run --separate-stderr timeout 30 "$BIN/text_to_tokens" $args
        echo "text_to_tokens $args -> $status: $stderr"
        assert_user_error "text_to_tokens: error:"
    done
    make_good
    for args in "--bogus $T/good.tok" "" "--head abc $T/good.tok" "--head -5 $T/good.tok" \
                "$T/good.tok --head" "$T/good.tok $T/good.tok"; do
        # shellcheck disable=SC2086
        run --separate-stderr timeout 30 "$BIN/tokens_info" $args
        echo "tokens_info $args -> $status: $stderr"
        assert_user_error "tokens_info: error:"
    done
    run timeout 30 "$BIN/text_to_tokens" --help
    [ "$status" -eq 0 ]
    run timeout 30 "$BIN/tokens_info" --help
    [ "$status" -eq 0 ]
}

# ---- the loader rejects every kind of bad file ----------------------------

@test "loader: the good file loads (baseline for the corruptions below)" {
    make_good
    run timeout 30 "$BIN/tokens_info" --head 100 "$T/good.tok"
    [ "$status" -eq 0 ]
    [[ "$output" == *"count=6"* ]]
    [[ "$output" == *'head=hello\n'* ]]
}

@test "loader: missing file" {
    assert_rejected "$T/missing.tok" "cannot open $T/missing.tok: No such file or directory"
}

@test "loader: header shorter than 32 bytes, and an empty file" {
    make_good
    head -c 20 "$T/good.tok" > "$T/short.tok"
    assert_rejected "$T/short.tok" "shorter than the 32-byte header"
    : > "$T/empty.tok"
    assert_rejected "$T/empty.tok" "shorter than the 32-byte header"
}

@test "loader: bad magic" {
    make_good
    patch_bytes "$T/good.tok" 0 'NOTATOKN'
    assert_rejected "$T/good.tok" "not a token file"
}

@test "loader: unsupported version" {
    make_good
    patch_bytes "$T/good.tok" 8 '\002\000\000\000'
    assert_rejected "$T/good.tok" "unsupported format version 2 (this build reads version 1)"
}

@test "loader: vocab_size 0 and above 65536" {
    make_good
    patch_bytes "$T/good.tok" 12 '\000\000\000\000'
    assert_rejected "$T/good.tok" "invalid vocab_size 0"
    patch_bytes "$T/good.tok" 12 '\001\000\001\000'
    assert_rejected "$T/good.tok" "invalid vocab_size 65537"
}

@test "loader: truncated payload" {
    make_good
    head -c 40 "$T/good.tok" > "$T/trunc.tok"
    assert_rejected "$T/trunc.tok" "truncated: header says 6 tokens (12 bytes) but file has 8 bytes"
}

@test "loader: a huge count in the header is caught before any allocation" {
    make_good
    patch_bytes "$T/good.tok" 16 '\377\377\377\377\377\377\377\177'
    assert_rejected "$T/good.tok" "truncated: header says 9223372036854775807 tokens"
}

@test "loader: trailing bytes" {
    make_good
    printf 'xyz' >> "$T/good.tok"
    assert_rejected "$T/good.tok" "3 trailing bytes"
}

@test "loader: one flipped payload byte is caught by the checksum" {
    make_good
    patch_bytes "$T/good.tok" 32 'H'     # h -> H in the first token
    assert_rejected "$T/good.tok" "is corrupt"
}

@test "loader: a token not below vocab_size" {
    make_good
    # The checksum covers only the tokens, so shrinking vocab_size to 105
    # keeps it valid: h=104 and e=101 pass, l=108 at index 2 does not.
    patch_bytes "$T/good.tok" 12 '\151\000\000\000'
    assert_rejected "$T/good.tok" "token 108 at index 2, not below vocab_size 105"
}

@test "loader: a directory is not a token file" {
    assert_rejected "$T" "not a regular file"
}

# ---- the English recipe ---------------------------------------------------

@test "english.sh builds a valid corpus from fortunes-min" {
    if [ ! -r /usr/share/games/fortunes/literature ]; then
        skip "fortunes-min not installed"
    fi
    run timeout 30 "$ROOT/datasets/english.sh" "$BIN" "$T/eng"
    [ "$status" -eq 0 ]
    [[ "$output" =~ tokens=([0-9]+)\ path=$T/eng/english.tok ]]
    n=${BASH_REMATCH[1]}
    # fortunes-min holds about 98 KB of text (96751 tokens once cleaned).
    [ "$n" -gt 90000 ]
    run timeout 30 "$BIN/tokens_info" "$T/eng/english.tok"
    [ "$status" -eq 0 ]
    [[ "$output" == *"count=$n"* ]]
    # The separators and the backspace overstrikes are gone.
    run ! grep -q '^%$' "$T/eng/english.txt"
    run ! grep -q $'\b' "$T/eng/english.txt"
}

@test "english.sh: wrong usage exits 2" {
    run timeout 30 "$ROOT/datasets/english.sh" "$BIN"
    [ "$status" -eq 2 ]
}
