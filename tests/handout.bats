#!/usr/bin/env bats
# make handout (tools/make_handout.sh): the tree students get, checked the
# way a student meets it: a clean clone that builds, grades, benchmarks and
# tests itself. Two handouts, made once per file:
#   A  RELEASED=00 HINTS=no: its contents; in a clone, its CI workflow's
#      steps fail the untouched lab 01 (0/14, "not implemented"), then lab 01 finished (the solution
#      copied into labs/) scores full and `make bench-collectives` runs it.
#   B  RELEASED=none: later labs link the student's own lab 00 (lab 02
#      finished, lab 00 not: lab 02 stops in lab 00's TODO), and a reduced
#      `make test` ends green, running the student's own checks of lab 06
#      (its generators, finished); `make slides` builds every deck, the
#      unfinished labs' charts placeholders. Its suites are every one with a test that
#      needs a solution, a planted bug or an untouched skeleton, so each of
#      those skips is taken at least once; comm.bats and data.bats (no such
#      test) are left out to keep this file near two minutes.
load helpers

HANDOUT_SUITES=(cli collectives cuda ddp ddp_tools failsafe fake_gpu gpu gradcheck grader lab_checks
                sanitize skeleton torch train unit zero zero_tools)

setup_file() {
    in_handout && return 0   # a handout cannot make handouts: every test skips
    export H="$BATS_FILE_TMPDIR"
    local v
    for v in A:00:no B:none:yes; do
        IFS=: read -r name released hints <<< "$v"
        make -s -C "$ROOT" handout DEST="$H/$name" RELEASED="$released" HINTS="$hints" > "$H/$name.log" 2>&1 \
            || { cat "$H/$name.log"; return 1; }
        git clone -q "$H/$name" "$H/$name-clone"
        make -s -C "$H/$name-clone" -j2 all data > "$H/$name-build.log" 2>&1 \
            || { tail -n 30 "$H/$name-build.log"; return 1; }
    done
}

setup() {
    require_instructor "make handout runs in the instructor's tree"
}

# refused DIR EXPECTED ARGS...: `make -C DIR ARGS...` is one error line
# containing EXPECTED, exit status 2
refused() {
    local dir=$1 expected=$2
    shift 2
    run make -s -C "$dir" "$@"
    echo "make $*: $output"
    assert_user_error
    [[ "$output" == *"$expected"* ]]
}

# the tracked files a handout gets from this tree (as they are in the working tree)
expected_files() {
    (cd "$ROOT" && git ls-files | while IFS= read -r f; do [ -e "$f" ] && echo "$f"; done) |
        grep -Ev "$1"
}

@test "handout: RELEASED=00 HINTS=no copies the tracked files but unreleased solutions, planted bugs and hints; a repository of one commit" {
    local a="$H/A"
    diff <( (expected_files '^grader/planted/|^solutions/(0[1-9]|[1-9][0-9])_|^labs/[^/]*/HINTS\.md$'
             echo START.md; echo .handout; echo .github/workflows/grade.yml) | LC_ALL=C sort) \
         <(git -C "$a" ls-files | LC_ALL=C sort)
    # the files themselves, the reference runs among them
    diff -r "$ROOT/solutions/00_single_device" "$a/solutions/00_single_device"
    diff -r "$ROOT/grader/reference" "$a/grader/reference"
    diff -r -x HINTS.md "$ROOT/labs" "$a/labs"
    [ -z "$(find "$a/labs" -name HINTS.md)" ]
    [ ! -e "$a/grader/planted" ]
    [ "$(git -C "$a" rev-list --count HEAD)" -eq 1 ]
    [ -z "$(git -C "$a" status --porcelain)" ]
    grep -qx 'released: 00_single_device' "$a/.handout"
    grep -qx 'hints: no' "$a/.handout"
    grep -q '  labs/01_collectives/collectives.c$' "$a/.handout"
    # how to start: the commands, the student's files, what is released
    grep -q 'make grade LAB=00' "$a/START.md"
    grep -q '`labs/01_collectives/collectives.c` | not released' "$a/START.md"
    grep -q 'released: `solutions/00_single_device/`' "$a/START.md"
    sed -n 3p "$a/README.md" | grep -q 'Start with \[START.md\](START.md)'
    grep -q "solutions released: 00_single_device" "$H/A.log"
}

