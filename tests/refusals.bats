#!/usr/bin/env bats
# Nothing refused late (issue 35, lab 10's promise: every constraint on the
# options is checked before any work). Each refusal a trainer can make, one
# case per check (train.c's and cli.c's common options, the preflight's
# outputs and memory, the token file, every program's own options and
# combinations, the mesh's degrees against the ranks, and each trainer's
# own run files), ends with exit status 2 and one error line before the
# first step: no progress line, no metrics.csv or run.json. The wording of
# each lab's messages is its own suite's (cli.bats, pp.bats, composed.bats,
# ...); this file holds every trainer to the timing. And a valid schedule
# is never refused after its work: ZB-H1 with fewer micro-batches than
# stages trains to the end, follows one device, and writes every output.
load helpers

# program | ranks (1: no mpirun) | options (@D: the case's own directory) |
# a piece of the error line | a run file made a directory in --out first.
# Each runs with --config tiny (unless it gives another) for 2 steps.
REFUSALS='
gpt   |1|--grad-accum 3                           |--batch 8 must be a multiple
gpt   |1|--top-k 2                                |give --experts E too
gpt   |1|--save-every 1                           |give --save DIR too
gpt   |1|--keep 2                                 |give --save DIR too
gpt   |1|--save-async                             |give --save DIR too
gpt   |1|--resume @D/none                         |--resume
gpt   |1|--n-embd 16384 --n-head 16 --n-layer 64  |this run needs
gpt   |1|--val-fraction 0.000001                  |held-out part
gpt   |1|--precision fp8                          |--precision expects
gpt   |1|--fp32-grads                             |are fp32 already
gpt   |1|--precision bf16 --fp32-grads --loss-scale 8|give --precision fp16
gpt   |1|--precision fp16 --count-flushed         |--count-flushed counts
ddp   |3|                                         |must be a multiple of ranks
ddp   |2|--data @D/none.tok                       |none.tok
ddp   |2|--vocab 100                              |larger than the model
ddp   |1|--ddp foo                                |--ddp expects
ddp   |1|--bucket-mb 0                            |--bucket-mb must be positive
ddp   |1|--ddp naive --first-bucket-mb 1          |--first-bucket-mb sizes a bucket
ddp   |1|--check-consistency 0                    |--check-consistency expects
ddp   |1|extra                                    |unexpected argument
zero  |1|--zero 4                                 |--zero expects 1, 2 or 3
zero  |1|--zero 1 --overlap-rs                    |--overlap-rs needs --zero 2 or 3
zero  |1|--n-head 3                               |be built
zero5 |1|--recompute most                         |--recompute expects
zero  |2|--dump-params @D/missing/params.bin      |--dump-params
tp    |1|--tp 3                                   |does not divide n_head 4
tp    |3|--tp 2                                   |does not divide the world size 3
tp    |1|--sp                                     |bad option
tp5   |1|--tp 2 --sp --seq 63                     |--seq 63 must be a multiple of --tp 2
tp5   |1|--config tiny-moe --tp 2 --sp            |no sequence parallelism
tp5   |1|--config tiny-moe --recompute full       |recomputation of a mixture of experts
tp    |1|--seq 65                                 |longer than the model
cp    |1|--cp-algo foo                            |--cp-algo expects
cp    |1|--cp 2 --cp-algo zigzag --seq 62         |--seq 62 must be a multiple of 4
cp    |1|--cp 8 --cp-algo ulysses                 |whole heads
cp    |1|--cp 2 --config tiny-moe                 |no context parallelism
cp    |1|--config huge                            |unknown --config
cp    |1|                                         |cp_balance.csv is a directory|cp_balance.csv
moe   |1|                                         |trains a mixture of experts
moe   |1|--config tiny-moe --ep 3                 |does not divide the 4 experts
moe   |1|--config tiny-moe --ep-overlap           |--ep-overlap needs --ep 2
moe   |1|--config tiny-moe --ep 2                 |ep 2 does not divide dp 1
moe   |1|--config tiny-moe --moe-every 5          |moe-every must be in
moe   |1|--config tiny-moe                        |moe.csv is a directory|moe.csv
pp    |1|--pp 0                                   |--pp expects an integer
pp    |1|--pp 2 --schedule zigzag                 |known: gpipe, 1f1b
pp    |1|--pp 2 --schedule interleaved --micro-batches 1|at least p micro-batches
pp    |1|--pp 2 --schedule interleaved --micro-batches 3|multiple of p
pp    |1|--pp 2 --schedule interleaved --chunks 1 |v >= 2 chunks
pp    |1|--pp 2 --chunks 2                        |only the interleaved schedule
pp    |1|--pp 2 --micro-batches 4 --grad-accum 2  |give one of them
pp    |1|--pp 2 --n-layer 3                       |n_layer 3 is not a multiple of 2
pp    |1|--pp 2 --config tiny-moe                 |not cut into pipeline stages
pp    |1|--pp 2 --tp 3                            |does not divide n_head 4
pp    |3|--pp 2                                   |does not divide the world size 3
pp    |1|--out /dev/null                          |--out
pp    |1|                                         |pipeline.csv is a directory|pipeline.csv
pp    |1|                                         |pipeline_sim.csv is a directory|pipeline_sim.csv
4d    |1|--zero 2                                 |--zero 2: ZeRO-2 and 3
4d    |1|--zero x                                 |--zero expects 1
4d    |1|--schedule gpipe                         |need --pp 2 or more
4d    |1|--pp 2 --schedule 1f1b-unbatched         |run by train_pp
4d    |1|--sp                                     |--tp 2 or more
4d    |1|--config tiny-moe --zero 1               |--zero 1 with experts
4d    |1|--cp 2 --recompute selective             |--recompute selective
4d    |1|--tp 2 --pp 2 --sp --schedule zb-h1      |not with --sp
4d    |1|--cp 4 --seq 50                          |--seq 50 must be a multiple of 4
4d    |1|--mesh-order bogus                       |mesh order
4d    |1|--dp 3                                   |but the world has 1
4d    |1|--config tiny-moe --ep 2 --cp 1          |ep 2 does not divide dp 1
4d    |1|                                         |mesh.csv is a directory|mesh.csv
'

