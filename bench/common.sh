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

# Median of column COLUMN of DIR/metrics.csv over the steps from SKIP on:
# median_column DIR COLUMN.
median_column() {
    awk -F, -v skip="$SKIP" -v name="$2" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == name) c = i; next }
        c && $1 >= skip { print $c }' "$1/metrics.csv" | middle_value
}

median_step_ms() { median_column "$1" step_ms; }

