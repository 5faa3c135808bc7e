#!/usr/bin/env bats
# Checkpoints (common/checkpoint.h): every trainer saves with --save DIR
# --save-every K [--keep K] and continues with --resume PATH. A run of 8
# steps that saves at step 4, resumed from that checkpoint in the same
# layout, ends bit for bit where the straight run ended (metrics.csv's
# losses, learning rates and gradient norms, the final parameters), for
# every layout; a checkpoint saved in one layout loads into any other
# (ZeRO-3 -> TP x DP -> PP -> one device) and the run follows the
# single-device one within float tolerance. Damaged, foreign or missing
# checkpoints are one clear error before any work, and a job killed while
# saving leaves the previous checkpoints loadable. --save-async (the lab's
# extension: the files written by a thread while training goes on) writes
# the very files of the synchronous save.
load helpers

S="$BUILD/solutions"
GPT="$S/00_single_device/train_gpt"
CKPT="$BUILD/bin/ckpt"
RUN=(--steps 8 --eval-every 4 --threads 1)

# resume_same NAME RANKS PROGRAM ARGS...: straight run (saving every 4
# steps, with the flags in the array SAVING) vs resumed from its step 4,
# bit for bit
SAVING=()
resume_same() {
    local name=$1 np=$2 prog=$3 d="$BATS_TEST_TMPDIR/$1"
    shift 3
    run mpirun_t 240 "$np" "$prog" "${RUN[@]}" "$@" --save "$d/ck" --save-every 4 "${SAVING[@]}" \
        --out "$d/full" --dump-params "$d/full.bin"
    [ "$status" -eq 0 ] || { echo "$name, straight: $output"; return 1; }
    # saved at once, or (--save-async) committed later
    [[ "$output" == *"saved $d/ck/step-000004"* || "$output" == *"committed $d/ck/step-000004"* ]]
    [[ "$output" == *"saved $d/ck/step-000008"* || "$output" == *"committed $d/ck/step-000008"* ]]
    run mpirun_t 240 "$np" "$prog" "${RUN[@]}" "$@" --resume "$d/ck/step-000004" \
        --out "$d/resumed" --dump-params "$d/resumed.bin"
    [ "$status" -eq 0 ] || { echo "$name, resumed: $output"; return 1; }
    [[ "$output" == *"4 steps done, 4 to go"* ]]
    # the programs' traffic and memory checks count the resumed run's steps
    [[ "$output" != *DIFFERENT* ]] || { echo "$name, resumed: $output"; return 1; }
    cmp "$d/full.bin" "$d/resumed.bin" || { echo "$name: parameters differ"; return 1; }
    # steps 4..7: loss, val_loss, lr, grad_norm identical
    diff <(tail -n 4 "$d/full/metrics.csv" | cut -d, -f1-5) <(tail -n +2 "$d/resumed/metrics.csv" | cut -d, -f1-5) ||
        { echo "$name: metrics differ"; return 1; }
    echo "$name: resumed bit for bit"
}

@test "checkpoint: one device, DDP and ZeRO-1/2/3 resume bit for bit" {
    require_solution 00 02 03 09
    resume_same one 1 "$GPT" --config tiny
    resume_same ddp 2 "$S/02_ddp/train_ddp" --config tiny
    resume_same zero1 2 "$S/03_zero/train_zero" --zero 1 --config tiny
    resume_same zero2 3 "$S/03_zero/train_zero" --zero 2 --config tiny --batch 6
    resume_same zero3 4 "$S/03_zero/train_zero" --zero 3 --config tiny
}

@test "checkpoint: TP, TP + SP, ZeRO-3 with recomputation, and PP with every schedule resume bit for bit" {
    require_solution 00 02 03 04 05 06 09
    resume_same tp 4 "$S/04_tensor_parallel/train_tp" --tp 2 --config tiny
    resume_same tpsp 2 "$S/05_activation_memory/train_tp" --tp 2 --sp --config tiny
    resume_same zero3rc 2 "$S/05_activation_memory/train_zero" --zero 3 --recompute full --config tiny
    for s in gpipe 1f1b interleaved zb-h1; do
        resume_same "pp-$s" 2 "$S/06_pipeline/train_pp" --pp 2 --schedule "$s" --grad-accum 4 --config tiny
    done
    resume_same tppp 4 "$S/06_pipeline/train_pp" --pp 2 --tp 2 --grad-accum 2 --config tiny
}