# trim TEXT: without its leading and trailing blanks
trim() {
    local s=${1#"${1%%[![:space:]]*}"}
    echo "${s%"${s##*[![:space:]]}"}"
}

# trainer NAME: the solution's program (lab 05's builds: zero5, tp5)
trainer() {
    local s="$BUILD/solutions"
    case $1 in
    gpt) echo "$s/00_single_device/train_gpt" ;;
    ddp) echo "$s/02_ddp/train_ddp" ;;
    zero) echo "$s/03_zero/train_zero" ;;
    tp) echo "$s/04_tensor_parallel/train_tp" ;;
    zero5) echo "$s/05_activation_memory/train_zero" ;;
    tp5) echo "$s/05_activation_memory/train_tp" ;;
    pp) echo "$s/06_pipeline/train_pp" ;;
    cp) echo "$s/07_context_parallel/train_cp" ;;
    moe) echo "$s/08_moe/train_moe" ;;
    4d) echo "$s/10_composed/train_4d" ;;
    esac
}

# launch DIR PROGRAM NP ARGS...: PROGRAM on NP ranks (1: alone, no mpirun)
# into DIR/run, its output in DIR/log and its exit status in DIR/rc
launch() {
    local d=$1 prog=$2 np=$3 rc=0
    shift 3
    local cmd=("$prog" --config tiny --steps 2 --eval-every 0 --threads 1 --out "$d/run" "$@")
    if [ "$np" -eq 1 ]; then
        t 30 "${cmd[@]}" > "$d/log" 2>&1 < /dev/null || rc=$?
    else
        mpirun_t 60 "$np" "${cmd[@]}" > "$d/log" 2>&1 < /dev/null || rc=$?
    fi
    echo "$rc" > "$d/rc"
}

