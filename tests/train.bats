#!/usr/bin/env bats
# The single-device trainer: it learns, it is deterministic, its outputs have
# the documented columns, its memory equals the formula, its LR follows the
# schedule.
load helpers

# every test here runs lab 00's solution
setup() {
    require_solution 00
}

train() {
    t 300 "$SOL00/train_gpt" --data "$SYNTH" --threads 2 "$@"
}

@test "tiny learns the synthetic corpus: val loss from ~ln(256) to below 2.2 in 300 steps" {
    # ln(256) = 5.545; the corpus' unigram entropy is 2.97 nats and its floor
    # 0.28 (datasets/README.md). 300 steps measured 1.997 (lr 1e-3, seed 1).
    run train --config tiny --steps 300 --eval-every 100 --out "$BATS_TEST_TMPDIR/run"
    [ "$status" -eq 0 ]
    m="$BATS_TEST_TMPDIR/run/metrics.csv"
    first=$(csv_col "$m" loss 0)
    last_val=$(csv_col "$m" val_loss 299)
    echo "first loss $first, final val loss $last_val"
    awk -v x="$first" 'BEGIN { exit !(x > 5.3 && x < 5.8) }'
    awk -v x="$last_val" 'BEGIN { exit !(x < 2.2) }'
}

@test "two runs with the same seed write identical metrics (timing columns aside)" {
    train --config tiny --steps 15 --eval-every 5 --out "$BATS_TEST_TMPDIR/a" >/dev/null
    train --config tiny --steps 15 --eval-every 5 --out "$BATS_TEST_TMPDIR/b" >/dev/null
    cut -d, -f1-5 "$BATS_TEST_TMPDIR/a/metrics.csv" > "$BATS_TEST_TMPDIR/a.txt"
    cut -d, -f1-5 "$BATS_TEST_TMPDIR/b/metrics.csv" > "$BATS_TEST_TMPDIR/b.txt"
    cmp "$BATS_TEST_TMPDIR/a.txt" "$BATS_TEST_TMPDIR/b.txt"
    train --config tiny --steps 15 --seed 2 --out "$BATS_TEST_TMPDIR/c" >/dev/null
    cut -d, -f1-5 "$BATS_TEST_TMPDIR/c/metrics.csv" > "$BATS_TEST_TMPDIR/c.txt"
    ! cmp -s "$BATS_TEST_TMPDIR/a.txt" "$BATS_TEST_TMPDIR/c.txt" || return 1
}

@test "the thread count does not change the losses beyond float noise" {
    t 300 "$SOL00/train_gpt" --data "$SYNTH" --config tiny --steps 10 --threads 1 --out "$BATS_TEST_TMPDIR/t1" >/dev/null
    t 300 "$SOL00/train_gpt" --data "$SYNTH" --config tiny --steps 10 --threads 2 --out "$BATS_TEST_TMPDIR/t2" >/dev/null
    paste -d, <(cut -d, -f2 "$BATS_TEST_TMPDIR/t1/metrics.csv" | tail -n +2) \
              <(cut -d, -f2 "$BATS_TEST_TMPDIR/t2/metrics.csv" | tail -n +2) |
        awk -F, '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1e-4 * $1) { print "step " NR-1 ": " $1 " vs " $2; bad = 1 } } END { exit bad }'
}

@test "run outputs: metrics.csv, memory.csv and run.json with the documented fields" {
    train --config tiny --steps 12 --eval-every 5 --out "$BATS_TEST_TMPDIR/run" >/dev/null
    d="$BATS_TEST_TMPDIR/run"
    [ "$(head -n1 "$d/metrics.csv")" = "step,loss,val_loss,lr,grad_norm,tokens_per_s,step_ms" ]
    [ "$(wc -l < "$d/metrics.csv")" -eq 13 ]
    # evaluation at steps 0, 5, 10 and the last step, nowhere else
    evals=$(awk -F, 'NR > 1 && $3 != "" { printf "%s ", $1 }' "$d/metrics.csv")
    [ "$evals" = "0 5 10 11 " ]
    [ "$(head -n1 "$d/memory.csv")" = "rank,category,current_bytes,peak_bytes" ]
    [ "$(tail -n +2 "$d/memory.csv" | cut -d, -f2 | tr '\n' ' ')" = "params grads optimizer activations comm workspace " ]
    /usr/bin/python3 - "$d/run.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["lab"] == "00_single_device" and r["config"] == "tiny", r
assert r["model"]["num_params"] == 220544, r["model"]
assert r["train"]["steps"] == 12 and r["train"]["seed"] == 1
assert r["world"]["size"] == 1 and r["backend"]["device"] == "cpu"
assert r["git_revision"]
PY
}