@test "handout: HINTS=no leaves out labs/*/HINTS.md, HINTS=yes keeps them; RELEASED=all and lab names work" {
    # a small kit of two labs, a hints file, a planted bug
    local src="$BATS_TEST_TMPDIR/kit" f
    for f in labs/00_a/a.c labs/00_a/HINTS.md labs/01_b/b.c solutions/00_a/a.c solutions/01_b/b.c \
             grader/planted/00-x.patch README.md; do
        mkdir -p "$src/$(dirname "$f")"
        echo "$f" > "$src/$f"
    done
    git -C "$src" init -q && git -C "$src" add -A
    git -C "$src" -c user.name=t -c user.email=t@t commit -q -m kit
    cd "$src"
    run bash "$ROOT/tools/make_handout.sh" "$BATS_TEST_TMPDIR/no" 01_b no
    echo "$output"
    [ "$status" -eq 0 ]
    [ "$(git -C "$BATS_TEST_TMPDIR/no" ls-files | LC_ALL=C sort | tr '\n' ' ')" = \
      ".handout README.md START.md labs/00_a/a.c labs/01_b/b.c solutions/01_b/b.c " ]
    run bash "$ROOT/tools/make_handout.sh" "$BATS_TEST_TMPDIR/yes" all
    [ "$status" -eq 0 ]
    [ "$(git -C "$BATS_TEST_TMPDIR/yes" ls-files | LC_ALL=C sort | tr '\n' ' ')" = \
      ".handout README.md START.md labs/00_a/HINTS.md labs/00_a/a.c labs/01_b/b.c solutions/00_a/a.c solutions/01_b/b.c " ]
    grep -q 'hints: `labs/00_a/HINTS.md`' "$BATS_TEST_TMPDIR/yes/START.md"
}

@test "handout: a DEST not empty, no DEST, bad RELEASED or HINTS: one error line, exit 2, nothing written" {
    local d="$BATS_TEST_TMPDIR" bad
    mkdir -p "$d/full" && touch "$d/full/x" "$d/file"
    refused "$ROOT" "handout: error: DEST $d/full exists and is not empty" handout DEST="$d/full"
    [ "$(ls -A "$d/full")" = x ]
    refused "$ROOT" "handout: error: DEST $d/file exists and is not a directory" handout DEST="$d/file"
    refused "$ROOT" "handout: error: no DEST: make handout DEST=dir" handout
    refused "$ROOT" "handout: error: DEST $ROOT/labs/new is inside this checkout" handout DEST=labs/new
    for bad in 7 abc '*' 00,all; do
        refused "$ROOT" "handout: error: RELEASED must list lab numbers" handout DEST="$d/new" RELEASED="$bad"
    done
    # the labs it names are the tree's (labs/NN_name/)
    local labs
    labs=$(cd "$ROOT/labs" && ls -d [0-9][0-9]_*/ | cut -c1-2 | xargs)
    refused "$ROOT" "handout: error: RELEASED: no lab 42 (labs: $labs)" handout DEST="$d/new" RELEASED=00,42
    refused "$ROOT" "handout: error: HINTS must be yes or no" handout DEST="$d/new" HINTS=maybe
    [ ! -e "$d/new" ]
    # the script alone: exactly one line
    run bash "$ROOT/tools/make_handout.sh" "$d/full"
    [ "$status" -eq 2 ]
    [ "${#lines[@]}" -eq 1 ]
    # a handout refuses the instructors' targets
    refused "$H/A-clone" "this tree is a handout already" handout DEST="$d/again"
    refused "$H/A-clone" "would overwrite your labs/" skeletons
    refused "$H/A-clone" "the references are the instructor's" references
}

