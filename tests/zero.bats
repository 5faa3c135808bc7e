#!/usr/bin/env bats
# Lab 03, ZeRO: every stage on 1, 2, 3 (padding) and 4 ranks follows the
# single-device run; memory.csv equals the planner's prediction byte for
# byte (and the planner equals the model-state formulas); comm.csv moves
# exactly the formula's bytes; bad flags are clear errors.
load helpers

ZERO="$BUILD/solutions/03_zero/train_zero"
PHI=220544   # tiny
COMMON=(--config tiny --steps 12 --eval-every 4 --threads 1)

setup_file() {
    export BASE="$BATS_FILE_TMPDIR/base"
    have_solution 00 || return 0   # a handout without it: the tests that need it skip
    t 120 "$BUILD/solutions/00_single_device/train_gpt" "${COMMON[@]}" --out "$BASE" \
        --dump-params "$BASE/params.bin" > /dev/null
}

# zero_run DIR NP FLAGS...: train_zero on NP ranks into DIR, dumping params
zero_run() {
    local out=$1 np=$2
    shift 2
    mpirun_t 180 "$np" "$ZERO" "${COMMON[@]}" "$@" --out "$out" --dump-params "$out/params.bin"
}

# memplan_refuses FLAGS...: memplan with each argument's flags is one clear error
memplan_refuses() {
    local bad
    for bad in "$@"; do
        # shellcheck disable=SC2086  # bad is a list of flags
        run t 10 "$BUILD/bin/memplan" $bad
        echo "memplan $bad: $output"
        assert_user_error
    done
}

# skeleton_stops_at NP FUNCTION FLAGS...: the untouched skeleton's train_zero
# on NP ranks with FLAGS stops cleanly, once, at FUNCTION's TODO
skeleton_stops_at() {
    local np=$1 fn=$2
    shift 2
    run mpirun_t 120 "$np" "$BUILD/labs/03_zero/train_zero" "$@" "${COMMON[@]}" --steps 2 \
        --out "$BATS_TEST_TMPDIR/sk"
    echo "$output"
    [ "$status" -eq 3 ]
    [[ "$output" == *"not implemented: $fn"* ]]
    [ "$(grep -c 'not implemented' <<< "$output")" -eq 1 ]
}

@test "zero: stages 1, 2, 3 (with and without prefetch) on 1, 2 and 4 ranks follow the single-device run" {
    require_solution 00 03
    cd "$ROOT"
    for flags in "--zero 1" "--zero 2" "--zero 3" "--zero 3 --no-prefetch"; do
        for np in 1 2 4; do
            out="$BATS_TEST_TMPDIR/${flags// /}-$np"
            # shellcheck disable=SC2086  # flags is a list
            run zero_run "$out" "$np" $flags
            echo "$flags np=$np: $output"
            [ "$status" -eq 0 ]
            run same_run "$out"
            echo "$output"
            [ "$status" -eq 0 ]
        done
    done
}

@test "zero: 3 ranks pad every unit (10 elements for tiny) and still follow the baseline, with accumulation" {
    require_solution 00 03
    cd "$ROOT"
    BASE="$BATS_TEST_TMPDIR/base12"
    t 120 "$BUILD/solutions/00_single_device/train_gpt" "${COMMON[@]}" --batch 12 --out "$BASE" \
        --dump-params "$BASE/params.bin" > /dev/null
    for stage in 1 2 3; do
        out="$BATS_TEST_TMPDIR/pad-$stage"
        run zero_run "$out" 3 --zero "$stage" --batch 12 --grad-accum 2
        echo "$output"
        [ "$status" -eq 0 ]
        # units of 20480, 49984 (x4) and 128 elements over 3 ranks: 1 + 2 x 4 + 1 = 10
        [[ "$output" == *"padded to $((PHI + 10)) (10 padding), $(((PHI + 10) / 3)) per rank"* ]]
        run same_run "$out"
        echo "$output"
        [ "$status" -eq 0 ]
    done
}

