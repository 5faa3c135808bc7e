# timeline_window.sh: sourced by the timeline charts (plot_timeline.sh,
# plot_cp_timeline.sh), which define die() first.
#
# timeline_check_inputs CSV PRODUCER [T0 T1]: the window, when given, is two
# non-negative numbers of seconds with T1 > T0; CSV (a trace.csv) exists
# and is not empty (PRODUCER: which program writes it, for the message);
# gnuplot is installed. Each failure is one die() line.
timeline_check_inputs() {
    local csv=$1 producer=$2 t0=${3:-} t1=${4:-}
    local number='^[0-9]+([.][0-9]*)?([eE][-+]?[0-9]+)?$'
    if [ -n "$t0" ]; then
        [[ "$t0" =~ $number && "$t1" =~ $number ]] || die "T0 and T1 must be non-negative numbers of seconds, got '$t0' '$t1'"
        awk -v a="$t0" -v b="$t1" 'BEGIN { exit !(b + 0 > a + 0) }' || die "T1 ($t1) must be later than T0 ($t0)"
    fi
    [ -s "$csv" ] || die "$csv not found or empty ($producer writes it at the end of a run)"
    command -v gnuplot > /dev/null || die "gnuplot not installed (apt-get install gnuplot-nox)"
}
