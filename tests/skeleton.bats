#!/usr/bin/env bats
# Student files are generated from the solutions (docs/INSTRUCTORS.md): they
# must be in sync, build, and say "not implemented" cleanly; the solution
# passes what the skeleton fails. In a handout these check the labs whose solution is
# released and whose files the student has not changed yet.
load helpers

@test "labs/ is what make skeletons generates from solutions/" {
    run bash "$ROOT/tools/make_skeletons.sh" "$ROOT/solutions" "$BATS_TEST_TMPDIR/labs"
    [ "$status" -eq 0 ]
    local checked=0 lab f rel
    for lab in "$BATS_TEST_TMPDIR"/labs/*/; do
        lab=$(basename "$lab")
        untouched "${lab:0:2}" || continue   # a handout's lab the student works on
        for f in "$BATS_TEST_TMPDIR/labs/$lab"/*; do
            rel=${f#"$BATS_TEST_TMPDIR/labs/"}
            diff -u "$ROOT/labs/$rel" "$f" || { echo "labs/$rel is out of date: run make skeletons" >&2; return 1; }
        done
        checked=$((checked + 1))
    done
    if [ "$checked" -eq 0 ]; then
        in_handout && skip "no lab in this handout has both its solution released and its skeleton untouched"
        echo "make_skeletons.sh wrote no lab" >&2
        return 1
    fi
}

@test "a lab's headers exist once, in labs/: the contract, without solution regions" {
    local h n=0
    for h in "$ROOT"/labs/*/*.h; do
        if grep -n 'BEGIN SOLUTION\|SOLUTION ONLY' "$h"; then return 1; fi
        [ ! -e "$ROOT/solutions/${h#"$ROOT/labs/"}" ] || { echo "${h#"$ROOT/"} has a copy in solutions/" >&2; return 1; }
        n=$((n + 1))
    done
    [ "$n" -ge 12 ]
}

