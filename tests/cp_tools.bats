#!/usr/bin/env bats
# Lab 07's tools: the planner's --cp (memplan --cp N --cp-algo NAME) equals
# what train_cp measures, byte for byte per category, and its CP traffic is
# what train_cp predicts; --fit's sequence is the longest that fits; bad
# combinations are one clear error; the benchmark (bench/cp.sh, `make
# bench-cp`) on the tiny config counts the attention pairs of the formula,
# the traffic and memory of the planner, and draws its four charts. Its
# timings are printed, not tested.
load helpers

CPP="$BUILD/solutions/07_context_parallel/train_cp"

@test "memplan --cp 2 equals memory.csv of train_cp --cp 2 (ring and ulysses), every rank, every category" {
    require_solution 07
    cd "$ROOT"
    for algo in ring ulysses; do
        out="$BATS_TEST_TMPDIR/$algo"
        run mpirun_t 120 2 "$CPP" --cp 2 --cp-algo "$algo" --config tiny --steps 1 --eval-every 0 \
            --eval-batches 1 --threads 1 --out "$out"
        [ "$status" -eq 0 ] || { echo "$output"; false; }
        "$BUILD/bin/memplan" --config tiny --cp 2 --cp-algo "$algo" --csv > "$out/plan.csv"
        python3 - "$out" "cp2-$algo" <<'PY'
import csv, sys
out, label = sys.argv[1:]
plan = {r["category"]: int(r["peak_bytes"]) for r in csv.DictReader(open(out + "/plan.csv"))
        if r["layout"] == label}
assert len(plan) == 6, plan
rows = list(csv.DictReader(open(out + "/memory.csv")))
assert len(rows) == 12, f"{len(rows)} rows in memory.csv for 2 ranks"
for r in rows:
    want = plan[r["category"]]
    assert int(r["peak_bytes"]) == want, f"{label} rank {r['rank']} {r['category']}: measured {r['peak_bytes']}, planned {want}"
PY
    done
}

@test "memplan --cp: the plan's CP traffic per pass is what train_cp predicts; the ring keeps no T^2 term, Ulysses does" {
    require_solution 07
    cd "$ROOT"
    run t 10 "$BUILD/bin/memplan" --config tiny --cp 4 --cp-algo zigzag
    [ "$status" -eq 0 ]
    [ "$(grep -c '^  cp4-zigzag ' <<<"$output")" -eq 1 ]
    [[ "$output" == *"activations 0 bytes"*"workspace 0 bytes"* ]]
    read -r fc fb bc bb < <(awk '$1 == "ring" && $2 == "sends" { print $4, $6, $9, $11 }' <<<"$output")
    [ -n "$bb" ]
    run mpirun_t 120 4 "$CPP" --cp 4 --cp-algo zigzag --config tiny --steps 1 --eval-every 0 \
        --eval-batches 1 --threads 1 --out "$BATS_TEST_TMPDIR/z"
    [ "$status" -eq 0 ]
    [[ "$output" == *"ring sends per rank, predicted vs measured: per forward $fc calls ${fb%,} bytes, per backward $bc calls $bb bytes;"*" ok"* ]]
    # Ulysses keeps B NH/cp Tg^2 per block: 4 blocks, 8 rows, 2 of 4 heads, 64^2
    run t 10 "$BUILD/bin/memplan" --config tiny --cp 2 --cp-algo ulysses
    [ "$status" -eq 0 ]
    [[ "$output" == *"activations $((4 * 4 * 8 * 2 * 64 * 64)) bytes"* ]]
    [[ "$output" == *"all-to-alls"*"forward    8 calls"* ]]
}

@test "memplan --fit: the longest sequence within the budget, the next one over it; none, or the whole context" {
    total() { "$BUILD/bin/memplan" "$@" --csv | awk -F, 'NR > 1 { s += $4 } END { print s }'; }
    for algo in ring ulysses; do
        run t 10 "$BUILD/bin/memplan" --config tiny --ctx 512 --batch 2 --cp 2 --cp-algo "$algo" --fit 8 --csv
        [ "$status" -eq 0 ]
        IFS=, read -r cp a budget seq peak next npeak <<<"$(tail -n 1 <<<"$output")"
        [ "$cp" = 2 ] && [ "$a" = "$algo" ] && [ "$budget" -eq $((8 * 1048576)) ]
        [ "$seq" -gt 0 ] && [ $((seq % 4)) -eq 0 ] && [ "$next" -eq $((seq + 4)) ]
        [ "$peak" -le "$budget" ] && [ "$npeak" -gt "$budget" ]
        # the plan at those lengths says the same
        [ "$(total --config tiny --ctx 512 --batch 2 --cp 2 --cp-algo "$algo" --seq "$seq")" -eq "$peak" ]
        [ "$(total --config tiny --ctx 512 --batch 2 --cp 2 --cp-algo "$algo" --seq "$next")" -eq "$npeak" ]
    done
    # the ring fits longer sequences than Ulysses at this budget (no T^2 term)
    ring=$("$BUILD/bin/memplan" --config tiny --ctx 512 --batch 2 --cp 2 --fit 8 --csv | awk -F, 'END { print $4 }')
    uly=$("$BUILD/bin/memplan" --config tiny --ctx 512 --batch 2 --cp 2 --cp-algo ulysses --fit 8 --csv | awk -F, 'END { print $4 }')
    [ "$ring" -gt "$uly" ]
    run t 10 "$BUILD/bin/memplan" --config tiny --cp 4 --fit 0.5
    [ "$status" -eq 0 ]
    [[ "$output" == *"): none ("* ]]
    run t 10 "$BUILD/bin/memplan" --config tiny --cp 4 --fit 1000
    [ "$status" -eq 0 ]
    [[ "$output" == *"): 64, "*"the context"* ]]
    [ "$(grep -c '^  cp4-ring ' <<<"$output")" -eq 1 ]
}

