#!/usr/bin/env bats
# Mixed precision (--precision bf16|fp16 --fp32-grads; model.h, model_states.h):
# one device keeps an fp32 master and a 2-byte compute copy (memory as the
# planner says), trains close to fp32 but not on its bits; every replicated
# layout follows the one-device bf16 run within a tolerance that fp32's own
# run falls outside of; fp16's loss scale skips overflowing steps on every
# rank together; a bf16 run resumes bit for bit and loads fp32's checkpoints.
load helpers

GPT="$BUILD/solutions/00_single_device/train_gpt"
COMMON=(--config tiny --steps 10 --eval-every 0 --threads 1)
MIXED=(--precision bf16 --fp32-grads)

setup_file() {
    export BF16="$BATS_FILE_TMPDIR/bf16" FP32="$BATS_FILE_TMPDIR/fp32"
    have_solution 00 || return 0
    t 60 "$GPT" "${COMMON[@]}" "${MIXED[@]}" --out "$BF16" > /dev/null
    t 60 "$GPT" "${COMMON[@]}" --out "$FP32" > /dev/null
}

# max_loss_gap A B: the largest difference of the two runs' losses over
# the steps both ran
max_loss_gap() {
    python3 - "$1/metrics.csv" "$2/metrics.csv" <<'PY'
import csv, sys
a, b = ({r["step"]: float(r["loss"]) for r in csv.DictReader(open(f))} for f in sys.argv[1:3])
steps = a.keys() & b.keys()
assert steps, "no step in common"
print(f"{max(abs(a[s] - b[s]) for s in steps):.3g}")
PY
}

# bytes_of RUN CATEGORY: rank 0's peak bytes of a memory.csv category
bytes_of() { awk -F, -v c="$2" '$1 == 0 && $2 == c { print $4 }' "$1/memory.csv"; }

@test "precision: bf16 on one device keeps a 2-byte compute copy beside fp32 masters and trains near fp32, not on its bits" {
    require_solution 00
    grep -q '"precision": "bf16", "fp32_grads": true' "$BF16/run.json"
    # params: 4 bytes of master + 2 of compute copy; grads and moments fp32
    [ "$(bytes_of "$BF16" params)" -eq $(($(bytes_of "$FP32" params) * 3 / 2)) ]
    [ "$(bytes_of "$BF16" grads)" -eq "$(bytes_of "$FP32" grads)" ]
    [ "$(bytes_of "$BF16" optimizer)" -eq "$(bytes_of "$FP32" optimizer)" ]
    gap=$(max_loss_gap "$BF16" "$FP32")
    echo "bf16 against fp32: losses apart by up to $gap"
    python3 -c "import sys; g = float(sys.argv[1]); sys.exit(not 1e-5 < g < 2e-2)" "$gap"
}

# The tolerance of a layout against one device, both bf16, over 10 steps
# of tiny: the layouts round their fp32 partial sums to bf16 elsewhere
# (rare 1-ulp flips, u = 2^-8) and measure 1e-4 (DDP, TP, PP, CP) to 2.3e-4
# (EP: a flip can change a routing); bf16 against fp32 is 1.7e-3.
TOLERANCE=5e-4

@test "precision: every replicated layout in bf16 follows one device in bf16 within $TOLERANCE (fp32 does not), memory as the planner's" {
    require_solution 00 02 04 05 06 07 08 10
    cd "$ROOT"
    local s="$BUILD/solutions" d="$BATS_TEST_TMPDIR" failed=0 gap prog np flags out
    # a mixture of experts against its own one-device run
    t 60 "$s/08_moe/train_moe" --config tiny-moe "${COMMON[@]:2}" "${MIXED[@]}" --out "$d/moe1" > /dev/null
    local cases=("02_ddp/train_ddp|2|" "04_tensor_parallel/train_tp|2|--tp 2"
                 "05_activation_memory/train_tp|2|--tp 2 --sp --recompute selective"
                 "06_pipeline/train_pp|2|--pp 2 --micro-batches 2"
                 "07_context_parallel/train_cp|2|--cp 2 --cp-algo zigzag"
                 "08_moe/train_moe|2|--config tiny-moe --ep 2"
                 "10_composed/train_4d|4|--tp 2 --pp 2")
    for c in "${cases[@]}"; do
        IFS='|' read -r prog np flags <<<"$c"
        out="$d/${prog//\//-}-${flags// /_}"
        # shellcheck disable=SC2086  # flags is a list of options
        run mpirun_t 120 "$np" "$s/$prog" "${COMMON[@]}" $flags "${MIXED[@]}" --out "$out"
        [ "$status" -eq 0 ] || { echo "$prog $flags: $output"; return 1; }
        [[ "$output" != *DIFFERENT* ]] || { echo "$prog $flags: memory not as planned: $output"; failed=1; }
        base=$BF16
        [[ "$flags" != *tiny-moe* ]] || base=$d/moe1
        gap=$(max_loss_gap "$base" "$out")
        echo "$prog $flags: $gap"
        python3 -c "import sys; sys.exit(float(sys.argv[1]) >= float(sys.argv[2]))" "$gap" \
            "$TOLERANCE" || failed=1
    done
    # the planner alone predicts what train_tp measured, byte for byte
    out="$d/04_tensor_parallel-train_tp---tp_2"
    diff <("$BUILD/bin/memplan" --config tiny --tp 2 --precision bf16 --csv |
           awk -F, 'NR > 1 { print $2 "," $4 }') \
         <(awk -F, '$1 == 0 { print $2 "," $4 }' "$out/memory.csv")
    run "$BUILD/bin/memplan" --config tiny --precision bf16
    assert_user_error
    gap=$(max_loss_gap "$BF16" "$FP32")
    echo "fp32 against bf16: $gap"
    python3 -c "import sys; sys.exit(float(sys.argv[1]) < float(sys.argv[2]))" "$gap" "$TOLERANCE"
    [ "$failed" -eq 0 ]
}

