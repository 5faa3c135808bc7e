#!/usr/bin/env bats
# The autograder (grader/): solutions score full marks, untouched skeletons
# score zero cleanly, planted bugs lose the points of the case they break,
# and the reports are valid and agree with the terminal table.
load helpers

GRADE="python3 $ROOT/grader/grade.py"

# total_of FILE: "got/best" from the report's last line
total_of() { sed -n 's/^total: //p' "$1"; }

@test "grader: the solutions score full marks on every case, against the committed references" {
    require_solution 00 01 02 03
    run t 900 $GRADE --src "$ROOT/solutions" --out "$BATS_TEST_TMPDIR/g"
    echo "$output"
    [ "$status" -eq 0 ]
    total=$(total_of "$BATS_TEST_TMPDIR/g/report.txt")
    [ "${total%/*}" = "${total#*/}" ]
    ! grep -E '^[0-9]{2}_[a-z0-9_]+ .* 0/' "$BATS_TEST_TMPDIR/g/report.txt"
    [[ "$output" == *"chart: "*"loss_vs_reference.png"* ]]
}

@test "grader: untouched skeletons score zero, each case saying not implemented" {
    require_untouched 00 01 02 03
    run t 900 $GRADE --src "$ROOT/labs" --out "$BATS_TEST_TMPDIR/g"
    echo "$output"
    [ "$status" -eq 0 ]
    [ "$(total_of "$BATS_TEST_TMPDIR/g/report.txt" | cut -d/ -f1)" = 0 ]
    cases=$(grep -cE '^[0-9]{2}_[a-z0-9_]+ ' "$BATS_TEST_TMPDIR/g/report.txt")
    [ "$cases" -gt 0 ]
    [ "$(grep -cE '^[0-9]{2}_.* 0/[0-9.]+ +not implemented: ' "$BATS_TEST_TMPDIR/g/report.txt")" -eq "$cases" ]
}

@test "grader: JUnit XML and results.json are valid and their totals match the table" {
    require_untouched 00
    run t 600 $GRADE --lab 00 --out "$BATS_TEST_TMPDIR/g"
    [ "$status" -eq 0 ]
    xmllint --noout "$BATS_TEST_TMPDIR/g/junit.xml"
    run python3 - "$BATS_TEST_TMPDIR/g" <<'PY'
import json, sys, xml.etree.ElementTree as ET
d = sys.argv[1]
res = json.load(open(f"{d}/results.json"))
table = open(f"{d}/report.txt").read().splitlines()
got, best = (float(x) for x in [l for l in table if l.startswith("total: ")][0][7:].split("/"))
assert abs(res["score"] - got) < 1e-9, (res["score"], got)
assert abs(sum(t["max_score"] for t in res["tests"]) - best) < 1e-9
assert all({"name", "score", "max_score", "output", "status"} <= set(t) for t in res["tests"])
suites = ET.parse(f"{d}/junit.xml").getroot()
cases = suites.findall("./testsuite/testcase")
assert len(cases) == len(res["tests"]), (len(cases), len(res["tests"]))
failed = sum(1 for c in cases if c.find("failure") is not None)
assert failed == sum(1 for t in res["tests"] if t["status"] == "failed")
assert failed == len(cases)   # the untouched skeleton fails everything
print("ok", len(cases), "cases")
PY
    echo "$output"
    [ "$status" -eq 0 ]
}

