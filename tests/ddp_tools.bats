#!/usr/bin/env bats
# Lab 02's measurement tools: tools/plot_timeline.sh draws a real trace of
# train_ddp, and a missing or damaged trace.csv is one clear error, not a
# gnuplot stack of warnings or an empty picture. (bench/ddp.sh is a
# benchmark, run by `make bench-ddp`, not here.)
load helpers

DDP="$BUILD/solutions/02_ddp/train_ddp"
PLOT="$ROOT/tools/plot_timeline.sh"

# one short overlapped run per file: its trace.csv is what the tests draw
setup_file() {
    export RUN="$BATS_FILE_TMPDIR/run"
    cd "$ROOT"
    have_solution 02 || return 0   # a handout without it: the tests that draw RUN skip
    mpirun_t 180 2 "$DDP" --ddp overlapped --bucket-mb 0.05 --config tiny --steps 3 --threads 1 \
        --eval-every 0 --out "$RUN" > /dev/null
}

# a copy of the run directory whose trace.csv the test may damage
scratch_run() {
    local dir="$BATS_TEST_TMPDIR/copy"
    mkdir -p "$dir"
    cp "$RUN/trace.csv" "$dir/"
    echo "$dir"
}

@test "plot_timeline: draws the default window of a real 2-rank trace" {
    require_solution 02
    grep -q '^1,compute,backward,' "$RUN/trace.csv"
    grep -q '^0,comm,allreduce,dp,' "$RUN/trace.csv"
    run t 60 bash "$PLOT" "$RUN" "overlapped, tiny"
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"wrote $RUN/timeline.png"* ]]
    is_png "$RUN/timeline.png"
}

@test "plot_timeline: draws a window given in seconds" {
    require_solution 02
    local dir t0 t1
    dir=$(scratch_run)
    # the whole run: from the first event's start to the last event's end
    read -r t0 t1 < <(awk -F, 'NR > 1 { if (NR == 2 || $5 < a) a = $5; if ($6 > b) b = $6 } END { print a, b }' "$dir/trace.csv")
    run t 60 bash "$PLOT" "$dir" "whole run" "$t0" "$t1"
    echo "$output"
    [ "$status" -eq 0 ]
    is_png "$dir/timeline.png"
}

@test "plot_timeline: a missing trace.csv is one clear error" {
    run t 30 bash "$PLOT" "$BATS_TEST_TMPDIR/nowhere"
    echo "$output"
    assert_user_error
    [[ "$output" == *"trace.csv not found"* ]]
    [ ! -e "$BATS_TEST_TMPDIR/nowhere/timeline.png" ]
}

@test "plot_timeline: a malformed trace.csv is one clear error, and no picture" {
    require_solution 02
    local dir
    dir=$(scratch_run)
    # a foreign header
    sed -i '1s/.*/time,what/' "$dir/trace.csv"
    run t 30 bash "$PLOT" "$dir"
    echo "$output"
    assert_user_error
    [[ "$output" == *"header"* ]]
    # a row cut short, as by a full disk
    cp "$RUN/trace.csv" "$dir/trace.csv"
    echo "1,compute,backward,,0.5" >> "$dir/trace.csv"
    run t 30 bash "$PLOT" "$dir"
    echo "$output"
    assert_user_error
    [[ "$output" == *"line $(wc -l < "$dir/trace.csv")"* ]]
    # text where a time belongs
    cp "$RUN/trace.csv" "$dir/trace.csv"
    sed -i '2s/^\([^,]*,[^,]*,[^,]*,[^,]*\),[^,]*,/\1,soon,/' "$dir/trace.csv"
    run t 30 bash "$PLOT" "$dir"
    echo "$output"
    assert_user_error
    # only the header
    head -n 1 "$RUN/trace.csv" > "$dir/trace.csv"
    run t 30 bash "$PLOT" "$dir"
    echo "$output"
    assert_user_error
    [ ! -e "$dir/timeline.png" ]
}

@test "plot_timeline: bad arguments are usage errors" {
    require_solution 02
    run t 30 bash "$PLOT"
    assert_user_error
    [[ "$output" == *"usage:"* ]]
    # T0 without T1
    run t 30 bash "$PLOT" "$RUN" title 0.1
    assert_user_error
    run t 30 bash "$PLOT" "$RUN" title 0.5 0.2
    assert_user_error
    [[ "$output" == *"later than"* ]]
    run t 30 bash "$PLOT" "$RUN" title soon later
    assert_user_error
    # a window with nothing in it
    run t 30 bash "$PLOT" "$RUN" title 1000 1001
    assert_user_error
    [[ "$output" == *"no events between"* ]]
}
