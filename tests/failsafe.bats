#!/usr/bin/env bats
# Runs that fail safely: output paths checked before any work and never
# destroyed (common/fileio.h), memory that cannot fit refused up front
# (common/preflight.h), a frozen, deadlocked or dead rank noticed and named
# (common/watchdog.h). Every program runs under a timeout; the fault tests
# also check that no rank is left behind.
load helpers

TINY=(--config tiny --steps 3 --eval-every 0 --threads 1)

# ranks_of DIR: pids of the ranks (not mpirun, not timeout) whose command
# line names DIR
ranks_of() {
    ps -eo pid=,comm=,args= | awk -v d="$1" '$2 ~ /^train_|^check_/ && index($0, d) { print $1 }'
}

# wait_for_steps FILE N: until FILE (metrics.csv) has N data rows (30 s at most)
wait_for_steps() {
    for _ in $(seq 300); do
        [ -f "$1" ] && [ "$(($(wc -l < "$1") - 1))" -ge "$2" ] && return 0
        sleep 0.1
    done
    echo "no $2 steps in $1" >&2
    return 1
}

# start_job OUT NP PROGRAM ARGS...: PROGRAM on NP ranks in the background
# (log in OUT.log), until it has done 3 steps; sets job
start_job() {
    local out=$1 np=$2
    shift 2
    mpirun_t 120 "$np" "$@" --steps 100000 --threads 1 --eval-every 0 --out "$out" \
        > "$out.log" 2>&1 &
    job=$!
    wait_for_steps "$out/metrics.csv" 3
}

# end_job OUT: waits for the job; sets status (its exit status) and took
# (seconds since the call), prints the log, and checks that no rank is left
end_job() {
    local start=$SECONDS
    status=0
    wait "$job" || status=$?
    took=$((SECONDS - start))
    cat "$1.log"
    echo "status $status after $took s"
    [ -z "$(ranks_of "$1")" ]
}

# rank_pid OUT N: the pid of world rank N of the job writing into OUT
rank_pid() {
    local pid
    for pid in $(ranks_of "$1"); do
        tr '\0' '\n' < "/proc/$pid/environ" | grep -qx "OMPI_COMM_WORLD_RANK=$2" && echo "$pid" && return
    done
    echo "no rank $2 writes into $1" >&2
    return 1
}

# one_report OUT PATTERN: OUT.log holds one line saying why the job failed
# (whichever rank said it), and it matches PATTERN (grep -E)
one_report() {
    local reports
    reports=$(tr '\r' '\n' < "$1.log" | grep -oE "[a-z_0-9]+: (comm timeout|fatal|ended|error): .*")
    echo "reports: $reports"
    [ "$(grep -c . <<<"$reports")" -eq 1 ]
    grep -qE "$2" <<<"$reports"
}

# fault_run OUT SIGNAL NTH PROGRAM ARGS...: PROGRAM on 3 ranks; after 3
# steps, SIGNAL to the NTH rank. Sets victim (its pid), status and took
# (seconds from the signal to the end of the job), and prints the log.
fault_run() {
    local out=$1 sig=$2 nth=$3
    shift 3
    start_job "$out" 3 "$@" --config tiny --batch 12
    victim=$(ranks_of "$out" | sed -n "${nth}p")
    [ -n "$victim" ]
    kill -"$sig" "$victim"
    end_job "$out"
}

# ---- output paths ----

@test "failsafe: --dump-params onto a device, a FIFO or a directory is refused before training and destroys nothing" {
    require_solution 00
    cd "$ROOT"
    local d="$BATS_TEST_TMPDIR"
    mkfifo "$d/fifo"
    mkdir "$d/dir"
    for target in /dev/null "$d/fifo" "$d/dir" "$d/dir/"; do
        run t 60 "$SOL00/train_gpt" "${TINY[@]}" --out "$d/run" --dump-params "$target"
        echo "$output"
        assert_user_error
        [[ "$output" == *"--dump-params"* ]]
        [[ "$output" != *"step 1"* ]]   # refused before the first step
    done
    [ -c /dev/null ]
    [ -p "$d/fifo" ]
    [ -d "$d/dir" ]
    [ -z "$(find "$d" -name '*.tmp.*')" ]
}

