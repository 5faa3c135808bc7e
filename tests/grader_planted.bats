#!/usr/bin/env bats
# The autograder's planted bugs (grader/planted/NN-*.patch): each, applied to
# a copy of the solutions, loses the points of the case it names, with the
# reason it names; the cheats among them score zero on it. Apart from
# tests/grader.bats so that the two run in two lanes of tests/run.sh.
load helpers

# grade_planted NAME: planted bug NAME (grader/planted/NAME.patch, with an
# "Expect: CASE | REASON" line) applied to a scratch copy of the solutions, that one
# case graded; prints "PATCH: LINE" (the case's line of the grader's table)
# and returns non-zero, saying why, unless the case lost its points for the
# reason expected and left no rank behind
grade_planted() {
    local name=$1 patch="$ROOT/grader/planted/$1.patch" lab labdir expect case_name reason src scale out line
    lab=${name:0:2}
    labdir=$(basename "$ROOT"/solutions/"$lab"_*)
    expect=$(sed -n 's/^Expect: //p' "$patch")
    case_name=${expect% | *}
    reason=${expect#* | }
    src="$BATS_TEST_TMPDIR/src-$name"
    out="$BATS_TEST_TMPDIR/out-$name"
    mkdir -p "$src"
    cp -r "$ROOT/solutions/$labdir" "$src/"
    patch -s -d "$src/$labdir" -p1 < "$patch" || { echo "$name: does not apply"; return 1; }
    # a hang is caught by the case's time limit: the shortest that still
    # lets the rest of the case run (the others keep a quarter of theirs)
    scale=0.25
    [ "$reason" != "timed out" ] || scale=0.05
    local rc=0
    output=$(t 300 $GRADE --lab "$lab" --src "$src" --case "$case_name" --timeout-scale $scale \
        --out "$out" 2>&1) || rc=$?
    lost_points "$rc" || { echo "$name: $output"; return 1; }
    # an extension's case is named "extension: CASE" in the table
    line=$(printf '%s\n' "$output" | grep -E "^$labdir +(extension: )?$(literal_name "$case_name") +[0-9]")
    echo "$name: $line"
    [ -n "$line" ] || { echo "$name: no line for case '$case_name': $output"; return 1; }
    [[ "$line" != *" ok" ]] || { echo "$name: the case kept its points"; return 1; }
    [[ "$line" == *"$reason"* ]] || { echo "$name: expected reason: $reason"; return 1; }
    # a timed-out or crashed case leaves no rank behind
    ! pgrep -f "$out" > /dev/null || { echo "$name: ranks left behind"; return 1; }
}

@test "grader: every planted bug loses the points of its case, with the expected reason" {
    require_instructor "grader/planted/ is not in a handout"
    local names
    names=$(cd "$ROOT/grader/planted" && ls ./*.patch | sed 's|^\./||; s|\.patch$||')
    [ "$(wc -w <<<"$names")" -ge 8 ]
    # shellcheck disable=SC2086  # names is a list
    in_pairs "$BATS_TEST_TMPDIR/planted" grade_planted $names
}

# grade_hidden NAME: planted bug NAME graded in hidden mode (seed 7) on its
# case; prints the case's line and fails unless it lost points (a cheat:
# all of them)
grade_hidden() {
    local name=$1 patch lab labdir case_name src line
    patch="$ROOT/grader/planted/$name.patch"
    lab=${name:0:2}
    labdir=$(basename "$ROOT"/solutions/"$lab"_*)
    case_name=$(sed -n 's/^Expect: \(.*\) | .*/\1/p' "$patch")
    src="$BATS_TEST_TMPDIR/src-$name"
    mkdir -p "$src" && cp -r "$ROOT/solutions/$labdir" "$src/"
    patch -s -d "$src/$labdir" -p1 < "$patch" || { echo "$name: does not apply"; return 1; }
    local rc=0
    output=$(t 300 $GRADE --lab "$lab" --hidden --hidden-seed 7 --src "$src" --case "$case_name" \
        --out "$BATS_TEST_TMPDIR/out-$name-7" 2>&1) || rc=$?
    lost_points "$rc" || { echo "$name: $output"; return 1; }
    line=$(printf '%s\n' "$output" | grep -E "^$labdir +(extension: )?$(drawn_name "$case_name") \[")
    echo "$name, seed 7: $line"
    [[ "$line" != *" ok" ]] || { echo "$name: the case kept its points"; return 1; }
    [[ "$line" =~ \]\ +([0-9.]+)/([0-9.]+) ]] && [ "${BASH_REMATCH[1]}" != "${BASH_REMATCH[2]}" ] ||
        { echo "$name: no points lost"; return 1; }
    # a cheat scores zero on the case it cheats
    [[ "$name" != *-cheat-* ]] || [ "${BASH_REMATCH[1]}" = 0 ] || { echo "$name: a cheat scored"; return 1; }
}

# The bugs a fixed case on 2 ranks missed (a padded last shard, N instead
# of K, a bucket shifted by one float), an overlap that never overlaps (DDP's
# buckets, and lab 03's extension's reduce-scatters), lab 02's extension's
# first bucket closing at the others' size, lab 04's embedding gradient
# without the rank's vocabulary offset and its extension's target logits
# left unsummed (rank 0's loss sees them only at tp 4), and lab 05's
# positions without the rank's row offset (seen only where a rank's rows
# start mid-sequence) and full recomputation's stale layernorm statistics
# (seen only with two blocks or more), and lab 06's 1F1B warm-up a forward
# too long (only memory sees it), a backward without its 1/m loss weight
# (the gradient norm) and a tied embedding left unsummed, and lab 07's
# zigzag chunks swapped on the last rank, dK/dV added to the wrong owner and
# a ring that passes K and V once too often (only comm sees it), and lab
# 08's experts' gradients divided by edp's size, a local range that starts
# at expert j (only where a rank holds two experts or more), the aux
# loss's gradient left out and its extension's own block never run, lose
# points in hidden mode too: every draw of their case reaches them. So do
# lab 06's warm-ups not cut to m (1F1B's case draws m < p - 1 every time,
# the interleaved pp 4 case m = p) and a weight pass that keeps its
# activations, lab 07's ring that waits for each transfer before computing
# and Ulysses' heads split ignoring TP (Ulysses on every tp x cp draw),
# lab 08's overlapped return at the source's offset (ep 4 on every draw)
# and lab 10's SP layernorm sum left out of ZeRO-1's finish (the one case
# with both), and lab 03's hybrid sharding that sums the replicas' shards
# without dividing (every draw has 2 replicas or more) and ZeRO-Offload's
# gradient copies all to one place (every draw has several units); and the cheats that keep the losses with other work (an
# all-gather for TP's sum, GPipe's order for 1F1B, ZB-H1 without its split)
# score zero on their case.
@test "grader: --hidden catches the bugs of padded shards, K != N, shifted buckets, late overlap, a first bucket like the others, TP's vocabulary shards, SP's row offsets, recomputation's shared buffers, pipelines' warm-up, loss weight and tied embedding, and context parallelism's chunk order, dK/dV owner and ring traffic, and expert parallelism's averaging, local range, aux gradient and overlapped own block, and hybrid sharding's replica mean and ZeRO-Offload's copies; the cheats score zero" {
    require_instructor "grader/planted/ is not in a handout"
    in_pairs "$BATS_TEST_TMPDIR/hidden" grade_hidden 03-zero2-last-shard-off-by-one 03-grads-divided-by-ranks-not-microbatches \
                03-hsdp-replicas-summed-not-averaged 03-offload-grads-all-to-unit-0 \
                02-bucket-shifted-one-float 02-overlap-starts-after-backward \
                02-first-bucket-at-bucket-size 03-overlap-starts-after-backward \
                04-embedding-backward-no-vocab-offset 04-fused-sums-only \
                05-embedding-positions-no-row-offset 05-full-recompute-stale-ln-stats \
                05-selective-rebuilds-nothing 06-1f1b-warmup-one-too-many \
                06-backward-loss-not-scaled 06-tied-embedding-not-summed \
                07-zigzag-last-rank-chunks-swapped 07-ring-dkv-to-wrong-owner \
                07-ring-forward-passes-kv-once-too-often \
                08-expert-grads-divided-by-edp 08-local-range-offset-by-rank \
                08-aux-loss-gradient-missing 08-overlapped-own-block-skipped \
                04-cheat-sum-through-allgather 06-cheat-1f1b-is-gpipe 06-cheat-zb-h1-without-split \
                06-1f1b-warmup-without-min 06-interleaved-warmup-without-min \
                06-weight-pass-keeps-activations \
                07-ring-waits-before-computing 07-ulysses-heads-ignore-tp \
                08-overlapped-return-at-source-offset \
                10-zero1-sp-layernorm-not-summed
}
