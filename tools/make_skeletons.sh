#!/usr/bin/env bash
# make_skeletons.sh SRC DST: write the student copy of every lab.
#
# For each SRC/NN_name/*.{c,h}, the lines from one containing
# "/* BEGIN SOLUTION */" to the next containing "/* END SOLUTION */" are
# replaced by a TODO comment and NOT_IMPLEMENTED() (check.h), indented like
# the BEGIN line. The lines from "/* SOLUTION ONLY BEGIN */" to
# "/* SOLUTION ONLY END */" are dropped, with the blank line after them: code
# at file scope that only solutions use (helpers two solved functions share,
# which would give a TODO away). Everything else is copied unchanged.
# Unbalanced or nested markers are an error. Only the source files are
# written: a lab's README lives in labs/.
set -euo pipefail
src=${1:?usage: make_skeletons.sh SRC DST}
dst=${2:?usage: make_skeletons.sh SRC DST}

shopt -s nullglob
count=0
for dir in "$src"/[0-9][0-9]_*/; do
    lab=$(basename "$dir")
    mkdir -p "$dst/$lab"
    for file in "$dir"*.c "$dir"*.h; do
        out="$dst/$lab/$(basename "$file")"
        awk -v path="$file" '
            function fail(what) { printf "%s:%d: %s\n", path, NR, what > "/dev/stderr"; failed = 1; exit 1 }
            /\/\* SOLUTION ONLY BEGIN \*\// {
                if (inside || dropped) fail("SOLUTION ONLY BEGIN inside a region")
                dropped = 1
                next
            }
            /\/\* SOLUTION ONLY END \*\// {
                if (!dropped) fail("SOLUTION ONLY END without BEGIN")
                dropped = 0
                after_drop = 1
                next
            }
            dropped && /\/\* (BEGIN|END) SOLUTION \*\// { fail("a solution region inside SOLUTION ONLY") }
            dropped { next }
            after_drop && /^$/ { after_drop = 0; next }
            { after_drop = 0 }
            /\/\* BEGIN SOLUTION \*\// {
                if (inside) fail("BEGIN SOLUTION inside another")
                inside = 1
                match($0, /^[ \t]*/)
                indent = substr($0, 1, RLENGTH)
                print indent "/* TODO: your code here (see the lab README). */"
                print indent "NOT_IMPLEMENTED();"
                next
            }
            /\/\* END SOLUTION \*\// {
                if (!inside) fail("END SOLUTION without BEGIN")
                inside = 0
                next
            }
            !inside { print }
            END {
                if (failed) exit 1
                if (inside) { printf "%s: BEGIN SOLUTION never ended\n", path > "/dev/stderr"; exit 1 }
                if (dropped) { printf "%s: SOLUTION ONLY BEGIN never ended\n", path > "/dev/stderr"; exit 1 }
            }
        ' "$file" > "$out.tmp"
        mv "$out.tmp" "$out"
        count=$((count + 1))
    done
done
echo "make_skeletons: wrote $count file(s) under $dst/"