@test "checkpoint: CP and EP (ep x edp, and with TP) resume bit for bit; EP's checkpoint loads on one device" {
    require_solution 00 02 04 07 08 09
    resume_same cp 2 "$S/07_context_parallel/train_cp" --cp 2 --cp-algo zigzag --config tiny
    resume_same ep 2 "$S/08_moe/train_moe" --ep 2 --config tiny-moe
    resume_same epedp 4 "$S/08_moe/train_moe" --ep 2 --config tiny-moe
    resume_same tpep 4 "$S/08_moe/train_moe" --tp 2 --ep 2 --config tiny-moe
    # the experts, written in parts by their EDP groups, gathered by one device
    local d="$BATS_TEST_TMPDIR"
    run t 120 "$GPT" "${RUN[@]}" --config tiny-moe --out "$d/base" --dump-params "$d/base.bin"
    [ "$status" -eq 0 ]
    run t 120 "$GPT" "${RUN[@]}" --config tiny-moe --resume "$d/epedp/ck/step-000004" \
        --out "$d/one" --dump-params "$d/one.bin"
    [ "$status" -eq 0 ]
    near_base "$d/base" "$d/one"
}

# the run's losses and final parameters against the single-device run's
near_base() {
    /usr/bin/python3 - "$1" "$2" <<'PY'
import sys, csv, array
base, run = sys.argv[1], sys.argv[2]
def losses(d): return {int(r["step"]): float(r["loss"]) for r in csv.DictReader(open(d + "/metrics.csv"))}
a, b = losses(base), losses(run)
worst = max(abs(a[s] - b[s]) for s in b)
p, q = array.array("f"), array.array("f")
p.frombytes(open(base + ".bin", "rb").read()); q.frombytes(open(run + ".bin", "rb").read())
dp = max(abs(x - y) for x, y in zip(p, q))
print(f"{run}: steps {min(b)}-{max(b)}, losses within {worst:.2g}, parameters within {dp:.2g}")
assert len(p) == len(q) and worst < 1e-5 and dp < 1e-5
PY
}

@test "checkpoint: ZeRO-3 on 4 ranks -> TP 2 x DP 2 -> PP 2 -> one device reshards on load and follows the single-device run" {
    require_solution 00 02 03 04 06 09
    local d="$BATS_TEST_TMPDIR"
    run t 120 "$GPT" "${RUN[@]}" --config tiny --out "$d/base" --dump-params "$d/base.bin"
    [ "$status" -eq 0 ]
    run mpirun_t 240 4 "$S/03_zero/train_zero" "${RUN[@]}" --zero 3 --config tiny \
        --save "$d/z3" --save-every 2 --out "$d/z3run"
    [ "$status" -eq 0 ]
    run mpirun_t 240 4 "$S/04_tensor_parallel/train_tp" "${RUN[@]}" --tp 2 --config tiny \
        --resume "$d/z3/step-000002" --save "$d/tp" --save-every 2 --out "$d/tp" --dump-params "$d/tp.bin"
    echo "$output"
    [ "$status" -eq 0 ]
    near_base "$d/base" "$d/tp"
    run mpirun_t 240 2 "$S/06_pipeline/train_pp" "${RUN[@]}" --pp 2 --grad-accum 2 --config tiny \
        --resume "$d/tp/step-000004" --save "$d/pp" --save-every 2 --out "$d/pp" --dump-params "$d/pp.bin"
    [ "$status" -eq 0 ]
    near_base "$d/base" "$d/pp"
    run t 120 "$GPT" "${RUN[@]}" --config tiny --resume "$d/pp/step-000006" --out "$d/one" \
        --dump-params "$d/one.bin"
    [ "$status" -eq 0 ]
    near_base "$d/base" "$d/one"
    # the tool's standard file is --dump-params's, and verify says every element is there once
    run t 60 "$CKPT" convert "$d/z3/step-000008" "$d/conv.bin"
    [ "$status" -eq 0 ]
    [ -s "$d/conv.bin.adam_m" ] && [ -s "$d/conv.bin.adam_v" ]
    run mpirun_t 240 4 "$S/03_zero/train_zero" "${RUN[@]}" --zero 3 --config tiny \
        --out "$d/z3again" --dump-params "$d/z3.bin"
    cmp "$d/conv.bin" "$d/z3.bin"
    run t 60 "$CKPT" verify "$d/z3"
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"step-000008: ok (8 steps done, 4 files"* ]]
    run t 60 "$CKPT" inspect "$d/tp/step-000004"
    [ "$status" -eq 0 ]
    [[ "$output" == *"states replicated"* && "$output" == *"params: 220544 of 220544 floats saved"* ]]
}