# peaks_match DIR NP LAYOUT FLAGS...: every rank's memory.csv peaks equal
# memplan's prediction for LAYOUT, category by category
peaks_match() {
    local out=$1 np=$2 layout=$3
    shift 3
    "$BUILD/bin/memplan" --config tiny --ranks "$np" "$@" --csv > "$out/plan.csv"
    python3 - "$out" "$np" "$layout" <<'PY'
import csv, sys
out, np, layout = sys.argv[1], int(sys.argv[2]), sys.argv[3]
plan = {r["category"]: int(r["peak_bytes"]) for r in csv.DictReader(open(out + "/plan.csv"))
        if r["layout"] == layout}
rows = list(csv.DictReader(open(out + "/memory.csv")))
assert len(rows) == 6 * np, f"{len(rows)} rows in memory.csv for {np} ranks"
for r in rows:
    want = plan[r["category"]]
    assert int(r["peak_bytes"]) == want, f"rank {r['rank']} {r['category']}: measured {r['peak_bytes']}, planned {want}"
print(f"{layout} x{np}: all {len(rows)} peaks as planned")
PY
}

@test "zero: memory.csv peaks equal the planner's prediction exactly (DDP and every stage, 1 to 4 ranks)" {
    require_solution 02 03
    for np in 1 2 3 4; do
        batch=$((np == 3 ? 12 : 8))
        out="$BATS_TEST_TMPDIR/ddp-$np"
        mkdir -p "$out"
        run mpirun_t 180 "$np" "$BUILD/solutions/02_ddp/train_ddp" "${COMMON[@]}" --steps 2 \
            --batch "$batch" --out "$out"
        [ "$status" -eq 0 ]
        run peaks_match "$out" "$np" replicated --batch "$batch"
        echo "$output"
        [ "$status" -eq 0 ]
        for layout in zero1 zero2 zero3 zero3-noprefetch; do
            out="$BATS_TEST_TMPDIR/$layout-$np"
            flags="--zero ${layout:4:1}"
            [ "$layout" = zero3-noprefetch ] && flags="$flags --no-prefetch"
            # shellcheck disable=SC2086  # flags is a list
            run mpirun_t 180 "$np" "$ZERO" "${COMMON[@]}" --steps 2 --batch "$batch" $flags --out "$out"
            [ "$status" -eq 0 ]
            [[ "$output" != *DIFFERENT* ]]
            run peaks_match "$out" "$np" "$layout" --batch "$batch"
            echo "$output"
            [ "$status" -eq 0 ]
        done
    done
}

@test "zero: the planner's model states are the ZeRO formulas (4+4+8, 4+4+8/N, 4+12/N, 16/N bytes per parameter)" {
    for np in 1 2 3 4 8; do
        "$BUILD/bin/memplan" --config tiny --ranks "$np" --batch 24 --csv > "$BATS_TEST_TMPDIR/p.csv"
        # padded Phi: every unit rounded up to a multiple of N
        padded=0
        for n in 20480 49984 49984 49984 49984 128; do padded=$((padded + (n + np - 1) / np * np)); done
        total() { awk -F, -v l="$1" '$1 == l && ($2 == "params" || $2 == "grads" || $2 == "optimizer") { s += $3 } END { print s }' "$BATS_TEST_TMPDIR/p.csv"; }
        [ "$(total replicated)" -eq $((16 * PHI)) ]
        [ "$(total zero1)" -eq $((4 * padded + 4 * padded + 8 * padded / np)) ]
        [ "$(total zero2)" -eq $((4 * padded + 12 * padded / np)) ]
        [ "$(total zero3)" -eq $((16 * padded / np)) ]
    done
    # the seed example: 7B parameters are 112 GB of model states
    run t 10 "$BUILD/bin/memplan" --params 7e9 --ranks 64
    echo "$output"
    [[ "$output" == *"replicated (DDP)      112.00 GB"* ]]
    [[ "$output" == *"ZeRO-3                  1.75 GB"* ]]
    # hybrid sharding over groups of 8 of the 64: ZeRO-3's 112 GB / 8
    run t 10 "$BUILD/bin/memplan" --params 7e9 --ranks 64 --dp-shard 8
    echo "$output"
    [[ "$output" == *"64 ranks, ZeRO over shard groups of 8:"* ]]
    [[ "$output" == *"ZeRO-3                 14.00 GB"* ]]
}

