#!/usr/bin/env bash
# The whole test suite: every Bats file under tests/ (or the files given),
# TAP output, then one closing line "N passed, N failed, N skipped". Exit status 0 only when
# nothing failed and every planned test reported.
set -uo pipefail
cd "$(dirname "$0")/.."
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# Each program inside the suites runs under its own timeout; this one only
# guards against a suite that hangs outside them.
files=("$@")
[ ${#files[@]} -gt 0 ] || files=(tests/*.bats)
timeout --kill-after=10 3000 bats --tap "${files[@]}" | tee "$log"
planned=$(sed -n 's/^1\.\.\([0-9]*\)$/\1/p' "$log" | head -n1)
skipped=$(grep -cE '^ok [0-9]+ .*# skip' "$log")
ok=$(grep -cE '^ok [0-9]+' "$log")
failed=$(grep -cE '^not ok [0-9]+' "$log")
passed=$((ok - skipped))
missing=$(( ${planned:-0} - ok - failed ))
if [ "$missing" -gt 0 ]; then
    echo "# $missing planned test(s) never reported (the suite was cut short)"
    failed=$((failed + missing))
fi
[ -n "$planned" ] || { echo "# bats did not run"; failed=$((failed + 1)); }
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