@test "checkpoint: --keep keeps the newest K, --resume DIR takes the newest" {
    require_solution 00 09
    local d="$BATS_TEST_TMPDIR"
    run t 120 "$GPT" "${RUN[@]}" --config tiny --save "$d/ck" --save-every 2 --keep 2 --out "$d/a"
    [ "$status" -eq 0 ]
    [ "$(ls "$d/ck")" = "$(printf 'step-000006\nstep-000008')" ]
    run t 120 "$GPT" "${RUN[@]}" --steps 10 --config tiny --resume "$d/ck" --out "$d/b"
    [ "$status" -eq 0 ]
    [[ "$output" == *"step-000008: 8 steps done, 2 to go"* ]]
}

@test "checkpoint: missing, truncated, corrupt, foreign or wrong-version checkpoints are one clear error before any work" {
    require_solution 00 09
    local d="$BATS_TEST_TMPDIR" c="$BATS_TEST_TMPDIR/ck/step-000004"
    run t 120 "$GPT" "${RUN[@]}" --steps 4 --config tiny --save "$d/ck" --out "$d/a"
    [ "$status" -eq 0 ]
    bad() {  # bad WHAT EXPECTED ARGS...: exit 2, one error line, no run written
        local what=$1 expected=$2
        shift 2
        rm -rf "$d/r"
        run t 60 "$GPT" "${RUN[@]}" --config tiny --out "$d/r" "$@"
        echo "$what: $output"
        assert_user_error
        [ "$(printf '%s\n' "$output" | grep -c 'error')" -eq 1 ]
        [[ "$output" == *"$expected"* ]]
        [ ! -e "$d/r/metrics.csv" ]
    }
    bad missing "no such checkpoint" --resume "$d/nothing"
    mkdir -p "$d/empty"
    bad "not a checkpoint" "neither a checkpoint" --resume "$d/empty"
    bad "another model" "holds another model" --resume "$c" --n-layer 2
    bad "another seed" "resume with the same seed" --resume "$c" --seed 2
    bad "more steps done than --steps" "more than --steps 2" --resume "$c" --steps 2 --warmup 1
    cp -r "$c" "$d/trunc"
    truncate -s -100 "$d/trunc/rank-00000.ckpt"
    bad truncated "truncated" --resume "$d/trunc"
    cp -r "$c" "$d/flip"
    printf '\x01' | dd of="$d/flip/rank-00000.ckpt" bs=1 seek=5000 conv=notrunc 2> /dev/null
    bad "flipped byte" "damaged (its checksum does not match)" --resume "$d/flip"
    cp -r "$c" "$d/ver"
    sed -i '1s/checkpoint 1/checkpoint 7/' "$d/ver/index.txt"
    bad "version" "version 7" --resume "$d/ver"
    cp -r "$c" "$d/idx"
    sed -i 's/^step 4/step 3/' "$d/idx/index.txt"
    bad "edited index" "index.txt is damaged" --resume "$d/idx"
    bad "save into a checkpoint" "is one checkpoint" --save "$c"
    run t 60 "$GPT" --save-every 2 --steps 1
    assert_user_error
    [[ "$output" == *"give --save DIR too"* ]]
    run t 60 "$GPT" --save-async --steps 1
    assert_user_error
    [ "$(printf '%s\n' "$output" | grep -c 'error')" -eq 1 ]
    [[ "$output" == *"--save-async writes the checkpoints of --save DIR"*"give --save DIR too"* ]]
    run t 60 "$CKPT" verify "$d/flip"
    assert_user_error
    run t 60 "$CKPT" frobnicate "$c"
    assert_user_error
    # the tool's errors name the path, not a flag it was never given
    for tool in inspect verify; do
        run t 60 "$CKPT" $tool "$d/nothing"
        assert_user_error
        [[ "$output" == *"$d/nothing: no such checkpoint"* && "$output" != *--resume* ]]
    done
}