# Memory formula, written here independently of model.c:
#   Phi = V C + ctx C + L (12 C^2 + 13 C) + 2 C
#   params 4 Phi, grads 4 Phi, AdamW moments 8 Phi
#   activations 4 [ BTC + L (BT (16C + 4) + B NH T^2) + BT (C + 2) + BTV + BT ] + 4 (2BT token ids)
#   workspace   4 [ 17 BTC + B NH T^2 ]
check_memory() {  # V ctx L NH C B T memory.csv
    local V=$1 ctx=$2 L=$3 NH=$4 C=$5 B=$6 T=$7 csv=$8
    local phi=$(( V*C + ctx*C + L*(12*C*C + 13*C) + 2*C ))
    local BT=$(( B*T ))
    local act=$(( 4*( BT*C + L*(BT*(16*C + 4) + B*NH*T*T) + BT*(C + 2) + BT*V + BT ) + 4*2*BT ))
    local ws=$(( 4*( 17*BT*C + B*NH*T*T ) ))
    local expect="params=$((4*phi)) grads=$((4*phi)) optimizer=$((8*phi)) activations=$act comm=0 workspace=$ws "
    local got
    got=$(tail -n +2 "$csv" | awk -F, '{ printf "%s=%s ", $2, $4 }')
    echo "expected: $expect"
    echo "measured: $got"
    [ "$got" = "$expect" ]
}

@test "peak memory per category equals the formula exactly (tiny)" {
    train --config tiny --steps 2 --out "$BATS_TEST_TMPDIR/run" >/dev/null
    check_memory 256 64 4 4 64 8 64 "$BATS_TEST_TMPDIR/run/memory.csv"
}

@test "peak memory per category equals the formula exactly (odd shapes)" {
    train --config tiny --n-layer 3 --n-head 2 --n-embd 48 --ctx 40 --batch 3 --seq 33 --steps 2 \
        --out "$BATS_TEST_TMPDIR/run" >/dev/null
    check_memory 256 40 3 2 48 3 33 "$BATS_TEST_TMPDIR/run/memory.csv"
}

@test "learning rate: linear warmup to the peak, cosine down to min-lr-frac" {
    train --config tiny --steps 30 --warmup 5 --lr 2e-3 --min-lr-frac 0.1 --out "$BATS_TEST_TMPDIR/run" >/dev/null
    m="$BATS_TEST_TMPDIR/run/metrics.csv"
    awk -v x="$(csv_col "$m" lr 0)" 'BEGIN { exit !(x > 3.99e-4 && x < 4.01e-4) }'   # 2e-3 * 1/5
    awk -v x="$(csv_col "$m" lr 4)" 'BEGIN { exit !(x > 1.999e-3 && x < 2.001e-3) }' # peak
    awk -v x="$(csv_col "$m" lr 29)" 'BEGIN { exit !(x > 1.999e-4 && x < 2.001e-4) }' # floor
    # monotone decay after the peak
    tail -n +6 "$m" | cut -d, -f4 | awk 'NR > 1 && $1 > prev { exit 1 } { prev = $1 }'
}

@test "gradient clipping: the logged norm is before clipping, clipping changes the updates" {
    train --config tiny --steps 5 --grad-clip 0 --out "$BATS_TEST_TMPDIR/free" >/dev/null
    train --config tiny --steps 5 --grad-clip 1e-3 --out "$BATS_TEST_TMPDIR/clip" >/dev/null
    f="$BATS_TEST_TMPDIR/free/metrics.csv" c="$BATS_TEST_TMPDIR/clip/metrics.csv"
    [ "$(csv_col "$f" grad_norm 0)" = "$(csv_col "$c" grad_norm 0)" ]
    awk -v x="$(csv_col "$f" grad_norm 0)" 'BEGIN { exit !(x > 1e-3) }'  # so clipping did act
    # AdamW divides by sqrt(v), so scaling every gradient by one factor would
    # change nothing; a different factor per step does change the updates.
    [ "$(cut -d, -f2 "$f" | tail -n 3)" != "$(cut -d, -f2 "$c" | tail -n 3)" ]
}

@test "--help prints the options and exits 0" {
    run t 10 "$SOL00/train_gpt" --help
    [ "$status" -eq 0 ]
    [[ "$output" == *"--config NAME"* ]]
    [[ "$output" == *"--steps N"* ]]
}

