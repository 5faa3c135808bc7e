#!/usr/bin/env bash
# The whole test suite: every Bats file under tests/ (or the files given),
# TAP output per file (numbered per file, each printed whole when it ends),
# then the wall time of every file and the 15 slowest tests, and one closing
# line "N passed, N failed, N skipped". Exit status 0 only when nothing
# failed and every planned test reported.
#
# Files run in TEST_JOBS lanes at once (default 3): much of a test's time
# is mpirun starting, ranks waiting for each other and the grader's
# bookkeeping (the grader alone leaves half of two cores idle), so lanes
# share the cores well. Each lane takes the next file of one queue: first
# FIRST's, in its order (the longest by a recent run's times, so that no
# long file starts last), then the others. Files that must have the machine
# to themselves run after the lanes, one at a time: ALONE below (checks of
# timing, or of processes machine-wide).
set -uo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ALONE=" tests/cluster.bats tests/failsafe.bats tests/checkpoint_failures.bats "
FIRST=" tests/grader_planted.bats tests/grader.bats tests/grader_cheat.bats tests/slides.bats tests/sanitize.bats tests/handout.bats tests/checkpoint.bats tests/fake_gpu.bats "
jobs=${TEST_JOBS:-3}
[[ "$jobs" =~ ^[1-9][0-9]?$ ]] || { echo "run.sh: TEST_JOBS must be 1-99, got '$jobs'" >&2; exit 2; }
# Each program inside the suites runs under its own timeout; this one only
# guards against a suite that hangs outside them (the whole run's budget).
budget=3000
start=$(date +%s.%N)

files=("$@")
[ ${#files[@]} -gt 0 ] || files=(tests/*.bats)
# the queue, one file a line: the longest first, then the others
queue=() alone=() first=()
for f in "${files[@]}"; do
    if [[ "$ALONE" == *" $f "* ]]; then alone+=("$f")
    elif [[ "$FIRST" != *" $f "* ]]; then queue+=("$f")
    fi
done
# FIRST's files in its order (the longest first), those of this run
for f in $FIRST; do
    [[ " ${files[*]} " == *" $f "* ]] && first+=("$f")
done
printf '%s\n' "${first[@]}" "${queue[@]}" | sed '/^$/d' > "$work/queue"

elapsed() { awk -v s="$start" -v now="$(date +%s.%N)" 'BEGIN { printf "%.0f", now - s }'; }

# run_file F: F's TAP into $work, printed whole, its wall time and CPU
# time noted. The CPU time (user + system of every process the file ran
# and waited for, from the subshell's `times`) is what a file costs the
# others: the lanes share two cores, so a file's wall time is mostly the
# other lanes' load.
run_file() {
    local f=$1 log="$work/$(basename "$1").tap" t0 left cpu
    left=$((budget - $(elapsed)))
    t0=$(date +%s.%N)
    if [ "$left" -le 0 ]; then
        echo "# out of time ($budget s) before $f" > "$log"
        cpu=0
    else
        # --timing: each test's own time ("in N ms"), setup_file's not;
        # times' second line: the children's user and system time
        cpu=$( (timeout --kill-after=10 "$left" bats --timing --tap "$f" > "$log" 2>&1; times) |
            awk 'NR == 2 { n = 0; for (i = 1; i <= 2; i++) { split($i, a, "m"); n += a[1] * 60 + a[2] } print n }')
    fi
    awk -v a="$t0" -v b="$(date +%s.%N)" -v f="$f" -v c="$cpu" \
        'BEGIN { printf "%.1f %.1f %s\n", b - a, c, f }' >> "$work/files"
    flock "$work/print" cat "$log"
}

# lane: files from the queue until it is empty
lane() {
    local f
    while :; do
        f=$(flock "$work/take" sh -c 'head -n 1 "$1"; sed -i 1d "$1"' _ "$work/queue")
        [ -n "$f" ] || return 0
        run_file "$f"
    done
}

for _ in $(seq "$jobs"); do lane & done
wait
for f in "${alone[@]}"; do run_file "$f"; done

planned=0 ok=0 skipped=0 failed=0
for f in "${files[@]}"; do
    log="$work/$(basename "$f").tap"
    n=$(sed -n 's/^1\.\.\([0-9]*\)$/\1/p' "$log" | head -n1)
    if [ -z "$n" ]; then
        echo "# bats did not run $f"
        failed=$((failed + 1))
        continue
    fi
    file_ok=$(grep -cE '^ok [0-9]+' "$log")
    file_failed=$(grep -cE '^not ok [0-9]+' "$log")
    if [ $((n - file_ok - file_failed)) -gt 0 ]; then
        echo "# $f: $((n - file_ok - file_failed)) planned test(s) never reported (cut short)"
        failed=$((failed + n - file_ok - file_failed))
    fi
    planned=$((planned + n)) ok=$((ok + file_ok)) failed=$((failed + file_failed))
    skipped=$((skipped + $(grep -cE '^ok [0-9]+ .*# skip' "$log")))
    sed -nE "s|^(not )?ok [0-9]+ (.*) in ([0-9]+)ms( # skip.*)?$|\3 $(basename "$f"): \2|p" \
        "$log" >> "$work/tests"
done
echo "# wall and CPU time per file (s), $(elapsed) s in all, $jobs lanes:"
sort -rn "$work/files" | awk '{ printf "#   %7.1f %7.1f  %s\n", $1, $2, $3; cpu += $2 }
    END { printf "#   CPU time of all files: %.0f s\n", cpu }'
echo "# the 15 slowest tests (s):"
sort -rn "$work/tests" 2> /dev/null | head -n 15 |
    awk '{ t = $1; $1 = ""; printf "#   %7.1f %s\n", t / 1000, substr($0, 1, 110) }'
echo "$((ok - skipped)) passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
