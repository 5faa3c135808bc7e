#!/usr/bin/env bash
# plot_cp_balance.sh PNG TITLE DIR...: how evenly causal attention's work
# falls on the ranks of a CP group, from each DIR/cp_balance.csv (train_cp
# runs of the same size and steps, one placement each: ring, zigzag,
# striped). Two panels of bars grouped by rank, a bar per run:
#   pairs  the (query, key) pairs the rank's block kernels computed, all
#          passes: the contiguous split's rank r does (r + 1/2) c^2 + c/2
#          per head, row, block and pass, zigzag and striped about cp c^2/2;
#   busy   block compute seconds over the seconds in attention: the rest
#          is the rank waiting for the ring's slowest member.
# A run without block work (Ulysses: lab 00's attention on whole
# sequences) is left out, saying so.
set -euo pipefail

die() {
    echo "plot_cp_balance: error: $*" >&2
    exit 2
}

[ $# -ge 3 ] || die "usage: plot_cp_balance.sh PNG TITLE DIR...  (each DIR holding train_cp's cp_balance.csv)"
png=$1
title=${2//\"/\'}
shift 2
command -v gnuplot > /dev/null || die "gnuplot not installed (apt-get install gnuplot-nox)"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# one column per run: "rank pairs_1 ... pairs_k busy_1 ... busy_k"
labels=()
ranks=""
for dir in "$@"; do
    csv=$dir/cp_balance.csv
    [ -s "$csv" ] || die "$csv not found or empty (train_cp writes it at the end of a run)"
    read -r algo n total < <(awk -F, -v csv="$csv" '
        function fail(msg) { print "plot_cp_balance: error: " csv ": " msg > "/dev/stderr"; failed = 1; exit 2 }
        NR == 1 { sub(/\r$/, ""); if ($0 != "rank,cp_rank,algo,block_pairs,block_seconds,attention_seconds")
                      fail("line 1 is not the header rank,cp_rank,algo,block_pairs,block_seconds,attention_seconds"); next }
        {
            sub(/\r$/, "")
            if (NF != 6 || $2 !~ /^[0-9]+$/ || $4 !~ /^[0-9]+$/ || $6 + 0 < $5 + 0 || $5 + 0 < 0)
                fail("line " NR " is not rank,cp_rank,algo,block_pairs,block_seconds,attention_seconds: " substr($0, 1, 80))
            if (algo != "" && $3 != algo) fail("two algorithms in one file")
            algo = $3; n++; total += $4
        }
        END { if (failed) exit 2; if (!n) fail("no ranks after the header"); print algo, n, total }' "$csv") || exit 2
    if [ "$total" = 0 ]; then
        echo "plot_cp_balance: $dir ($algo) computed no attention blocks: left out" >&2
        continue
    fi
    [ -z "$ranks" ] || [ "$ranks" = "$n" ] || die "$csv has $n ranks, an earlier one $ranks"
    ranks=$n
    labels+=("$algo")
    awk -F, 'NR > 1 { printf "%s %.6g %.4f\n", $2, $4 / 1e6, ($6 > 0 ? $5 / $6 : 0) }' "$csv" \
        | sort -n > "$work/run${#labels[@]}"
done
[ ${#labels[@]} -gt 0 ] || die "no run with attention blocks (ring, zigzag or striped)"
k=${#labels[@]}
# join the runs by rank (sorted alike): rank, k pair columns, k busy columns
cut -d' ' -f1 "$work/run1" > "$work/data"
for col in 2 3; do
    for ((i = 1; i <= k; i++)); do
        paste -d' ' "$work/data" <(cut -d' ' -f"$col" "$work/run$i") > "$work/tmp" && mv "$work/tmp" "$work/data"
    done
done

colors=("#d62728" "#1f77b4" "#2ca02c" "#9467bd" "#ff7f0e")
plot_of() {  # plot_of FIRST_COLUMN: the k bars of one panel
    local p="" i
    for ((i = 0; i < k; i++)); do
        local name=${labels[$i]}
        [ "$name" = ring ] && name="ring (contiguous)"
        p+="${p:+, }\"$work/data\" using $(($1 + i))$([ "$i" -eq 0 ] && echo ":xtic(1)") title \"$name\" lc rgb \"${colors[$((i % 5))]}\""
    done
    echo "$p"
}

gnuplot <<EOF
set terminal pngcairo size 1200,520 font "sans,11" noenhanced
set output "$png"
set multiplot layout 1,2 title "$title"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set grid ytics
set key top left
set xlabel "rank (cp rank)"
set yrange [0:*]
set title "(query, key) pairs computed, all passes (millions)"
set ylabel "pairs (millions)"
plot $(plot_of 2)
set title "busy: block compute s / attention s (the rest waits on the ring)"
set ylabel "busy fraction"
set yrange [0:1.15]
plot $(plot_of $((2 + k)))
unset multiplot
EOF
echo "plot_cp_balance: wrote $png"
