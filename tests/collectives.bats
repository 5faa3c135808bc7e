#!/usr/bin/env bats
# Lab 01: the collectives built from point-to-point messages are right to the
# bit on any rank count (apps/check_collectives.c says what it compares), the
# checker catches planted bugs, the untouched skeleton stops cleanly, and the
# benchmark writes its table, CSV and chart.
load helpers

SOL01="$BUILD/solutions/01_collectives"
LAB01="$BUILD/labs/01_collectives"

# checker_passes IMPL NP: every op and case ok on NP ranks
checker_passes() {
    require_solution 01
    run mpirun_t 300 "$2" "$SOL01/check_collectives" --impl "$1"
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"$1 implementation on $2 rank"* ]]
    [[ "$output" == *"all "*" cases pass"* ]]
    [[ "$output" != *"FAIL"* ]]
    for op in reduce_scatter allgather allreduce broadcast tree_allreduce alltoall; do
        [[ "$output" == *"$op "*"n=262147"*"ok"* ]]
    done
    # the extension runs only by name: the core grades without it
    [[ "$output" != *"halving_allreduce"* ]]
}

@test "collectives: the solution passes the checker on 1 rank" { checker_passes student 1; }
@test "collectives: the solution passes the checker on 2 ranks" { checker_passes student 2; }
@test "collectives: the solution passes the checker on 3 ranks" { checker_passes student 3; }
@test "collectives: the solution passes the checker on 4 ranks" { checker_passes student 4; }
@test "collectives: the solution passes the checker on 5 ranks" { checker_passes student 5; }
@test "collectives: the library passes the same checker on 1 rank" { checker_passes library 1; }
@test "collectives: the library passes the same checker on 3 ranks" { checker_passes library 3; }
@test "collectives: the library passes the same checker on 4 ranks" { checker_passes library 4; }

@test "collectives: --op runs one op's cases, in place and out of place" {
    require_solution 01
    run mpirun_t 120 3 "$SOL01/check_collectives" --op allgather
    echo "$output"
    [ "$status" -eq 0 ]
    [ "$(printf '%s\n' "$output" | grep -c '^allgather .* ok$')" -eq 16 ]
    [[ "$output" != *"allreduce"* ]]
}

# The extension, Rabenseifner's all-reduce: every count (0, n < p, uneven,
# large), in and out of place, bit for bit, and each rank's bytes against
# the README's formula, the fold's terms included (3, 5, 6, 7 ranks).
@test "collectives: halving-doubling all-reduce is right to the bit and to the byte on 1 to 8 ranks" {
    require_solution 01
    local np cases
    for np in 1 2 3 4 5 6 7 8; do
        run mpirun_t 120 "$np" "$SOL01/check_collectives" --op halving_allreduce
        echo "$np ranks: ${output##*$'\n'}"
        [ "$status" -eq 0 ]
        [[ "$output" != *"FAIL"* ]]
        # counts 0, 1, p-1, p, p+1, 1000, 4099, 262147 (fewer where they coincide), 2 variants each
        cases=$(( np == 1 ? 12 : np == 2 ? 14 : 16 ))
        [ "$(printf '%s\n' "$output" | grep -cE '^halving_allreduce +n=[0-9]+ +(in place|out of place) +ok$')" -eq "$cases" ]
        [[ "$output" == *"halving_allreduce n=$((np - 1)) "*"in place      ok"* ]]
    done
}