@test "failsafe: bad --out and --dump-params parents: one error line, exit 2, nothing trained" {
    require_solution 00
    cd "$ROOT"
    local d="$BATS_TEST_TMPDIR"
    echo "a file" > "$d/file"
    local cases=("--out $d/file" "--out $d/file/sub" "--out /proc/dtlab-run"
                 "--dump-params $d/missing/params.bin" "--dump-params $d/file/params.bin"
                 "--dump-params /sys/params.bin")
    for c in "${cases[@]}"; do
        # shellcheck disable=SC2086  # c is a flag and its value
        run t 60 "$SOL00/train_gpt" "${TINY[@]}" --out "$d/ok" $c
        echo "$c -> $output"
        assert_user_error
        [[ "$output" == *"${c%% *}"* ]]
    done
    [ "$(cat "$d/file")" = "a file" ]
    [ ! -e "$d/ok/metrics.csv" ]
    # a run directory holding a FIFO or a directory where a run file goes
    mkdir -p "$d/fifo-run" "$d/dir-run/run.json"
    mkfifo "$d/fifo-run/metrics.csv"
    for run_dir in fifo-run dir-run; do
        run t 60 "$SOL00/train_gpt" "${TINY[@]}" --out "$d/$run_dir"
        echo "$output"
        assert_user_error
    done
    [ -p "$d/fifo-run/metrics.csv" ]
    [ -d "$d/dir-run/run.json" ]
}

@test "failsafe: under MPI a bad output path is one line from rank 0 and exit 2 on every rank" {
    require_solution 01 03
    cd "$ROOT"
    run mpirun_t 60 3 "$BUILD/solutions/03_zero/train_zero" "${TINY[@]}" --batch 12 --zero 2 \
        --out "$BATS_TEST_TMPDIR/run" --dump-params /dev/null
    echo "$output"
    assert_user_error
    run mpirun_t 60 2 "$BUILD/solutions/01_collectives/bench_collectives" --out /dev/null/x \
        --min-bytes 4 --max-bytes 4
    echo "$output"
    assert_user_error
}

@test "failsafe: --dump-params through a symbolic link replaces the target and keeps the link" {
    require_solution 00
    cd "$ROOT"
    local d="$BATS_TEST_TMPDIR"
    echo old > "$d/target.bin"
    ln -s target.bin "$d/link.bin"
    t 60 "$SOL00/train_gpt" "${TINY[@]}" --out "$d/run" --dump-params "$d/link.bin" > /dev/null
    [ -L "$d/link.bin" ]
    [ "$(stat -c %s "$d/target.bin")" -eq $((220544 * 4)) ]
}

@test "failsafe: a write that fails (file size limit) is one fatal line naming the file; the old file stays, no temporary left" {
    require_solution 00
    cd "$ROOT"
    local d="$BATS_TEST_TMPDIR"
    mkdir -p "$d/run"
    head -c 1000 /dev/urandom > "$d/params.bin"
    cp "$d/params.bin" "$d/before.bin"
    # 400 KiB per file: the 882 KB dump cannot be written (EFBIG; SIGXFSZ
    # ignored so that the write fails instead of killing the process)
    run bash -c "trap '' XFSZ; ulimit -f 400; exec timeout 60 '$SOL00/train_gpt' ${TINY[*]} \
        --out '$d/run' --dump-params '$d/params.bin'"
    echo "$output"
    [ "$status" -eq 1 ]
    [ "$(printf '%s\n' "$output" | grep -c 'fatal')" -eq 1 ]
    [[ "$output" == *"fatal"*"$d/params.bin"*"File too large"* ]]
    cmp "$d/params.bin" "$d/before.bin"
    [ -z "$(find "$d" -name '*.tmp.*')" ]
}

