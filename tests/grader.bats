#!/usr/bin/env bats
# The autograder (grader/): solutions score full marks, untouched skeletons
# score zero cleanly, planted bugs lose the points of the case they break,
# and the reports are valid and agree with the terminal table.
# (The planted bugs: tests/grader_planted.bats; the cheats and the
# isolation: tests/grader_cheat.bats.)
load helpers

# grade_full LAB: the solutions of lab LAB graded against the committed
# references score full marks on every case (prints the grader's output)
grade_full() {
    local out="$BATS_TEST_TMPDIR/g-$1" total
    t 600 $GRADE --lab "$1" --src "$ROOT/solutions" --out "$out" ||
        { echo "lab $1: the grader failed"; return 1; }
    total=$(total_of "$out/report.txt")
    [ -n "$total" ] && [ "${total%/*}" = "${total#*/}" ] || { echo "lab $1: $total"; return 1; }
    ! grep -E '^[0-9]{2}_[a-z0-9_]+ .* 0/' "$out/report.txt" || { echo "lab $1: a case scored 0"; return 1; }
}

@test "grader: the solutions score full marks on every case, against the committed references" {
    require_solution 00 01 02 03 04 05 06 07 08 09 10
    local labs
    labs=$(cd "$ROOT/grader/cases" && ls ./*.toml | cut -c3-4)
    [ "$(wc -w <<<"$labs")" -ge 11 ]
    # shellcheck disable=SC2086  # labs is a list
    in_pairs "$BATS_TEST_TMPDIR/full" grade_full $labs
    grep -q "chart: .*loss_vs_reference.png" "$BATS_TEST_TMPDIR"/full/*.txt
}

# grade_zero LAB: the untouched skeleton of lab LAB scores zero, every case
# saying not implemented, and the grader exits 1 (points lost)
grade_zero() {
    local out="$BATS_TEST_TMPDIR/z-$1" rc=0 cases
    output=$(t 600 $GRADE --lab "$1" --src "$ROOT/labs" --out "$out" 2>&1) || rc=$?
    echo "$output"
    [ "$rc" -eq 1 ] || { echo "lab $1: exit status $rc, not 1"; return 1; }
    [[ "$output" == *"grade: 0/"*" is under --fail-under 100% ("*" points): exit status 1" ]] ||
        { echo "lab $1: no --fail-under line"; return 1; }
    [ "$(total_of "$out/report.txt" | cut -d/ -f1)" = 0 ] || { echo "lab $1: not 0"; return 1; }
    cases=$(case_rows "$out/report.txt" | wc -l)
    [ "$cases" -gt 0 ] && [ "$(case_rows "$out/report.txt" | grep -cE ' 0/[0-9.]+ +not implemented: ')" -eq "$cases" ] ||
        { echo "lab $1: a case without its not implemented"; return 1; }
}

@test "grader: untouched skeletons score zero, each case saying not implemented" {
    require_untouched 00 01 02 03 04 05 06 07 08 09 10 11
    local labs
    labs=$(cd "$ROOT/grader/cases" && ls ./*.toml | cut -c3-4)
    # shellcheck disable=SC2086  # labs is a list
    in_pairs "$BATS_TEST_TMPDIR/zero" grade_zero $labs
}

@test "grader: JUnit XML and results.json are valid and their totals match the table" {
    require_untouched 00
    run t 600 $GRADE --lab 00 --out "$BATS_TEST_TMPDIR/g"
    [ "$status" -eq 1 ]
    xmllint --noout "$BATS_TEST_TMPDIR/g/junit.xml"
    run python3 - "$BATS_TEST_TMPDIR/g" <<'PY'
import json, sys, xml.etree.ElementTree as ET
d = sys.argv[1]
res = json.load(open(f"{d}/results.json"))
table = open(f"{d}/report.txt").read().splitlines()
def pair(prefix):   # "total: 0/12" (the core), "extensions: 0/3"
    line = [l for l in table if l.startswith(prefix)]
    return tuple(float(x) for x in line[0][len(prefix):].split("/")) if line else (0.0, 0.0)
(got, best), (ext_got, ext_best) = pair("total: "), pair("extensions: ")
assert ext_best > 0   # lab 00 has an extension case, listed as a test of its own
assert abs(res["score"] - got - ext_got) < 1e-9, (res["score"], got, ext_got)
assert abs(sum(t["max_score"] for t in res["tests"]) - best - ext_best) < 1e-9
assert all({"name", "score", "max_score", "output", "output_format", "status"} <= set(t)
           for t in res["tests"])
assert res["output_format"] == "md" and res["output"].startswith("```\nlab ")   # the table, verbatim
assert isinstance(res["execution_time"], int) and res["execution_time"] >= 0
suites = ET.parse(f"{d}/junit.xml").getroot()
cases = suites.findall("./testsuite/testcase")
assert len(cases) == len(res["tests"]), (len(cases), len(res["tests"]))
failed = sum(1 for c in cases if c.find("failure") is not None)
skipped = [c.get("name") for c in cases if c.find("skipped") is not None]
# the untouched skeleton fails every core case; its optional extension is
# not attempted, so CI shows it as skipped
assert skipped and all(s.startswith("extension: ") for s in skipped), skipped
assert failed + len(skipped) == len(cases) == sum(1 for t in res["tests"] if t["status"] == "failed")
suite = suites.find("testsuite")
assert (suite.get("failures"), suite.get("skipped")) == (str(failed), str(len(skipped)))
for c, t in zip(cases, res["tests"]):   # the points, where CI viewers show them
    assert c.find("system-out").text.startswith(f"0/{t['max_score']:g} points: not implemented: ")
    assert t["output"].startswith(f"**0/{t['max_score']:g} points**: not implemented: ")
print("ok", len(cases), "cases,", len(skipped), "skipped")
PY
    echo "$output"
    [ "$status" -eq 0 ]
}

@test "grader: --hidden compares live with the solutions on randomized cases" {
    require_instructor "grader/planted/ is not in a handout"
    run t 600 $GRADE --lab 00 --hidden --hidden-seed 7 --src "$ROOT/solutions" --out "$BATS_TEST_TMPDIR/g"
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"hidden mode, seed 7"* ]]
    [[ "$output" == *"train tiny [--batch "*"--n-layer "*"--seed "*"]"* ]]
    total=$(total_of "$BATS_TEST_TMPDIR/g/report.txt")
    [ "${total%/*}" = "${total#*/}" ]
    # a copy of the reference files cannot stand in for the run
    src="$BATS_TEST_TMPDIR/src"
    mkdir -p "$src" && cp -r "$ROOT/solutions/00_single_device" "$src/"
    patch -s -d "$src/00_single_device" -p1 < "$ROOT/grader/planted/00-bias-grad-doubled.patch"
    run t 600 $GRADE --lab 00 --hidden --hidden-seed 7 --src "$src" --case "train tiny" --out "$BATS_TEST_TMPDIR/g2"
    echo "$output"
    [ "$status" -eq 1 ]
    [[ "$output" == *"loss: "* ]]
}