@test "--profile: a per-kernel table and profile.csv that add up, drawn as a roofline" {
    run train --config tiny --steps 4 --eval-every 2 --profile --out "$BATS_TEST_TMPDIR/run"
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"profile of 3 steps (the first and the evaluations left out)"* ]]
    [[ "$output" == *"ridge "*" FLOP/byte"* ]]
    printf '%s\n' "$output" | grep -Eq '^matmul_backward +17 '
    printf '%s\n' "$output" | grep -Eq '^GEMMs \(matmul_forward \+ matmul_backward\): [0-9.]+% of the step$'
    p="$BATS_TEST_TMPDIR/run/profile.csv"
    [ "$(head -n1 "$p")" = "kernel,calls_per_step,ms_per_step,share,gflop_per_step,mb_per_step,flop_per_byte,gflops,gbps,bound,roof_fraction,peak_gflops,peak_gbps" ]
    # shares add up to at most the step; matmul_forward's FLOPs are the
    # formula's: per layer qkv, projection, MLP up and down (2 N IC OC and
    # N OC for the bias each), and the lm head tied to wte (2 N C V)
    awk -F, 'NR > 1 { n++; share += $4; if ($3 < 0 || $4 < 0) bad = 1 }
             $1 == "matmul_forward" { fwd = $5 }
             END { if (bad || n < 15 || share > 1.0001) exit 1
                   N = 8 * 64; C = 64; V = 256
                   f = 4 * (2*N*C*3*C + N*3*C + 2*N*C*C + N*C + 2*N*C*4*C + N*4*C + 2*N*4*C*C + N*C) + 2*N*C*V
                   d = fwd - f / 1e9; if (d < 0) d = -d
                   exit !(d < 1e-5) }' "$p"
    run bash "$ROOT/tools/plot_roofline.sh" "$BATS_TEST_TMPDIR/run"
    [ "$status" -eq 0 ]
    [ -s "$BATS_TEST_TMPDIR/run/roofline.png" ]
    # one step: nothing after the first to profile, said plainly
    run train --config tiny --steps 1 --profile --out "$BATS_TEST_TMPDIR/one"
    [ "$status" -eq 0 ]
    [[ "$output" == *"no step after the first to profile"* ]]
}

# ---- the console: --progress (common/runlog.h) --------------------------------

# progress_steps FILE: the step numbers of FILE's progress lines, on one line
progress_steps() { sed -n 's|^step *\([0-9]*\)/.*|\1|p' "$1" | tr '\n' ' '; }

# console NP PROG ARGS...: PROG on NP ranks under mpirun, its output (both
# streams) into $BATS_TEST_TMPDIR/console.txt, as a script redirects a run
console() {
    local np=$1 prog=$2
    shift 2
    mpirun_t 120 "$np" "$prog" --config tiny --data "$SYNTH" --threads 1 --steps 30 \
        --eval-every 25 --out "$BATS_TEST_TMPDIR/run" "$@" > "$BATS_TEST_TMPDIR/console.txt" 2>&1 < /dev/null
}

@test "progress under mpirun into a file: plain lines (the first, every --log-every, held-out, the last) with an ETA; --progress bar redraws; a bad mode is refused" {
    # mpirun hands rank 0 a pseudo-terminal whatever its own stdout is
    local f="$BATS_TEST_TMPDIR/console.txt"
    console 1 "$SOL00/train_gpt"
    cat -A "$f"
    ! grep -q $'\r' "$f" || return 1
    [ "$(progress_steps "$f")" = "0 10 20 25 29 " ]   # as metrics.csv numbers them
    [ "$(progress_steps "$f")" = "$(awk -F, 'NR > 1 && ($1 % 10 == 0 || $3 != "" || $1 == 29) { printf "%s ", $1 }' "$BATS_TEST_TMPDIR/run/metrics.csv")" ]
    [ "$(grep -c '^step .* | ETA [0-9]*:[0-9][0-9]$' "$f")" -eq 5 ]
    [ "$(grep -c '| val ' "$f")" -eq 3 ]
    console 1 "$SOL00/train_gpt" --log-every 15
    [ "$(progress_steps "$f")" = "0 15 25 29 " ]
    # asked for: the bar, one line redrawn, ending with the last step's
    console 1 "$SOL00/train_gpt" --progress bar
    [ "$(grep -o $'\rstep' "$f" | wc -l)" -eq 30 ]
    [[ "$(grep -a 'step 29/29' "$f")" == *$'\r'"step 29/29 | loss "*" | ETA "* ]]
    run mpirun_t 60 1 "$SOL00/train_gpt" --progress fancy
    echo "$output"
    assert_user_error
    [[ "$output" == *"train_gpt: error: --progress expects auto, lines or bar, got 'fancy'"* ]]
    # auto on a terminal (script(1) gives mpirun one): the bar
    command -v script > /dev/null || skip "no script(1) to give mpirun a terminal"
    run t 120 script -qec "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -q -np 1 $SOL00/train_gpt --config tiny --data $SYNTH --threads 1 --steps 30 --out $BATS_TEST_TMPDIR/run" /dev/null < /dev/null
    [ "$status" -eq 0 ]
    [ "$(grep -o $'\rstep' <<< "$output" | wc -l)" -eq 30 ]
}

@test "progress of 2 ranks (lab 02) into a file: rank 0's plain lines only; a bad mode is one error line" {
    require_solution 02
    local f="$BATS_TEST_TMPDIR/console.txt" ddp="$BUILD/solutions/02_ddp/train_ddp"
    console 2 "$ddp"
    cat "$f"
    ! grep -q $'\r' "$f" || return 1
    [ "$(progress_steps "$f")" = "0 10 20 25 29 " ]
    [ "$(grep -c '^step .* | ETA [0-9]*:[0-9][0-9]$' "$f")" -eq 5 ]
    run mpirun_t 60 2 "$ddp" --progress ""
    echo "$output"
    assert_user_error
    [[ "$output" == *"train_ddp: error: --progress expects auto, lines or bar, got ''"* ]]
}
