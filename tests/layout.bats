#!/usr/bin/env bats
# The model that knows its shard (layout.h, lab 04's part 1) changed nothing
# for the layouts before it: labs 00, 02 and 03 give bit-identical outputs
# to the kit as it was just before (commit BEFORE_LAYOUT), on the grader's
# fixed cases. The older kit is built from git history in a scratch copy.
load helpers

BEFORE_LAYOUT=a4339cf  # "profile.h: drop profile_enabled", the last commit before layout.h

@test "layout: labs 00, 02, 03 give bit-identical metrics, memory.csv and comm.csv to the kit before layouts" {
    require_solution 00 02 03
    git -C "$ROOT" cat-file -e "$BEFORE_LAYOUT^{commit}" 2>/dev/null ||
        skip "commit $BEFORE_LAYOUT is not in this tree's history (a handout, or a shallow clone)"
    before="$BATS_TEST_TMPDIR/before"
    mkdir -p "$before"
    git -C "$ROOT" archive "$BEFORE_LAYOUT" | tar -x -C "$before"
    run t 600 make -C "$before" -j2 build/solutions/00_single_device/train_gpt \
        build/solutions/02_ddp/train_ddp build/solutions/03_zero/train_zero
    [ "$status" -eq 0 ] || { echo "$output" | tail -20; false; }
    run t 900 /usr/bin/python3 "$ROOT/tests/same_as_before.py" "$before" "$ROOT" "$BATS_TEST_TMPDIR/runs"
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"12 cases bit-identical"* ]]
}

@test "layout: the library links without any lab's object (memplan, test_layout hold no lab 00 code)" {
    for prog in "$BUILD/bin/memplan" "$BUILD/tests/test_layout"; do
        run nm "$prog"
        [ "$status" -eq 0 ]
        ! grep -E " [TW] (layernorm|attention)_backward_cpu$" <<<"$output" || return 1
    done
    run t 60 "$BUILD/bin/memplan" --config tiny --ranks 2
    [ "$status" -eq 0 ]
}