# The handout's CI workflow, linted, and its steps' commands run in the
# clone as GitHub would (with LAB=01; the step that installs git and make
# is left out: they are here): the untouched lab 01 fails the job
@test "handout: a clean clone builds; lab 02 links lab 00's released solution; its CI workflow lints and, run, fails the untouched lab 01 with 0/14" {
    local c="$H/A-clone" w="$H/A-clone/.github/workflows/grade.yml"
    cmp "$c/build/earlier/00_single_device/backprop.o" "$c/build/solutions/00_single_device/backprop.o"
    [ ! -e "$c/build/solutions/01_collectives" ]
    (cd "$c" && yamllint .github/workflows/grade.yml grader/ci/gitlab-ci.yml)
    run python3 - "$w" "$c" <<'PY'
import os, subprocess, sys, yaml
flow = yaml.safe_load(open(sys.argv[1]))
assert flow["permissions"] == {"contents": "read", "checks": "write"}, flow["permissions"]
job = flow["jobs"]["grade"]
env = {**os.environ, **job["env"], "LAB": "01", "GITHUB_STEP_SUMMARY": f"{sys.argv[2]}/summary.md"}
statuses = []
for step in job["steps"]:
    if "run" in step and not step["run"].startswith("apt-get"):
        r = subprocess.run(["bash", "-e", "-c", step["run"]], cwd=sys.argv[2], env=env)
        statuses.append(r.returncode)
    # every step after the grade runs whatever its outcome, and reads its outputs
    if statuses and "uses" in step:
        assert step["if"] == "always()", step
        for path in (step["with"].get("path"), step["with"].get("report_paths")):
            assert path is None or os.path.exists(os.path.join(sys.argv[2], path)), path
print("statuses", *statuses)
PY
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"statuses 2 0"* ]]   # make grade failed (make's 2), the summary step ran
    [[ "$output" == *"grade: 0/14 is under --fail-under 100% (14 points): exit status 1"* ]]
    grep -q '^total: 0/14$' "$c/summary.md"
    # the 9 cases of the core and the 7 of the two extensions, whose points stay out of total:
    [ "$(grep -cE '^01_collectives .* 0/[0-9]+ +not implemented: ' "$c/grade-out/report.txt")" -eq 16 ]
    [ "$(grep -c '<skipped message="optional extension not attempted' "$c/grade-out/junit.xml")" -eq 7 ]
    rm -rf "$c/grade-out" "$c/summary.md"
}

@test "handout: a finished lab scores full marks, and its benchmark runs the student's program" {
    local c="$H/A-clone"
    cp "$ROOT/solutions/01_collectives/collectives.c" "$c/labs/01_collectives/"
    run t 300 make -s -C "$c" grade LAB=01
    echo "$output"
    [ "$status" -eq 0 ]
    [ "$(sed -n 's/^total: //p' "$c/grader/out/report.txt")" = 14/14 ]
    run t 300 make -s -C "$c" bench-collectives BENCH_RANKS=2 BENCH_MAX=64K
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"runs build/labs/01_collectives/bench_collectives (the student's program"* ]]
    [[ "$output" == *"np2_ratio="* ]]
    is_png "$c/runs/01_collectives-allreduce-np2/busbw.png"
}

