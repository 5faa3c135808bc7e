#!/usr/bin/env bats
# A mixture of experts in the model (lab 08's first step, common/moe.h):
# tiny-moe (and --experts on any config) trains on one device, logs its
# routing to moe.csv (every assignment either kept by an expert or dropped
# over capacity, the aux loss near alpha per MoE block at init), and every
# data-parallel layout that splits the batch by sequences (DDP, ZeRO-3)
# routes exactly as one device: the same drops, the same model. The planner
# counts its buffers to the byte; the layouts that would split a sequence's
# routing or an expert (TP, CP, PP) say so up front.
load helpers

GPT="$BUILD/solutions/00_single_device/train_gpt"
COMMON=(--config tiny-moe --steps 6 --eval-every 3 --threads 1)

setup_file() {
    export BASE="$BATS_FILE_TMPDIR/base"
    have_solution 00 || return 0
    t 120 "$GPT" "${COMMON[@]}" --out "$BASE" --dump-params "$BASE/params.bin" > /dev/null
}

# moe_rows DIR TOKENS_PER_STEP K MOE_BLOCKS: every row of DIR/moe.csv
# accounts for all tokens x k assignments of each MoE block, kept or dropped
moe_rows() {
    python3 - "$@" <<'PY'
import csv, sys
d, tokens, k, blocks = sys.argv[1], *map(int, sys.argv[2:])
rows = list(csv.DictReader(open(d + "/moe.csv")))
assert rows, "moe.csv has no rows"
for r in rows:
    loads = [int(v) for key, v in r.items() if key.startswith("load_")]
    total = sum(loads) + int(r["dropped"])
    assert total == tokens * k * blocks, f"step {r['step']}: {total} assignments, want {tokens * k * blocks}"
    aux = float(r["aux_loss"])
    assert 0 < aux < 1, f"step {r['step']}: aux {aux}"
print(f"ok: {len(rows)} rows, {len(loads)} experts")
PY
}

@test "moe: tiny-moe trains on one device, moe.csv accounts for every assignment, memory as planned" {
    require_solution 00
    run moe_rows "$BASE" $((8 * 64)) 2 2
    echo "$output"
    [ "$status" -eq 0 ]
    head -1 "$BASE/moe.csv" | grep -qx 'step,aux_loss,dropped,load_0,load_1,load_2,load_3'
    # at init the router is near uniform: each of the 2 MoE blocks' aux near alpha = 0.01
    python3 -c "
import csv; r = next(csv.DictReader(open('$BASE/moe.csv')))
assert abs(float(r['aux_loss']) - 0.02) < 0.002, r['aux_loss']"
    # the loss falls
    python3 -c "
import csv; rows = list(csv.DictReader(open('$BASE/metrics.csv')))
assert float(rows[-1]['loss']) < float(rows[0]['loss']) - 0.2, [r['loss'] for r in rows]"
    # the planner counts the routing's buffers (sized for the worst case) to the byte
    "$BUILD/bin/memplan" --config tiny-moe --csv > "$BATS_TEST_TMPDIR/plan.csv"
    python3 - "$BATS_TEST_TMPDIR/plan.csv" "$BASE/memory.csv" <<'PY'
import csv, sys
plan = {r["category"]: int(r["peak_bytes"]) for r in csv.DictReader(open(sys.argv[1])) if r["layout"] == "replicated"}
for r in csv.DictReader(open(sys.argv[2])):
    assert int(r["peak_bytes"]) == plan[r["category"]], (r, plan[r["category"]])
PY
    # a dense run writes no moe.csv
    run t 60 "$GPT" --config tiny --steps 1 --threads 1 --out "$BATS_TEST_TMPDIR/dense"
    [ "$status" -eq 0 ]
    [ ! -e "$BATS_TEST_TMPDIR/dense/moe.csv" ]
}

@test "moe: --experts on a dense config, dropless capacity drops nothing, top-1 routes one per token" {
    require_solution 00
    out="$BATS_TEST_TMPDIR/flags"
    run t 120 "$GPT" --config tiny --experts 3 --top-k 1 --capacity-factor 0 --moe-every 2 \
        --steps 3 --threads 1 --out "$out"
    [ "$status" -eq 0 ]
    run moe_rows "$out" $((8 * 64)) 1 2
    echo "$output"
    [ "$status" -eq 0 ]
    python3 -c "
import csv
for r in csv.DictReader(open('$out/moe.csv')): assert r['dropped'] == '0', r"
    grep -q '"n_layer": 4' "$out/run.json"
}

