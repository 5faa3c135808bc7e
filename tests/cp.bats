#!/usr/bin/env bats
# Lab 07, context parallelism: train_cp with ring, zigzag, Ulysses and
# striped attention on 2 and 4 ranks, and composed with DP (dp 2 x cp 2) and
# TP (tp 2 x cp 2), follows the single-device run of the same batch
# (losses within the grader's tolerance, gathered parameters within 1e-5);
# every rank's memory equals the planner's prediction and the CP traffic
# (ring sends, all-to-alls, loss all-reduces) its formula; the ranks'
# copies of the model agree; cp_balance.csv shows the causal imbalance of
# contiguous chunks and its repair by zigzag and striping, pair for pair;
# bad input is one clear error; the untouched skeleton stops at its first
# TODO. And the C tests: the block kernels against lab 00's attention on
# one process, the lab's ring attention and Ulysses on 2, 3 and 4 ranks.
load helpers

CP="$BUILD/solutions/07_context_parallel/train_cp"
COMMON=(--config tiny --steps 6 --eval-every 100 --threads 1)

setup_file() {
    export BASE="$BATS_FILE_TMPDIR/base"
    have_solution 00 || return 0   # a handout without it: the tests that need it skip
    t 120 "$BUILD/solutions/00_single_device/train_gpt" "${COMMON[@]}" \
        --out "$BASE" --dump-params "$BASE/params.bin" > /dev/null
}

# cp_run DIR NP FLAGS...: train_cp on NP ranks into DIR, dumping params
cp_run() {
    local out=$1 np=$2
    shift 2
    mpirun_t 240 "$np" "$CP" "${COMMON[@]}" "$@" --out "$out" --dump-params "$out/params.bin"
}

# cp_cases NP "FLAGS"...: each run follows the single-device run, memory
# and CP traffic are the planner's, every rank holds the same model
cp_cases() {
    local np=$1 flags out
    shift
    for flags in "$@"; do
        out="$BATS_TEST_TMPDIR/cp-$np-${flags// /_}"
        # shellcheck disable=SC2086  # flags is a list
        run cp_run "$out" "$np" $flags
        [ "$status" -eq 0 ] || { echo "$flags: $output"; return 1; }
        [[ "$output" != *DIFFERENT* ]] || { echo "$flags: $output"; return 1; }
        # the six memory categories, and at least one CP traffic line
        [ "$(grep -cE '^  [a-z]+ +predicted +[0-9]+ +measured +[0-9]+ +ok$' <<<"$output")" -eq 6 ] ||
            { echo "$flags: no memory check: $output"; return 1; }
        grep -qE '^train_cp: CP .* per rank, predicted vs measured: .* ok$' <<<"$output" ||
            { echo "$flags: no traffic check: $output"; return 1; }
        [ "$(tail -n +2 "$out/params_checksum.csv" | wc -l)" -eq "$np" ] ||
            { echo "$flags: not every rank wrote its checksum"; return 1; }
        follows_base "$BASE" "$out" "$flags"
    done
}

@test "unit: the block kernels under each placement merge into lab 00's attention (out, lse, dq, dk, dv); lse merge, placements, pair counts, copy_strided" {
    require_solution 00  # the reference is lab 00's attention_backward
    run t 60 "$BUILD/tests/test_cp_kernels"
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"test_cp_kernels: "*" checks, 0 failed"* ]]
}

@test "unit: the lab's ring attention (contiguous, zigzag, striped) and Ulysses on 2, 3, 4 ranks equal the whole sequence's attention and pass finite differences" {
    require_solution 00 07  # lab 00's attention is the reference
    for np in 2 3 4; do
        run mpirun_t 120 "$np" "$BUILD/solutions/07_context_parallel/check_ring_attention"
        echo "$np ranks: $output"
        [ "$status" -eq 0 ]
        [[ "$output" == *"check_ring_attention: "*" checks, 0 failed"* ]]
    done
}