@test "handout: without lab 00's solution, lab 02 links the student's own lab 00" {
    local c="$H/B-clone"
    [ ! -e "$c/solutions" ]
    cmp "$c/build/earlier/00_single_device/backprop.o" "$c/build/labs/00_single_device/backprop.o"
    # lab 02 finished, lab 00 not: lab 02's case stops in lab 00's TODO
    cp "$ROOT/solutions/02_ddp/ddp.c" "$c/labs/02_ddp/"
    run t 300 make -s -C "$c" grade LAB=02 GRADE_FLAGS="--case 'naive, 2 ranks'"
    echo "$output"
    [ "$status" -ne 0 ]
    grep -qE '^02_ddp +naive, 2 ranks +0/3 +not implemented: layernorm_backward' "$c/grader/out/report.txt"
    # the benchmark of a lab whose solution is not here, asked for: one clear error
    run t 60 make -s -C "$c" bench-ddp BENCH_COPY=solutions
    [ "$status" -ne 0 ]
    [[ "$output" == *"bench-ddp: error: the solution of lab 02 is not in this handout: BENCH_COPY=labs runs your program"* ]]
}

@test "handout: without lab 09's solution, labs 00-08 link no lab 09: with it broken they build, run and grade; a checkpoint flag says they come with lab 09, --precision with lab 11 (and the grader leaves lab 04's bf16 case out), --attention fused with lab 05" {
    local c="$H/B-clone"
    # their checkpoints' stand-in (labs/09_checkpoint/lab.mk: absent)
    run make -s -C "$c" print-links
    [ "$status" -eq 0 ]
    [ "$(grep -cE '^0[0-8]_.* build/apps/no_checkpoints\.o' <<< "$output")" -eq 9 ]
    run grep -E '^0[0-8]_.*(checkpoints|checkpoint_shards)\.o' <<< "$(grep -v no_checkpoints <<< "$output")"
    [ "$status" -eq 1 ]
    cp "$c/labs/09_checkpoint/checkpoint_shards.c" "$BATS_TEST_TMPDIR/saved.c"
    echo 'this line is not C' >> "$c/labs/09_checkpoint/checkpoint_shards.c"
    local progs
    progs=$(make -s -C "$c" print-programs | awk '$1 ~ /^0[0-8]_/ { print "build/labs/" $1 "/" $2 }')
    run t 300 make -s -C "$c" $progs
    echo "$output"
    [ "$status" -eq 0 ]
    run t 60 "$c/build/labs/02_ddp/train_ddp" --steps 1 --save "$BATS_TEST_TMPDIR/ck"
    assert_user_error
    [[ "$output" == *"--save: this build has no checkpoints: they come with lab 09"* ]]
    [ ! -e "$BATS_TEST_TMPDIR/ck" ]
    # lab 11 the same way (labs/11_mixed_precision/lab.mk: absent): fp32 only
    run make -s -C "$c" print-links
    [ "$(grep -cE '^(0[0-9]|10)_.*train_.* build/apps/no_mixed_precision\.o' <<< "$output")" -eq 14 ]
    run t 60 "$c/build/labs/02_ddp/train_ddp" --steps 1 --precision bf16
    assert_user_error
    [[ "$output" == *"--precision bf16: this build has no mixed precision: it comes with lab 11"* ]]
    # and lab 05's fused attention (labs/05_activation_memory/lab.mk: absent) before lab 05
    run make -s -C "$c" print-links
    [ "$(grep -cE '^0[0-4]_.* build/apps/no_fused_attention\.o' <<< "$output")" -eq 5 ]
    run t 60 "$c/build/labs/02_ddp/train_ddp" --steps 1 --attention fused
    assert_user_error
    [[ "$output" == *"--attention fused: this build has no fused attention: it is lab 05's extension"* ]]
    # the untouched lab 01 grades (to zero, not implemented) with lab 09 broken
    run t 300 make -s -C "$c" grade LAB=01 GRADE_FLAGS="--case 'ring all-reduce, 2 ranks'"
    echo "$output"
    cp "$BATS_TEST_TMPDIR/saved.c" "$c/labs/09_checkpoint/checkpoint_shards.c"
    [ "$status" -ne 0 ]
    grep -qE '^01_collectives +ring all-reduce, 2 ranks +0/[0-9]+ +not implemented' "$c/grader/out/report.txt"
    # without lab 11 the grader leaves out lab 04's bf16 case (needs =
    # "11_mixed_precision"): the core's total counts the others only, and a
    # --case of it alone is an error
    run t 300 make -s -C "$c" grade LAB=04
    echo "$output"
    [[ "$output" == *"grade: not graded here: 04_tensor_parallel 'bf16 activations on the wire, tp 2, 2 ranks' (1 point) needs lab 11 (mixed precision)"* ]]
    [ "$(total_of "$c/grader/out/report.txt")" = 0/12 ]
    run t 60 make -s -C "$c" grade LAB=04 GRADE_FLAGS="--case bf16"
    [ "$status" -eq 2 ]
    [[ "$output" == *"grade: error: every case chosen needs a later lab this tree does not have yet"* ]]
}

