# bench/common.sh: sourced by the lab benchmarks (set BENCH_NAME and SKIP
# first). Medians, not means: a step slowed by another process on the
# machine should not move the figure.

die() {
    echo "$BENCH_NAME: error: $*" >&2
    exit 2
}

# The median of the numbers on stdin (one a line), to 2 decimals; fails on
# none.
middle_value() {
    sort -g | awk '{ v[++n] = $1 } END { if (!n) exit 1; printf "%.2f\n", (v[int((n + 1) / 2)] + v[int(n / 2) + 1]) / 2 }'
}

# Median step_ms of DIR/metrics.csv over the steps from SKIP on.
median_step_ms() {
    awk -F, -v skip="$SKIP" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "step_ms") c = i; next }
        c && $1 >= skip { print $c }' "$1/metrics.csv" | middle_value
}