@test "checkpoint: a run never prunes, replaces or continues another run's checkpoints; a rewind moves the abandoned steps aside" {
    require_solution 00 09
    local d="$BATS_TEST_TMPDIR" R=(--config tiny --threads 1 --eval-every 0)
    steps() { (cd "$1" && echo $(ls -d step-* 2> /dev/null)); }
    # run A: steps 4, 6, 8
    run t 60 "$GPT" "${R[@]}" --steps 8 --save "$d/ck" --save-every 2 --keep 3 --out "$d/a"
    [ "$status" -eq 0 ]
    # a fresh run into A's directory, with or without --keep: refused before step 1
    for keep in "--keep 2" ""; do
        run t 60 "$GPT" "${R[@]}" --steps 4 --save "$d/ck" --save-every 1 $keep --out "$d/b"
        echo "$output"
        assert_user_error
        [[ "$output" == *"$d/ck holds another run's checkpoints"*"--resume $d/ck"*"new directory"* ]]
        [[ "$output" != *"step "* && ! -e "$d/b/metrics.csv" ]]
        [ "$(steps "$d/ck")" = "step-000004 step-000006 step-000008" ]
    done
    # rewind to step 4: A's 6 and 8 move aside whole; --keep prunes the new lineage only
    run t 60 "$GPT" "${R[@]}" --steps 7 --resume "$d/ck/step-000004" --save "$d/ck" --save-every 1 --keep 2 --out "$d/c"
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"2 checkpoints of $d/ck past the resumed step 4"*"moved to $d/ck/abandoned-1"* ]]
    [ "$(steps "$d/ck")" = "step-000006 step-000007" ]
    [ "$(steps "$d/ck/abandoned-1")" = "step-000006 step-000008" ]
    run t 60 "$CKPT" verify "$d/ck/abandoned-1"
    [ "$status" -eq 0 ]
    # --resume DIR follows the current lineage; the abandoned one resumes from its folder
    run t 60 "$GPT" "${R[@]}" --steps 7 --resume "$d/ck" --out "$d/e"
    [[ "$output" == *"resumed from $d/ck/step-000007: 7 steps done"* ]]
    run t 60 "$GPT" "${R[@]}" --steps 9 --resume "$d/ck/abandoned-1" --save "$d/ck" --out "$d/f"
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"resumed from $d/ck/abandoned-1/step-000008"*"moved to $d/ck/abandoned-2"* ]]
    [ "$(steps "$d/ck")" = "step-000009" ]
    [ "$(steps "$d/ck/abandoned-2")" = "step-000006 step-000007" ]
    [[ "$("$CKPT" inspect "$d/ck")" == *"lineage: run "*" from step 0 -> run "*" from step 8"* ]]
    # a resumed run may not save among another lineage's checkpoints
    run t 60 "$GPT" "${R[@]}" --steps 2 --save "$d/other" --out "$d/g"
    [ "$status" -eq 0 ]
    run t 60 "$GPT" "${R[@]}" --steps 10 --resume "$d/other" --save "$d/ck" --out "$d/h"
    assert_user_error
    [[ "$output" == *"$d/ck/step-000009 is not of the resumed run's lineage"* ]]
    [ "$(steps "$d/ck")" = "step-000009" ]
    # a run resumed at its --steps trains nothing: no step's memory to compare
    run mpirun_t 60 2 "$S/03_zero/train_zero" --zero 1 "${R[@]}" --steps 8 --save "$d/z" --save-every 8 --out "$d/z1"
    [ "$status" -eq 0 ]
    run mpirun_t 60 2 "$S/03_zero/train_zero" --zero 1 "${R[@]}" --steps 8 --resume "$d/z" --out "$d/z2"
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"no step run, no peak to compare"* && "$output" != *DIFFERENT* ]]
}

