#!/usr/bin/env bats
# Lab 06's schedule generators (schedules.c) through pipeline_schedule: each
# schedule prints, validates and simulates to its formula's bubble, and
# writes schedule.csv (one row per op) and gantt.png; DualPipe (the second
# extension) is valid for p = 2..8, holds p + 1 activations and idles the
# report's formula where its costs hold; bad input is one
# error line and exit status 2; a student's invalid schedule is the
# validator's reason and exit status 1; the untouched skeleton says "not
# implemented". (The lab's own test of every generator for p = 1..6,
# m = 1..12, check_schedules, is `make check LAB=06`: tests/lab_checks.bats.)
load helpers

SOL06="$BUILD/solutions/06_pipeline/pipeline_schedule"
LAB06="$BUILD/labs/06_pipeline/pipeline_schedule"

# png_size FILE: "WIDTH HEIGHT" from the PNG's header (IHDR)
png_size() {
    od -An -tu1 -j16 -N8 "$1" | awk '{ print $1 * 16777216 + $2 * 65536 + $3 * 256 + $4, $5 * 16777216 + $6 * 65536 + $7 * 256 + $8 }'
}

@test "pipeline_schedule: each schedule prints, validates, simulates the formula's bubble, writes one csv row per op and a Gantt chart" {
    require_solution 06
    for args in "gpipe -m 8" "1f1b -m 8" "interleaved -m 8 -v 2" "zb-h1 -m 8"; do
        name=${args%% *}
        out="$BATS_TEST_TMPDIR/$name"
        # shellcheck disable=SC2086  # args is a list
        run t 60 "$SOL06" --schedule $args -p 4 --comm --out "$out"
        echo "$output"
        [ "$status" -eq 0 ]
        [ "$(grep -c '^rank [0-3]: ' <<<"$output")" -eq 4 ]
        [[ "$output" == *"valid: "* ]]
        # the simulated bubble equals the formula's (no message cost by default)
        line=$(grep '^bubble fraction: simulated' <<<"$output")
        [ "$(awk '{ print $4 }' <<<"${line//,/}")" = "$(awk '{ print $NF }' <<<"$line")" ]
        # one row per op as printed with --comm (batch brackets aside)
        ops=$(grep '^rank [0-9]*: ' <<<"$output" | cut -d: -f2 | tr -d '[]' | wc -w)
        [ "$(tail -n +2 "$out/schedule.csv" | wc -l)" -eq "$ops" ]
        [ "$(head -1 "$out/schedule.csv")" = "rank,index,label,kind,micro,chunk,start,end" ]
        is_png "$out/gantt.png"
        read -r w h <<<"$(png_size "$out/gantt.png")"
        [ "$w" -ge 1200 ] && [ "$w" -le 2400 ] && [ "$h" -ge 300 ] && [ "$h" -le 1000 ]
    done
    # the chart's script is found above the program, from any directory
    run bash -c "cd '$BATS_TEST_TMPDIR' && '$SOL06' --schedule gpipe -p 2 -m 4 --out elsewhere"
    echo "$output"
    [ "$status" -eq 0 ]
    is_png "$BATS_TEST_TMPDIR/elsewhere/gantt.png"
    # 1F1B, p 4, m 8: (p-1)/(m+p-1) = 3/11; rank r holds 4 - r activations
    [[ "$(cat "$BATS_TEST_TMPDIR/1f1b/schedule.csv")" == *$'\n'"0,0,F0,forward,0,0,0,1"$'\n'* ]]
    run t 60 "$SOL06" --schedule 1f1b -p 4 -m 8
    [[ "$output" == *"simulated 0.272727, formula (p-1)/(m+p-1) = 0.272727"* ]]
    [ "$(awk '$1 ~ /^[0-3]$/ { printf "%s ", $5 }' <<<"$output")" = "4 3 2 1 " ]
    # the messages only with --comm, batches in brackets
    [[ "$output" != *"SA"* ]]
    run t 60 "$SOL06" --schedule 1f1b -p 2 -m 2 --comm
    [[ "$output" == *"rank 0: F0 SA0 F1 [SA1 RG0] B0 RG1 B1"* ]]
}

@test "pipeline_schedule: costs move the bubble; ZB-H1 with m < p has no formula; one rank has none" {
    require_solution 06
    run t 60 "$SOL06" --schedule gpipe -p 2 -m 2 --send 0.5
    echo "$output"
    [ "$status" -eq 0 ]
    # 9 without messages; 4 of them, 0.5 each, on the critical path: each
    # receive is posted just before its compute, so its message starts
    # only once the compute before it has ended (RA1 on rank 1, RG0 on 0)
    [[ "$output" == *"makespan 11"* ]]
    [[ "$output" == *"simulated 0.454545, formula (p-1)/(m+p-1) = 0.333333"* ]]
    run t 60 "$SOL06" --schedule zb-h1 -p 4 -m 2
    [ "$status" -eq 0 ]
    [[ "$output" == *"needs m >= p"* ]]
    run t 60 "$SOL06" --schedule interleaved -p 1 -m 3 -v 3 --comm
    [ "$status" -eq 0 ]
    [[ "$output" == *"rank 0: F0.0 F0.1 F0.2 "* ]]
    [[ "$output" == *"simulated 0.000000, formula (p-1)/(v m+p-1) = 0.000000"* ]]
}

@test "pipeline_schedule: dualpipe is valid for p 2..8, holds p + 1 activations on every rank, and idles (p/2-1)(F&B+B-3W) where the report's costs hold" {
    require_solution 06
    # costs with I = F, B = I + W, W <= F (the formula's setting): F B I W, then idle for p = 4
    local -a costs=("1 2 1 1|2" "2 3 2 1|5" "1 1.5 1 0.5|2.5" "3 5 3 2|7")
    for p in 2 4 6 8; do
        for m in $((2 * p)) $((2 * p + 2)) $((4 * p)); do
            for c in "${costs[@]}"; do
                read -r f b i w <<<"${c%%|*}"
                run t 30 "$SOL06" --schedule dualpipe -p "$p" -m "$m" --forward "$f" \
                    --backward "$b" --backward-input "$i" --backward-weight "$w"
                [ "$status" -eq 0 ] || { echo "p $p m $m ($c): $output"; return 1; }
                want=$(awk -v p="$p" -v f="$f" -v b="$b" -v w="$w" 'BEGIN { print (p / 2 - 1) * (f + 2 * b - 3 * w) }')
                # every rank: idle the formula's, p + 1 micro-batches' activations at most
                got=$(awk '$1 ~ /^[0-9]+$/ && NF == 6 { print $3, $5 }' <<<"$output" | sort -u)
                [ "$got" = "$want $((p + 1))" ] || { echo "p $p m $m ($c): idle and peak '$got', want '$want $((p + 1))'"; return 1; }
                [ "$p" -ne 4 ] || [ "$want" = "${c#*|}" ]
            done
        done
    done
    # the placement: rank 0 runs micro-batch 0 on chunk 0 (stage 0) and the
    # second half's on chunk 1 (stage p-1); the formula's fraction printed
    run t 30 "$SOL06" --schedule dualpipe -p 4 -m 8 --comm
    [[ "$output" == *"rank 0: F0.0 SA0.0 F1.0 SA1.0 F2.0 RA4.1 F4.1 "* ]]
    [[ "$output" == *"simulated 0.076923, formula DualPipe's (p/2-1)(F&B+B-3W) idle per rank, F&B = F+B = 0.076923"* ]]
}

@test "pipeline_schedule: bad input is one clear error line and exit status 2" {
    require_solution 06
    touch "$BATS_TEST_TMPDIR/a_file"
    local -a cases=(
        "--schedule pipedream -p 2 -m 4|unknown pipeline schedule 'pipedream' (known: gpipe, 1f1b, interleaved, zb-h1, 1f1b-unbatched, dualpipe)"
        "-p 2 -m 4|give --schedule NAME"
        "--schedule gpipe -m 4|give --schedule NAME, -p P and -m M"
        "--schedule gpipe -p 0 -m 4|-p expects"
        "--schedule gpipe -p 2 -m 0|-m expects"
        "--schedule gpipe -p 2 -m 4 -v 0|-v expects"
        "--schedule 1f1b -p 2 -m 4 -v 2|only the interleaved schedule"
        "--schedule interleaved -p 2 -m 4|v >= 2"
        "--schedule interleaved -p 4 -m 2 -v 2|at least p micro-batches"
        "--schedule interleaved -p 4 -m 6 -v 2|groups of p"
        "--schedule dualpipe -p 3 -m 6|even number of ranks"
        "--schedule dualpipe -p 4 -m 6|at least 2p"
        "--schedule dualpipe -p 2 -m 5|even number of micro-batches"
        "--schedule dualpipe -p 2 -m 4 -v 1|two chunks per rank"
        "--schedule gpipe -p 2 -m 4 --forward -1|--forward"
        "--schedule gpipe -p 2 -m 4 --weight-memory 2|--weight-memory"
        "--schedule gpipe -p 2 -m 4 --bogus|--bogus"
        "--schedule gpipe -p 2 -m 4 extra|unexpected argument 'extra'"
        "--schedule gpipe -p 2 -m 4 --out $BATS_TEST_TMPDIR/a_file|--out"
    )
    for c in "${cases[@]}"; do
        read -ra args <<<"${c%%|*}"
        run t 30 "$SOL06" "${args[@]}"
        echo "${c%%|*}: $output"
        assert_user_error
        [[ "$output" == *"${c#*|}"* ]]
    done
}

@test "pipeline_schedule: a student's invalid schedule is the validator's reason and exit status 1" {
    require_solution 06
    # 1F1B with its steady state's sends and receives no longer batched:
    # neighbours both wait in a send, a deadlock under rendezvous
    # (and ZB-H1 returning no schedule at all)
    sed -e 's/if (n > 0) schedule_batch(s, r, n);/(void)s, (void)r, (void)n;/' \
        -e 's/return one_forward_one_backward(p, m, 1);/return NULL;/' \
        "$ROOT/solutions/06_pipeline/schedules.c" > "$BATS_TEST_TMPDIR/schedules.c"
    run cmp -s "$ROOT/solutions/06_pipeline/schedules.c" "$BATS_TEST_TMPDIR/schedules.c"
    [ "$status" -eq 1 ]  # the edits took
    build_variant "$BATS_TEST_TMPDIR/schedules.c" 06_pipeline "$BATS_TEST_TMPDIR/bin" pipeline_schedule
    run t 30 "$BATS_TEST_TMPDIR/bin/pipeline_schedule" --schedule 1f1b -p 2 -m 2 --comm
    echo "$output"
    [ "$status" -eq 1 ]
    [[ "$output" == *"rank 0: F0 SA0 F1 SA1 RG0 B0 RG1 B1"* ]]
    [[ "$output" == *"invalid schedule: the 1f1b schedule is not valid: deadlock under blocking send and receive: rank 0 waits at op 3 (SA1 to rank 1), rank 1 waits at op 3 (SG0 to rank 0)"* ]]
    [[ "$output" != *"fatal"* ]]
    run t 30 "$BATS_TEST_TMPDIR/bin/pipeline_schedule" --schedule zb-h1 -p 2 -m 2
    [ "$status" -eq 1 ]
    [[ "$output" == *"invalid schedule: the zb-h1 generator returned NULL"* ]]
    # GPipe never batches: still valid
    run t 30 "$BATS_TEST_TMPDIR/bin/pipeline_schedule" --schedule gpipe -p 2 -m 2
    [ "$status" -eq 0 ]
}

@test "lab 06 skeleton: each schedule says which generator is not implemented, no crash" {
    require_untouched 06
    for pair in gpipe:schedule_gpipe 1f1b:schedule_1f1b interleaved:schedule_interleaved zb-h1:schedule_zb_h1; do
        v=1
        [ "${pair%%:*}" = interleaved ] && v=2
        run t 30 "$LAB06" --schedule "${pair%%:*}" -p 2 -m 4 -v "$v"
        echo "$output"
        [ "$status" -eq 3 ]
        [[ "$output" == *"not implemented: ${pair#*:}"* ]]
        [[ "$output" != *"fatal"* ]]
    done
    # bad input is still caught before the generator runs
    run t 30 "$LAB06" --schedule interleaved -p 2 -m 3 -v 2
    assert_user_error
}

@test "plot_pipeline.sh draws any csv in the format (the trainer's measured one too) and rejects a malformed one in one line" {
    csv="$BATS_TEST_TMPDIR/measured.csv"
    # two ranks, times in seconds as a trace would give them, messages ignored
    cat > "$csv" <<'EOF'
rank,index,label,kind,micro,chunk,start,end
0,0,F0,forward,0,0,0.000,0.010
0,1,SA0,send-act,0,0,0.010,0.011
0,2,B0,backward,0,0,0.031,0.052
1,0,RA0,recv-act,0,0,0.000,0.011
1,1,F0,forward,0,0,0.011,0.020
1,2,B0,backward,0,0,0.020,0.030
1,3,SG0,send-grad,0,0,0.030,0.031
EOF
    run t 30 bash "$ROOT/tools/plot_pipeline.sh" "$csv" "$BATS_TEST_TMPDIR/m.png" 'measured "run"'
    echo "$output"
    [ "$status" -eq 0 ]
    is_png "$BATS_TEST_TMPDIR/m.png"
    printf 'rank,index,label,kind,micro,chunk,start,end\n0,0,F0,forward,0,0,2,1\n' > "$BATS_TEST_TMPDIR/bad.csv"
    printf 'rank,start,end\n0,0,1\n' > "$BATS_TEST_TMPDIR/header.csv"
    printf 'rank,index,label,kind,micro,chunk,start,end\n0,0,X0,optimizer,0,0,0,1\n' > "$BATS_TEST_TMPDIR/kind.csv"
    for bad in bad header kind missing; do
        run t 30 bash "$ROOT/tools/plot_pipeline.sh" "$BATS_TEST_TMPDIR/$bad.csv" "$BATS_TEST_TMPDIR/x.png" t
        echo "$bad: $output"
        assert_user_error
    done
    run t 30 bash "$ROOT/tools/plot_pipeline.sh" "$csv"
    assert_user_error
}