# Lab 01's extension is scored apart from the core: the untouched skeleton's
# extension cases say "not implemented" and leave the core's total alone;
# in hidden mode the solutions score full marks on it too, and every draw of
# the 4-rank case (4 or 8 ranks) catches the planted all-gather bug.
@test "grader: lab 01's extension scores apart from the core; --hidden grades it and catches its planted bug" {
    require_untouched 01
    require_instructor "grader/planted/ is not in a handout"
    local report="$BATS_TEST_TMPDIR/s/report.txt" seed line
    run t 300 $GRADE --lab 01 --out "$BATS_TEST_TMPDIR/s"
    echo "$output"
    [ "$status" -eq 1 ]
    [ "$(grep -cE '^01_collectives +extension: halving-doubling all-reduce, [0-9] ranks +0/[0-9]+ +not implemented: halving_doubling_allreduce$' "$report")" -eq 3 ]
    [ "$(total_of "$report")" = "$(sed -n 's/^01_collectives: //p' "$report")" ]
    [[ "$(sed -n 's/^extensions: //p' "$report")" == 0/[1-9]* ]]
    run t 300 $GRADE --lab 01 --hidden --hidden-seed 5 --src "$ROOT/solutions" --out "$BATS_TEST_TMPDIR/h"
    echo "$output"
    [ "$status" -eq 0 ]
    line=$(sed -n 's/^extensions: //p' "$BATS_TEST_TMPDIR/h/report.txt")
    [ -n "$line" ] && [ "${line%/*}" = "${line#*/}" ]
    local src="$BATS_TEST_TMPDIR/src"
    mkdir -p "$src" && cp -r "$ROOT/solutions/01_collectives" "$src/"
    patch -s -d "$src/01_collectives" -p1 < "$ROOT/grader/planted/01-halving-allgather-wrong-order.patch"
    for seed in 1 3; do   # they draw 8 and 4 ranks
        run t 300 $GRADE --lab 01 --hidden --hidden-seed $seed --src "$src" \
            --case "halving-doubling all-reduce, 4 ranks" --out "$BATS_TEST_TMPDIR/p$seed"
        line=$(printf '%s\n' "$output" | grep -E '^01_collectives +extension: halving-doubling all-reduce, [0-9]+ ranks \[')
        echo "seed $seed: $line"
        [ "$status" -eq 1 ]   # only the extension's case is graded: its points count
        [[ "$line" == *" 0/1 "*"FAIL"* ]]
    done
}

