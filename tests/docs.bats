#!/usr/bin/env bats
# The docs' lists against the tree (tests/docs_check.py has the rules): the
# README's lab table lists labs/NN_name/ in order; the table of programs
# (docs/TRAINER.md) and every program path the docs name match `make -s
# print-programs`; the table of benchmarks (docs/TESTING.md) and every `make
# bench...` the docs and START.md name match `make -s print-benchmarks`;
# every relative link in README.md, docs/*.md, the labs' pages and START.md
# resolves, anchors included; docs/TESTING.md names every suite. No build, no mpirun: a few
# seconds.
load helpers

check() { python3 "$ROOT/tests/docs_check.py" "$ROOT" "$@"; }

@test "docs: the README's lab table lists exactly labs/[0-9][0-9]_*/, in order" {
    run check labs
    echo "$output"
    [ "$status" -eq 0 ]
}

@test "docs: the programs listed and named in the docs are those of make print-programs" {
    local progs
    progs=$(make -s -C "$ROOT" --no-print-directory print-programs)
    [ -n "$progs" ]
    run check programs <<< "$progs"
    echo "$output"
    [ "$status" -eq 0 ]
}

@test "docs: the benchmarks listed and named in the docs and START.md are the Makefile's bench targets" {
    local targets
    targets=$(make -s -C "$ROOT" --no-print-directory print-benchmarks)
    [ -n "$targets" ]
    run check benchmarks <<< "$targets"
    echo "$output"
    [ "$status" -eq 0 ]
}

@test "docs: every relative link in README.md, docs/*.md, labs/*/*.md and START.md points to a file (and heading) that exists" {
    run check links
    echo "$output"
    [ "$status" -eq 0 ]
}

@test "docs: docs/TESTING.md describes every tests/*.bats" {
    run check suites
    echo "$output"
    [ "$status" -eq 0 ]
}

@test "docs: the checker catches a missing lab, program, benchmark and link" {
    local fake="$BATS_TEST_TMPDIR/fake"
    mkdir -p "$fake/docs" "$fake/tools" "$fake/labs/00_a" "$fake/labs/01_b" "$fake/tests"
    printf '# x\n\n| lab | c |\n|--|--|\n| [00_a](labs/00_a/README.md) | a |\n\nSee [gone](docs/GONE.md) and [here](#nowhere).\n' > "$fake/README.md"
    printf '# T\n\n<!-- programs -->\n| lab | program | what |\n|--|--|--|\n| 00_a | `train_a` | a |\n<!-- /programs -->\n\n<!-- benchmarks -->\n| target | lab | what |\n|--|--|--|\n| `make bench` | 00 | a |\n<!-- /benchmarks -->\n\nRun `build/solutions/00_a/train_z` and `make bench-nothing`.\n' > "$fake/docs/TESTING.md"
    : > "$fake/tools/make_handout.sh"
    : > "$fake/tests/x.bats"
    run python3 "$ROOT/tests/docs_check.py" "$fake" labs
    [ "$status" -eq 1 ]
    [[ "$output" == *"lists 00_a; labs/ has 00_a 01_b"* ]]
    run python3 "$ROOT/tests/docs_check.py" "$fake" programs <<< $'00_a train_a\n01_b train_b\nbin memplan'
    [ "$status" -eq 1 ]
    [[ "$output" == *"does not list 01_b train_b"* ]]
    [[ "$output" == *"does not list tools memplan"* ]]
    [[ "$output" == *"names build/solutions/00_a/train_z, not a program"* ]]
    run python3 "$ROOT/tests/docs_check.py" "$fake" benchmarks <<< $'bench\nbench-x'
    [ "$status" -eq 1 ]
    [[ "$output" == *"does not list make bench-x"* ]]
    [[ "$output" == *"names make bench-nothing, not a benchmark"* ]]
    run python3 "$ROOT/tests/docs_check.py" "$fake" links
    [ "$status" -eq 1 ]
    [[ "$output" == *"link to docs/GONE.md: no such file"* ]]
    [[ "$output" == *"link to #nowhere: no such heading"* ]]
    run python3 "$ROOT/tests/docs_check.py" "$fake" suites
    [ "$status" -eq 1 ]
    [[ "$output" == *"does not describe tests/x.bats"* ]]
}

@test "docs: every lab with checks of its own (lab.mk's checks) tells its students make check LAB=NN" {
    local lab checks missing=()
    while read -r lab checks; do
        grep -q "make check LAB=${lab:0:2}" "$ROOT/labs/$lab/README.md" || missing+=("$lab")
    done < <(make -s -C "$ROOT" print-checks)
    [ ${#missing[@]} -eq 0 ] || { echo "no make check LAB=NN in the README of: ${missing[*]}"; return 1; }
}
