#!/usr/bin/env bats
# The communicator (common/comm.h) and the process mesh (common/mesh.h):
# every library collective against a local reference on 1 to 5 ranks, the
# counters and outputs, the mesh's documented rank order, and clear errors.
load helpers

@test "comm: every library op, dtype and reduction, in and out of place, 1 to 5 ranks" {
    for np in 1 2 3 4 5; do
        run mpirun_t 120 "$np" "$BUILD/tests/test_comm"
        echo "np=$np: $output"
        [ "$status" -eq 0 ]
        [[ "$output" == *"test_comm: "*" checks, 0 failed"* ]]
    done
}

@test "comm: comm.csv has a row per rank, group and op; the traces are well-formed" {
    run mpirun_t 120 3 "$BUILD/tests/test_comm" "$BATS_TEST_TMPDIR"
    [ "$status" -eq 0 ]
    csv="$BATS_TEST_TMPDIR/comm.csv"
    [ "$(head -n 1 "$csv")" = "rank,group,op,calls,bytes,seconds" ]
    # the counted allreduces: 3 calls of 1000 floats on every rank
    for r in 0 1 2; do
        grep -q "^$r,world,allreduce,3,12000," "$csv"
        grep -q "^$r,half,reduce_scatter,1,4000," "$csv"
    done
    python3 -m json.tool "$BATS_TEST_TMPDIR/trace.json" > /dev/null
    # one process per rank, named "rank R" (pid R + 1: viewers take 0 for none), named threads
    run python3 - "$BATS_TEST_TMPDIR/trace.json" <<'PY'
import json, sys
e = json.load(open(sys.argv[1]))["traceEvents"]
spans = [x for x in e if x["ph"] == "X"]
names = {x["pid"]: x["args"]["name"] for x in e if x["name"] == "process_name"}
threads = {(x["pid"], x["tid"]): x["args"]["name"] for x in e if x["name"] == "thread_name"}
assert all(x["dur"] >= 0 and (x["pid"], x["tid"]) in threads for x in spans)
assert all(threads[x["pid"], x["tid"]] == ("communication" if x["cat"] == "comm" else "compute")
           for x in spans)
print(sorted({x["pid"] for x in spans}), names)
PY
    echo "$output"
    [ "$output" = "[1, 2, 3] {1: 'rank 0', 2: 'rank 1', 3: 'rank 2'}" ]
    [ "$(head -n 1 "$BATS_TEST_TMPDIR/trace.csv")" = "rank,category,name,group,start_s,end_s,bytes" ]
    [ "$(cut -d, -f1 "$BATS_TEST_TMPDIR/trace.csv" | sort -u | tr '\n' ' ')" = "0 1 2 rank " ]
}

@test "mesh: coordinates and groups follow the documented order, or another given one (world sizes 1 to 8)" {
    while read -r np degrees; do
        # shellcheck disable=SC2086  # degrees is a list of flags
        run mpirun_t 60 "$np" "$BUILD/tests/test_mesh" $degrees
        echo "np=$np $degrees: $output"
        [ "$status" -eq 0 ]
        [[ "$output" == *"0 failed"* ]]
    done <<'LAYOUTS'
1
2 --tp 2
3 --dp 3
4 --tp 2
4 --pp 2 --tp 2
5 --pp 5
6 --tp 3 --pp 2
6 --tp 2 --cp 3
7 --dp 7
8 --tp 2 --pp 2
8 --tp 2 --cp 2 --dp 1 --pp 2
8 --ep 2 --tp 2
8 --dp 4 --ep 4 --pp 2
4 --tp 2 --order dp-tp-cp-pp
8 --tp 2 --cp 2 --pp 2 --order pp-cp-tp-dp
8 --dp 4 --ep 2 --tp 2 --order dp-pp-cp-tp
LAYOUTS
}

@test "mesh: an impossible layout is one clear error from rank 0, exit 2" {
    while read -r np degrees; do
        # shellcheck disable=SC2086
        run mpirun_t 60 "$np" "$BUILD/tests/test_mesh" $degrees
        echo "np=$np $degrees: $output"
        assert_user_error
    done <<'LAYOUTS'
8 --tp 3
4 --tp 2 --dp 3
4 --dp 4 --ep 3
2 --tp 0
2 --pp -1
2 --tp x
2 --tp 2 --order tp-cp-dp
2 --tp 2 --order tp-tp-dp-pp
2 --tp 2 --order tp-cp-dp-pp-
LAYOUTS
}

@test "comm: a fatal error on one rank ends the whole job (no rank left waiting)" {
    run mpirun_t 60 3 "$BUILD/tests/test_comm" --fatal-on-last-rank
    echo "$output"
    [ "$status" -ne 0 ]
    [ "$status" -ne 124 ]   # not the timeout
    [[ "$output" == *"fatal: "*"planted failure on rank 2"* ]]
    ! pgrep -f "test_comm --fatal-on-last-rank" || return 1
}

@test "comm: an MPI error is fatal with the call and the line (status 1, not a user error's 2)" {
    run mpirun_t 60 3 "$BUILD/tests/test_comm" --mpi-error-on-last-rank
    echo "$output"
    [ "$status" -eq 1 ]
    [[ "$output" == *"fatal: tests/c/test_comm.c:"*"MPI_Send("*") failed: MPI_ERR_COUNT"* ]]
}

@test "comm: misuse is fatal: a count over INT_MAX, overlapping buffers, two in-place reduce-scatters" {
    for planted in "--count-over-int-max:over MPI's int count limit" \
                   "--overlapping-buffers:send and receive buffers overlap" \
                   "--two-in-place-reduce-scatters:already in flight"; do
        run mpirun_t 60 2 "$BUILD/tests/test_comm" "${planted%%:*}"
        echo "$planted: $output"
        [ "$status" -eq 1 ]
        [[ "$output" == *"fatal: "*"${planted#*:}"* ]]
    done
}

@test "comm: not implemented under MPI is one line and status 3, on every rank or on one only" {
    # one rank only: the others wait in a barrier; the job must still end
    for planted in --not-implemented --not-implemented-on-last-rank; do
        run mpirun_t 60 4 "$BUILD/tests/test_comm" "$planted"
        echo "$planted: $output"
        [ "$status" -eq 3 ]
        [ "$(grep -c 'not implemented: ' <<<"$output")" -eq 1 ]
        [[ "$output" != *"fatal"* ]]
    done
}

@test "comm: a user error under MPI is one line from rank 0, status 2; mpirun -q adds nothing" {
    run mpirun_t 60 5 "$BUILD/tests/test_comm" --user-error
    echo "$output"
    assert_user_error
    # mpirun's own notice about the non-zero exit is what -q turns off
    export OMPI_MCA_orte_execute_quiet=1
    run mpirun_t 60 5 "$BUILD/tests/test_comm" --user-error
    [ "$status" -eq 2 ]
    [ "$output" = "test_comm: error: planted user error" ]
}
