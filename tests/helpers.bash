# Shared by the Bats suites: paths, and running programs under a timeout so a
# bug gives a failure, never a hung CI.
ROOT="$(cd "$BATS_TEST_DIRNAME/.." && pwd)"
BUILD="$ROOT/build"
SOL00="$BUILD/solutions/00_single_device"
LAB00="$BUILD/labs/00_single_device"
SYNTH="$BUILD/data/synth.tok"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}

# ---- handouts (make handout) ----------------------------------------------
# The instructor's tree has every lab's solution. A student handout has only
# the released ones, no grader/planted/, and a file .handout listing the
# checksums of labs/ as handed out. Tests that need what a handout lacks skip,
# saying why; in the instructor's tree nothing is skipped this way.
in_handout() { [ -f "$ROOT/.handout" ]; }

# lab_name NN: the lab's directory name (00 -> 00_single_device)
lab_name() {
    local d
    for d in "$ROOT"/labs/"$1"_*/; do [ -d "$d" ] && basename "$d" && return 0; done
    echo "no lab $1 under labs/" >&2
    return 1
}

# have_solution NN...: every given lab's solution is in this tree
have_solution() {
    local n lab
    for n in "$@"; do
        lab=$(lab_name "$n") && [ -d "$ROOT/solutions/$lab" ] || return 1
    done
}

# require_solution NN...: skip the test when one of these labs' solutions is
# not in this handout (setup_file cannot skip: guard its work with
# have_solution). In the instructor's tree a missing solution fails instead.
require_solution() {
    local n
    for n in "$@"; do
        have_solution "$n" && continue
        in_handout && skip "solution of lab $n not released in this handout"
        echo "solutions/$(lab_name "$n") is missing" >&2
        return 1
    done
}

# untouched NN: the lab's sources are still those handed out (checked
# against .handout); always true outside a handout
untouched() {
    local lab
    in_handout || return 0
    lab=$(lab_name "$1") || return 1
    grep "  labs/$lab/" "$ROOT/.handout" | (cd "$ROOT" && sha256sum --check --status) || return 1
    [ "$(grep -c "  labs/$lab/" "$ROOT/.handout")" -eq \
      "$(find "$ROOT/labs/$lab" -type f \( -name '*.c' -o -name '*.h' \) | wc -l)" ]
}

# require_untouched NN...: skip the test when the student has changed one of
# these labs' sources (it checks the skeletons as handed out)
require_untouched() {
    local n
    for n in "$@"; do
        untouched "$n" || skip "labs/$(lab_name "$n") is no longer the untouched skeleton (this test checks the handout's)"
    done
}

# require_instructor WHY: skip in a handout ("instructors only: WHY")
require_instructor() {
    in_handout && skip "instructors only: $1"
    return 0
}

# t SECONDS CMD...: run CMD, killed after SECONDS (exit status 124 then).
t() {
    local secs=$1
    shift
    timeout --kill-after=5 "$secs" "$@"
}

# mpirun_t SECONDS NP CMD...: CMD on NP ranks under a timeout. More ranks
# than cores are allowed (--oversubscribe); root may run MPI here (CI runs as
# root); -q drops mpirun's banner when a rank exits non-zero. The timeout
# kills mpirun and its ranks: a deadlock fails the test.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# A rank that waits gives its core up when nothing progressed, instead of
# spinning until the scheduler's next tick: with more ranks than cores
# (most tests here, on 2 cores) the rank it waits for gets to run.
export OMPI_MCA_mpi_yield_when_idle=${OMPI_MCA_mpi_yield_when_idle:-1}
mpirun_t() {
    local secs=$1 np=$2
    shift 2
    t "$secs" mpirun -q --oversubscribe -np "$np" "$@"
}

# A user error: exit status exactly 2, one line on stderr saying "error:",
# no crash ("fatal", a signal, a core dump).
assert_user_error() {
    if [ "$status" -ne 2 ]; then
        echo "expected exit status 2, got $status; output: $output" >&2
        return 1
    fi
    [[ "$output" == *"error:"* ]] || { echo "no 'error:' in: $output" >&2; return 1; }
    [[ "$output" != *"fatal"* ]] || { echo "internal failure: $output" >&2; return 1; }
    [ "$(printf '%s\n' "$output" | grep -c 'error:')" -eq 1 ] || { echo "more than one error line: $output" >&2; return 1; }
}

