#!/usr/bin/env bats
# Expert parallelism (lab 08, train_moe): each MoE block's experts split
# over --ep ranks of the data-parallel group, tokens sent to their experts'
# ranks and back by all-to-alls. Every layout (ep alone, ep x edp, and tp
# x ep: lab 04's split layers for the attention and the dense MLPs, the
# experts whole on every TP rank) trains the very model one device does:
# the same routing step by step (moe.csv's drops and loads), losses and
# parameters within float tolerance, every rank the same model; the EP and
# TP traffic and the memory as the formulas say; a degree that does not
# divide the experts, the heads or the ranks is one clear error. The
# extension's overlapped forward (--ep-overlap) trains the blocking one's
# parameters bit for bit, its rows moved as point-to-point messages.
load helpers

GPT="$BUILD/solutions/00_single_device/train_gpt"
MOE="$BUILD/solutions/08_moe/train_moe"
COMMON=(--config tiny-moe --steps 6 --eval-every 3 --threads 1)

setup_file() {
    have_solution 00 08 || return 0
    for cf in 1.25 0; do
        t 120 "$GPT" "${COMMON[@]}" --capacity-factor "$cf" --out "$BATS_FILE_TMPDIR/base-$cf" \
            --dump-params "$BATS_FILE_TMPDIR/base-$cf/params.bin" > /dev/null
    done
}

# ep_run RANKS EP CAPACITY [TP]: train_moe against one device's run of the
# same capacity factor: losses, parameters, the routing, one model on every
# rank, the traffic and the memory as planned
ep_run() {
    local np=$1 ep=$2 cf=$3 tp=${4:-1} out="$BATS_TEST_TMPDIR/np$1-ep$2-cf$3-tp${4:-1}"
    local dp=$((np / tp))
    BASE="$BATS_FILE_TMPDIR/base-$cf"
    run mpirun_t 180 "$np" "$MOE" "${COMMON[@]}" --capacity-factor "$cf" --ep "$ep" --tp "$tp" \
        --out "$out" --dump-params "$out/params.bin"
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"tp $tp x (ep $ep x edp $((dp / ep)) = dp $dp)"* ]]
    # the EP all-to-alls: the counts' exactly, the rows' calls and their bound
    if [ "$ep" -gt 1 ]; then
        [ "$(printf '%s\n' "$output" | grep -c '^train_moe: EP .* ok$')" -eq 2 ]
    fi
    # the TP all-reduces: one per pass fewer in each MoE block (memplan.h)
    if [ "$tp" -gt 1 ]; then
        [ "$(printf '%s\n' "$output" | grep -c '^train_moe: TP all-reduces .* ok$')" -eq 1 ]
    fi
    # every memory category as the planner predicts, to the byte
    [ "$(printf '%s\n' "$output" | grep -c 'predicted .* measured .* ok$')" -eq 6 ]
    run same_run "$out"
    echo "$output"
    [ "$status" -eq 0 ]
    diff <(cut -d, -f1,3- "$BASE/moe.csv") <(cut -d, -f1,3- "$out/moe.csv")
    # every rank holds the same model (the experts gathered over the EP group)
    [ "$(tail -n +2 "$out/params_checksum.csv" | cut -d, -f2 | sort -u | wc -l)" -eq 1 ]
    [ "$(tail -n +2 "$out/params_checksum.csv" | wc -l)" -eq "$np" ]
}

@test "ep: --ep 2 on 2 ranks trains one device's model, with capacity and dropless" {
    require_solution 00 08
    cd "$ROOT"
    ep_run 2 2 1.25
    ep_run 2 2 0
}

@test "ep: --ep 4 on 4 ranks (one expert each) trains one device's model" {
    require_solution 00 08
    cd "$ROOT"
    ep_run 4 4 1.25
    ep_run 4 4 0
}

@test "ep: ep 2 x edp 2 on 4 ranks (experts averaged over their replicas) trains one device's model" {
    require_solution 00 08
    cd "$ROOT"
    ep_run 4 2 1.25
    ep_run 4 2 0
}

@test "ep: tp 2 x ep 2 on 4 ranks (the dense parts split, the experts whole per TP rank) trains one device's model" {
    require_solution 00 04 08
    cd "$ROOT"
    ep_run 4 2 1.25 2
    ep_run 4 2 0 2
}

@test "ep: tp 2 alone (every expert on both TP ranks) trains one device's model" {
    require_solution 00 04 08
    cd "$ROOT"
    ep_run 2 1 1.25 2
}

