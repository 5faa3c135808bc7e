#!/usr/bin/env bats
# The figures the labs' READMEs and HINTS state (tools/check_doc_figures.py,
# `make doc-check`): each one the kit computes is rerun by the command its
# check line names and found in that command's output, to its precision;
# each timing, rate or outside figure says the machine and date (or the
# source) it came from. In a handout, a check line of a lab whose solution
# is not released is skipped (the figures are the solution's).
load helpers

DOC_CHECK="$ROOT/tools/check_doc_figures.py"

@test "doc-check: every lab's README and HINTS: each figure of the kit reruns and agrees, each measurement says where it came from" {
    local files
    files=$(ls "$ROOT"/labs/[0-9][0-9]_*/README.md "$ROOT"/labs/[0-9][0-9]_*/HINTS.md 2> /dev/null)
    # shellcheck disable=SC2086  # one path a word
    run t 600 python3 "$DOC_CHECK" --run $files
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *", 0 problems" ]]
    # every lab's README is read; in the instructor's tree every check reruns
    [[ "$output" == *"check_doc_figures: $(wc -w <<< "$files") files, "* ]]
    in_handout || [[ "$output" == *" 0 skipped, "* ]]
}

@test "doc-check: a figure the output does not have, an unlabelled timing, an unchecked count, a failing command: one line each, naming file and line" {
    local f="$BATS_TEST_TMPDIR/LAB.md"
    cat > "$f" <<'MD'
# A lab

<!-- check: build/bin/memplan --config tiny -->
tiny has 220,544 parameters and its activations take 10.791 MiB.

<!-- check: build/bin/memplan --config tiny -->
Off by one: 220,545 parameters.

<!-- check: build/bin/memplan --config no-such-config -->
Never printed: 1,234 parameters.

A step took 8.6 ms.

A step took 8.6 ms on the kit's reference VM (2 cores), November 2026.

The run moved 47,358,048 bytes.

## Measurements

Measured on a 2-core VM, December 2026.

The ring reached 3.34 GB/s, and moved 47,358,048 bytes.
MD
    run t 60 python3 "$DOC_CHECK" --run "$f"
    echo "$output"
    [ "$status" -eq 1 ]
    [ "$(grep -c "^$f:" <<< "$output")" -eq 4 ]
    [[ "$output" == *"$f:7: 220,545 is not in the output of \`build/bin/memplan --config tiny\`"* ]]
    [[ "$output" == *"$f:10: \`build/bin/memplan --config no-such-config\` failed (exit status 2): "*"no-such-config"* ]]
    [[ "$output" == *"$f:12: 8.6 ms is a measurement with no machine and date"* ]]
    [[ "$output" == *"$f:16: 47,358,048 bytes is a figure of the kit's output with no check line"* ]]
    # without --run only the labels and counts are looked at
    run t 60 python3 "$DOC_CHECK" "$f"
    [ "$status" -eq 1 ]
    [ "$(grep -c "^$f:" <<< "$output")" -eq 2 ]
    # bad usage
    run python3 "$DOC_CHECK" --fast "$f"
    [ "$status" -eq 2 ]
    run python3 "$DOC_CHECK" "$BATS_TEST_TMPDIR/none.md"
    [ "$status" -eq 2 ]
    [[ "$output" == *"error: no such file"* ]]
}