# Apply each planted bug (grader/planted/NN-*.patch, with an "Expect: CASE |
# REASON" line) to a scratch copy of the solutions and grade that one case.
@test "grader: every planted bug loses the points of its case, with the expected reason" {
    require_instructor "grader/planted/ is not in a handout"
    local n=0
    for patch in "$ROOT"/grader/planted/*.patch; do
        lab=$(basename "$patch" | cut -c1-2)
        labdir=$(basename "$ROOT"/solutions/"$lab"_*)
        expect=$(sed -n 's/^Expect: //p' "$patch")
        case_name=${expect% | *}
        reason=${expect#* | }
        src="$BATS_TEST_TMPDIR/src-$(basename "$patch" .patch)"
        mkdir -p "$src"
        cp -r "$ROOT/solutions/$labdir" "$src/"
        patch -s -d "$src/$labdir" -p1 < "$patch"
        run t 300 $GRADE --lab "$lab" --src "$src" --case "$case_name" --timeout-scale 0.25 \
            --out "$BATS_TEST_TMPDIR/out-$(basename "$patch" .patch)"
        line=$(printf '%s\n' "$output" | grep -E "^$labdir +$case_name +[0-9]")
        echo "$(basename "$patch"): $line"
        [ "$status" -eq 0 ]
        [[ "$line" != *" ok" ]]
        [[ "$line" == *"$reason"* ]] || { echo "expected reason: $reason"; return 1; }
        # a timed-out or crashed case leaves no rank behind
        ! pgrep -f "$BATS_TEST_TMPDIR/out-" > /dev/null
        n=$((n + 1))
    done
    [ "$n" -ge 8 ]
}

@test "grader: --hidden compares live with the solutions on randomized cases" {
    require_instructor "grader/planted/ is not in a handout"
    run t 600 $GRADE --lab 00 --hidden --hidden-seed 7 --src "$ROOT/solutions" --out "$BATS_TEST_TMPDIR/g"
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"hidden mode, seed 7"* ]]
    [[ "$output" == *"train tiny [--batch "*"--seed "*"]"* ]]
    total=$(total_of "$BATS_TEST_TMPDIR/g/report.txt")
    [ "${total%/*}" = "${total#*/}" ]
    # a copy of the reference files cannot stand in for the run
    src="$BATS_TEST_TMPDIR/src"
    mkdir -p "$src" && cp -r "$ROOT/solutions/00_single_device" "$src/"
    patch -s -d "$src/00_single_device" -p1 < "$ROOT/grader/planted/00-bias-grad-doubled.patch"
    run t 600 $GRADE --lab 00 --hidden --hidden-seed 7 --src "$src" --case "train tiny" --out "$BATS_TEST_TMPDIR/g2"
    echo "$output"
    [[ "$output" == *"loss: "* ]]
}

@test "grader: regenerating the references reproduces the committed ones" {
    require_solution 00 01 02 03
    run t 600 $GRADE --make-references --reference-out "$BATS_TEST_TMPDIR/ref" --out "$BATS_TEST_TMPDIR/g"
    echo "$output"
    [ "$status" -eq 0 ]
    # memory is exact byte for byte; calls and bytes of comm.csv exactly (its
    # seconds column is a timing); losses within the grader's tolerance
    for f in $(cd "$ROOT/grader/reference" && find . -name memory.csv); do
        cmp "$ROOT/grader/reference/$f" "$BATS_TEST_TMPDIR/ref/$f"
    done
    run python3 - "$ROOT/grader" "$BATS_TEST_TMPDIR/ref" <<'PY'
import os, sys
sys.path.insert(0, sys.argv[1]); sys.dont_write_bytecode = True
import compare
ref = os.path.join(sys.argv[1], "reference")
for lab in os.listdir(ref):
    for case in os.listdir(os.path.join(ref, lab)):
        a = os.path.join(ref, lab, case)
        for name, check in (("metrics.csv", compare.check_losses), ("comm.csv", compare.check_comm)):
            if os.path.exists(os.path.join(a, name)):
                r = check(os.path.join(sys.argv[2], lab, case), a)
                assert r is None, f"{lab}/{case}: {r}"
print("ok")
PY
    echo "$output"
    [ "$status" -eq 0 ]
}

@test "grader: a lab that does not exist, or a bad option, is one clear error" {
    run t 60 $GRADE --lab 42
    assert_user_error
    run t 60 $GRADE --timeout-scale 0
    assert_user_error
    run t 60 $GRADE --src /nonexistent
    assert_user_error
}

@test "grader: Gradescope's run_autograder grades a submission of single files into results.json" {
    require_solution 00
    local ag="$BATS_TEST_TMPDIR/ag"
    mkdir -p "$ag/submission"
    ln -s "$ROOT" "$ag/source"
    cp "$ROOT/solutions/00_single_device/backprop.c" "$ag/submission/"
    AUTOGRADER_ROOT="$ag" LAB=00 run t 600 bash "$ROOT/grader/gradescope/run_autograder"
    echo "$output"
    [ "$status" -eq 0 ]
    run python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(d['score'], sum(t['max_score'] for t in d['tests']))" \
        "$ag/results/results.json"
    echo "$output"
    [ "${output% *}" = "${output#* }" ]
    [ "${output% *}" != 0 ]
}