# same_checkpoints A B: two directories of checkpoints hold the same files,
# byte for byte (the jobs' .lock aside), but for the line each index owes
# to its run (its lineage: every run draws its own id) and the index's
# checksum over it
same_checkpoints() {
    local f
    [ "$(cd "$1" && find . -path ./.lock -prune -o -type f -print | sort)" = \
      "$(cd "$2" && find . -path ./.lock -prune -o -type f -print | sort)" ] ||
        { echo "$1 and $2 hold other files" >&2; return 1; }
    for f in $(cd "$1" && find . -path ./.lock -prune -o -type f -print); do
        if [ "$(basename "$f")" = index.txt ]; then
            diff <(grep -v -e '^lineage ' -e '^checksum ' "$1/$f") \
                 <(grep -v -e '^lineage ' -e '^checksum ' "$2/$f") >&2 || return 1
            grep -q '^lineage [0-9a-f]\{16\}@0$' "$1/$f" || { echo "$1/$f: no lineage" >&2; return 1; }
        else
            cmp "$1/$f" "$2/$f" >&2 || return 1
        fi
    done
}

# Value of column $2 (by header name) in CSV file $1, row index $3 (0-based data row).
csv_col() {
    awk -F, -v col="$2" -v row="$3" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == col) c = i; next }
        NR - 2 == row { print $c }' "$1"
}

