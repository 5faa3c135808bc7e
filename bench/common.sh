# bench/common.sh: sourced by the lab benchmarks (set BENCH_NAME and SKIP
# first). Medians, not means: a step slowed by another process on the
# machine should not move the figure.

die() {
    echo "$BENCH_NAME: error: $*" >&2
    exit 2
}

# The settings every benchmark reads, each one error when wrong:
# check_timeout LIMIT: BENCH_TIMEOUT, seconds a run may take;
# check_steps STEPS MIN [WHY]: BENCH_STEPS, at least MIN (WHY: the reason, said)
check_timeout() {
    [[ "$1" =~ ^[1-9][0-9]*$ ]] || die "BENCH_TIMEOUT must be a positive integer, got '$1'"
}
check_steps() {
    [[ "$1" =~ ^[0-9]{1,6}$ ]] && [ "$1" -ge "$2" ] \
        || die "BENCH_STEPS must be an integer of at least $2${3:+ ($3)}, got '$1'"
}

# Which copy of a lab a benchmark runs: BENCH_COPY=solutions (the default in
# the instructor's tree) or labs (the student's own program, build/labs/: the
# default in a handout, which `make handout` marks with .handout). Run from
# the kit's top directory.
BENCH_COPY=${BENCH_COPY:-$([ -f .handout ] && echo labs || echo solutions)}
[[ "$BENCH_COPY" =~ ^(labs|solutions)$ ]] || die "BENCH_COPY must be labs or solutions, got '$BENCH_COPY'"

# bench_program NN_name PROG [BUILD_DIR]: the path of lab NN's program PROG in
# the BENCH_COPY copy (say which, once, on stderr)
bench_program() {
    local build=${3:-build}
    [ "$BENCH_COPY" = labs ] || [ -d "solutions/$1" ] \
        || die "the solution of lab ${1%%_*} is not in this handout: BENCH_COPY=labs runs your program"
    echo "$BENCH_NAME: runs $build/$BENCH_COPY/$1/$2 ($([ "$BENCH_COPY" = labs ] && echo "the student's program, labs/$1" || echo "the solution"))" >&2
    echo "$build/$BENCH_COPY/$1/$2"
}

# earlier_program NN_name PROG: an earlier lab's program that a benchmark
# compares with: the solution's when it is here, else the student's (the
# Makefile's rule for earlier labs)
earlier_program() {
    if [ -d "solutions/$1" ]; then echo "build/solutions/$1/$2"; else echo "build/labs/$1/$2"; fi
}

# json_number FILE KEY: the number under "KEY" in the JSON file FILE (a
# bench_collectives run.json), empty when absent
json_number() { sed -n "s/.*\"$2\": *\([0-9.eE+-]*\).*/\1/p" "$1" | head -n 1; }

# The median of the numbers on stdin (one a line), to 2 decimals; fails on
# none.
middle_value() {
    sort -g | awk '{ v[++n] = $1 } END { if (!n) exit 1; printf "%.2f\n", (v[int((n + 1) / 2)] + v[int(n / 2) + 1]) / 2 }'
}

# The lower quartile, the median and the upper quartile of the numbers on
# stdin, one line "Q1 MEDIAN Q3" (the spread a chart draws around a median:
# one slow step widens it, it cannot move the median); status 1 when none
quartiles() {
    sort -g | awk '
        function at(q,   x, i) { x = 1 + q * (n - 1); i = int(x); return v[i] + (x - i) * (v[i + 1 > n ? n : i + 1] - v[i]) }
        { v[++n] = $1 } END { if (!n) exit 1; printf "%.2f %.2f %.2f\n", at(0.25), at(0.5), at(0.75) }'
}

# column_values DIR COLUMN: column COLUMN of DIR/metrics.csv over the steps
# from SKIP on, one a line
column_values() {
    awk -F, -v skip="$SKIP" -v name="$2" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == name) c = i; next }
        c && $1 >= skip { print $c }' "$1/metrics.csv"
}

# Median of column COLUMN of DIR/metrics.csv over the steps from SKIP on:
# median_column DIR COLUMN.
median_column() { column_values "$1" "$2" | middle_value; }

median_step_ms() { median_column "$1" step_ms; }

# step_quartiles_ms DIR: "Q1 MEDIAN Q3" of DIR/metrics.csv's step_ms from SKIP on
step_quartiles_ms() { column_values "$1" step_ms | quartiles; }


# run_ranks NP DIR PROG ARGS...: PROG ARGS --out DIR on NP ranks (more than
# the cores allowed) under $LIMIT seconds, its output in DIR.log; on failure
# the log's tail and one error naming the command
run_ranks() {
    local np=$1 dir=$2
    shift 2
    rm -rf "$dir"
    mkdir -p "$dir"
    if ! timeout --kill-after=10 "$LIMIT" mpirun -q --oversubscribe -np "$np" "$@" \
            --out "$dir" > "$dir.log" 2>&1; then
        tail -n 20 "$dir.log" >&2
        die "$* on $np ranks failed (log: $dir.log)"
    fi
}

# peak DIR CATEGORY: rank 0's peak bytes of CATEGORY in DIR/memory.csv
peak() { awk -F, -v c="$2" '$1 == 0 && $2 == c { print $4 }' "$1/memory.csv"; }

# bars_plot PNG WIDTH TITLE STYLE [HEIGHT]: gnuplot's opening lines of a bar
# chart of a CSV, grid lines across (STYLE: "clustered gap 1", rowstacked, ...)
bars_plot() {
    printf '%s\n' "set terminal pngcairo size $2,${5:-520} font \",11\" noenhanced" "set output \"$1\"" \
        'set datafile separator ","' "set title \"$3\"" 'set style data histograms' \
        "set style histogram $4" 'set style fill solid 0.85 border -1' 'set grid ytics'
}