@test "collectives: hierarchical all-reduce is right to the bit and to the byte on simulated nodes" {
    require_solution 01
    local spec np k
    # ranks:ranks-per-node: 2 x 2, 2 x 3, 3 x 2, 4 x 1, 1 x 5 (one node: the flat ring)
    for spec in 4:2 6:3 6:2 4:1 5:5; do
        np=${spec%:*} k=${spec#*:}
        run mpirun_t 120 "$np" "$SOL01/check_collectives" --op hierarchical_allreduce --ranks-per-node "$k"
        echo "$spec: ${output##*$'\n'}"
        [ "$status" -eq 0 ]
        [[ "$output" == *"on $np ranks, $((np / k)) node"*" of $k"* ]]
        [ "$(printf '%s\n' "$output" | grep -cE '^hierarchical_allreduce +n=[0-9]+ +(in place|out of place) +ok$')" -eq 16 ]
    done
    # without --ranks-per-node, the machine's nodes: here one node of all the ranks
    run mpirun_t 120 3 "$SOL01/check_collectives" --op hierarchical_allreduce
    [ "$status" -eq 0 ]
    [[ "$output" == *"1 node of 3"* ]]
}

@test "checker's byte counters catch a hierarchical all-reduce that sends the whole buffer across nodes" {
    # right sums (the all-gather overwrites what the whole-buffer sum got
    # wrong), k times the bytes on the slow links: only the counters see it
    mutant_fails 's|    ring_allreduce(across, shard, shard, count);|    ring_allreduce(across, recv, recv, n + 0 * count);|' \
        hierarchical_allreduce 4 --ranks-per-node 2
    [[ "$output" == *"sent "*" bytes, the schedule sends "* ]]
    [[ "$output" != *"want"* ]]
}

@test "checker catches a hierarchical all-reduce whose all-gather comes before the sum across nodes" {
    mutant_fails '/^void hierarchical_allreduce/,/^}/{/ring_allreduce(across/d;s|    ring_allgather(node, shard, recv, n);|&\n    ring_allreduce(across, shard, shard, count);|}' \
        hierarchical_allreduce 4 --ranks-per-node 2
    [[ "$output" == *"want"* ]]
}

@test "collectives: the untouched skeleton says not implemented (exit 3) without hanging" {
    require_untouched 01
    run mpirun_t 60 2 "$LAB01/check_collectives"
    echo "$output"
    [ "$status" -eq 3 ]
    [[ "$output" == *"not implemented: ring_reduce_scatter"* ]]
    run mpirun_t 60 3 "$LAB01/check_collectives" --op broadcast
    [ "$status" -eq 3 ]
    [[ "$output" == *"not implemented: tree_broadcast"* ]]
    run mpirun_t 60 3 "$LAB01/check_collectives" --op halving_allreduce
    [ "$status" -eq 3 ]
    [[ "$output" == *"not implemented: halving_doubling_allreduce"* ]]
    run mpirun_t 60 2 "$LAB01/bench_collectives" --max-bytes 4K --out "$BATS_TEST_TMPDIR/skel"
    [ "$status" -eq 3 ]
    [[ "$output" == *"not implemented: ring_allreduce"* ]]
}

# Planted bugs: mutant_fails SED_EXPR OP NP [ARGS...] builds the checker from
# the solution edited by SED_EXPR and expects OP to fail on NP ranks.
mutant_fails() {
    local expr=$1 op=$2 np=$3 src="$BATS_TEST_TMPDIR/collectives.c" dir="$BATS_TEST_TMPDIR/mutant"
    require_solution 01
    sed "$expr" "$ROOT/solutions/01_collectives/collectives.c" > "$src"
    ! cmp -s "$src" "$ROOT/solutions/01_collectives/collectives.c" || return 1
    build_variant "$src" 01_collectives "$dir" check_collectives
    run mpirun_t 120 "$np" "$dir/check_collectives" --op "$op" "${@:4}"
    echo "$output"
    [ "$status" -eq 1 ]
    [[ "$output" == *"FAIL"* ]]
}

@test "checker catches a ring reduce-scatter that adds its own data of the wrong chunk" {
    mutant_fails 's/add_floats(sum, incoming, send + shard_offset(n, p, in)/add_floats(sum, incoming, send + shard_offset(n, p, out)/' allreduce 4
}

@test "checker catches a ring all-gather that stops one step early" {
    mutant_fails '/^void ring_allgather/,/^}/s/s < p - 1/s < p - 2/' allgather 3
}

@test "checker catches recursive doubling without the fold, on 3 ranks (4 ranks hide it)" {
    local expr='0,/add_floats(recv, send, incoming, n);/s//(void)0;/'
    mutant_fails "$expr" tree_allreduce 3
    run mpirun_t 120 4 "$BATS_TEST_TMPDIR/mutant/check_collectives" --op tree_allreduce
    [ "$status" -eq 0 ]
}

@test "checker's byte counters catch a ring all-reduce that is really recursive doubling" {
    # right values, wrong traffic: only the counters can see it
    mutant_fails 's/ring_reduce_scatter(c, send, own, n);/tree_allreduce(c, send, recv, n);\n    return;/' allreduce 4
    [[ "$output" == *"sent "*" bytes, the schedule sends "* ]]
    [[ "$output" != *"want"* ]]
}

# halving_doubling_allreduce's lines, for the mutants below
HALVING='/^void halving_doubling_allreduce/,/^}/'

@test "checker catches a halving-doubling all-gather that takes its partners in the halving order" {
    mutant_fails "${HALVING}s|for (int d = 1; v >= 0 \&\& d < q; d \*= 2)|for (int d = q / 2; v >= 0 \&\& d >= 1; d /= 2)|" \
        halving_allreduce 4
    [[ "$output" == *"want"* ]]
}

@test "checker's byte counters catch a halving-doubling all-reduce that is really recursive doubling" {
    mutant_fails "${HALVING}s|^    const Fold f = fold_in(c, send, recv, n);|    tree_allreduce(c, send, recv, n);\n    return;\n&|" \
        halving_allreduce 4
    [[ "$output" == *"sent "*" bytes, the schedule sends "* ]]
    [[ "$output" != *"want"* ]]
}

# Right sums, and nearly the right traffic: the ring's all-gather after the
# halving (the same shards on 4 ranks) sends n - count(r+1), the doubling's
# G_0 + G_1; they differ by an element or two where shards are uneven.
@test "checker's byte counts are exact: halving, then the ring's all-gather, fails on 4 ranks" {
    mutant_fails "${HALVING}s|    for (int d = 1; v >= 0 \&\& d < q; d \*= 2) {|    ring_allgather(c, recv + segment(n, q, v, 1).offset, recv, n);\n    for (int d = 1; 0; d *= 2) {|" \
        halving_allreduce 4
    [[ "$output" == *"n=1 "*"sent "*" bytes, the schedule sends "* ]]
    [[ "$output" != *"want"* ]]
}

@test "checker catches a broadcast that always starts from rank 0" {
    mutant_fails 's/const int p = c->size, v = wrap(c->rank - root, p);/const int p = c->size, v = c->rank;\n    root = 0;/' broadcast 3
    [[ "$output" == *"root 0 "*"ok"* ]]
    [[ "$output" == *"root p-1 "*"FAIL"* ]]
}

@test "bench: a tiny sweep on 2 ranks prints the columns, writes busbw.csv, run.json and the chart" {
    require_solution 01
    local out="$BATS_TEST_TMPDIR/bench"
    run mpirun_t 120 2 "$SOL01/bench_collectives" --op allreduce --impl both --min-bytes 1K \
        --max-bytes 8K --warmup 1 --iters 3 --out "$out"
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"size_bytes"*"count"*"impl"*"time_us"*"algbw_GBps"*"busbw_GBps"* ]]
    [[ "$output" == *"memcpy ceiling"*"GB/s"* ]]
    [[ "$output" == *"student: alpha = "*" us, 1/beta = "*" GB/s"* ]]
    [ "$(head -n 1 "$out/busbw.csv")" = "size_bytes,count,impl,time_us,algbw_GBps,busbw_GBps,busbw_lo_GBps,busbw_hi_GBps" ]
    # the median block between the slowest and the fastest
    awk -F, 'NR > 1 && !($7 <= $6 && $6 <= $8) { bad = 1 } END { exit bad }' "$out/busbw.csv"
    # 4 sizes (1K, 2K, 4K, 8K) x 2 implementations
    [ "$(tail -n +2 "$out/busbw.csv" | wc -l)" -eq 8 ]
    for size in 1024 2048 4096 8192; do
        for impl in student library; do
            grep -q "^$size,$((size / 4)),$impl," "$out/busbw.csv"
        done
    done
    # all-reduce on 2 ranks: busbw = algbw * 2(p-1)/p = algbw
    [ "$(csv_col "$out/busbw.csv" algbw_GBps 0)" = "$(csv_col "$out/busbw.csv" busbw_GBps 0)" ]
    grep -q '"memcpy_GBps"' "$out/run.json"
    grep -q '"student_inv_beta_GBps"' "$out/run.json"
    run t 60 bash "$ROOT/tools/plot_busbw.sh" "$out"
    [ "$status" -eq 0 ]
    [ -s "$out/busbw.png" ]
}