@test "cp: 2 ranks, ring, zigzag, Ulysses and striped follow the single-device run" {
    require_solution 00 02 07
    cd "$ROOT"
    cp_cases 2 "--cp 2 --cp-algo ring" "--cp 2 --cp-algo zigzag" "--cp 2 --cp-algo ulysses" \
        "--cp 2 --cp-algo striped"
}

@test "cp: 4 ranks, ring, zigzag, Ulysses and striped follow the single-device run" {
    require_solution 00 02 07
    cd "$ROOT"
    cp_cases 4 "--cp 4 --cp-algo ring" "--cp 4 --cp-algo zigzag" "--cp 4 --cp-algo ulysses" \
        "--cp 4 --cp-algo striped"
}

@test "cp: dp 2 x cp 2 and tp 2 x cp 2 (ring, zigzag, Ulysses) follow the single-device run" {
    require_solution 00 02 04 07
    cd "$ROOT"
    cp_cases 4 "--cp 2 --cp-algo zigzag" "--cp 2 --tp 2 --cp-algo ring" \
        "--cp 2 --tp 2 --cp-algo zigzag" "--cp 2 --tp 2 --cp-algo ulysses"
}

# balance_check DIR ALGO CP SEQ: each rank's block_pairs in DIR/cp_balance.csv
# is a fixed multiple K (batch x heads x layers x passes) of the causal
# pairs its placement gives it, per head and sequence, with n = SEQ / CP:
#   contiguous: rank r's chunk sees r earlier chunks whole and itself
#               causally: n (n + 1) / 2 + r n^2 (grows with r);
#   zigzag:     chunks r and 2 cp - 1 - r of c = n / 2: 2 cp - 1 chunks whole
#               and two causal, (2 cp - 1) c^2 + c (c + 1), whatever r;
#   striped:    causal blocks from ranks <= r, strictly causal from the
#               others: (r + 1) n (n + 1) / 2 + (cp - 1 - r) n (n - 1) / 2.
# Integers throughout: the ratio must hold exactly.
balance_check() {
    awk -F, -v algo="$2" -v cp="$3" -v seq="$4" '
        NR == 1 { next }
        { pairs[$2] = $4; n_rows++; if ($3 != algo) bad = "algo column " $3 }
        function want(r,   n, c) {
            n = seq / cp; c = n / 2
            if (algo == "ring") return n * (n + 1) / 2 + r * n * n
            if (algo == "zigzag") return (2 * cp - 1) * c * c + c * (c + 1)
            return (r + 1) * n * (n + 1) / 2 + (cp - 1 - r) * n * (n - 1) / 2
        }
        END {
            if (bad != "") { print bad; exit 1 }
            if (n_rows != cp) { print n_rows " rows, want " cp; exit 1 }
            k = pairs[0] / want(0)
            if (k < 1 || k != int(k)) { print "rank 0: " pairs[0] " pairs, not a multiple of " want(0); exit 1 }
            for (r = 0; r < cp; r++)
                if (pairs[r] != k * want(r)) {
                    print "cp rank " r ": " pairs[r] " pairs, want " k " x " want(r) " = " k * want(r); exit 1
                }
        }' "$1/cp_balance.csv"
}

@test "cp: the causal balance: contiguous ring's pairs grow with the rank, zigzag's are equal, striped's nearly, as the placements predict" {
    require_solution 07
    cd "$ROOT"
    for algo in ring zigzag striped; do
        out="$BATS_TEST_TMPDIR/bal-$algo"
        run mpirun_t 240 4 "$CP" "${COMMON[@]}" --steps 2 --cp 4 --cp-algo "$algo" --out "$out"
        [ "$status" -eq 0 ] || { echo "$output"; false; }
        head -1 "$out/cp_balance.csv" | grep -qx 'rank,cp_rank,algo,block_pairs,block_seconds,attention_seconds'
        run balance_check "$out" "$algo" 4 64
        echo "$algo: $output"
        cat "$out/cp_balance.csv"
        [ "$status" -eq 0 ]
    done
    col() { tail -n +2 "$BATS_TEST_TMPDIR/bal-$1/cp_balance.csv" | sort -t, -k2n | cut -d, -f4; }
    # contiguous: strictly increasing with cp_rank; zigzag: all equal
    [ "$(col ring | sort -n -u | wc -l)" -eq 4 ]
    [ "$(col ring)" = "$(col ring | sort -n)" ]
    [ "$(col zigzag | sort -u | wc -l)" -eq 1 ]
    # striped: nearly equal, a spread of (cp - 1) n pairs against
    # contiguous's (cp - 1) n^2 (n = 16 here): under a tenth of it
    spread() { col "$1" | sort -n | awk 'NR == 1 { lo = $1 } END { print $1 - lo }'; }
    [ "$(spread striped)" -gt 0 ]
    [ "$(( 10 * $(spread striped) ))" -lt "$(spread ring)" ]
}

