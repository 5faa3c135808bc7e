#!/usr/bin/env bash
# help: materialized vs fused attention: kernel time (one GPT-2 layer, T 128 to 4096) and activation memory against T at cp 1, 2, 4, with a chart
# bench/attention.sh: what --attention fused buys (issue 41). `make
# bench-attention` builds, then runs this.
#
#   kernels  build/bin/bench_attention: the forward and backward passes of
#            one GPT-2 layer's attention (12 heads of 64, one sequence) at
#            each T of BENCH_SEQS, materialized and fused, the median of
#            BENCH_REPS calls, all the cores; and the bytes each keeps for
#            its backward pass -> kernels.csv
#   memory   a trainer's activations per rank (memory.csv, against memplan's
#            prediction for the layout) at each T of BENCH_TRAIN_SEQS:
#            train_gpt (cp 1) and train_cp at cp 2 and 4 (Ulysses; the ring
#            keeps only the lse whatever --attention says), tiny, one
#            sequence, 2 steps -> memory.csv
#   chart    time and memory against T, both log scales -> attention.png
# Exit status 1 when a run's memory differs from the planner's, or when the
# fused activations do not grow linearly (doubling T must double them
# exactly: every term is per token). Timings are printed, never checked.
#
#   BENCH_SEQS        the kernels' T (default "128 256 512 1024 2048 4096")
#   BENCH_REPS        calls per median (default 3)
#   BENCH_TRAIN_SEQS  the trainers' T (default "128 256 512 1024 2048")
#   BENCH_TIMEOUT     seconds allowed to each run (default 600)
#   BENCH_OUT         output directory (default runs/attention-bench)
#   BENCH_COPY        labs or solutions: whose trainers (bench/common.sh)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
BENCH_NAME=bench-attention
source bench/common.sh

SEQS=${BENCH_SEQS:-128 256 512 1024 2048 4096}
REPS=${BENCH_REPS:-3}
TRAIN_SEQS=${BENCH_TRAIN_SEQS:-128 256 512 1024 2048}
LIMIT=${BENCH_TIMEOUT:-600}
OUT=${BENCH_OUT:-runs/attention-bench}
KERNELS=build/bin/bench_attention
MEMPLAN=build/bin/memplan
DATA=build/data/synth.tok

check_timeout "$LIMIT"
[[ "$REPS" =~ ^[1-9][0-9]{0,3}$ ]] || die "BENCH_REPS must be a positive integer, got '$REPS'"
for t in $SEQS $TRAIN_SEQS; do
    [[ "$t" =~ ^[1-9][0-9]*$ ]] && [ $((t % 8)) -eq 0 ] && [ "$t" -le 16384 ] \
        || die "BENCH_SEQS and BENCH_TRAIN_SEQS take multiples of 8 up to 16384, got '$t'"
done
GPT=$(bench_program 00_single_device train_gpt)
CP=$(bench_program 07_context_parallel train_cp)
for p in "$KERNELS" "$MEMPLAN" "$GPT" "$CP"; do [ -x "$p" ] || die "$p is missing: run 'make bench-attention'"; done
[ -f "$DATA" ] || die "$DATA is missing: run 'make data' (or 'make bench-attention')"
command -v gnuplot > /dev/null || die "gnuplot not installed (apt-get install gnuplot-nox)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$OUT"
different=0

# ---- 1. kernels ----------------------------------------------------------------
KCSV=$OUT/kernels.csv
echo "bench-attention: kernels, one GPT-2 layer (12 heads of 64), T = $SEQS, median of $REPS"
"$KERNELS" --seqs "$(tr ' ' , <<< "$SEQS")" --reps "$REPS" > "$KCSV" \
    || die "$KERNELS failed"
grep -q '^fused,' "$KCSV" || die "$KERNELS ran no fused attention: lab 05's extension is not in this build"
awk -F, 'NR > 1 { if (!($2 in t)) ts[++n] = $2; t[$2] = 1; ms[$1, $2] = $5; kept[$1, $2] = $6 }
    END {
        printf "  %6s  %16s %10s %7s  %16s %10s\n", "T", "materialized ms", "fused ms", "ratio", "materialized MiB", "fused KiB"
        for (i = 1; i <= n; i++) { T = ts[i]
            printf "  %6d  %16.2f %10.2f %7.2f  %16.1f %10.1f\n", T, ms["materialized", T], ms["fused", T],
                ms["fused", T] / ms["materialized", T], kept["materialized", T] / 1048576, kept["fused", T] / 1024 }
        print "  (ms: forward + backward; ratio: fused over materialized; MiB/KiB: what the backward pass keeps)"
    }' "$KCSV"

