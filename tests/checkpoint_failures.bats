#!/usr/bin/env bats
# Failures while training (lab 09, tools/run_with_failures.sh): a job
# killed at fractions of its straight run's time and relaunched from its
# newest checkpoint ends bit for bit on the straight run. Apart from tests/checkpoint.bats
# because the kills are timed against a run measured just before: the file
# runs alone (tests/run.sh's ALONE), on a machine whose load stays put.
load helpers

S="$BUILD/solutions"
GPT="$S/00_single_device/train_gpt"

@test "checkpoint: a ZeRO-3 job killed three times (SIGKILL to every rank) and relaunched from its newest checkpoint ends bit for bit on the straight run" {
    require_solution 03 09
    local d="$BATS_TEST_TMPDIR" zero="$S/03_zero/train_zero"
    local args=(--zero 3 --config tiny --steps 240 --eval-every 0 --threads 1)
    local t0=$(date +%s.%N) fails
    run mpirun_t 240 2 "$zero" "${args[@]}" --out "$d/straight" --dump-params "$d/straight.bin"
    [ "$status" -eq 0 ] || { echo "straight: $output"; return 1; }
    # kills at 30%, 10% and 20% of the straight run's time T (whatever this
    # machine's speed): the first well after the first save (step 10 of
    # 240), the second possibly before the relaunch resumed, and 4 launches
    # in all, since the three together cover half of T (a machine whose
    # load changes between the two runs still leaves the fourth launch work)
    fails=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { t = b - a; printf "%.2f %.2f %.2f", 0.3 * t, 0.1 * t, 0.2 * t }')
    run t 600 "$ROOT/tools/run_with_failures.sh" --dir "$d/job" --np 2 --fail-after "$fails" -- \
        "$zero" "${args[@]}" --save-every 10 --keep 2 --dump-params "$d/job.bin"
    echo "$output"
    cat "$d/job/launches.csv"
    [ "$status" -eq 0 ]
    [[ "$output" == *"finished in "*" s of wall time: 4 launches, 3 failures"* ]]
    [ "$(grep -c ',killed,' "$d/job/launches.csv")" -eq 3 ]
    [ "$(grep -c ',finished,' "$d/job/launches.csv")" -eq 1 ]
    # launch 2 resumed from a checkpoint launch 1 left, the last from a later one
    awk -F, 'NR == 3 && $6 >= 10 { ok2 = 1 } NR == 5 && $6 >= 20 { ok4 = 1 } END { exit !(ok2 && ok4) }' "$d/job/launches.csv"
    cmp "$d/straight.bin" "$d/job.bin"
    [ "$(ls "$d/job/ck")" = "$(printf 'step-000230\nstep-000240')" ]
}

@test "checkpoint: run_with_failures refuses bad usage with one clear error" {
    local f="$ROOT/tools/run_with_failures.sh" d="$BATS_TEST_TMPDIR"
    run t 30 "$f" --dir "$d/a" --mtbf 0 -- "$GPT" --config tiny
    assert_user_error
    [[ "$output" == *"--mtbf must be a positive number"* ]]
    run t 30 "$f" --mtbf 2 -- "$GPT" --config tiny
    assert_user_error
    run t 30 "$f" --dir "$d/a" --mtbf 2 --fail-after "1 2" -- "$GPT"
    assert_user_error
    run t 30 "$f" --dir "$d/a" --mtbf 2 -- "$GPT" --config tiny --save "$d/x"
    assert_user_error
    [[ "$output" == *"--save is this script's"* ]]
    run t 30 "$f" --dir "$d/a" --mtbf 2 -- "$d/no-such-program"
    assert_user_error
    # a launch that fails by itself (a bad flag) is not a simulated failure
    run t 60 "$f" --dir "$d/b" --mtbf 100 -- "$GPT" --config no-such-config
    [ "$status" -eq 1 ]
    [[ "$output" == *"launch 1 failed by itself with status 2"* ]]
}