@test "bench: busbw factors of reduce-scatter and broadcast on 4 ranks" {
    require_solution 01
    local out="$BATS_TEST_TMPDIR/rs"
    run mpirun_t 120 4 "$SOL01/bench_collectives" --op reduce_scatter --impl student \
        --min-bytes 4K --max-bytes 4K --iters 2 --out "$out"
    [ "$status" -eq 0 ]
    awk -F, 'NR == 2 { r = $6 / $5; exit !(r > 0.749 && r < 0.751) }' "$out/busbw.csv"
    run mpirun_t 120 4 "$SOL01/bench_collectives" --op broadcast --impl library \
        --min-bytes 4K --max-bytes 4K --iters 2 --out "$out"
    [ "$status" -eq 0 ]
    awk -F, 'NR == 2 { exit !($5 == $6) }' "$out/busbw.csv"
    [ "$(tail -n +2 "$out/busbw.csv" | cut -d, -f3)" = library ]
}

@test "bench: halving_allreduce on 4 ranks: the all-reduce's busbw factor and its own alpha-beta fit" {
    require_solution 01
    local out="$BATS_TEST_TMPDIR/hd"
    run mpirun_t 120 4 "$SOL01/bench_collectives" --op halving_allreduce --impl student \
        --min-bytes 4K --max-bytes 16K --iters 2 --out "$out"
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"student = halving_doubling_allreduce"* ]]
    [[ "$output" == *"alpha-beta fit, t = 2 log2(p) alpha + 2(p-1)/p S beta"* ]]
    [[ "$output" == *"student: alpha = "*" us, 1/beta = "*" GB/s"* ]]
    [ "$(tail -n +2 "$out/busbw.csv" | wc -l)" -eq 3 ]
    awk -F, 'NR == 2 { r = $6 / $5; exit !(r > 1.499 && r < 1.501) }' "$out/busbw.csv"
    grep -q '"op": "halving_allreduce"' "$out/run.json"
}