# dp_bytes CSV RANK OP: bytes of OP on the dp group for RANK
dp_bytes() { awk -F, -v r="$2" -v op="$3" '$1 == r && $2 == "dp" && $3 == op { print $5 }' "$1"; }

@test "zero: comm.csv moves exactly the formula's bytes (ZeRO-1/2 2 Phi, ZeRO-3 3 Phi per step and micro-batch)" {
    require_solution 03
    # 4 ranks, 6 steps, 2 micro-batches, one evaluation (last step) of 1 batch:
    # payload bytes recorded per call are the whole padded unit (comm.h)
    local steps=6 k=2 np=4 b=$((4 * PHI))  # tiny pads nothing over 4 ranks
    for stage in 1 2 3; do
        out="$BATS_TEST_TMPDIR/c$stage"
        run mpirun_t 180 "$np" "$ZERO" --config tiny --threads 1 --steps "$steps" --grad-accum "$k" \
            --eval-every 0 --eval-batches 1 --zero "$stage" --out "$out"
        [ "$status" -eq 0 ]
        for r in 0 3; do
            rs=$(dp_bytes "$out/comm.csv" "$r" reduce_scatter)
            ag=$(dp_bytes "$out/comm.csv" "$r" allgather)
            echo "stage $stage rank $r: reduce-scatter $rs, all-gather $ag"
            case $stage in
                1) [ "$rs" -eq $((steps * b)) ] && [ "$ag" -eq $((steps * b)) ] ;;
                2) [ "$rs" -eq $((steps * k * b)) ] && [ "$ag" -eq $((steps * b)) ] ;;
                # forward and backward gather per micro-batch, plus the evaluation's forward
                3) [ "$rs" -eq $((steps * k * b)) ] && [ "$ag" -eq $(((2 * steps * k + k) * b)) ] ;;
            esac
            # nothing else on the gradient group
            [ "$(awk -F, -v r="$r" '$1 == r && $2 == "dp"' "$out/comm.csv" | wc -l)" -eq 2 ]
        done
    done
    # per step without accumulation, on the wire ((N-1)/N of each payload for
    # reduce-scatter and all-gather, 2(N-1)/N for DDP's all-reduce):
    # DDP 2 Phi (N-1)/N = ZeRO-1 = ZeRO-2, ZeRO-3 3 Phi (N-1)/N
    out="$BATS_TEST_TMPDIR/w3"
    run mpirun_t 180 "$np" "$ZERO" --config tiny --threads 1 --steps 4 --eval-every 0 \
        --eval-batches 1 --zero 3 --out "$out"
    [ "$status" -eq 0 ]
    ag=$(dp_bytes "$out/comm.csv" 0 allgather)
    rs=$(dp_bytes "$out/comm.csv" 0 reduce_scatter)
    # 4 steps x 2 gathers + 1 evaluation gather, 4 reduce-scatters
    [ "$(( (ag - b) / 4 + rs / 4 ))" -eq $((3 * b)) ]
}

@test "zero: every rank writes its memory rows; prefetch holds two units, not more" {
    require_solution 03
    out="$BATS_TEST_TMPDIR/o"
    run mpirun_t 180 2 "$ZERO" "${COMMON[@]}" --steps 2 --zero 3 --out "$out"
    [ "$status" -eq 0 ]
    [ "$(grep -c '^1,' "$out/memory.csv")" -eq 6 ]
    grep -q ',comm,allgather,dp,' "$out/trace.csv"
    grep -q ',comm,reduce_scatter,dp,' "$out/trace.csv"
    # params peak: shard (Phi/2) + embeddings + two blocks, all gathered whole
    peak=$(awk -F, '$1 == 0 && $2 == "params" { print $4 }' "$out/memory.csv")
    [ "$peak" -eq $((4 * (PHI / 2 + 20480 + 2 * 49984))) ]
    out="$BATS_TEST_TMPDIR/nopf"
    run mpirun_t 180 2 "$ZERO" "${COMMON[@]}" --steps 2 --zero 3 --no-prefetch --out "$out"
    [ "$status" -eq 0 ]
    peak=$(awk -F, '$1 == 0 && $2 == "params" { print $4 }' "$out/memory.csv")
    [ "$peak" -eq $((4 * (PHI / 2 + 20480 + 49984))) ]
}