@test "handout: a reduced make test in the clone ends green, skipping what needs solutions, planted bugs or untouched labs" {
    local c="$H/B-clone" s files=()
    for s in "${HANDOUT_SUITES[@]}"; do files+=("tests/$s.bats"); done
    # lab 06's generators written (built before the suites run side by side)
    cp "$ROOT/solutions/06_pipeline/schedules.c" "$c/labs/06_pipeline/"
    make -s -C "$c" -j2 all > /dev/null
    run t 900 bash "$c/tests/run.sh" "${files[@]}"
    printf '%s\n' "$output" | grep -E '^not ok|skip|passed' | head -120
    [ "$status" -eq 0 ]
    [[ "$output" == *" 0 failed, "* ]]
    [[ "$output" == *"# skip solution of lab 00 not released in this handout"* ]]
    [[ "$output" == *"# skip solution of lab 03 not released in this handout"* ]]
    [[ "$output" == *"# skip instructors only: grader/planted/ is not in a handout"* ]]
    [[ "$output" == *"# skip labs/02_ddp is no longer the untouched skeleton"* ]]
    [[ "$output" == *"# skip no lab in this handout has both its solution released and its skeleton untouched"* ]]
    # the student's own checks: lab 06's ran, the untouched ones are named
    [[ "$output" == *"# check: ok      build/labs/06_pipeline/check_schedules: check_schedules (lab 06): "*" checks, 0 failed"* ]]
    [[ "$output" == *"# checked: 06; untouched: 00 01 05 07 09 10 11"* ]]
    grep -qE "^ok [0-9]+ make test runs the student's own checks of every started lab [^#]*$" <<< "$output"
    # the untouched lab 00's skeleton tests still run
    local line
    line=$(grep -E '^ok [0-9]+ untouched lab 00 trainer builds' <<< "$output")
    [ -n "$line" ]
    [[ "$line" != *"# skip"* ]]
    # every suite in the list exists
    for s in "${files[@]}"; do [ -f "$c/$s" ]; done
}

# after the reduced make test: lab 06's generators are written, the rest untouched
@test "handout: make slides builds every deck: the charts of labs that do not run yet are placeholders saying so, lab 06's simulated schedules are drawn" {
    local c="$H/B-clone"
    run t 600 make -s -C "$c" slides
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"slides: skipped: lab 00 does not run yet: train_gpt: not implemented: layernorm_backward_cpu"* ]]
    [[ "$output" == *"slides: placeholders for lab 00 01 02 03 04 05 06 07 10: drawn once they run"* ]]
    for lab in "$ROOT"/labs/[0-9][0-9]_*/; do
        [ -s "$c/build/slides/$(basename "$lab").html" ]
    done
    # a placeholder is a small picture; the simulator's Gantt chart of the
    # student's 1F1B a real one
    is_png "$c/build/slides/fig/00/loss-tiny.png"
    [ "$(wc -c < "$c/build/slides/fig/00/loss-tiny.png")" -lt 30000 ]
    [ "$(wc -c < "$c/build/slides/fig/06/gantt-1f1b.png")" -gt 30000 ]
    grep -q "(lab 01 not run yet)" "$c/build/slides/fig/values.txt"
}
