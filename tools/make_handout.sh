#!/usr/bin/env bash
# make_handout.sh DEST [RELEASED] [HINTS]: write the tree students get, from
# the git checkout in the current directory (`make handout DEST=dir
# RELEASED=00,01 HINTS=no` runs this; docs/INSTRUCTORS.md: "Handing out the
# labs").
#
# DEST gets every tracked file (git ls-files, as it is in the working tree)
# but:
#   solutions/NN_name/  of each lab not in RELEASED: lab numbers separated by
#                       commas or spaces (00,01), "all" or "none" (the default)
#   grader/planted/     the planted bugs that test the grader (instructors')
#   labs/*/HINTS.md     when HINTS=no (HINTS=yes, the default, keeps them)
# and four more files:
#   START.md            how to start: the commands, where each lab's files are,
#                       which solutions are released
#   .github/workflows/grade.yml   grader/ci/github-actions.yml: CI that grades
#                       each push (when the tree has that file)
#   .handout            marks the tree as a handout (the Makefile, the tests
#                       and the benchmarks read it): the released labs, the
#                       source revision, and checksums of labs/ as handed out
#   README.md           the same, with a pointer to START.md under its title
# DEST must be missing or an empty directory; it becomes a fresh git
# repository with one commit, so that a clone of it builds and runs as is.
# Bad input is one "handout: error:" line and exit status 2.
set -euo pipefail

die() {
    echo "handout: error: $*" >&2
    exit 2
}

dest=${1:-}
released=${2:-none}
hints=${3:-yes}
usage="make handout DEST=dir [RELEASED=00,01] [HINTS=no]"

top=$(git rev-parse --show-toplevel 2>/dev/null) || die "$PWD is not a git checkout of the kit"
cd "$top"
[ ! -e .handout ] || die "this tree is a handout already: make handouts in the instructor's tree"
[ -n "$dest" ] || die "no DEST: $usage"
[[ "$hints" =~ ^(yes|no)$ ]] || die "HINTS must be yes or no, got '$hints'"

# ---- the labs, and which solutions go out ----------------------------------
labs=()
for d in labs/[0-9][0-9]_*/; do labs+=("$(basename "$d")"); done
[ ${#labs[@]} -gt 0 ] || die "no labs/NN_name/ directories in $top"
numbers=$(printf '%s\n' "${labs[@]}" | cut -c1-2 | tr '\n' ' ')
out_labs=()     # released
read -ra asked <<< "${released//,/ }"
case "${asked[*]}" in
    all) out_labs=("${labs[@]}") ;;
    none | "") ;;
    *)
        for n in "${asked[@]}"; do
            [[ "$n" =~ ^[0-9][0-9](_[a-z0-9_]+)?$ ]] \
                || die "RELEASED must list lab numbers (00,01), 'all' or 'none', got '$released'"
            lab=""
            for l in "${labs[@]}"; do
                if [ "$l" = "$n" ] || [ "${l:0:2}" = "$n" ]; then lab=$l; fi
            done
            [ -n "$lab" ] || die "RELEASED: no lab $n (labs: ${numbers% })"
            [ -n "$(git ls-files "solutions/$lab/")" ] || die "RELEASED: lab $lab has no solution in solutions/"
            [[ " ${out_labs[*]} " == *" $lab "* ]] || out_labs+=("$lab")
        done ;;
esac