# ---- 2. memory -------------------------------------------------------------------
MCSV=$OUT/memory.csv
echo "layout,attention,T,activations,planned" > "$MCSV"
max=0
for t in $TRAIN_SEQS; do [ "$t" -gt "$max" ] && max=$t; done
COMMON=(--config tiny --ctx "$max" --batch 1 --steps 2 --eval-every 0 --eval-batches 1 --threads 1)
for layout in "1 -" "2 ulysses" "4 ulysses"; do
    read -r P algo <<< "$layout"
    for a in materialized fused; do
        for t in $TRAIN_SEQS; do
            dir=$OUT/memory-cp$P-$a-T$t
            echo "bench-attention: memory, cp $P${algo/-/}, $a, T $t"
            if [ "$P" -eq 1 ]; then
                run_ranks 1 "$dir" "$GPT" "${COMMON[@]}" --seq "$t" --attention "$a"
            else
                run_ranks "$P" "$dir" "$CP" "${COMMON[@]}" --seq "$t" --attention "$a" --cp "$P" \
                    --cp-algo "$algo"
            fi
            # the planner's figure for this layout (memplan --cp 1: one device's)
            planned=$("$MEMPLAN" --config tiny --ctx "$max" --batch 1 --seq "$t" --attention "$a" \
                --cp "$P" --cp-algo "$([ "$P" -gt 1 ] && echo "$algo" || echo ring)" --csv |
                awk -F, '$2 == "activations" { print $4 }')
            grep -q DIFFERENT "$dir.log" && different=1
            echo "cp$P,$a,$t,$(peak "$dir" activations),$planned" >> "$MCSV"
        done
    done
done
awk -F, 'NR > 1 && $4 != $5 { bad = 1 } END { exit !bad }' "$MCSV" && different=1
# fused: every doubling of T doubles the activations exactly
linear=yes
awk -F, 'NR > 1 && $2 == "fused" { a[$1, $3] = $4; l[$1] = 1; t[$3] = 1 }
    END { for (L in l) for (T in t) if ((L, 2 * T) in a && a[L, 2 * T] != 2 * a[L, T]) bad = 1; exit !bad }' "$MCSV" \
    && linear=no && different=1
echo
awk -F, 'NR > 1 { v[$1, $2, $3] = $4
        if (!($1 in L)) ls[++nl] = $1; L[$1] = 1
        if (!($3 in T)) ts[++nt] = $3; T[$3] = 1 }
    END {
        printf "  activations per rank (MiB), tiny, one sequence:\n  %6s", "T"
        for (j = 1; j <= nl; j++) printf "  %10s %10s", ls[j] " mat.", ls[j] " fused"
        printf "\n"
        for (i = 1; i <= nt; i++) { printf "  %6d", ts[i]
            for (j = 1; j <= nl; j++)
                printf "  %10.2f %10.2f", v[ls[j], "materialized", ts[i]] / 1048576, v[ls[j], "fused", ts[i]] / 1048576
            printf "\n" }
    }' "$MCSV"
echo "  fused activations linear in T (each doubling of T doubles them): $linear"

# ---- 3. chart --------------------------------------------------------------------
gnuplot <<EOF
set terminal pngcairo size 1200,520 font "sans,11"
set output "$OUT/attention.png"
set datafile separator ","
set multiplot layout 1,2 title "Materialized vs fused attention on this CPU (bench/attention.sh)"
set logscale xy 2
set grid
set key top left
set xlabel "sequence length T"
set title "one GPT-2 layer's attention, forward + backward"
set ylabel "milliseconds (median)"
plot "< grep ^materialized, $KCSV" using 2:5 with linespoints lw 2 title "materialized", \
     "< grep ^fused, $KCSV" using 2:5 with linespoints lw 2 title "fused"
set title "activations per rank, tiny, one sequence (memory.csv)"
set ylabel "bytes"
set logscale y 10
layouts = "cp1 cp2 cp4"
plot for [i=1:3] "< grep ^".word(layouts, i).",materialized, $MCSV" using 3:4 with linespoints lw 2 lc i \
         title word(layouts, i)." materialized", \
     for [i=1:3] "< grep ^".word(layouts, i).",fused, $MCSV" using 3:4 with linespoints lw 2 dt 2 lc i \
         title word(layouts, i)." fused"
unset multiplot
EOF
echo
echo "bench-attention: wrote $OUT/{kernels,memory}.csv and $OUT/attention.png"
[ "$different" -eq 0 ] || die "a run's memory differs from the planner's, or the fused activations are not linear in T"