# refused_early DIR PIECE: DIR's run (launch) was refused before its first
# step, with one error line that says PIECE; else what went wrong
refused_early() {
    local d=$1 piece=$2 rc log
    rc=$(cat "$d/rc")
    log=$(cat "$d/log")
    [ "$rc" -eq 2 ] || { echo "exit status $rc, not 2"; return 1; }
    [ "$(grep -c 'error:' <<<"$log")" -eq 1 ] || { echo "not one error line"; return 1; }
    [[ "$log" != *fatal* ]] || { echo "an internal failure"; return 1; }
    [[ "$log" == *"$piece"* ]] || { echo "the error does not say '$piece'"; return 1; }
    ! grep -qE 'step +[0-9]+/[0-9]+' <<<"$log" || { echo "refused after training"; return 1; }
    local f
    for f in metrics.csv run.json; do
        [ ! -e "$d/run/$f" ] || { echo "refused after writing $f"; return 1; }
    done
}

@test "refusals: every trainer refuses each bad option, combination and output before its first step" {
    require_solution 00 02 03 04 05 06 07 08 10
    cd "$ROOT"
    local i=0 prog np args piece blocker d label failed=0 why
    local -a cases=()
    # every case at once, 8 at a time: each is a process start and a check
    while IFS='|' read -r prog np args piece blocker; do
        prog=$(trim "$prog")
        [ -n "$prog" ] || continue
        i=$((i + 1))
        d="$BATS_TEST_TMPDIR/case$i"
        blocker=$(trim "$blocker")
        mkdir -p "$d"
        [ -z "$blocker" ] || mkdir -p "$d/run/$blocker"
        args=$(trim "${args//@D/$d}")
        piece=$(trim "$piece")
        label="$prog, $np rank(s): ${args:-(no options)}${blocker:+, $blocker a directory}"
        cases+=("$label|$piece")
        # shellcheck disable=SC2086  # args is a list of options
        launch "$d" "$(trainer "$prog")" "$np" $args 3>&- &
        [ "$(jobs -rp | wc -l)" -lt 8 ] || wait -n
    done <<<"$REFUSALS"
    wait
    for i in "${!cases[@]}"; do
        d="$BATS_TEST_TMPDIR/case$((i + 1))"
        why=$(refused_early "$d" "${cases[i]#*|}") && continue
        echo "FAILED: ${cases[i]%|*}: $why; output:"
        sed 's/^/    /' "$d/log"
        failed=$((failed + 1))
    done
    echo "${#cases[@]} cases, $failed failed"
    [ "$failed" -eq 0 ]
}

@test "refusals: ZB-H1 with fewer micro-batches than stages (m < p) trains to the end, follows one device and writes every output" {
    require_solution 00 06 10
    cd "$ROOT"
    local d="$BATS_TEST_TMPDIR" flags base prog np out
    local common=(--config tiny --steps 3 --eval-every 0 --threads 1)
    # the bubble report: measured and simulated, and why there is no formula
    local report="measured 0\.[0-9]+, simulated 0\.[0-9]+ .*no formula \(ZB-H1's needs m >= p"
    # program | ranks | options | lab 00's run of the same batch and micro-batches
    local cases=("pp|2|--pp 2 --micro-batches 1|--grad-accum 1"
                 "pp|4|--pp 4 --micro-batches 3 --batch 6|--grad-accum 3 --batch 6"
                 "4d|4|--pp 4 --micro-batches 2|--grad-accum 2")
    for c in "${cases[@]}"; do
        IFS='|' read -r prog np flags base <<<"$c"
        out="$d/$prog-$np-${flags// /_}"
        # shellcheck disable=SC2086  # base is a list of options
        t 60 "$(trainer gpt)" "${common[@]}" $base --out "$out-base" \
            --dump-params "$out-base/params.bin" > /dev/null
        # shellcheck disable=SC2086  # flags is a list of options
        run mpirun_t 120 "$np" "$(trainer "$prog")" "${common[@]}" $flags --schedule zb-h1 \
            --out "$out" --dump-params "$out/params.bin"
        [ "$status" -eq 0 ] || { echo "$prog $flags: exit status $status: $output"; return 1; }
        grep -qE "pipeline bubble of the last step: $report" <<<"$output" ||
            { echo "$prog $flags: no bubble report: $output"; return 1; }
        for f in metrics.csv memory.csv run.json params.bin pipeline.csv pipeline_sim.csv; do
            [ -s "$out/$f" ] || { echo "$prog $flags: no $f"; return 1; }
        done
        follows_base "$out-base" "$out" "$prog $flags"
    done
}