# overlap_run RANKS EP: the extension's overlapped forward (--ep-overlap)
# against the blocking exchange: the very same parameters (each row's
# arithmetic is the same), the memory as planned, and on group ep of every
# rank the forward's rows as 2 (ep - 1) sends and as many receives per MoE
# block and forward pass (one per peer and direction, empty ones too),
# only the backward's all-to-all-v's left
overlap_run() {
    local np=$1 ep=$2 dir="$BATS_TEST_TMPDIR/overlap-np$1-ep$2"
    run mpirun_t 180 "$np" "$MOE" "${COMMON[@]}" --ep "$ep" --out "$dir/blocking" \
        --dump-params "$dir/blocking/params.bin"
    [ "$status" -eq 0 ]
    run mpirun_t 180 "$np" "$MOE" "${COMMON[@]}" --ep "$ep" --ep-overlap --out "$dir/overlapped" \
        --dump-params "$dir/overlapped/params.bin"
    echo "$output"
    [ "$status" -eq 0 ]
    cmp "$dir/blocking/params.bin" "$dir/overlapped/params.bin"
    [ "$(printf '%s\n' "$output" | grep -c '^train_moe: EP .* ok$')" -eq 2 ]
    [[ "$output" == *"EP rows on rank 0 (overlapped forward)"* ]]
    [ "$(printf '%s\n' "$output" | grep -c 'predicted .* measured .* ok$')" -eq 6 ]
    python3 - "$dir" "$ep" <<'PY'
import csv, sys
d, ep = sys.argv[1], int(sys.argv[2])
def table(run):
    return {(r["rank"], r["op"]): (int(r["calls"]), int(r["bytes"]))
            for r in csv.DictReader(open(f"{d}/{run}/comm.csv")) if r["group"] == "ep"}
blocking, overlapped = table("blocking"), table("overlapped")
ranks = {rank for rank, _ in blocking}
for rank in ranks:
    forwards = blocking[rank, "alltoall"][0]   # one counts' all-to-all per block and pass
    assert overlapped[rank, "alltoall"] == blocking[rank, "alltoall"], rank
    assert overlapped[rank, "alltoallv"][0] == blocking[rank, "alltoallv"][0] - 2 * forwards, rank
    for op in ("send", "recv"):
        assert overlapped[rank, op][0] == 2 * (ep - 1) * forwards, (rank, op, overlapped[rank, op])
# every byte sent on group ep is received
assert sum(overlapped[r, "send"][1] for r in ranks) == sum(overlapped[r, "recv"][1] for r in ranks)
PY
    [ "$(tail -n +2 "$dir/overlapped/params_checksum.csv" | cut -d, -f2 | sort -u | wc -l)" -eq 1 ]
}

@test "ep: --ep-overlap (the extension) gives the blocking exchange's parameters bit for bit, its forward's rows as sends and receives" {
    require_solution 08
    cd "$ROOT"
    overlap_run 2 2
    overlap_run 4 2
    overlap_run 4 4
}

@test "ep: --tp not dividing the heads, or sequence parallelism or recomputation of a mixture of experts, is one clear error" {
    require_solution 04 05 08
    run mpirun_t 60 3 "$MOE" --config tiny-moe --tp 3 --steps 1 --out "$BATS_TEST_TMPDIR/bad"
    assert_user_error
    [[ "$output" == *"--tp 3 does not divide n_head 4"* ]]
    local tp05="$BUILD/solutions/05_activation_memory/train_tp"
    run mpirun_t 60 2 "$tp05" --config tiny-moe --tp 2 --sp --steps 1 --out "$BATS_TEST_TMPDIR/bad"
    assert_user_error
    [[ "$output" == *"no sequence parallelism (--sp)"* ]]
    run mpirun_t 60 2 "$tp05" --config tiny-moe --tp 2 --recompute full --steps 1 \
        --out "$BATS_TEST_TMPDIR/bad"
    assert_user_error
    [[ "$output" == *"recomputation of a mixture of experts"* ]]
}

@test "ep: --ep not dividing the experts or the ranks, or a dense model, is one clear error" {
    require_solution 08
    run mpirun_t 60 3 "$MOE" --config tiny-moe --ep 3 --steps 1 --out "$BATS_TEST_TMPDIR/bad"
    assert_user_error
    [[ "$output" == *"--ep 3 does not divide the 4 experts"* ]]
    run mpirun_t 60 2 "$MOE" --config tiny-moe --ep 4 --steps 1 --out "$BATS_TEST_TMPDIR/bad"
    assert_user_error
    [[ "$output" == *"ep 4 does not divide dp 2"* ]]
    run mpirun_t 60 2 "$MOE" --config tiny --ep 2 --steps 1 --out "$BATS_TEST_TMPDIR/bad"
    assert_user_error
    [[ "$output" == *"mixture of experts"* ]]
    run mpirun_t 60 2 "$MOE" --config tiny-moe --ep-overlap --steps 1 --out "$BATS_TEST_TMPDIR/bad"
    assert_user_error
    [[ "$output" == *"--ep-overlap needs --ep 2 or more"* ]]
}

@test "ep: the student's copy stops at the lab's first unwritten function" {
    run mpirun_t 60 2 "$BUILD/labs/08_moe/train_moe" --config tiny-moe --ep 2 --steps 1 \
        --out "$BATS_TEST_TMPDIR/lab"
    [ "$status" -eq 3 ]
    [[ "$output" == *"ep_moe_forward"* ]]
    run mpirun_t 60 2 "$BUILD/labs/08_moe/train_moe" --config tiny-moe --ep 2 --ep-overlap \
        --steps 1 --out "$BATS_TEST_TMPDIR/lab"
    [ "$status" -eq 3 ]
    [[ "$output" == *"ep_moe_forward_overlapped"* ]]
}
