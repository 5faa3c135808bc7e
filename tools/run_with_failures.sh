#!/usr/bin/env bash
# tools/run_with_failures.sh: a training job that fails and is restarted,
# as on a real cluster. Each launch of PROGRAM is killed (SIGKILL to mpirun
# and every rank, as a node loss would) after a time drawn from an exponential
# distribution of mean MTBF seconds; the job is then launched again, from
# the newest checkpoint it left (--resume DIR/ck) or from the start when it
# left none, until one launch finishes all of --steps. Exponential times are
# memoryless, so drawing afresh at each launch is a Poisson process of
# failures over the wall clock: the model behind Young's and Daly's
# checkpoint interval (lab 09's README, "How often to save").
#
#   tools/run_with_failures.sh --dir DIR (--mtbf SECONDS [--seed N] |
#       --fail-after "T1 T2 ...") [--np N] [--max-failures F] [--limit SECONDS]
#       -- PROGRAM ARGS...
#
# PROGRAM ARGS is a trainer's command line without --out, --save or
# --resume (this script adds --out DIR/out --save DIR/ck, and --resume after
# a failure); put --save-every K in ARGS. --fail-after gives the launches'
# failure times instead of drawing them (a launch past the list never
# fails); --max-failures stops failing after F (default: no bound). The same
# --seed gives the same draws, so jobs that differ only in their save
# interval meet the same failures. Each launch's output is in
# DIR/launch-N.log; DIR/launches.csv has one row a launch; the last line of
# stdout sums up the job. Exit status: 0 when the job finished, 1 when a
# launch failed by itself (not killed here) or the job ran past --limit
# seconds (default 900), 2 on bad usage.
set -uo pipefail

die() { echo "run_with_failures: error: $*" >&2; exit 2; }

DIR= MTBF= SEED=1 FAIL_AFTER= NP=1 MAX_FAILURES=-1 LIMIT=900
is_number() { [[ "$1" =~ ^[0-9]+([.][0-9]+)?$ ]]; }
while [ $# -gt 0 ]; do
    case $1 in
        --dir) DIR=${2-}; shift 2 || die "--dir needs a directory" ;;
        --mtbf) MTBF=${2-}; shift 2 || die "--mtbf needs seconds" ;;
        --seed) SEED=${2-}; shift 2 || die "--seed needs a number" ;;
        --fail-after) FAIL_AFTER=${2-}; shift 2 || die "--fail-after needs a list of seconds" ;;
        --np) NP=${2-}; shift 2 || die "--np needs a rank count" ;;
        --max-failures) MAX_FAILURES=${2-}; shift 2 || die "--max-failures needs a count" ;;
        --limit) LIMIT=${2-}; shift 2 || die "--limit needs seconds" ;;
        --) shift; break ;;
        *) die "unknown option '$1' (see the comment at the top of $0)" ;;
    esac
done
[ $# -gt 0 ] || die "no program: put it after --"
[ -n "$DIR" ] || die "--dir is required"
[ -n "$MTBF" ] || [ -n "$FAIL_AFTER" ] || die "give --mtbf SECONDS or --fail-after \"T1 T2 ...\""
[ -z "$MTBF" ] || [ -z "$FAIL_AFTER" ] || die "--mtbf and --fail-after are two ways to fail: give one"
[ -z "$MTBF" ] || { is_number "$MTBF" && awk -v m="$MTBF" 'BEGIN { exit !(m > 0) }'; } \
    || die "--mtbf must be a positive number of seconds, got '$MTBF'"
for t in $FAIL_AFTER; do is_number "$t" || die "--fail-after takes seconds, got '$t'"; done
[[ "$SEED" =~ ^[0-9]+$ ]] || die "--seed must be a whole number, got '$SEED'"
[[ "$NP" =~ ^[1-9][0-9]*$ ]] || die "--np must be a positive whole number, got '$NP'"
[[ "$MAX_FAILURES" =~ ^-?[0-9]+$ ]] || die "--max-failures must be a whole number, got '$MAX_FAILURES'"
is_number "$LIMIT" || die "--limit must be seconds, got '$LIMIT'"
for a in "$@"; do
    case $a in --out | --save | --resume) die "$a is this script's: leave it out of the trainer's arguments" ;; esac
done
[ -x "$1" ] || die "$1 is not a program (make all)"
[ ! -e "$DIR/ck" ] || die "$DIR/ck exists: a job starts from an empty directory"
mkdir -p "$DIR" || die "cannot make $DIR"