@test "bench: hierarchical_allreduce on 2 simulated nodes of 2: its nodes, form and fit in run.json" {
    require_solution 01
    local out="$BATS_TEST_TMPDIR/hier"
    run mpirun_t 120 4 "$SOL01/bench_collectives" --op hierarchical_allreduce --ranks-per-node 2 \
        --min-bytes 4K --max-bytes 16K --iters 2 --out "$out"
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"nodes: 2 of 2 ranks each"* ]]
    [[ "$output" == *"alpha-beta fit, t = 2(k-1) (alpha + S/k beta) + 2(N-1) (alpha + S/(kN) beta)"* ]]
    [ "$(tail -n +2 "$out/busbw.csv" | wc -l)" -eq 6 ]
    grep -q '"nodes": 2,' "$out/run.json"
    grep -q '"ranks_per_node": 2,' "$out/run.json"
    grep -q '"student_inv_beta_GBps"' "$out/run.json"
}

@test "collectives: bad flags are one clear error, exit 2" {
    require_solution 01
    run mpirun_t 60 2 "$SOL01/check_collectives" --op allreduse
    assert_user_error
    run mpirun_t 60 2 "$SOL01/check_collectives" --impl nccl
    assert_user_error
    run mpirun_t 60 2 "$SOL01/bench_collectives" --max-bytes 64Q
    assert_user_error
    run mpirun_t 60 2 "$SOL01/bench_collectives" --min-bytes 1M --max-bytes 1K
    assert_user_error
    run mpirun_t 60 2 "$SOL01/bench_collectives" --iters 0
    assert_user_error
    run mpirun_t 60 2 "$SOL01/bench_collectives" --op gather
    assert_user_error
    # nodes that do not pair up, and --ranks-per-node for another op
    run mpirun_t 60 6 "$SOL01/check_collectives" --op hierarchical_allreduce --ranks-per-node 4
    assert_user_error
    [[ "$output" == *"--ranks-per-node 4 does not divide the 6 ranks"* ]]
    run mpirun_t 60 2 "$SOL01/check_collectives" --op allreduce --ranks-per-node 1
    assert_user_error
    run mpirun_t 60 4 "$SOL01/bench_collectives" --op allreduce --ranks-per-node 2
    assert_user_error
    run mpirun_t 60 4 "$SOL01/bench_collectives" --op hierarchical_allreduce --ranks-per-node 0
    assert_user_error
}