# killed_while_saving FLAGS...: 4 ranks of ZeRO-3 saving every step, killed
# at several moments of the run: every checkpoint it shows is loadable
killed_while_saving() {
    local d="$BATS_TEST_TMPDIR" delay c
    for delay in 1.0 1.5 2.0 2.5 3.0; do
        rm -rf "$d/ck"
        OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout -s KILL "$delay" \
            mpirun -q --oversubscribe -np 4 "$S/03_zero/train_zero" --zero 3 --config tiny \
            --steps 400 --eval-every 0 --threads 1 --save "$d/ck" --save-every 1 --keep 3 \
            --out "$d/run" "$@" > /dev/null 2>&1 || true
        pkill -KILL -f -- "--out $d/run" 2> /dev/null || true  # this job's ranks, no other test's
        sleep 0.2
        for c in "$d"/ck/step-*; do
            [ -e "$c" ] || continue
            run t 60 "$CKPT" verify "$c"
            [ "$status" -eq 0 ] || { echo "killed after $delay s: $c: $output"; return 1; }
        done
        # and --resume DIR's choice, the newest, loads
        if [ -n "$(ls "$d/ck" 2> /dev/null)" ]; then
            run t 60 "$CKPT" verify "$d/ck"
            [ "$status" -eq 0 ] || { echo "killed after $delay s: $d/ck: $output"; return 1; }
        fi
        echo "killed after $delay s ($*): $(ls -a "$d/ck" 2> /dev/null | tr '\n' ' ') all loadable"
    done
}

@test "checkpoint: lab 09's check_ckpt (and --async) passes on the solution; the student's copy stops at its first unwritten function" {
    require_solution 09
    run t 120 "$S/09_checkpoint/check_ckpt"
    echo "$output"
    [ "$status" -eq 0 ]
    [ "$(printf '%s\n' "$output" | grep -c 'saves every element once, each DP rank its part')" -eq 9 ]
    [[ "$output" == *"commit: whole or nothing"*"flushed before the rename, the parent after"* ]]
    [[ "$output" == *"check_ckpt: ok"* ]]
    # the extension's writer: the states are unreadable once begin returns
    run t 120 env TMPDIR="$BATS_TEST_TMPDIR" "$S/09_checkpoint/check_ckpt" --async
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"async: the states copied before ckpt_async_begin returns"*"check_ckpt: ok"* ]]
    run "$S/09_checkpoint/check_ckpt" --sync
    assert_user_error
    if untouched 09; then
        run t 60 "$BUILD/labs/09_checkpoint/train_gpt" --config tiny --steps 2 --threads 1 \
            --save "$BATS_TEST_TMPDIR/ck" --out "$BATS_TEST_TMPDIR/r"
        [ "$status" -eq 3 ]
        [[ "$output" == *"not implemented: ckpt_shard_rects"* ]]
    fi
}

@test "checkpoint: bench-ckpt prints bytes per rank (12 Phi in all, every layout), save and load times, and Young/Daly's interval" {
    require_solution 00 02 03 04 06 09
    cd "$ROOT"
    run t 600 env BENCH_OUT="$BATS_TEST_TMPDIR/bench" bash bench/ckpt.sh
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"MB/s sequential write"* ]]
    [ "$(printf '%s\n' "$output" | grep -cE '^(one-device|ddp-4|zero1-4|zero3-4|tp2xdp2|pp2xdp2) ')" -eq 6 ]
    [[ "$output" == *"rank files hold 12 Phi = 87542784 data bytes"* ]]
    [ "$(printf '%s\n' "$output" | grep -cE '^1 (hour|day|week) ')" -eq 3 ]
}

@test "checkpoint: a job killed (SIGKILL) while saving leaves every checkpoint it shows loadable" {
    require_solution 03 09
    killed_while_saving
}

# same_files NAME RANKS PROGRAM ARGS...: a run saving every 2 steps, and
# again with --save-async: the same checkpoints, file for file and byte
# for byte (the index too, same program, layout and states, but for the
# run's own lineage line)
same_files() {
    local name=$1 np=$2 prog=$3 d="$BATS_TEST_TMPDIR/$1"
    shift 3
    run mpirun_t 240 "$np" "$prog" --steps 4 --eval-every 0 --threads 1 "$@" --save "$d/sync" \
        --save-every 2 --out "$d/a"
    [ "$status" -eq 0 ] || { echo "$name, sync: $output"; return 1; }
    run mpirun_t 240 "$np" "$prog" --steps 4 --eval-every 0 --threads 1 "$@" --save "$d/async" \
        --save-every 2 --save-async --out "$d/b"
    [ "$status" -eq 0 ] || { echo "$name, async: $output"; return 1; }
    [[ "$output" == *"snapshot $d/async/step-000002 in "*" s (written in the background)"* ]]
    [[ "$output" == *"committed $d/async/step-000004"* ]]
    # (beside the checkpoints, each job's lock: ckpt_dir_lock)
    [ "$(cd "$d/sync" && find . -type f | sort)" = "$(cd "$d/async" && find . -type f | sort)" ]
    [ "$(cd "$d/sync" && find . -path ./.lock -prune -o -type f -print | wc -l)" -eq $((2 * (np + 1))) ]
    same_checkpoints "$d/sync" "$d/async" || { echo "$name: the files differ"; return 1; }
    echo "$name: --save-async wrote the same $((2 * (np + 1))) files"
}