@test "zero: the untouched skeleton stops cleanly at the first TODO of each stage" {
    require_solution 00  # the skeleton runs on lab 00's solution
    require_untouched 03
    for stage in 1 2 3; do
        skeleton_stops_at 2 zero --zero "$stage"
    done
}

@test "zero: bad flags are one clear error from rank 0; --no-prefetch below ZeRO-3 says it does nothing" {
    require_solution 03
    local bad
    for bad in "--zero 4" "--zero 0" "--zero two" "--zero" "--batch 6"; do
        # shellcheck disable=SC2086  # bad is a list of flags
        run mpirun_t 60 4 "$ZERO" --config tiny --steps 2 $bad --out "$BATS_TEST_TMPDIR/bad"
        echo "$bad: $output"
        assert_user_error
    done
    [[ "$(mpirun_t 60 1 "$ZERO" --zero 4 2>&1)" == *"--zero expects 1, 2 or 3, got '4'"* ]]
    run mpirun_t 60 2 "$ZERO" "${COMMON[@]}" --steps 1 --zero 2 --no-prefetch --out "$BATS_TEST_TMPDIR/np"
    [ "$status" -eq 0 ]
    [[ "$output" == *"--no-prefetch has no effect below ZeRO-3"* ]]
    memplan_refuses "--ranks 0" "--config huge" "--params -1" "--batch 7 --ranks 2" "--frobnicate"
}

# ---- the extension: --overlap-rs (ZeRO-2/3's reduce-scatter behind the backward pass)

# same_bits A B: runs A and B computed the same thing, bit for bit: losses,
# gradient norms, every parameter (--dump-params), every rank's checksum, and
# comm.csv call for call (all but its seconds)
same_bits() {
    cmp "$1/params.bin" "$2/params.bin" &&
        cmp "$1/params_checksum.csv" "$2/params_checksum.csv" &&
        diff <(cut -d, -f1-5 "$1/metrics.csv") <(cut -d, -f1-5 "$2/metrics.csv") &&
        diff <(cut -d, -f1-5 "$1/comm.csv") <(cut -d, -f1-5 "$2/comm.csv")
}

@test "zero --overlap-rs: ZeRO-2 and 3 on 2 and 3 ranks equal the blocking runs bit for bit (losses, parameters, comm.csv)" {
    require_solution 03
    local stage np flags out
    for stage in 2 3; do
        for np in 2 3; do
            # 3 ranks pad every unit; 2 micro-batches carry the embeddings'
            # transfer into the next micro-batch's backward pass
            flags=(--zero "$stage")
            [ "$np" -eq 3 ] && flags+=(--batch 12 --grad-accum 2)
            out="$BATS_TEST_TMPDIR/z$stage-$np"
            run zero_run "$out-blocking" "$np" "${flags[@]}"
            [ "$status" -eq 0 ]
            run zero_run "$out-overlapped" "$np" "${flags[@]}" --overlap-rs
            echo "ZeRO-$stage np=$np: $output"
            [ "$status" -eq 0 ]
            [[ "$output" == *"(reduce-scatter behind the backward pass) over $np ranks"* ]]
            [[ "$output" != *DIFFERENT* ]]
            run same_bits "$out-blocking" "$out-overlapped"
            echo "$output"
            [ "$status" -eq 0 ]
            # as many reduce-scatters start while the backward pass runs (the
            # blocks' and the final layernorm's, before the step's last
            # backward phase) as in the blocking run, which starts each one
            # as soon as its unit is ready
            run python3 - "$out-blocking" "$out-overlapped" <<'PY'
import sys
sys.path.insert(0, "grader"); sys.dont_write_bytecode = True
import compare
want, got = (compare.overlap_counts(compare.as_outputs(d)) for d in sys.argv[1:])
assert got == want and all(early > 0 for early, _ in got.values()), (got, want)
print("gradient collectives started during the backward pass, per rank:", got)
PY
            echo "$output"
            [ "$status" -eq 0 ]
        done
    done
}