export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1} OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
now() { date +%s.%N; }
# seconds since $1, to the millisecond
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.3f\n", b - a }'; }
# failure_time N: when launch N (from 1) fails, in seconds after it starts;
# "never" past --fail-after's list or --max-failures
failure_time() {
    if [ "$MAX_FAILURES" -ge 0 ] && [ "$FAILURES" -ge "$MAX_FAILURES" ]; then echo never; return; fi
    if [ -n "$FAIL_AFTER" ]; then
        local list=($FAIL_AFTER)
        echo "${list[$(($1 - 1))]:-never}"
    else  # the N-th draw of -MTBF ln(1 - u), u uniform on [0, 1)
        awk -v seed="$SEED" -v m="$MTBF" -v n="$1" \
            'BEGIN { srand(seed); for (i = 0; i < n; i++) u = rand(); printf "%.3f\n", -m * log(1 - u) }'
    fi
}
# newest_step: the steps of the newest whole checkpoint in DIR/ck ("" if none:
# a save killed midway leaves only a dotted temporary directory)
newest_step() {
    local s
    s=$(ls -d "$DIR"/ck/step-[0-9]* 2> /dev/null | sed 's/.*step-0*//' | sort -n | tail -n 1)
    echo "${s:-}"
}

echo "launch,started_s,ended_s,fails_after_s,outcome,resumed_from_step" > "$DIR/launches.csv"
START=$(now)
FAILURES=0 RESUMED=0 LAUNCH=0
while :; do
    LAUNCH=$((LAUNCH + 1))
    from=$(newest_step)
    resume=()
    [ -z "$from" ] || { resume=(--resume "$DIR/ck"); RESUMED=$((RESUMED + 1)); }
    left=$(awk -v l="$LIMIT" -v t="$(since "$START")" 'BEGIN { printf "%.3f\n", l - t }')
    awk -v l="$left" 'BEGIN { exit !(l > 0) }' || {
        echo "run_with_failures: the job ran past --limit $LIMIT s ($FAILURES failures); see $DIR/launch-*.log" >&2
        exit 1
    }
    fail=$(failure_time "$LAUNCH")
    # the launch is cut at its failure time or the job's limit, whichever first
    cut=$(awk -v f="$fail" -v l="$left" 'BEGIN { print (f == "never" || l + 0 < f + 0) ? l : f }')
    t0=$(since "$START")
    # the launch in a session of its own (setsid without a fork: a background
    # job of a subshell is no group leader, so the session's id is its pid):
    # mpirun puts each rank in a process group of its own, and a failure
    # must kill them all, as a node loss would. The subshell reports the
    # kill into the log, not here.
    rm -f "$DIR/launch.sid"
    ( setsid mpirun -q --oversubscribe -np "$NP" "$@" --out "$DIR/out" --save "$DIR/ck" \
        "${resume[@]}" & echo $! > "$DIR/launch.sid"; wait $! ) > "$DIR/launch-$LAUNCH.log" 2>&1 &
    pid=$!
    while [ ! -s "$DIR/launch.sid" ]; do sleep 0.01; done
    sid=$(cat "$DIR/launch.sid")
    failed_here=0
    if ! timeout "$cut" tail --pid="$pid" -s 0.05 -f /dev/null; then
        pkill -KILL -s "$sid"
        failed_here=1
    fi
    wait "$pid"
    rc=$?
    # nothing of the launch may outlive it (a rank left running would save
    # into DIR/ck beside the next launch)
    # (a zombie awaiting its reaper runs nothing and holds no file)
    pkill -KILL -s "$sid"
    while ps -o stat= -s "$sid" | grep -qv '^Z'; do sleep 0.02; done
    t1=$(since "$START")
    if [ "$rc" -eq 0 ]; then
        outcome=finished
    elif [ "$failed_here" -eq 1 ] && [ "$cut" = "$fail" ]; then
        outcome=killed
        FAILURES=$((FAILURES + 1))
    elif [ "$failed_here" -eq 1 ]; then
        outcome=limit
    else
        outcome="failed ($rc)"
    fi
    echo "$LAUNCH,$t0,$t1,$fail,$outcome,${from:-}" >> "$DIR/launches.csv"
    case $outcome in
        finished) break ;;
        killed) ;;
        limit) echo "run_with_failures: the job ran past --limit $LIMIT s ($FAILURES failures); see $DIR/launch-$LAUNCH.log" >&2
               exit 1 ;;
        *) tail -n 15 "$DIR/launch-$LAUNCH.log" >&2
           echo "run_with_failures: launch $LAUNCH failed by itself with status $rc (log: $DIR/launch-$LAUNCH.log)" >&2
           exit 1 ;;
    esac
done
printf 'run_with_failures: finished in %s s of wall time: %d launches, %d failures, %d resumed from a checkpoint, %d from the start\n' \
    "$(since "$START")" "$LAUNCH" "$FAILURES" "$RESUMED" "$((LAUNCH - 1 - RESUMED))"