@test "failsafe: token files never replace a device, and a bad path is refused before generating" {
    cd "$ROOT"
    run t 60 "$BUILD/bin/gen_synthetic" --out /dev/null --tokens 1000
    echo "$output"
    [ "$status" -ne 0 ]
    [[ "$output" == *"/dev/null is a character device"* ]]
    [ -c /dev/null ]
    run t 60 "$BUILD/bin/gen_synthetic" --out "$BATS_TEST_TMPDIR/no/dir/x.tok" --tokens 1000
    [ "$status" -ne 0 ]
    [[ "$output" == *"No such file or directory"* ]]
}

# ---- memory ----

@test "failsafe: a model that cannot fit is refused up front with the planner's bytes per category" {
    require_solution 00 03
    cd "$ROOT"
    local start=$SECONDS
    run t 60 "$SOL00/train_gpt" "${TINY[@]}" --out "$BATS_TEST_TMPDIR/a" --n-embd 16384 --n-head 16
    echo "$output"
    assert_user_error
    [[ "$output" == *"needs 194.7 GiB per rank"*"params 48.0 GiB"*"optimizer 96.0 GiB"*"available on the node"* ]]
    [ $((SECONDS - start)) -lt 20 ]
    # 3 ranks: the per-rank need times the ranks sharing the node, one line
    run mpirun_t 60 3 "$BUILD/solutions/03_zero/train_zero" "${TINY[@]}" --batch 12 --zero 1 \
        --n-embd 8192 --n-head 16 --out "$BATS_TEST_TMPDIR/b"
    echo "$output"
    assert_user_error
    [[ "$output" == *"3 ranks share one node's memory"* ]]
}

# ---- frozen, deadlocked and dead ranks ----

@test "failsafe: a rank stopped with SIGSTOP ends the job within the timeout: one line naming it, status 4, no rank left" {
    require_solution 02
    cd "$ROOT"
    local out="$BATS_TEST_TMPDIR/stop"
    fault_run "$out" STOP 2 "$BUILD/solutions/02_ddp/train_ddp" --comm-timeout 3
    [ "$status" -eq 4 ]
    [ "$took" -le 10 ]
    [ "$(grep -c 'comm timeout' "$out.log")" -eq 1 ]
    grep -q "comm timeout: rank [0-9] waited 3\.[0-9] s in allreduce on group '[a-z]*' (3 ranks)" "$out.log"
    grep -q "(pid $victim) is stopped" "$out.log"
}

@test "failsafe: one line per failure from whichever rank notices, naming the stopped rank; the stopped rank stays silent; SIGTERM to mpirun or to a rank is said" {
    require_solution 07 10
    cd "$ROOT"
    local d="$BATS_TEST_TMPDIR" stopped np nth prog
    local cp=("$BUILD/solutions/07_context_parallel/train_cp" --config tiny)
    # rank 0 stopped inside a wait (rank 1, stopped a second before, holds
    # everyone up); once rank 1 runs again, it names rank 0, and rank 0,
    # resumed by mpirun to be ended, must not report the others
    start_job "$d/wait" 4 "${cp[@]}" --cp 4 --comm-timeout 2
    kill -STOP "$(rank_pid "$d/wait" 1)"
    sleep 1
    stopped=$(rank_pid "$d/wait" 0)
    kill -STOP "$stopped"
    kill -CONT "$(rank_pid "$d/wait" 1)"
    end_job "$d/wait"
    [ "$status" -eq 4 ]
    one_report "$d/wait" "comm timeout: rank [1-3] waited [0-9.]+ s in .*rank 0 \(pid $stopped\) is stopped"
    # ring attention: the waits chain from the reporter to the stopped rank
    # (rank 0 waits for 1, 1 for 2); dp x tp x pp: the reporter waits in a
    # collective for rank 2, which waits for rank 6
    local cases=("4 2 ${cp[*]} --cp 4 --cp-algo ring --seq 64"
                 "8 6 $BUILD/solutions/10_composed/train_4d --config tiny --dp 2 --tp 2 --pp 2")
    for c in "${cases[@]}"; do
        read -r np nth prog <<<"$c"
        # shellcheck disable=SC2086  # prog is a command line
        start_job "$d/$nth" "$np" $prog --comm-timeout 2
        stopped=$(rank_pid "$d/$nth" "$nth")
        kill -STOP "$stopped"
        end_job "$d/$nth"
        [ "$status" -eq 4 ]
        one_report "$d/$nth" "comm timeout: .*rank $nth \(pid $stopped\) is stopped"
    done
    # SIGTERM to mpirun (kill, a batch system): mpirun ends every rank
    start_job "$d/term" 2 "${cp[@]}" --cp 2
    kill -TERM "$(ps -eo pid=,comm=,args= | awk -v d="$d/term" '$2 == "mpirun" && index($0, d) { print $1 }')"
    end_job "$d/term"
    [ "$status" -ne 0 ]
    one_report "$d/term" "ended: mpirun ended the job with SIGTERM: .*no rank had failed"
    # SIGTERM to one rank, not through mpirun
    start_job "$d/rank" 2 "${cp[@]}" --cp 2
    stopped=$(rank_pid "$d/rank" 1)
    kill -TERM "$stopped"
    end_job "$d/rank"
    [ "$status" -ne 0 ]
    one_report "$d/rank" "ended: rank 1 \(pid $stopped\) got SIGTERM from pid $BASHPID, not from mpirun"
}