@test "memplan --cp: bad combinations are one clear error" {
    run t 10 "$BUILD/bin/memplan" --config tiny --cp 3 --cp-algo ulysses --seq 63
    echo "$output"
    assert_user_error
    [[ "$output" == *"whole heads"* ]]
    run t 10 "$BUILD/bin/memplan" --config tiny --cp 4 --cp-algo zigzag --seq 60
    assert_user_error
    [[ "$output" == *"multiple of 8"* ]]
    for bad in "--cp-algo ring" "--fit 8" "--cp 2 --cp-algo rings" "--cp 2 --ranks 3" \
        "--cp 2 --sp" "--cp 2 --params 7e9" "--cp 2 --fit 8 --seq 32" "--cp 2 --seq 128" \
        "--cp 0"; do
        run t 10 "$BUILD/bin/memplan" --config tiny $bad
        echo "memplan $bad: $output"
        assert_user_error
    done
}

@test "bench-cp (tiny): pairs as the formula, traffic and memory as planned, the fit confirmed, four charts" {
    require_solution 07  # it benchmarks the solution (BENCH_COPY below)
    out="$BATS_TEST_TMPDIR/bench"
    BENCH_COPY=solutions BENCH_STEPS=3 BENCH_SEQ=128 BENCH_BUDGET_MIB=8 BENCH_FIT_CTX=512 \
        BENCH_OUT="$out" run t 600 bash "$ROOT/bench/cp.sh"
    echo "$output" | tail -40
    [ "$status" -eq 0 ]
    # 4 ranks x 4 algorithms, every count as predicted; the ring's pairs rise with the rank
    [ "$(awk -F, 'NR > 1 && $5 == "yes"' "$out/balance.csv" | wc -l)" -eq 16 ]
    [ "$(awk -F, '$1 == "ring" { print $3 }' "$out/balance.csv" | sort -n | tr '\n' ' ')" = \
      "$(awk -F, '$1 == "ring" { print $3 }' "$out/balance.csv" | tr '\n' ' ')" ]
    [ "$(awk -F, '$1 == "zigzag" { print $3 }' "$out/balance.csv" | sort -u | wc -l)" -eq 1 ]
    # 6 traffic rows, all equal to the planner on every rank
    [ "$(awk -F, 'NR > 1 && $8 == "yes" && $10 == "yes"' "$out/traffic.csv" | wc -l)" -eq 6 ]
    # 5 memory rows equal to the plan; the ring keeps no T^2 term, cp 1 and Ulysses do
    [ "$(awk -F, 'NR > 1 && $13 == "yes"' "$out/memory.csv" | wc -l)" -eq 5 ]
    [ "$(awk -F, 'NR > 1 && ($2 == "ring" && $1 > 1) != ($11 == 0)' "$out/memory.csv" | wc -l)" -eq 0 ]
    [ "$(awk -F, 'NR > 1 && $10 == "yes"' "$out/fit.csv" | wc -l)" -eq 5 ]
    for png in balance memory timeline-step timeline-ring; do is_png "$out/$png.png"; done
}

@test "plot_cp_balance.sh and plot_cp_timeline.sh reject a malformed file in one line, and a run without blocks" {
    d="$BATS_TEST_TMPDIR/bad"
    mkdir -p "$d"
    printf 'rank,cp_rank,algo,block_pairs\n0,0,ring,5\n' > "$d/cp_balance.csv"
    run t 30 bash "$ROOT/tools/plot_cp_balance.sh" "$d/b.png" t "$d"
    [ "$status" -eq 2 ]
    [[ "$output" == *"plot_cp_balance: error:"*"header"* ]]
    printf 'rank,cp_rank,algo,block_pairs,block_seconds,attention_seconds\n0,0,ulysses,0,0,0.1\n' > "$d/cp_balance.csv"
    run t 30 bash "$ROOT/tools/plot_cp_balance.sh" "$d/b.png" t "$d"
    [ "$status" -eq 2 ]
    [[ "$output" == *"no run with attention blocks"* ]]
    printf 'rank,category,name,group,start_s,end_s,bytes\n0,compute,forward,,0.1,0.2,0\n' > "$d/trace.csv"
    run t 30 bash "$ROOT/tools/plot_cp_timeline.sh" "$d" "$d/t.png"
    [ "$status" -eq 2 ]
    [[ "$output" == *"no \"attention block\" events"* ]]
    [ "$(grep -c error <<<"$output")" -eq 1 ]
    [ ! -e "$d/t.png" ] && [ ! -e "$d/b.png" ]
}