@test "zero --overlap-rs: memory.csv equals memplan --overlap-rs (1 to 4 ranks): one unit in flight beside the one computed" {
    require_solution 03
    local np batch layout out
    for np in 1 2 3 4; do
        batch=$((np == 3 ? 12 : 8))
        for layout in zero2 zero3; do
            out="$BATS_TEST_TMPDIR/$layout-$np"
            run mpirun_t 180 "$np" "$ZERO" "${COMMON[@]}" --steps 2 --batch "$batch" \
                --zero "${layout:4:1}" --overlap-rs --out "$out"
            [ "$status" -eq 0 ]
            [[ "$output" != *DIFFERENT* ]]
            run peaks_match "$out" "$np" "$layout" --batch "$batch" --overlap-rs
            echo "$output"
            [ "$status" -eq 0 ]
        done
    done
    # on 2 ranks: the shard, the embeddings and two blocks (one in flight,
    # one computed), against one block in the blocking schedule
    peak=$(awk -F, '$1 == 0 && $2 == "grads" { print $4 }' "$BATS_TEST_TMPDIR/zero2-2/memory.csv")
    [ "$peak" -eq $((4 * (PHI / 2 + 20480 + 2 * 49984))) ]
    "$BUILD/bin/memplan" --config tiny --ranks 2 --csv > "$BATS_TEST_TMPDIR/blocking.csv"
    [ "$(awk -F, '$1 == "zero2" && $2 == "grads" { print $4 }' "$BATS_TEST_TMPDIR/blocking.csv")" \
        -eq $((4 * (PHI / 2 + 20480 + 49984))) ]
    # the flag changes ZeRO-2/3's gradients only
    "$BUILD/bin/memplan" --config tiny --ranks 2 --overlap-rs --csv > "$BATS_TEST_TMPDIR/overlap.csv"
    [ "$(diff "$BATS_TEST_TMPDIR/blocking.csv" "$BATS_TEST_TMPDIR/overlap.csv" | grep -c '^>')" -eq 3 ]
    [ "$(diff "$BATS_TEST_TMPDIR/blocking.csv" "$BATS_TEST_TMPDIR/overlap.csv" | grep '^>' | grep -vc ',grads,')" -eq 0 ]
}

@test "zero --overlap-rs: below ZeRO-2, and in lab 02's trainer, it is one clear error" {
    require_solution 02 03
    local bad
    for bad in "--zero 1 --overlap-rs" "--overlap-rs"; do
        # shellcheck disable=SC2086  # bad is a list of flags
        run mpirun_t 60 2 "$ZERO" --config tiny --steps 2 $bad --out "$BATS_TEST_TMPDIR/bad"
        echo "$bad: $output"
        assert_user_error
        [[ "$output" == *"--overlap-rs needs --zero 2 or 3"* ]]
    done
    run mpirun_t 60 2 "$BUILD/solutions/02_ddp/train_ddp" --config tiny --steps 2 --overlap-rs \
        --out "$BATS_TEST_TMPDIR/bad"
    echo "$output"
    assert_user_error
    [[ "$output" == *"'--overlap-rs'"* ]]
}

@test "zero --overlap-rs: the untouched skeleton stops cleanly at the extension's first TODO" {
    require_solution 00  # the skeleton runs on lab 00's solution
    require_untouched 03
    skeleton_stops_at 2 zero_rs_ --zero 2 --overlap-rs
}

# ---- the second extension: --dp-shard (hybrid sharding, HSDP)

