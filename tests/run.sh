#!/usr/bin/env bash
# The whole test suite: every Bats file under tests/ (or the files given),
# one after the other, TAP output (numbered per file), then the wall time of
# every file and the 15 slowest tests, and one closing line "N passed, N
# failed, N skipped". Exit status 0 only when nothing failed and every
# planned test reported.
set -uo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Each program inside the suites runs under its own timeout; this one only
# guards against a suite that hangs outside them (the whole run's budget,
# shared by the files in turn).
budget=3000
files=("$@")
[ ${#files[@]} -gt 0 ] || files=(tests/*.bats)
start=$(date +%s.%N)
planned=0 ok=0 skipped=0 failed=0
for f in "${files[@]}"; do
    left=$(awk -v s="$start" -v now="$(date +%s.%N)" -v b="$budget" 'BEGIN { printf "%d", b - (now - s) }')
    if [ "$left" -le 0 ]; then
        echo "# out of time ($budget s) before $f"
        failed=$((failed + 1))
        continue
    fi
    log="$work/$(basename "$f").tap"
    t0=$(date +%s.%N)
    # --timing: each test's own time ("in N ms"), setup_file's not
    timeout --kill-after=10 "$left" bats --timing --tap "$f" | tee "$log"
    printf '%s %s\n' "$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')" \
        "$f" >> "$work/files"
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
total=$(awk -v s="$start" -v now="$(date +%s.%N)" 'BEGIN { printf "%.0f", now - s }')
echo "# wall time per file (s), $total s in all:"
sort -rn "$work/files" | awk '{ printf "#   %7.1f  %s\n", $1, $2 }'
echo "# the 15 slowest tests (s):"
sort -rn "$work/tests" 2> /dev/null | head -n 15 | awk '{ t = $1; $1 = ""; printf "#   %7.1f %s\n", t / 1000, substr($0, 1, 110) }'
echo "$((ok - skipped)) passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