# Build a lab's programs from another copy of one of its sources (a planted
# bug): build_variant SRC.c LAB OUTDIR PROG...  ->  OUTDIR/PROG, each linked
# as LAB's manifest says (labs/LAB/lab.mk, `make print-links`) with SRC's
# object for the lab's own (SRC named as one of the lab's files: beside
# the solutions' objects of its other files). The lab's headers come from
# labs/LAB; SRC may live in a temporary directory. VARIANT_BUILD=DIR links DIR's objects and
# library instead of build/'s, and VARIANT_FLAGS adds compile and link flags
# (the sanitizers': sanitize.bats).
build_variant() {
    local src=$1 lab=$2 out=$3 build=${VARIANT_BUILD:-$BUILD} arch obj links
    local -a extra
    read -ra extra <<< "${VARIANT_FLAGS:-}"
    shift 3
    arch=$(gcc -print-multiarch)
    obj="$out/$(basename "${src%.c}").o"
    # SRC named as one of the lab's files: the others as built (lab 06:
    # pipeline.c beside schedules.c); any other name stands for the lab
    local others=() o
    if [ -e "$build/solutions/$lab/$(basename "$obj")" ]; then
        for o in "$build/solutions/$lab"/*.o; do
            [ "$(basename "$o")" = "$(basename "$obj")" ] || others+=("$o")
        done
    fi
    mkdir -p "$out"
    mpicc -std=gnu11 -O2 -fopenmp "${extra[@]}" -I"$ROOT/common" -I"$ROOT/labs/$lab" \
        -I"/usr/include/$arch/openblas-openmp" -c "$src" -o "$obj"
    for prog in "$@"; do
        links=$(make -s --no-print-directory -C "$ROOT" print-links |
            awk -v lab="$lab" -v prog="$prog" '$1 == lab && $2 == prog { $1 = $2 = ""; print }' |
            sed "s#\(^\| \)build/#\1$build/#g")
        [ -n "$links" ] || { echo "build_variant: $lab has no program $prog" >&2; return 1; }
        # shellcheck disable=SC2086  # the manifest's words
        (cd "$ROOT" && mpicc $links "$obj" "${others[@]}" "$build/libcommon.a" \
            -L"/usr/lib/$arch/openblas-openmp" -Wl,-rpath,"/usr/lib/$arch/openblas-openmp" \
            -lopenblas -ldnnl -lm -fopenmp -pthread "${extra[@]}" -o "$out/$prog")
    done
}

# params_gap A B: the largest difference between the floats of two
# --dump-params files (as many floats in each, or it fails)
params_gap() {
    python3 - "$1" "$2" <<'PY'
import array, sys
a, b = array.array("f"), array.array("f")
a.frombytes(open(sys.argv[1], "rb").read())
b.frombytes(open(sys.argv[2], "rb").read())
assert len(a) == len(b) > 0, (len(a), len(b))
print(max(abs(x - y) for x, y in zip(a, b)))
PY
}

# same_run DIR: DIR's losses within the grader's tolerance of $BASE's (a
# baseline run of the same config) and its params.bin (as many floats)
# within float noise
same_run() {
    local gap
    python3 - "$BASE" "$1" <<'PY' || return 1
import sys
sys.path.insert(0, "grader"); sys.dont_write_bytecode = True
import compare
r = compare.check_losses(sys.argv[2], sys.argv[1])
assert r is None, r
PY
    gap=$(params_gap "$BASE/params.bin" "$1/params.bin") || return 1
    awk -v g="$gap" 'BEGIN { exit !(g < 1e-5) }' || { echo "parameters differ by up to $gap"; return 1; }
    printf 'ok: losses within tolerance, parameters within %.2g\n' "$gap"
}

# follows_base BASE OUT LABEL: OUT's run follows BASE's (same_run) and all
# of its ranks ended with one model (params_checksum.csv)
follows_base() {
    local said
    said=$(BASE="$1" same_run "$2" 2>&1) || { echo "$3: $said"; return 1; }
    echo "$3: $said"
    [ "$(tail -n +2 "$2/params_checksum.csv" | cut -d, -f2 | sort -u | wc -l)" -eq 1 ] ||
        { echo "$3: the ranks' copies differ"; cat "$2/params_checksum.csv"; return 1; }
}

# is_png FILE: FILE starts with the PNG signature and is more than a header
is_png() {
    [ "$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] && [ "$(wc -c < "$1")" -gt 1000 ]
}

# ---- the grader (tests/grader*.bats, tests/handout.bats) ------------------
GRADE="python3 $ROOT/grader/grade.py"
# lost_points STATUS: the grader's exit status says points were lost (1),
# not that it failed (2: bad input; 124: the test's time limit)
lost_points() {
    [ "$1" -eq 1 ] || { echo "the grader exited with status $1, not 1 (points lost)"; return 1; }
}

# total_of FILE: "got/best" from the report's last line
total_of() { sed -n 's/^total: //p' "$1"; }

# in_pairs LOG FUNCTION ITEM...: FUNCTION ITEM for every ITEM, two at a time
# (much of a grading is mpirun starting and ranks waiting), each one's
# output in LOG/ITEM.txt; then prints the logs in ITEM order and fails when
# any FUNCTION did
in_pairs() {
    local log=$1 fn=$2 item failed=0
    shift 2
    mkdir -p "$log"
    for item in "$@"; do
        [ "$(jobs -rp | wc -l)" -lt 2 ] || wait -n
        { local rc=0; "$fn" "$item" || rc=$?; echo "status $rc"; } > "$log/$item.txt" 2>&1 &
    done
    wait
    for item in "$@"; do
        cat "$log/$item.txt"
        [ "$(tail -n 1 "$log/$item.txt")" = "status 0" ] || failed=$((failed + 1))
    done
    [ "$failed" -eq 0 ]
}

# case_rows FILE: the report's rows of cases, points then a reason (not the
# totals under them: "02_ddp: 12/12", "02_ddp extension: 3/3")
case_rows() { grep -E '^[0-9]{2}_[a-z0-9_]+ +.*[0-9.]+/[0-9.]+ +[^ ]' "$1"; }

# literal_name NAME: an extended regex matching NAME as it is ("ZeRO++ (qwZ, ...)")
literal_name() { sed -E 's/[][().*+?^$|\\{}]/\\&/g' <<<"$1"; }

# drawn_name NAME: an extended regex for a case's row in hidden mode, where
# the counts its name states are the drawn ones ("4 ranks" may read "2 ranks")
drawn_name() { literal_name "$1" | sed -E 's/[0-9]+/[0-9]+/g'; }