@test "zero --dp-shard: hybrid sharding on 4 ranks follows the baseline, one model on every rank, memory = memplan --dp-shard, the replicas' all-reduce = Phi / K per step; its checkpoints resume with and without it" {
    require_solution 00 03
    cd "$ROOT"
    local k=2 steps=12 ck="$BATS_TEST_TMPDIR/ck"
    for flags in "--zero 3 --dp-shard 2" "--zero 1 --dp-shard 2" "--zero 2 --dp-shard 1"; do
        out="$BATS_TEST_TMPDIR/${flags// /}"
        # shellcheck disable=SC2086  # flags is a list
        run zero_run "$out" 4 $flags --save "$ck/${flags// /}" --save-every 6
        echo "$flags: $output"
        [ "$status" -eq 0 ]
        [[ "$output" != *DIFFERENT* ]]
        run follows_base "$BASE" "$out" "$flags"
        echo "$output"
        [ "$status" -eq 0 ]
        read -r stage k <<< "$(awk '{ print $2, $4 }' <<< "$flags")"
        layout=zero$stage
        run peaks_match "$out" 4 "$layout" --dp-shard "$k"
        echo "$output"
        [ "$status" -eq 0 ]
        # each rank's shard (Phi / K: tiny pads nothing for K = 1, 2) is
        # all-reduced over the 4 / K replicas once per step, a call per unit
        for r in 0 3; do
            got=$(awk -F, -v r="$r" '$1 == r && $2 == "replicate" && $3 == "allreduce" { print $4, $5 }' \
                "$out/comm.csv")
            echo "rank $r replicate: $got"
            [ "$got" = "$((steps * 6)) $((steps * 4 * PHI / k))" ]
        done
    done
    # replica 0's shard group writes each state once; the checkpoint of
    # step 6 resumes bit for bit as hybrid sharding, as plain ZeRO-3 and
    # as ZeRO-2 over 2 of the 4
    local from="$ck/--zero3--dp-shard2/step-000006" base="$BATS_TEST_TMPDIR/--zero3--dp-shard2"
    for flags in "--zero 3 --dp-shard 2" "--zero 3" "--zero 2 --dp-shard 2"; do
        # shellcheck disable=SC2086
        zero_run "$BATS_TEST_TMPDIR/r" 4 $flags --resume "$from" > /dev/null
        cmp "$base/params.bin" "$BATS_TEST_TMPDIR/r/params.bin"
    done
}

@test "zero --dp-shard: bad degrees and the planner's other layouts are one clear error; the skeleton stops at the extension's TODO" {
    require_solution 03
    local bad
    for bad in "--dp-shard 3" "--dp-shard 0" "--dp-shard 8"; do
        # shellcheck disable=SC2086  # bad is a list of flags
        run mpirun_t 60 4 "$ZERO" --config tiny --steps 2 --zero 3 $bad --out "$BATS_TEST_TMPDIR/bad"
        echo "$bad: $output"
        assert_user_error
    done
    memplan_refuses "--ranks 4 --dp-shard 3" "--tp 2 --ranks 4 --dp-shard 2" "--dp-shard x"
    require_solution 00
    require_untouched 03
    skeleton_stops_at 4 zero_hsdp_groups --zero 3 --dp-shard 2
}

# ---- the third extension: --offload (ZeRO-Offload: the optimizer on the host)

@test "zero --offload: ZeRO-2 and 3 (fp32 and bf16, 2 micro-batches) equal the runs without it bit for bit; the device holds no optimizer bytes, the host memplan --offload's; checkpoints cross between the two" {
    require_solution 03
    local st prec out base
    for st in 2 3; do
        for prec in fp32 bf16; do
            base="$BATS_TEST_TMPDIR/z$st$prec" out="$BATS_TEST_TMPDIR/o$st$prec"
            zero_run "$base" 2 --zero "$st" --precision "$prec" --grad-accum 2 > /dev/null
            run zero_run "$out" 2 --zero "$st" --precision "$prec" --grad-accum 2 --offload
            echo "zero $st $prec: $output"
            [ "$status" -eq 0 ]
            [[ "$output" != *DIFFERENT* ]]
            [[ "$output" == *"host_optimizer predicted"*" ok"* ]]
            same_bits "$base" "$out"
            "$BUILD/bin/memplan" --config tiny --ranks 2 --grad-accum 2 --precision "$prec" --offload \
                --csv > "$out/plan.csv"
            python3 - "$out" "zero$st" <<'PY'
import csv, sys
out, layout = sys.argv[1], sys.argv[2]
plan = {r["category"]: int(r["peak_bytes"]) for r in csv.DictReader(open(out + "/plan.csv"))
        if r["layout"] == layout}
rows = list(csv.DictReader(open(out + "/memory.csv")))
assert len(rows) == 2 * 8, f"{len(rows)} rows: 6 device and 2 host categories per rank expected"
for r in rows:
    assert int(r["peak_bytes"]) == plan[r["category"]], r
assert plan["optimizer"] == 0 and plan["host_optimizer"] == 12 * 220544 // 2, plan
PY
        done
    done
    # a checkpoint saved offloaded resumes without offload, and the other way
    local ck="$BATS_TEST_TMPDIR/ck"
    zero_run "$BATS_TEST_TMPDIR/s" 2 --zero 2 --offload --save "$ck" --save-every 6 > /dev/null
    zero_run "$BATS_TEST_TMPDIR/r" 2 --zero 3 --resume "$ck/step-000006" > /dev/null
    cmp "$BATS_TEST_TMPDIR/s/params.bin" "$BATS_TEST_TMPDIR/r/params.bin"
    zero_run "$BATS_TEST_TMPDIR/r2" 2 --zero 3 --offload --resume "$ck/step-000006" > /dev/null
    cmp "$BATS_TEST_TMPDIR/s/params.bin" "$BATS_TEST_TMPDIR/r2/params.bin"
}

