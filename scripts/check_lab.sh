#!/usr/bin/env bash
# check_lab.sh NN_name COPY 'CHECKS' (`make check LAB=NN`): a lab's own
# checks, as its lab.mk declares them ("PROGRAM ARGS", or "NP:PROGRAM ARGS"
# on NP ranks; ";" between), run on build/COPY/NN_name/ (labs: the
# student's copy; solutions: the solution's). One line per check, its
# output shown in full when it fails. Exit status 0 when every check
# passes, 1 when one fails, 2 on bad usage or a lab without checks.
#   CHECK_TIMEOUT  seconds a check may take (default 300)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
die() { echo "check: error: $*" >&2; exit 2; }
[ $# -eq 3 ] || die "usage: check_lab.sh NN_name labs|solutions 'CHECKS'"
lab=$1 copy=$2 checks=$3 limit=${CHECK_TIMEOUT:-300}
[[ "$limit" =~ ^[1-9][0-9]*$ ]] || die "CHECK_TIMEOUT must be a whole number of seconds, got '$limit'"
[ -n "$lab" ] || die "LAB=NN names one lab (make check LAB=06)"
case $copy in
labs | solutions) ;;
*) die "CHECK_COPY must be labs or solutions, got '$copy'" ;;
esac
[ -n "${checks//[; ]/}" ] ||
    die "lab $lab has no checks of its own: make grade LAB=${lab:0:2} compares your programs with the references"
[ "$copy" = labs ] || [ -d "solutions/$lab" ] || die "the solution of $lab is not in this tree: CHECK_COPY=labs checks yours"
# mpirun refuses root unless told (containers and CI run as root)
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1} OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
export OMPI_MCA_mpi_yield_when_idle=${OMPI_MCA_mpi_yield_when_idle:-1}

dir="build/$copy/$lab" failed=0 n=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT
IFS=';' read -ra list <<< "$checks"
for check in "${list[@]}"; do
    read -ra words <<< "$check"
    [ ${#words[@]} -gt 0 ] || continue
    np=1 prog=${words[0]}
    if [[ "$prog" == *:* ]]; then np=${prog%%:*} prog=${prog#*:}; fi
    cmd=("$dir/$prog" "${words[@]:1}")
    shown="${cmd[*]}"
    if [ "$np" -gt 1 ]; then
        cmd=(mpirun -q --oversubscribe -np "$np" "${cmd[@]}")
        shown="mpirun -np $np $shown"
    fi
    n=$((n + 1))
    rc=0
    timeout --kill-after=10 "$limit" "${cmd[@]}" > "$log" 2>&1 || rc=$?
    if [ "$rc" -eq 0 ]; then
        echo "check: ok      $shown: $(tail -n 1 "$log")"
        continue
    fi
    failed=$((failed + 1))
    cat "$log"
    case $rc in
    3) why="not implemented: $(grep -m1 -o 'not implemented: [A-Za-z0-9_]*' "$log" | sed 's/not implemented: //')" ;;
    124 | 137) why="timed out after $limit s" ;;
    *) why="exit status $rc" ;;
    esac
    echo "check: FAILED  $shown: $why"
done
echo "check: $lab ($copy): $((n - failed)) of $n checks passed"
[ "$failed" -eq 0 ]
