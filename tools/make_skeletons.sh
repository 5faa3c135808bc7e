#!/usr/bin/env bash
# make_skeletons.sh SRC DST: write the student copy of every lab.
#
# For each SRC/NN_name/*.{c,h}, the lines from one containing
# "/* BEGIN SOLUTION */" to the next containing "/* END SOLUTION */" are
# replaced by a TODO comment and NOT_IMPLEMENTED() (check.h), indented like
# the BEGIN line; everything else is copied unchanged. Unbalanced markers are
# an error. Only the source files are written: a lab's README lives in labs/.
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
            /\/\* BEGIN SOLUTION \*\// {
                if (inside) { printf "%s:%d: BEGIN SOLUTION inside another\n", path, NR > "/dev/stderr"; exit 1 }
                inside = 1
                match($0, /^[ \t]*/)
                indent = substr($0, 1, RLENGTH)
                print indent "/* TODO: your code here (see the lab README). */"
                print indent "NOT_IMPLEMENTED();"
                next
            }
            /\/\* END SOLUTION \*\// {
                if (!inside) { printf "%s:%d: END SOLUTION without BEGIN\n", path, NR > "/dev/stderr"; exit 1 }
                inside = 0
                next
            }
            !inside { print }
            END { if (inside) { printf "%s: BEGIN SOLUTION never ended\n", path > "/dev/stderr"; exit 1 } }
        ' "$file" > "$out.tmp"
        mv "$out.tmp" "$out"
        count=$((count + 1))
    done
done
echo "make_skeletons: wrote $count file(s) under $dst/"