@test "zero --offload: below ZeRO-2, with --overlap-rs or --dp-shard, and in the planner's other modes it is one clear error; memplan --offload times the host link by the formula; the skeleton stops at the extension's TODO" {
    require_solution 03
    local bad
    for bad in "--zero 1 --offload" "--zero 2 --offload --overlap-rs" "--zero 3 --offload --dp-shard 1"; do
        # shellcheck disable=SC2086  # bad is a list of flags
        run mpirun_t 60 2 "$ZERO" --config tiny --steps 2 $bad --out "$BATS_TEST_TMPDIR/bad"
        echo "$bad: $output"
        assert_user_error
        [[ "$output" == *"--offload needs --zero 2 or 3"* ]]
    done
    memplan_refuses "--offload --tp 2" "--offload --params 7e9" "--offload --dp-shard 1" \
        "--host-bw 25" "--offload --host-bw 0" "--offload --cpu-adam x"
    # the host link's time (costmodel.h): tiny on 2 ranks owns S = 110272
    # elements, the embeddings' 10240: down and up 6 x 10 us + 4 S / 25e9 s,
    # AdamW S / 1e9 s, exposed 10 us + 4 x 10240 / 25e9 s + AdamW + up
    run t 10 "$BUILD/bin/memplan" --config tiny --ranks 2 --offload
    [[ "$output" == *"down 441088 bytes in 6 copies 0.0776 ms, CPU 0.1103 ms, up 441088 bytes 0.0776 ms; exposed 0.1996 ms"* ]]
    run t 10 "$BUILD/bin/memplan" --config tiny --ranks 2 --offload --precision bf16 --host-bw 12.5 --host-lat 0 --cpu-adam 0.5
    [[ "$output" == *"down 220544 bytes in 6 copies 0.0176 ms, CPU 0.2205 ms, up 220544 bytes 0.0176 ms"* ]]
    require_solution 00
    require_untouched 03
    # ZeRO-3's first parameters go up from the host's master at the start
    skeleton_stops_at 2 zero_offload_params --zero 3 --offload
}

# ---- the fourth extension: ZeRO++ (--qwz, --hpz K, --qgz K) ----------------

# loss_gap A B: the largest difference of the training and of the validation
# losses, step by step, of runs A and B ("TRAIN VAL")
loss_gap() {
    paste -d, "$1/metrics.csv" "$2/metrics.csv" | awk -F, 'NR > 1 {
        d = $2 - $9; if (d < 0) d = -d; if (d > t) t = d
        if ($3 != "" && $10 != "") { d = $3 - $10; if (d < 0) d = -d; if (d > v) v = d } }
        END { printf "%.4f %.4f\n", t, v }'
}

# comm_bytes DIR GROUP OP: rank 0's bytes of OP on GROUP (comm.csv), 0 if none
comm_bytes() { awk -F, -v g="$2" -v o="$3" '$1 == 0 && $2 == g && $3 == o { b = $5 } END { print b + 0 }' "$1/comm.csv"; }