@test "precision: fp16's loss scale skips every overflowing step on every rank together, halves on overflow and doubles after clean steps" {
    require_solution 02
    local out="$BATS_TEST_TMPDIR/fp16"
    # 2^24 overflows fp16's activation gradients on tiny's first step, 2^25 does
    # not, 2^26 does again later: skips, halvings and doublings all happen
    run mpirun_t 120 2 "$BUILD/solutions/02_ddp/train_ddp" "${COMMON[@]}" --steps 16 \
        --precision fp16 --fp32-grads --loss-scale 16777216 --loss-scale-interval 3 \
        --out "$out"
    [ "$status" -eq 0 ]
    python3 - "$out/metrics.csv" <<'PY'
import csv, math, sys
rows = list(csv.DictReader(open(sys.argv[1])))
scale = [float(r["loss_scale"]) for r in rows]
skipped = [int(r["skipped"]) for r in rows]
k = skipped.index(0)
assert k > 0 and all(skipped[:k]), skipped  # the first steps overflow
want, clean = 2.0 ** 24, 0                  # the scaler, as model_states.h says
for i, (got, skip) in enumerate(zip(scale, skipped)):
    assert got == want, f"step {i}: scale {got}, expected {want} (skipped {skipped})"
    if skip:
        want, clean = want / 2, 0
    else:
        clean += 1
        if clean == 3:
            want, clean = want * 2, 0
assert sum(skipped) >= 2 and any(y == 2 * x for x, y in zip(scale, scale[1:])), (skipped, scale)
assert all(not math.isfinite(float(r["grad_norm"])) for r, s in zip(rows, skipped) if s)
print(f"{k} skipped steps, scale {scale[0]:g} -> {scale[-1]:g}")
PY
    [ "$(tail -n +2 "$out/params_checksum.csv" | cut -d, -f2 | sort -u | wc -l)" -eq 1 ]
}

@test "precision: a bf16 run resumes bit for bit, and loads an fp32 run's checkpoint" {
    require_solution 09
    local b="$BUILD/solutions/09_checkpoint/train_gpt" d="$BATS_TEST_TMPDIR"
    run t 60 "$b" "${COMMON[@]}" "${MIXED[@]}" --save "$d/ck" --save-every 5 --out "$d/whole"
    [ "$status" -eq 0 ]
    run t 60 "$b" "${COMMON[@]}" "${MIXED[@]}" --resume "$d/ck/step-000005" --out "$d/resumed"
    [ "$status" -eq 0 ]
    diff <(tail -5 "$d/whole/metrics.csv" | cut -d, -f1,2,5) \
         <(tail -5 "$d/resumed/metrics.csv" | cut -d, -f1,2,5)
    run t 60 "$b" "${COMMON[@]}" --save "$d/ck32" --save-every 5 --out "$d/fp32"
    [ "$status" -eq 0 ]
    run t 60 "$b" "${COMMON[@]}" "${MIXED[@]}" --resume "$d/ck32/step-000005" --out "$d/mixed"
    [ "$status" -eq 0 ]
    gap=$(max_loss_gap "$d/fp32" "$d/mixed")
    echo "fp32 checkpoint continued in bf16: $gap from fp32"
    python3 -c "import sys; g = float(sys.argv[1]); sys.exit(not 0 < g < 2e-2)" "$gap"
}
