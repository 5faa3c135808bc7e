#!/usr/bin/env bats
# Lab 05's benchmark (bench/act.sh, `make bench-act`) on the tiny config, in
# the short form the slides' quick figures use: every rank of every run
# holds the activations the planner predicts, byte for byte (checked here
# against memplan itself, not only the benchmark's own verdict), the FLOP
# counts order none < selective < full, the sequence-length figure finds its
# crossings, and the three charts are drawn. Its timings are printed, not
# tested.
load helpers

@test "bench-act (tiny): activations as planned on every rank of every layout, FLOPs ordered, three charts drawn" {
    require_solution 05  # it benchmarks the solution (BENCH_COPY below)
    out="$BATS_TEST_TMPDIR/bench"
    BENCH_COPY=solutions BENCH_CONFIG=tiny BENCH_STEPS=5 BENCH_OUT="$out" run t 600 bash "$ROOT/bench/act.sh"
    echo "$output" | tail -40
    [ "$status" -eq 0 ]
    [[ "$output" != *DIFFERENT* ]]
    # 3 layouts at tp 1, 4 at tp 2 and 4: the printed table and the csv
    [ "$(awk -F, 'NR > 1 && $13 == "ok" && $9 == $10 && $10 == $11 && $11 == $12' "$out/memory.csv" | wc -l)" -eq 13 ]
    for l in tp1 tp1-selective tp1-full tp2 tp2-sp tp2-sp-selective tp2-sp-full \
             tp4 tp4-sp tp4-sp-selective tp4-sp-full tp2-sp-regather tp4-sp-regather; do
        [ "$(grep -cE "^  [124] +$l +[0-9 ]+ ok$" <<<"$output")" -eq 1 ]
    done
    # the runs' memory.csv against memplan, independently of the benchmark
    python3 - "$out" "$BUILD/bin/memplan" <<'PY'
import csv, os, re, subprocess, sys
out, plan = sys.argv[1:]
runs = 0
for layout in sorted(os.listdir(out)):
    m = re.fullmatch(r"tp(\d)(-sp(?:-regather)?)?(?:-(selective|full))?", layout)
    if not m or not os.path.isdir(os.path.join(out, layout)):
        continue
    tp = m.group(1)
    args = [plan, "--config", "tiny", "--tp", tp, "--recompute", m.group(3) or "none", "--csv"]
    if m.group(2):
        args.append("--sp-regather" if "regather" in m.group(2) else "--sp")
    want = [int(r["peak_bytes"]) for r in csv.DictReader(subprocess.run(args, capture_output=True,
            text=True, check=True).stdout.splitlines()) if r["category"] == "activations"]
    assert len(want) == 1, (layout, want)
    got = [int(r["peak_bytes"]) for r in csv.DictReader(open(os.path.join(out, layout, "memory.csv")))
           if r["category"] == "activations"]
    assert got == want * int(tp), f"{layout}: measured {got}, planned {want[0]} on each of {tp} ranks"
    runs += 1
assert runs == 13, f"{runs} run directories"
print("all 13 runs: every rank's activations as memplan plans")
PY
    # FLOPs are counts, not timings: recomputing adds work, full the most
    # (a second forward of every block: about a third more)
    for base in tp1 tp2-sp; do
        awk -F, -v b="$base" '$1 == b { f[$2] = $6 }
            END { exit !(f["none"] == 1 && f["selective"] > 1 && f["full"] > f["selective"] && f["full"] < 1.5) }' "$out/time.csv"
    done
    # gpt2-124m: the planner's parts are exact parabolas in seq, and with SP
    # the rest is smaller, so the probabilities outgrow it at a shorter seq
    awk -F, 'NR > 1 && $9 > 1 { exit 1 }' "$out/crossover.csv"
    awk -F, '$1 == "tp4" { a = $8 } $1 == "tp4-sp" { b = $8 } $1 == "tp1" { c = $8 }
        END { exit !(c > 0 && b > 0 && b < a) }' "$out/crossover.csv"
    [[ "$output" == *"where the attention probabilities outgrow everything else"* ]]
    is_png "$out/memory.png"
    is_png "$out/step_time.png"
    is_png "$out/seq.png"
}

@test "bench-act: bad settings are one clear error" {
    for bad in "BENCH_STEPS=2" "BENCH_CONFIG=huge" "BENCH_TIMEOUT=0" "BENCH_COPY=mine"; do
        run t 30 env "$bad" bash "$ROOT/bench/act.sh"
        echo "$bad: $output"
        assert_user_error
    done
}