@test "zero++: hpZ alone is ZeRO-3 bit for bit; qwZ and qgZ follow its losses within 0.02 (the quantized run's tolerance); memory = the planner's; int8 gathers move a quarter of the bytes, qgZ's all-to-alls replace the reduce-scatter" {
    require_solution 03
    local d="$BATS_TEST_TMPDIR" gap
    run zero_run "$d/z3" 4 --zero 3
    [ "$status" -eq 0 ]
    run zero_run "$d/hpz" 4 --zero 3 --hpz 2
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"ZeRO++: hpZ secondary copies (nodes of 2 ranks)"* ]]
    [[ "$output" != *DIFFERENT* ]] && [ "$(grep -c ' ok$' <<<"$output")" -eq 6 ]
    # the same weights gathered another way: the same run (comm.csv aside)
    cmp "$d/z3/params.bin" "$d/hpz/params.bin"
    cmp <(cut -d, -f1-5 "$d/z3/metrics.csv") <(cut -d, -f1-5 "$d/hpz/metrics.csv")
    # the backward's gathers inside each node: as many bytes as dp's forward ones
    [ "$(comm_bytes "$d/hpz" node allgather)" -gt 0 ]
    [ "$(comm_bytes "$d/hpz" dp allgather)" -eq "$(( $(comm_bytes "$d/z3" dp allgather) - $(comm_bytes "$d/hpz" node allgather) ))" ]
    for flags in "--qwz" "--qgz 2" "--qwz --hpz 2 --qgz 2"; do
        out="$d/${flags//[ -]/}"
        # shellcheck disable=SC2086  # flags is a list
        run zero_run "$out" 4 --zero 3 $flags
        echo "$flags: $output"
        [ "$status" -eq 0 ]
        [[ "$output" != *DIFFERENT* ]] && [ "$(grep -c ' ok$' <<<"$output")" -eq 6 ]
        read -r train val <<<"$(loss_gap "$d/z3" "$out")"
        echo "$flags: losses within $train (training) and $val (validation) of ZeRO-3's"
        awk -v t="$train" -v v="$val" 'BEGIN { exit !(t > 0 && t < 0.02 && v < 0.02) }'
        [ "$(tail -n +2 "$out/params_checksum.csv" | cut -d, -f2 | sort -u | wc -l)" -eq 1 ]
    done
    # qwZ: the same gathers in int8 with a float scale per 256 values
    awk -v q="$(comm_bytes "$d/qwz" dp allgather)" -v f="$(comm_bytes "$d/z3" dp allgather)" \
        'BEGIN { r = q / f; print "int8 / fp32 gather bytes:", r; exit !(r > 0.25 && r < 0.26) }'
    # qgZ: no reduce-scatter; the node's all-to-all carries K = 2 times across's bytes
    [ "$(comm_bytes "$d/qgz2" dp reduce_scatter)" -eq 0 ]
    [ "$(comm_bytes "$d/qgz2" node alltoall)" -eq "$(( 2 * $(comm_bytes "$d/qgz2" across alltoall) ))" ]
    awk -v q="$(comm_bytes "$d/qgz2" node alltoall)" -v f="$(comm_bytes "$d/z3" dp reduce_scatter)" \
        'BEGIN { r = q / f; print "int8 all-to-all / fp32 reduce-scatter bytes:", r; exit !(r > 0.25 && r < 0.26) }'
}

@test "zero++: below ZeRO-3, in mixed precision, beside --overlap-rs, --offload or --dp-shard, or a node size that does not divide the ranks, it is one clear error; the skeleton leaves its five functions TODOs" {
    require_solution 03
    local bad
    for bad in "--zero 2 --qwz" "--zero 3 --qwz --precision bf16" "--zero 3 --hpz 2 --overlap-rs" \
        "--zero 3 --qgz 2 --offload" "--zero 3 --qwz --dp-shard 2" "--zero 3 --hpz 3" \
        "--zero 3 --hpz 2 --qgz 4" "--zero 3 --qgz 0"; do
        # shellcheck disable=SC2086  # bad is a list of flags
        run mpirun_t 60 4 "$ZERO" --config tiny --steps 2 $bad --out "$BATS_TEST_TMPDIR/bad"
        echo "$bad: $output"
        assert_user_error
    done
    # the skeleton: each of the five a TODO (a run stops at ZeRO-3's own first)
    require_untouched 03
    for fn in zero_qwz_gather_start zero_qwz_gather_finish zero_hpz_keep zero_hpz_gather_start \
        zero_qgz_reduce; do
        sed -n "/^void $fn(/,/^}/p" "$ROOT/labs/03_zero/zero.c" | grep -q 'NOT_IMPLEMENTED();'
    done
}