@test "the library needs no lab: libcommon.a refers to no symbol a lab's object defines, and common/ names no lab's folder" {
    local lab_defined needed
    lab_defined=$(for o in "$BUILD"/labs/*/*.o; do nm --defined-only "$o" | awk 'NF == 3 { print $3 }'; done | sort -u)
    [ "$(wc -l <<< "$lab_defined")" -ge 20 ]
    needed=$(nm -u "$BUILD/libcommon.a" | awk 'NF == 2 { print $2 }' | sort -u)
    run comm -12 <(echo "$lab_defined") <(echo "$needed")
    [ "$status" -eq 0 ]
    [ -z "$output" ] || { echo "libcommon.a calls the labs' $output" >&2; return 1; }
    local lab
    for lab in "$ROOT"/labs/[0-9][0-9]_*/; do
        run grep -rn "$(basename "$lab")" "$ROOT/common"
        [ "$status" -eq 1 ] || { echo "$output" >&2; return 1; }
    done
}

@test "skeletons keep no solution code and every solution region becomes a TODO" {
    require_solution 00
    require_untouched 00
    ! grep -rn "BEGIN SOLUTION\|END SOLUTION" "$ROOT/labs" --include='*.c' --include='*.h' || return 1
    regions=$(grep -c "BEGIN SOLUTION" "$ROOT/solutions/00_single_device/backprop.c")
    [ "$regions" -eq 2 ]
    [ "$(grep -c 'NOT_IMPLEMENTED();' "$ROOT/labs/00_single_device/backprop.c")" -eq "$regions" ]
}

@test "the skeleton generator rejects unbalanced markers" {
    mkdir -p "$BATS_TEST_TMPDIR/src/99_bad"
    printf 'void f(void) {\n    /* BEGIN SOLUTION */\n    int x = 1;\n}\n' > "$BATS_TEST_TMPDIR/src/99_bad/bad.c"
    run bash "$ROOT/tools/make_skeletons.sh" "$BATS_TEST_TMPDIR/src" "$BATS_TEST_TMPDIR/out"
    [ "$status" -ne 0 ]
    [[ "$output" == *"never ended"* ]]
}

@test "untouched lab 00 gradcheck checks the given layers, then says not implemented" {
    require_untouched 00
    run t 60 "$LAB00/gradcheck"
    echo "$output"
    [ "$status" -eq 3 ]
    [[ "$output" == *"matmul "*"ok"* ]]
    [[ "$output" == *"not implemented: layernorm_backward"* ]]
    [[ "$output" != *"fatal"* ]]
}

@test "untouched lab 00 attention check says not implemented: attention_backward" {
    require_untouched 00
    run t 60 "$LAB00/gradcheck" --layer attention
    [ "$status" -eq 3 ]
    [[ "$output" == *"not implemented: attention_backward"* ]]
}

@test "untouched lab 00 trainer builds, runs and stops cleanly at the first TODO" {
    require_untouched 00
    run t 60 "$LAB00/train_gpt" --config tiny --steps 3 --data "$SYNTH" --out "$BATS_TEST_TMPDIR/run"
    echo "$output"
    [ "$status" -eq 3 ]
    [[ "$output" == *"not implemented: layernorm_backward"* ]]
}

@test "lab 01 skeleton: each of the eight collectives becomes a TODO, the shared fold is left out" {
    require_solution 01
    require_untouched 01
    regions=$(grep -c "BEGIN SOLUTION" "$ROOT/solutions/01_collectives/collectives.c")
    [ "$regions" -eq 8 ]
    [ "$(grep -c 'NOT_IMPLEMENTED();' "$ROOT/labs/01_collectives/collectives.c")" -eq "$regions" ]
    # the fold tree_allreduce and the extension share is solution-only code:
    # in the skeleton it would give the tree's TODO away
    grep -q 'SOLUTION ONLY BEGIN' "$ROOT/solutions/01_collectives/collectives.c"
    run grep -n 'SOLUTION ONLY\|fold_in\|survivor_rank' "$ROOT/labs/01_collectives/collectives.c"
    [ "$status" -eq 1 ]
}

@test "the skeleton generator drops SOLUTION ONLY blocks and rejects them unbalanced or nested" {
    local src="$BATS_TEST_TMPDIR/src/99_x" out="$BATS_TEST_TMPDIR/out"
    mkdir -p "$src"
    printf 'int a;\n\n/* SOLUTION ONLY BEGIN */\nstatic int helper(void) { return 1; }\n/* SOLUTION ONLY END */\n\nint f(void) {\n    /* BEGIN SOLUTION */\n    return helper();\n    /* END SOLUTION */\n}\n' > "$src/x.c"
    run bash "$ROOT/tools/make_skeletons.sh" "$BATS_TEST_TMPDIR/src" "$out"
    [ "$status" -eq 0 ]
    [ "$(cat "$out/99_x/x.c")" = "$(printf 'int a;\n\nint f(void) {\n    /* TODO: your code here (see the lab README). */\n    NOT_IMPLEMENTED();\n}')" ]
    for bad in '/* SOLUTION ONLY BEGIN */\nint b;\n' '/* SOLUTION ONLY END */\n' \
               '/* SOLUTION ONLY BEGIN */\n/* BEGIN SOLUTION */\n/* END SOLUTION */\n/* SOLUTION ONLY END */\n' \
               'void g(void) {\n/* BEGIN SOLUTION */\n/* SOLUTION ONLY BEGIN */\n/* SOLUTION ONLY END */\n/* END SOLUTION */\n}\n'; do
        printf "$bad" > "$src/x.c"
        run bash "$ROOT/tools/make_skeletons.sh" "$BATS_TEST_TMPDIR/src" "$out"
        echo "$output"
        [ "$status" -ne 0 ]
        [[ "$output" == *"SOLUTION ONLY"* ]]
    done
}

@test "labs 02 and 03 skeletons: every solution region becomes a TODO" {
    require_solution 02 03
    require_untouched 02 03
    for f in 02_ddp/ddp 03_zero/zero; do
        regions=$(grep -c "BEGIN SOLUTION" "$ROOT/solutions/$f.c")
        [ "$regions" -ge 5 ]
        [ "$(grep -c 'NOT_IMPLEMENTED();' "$ROOT/labs/$f.c")" -eq "$regions" ]
    done
}

@test "lab 06 skeleton: the four generators and the two extensions become TODOs, the message and DualPipe bookkeeping helpers stay, the solution's shared 1F1B and DualPipe steps are left out" {
    require_solution 06
    require_untouched 06
    local f=06_pipeline/schedules
    [ "$(grep -c "BEGIN SOLUTION" "$ROOT/solutions/$f.c")" -eq 6 ]
    [ "$(grep -c 'NOT_IMPLEMENTED();' "$ROOT/labs/$f.c")" -eq 6 ]
    grep -q '^static int message(' "$ROOT/labs/$f.c"
    grep -q '^static void end_batch(' "$ROOT/labs/$f.c"
    grep -q '^static void dual_compute(' "$ROOT/labs/$f.c"
    grep -q 'pipe_schedule_problem' "$ROOT/labs/$f.c"   # schedule_by_name is given
    run grep -n 'SOLUTION ONLY\|one_forward_one_backward\|interleaved_micro\|dualpipe_rank' "$ROOT/labs/$f.c"
    [ "$status" -eq 1 ]
}

@test "every lab: README with a graded extension and time budgets, and the HINTS.md it points to" {
    for dir in "$ROOT"/labs/[0-9][0-9]_*/; do
        readme="$dir/README.md"
        grep -q '^## Extension (graded)' "$readme" || { echo "$readme: no graded extension" >&2; return 1; }
        grep -Eq 'Budget (roughly|about) [0-9]' "$readme" || { echo "$readme: no time budget" >&2; return 1; }
        grep -q '(HINTS.md)' "$readme" || { echo "$readme: does not point to HINTS.md" >&2; return 1; }
        [ -s "$dir/HINTS.md" ] || { echo "$dir: HINTS.md missing" >&2; return 1; }
        grep -q 'HINTS=no' "$dir/HINTS.md"
    done
}