@test "cp: bad degrees, lengths and algorithms are one clear error, and write nothing" {
    require_solution 07
    cd "$ROOT"
    local bad=(--out "$BATS_TEST_TMPDIR/bad")
    # zigzag cuts each sequence into 2 cp chunks: 62 splits in 2, not in 4
    run mpirun_t 60 2 "$CP" "${COMMON[@]}" --cp 2 --cp-algo ring --seq 62 --steps 1 \
        --out "$BATS_TEST_TMPDIR/ring62"
    [ "$status" -eq 0 ] || { echo "$output"; false; }
    run mpirun_t 60 2 "$CP" "${COMMON[@]}" "${bad[@]}" --cp 2 --cp-algo zigzag --seq 62
    assert_user_error
    [[ "$output" == *"2 x --cp = 4 chunks: --seq 62 must be a multiple of 4"* ]]
    run mpirun_t 60 2 "$CP" "${COMMON[@]}" "${bad[@]}" --cp 2 --seq 63
    assert_user_error
    [[ "$output" == *"--seq 63 must be a multiple of 2"* ]]
    # tiny's 4 heads over tp 2: 2 per TP rank, which cp 4 does not divide
    # (8 ranks: the mesh itself would fit)
    run mpirun_t 60 8 "$CP" "${COMMON[@]}" "${bad[@]}" --cp 4 --tp 2 --cp-algo ulysses
    assert_user_error
    [[ "$output" == *"the 2 heads of a tensor-parallel rank (n_head 4 / --tp 2) must divide by --cp"* ]]
    run mpirun_t 60 3 "$CP" "${COMMON[@]}" "${bad[@]}" --cp 2
    assert_user_error
    [[ "$output" == *"does not divide the world size 3"* ]]
    run mpirun_t 60 6 "$CP" "${COMMON[@]}" "${bad[@]}" --cp 2 --tp 2
    assert_user_error
    [[ "$output" == *"tp 2 x cp 2 x pp 1 = 4 does not divide the world size 6"* ]]
    run mpirun_t 60 2 "$CP" "${COMMON[@]}" "${bad[@]}" --cp 2 --cp-algo hybrid
    assert_user_error
    [[ "$output" == *"--cp-algo expects ring, zigzag, ulysses or striped, got 'hybrid'"* ]]
    run mpirun_t 60 2 "$CP" "${COMMON[@]}" "${bad[@]}" --cp 0
    assert_user_error
    [[ "$output" == *"--cp expects an integer"*"got '0'"* ]]
    [ ! -e "$BATS_TEST_TMPDIR/bad" ]
}

@test "cp: the untouched skeleton stops cleanly at its first TODO with each algorithm" {
    require_solution 00 02 04  # the skeleton runs on the earlier labs' solutions
    require_untouched 07
    for algo in ring zigzag striped ulysses; do
        run mpirun_t 120 2 "$BUILD/labs/07_context_parallel/train_cp" "${COMMON[@]}" --steps 2 \
            --cp 2 --cp-algo "$algo" --out "$BATS_TEST_TMPDIR/sk-$algo"
        echo "$algo: $output"
        [ "$status" -eq 3 ]
        [[ "$output" == *"not implemented: "*"_attention_forward (labs/07_context_parallel/"*"this is your task in the lab"* ]]
        [ "$(grep -c 'not implemented' <<<"$output")" -eq 1 ]
        [[ "$output" != *"fatal"* ]]
    done
}