@test "grader: hidden draws vary ranks (padded ones too), micro-batches and shape, always a valid batch" {
    run python3 - "$ROOT/grader" <<'PY'
import random, sys
sys.path.insert(0, sys.argv[1]); sys.dont_write_bytecode = True
import grade


def draws(name):
    """Every case of lab name drawn 50 times (one generator seeded 1, as a
    grading run draws), each as (case, draw, v): v(flag, default) is the
    flag's value in the draw, default when it is absent."""
    lab = grade.load_lab(f"{sys.argv[1]}/cases/{name}.toml")
    rng = random.Random(1)
    for _ in range(50):
        for c in lab.cases:
            d = grade.draw_case(c, rng)
            yield c, d, lambda flag, default=None, args=d.args: grade.flag_value(args, flag) or default


seen = {"ranks": set(), "k_ne_n": 0, "shapes": set()}
for name in ("02_ddp", "03_zero"):
    for c, d, v in draws(name):
        k, b = int(v("--grad-accum", 1)), int(v("--batch"))
        assert b % (d.ranks * k) == 0, (c.name, d.label)
        h, e = int(v("--n-head")), int(v("--n-embd"))
        assert e % h == 0 and d.label.startswith("[-np "), d.label
        seen["ranks"].add(d.ranks)
        seen["k_ne_n"] += k not in (1, d.ranks)
        seen["shapes"].add((v("--n-layer"), h, e))
assert {2, 3, 4} <= seen["ranks"], seen
assert seen["k_ne_n"] > 10 and len(seen["shapes"]) > 6, seen
# lab 04: --tp divides the heads and the ranks (dp = ranks / tp) on every
# draw, and a case about padding always draws a vocabulary --tp pads
tp_seen = {"tp": set(), "dp": set(), "shapes": set()}
for c, d, v in draws("04_tensor_parallel"):
    k, b, tp = int(v("--grad-accum", 1)), int(v("--batch")), int(v("--tp"))
    h, e = int(v("--n-head")), int(v("--n-embd"))
    assert tp >= 2 and d.ranks % tp == 0 and h % tp == 0 and e % h == 0, (c.name, d.label)
    assert b % (d.ranks // tp * k) == 0, (c.name, d.label)
    if "padded" in c.name:
        assert int(v("--vocab")) % tp != 0, (c.name, d.label)
    tp_seen["tp"].add(tp)
    tp_seen["dp"].add(d.ranks // tp)
    tp_seen["shapes"].add((v("--n-layer"), h, e))
assert tp_seen["tp"] == {2, 4} and {1, 2, 3} <= tp_seen["dp"] and len(tp_seen["shapes"]) > 6, tp_seen
# lab 05: every training case runs --sp (or the extension's --sp-regather),
# --recompute or the extension's --attention fused (without any its programs
# never call the lab's file), fused over more than one key tile of 256; under
# SP, tp >= 2 divides the heads, the ranks and the sequence; the
# mid-sequence case's micro-batches split rows inside a sequence (B % tp !=
# 0); a recomputation always has 2 blocks or more (tiny: 8 sequences, 4
# heads, 64 channels, 4 blocks, 64 tokens where a flag is absent)
sp_seen = {"tp": set(), "modes": set(), "shapes": set()}
for c, d, v in draws("05_activation_memory"):
    if c.kind == "check":   # check_act: the layernorm sum alone, no draw
        continue
    k, b, tp = int(v("--grad-accum", 1)), int(v("--batch", 8)), int(v("--tp", 1))
    h, e = int(v("--n-head", 4)), int(v("--n-embd", 64))
    sp, mode = "--sp" in d.args or "--sp-regather" in d.args, v("--recompute")
    fused = v("--attention") == "fused"
    assert sp or mode or fused, (c.name, d.label)
    if fused:
        assert int(v("--seq")) > 256, (c.name, d.label)
    assert d.ranks % tp == 0 and h % tp == 0 and e % h == 0 and b % (d.ranks // tp * k) == 0, \
        (c.name, d.label)
    if sp:
        assert tp >= 2 and int(v("--seq", 64)) % tp == 0, (c.name, d.label)
    if "mid-sequence" in c.name:
        assert sp and b // (d.ranks // tp * k) % tp != 0, (c.name, d.label)
    if mode:
        assert int(v("--n-layer", 4)) >= 2, (c.name, d.label)
    sp_seen["tp"].add(tp)
    sp_seen["modes"].add((sp, mode, c.program, c.extension))
    sp_seen["shapes"].add((v("--n-layer"), h, e))
assert sp_seen["tp"] == {1, 2, 4} and len(sp_seen["modes"]) == 9 and len(sp_seen["shapes"]) > 6, sp_seen
# lab 06: every draw is a pipeline (pp >= 2) with room for its mesh (ranks
# = tp pp dp), a batch of dp m whole micro-batches, a depth that cuts into pp
# x chunks stages, heads tp divides; the interleaved schedule has 2 chunks or
# more and m a multiple of pp, the others one chunk; m >= 2 (1F1B's steady
# state), m >= pp at pp 4 (every rank reaches it), except in the cases
# about m < p - 1, which always draw it (every rank's warm-up cut to m)
pp_seen = {"schedules": set(), "meshes": set(), "shapes": set()}
for c, d, v in draws("06_pipeline"):
    pp, tp, sched = int(v("--pp")), int(v("--tp", 1)), v("--schedule")
    m, b, chunks = int(v("--micro-batches")), int(v("--batch", 8)), v("--chunks")
    chunks = int(chunks) if chunks else (2 if sched == "interleaved" else 1)
    h, e, layers = int(v("--n-head", 4)), int(v("--n-embd", 64)), int(v("--n-layer", 4))
    assert pp >= 2 and d.ranks % (tp * pp) == 0, (c.name, d.label)
    dp = d.ranks // (tp * pp)
    assert b % (dp * m) == 0 and layers % (pp * chunks) == 0, (c.name, d.label)
    assert h % tp == 0 and e % h == 0, (c.name, d.label)
    if ", m 2," in c.name:
        assert m < pp - 1, (c.name, d.label)
    else:
        assert m >= 2 and (pp < 4 or m >= pp), (c.name, d.label)
    if sched == "interleaved":
        assert chunks >= 2 and m % pp == 0, (c.name, d.label)
    elif sched == "dualpipe":  # stages r and pp-1-r on each rank, m / 2 from each end
        assert pp % 2 == 0 and m % 2 == 0 and m >= 2 * pp and layers % pp == 0, (c.name, d.label)
    else:
        assert chunks == 1, (c.name, d.label)
    pp_seen["schedules"].add((sched, c.extension))
    pp_seen["meshes"].add((pp, tp, dp))
    pp_seen["shapes"].add((layers, h, e))
assert len(pp_seen["schedules"]) == 6 and len(pp_seen["meshes"]) >= 4, pp_seen
assert len(pp_seen["shapes"]) > 6, pp_seen
# lab 07: every draw splits the sequence (cp >= 2) with room for its mesh
# (ranks = tp cp dp), a sequence of whole chunks (a multiple of cp, of 2 cp
# under zigzag) within tiny's context of 64, heads tp divides (tp cp under
# Ulysses), a batch of dp K whole micro-batches; each case keeps its
# algorithm and degree (the composed cases and cp 3 draw the algorithm)
cp_seen = {"algos": set(), "meshes": set(), "shapes": set(), "seqs": set()}
for c, d, v in draws("07_context_parallel"):
    cp, tp, algo = int(v("--cp")), int(v("--tp", 1)), v("--cp-algo")
    k, b, seq = int(v("--grad-accum", 1)), int(v("--batch", 8)), int(v("--seq", 64))
    h, e = int(v("--n-head", 4)), int(v("--n-embd", 64))
    assert cp >= 2 and d.ranks % (tp * cp) == 0, (c.name, d.label)
    dp = d.ranks // (tp * cp)
    assert b % (dp * k) == 0 and e % h == 0 and h % tp == 0, (c.name, d.label)
    assert seq <= 64 and seq % (2 * cp if algo == "zigzag" else cp) == 0, (c.name, d.label)
    if algo == "ulysses":
        assert h % (tp * cp) == 0, (c.name, d.label)
    if not ("x cp" in c.name or "cp 3" in c.name):
        assert c.name.startswith(algo + ",") and f"cp {cp}," in c.name, (c.name, d.label)
    cp_seen["algos"].add((algo, c.extension))
    cp_seen["meshes"].add((cp, tp, dp))
    cp_seen["shapes"].add((v("--n-layer"), h, e))
    cp_seen["seqs"].add(seq)
assert len(cp_seen["algos"]) == 4 and len(cp_seen["meshes"]) >= 6, cp_seen
assert len(cp_seen["shapes"]) > 6 and len(cp_seen["seqs"]) > 6, cp_seen
# lab 08: every draw splits the experts (ep >= 2, E a multiple of ep) with
# dp = ranks / tp a multiple of ep and the batch whole per DP rank
# (tiny-moe: 8 sequences, 4 heads, E = 4, k = 2, capacity 1.25 where a flag
# is absent), tp dividing the heads, k <= E; each case keeps its ep and tp,
# the dropless case its capacity of 0, the top-1 case k = 1, the 8-expert
# case E = 8 (two experts per rank or more)
import re
ep_seen = {"meshes": set(), "ek": set(), "caps": set()}
for c, d, v in draws("08_moe"):
    ep, e, k = int(v("--ep")), int(v("--experts", 4)), int(v("--top-k", 2))
    cf, b, tp = float(v("--capacity-factor", 1.25)), int(v("--batch", 8)), int(v("--tp", 1))
    dp = d.ranks // tp
    assert d.ranks % tp == 0 and 4 % tp == 0 and (tp > 1) == ("tp " in c.name), (c.name, d.label)
    assert ep >= 2 and e % ep == 0 and dp % ep == 0 and b % dp == 0, (c.name, d.label)
    assert 1 <= k <= 2 <= e and cf in (0, 1.0, 1.25, 2.0), (c.name, d.label)
    assert re.search(rf"\bep {ep}\b", c.name), (c.name, d.label)
    if "dropless" in c.name:
        assert cf == 0, (c.name, d.label)
    if "top-1" in c.name:
        assert k == 1, (c.name, d.label)
    if "8 experts" in c.name:
        assert e == 8 and k == 2, (c.name, d.label)
    ep_seen["meshes"].add((tp, ep, dp // ep))
    ep_seen["ek"].add((e, k))
    ep_seen["caps"].add(cf)
assert ep_seen["meshes"] == {(1, 2, 1), (1, 2, 2), (1, 4, 1), (1, 4, 2), (2, 2, 1)}, ep_seen
assert len(ep_seen["ek"]) == 4 and len(ep_seen["caps"]) == 4, ep_seen
# lab 09: a resumed case's first command (the layout that saves) gets the
# same drawn flags as its own (seed and shape: the checkpoint must be of
# the model the second command builds), layers even (PP 2), heads even (TP 2)
ck_seen = set()
for c, d, v in draws("09_checkpoint"):
    if c.kind != "train":
        continue
    argvs = grade.case_argvs(c, d, {p: p for p in ("train_gpt", "train_zero", "train_tp", "train_pp")}, "/o")
    assert len(argvs) == 2 and "--save" in argvs[0] and "--resume" in argvs[1], (c.name, argvs)
    for flag in ("--seed", "--n-layer", "--n-head", "--n-embd"):
        assert grade.flag_value(argvs[0], flag) == grade.flag_value(argvs[1], flag) == v(flag), (c.name, flag, argvs)
    assert int(v("--n-layer")) % 2 == 0 and int(v("--n-head")) % 2 == 0, (c.name, d.label)
    ck_seen.add((c.name, v("--seed"), v("--n-layer"), v("--n-head")))
assert len(ck_seen) > 20, ck_seen
# a training case on several ranks must check that the ranks agree
import os, tempfile
bad = os.path.join(tempfile.mkdtemp(), "02_ddp.toml")
case = '[[case]]\nname = "x"\nkind = "train"\nprogram = "train_ddp"\nranks = 2\npoints = 1\n'
for text, why in ((case + 'checks = ["loss"]\n', "consistency"),
                  (case.replace("train_ddp", "train_zero"), "not one of labs/02_ddp/lab.mk's programs (train_ddp)"),
                  ('link = ["x.o"]\n' + case, "its manifest's (labs/02_ddp/lab.mk)")):
    with open(bad, "w") as f:
        f.write(text)
    try:
        grade.load_lab(bad)
        raise SystemExit(f"accepted {text!r}")
    except grade.ManifestError as e:
        assert why in str(e), e
for table in ({"ranks": [0]}, {"seed": [1]}, {"--n-head --n-embd": [[2]]}, {"--seed": []}):
    try:
        grade.parse_hidden("x", table)
        raise SystemExit(f"accepted {table}")
    except grade.ManifestError:
        pass
os.remove(bad)
print("ok", sorted(seen["ranks"]), seen["k_ne_n"], len(seen["shapes"]))
PY
    echo "$output"
    [ "$status" -eq 0 ]
}

@test "grader: a program that stops itself with fatal: file:line: ... gets that line as its reason" {
    run python3 - "$ROOT/grader" <<'PY'
import sys
sys.path.insert(0, sys.argv[1]); sys.dont_write_bytecode = True
import runner
out = ("train_ddp: config tiny\nstep 1/20 | loss 5.5\n"
       "train_ddp: fatal: apps/train_ddp.c:63: the parameters differ across ranks after step 0\n"
       "train_ddp: fatal: apps/train_ddp.c:63: the parameters differ across ranks after step 0\n")
r = runner.RunResult(1, False, 1.0, out).failure(60)
assert r == "fatal: apps/train_ddp.c:63: the parameters differ across ranks after step 0", r
assert runner.RunResult(1, False, 1.0, "x FAIL y\n").failure(60) == "exited with status 1: x FAIL y"
print("ok")
PY
    echo "$output"
    [ "$status" -eq 0 ]
    # and a real one: the trainer's own consistency check, on the planted bucket bug
    require_instructor "grader/planted/ is not in a handout"
    require_solution 02
    local src="$BATS_TEST_TMPDIR/src"
    mkdir -p "$src" && cp -r "$ROOT/solutions/02_ddp" "$src/"
    patch -s -d "$src/02_ddp" -p1 < "$ROOT/grader/planted/02-bucket-shifted-one-float.patch"
    run python3 - "$ROOT/grader" "$src" "$BATS_TEST_TMPDIR/out" <<'PY'
import sys
sys.path.insert(0, sys.argv[1]); sys.dont_write_bytecode = True
import grade, runner
lab = grade.load_lab(f"{sys.argv[1]}/cases/02_ddp.toml")
progs, why = runner.build_lab(f"{sys.argv[2]}/02_ddp", lab, f"{sys.argv[3]}/build")
assert why is None, why
res = runner.run(runner.mpirun_argv(2, [progs["train_ddp"], "--ddp", "bucketed", "--bucket-mb", "0.1",
                 "--steps", "3", "--threads", "1", "--check-consistency", "1",
                 "--out", f"{sys.argv[3]}/run"]), 120)
print(res.failure(120))
PY
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == "fatal: apps/train_ddp.c:"*": the parameters differ across ranks after step 0" ]]
}

# The references that keep a summary of the trace (lab 03's overlap counts,
# lab 06's compute order, lab 07's ring overlap) and lab 10's placement,
# regenerated for one case of each kind: the same files as the committed
# ones, written by --make-references' own path. That every case's
# references still hold is the full-marks test's: a fresh run of each
# solution meets them, through the same checks and summaries.
# make_references LAB[:CASE]: lab LAB's references (only CASE's, given),
# made again into $BATS_TEST_TMPDIR/ref
make_references() {
    local lab=${1%%:*} only=()
    [ "$lab" = "$1" ] || only=(--case "${1#*:}")
    t 600 $GRADE --lab "$lab" "${only[@]}" --make-references --reference-out "$BATS_TEST_TMPDIR/ref" \
        --out "$BATS_TEST_TMPDIR/g-$lab"
}

@test "grader: regenerating the references reproduces the committed ones" {
    require_solution 00 02 03 04 05 06 07 09 10
    in_pairs "$BATS_TEST_TMPDIR/make" make_references "03:overlapped reduce-scatter" \
        "06:zb-h1, pp 4, m 2, 4 ranks" "07:zigzag, cp 4, 4 ranks" "10:dp 2 x tp 2 x pp 2"
    # memory is exact byte for byte; calls and bytes of comm.csv exactly (its
    # seconds column is a timing); losses within the grader's tolerance; every
    # rank's parameters alike, on as many ranks
    for f in $(cd "$BATS_TEST_TMPDIR/ref" && find . -name memory.csv); do
        cmp "$ROOT/grader/reference/$f" "$BATS_TEST_TMPDIR/ref/$f"
    done
    [ "$(cd "$BATS_TEST_TMPDIR/ref" && ls)" = "$(printf '%s\n' 03_zero 06_pipeline 07_context_parallel 10_composed)" ]
    run python3 - "$ROOT/grader" "$BATS_TEST_TMPDIR/ref" <<'PY'
import os, sys
sys.path.insert(0, sys.argv[1]); sys.dont_write_bytecode = True
import compare
ref = os.path.join(sys.argv[1], "reference")
for lab in os.listdir(sys.argv[2]):
    made = sorted(os.listdir(os.path.join(sys.argv[2], lab)))
    assert set(made) <= set(os.listdir(os.path.join(ref, lab))), (lab, made)
    for case in made:
        a = os.path.join(ref, lab, case)
        for name, check in (("metrics.csv", compare.check_losses), ("comm.csv", compare.check_comm),
                            ("params_checksum.csv", compare.check_consistency)):
            if os.path.exists(os.path.join(a, name)):
                r = check(os.path.join(sys.argv[2], lab, case), a)
                assert r is None, f"{lab}/{case}: {r}"
        # the overlap counts (DDP's, the ring's) and the schedules' compute
        # orders are orders of calls: the same on any machine
        for name in ("overlap.csv", "schedule.csv", "ring_overlap.csv"):
            if os.path.exists(os.path.join(a, name)):
                assert open(os.path.join(a, name)).read() == \
                    open(os.path.join(sys.argv[2], lab, case, name)).read(), f"{lab}/{case}/{name}"
print("ok")
PY
    echo "$output"
    [ "$status" -eq 0 ]
}

@test "grader: a lab that does not exist, or a bad option, is one clear error" {
    run t 60 $GRADE --lab 42
    assert_user_error
    # --core leaves the extensions' cases out
    run t 60 $GRADE --lab 03 --core --case "Hybrid sharding"
    assert_user_error
    [[ "$output" == "grade: error: no case matches 'Hybrid sharding' in the core" ]]
    run t 60 $GRADE --timeout-scale 0
    assert_user_error
    run t 60 $GRADE --src /nonexistent
    assert_user_error
    run t 60 $GRADE --lab 01 --fail-under 80x
    assert_user_error
    run t 60 $GRADE --lab 01 --fail-under 15   # lab 01's core gives 14 points
    assert_user_error
    [[ "$output" == "grade: error: --fail-under 15 is more than the 14 points the graded cases give: every run would fail" ]]
}

# What --fail-under compares, and the reports written after each case: a
# grader killed at a time limit leaves the finished cases scored, the rest
# marked as not reached
@test "grader: --fail-under counts the core's points; reports rewritten after each case mark the rest not reached" {
    run python3 - "$ROOT/grader" "$BATS_TEST_TMPDIR" <<'PY'
import json, sys, types
sys.path.insert(0, sys.argv[1]); sys.dont_write_bytecode = True
import grade, reports
lab = grade.load_lab(f"{sys.argv[1]}/cases/01_collectives.toml")
core = sum(c.points for c in lab.cases if not c.extension)
assert grade.fail_under("100%", [lab]) == core - 1e-9
assert abs(grade.fail_under("50%", [lab]) - core / 2) < 1e-6 and grade.fail_under("0", [lab]) < 0
assert abs(grade.fail_under("7.5", [lab]) - 7.5) < 1e-6
R = lambda c, pts: reports.Result(c.name, pts, c.points, [] if pts == c.points else ["x"], 1.0, "",
                                  extension=c.extension)
full = {lab.name: [R(c, 0.0 if c.extension else c.points) for c in lab.cases]}
assert grade.scored(full) == (core, core)   # an extension lost: the core is whole
only_ext = {lab.name: [R(c, 0.0) for c in lab.cases if c.extension]}
assert grade.scored(only_ext)[0] == 0 and grade.scored(only_ext)[1] > 0
args = types.SimpleNamespace(out=sys.argv[2], results=f"{sys.argv[2]}/gs/results.json", hidden=False)
import os; os.makedirs(f"{sys.argv[2]}/gs")
progress = grade.Progress(args, [lab])
progress.add(lab, R(lab.cases[0], lab.cases[0].points))   # one case done, then killed
for path in (f"{sys.argv[2]}/results.json", args.results):
    res = json.load(open(path))
    assert res["score"] == lab.cases[0].points and len(res["tests"]) == len(lab.cases)
    assert [t["status"] for t in res["tests"]][:2] == ["passed", "failed"]
    assert reports.NOT_REACHED in res["tests"][1]["output"]
    assert f"(partial: 1 of {len(lab.cases)} cases graded so far)" in res["output"]
assert "partial: 1 of" in open(f"{sys.argv[2]}/report.txt").read()
print("ok")
PY
    echo "$output"
    [ "$status" -eq 0 ]
}

@test "grader: --hidden or --make-references in a handout without the solutions: one clear error, before any work" {
    require_instructor "make handout runs in the instructor's tree"
    local h="$BATS_TEST_TMPDIR/h" out="$BATS_TEST_TMPDIR/out"
    make -s -C "$ROOT" handout DEST="$h" RELEASED=none > /dev/null
    run t 60 python3 "$h/grader/grade.py" --lab 06 --hidden --out "$out"
    echo "$output"
    assert_user_error
    [[ "$output" == "grade: error: --hidden runs the solutions, and 06_pipeline's are not here (no directory $h/solutions/06_pipeline;"* ]]
    [ ! -e "$out" ]
    run t 60 python3 "$h/grader/grade.py" --make-references --reference-out "$out/ref" --out "$out"
    echo "$output"
    assert_user_error
    [[ "$output" == "grade: error: --make-references runs the solutions, and 00_single_device's are not here"* ]]
    [ ! -e "$out" ]
}

@test "grader: logs and JUnit failure texts are plain lines: a progress bar redrawn in place keeps its last state" {
    run python3 - "$ROOT/grader" "$BATS_TEST_TMPDIR" <<'PY'
import sys
sys.path.insert(0, sys.argv[1]); sys.dont_write_bytecode = True
import reports, runner
res = runner.run(["bash", "-c", r"printf 'go\nstep 1 \rstep 2 \rstep 3\r\nFAIL\r\n'; exit 1"], 30)
assert res.output == "go\nstep 3\nFAIL\n", repr(res.output)
r = reports.Result("bar", 0.0, 1.0, [res.failure(30)], res.seconds, res.output)
reports.junit({"00_x": [r]}, f"{sys.argv[2]}/junit.xml")
xml = open(f"{sys.argv[2]}/junit.xml", newline="").read()
assert "\r" not in xml and "step 3\nFAIL" in xml, repr(xml)
print("ok")
PY
    echo "$output"
    [ "$status" -eq 0 ]
}

# `make gradescope`'s zip set up and run as Gradescope does: unpacked into
# /autograder/source (simulated under a temporary root, AUTOGRADER_ROOT),
# setup.sh run there, run_autograder copied to /autograder and run on a
# submission of single files. To keep this test short, the unpacked kit gets
# a copy of this tree's build, newer than its sources: setup.sh's make then
# finds it up to date (on Gradescope it builds it).
@test "grader: make gradescope's zip, unpacked and run as Gradescope does, grades a submission of single files into results.json" {
    require_instructor "make gradescope runs in the instructor's tree"
    require_solution 01
    local ag="$BATS_TEST_TMPDIR/autograder"
    run make -s -C "$ROOT" gradescope LAB=01
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == "gradescope: wrote build/gradescope/autograder-01_collectives.zip ("* ]]
    run make -s -C "$ROOT" gradescope LAB=all
    [ "$status" -eq 2 ]
    [[ "$output" == "gradescope: error: LAB must name one lab (a Gradescope assignment grades one), got 'all';"* ]]
    run python3 - "$ROOT/build/gradescope/autograder-01_collectives.zip" "$ag/source" <<'PY'
import os, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
for info in z.infolist():   # as unzip does: the files and their modes
    os.chmod(z.extract(info, sys.argv[2]), (info.external_attr >> 16) & 0o777)
names = set(z.namelist())
assert {"setup.sh", "run_autograder", "Makefile", "solutions/01_collectives/collectives.c"} <= names
assert not any(n.startswith(("grader/planted/", "build/")) for n in names)
print("unpacked", len(names))
PY
    echo "$output"
    [ "$status" -eq 0 ]
    grep -qx 'LAB=01' "$ag/source/run_autograder" && grep -qx 'LAB=01' "$ag/source/setup.sh"
    tar -C "$ROOT" --exclude=build/sanitize --exclude=build/gpu --exclude=build/fake_gpu \
        --exclude=build/gradescope -cf - build | tar -C "$ag/source" -xf -
    find "$ag/source/build" -exec touch {} +
    run t 300 bash "$ag/source/setup.sh"
    echo "$output"
    [ "$status" -eq 0 ]
    cp "$ag/source/run_autograder" "$ag/run_autograder"
    mkdir -p "$ag/submission"
    cp "$ROOT/solutions/01_collectives/collectives.c" "$ag/submission/"
    AUTOGRADER_ROOT="$ag" run t 600 "$ag/run_autograder"
    echo "$output"
    [ "$status" -eq 0 ]
    run python3 - "$ag/results/results.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
best = sum(t["max_score"] for t in d["tests"])
assert d["score"] == best > 0 and len(d["tests"]) == 16, (d["score"], best, len(d["tests"]))
assert all(t["status"] == "passed" and t["output_format"] == "md" for t in d["tests"])
assert d["output_format"] == "md" and isinstance(d["execution_time"], int)
print("ok", d["score"], "points")
PY
    echo "$output"
    [ "$status" -eq 0 ]
}