# ---- DEST ------------------------------------------------------------------
dest=$(realpath -m -- "$dest")
case $dest/ in
    "$top"/*) git check-ignore -q "$dest" \
        || die "DEST $dest is inside this checkout: choose a directory outside it (or one git ignores, under build/)" ;;
esac
if [ -e "$dest" ] || [ -L "$dest" ]; then
    [ -d "$dest" ] && [ ! -L "$dest" ] || die "DEST $dest exists and is not a directory"
    [ -z "$(ls -A "$dest")" ] || die "DEST $dest exists and is not empty"
fi
mkdir -p "$dest" 2> /dev/null || die "cannot create DEST $dest"
[ -w "$dest" ] || die "DEST $dest is not writable"

# ---- copy the tracked files but the left-out ones ---------------------------
list=$(mktemp)
trap 'rm -f "$list"' EXIT
kept=0 left=0
while IFS= read -r -d '' f; do
    skip=0
    case $f in
        grader/planted/*) skip=1 ;;
        labs/*/HINTS.md) [ "$hints" = yes ] || skip=1 ;;
        solutions/*)
            lab=${f#solutions/}
            lab=${lab%%/*}
            [[ " ${out_labs[*]} " == *" $lab "* ]] || skip=1 ;;
    esac
    [ -e "$f" ] || [ -L "$f" ] || continue   # deleted in the working tree
    if [ $skip = 1 ]; then
        left=$((left + 1))
    else
        printf '%s\0' "$f" >> "$list"
        kept=$((kept + 1))
    fi
done < <(git ls-files -z)
tar --null -T "$list" -cf - | tar -xf - -C "$dest"

rev=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD 2>/dev/null || rev="$rev-dirty"
released_text=${out_labs[*]:-none}

# ---- START.md --------------------------------------------------------------
{
    echo "# Start here"
    echo
    echo "This is your copy of the dtlab lab kit. Each lab has a directory"
    echo "\`labs/NN_name/\`: its README (theory, tasks, questions) and the source"
    echo "files you complete. Until you do, a program that reaches one of your"
    echo "TODOs stops with \`not implemented: <function>\` and exit status 3."
    echo
    echo '```'
    echo "make                # build everything: your labs into build/labs/NN_name/"
    echo "make test           # the kit's own tests, and your started labs' own checks (some skip, saying why)"
    echo "make check LAB=06   # one lab's own checks of your code (gradcheck, the check_* programs)"
    echo "make grade LAB=00   # grade your lab 00 (make grade: every lab); report in grader/out/report.txt"
    echo '```'
    echo
    echo "| lab | your files | solution |"
    echo "|-----|------------|----------|"
    for lab in "${labs[@]}"; do
        files=$(cd "$dest" && grep -l 'NOT_IMPLEMENTED();' "labs/$lab"/*.c 2>/dev/null | sed 's/.*/`&`/' | paste -sd ' ' || true)
        if [[ " ${out_labs[*]} " == *" $lab "* ]]; then sol="released: \`solutions/$lab/\`"; else sol="not released"; fi
        hint=""
        [ ! -f "$dest/labs/$lab/HINTS.md" ] || hint=" (hints: \`labs/$lab/HINTS.md\`)"
        echo "| [$lab](labs/$lab/README.md) | ${files:-see its README}$hint | $sol |"
    done
    echo
    echo "Headers (\`.h\`) are the contract between your code and the programs: leave"
    echo "them as they are. A lab that builds on earlier ones (every trainer from"
    echo "lab 02 on runs lab 00's backward passes) links the earlier lab's released"
    echo "solution, or your own earlier lab while that solution is not released:"
    echo "finish lab 00 first. \`make grade LAB=NN\` runs the same cases as your"
    echo "instructor's grader, and compares with the reference runs in"
    echo "\`grader/reference/\`; it exits non-zero when a point is lost."
    echo
    echo "Pushed to GitHub, this repository grades itself on every push"
    echo "(\`.github/workflows/grade.yml\`: set \`LAB\` there to your assignment's"
    echo "lab): the run goes red when a point is lost, and its summary page shows"
    echo "the points table."
    echo
    echo "Each lab's benchmark runs your program: the table in"
    echo "[docs/TESTING.md](docs/TESTING.md#benchmarks) lists each lab's \`make bench\` target."
    echo "[docs/TRAINER.md](docs/TRAINER.md) (the programs each lab builds, the trainer),"
    echo "[docs/MULTI_RANK.md](docs/MULTI_RANK.md) and [docs/TESTING.md](docs/TESTING.md)"
    echo "describe the kit; where they name \`build/solutions/...\`, use your"
    echo "\`build/labs/...\` instead. The one exception: a README that compares a"
    echo "run with lab 00's \`train_gpt\` means the one that works, the released"
    echo "solution's (\`build/solutions/00_single_device/train_gpt\`) once lab 00's"
    echo "solution is in your tree, else yours."
    echo
    echo "When a solution is released later, your instructor gives you its"
    echo "\`solutions/NN_name/\` directory: put it at the top of this tree as it is,"
    echo "and the next \`make\` builds it (and later labs use it)."
} > "$dest/START.md"

# ---- CI: the workflow that grades each push ---------------------------------
if [ -f grader/ci/github-actions.yml ]; then
    mkdir -p "$dest/.github/workflows"
    cp grader/ci/github-actions.yml "$dest/.github/workflows/grade.yml"
fi

# ---- README.md: a pointer to START.md --------------------------------------
if [ -f "$dest/README.md" ]; then
    awk -v n="$released_text" 'NR == 1 { print; print ""; print "> **Student handout.** Start with [START.md](START.md). Solutions released: " n "."; next } { print }' \
        "$dest/README.md" > "$dest/README.md.tmp"
    mv "$dest/README.md.tmp" "$dest/README.md"
fi

# ---- .handout: what this tree is --------------------------------------------
{
    echo "# A dtlab student handout, written by 'make handout' from revision $rev."
    echo "# The Makefile, tests and benchmarks read this file; tests of the untouched"
    echo "# skeletons skip for a lab whose sources differ from these checksums."
    echo "released: $released_text"
    echo "hints: $hints"
    (cd "$dest" && find labs -type f \( -name '*.c' -o -name '*.h' \) | LC_ALL=C sort | xargs -d '\n' sha256sum)
} > "$dest/.handout"

# ---- a fresh repository, one commit ----------------------------------------
(
    cd "$dest"
    git init -q -b main
    ident=()
    git config user.email > /dev/null || ident=(-c user.name="dtlab handout" -c user.email="handout@dtlab.invalid")
    git add -A
    git "${ident[@]}" -c commit.gpgsign=false commit -q -m "dtlab handout (solutions released: $released_text)"
) || die "git could not commit the handout in $dest"

echo "handout: wrote $dest: $kept files from $rev, plus START.md and .handout; left out $left"
echo "handout: solutions released: $released_text; grader/planted/ left out; hints: $hints"
echo "handout: students start with: git clone $dest && cd $(basename "$dest") && make && make test && make grade LAB=${labs[0]:0:2}"