@test "checkpoint: --save-async writes the synchronous save's files byte for byte (one device, ZeRO-3 on 3 ranks, TP 2) and resumes bit for bit" {
    require_solution 00 03 04 09
    same_files one 1 "$GPT" --config tiny
    same_files zero3 3 "$S/03_zero/train_zero" --zero 3 --config tiny --batch 6
    same_files tp 2 "$S/04_tensor_parallel/train_tp" --tp 2 --config tiny
    SAVING=(--save-async)
    resume_same async-one 1 "$GPT" --config tiny
    resume_same async-zero3 3 "$S/03_zero/train_zero" --zero 3 --config tiny --batch 6
}

@test "checkpoint: a job killed (SIGKILL) while saving with --save-async leaves every checkpoint it shows loadable" {
    require_solution 03 09
    killed_while_saving --save-async
}

@test "checkpoint: lab 09's skeleton says not implemented (exit 3); with the core solved, --save-async says ckpt_async_begin" {
    require_solution 09 00
    local d="$BATS_TEST_TMPDIR" lab="$BUILD/labs/09_checkpoint/train_gpt"
    run t 60 "$lab" "${RUN[@]}" --config tiny --save "$d/ck" --save-async --out "$d/r"
    [ "$status" -eq 3 ]
    [ "$(grep -c 'not implemented: ckpt_' <<< "$output")" -eq 1 ]
    # the solution before its extension's section, the skeleton's from it
    local sol="$ROOT/solutions/09_checkpoint/checkpoint_shards.c" n
    n=$(grep -n -- '---- the extension: --save-async ----' "$sol" | cut -d: -f1)
    [ -n "$n" ]
    mkdir -p "$d/src/09_ext"
    tail -n +"$n" "$sol" > "$d/src/09_ext/ext.c"
    bash "$ROOT/tools/make_skeletons.sh" "$d/src" "$d/out"
    { head -n $((n - 1)) "$sol"; cat "$d/out/09_ext/ext.c"; } > "$d/core_solved.c"
    build_variant "$d/core_solved.c" 09_checkpoint "$d" train_gpt
    run t 60 "$d/train_gpt" "${RUN[@]}" --config tiny --save "$d/ck2" --save-every 2 --save-async \
        --out "$d/r2"
    echo "$output"
    [ "$status" -eq 3 ]
    [ "$(grep -c 'not implemented' <<< "$output")" -eq 1 ]
    [[ "$output" == *"not implemented: ckpt_async_begin"* ]]
    [ ! -e "$d/ck2/step-000002" ]
    # and without --save-async the core does its work
    run t 60 "$d/train_gpt" "${RUN[@]}" --config tiny --save "$d/ck3" --out "$d/r3"
    [ "$status" -eq 0 ]
    [ -e "$d/ck3/step-000008/index.txt" ]
}

