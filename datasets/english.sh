#!/usr/bin/env bash
# english.sh: build a small real-English corpus for demos.
#
# The text comes from Debian's fortunes-min package as installed on this
# machine; the project ships no copy of it. The fortune files separate their
# entries with lines holding a single "%", and two entries use the old
# terminal trick of overstriking (char, backspace, char) for underline and
# accents: the separators are dropped, and so is every character followed by
# a backspace (keeping the one struck over it), so the corpus is plain text.
#
# usage: datasets/english.sh BUILD_BIN_DIR OUT_DIR
#   writes OUT_DIR/english.txt and OUT_DIR/english.tok (byte-level, vocab 256)
set -euo pipefail

if [ "$#" -ne 2 ]; then
    echo "usage: $0 BUILD_BIN_DIR OUT_DIR" >&2
    exit 2
fi
bin_dir=$1
out_dir=$2
src_dir=/usr/share/games/fortunes
sources=("$src_dir/fortunes" "$src_dir/literature" "$src_dir/riddles")

for f in "${sources[@]}"; do
    if [ ! -r "$f" ]; then
        echo "english.sh: $f not found; install the text with:" >&2
        echo "    sudo apt-get install fortunes-min" >&2
        exit 1
    fi
done
if [ ! -x "$bin_dir/text_to_tokens" ]; then
    echo "english.sh: $bin_dir/text_to_tokens not found; build it first (make)" >&2
    exit 1
fi

mkdir -p "$out_dir"
txt=$out_dir/english.txt
tok=$out_dir/english.tok

# Written under a temporary name and renamed, like the token files, so an
# interrupted run never leaves a partial english.txt behind.
cat "${sources[@]}" | LC_ALL=C sed -e '/^%$/d' -e ':bs' -e 's/[^\x08]\x08//' -e 't bs' > "$txt.tmp.$$"
mv "$txt.tmp.$$" "$txt"

report=$("$bin_dir/text_to_tokens" "$txt" "$tok")
tokens=${report#tokens=}
echo "tokens=$tokens path=$tok"