@test "failsafe: a planted deadlock (every rank sends first) is reported as such, not a hang" {
    require_instructor "grader/planted/ is not in a handout"
    cd "$ROOT"
    local d="$BATS_TEST_TMPDIR/deadlock"
    mkdir -p "$d"
    cp solutions/01_collectives/collectives.c "$d/"
    (cd "$d" && patch -s -p1 < "$ROOT/grader/planted/01-allgather-deadlock.patch")
    build_variant "$d/collectives.c" 01_collectives "$d" check_collectives
    local start=$SECONDS
    run mpirun_t 60 3 "$d/check_collectives" --op allgather --comm-timeout 2
    echo "$output"
    [ "$status" -eq 4 ]
    [ $((SECONDS - start)) -le 15 ]
    [ "$(printf '%s\n' "$output" | grep -c 'comm timeout')" -eq 1 ]
    [[ "$output" == *"waited 2."*" s in send to rank "*"waits in send to rank "*"(a cycle of waits: a deadlock)"* ]]
    # the same through KIT_COMM_TIMEOUT, the environment's default
    KIT_COMM_TIMEOUT=2 run mpirun_t 60 3 -x KIT_COMM_TIMEOUT "$d/check_collectives" --op allgather
    [ "$status" -eq 4 ]
    [[ "$output" == *"over --comm-timeout 2"* ]]
}

@test "failsafe: a rank killed with SIGKILL is named by the survivors; the job ends at once" {
    require_solution 03
    cd "$ROOT"
    local out="$BATS_TEST_TMPDIR/kill"
    fault_run "$out" KILL 3 "$BUILD/solutions/03_zero/train_zero" --zero 3
    [ "$status" -ne 0 ]
    [ "$took" -le 5 ]
    [ "$(grep -c 'died without a message' "$out.log")" -eq 1 ]
    grep -q "rank [0-9] (pid $victim) died without a message" "$out.log"
}

@test "failsafe: ranks that stop on purpose (a user error, the end of a run) are never reported dead" {
    require_solution 02
    cd "$ROOT"
    for _ in 1 2 3; do
        run mpirun_t 60 3 "$BUILD/solutions/02_ddp/train_ddp" "${TINY[@]}" --batch 8 \
            --out "$BATS_TEST_TMPDIR/x"
        assert_user_error
        [[ "$output" != *"died"* ]]
    done
}

@test "failsafe: --comm-timeout and KIT_COMM_TIMEOUT reject bad values" {
    require_solution 01 02
    cd "$ROOT"
    run mpirun_t 60 2 "$BUILD/solutions/02_ddp/train_ddp" "${TINY[@]}" --comm-timeout -1
    assert_user_error
    [[ "$output" == *"--comm-timeout"* ]]
    KIT_COMM_TIMEOUT=soon run mpirun_t 60 2 -x KIT_COMM_TIMEOUT "$BUILD/solutions/01_collectives/check_collectives"
    assert_user_error
    [[ "$output" == *"KIT_COMM_TIMEOUT"* ]]
}