@test "checkpoint: a program built without checkpoint ops (apps/no_checkpoints.c) refuses each checkpoint flag with one error before any work, and so do ckpt verify and convert" {
    require_solution 00
    local d="$BATS_TEST_TMPDIR" flags cc
    flags=$(make -s --no-print-directory -C "$ROOT" print-flags)
    cc=$(sed -n 's/^CC=//p' <<< "$flags")
    # the library and the programs link without lab 09's object (and lab 11's, and lab 05's)
    (cd "$ROOT" && $cc $(sed -n 's/^CPPFLAGS=//p' <<< "$flags") $(sed -n 's/^CFLAGS=//p' <<< "$flags") \
        -c apps/no_checkpoints.c -o "$d/no_checkpoints.o" &&
        $cc $(sed -n 's/^CPPFLAGS=//p' <<< "$flags") $(sed -n 's/^CFLAGS=//p' <<< "$flags") \
        -c apps/no_mixed_precision.c -o "$d/no_mixed_precision.o" &&
        $cc $(sed -n 's/^CPPFLAGS=//p' <<< "$flags") $(sed -n 's/^CFLAGS=//p' <<< "$flags") \
        -c apps/no_fused_attention.c -o "$d/no_fused_attention.o" &&
        $cc build/apps/train_gpt.o "$d/no_checkpoints.o" "$d/no_mixed_precision.o" \
            "$d/no_fused_attention.o" \
            build/apps/backward_kernels.o \
            build/earlier/00_single_device/backprop.o build/libcommon.a \
            $(sed -n 's/^LDLIBS=//p' <<< "$flags") -o "$d/train_gpt" &&
        $cc build/apps/ckpt_tool.o "$d/no_checkpoints.o" build/libcommon.a \
            $(sed -n 's/^LDLIBS=//p' <<< "$flags") -o "$d/ckpt")
    local hint="this build has no checkpoints: they come with lab 09 (its programs are build/labs/09_checkpoint/train_*)"
    local -a given
    for given in "--save $d/ck" "--resume $d/ck" "--save-every 2" "--keep 1" "--save-async"; do
        read -ra given <<< "$given"
        run t 60 "$d/train_gpt" "${RUN[@]}" "${given[@]}" --out "$d/r"
        [ "$status" -eq 2 ]
        [ "$output" = "train_gpt: error: ${given[0]}: $hint" ]
        [ ! -e "$d/r" ] && [ ! -e "$d/ck" ]
    done
    run t 60 "$d/ckpt" convert "$d/ck" "$d/out.bin"
    [ "$status" -eq 2 ]
    [ "$output" = "ckpt: error: convert: $hint" ]
    run t 60 "$d/ckpt" verify "$d/ck"
    [ "$status" -eq 2 ]
    [ "$output" = "ckpt: error: verify: $hint" ]
    # without them it trains as ever
    run t 60 "$d/train_gpt" --steps 2 --threads 1 --out "$d/r"
    [ "$status" -eq 0 ]
    [ -e "$d/r/metrics.csv" ]
}

@test "checkpoint: a second job saving into a directory another job is saving into is one clear error; the lock dies with its job" {
    require_solution 00 09
    local d="$BATS_TEST_TMPDIR"
    # the first job, killed at 2 s, holds the lock while it runs (and saves
    # nothing: a fresh run may not save among another run's checkpoints)
    (OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout -s KILL 2 "$GPT" --config small \
        --steps 2000 --threads 1 --eval-every 0 --save "$d/ck" --save-every 2000 --out "$d/a" > /dev/null 2>&1 &)
    local i
    for i in $(seq 50); do [ -e "$d/ck/.lock" ] && break; sleep 0.1; done
    sleep 0.3
    run t 60 "$GPT" --config tiny --steps 2 --threads 1 --save "$d/ck" --out "$d/b"
    assert_user_error
    [[ "$output" == *"another job is saving into $d/ck"* ]]
    # SIGKILL'd, the first job's lock is gone with it: the directory is free.
    # (Wait for the lock itself: a dying process leaves the process list's
    # view of it, its command line, before the kernel closes its files.)
    for i in $(seq 100); do flock -n "$d/ck/.lock" true && break; sleep 0.1; done
    run t 60 "$GPT" --config tiny --steps 2 --threads 1 --save "$d/ck" --out "$d/b"
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"saved $d/ck/step-000002"* ]]
}

# The failure simulation (bench/failures.sh) against Young/Daly's interval:
# its kills come at exponential times, not at fractions of a measured run,
# so it shares the machine (its timings are printed, not checked)
@test "checkpoint: bench-failures simulates failures per save interval, against Young/Daly's prediction, every job bit for bit" {
    require_solution 00 09
    cd "$ROOT"
    run t 600 env BENCH_OUT="$BATS_TEST_TMPDIR/bench" BENCH_WORK=2 BENCH_SEEDS=1 BENCH_MTBF=1.5 bash bench/failures.sh
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"Young: tau* = sqrt(2 C M)"* ]]
    [ "$(grep -c , "$BATS_TEST_TMPDIR/bench/failures.csv")" -eq 6 ]
    [[ "$output" == *"replayed s"* ]]
    [[ "$output" == *"Every job ended bit for bit on the uninterrupted run's parameters."* ]]
    [ -s "$BATS_TEST_TMPDIR/bench/failures.png" ]
}