@test "moe: DDP and ZeRO-3 on 2 ranks route each sequence as one device does: same drops, same model" {
    require_solution 00 02 03
    cd "$ROOT"
    for prog in "02_ddp/train_ddp" "03_zero/train_zero --zero 3"; do
        out="$BATS_TEST_TMPDIR/${prog%%/*}"
        # shellcheck disable=SC2086  # prog carries its flags
        run mpirun_t 180 2 $BUILD/solutions/$prog "${COMMON[@]}" --out "$out" \
            --dump-params "$out/params.bin"
        echo "$output"
        [ "$status" -eq 0 ]
        run same_run "$out"
        echo "$output"
        [ "$status" -eq 0 ]
        # the routing: drops and loads equal, step by step
        diff <(cut -d, -f1,3- "$BASE/moe.csv") <(cut -d, -f1,3- "$out/moe.csv")
    done
}

@test "moe: bad expert options and the layouts that would split a sequence's routing are one clear error" {
    require_solution 00 06 07
    local err
    for args in "--config tiny --top-k 2" "--config tiny --experts 1" \
        "--config tiny-moe --top-k 5" "--config tiny-moe --moe-every 9" \
        "--config tiny-moe --capacity-factor -1" "--config tiny --experts 2000"; do
        # shellcheck disable=SC2086  # args is a list
        run t 30 "$GPT" $args --steps 1 --out "$BATS_TEST_TMPDIR/bad"
        echo "$args: $output"
        [ "$status" -eq 2 ]
        [ "$(printf '%s\n' "$output" | grep -c 'error')" -eq 1 ]
    done
    run mpirun_t 60 2 "$BUILD/solutions/06_pipeline/train_pp" --config tiny-moe --pp 2 --steps 1
    [ "$status" -eq 2 ]
    [[ "$output" == *"mixture of experts"*"--pp 1"* ]]
    run mpirun_t 60 2 "$BUILD/solutions/07_context_parallel/train_cp" --config tiny-moe --cp 2 --steps 1
    [ "$status" -eq 2 ]
    [[ "$output" == *"mixture of experts"*"context parallelism"* ]]
}

@test "moe: bench-moe prints the balance table and draws the load chart; plot_moe_load refuses bad input" {
    require_solution 00 08
    cd "$ROOT"
    out="$BATS_TEST_TMPDIR/bench"
    run t 300 env BENCH_STEPS=60 BENCH_OUT="$out" bash bench/moe.sh
    echo "$output"
    [ "$status" -eq 0 ]
    [ "$(printf '%s\n' "$output" | grep -cE '^ (0|0\.01|0\.1) +[0-9.]+ +[0-9.]+ ')" -eq 3 ]
    is_png "$out/load.png"
    # the model states are 16 bytes a parameter for every expert count (checked by the bench)
    [ "$(printf '%s\n' "$output" | grep -cE '^ [248] +[0-9]+ +[0-9]+ +[0-9]+ +[0-9.]+$')" -eq 3 ]
    # expert parallelism: the rows moved equal the exchanged counts' at ep 2 and 4, and
    # memory per rank equals the planner's at ep 1, 2, 4 for E 4 and 8
    [ "$(printf '%s\n' "$output" | grep -cE '^ [24] +[0-9]+ +[0-9]+ +[0-9]+ +yes ')" -eq 2 ]
    [ "$(printf '%s\n' "$output" | grep -cE '^ [48] +[124] +[0-9]+ +[0-9]+ +ok ')" -eq 6 ]
    run t 30 bash tools/plot_moe_load.sh "$BATS_TEST_TMPDIR/x.png" t "$BATS_TEST_TMPDIR"
    [ "$status" -eq 2 ]
    [[ "$output" == *"moe.csv not found"* ]]
    printf 'step,loss\n0,1\n' > "$BATS_TEST_TMPDIR/moe.csv"
    run t 30 bash tools/plot_moe_load.sh "$BATS_TEST_TMPDIR/x.png" t "$BATS_TEST_TMPDIR"
    [ "$status" -eq 2 ]
    [[ "$output" == *"not the header"* ]]
}
