#!/usr/bin/env bats
# Lab 04's tools: the planner's --tp (memplan --tp N) equals what train_tp
# measures, byte for byte per category; a degree that does not divide the
# heads is one clear error; the benchmark (bench/tp.sh, `make bench-tp`) on
# the tiny config finds memory as planned, TP traffic as the formula, and
# draws its three charts. Its timings are printed, not tested.
load helpers

TP="$BUILD/solutions/04_tensor_parallel/train_tp"

@test "memplan --tp 2 equals memory.csv of train_tp --tp 2 on 2 ranks, every rank, every category" {
    require_solution 04
    cd "$ROOT"
    out="$BATS_TEST_TMPDIR/tp2"
    run mpirun_t 120 2 "$TP" --tp 2 --config tiny --batch 8 --steps 2 --eval-every 0 \
        --eval-batches 1 --threads 1 --out "$out"
    [ "$status" -eq 0 ] || { echo "$output"; false; }
    run t 10 "$BUILD/bin/memplan" --config tiny --batch 8 --tp 2 --csv
    [ "$status" -eq 0 ]
    echo "$output" > "$out/plan.csv"
    python3 - "$out" <<'PY'
import csv, sys
out = sys.argv[1]
plan = {r["category"]: int(r["peak_bytes"]) for r in csv.DictReader(open(out + "/plan.csv"))
        if r["layout"] == "tp2"}
assert len(plan) == 6, plan
rows = list(csv.DictReader(open(out + "/memory.csv")))
assert len(rows) == 12, f"{len(rows)} rows in memory.csv for 2 ranks"
for r in rows:
    want = plan[r["category"]]
    assert int(r["peak_bytes"]) == want, f"rank {r['rank']} {r['category']}: measured {r['peak_bytes']}, planned {want}"
print("all 12 peaks as planned")
PY
    # the human-readable plan: one tp2 row and the TP traffic per pass
    run t 10 "$BUILD/bin/memplan" --config tiny --batch 8 --tp 2
    [ "$status" -eq 0 ]
    [ "$(grep -c '^  tp2 ' <<<"$output")" -eq 1 ]
    [[ "$output" == *"forward"*"calls"*"backward"*"calls"* ]]
    # its per-pass bytes are those train_tp prints as predicted
    fwd=$(awk '$1 == "forward" { print $4 }' <<<"$output")
    run mpirun_t 120 2 "$TP" --tp 2 --config tiny --batch 8 --steps 2 --eval-every 0 \
        --eval-batches 1 --threads 1 --out "$out/again"
    [[ "$output" == *"per forward 12 calls $fwd bytes"* ]]
}

@test "memplan --tp: a degree that does not divide the heads, or the ranks, is one clear error" {
    run t 10 "$BUILD/bin/memplan" --config tiny --tp 3
    echo "$output"
    assert_user_error
    [[ "$output" == *"n_head"* ]]
    for bad in "--tp 2 --ranks 3" "--tp 0" "--tp 2 --params 7e9" "--tp 2 --overlap-rs"; do
        run t 10 "$BUILD/bin/memplan" $bad
        echo "memplan $bad: $output"
        assert_user_error
    done
}

@test "memplan without --tp prints what it printed before (no tp row, no TP traffic)" {
    run t 10 "$BUILD/bin/memplan" --config tiny --ranks 2
    [ "$status" -eq 0 ]
    [[ "$output" != *tp* ]]
    [ "$(grep -c '^  \(replicated\|zero\)' <<<"$output")" -eq 5 ]
}

@test "bench-tp (tiny): memory as planned, TP payload per step as the formula, three charts drawn" {
    require_solution 04  # it benchmarks the solution (BENCH_COPY below)
    out="$BATS_TEST_TMPDIR/bench"
    BENCH_COPY=solutions BENCH_CONFIGS=tiny BENCH_STEPS=5 BENCH_OUT="$out" run t 600 bash "$ROOT/bench/tp.sh"
    echo "$output" | tail -20
    [ "$status" -eq 0 ]
    # one row per tp, memory equal to the plan in all six categories
    [ "$(awk -F, 'NR > 1 { print $2 }' "$out/tp.csv" | tr '\n' ' ')" = "1 2 4 " ]
    [ "$(awk -F, 'NR > 1 && $12 == "yes" && $10 == $11' "$out/tp.csv" | wc -l)" -eq 3 ]
    # tp > 1: the measured payload per step equals the formula; wire 2 (tp-1)/tp of it
    [ "$(awk -F, 'NR > 1 && $2 > 1 && $13 == $15 && $14 == int($13 * 2 * ($2 - 1) / $2 + 0.5)' "$out/tp.csv" | wc -l)" -eq 2 ]
    # per-rank parameters shrink with tp
    [ "$(awk -F, 'NR > 1 { print $4 }' "$out/tp.csv" | sort -rn | tr '\n' ' ')" = "$(awk -F, 'NR > 1 { print $4 }' "$out/tp.csv" | tr '\n' ' ')" ]
    # the printed table has a row per tp
    for tp in 1 2 4; do [ "$(grep -cE "^  $tp +tiny " <<<"$output")" -eq 1 ]; done
    is_png "$out/memory.png"
    is_png "$out/comm.png"
    is_png "$out/step_time.png"
}

@test "bench-tp: bad settings are one clear error" {
    for bad in "BENCH_STEPS=2" "BENCH_CONFIGS=huge" "BENCH_TIMEOUT=0"; do
        run t 30 env "$bad" bash "$ROOT/bench/tp.sh"
        echo "$bad: $output"
        assert_user_error
    done
}
