#!/usr/bin/env bash
# help: lab 07: attention pairs and busy time per rank (ring, zigzag, striped, Ulysses), CP bytes per step vs the formula, memory per rank and the longest sequence within a budget vs the planner, the ring's overlap timeline
# bench/cp.sh: lab 07's figures. `make bench-cp` builds, then runs this.
# train_cp with one thread a rank, on up to 4 ranks (oversubscribed on a
# 2-core machine: the seconds below are wall time of ranks that share
# cores; the counts and bytes are exact).
#
#   balance   cp 4, ring (contiguous chunks), zigzag, striped and Ulysses
#             at seq BENCH_SEQ: per rank the (query, key) pairs the block
#             kernels computed (cp_balance.csv) against the placement's
#             formula, exactly; block compute seconds over the seconds in
#             attention (the rest is waiting on the ring) -> balance.png
#   traffic   cp 2 and 4, ring, zigzag and Ulysses: the CP group's payload
#             per step and rank (comm.csv of a 3-step run minus a 2-step
#             run's: one step, evaluation excluded) against memplan's
#             formula, and the bytes leaving the rank (a ring send: all of
#             it; an all-to-all: (cp-1)/cp)
#   memory    cp 1, 2, 4 (ring, Ulysses) at seq BENCH_SEQ: activations,
#             comm and workspace per rank (memory.csv, every rank) against
#             memplan, and the attention terms in T^2 each keeps
#             -> memory.png; then the longest sequence within
#             BENCH_BUDGET_MIB per rank (memplan --fit) at cp 1, 2, 4,
#             checked by running there and one length further
#   overlap   one training step of cp 4 ring from trace.csv: per rank the
#             attention blocks, sends and receives on the cp group
#             -> timeline-step.png, and its first block's forward ring
#             -> timeline-ring.png (tools/plot_cp_timeline.sh)
# Tables are printed; balance.csv, traffic.csv, memory.csv and fit.csv keep
# the numbers. Exit status 1 when a count, a byte total or a peak differs
# from its formula; timings are printed, never checked.
#
#   BENCH_STEPS       steps of the balance runs (default 4, at least 3)
#   BENCH_CONFIG      tiny | small (default tiny)
#   BENCH_SEQ         sequence (and context) of balance and memory (default 256)
#   BENCH_BUDGET_MIB  per-rank budget of the longest-sequence search (default 16)
#   BENCH_FIT_CTX     context of that search's model, its longest sequence (default 1024)
#   BENCH_TIMEOUT     seconds allowed to each run (default 300)
#   BENCH_OUT         output directory (default runs/07_context_parallel-bench)
#   BENCH_COPY        labs or solutions: whose train_cp (bench/common.sh)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
BENCH_NAME=bench-cp
SKIP=1
source bench/common.sh

STEPS=${BENCH_STEPS:-4}
LIMIT=${BENCH_TIMEOUT:-300}
CONFIG=${BENCH_CONFIG:-tiny}
SEQ=${BENCH_SEQ:-256}
BUDGET=${BENCH_BUDGET_MIB:-16}
FIT_CTX=${BENCH_FIT_CTX:-1024}
FIT_BATCH=2
CP=$(bench_program 07_context_parallel train_cp)
MEMPLAN=build/bin/memplan
DATA=build/data/synth.tok
OUT=${BENCH_OUT:-runs/07_context_parallel-bench}

check_steps "$STEPS" 3
check_timeout "$LIMIT"
[[ "$CONFIG" =~ ^(tiny|small)$ ]] || die "BENCH_CONFIG must be tiny or small, got '$CONFIG'"
[[ "$SEQ" =~ ^[1-9][0-9]*$ ]] && [ $((SEQ % 8)) -eq 0 ] \
    || die "BENCH_SEQ must be a positive multiple of 8 (zigzag on 4 ranks), got '$SEQ'"
[[ "$BUDGET" =~ ^[0-9]+([.][0-9]+)?$ ]] || die "BENCH_BUDGET_MIB must be a number of MiB, got '$BUDGET'"
[[ "$FIT_CTX" =~ ^[1-9][0-9]*$ ]] || die "BENCH_FIT_CTX must be a positive integer, got '$FIT_CTX'"
[ -x "$CP" ] || die "$CP is missing: run 'make bench-cp'"
[ -x "$MEMPLAN" ] || die "$MEMPLAN is missing: run 'make bench-cp'"
[ -f "$DATA" ] || die "$DATA is missing: run 'make data' (or 'make bench-cp')"
command -v gnuplot > /dev/null || die "gnuplot not installed (apt-get install gnuplot-nox)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_NUM_THREADS=1

COMMON=(--config "$CONFIG" --threads 1 --eval-every 0 --eval-batches 1)
mkdir -p "$OUT"
different=0

# model_value DIR KEY: an integer of DIR/run.json ("n_layer": 4)
model_value() { sed -n "s/.*\"$2\": \([0-9]*\).*/\1/p" "$1/run.json" | head -n 1; }

# ---- 1. balance --------------------------------------------------------------
BAL=$OUT/balance.csv
echo "algo,rank,block_pairs,predicted_pairs,equal,block_s,attention_s,busy" > "$BAL"
for a in ring zigzag striped ulysses; do
    dir=$OUT/balance-$a
    echo "bench-cp: balance, cp 4, $a, seq $SEQ, $STEPS steps"
    run_ranks 4 "$dir" "$CP" --cp 4 --cp-algo "$a" --ctx "$SEQ" --seq "$SEQ" --steps "$STEPS" "${COMMON[@]}"
    L=$(model_value "$dir" n_layer)
    NH=$(model_value "$dir" n_head)
    B=$(model_value "$dir" batch)
    # Predicted pairs per rank over the run: (query, key) pairs per head,
    # row, block and pass for cp_rank r, times B NH L and the passes: STEPS
    # backward, STEPS + 1 forward (the held-out batch at the last step).
    # With P ranks, Tg = SEQ, c = Tg / P positions a rank:
    #   ring     chunk r: r whole chunks before it and its own triangle,
    #            r c^2 + c (c + 1) / 2 = (r + 1/2) c^2 + c / 2
    #   zigzag   chunks r and 2P-1-r of h = c / 2: r + (2P-1-r) = 2P-1 whole
    #            chunks and two triangles, (2P-1) h^2 + h (h + 1), every rank
    #   striped  positions r, r+P, ...: c (c+1)/2 from each of the r + 1
    #            ranks at or before r, c (c-1)/2 from the P-1-r after it
    #   ulysses  no block kernels (lab 00's attention on whole sequences)
    awk -F, -v a="$a" -v P=4 -v Tg="$SEQ" -v L="$L" -v NH="$NH" -v B="$B" -v steps="$STEPS" '
        NR == 1 { next }
        {
            r = $2; c = Tg / P; h = c / 2
            if (a == "ring") per = r * c * c + c * (c + 1) / 2
            else if (a == "zigzag") per = (2 * P - 1) * h * h + h * (h + 1)
            else if (a == "striped") per = (r + 1) * c * (c + 1) / 2 + (P - 1 - r) * c * (c - 1) / 2
            else per = 0
            pred = per * B * NH * L * (2 * steps + 1)
            busy = a == "ulysses" ? "-" : sprintf("%.3f", $5 / $6)
            printf "%s,%d,%s,%.0f,%s,%s,%s,%s\n", a, r, $4, pred, ($4 == sprintf("%.0f", pred) ? "yes" : "no"), $5, $6, busy
        }' "$dir/cp_balance.csv" | sort -t, -k2,2n >> "$BAL"
done
grep -q ',no,' "$BAL" && different=1

# ---- 2. traffic --------------------------------------------------------------
TRAF=$OUT/traffic.csv
echo "cp,algo,op,calls_per_step,predicted_calls,bytes_per_step,predicted_bytes,equal,recv_bytes_per_step,ranks_equal,leaving_per_step,predicted_leaving" > "$TRAF"
for P in 2 4; do
    for a in ring zigzag ulysses; do
        for s in 2 3; do
            echo "bench-cp: traffic, cp $P, $a, $s steps"
            run_ranks "$P" "$OUT/traffic-cp$P-$a-s$s" "$CP" --cp "$P" --cp-algo "$a" --steps "$s" "${COMMON[@]}"
        done
        grep -q DIFFERENT "$OUT/traffic-cp$P-$a-s3.log" && different=1
        plan=$("$MEMPLAN" --config "$CONFIG" --cp "$P" --cp-algo "$a")
        op=send
        [ "$a" = ulysses ] && op=alltoall
        name="ring sends"
        [ "$a" = ulysses ] && name="all-to-alls"
        # "  ring sends  forward 12 calls 786432 bytes, backward 28 calls 1835008 bytes"
        read -r pcalls pbytes < <(awk -v n="$name" 'index($0, "  " n " ") == 1 {
                for (i = 1; i <= NF; i++) { if ($i == "calls") c += $(i - 1); if ($i == "bytes,"  || $i == "bytes") b += $(i - 1) }
                print c, b }' <<< "$plan")
        pleave=$(sed -n 's/.*leaving each rank per step.*: \([0-9]*\) bytes/\1/p' <<< "$plan")
        [ -n "${pbytes:-}" ] && [ -n "$pleave" ] || die "no CP traffic in memplan's plan for cp $P $a"
        # one step = the 3-step run's totals less the 2-step run's, per rank
        awk -F, -v P="$P" -v a="$a" -v op="$op" -v pc="$pcalls" -v pb="$pbytes" -v pl="$pleave" '
            FNR == 1 { f++; next }
            $2 != "cp" { next }
            { k = $1 SUBSEP $3; if (f == 1) { c[k] -= $4; b[k] -= $5 } else { c[k] += $4; b[k] += $5 } }
            END {
                same = "yes"
                for (r = 0; r < P; r++) {
                    leave = b[r, "send"] + (P - 1) / P * b[r, "alltoall"] + 2 * (P - 1) / P * b[r, "allreduce"]
                    if (r == 0) { c0 = c[r, op]; b0 = b[r, op]; v0 = b[r, "recv"]; l0 = leave }
                    else if (c[r, op] != c0 || b[r, op] != b0 || b[r, "recv"] != v0) same = "no"
                }
                printf "%d,%s,%s,%d,%d,%d,%d,%s,%d,%s,%.0f,%d\n", P, a, op, c0, pc, b0, pb,
                    (c0 == pc && b0 == pb && sprintf("%.0f", l0) == pl ? "yes" : "no"), v0, same, l0, pl
            }' "$OUT/traffic-cp$P-$a-s2/comm.csv" "$OUT/traffic-cp$P-$a-s3/comm.csv" >> "$TRAF"
    done
done
awk -F, 'NR > 1 && ($8 != "yes" || $10 != "yes")' "$TRAF" | grep -q . && different=1

# ---- 3. memory ----------------------------------------------------------------
MEM=$OUT/memory.csv
echo "cp,algo,activations,activations_plan,comm,comm_plan,workspace,workspace_plan,total,total_plan,square_activations,square_workspace,equal" > "$MEM"
for layout in "1 ring" "2 ring" "2 ulysses" "4 ring" "4 ulysses"; do
    read -r P a <<< "$layout"
    dir=$OUT/memory-cp$P-$a
    if [ "$P" -eq 4 ]; then
        dir=$OUT/balance-$a  # the same run: cp 4 at seq $SEQ
    else
        echo "bench-cp: memory, cp $P, $a, seq $SEQ"
        run_ranks "$P" "$dir" "$CP" --cp "$P" --cp-algo "$a" --ctx "$SEQ" --seq "$SEQ" --steps 2 "${COMMON[@]}"
    fi
    plan=$("$MEMPLAN" --config "$CONFIG" --ctx "$SEQ" --seq "$SEQ" --cp "$P" --cp-algo "$a")
    "$MEMPLAN" --config "$CONFIG" --ctx "$SEQ" --seq "$SEQ" --cp "$P" --cp-algo "$a" --csv > "$dir.plan.csv"
    # "attention terms in the square of the sequence, per rank: activations N bytes (...), workspace M bytes"
    read -r sq_act sq_work < <(sed -n 's/^attention terms.*activations \([0-9]*\) bytes.*workspace \([0-9]*\) bytes$/\1 \2/p' <<< "$plan")
    [ -n "${sq_work:-}" ] || die "no T^2 terms in memplan's plan for cp $P $a"
    # the peaks of rank 0 and whether every rank equals the plan
    awk -F, -v P="$P" -v a="$a" -v sa="$sq_act" -v sw="$sq_work" '
        FNR == 1 { f++; next }
        f == 1 { plan[$2] = $4; ptot += $4; next }
        { if ($4 != plan[$2]) eq = "no"; if ($1 == 0) { m[$2] = $4; tot += $4 } }
        END {
            printf "%d,%s,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%s\n", P, a, m["activations"], plan["activations"],
                m["comm"], plan["comm"], m["workspace"], plan["workspace"], tot, ptot, sa, sw, (eq == "" ? "yes" : "no")
        }' "$dir.plan.csv" "$dir/memory.csv" >> "$MEM"
done
awk -F, 'NR > 1 && $13 != "yes"' "$MEM" | grep -q . && different=1

# the longest sequence within the budget: the planner's, then a run there
# and one at the next length it tried (memory.csv's categories summed, the
# largest rank)
FIT=$OUT/fit.csv
echo "cp,algo,budget_bytes,seq,planned_bytes,measured_bytes,next_seq,next_planned_bytes,next_measured_bytes,confirmed" > "$FIT"
for layout in "1 ring" "2 ring" "2 ulysses" "4 ring" "4 ulysses"; do
    read -r P a <<< "$layout"
    IFS=, read -r _ _ budget seq peak next npeak < <("$MEMPLAN" --config "$CONFIG" --ctx "$FIT_CTX" \
        --batch "$FIT_BATCH" --cp "$P" --cp-algo "$a" --fit "$BUDGET" --csv | tail -n 1)
    measured=() ok=yes
    for t in "$seq" "$next"; do
        if [ "$t" -eq 0 ]; then measured+=(0); continue; fi  # none fits, or the context fits
        dir=$OUT/fit-cp$P-$a-seq$t
        echo "bench-cp: fit, cp $P, $a, seq $t (ctx $FIT_CTX, batch $FIT_BATCH)"
        run_ranks "$P" "$dir" "$CP" --cp "$P" --cp-algo "$a" --ctx "$FIT_CTX" --seq "$t" \
            --batch "$FIT_BATCH" --steps 1 "${COMMON[@]}"
        measured+=("$(awk -F, 'NR > 1 { t[$1] += $4 } END { for (r in t) if (t[r] > m) m = t[r]; print m }' "$dir/memory.csv")")
    done
    # confirmed: the run at seq fits, the one at the next length does not
    [ "$seq" -gt 0 ] && [ "${measured[0]}" -gt "$budget" ] && ok=no
    [ "$next" -gt 0 ] && [ "${measured[1]}" -le "$budget" ] && ok=no
    [ "${measured[0]}" = "$peak" ] && [ "${measured[1]}" = "$npeak" ] || ok=no
    [ "$ok" = yes ] || different=1
    echo "$P,$a,$budget,$seq,$peak,${measured[0]},$next,$npeak,${measured[1]},$ok" >> "$FIT"
done

# ---- 4. overlap ---------------------------------------------------------------
RING=$OUT/balance-ring
tools/plot_cp_timeline.sh "$RING" "$OUT/timeline-step.png" \
    "train_cp cp 4, ring (contiguous), $CONFIG, seq $SEQ, one thread per rank on oversubscribed cores: step 1"
# the first block's forward ring of step 1: from its forward pass's start to
# the end of the last rank's cp-th block (the last rank computes one per
# ring step)
read -r z0 z1 < <(awk -F, 'NR == 1 { next }
    $2 == "compute" && $3 == "optimizer" && !($1 in opt) { opt[$1] = $6 }
    { ev[NR] = $0 }
    END {
        for (r in opt) if (s == "" || opt[r] < s) s = opt[r]
        for (i in ev) {
            split(ev[i], f, ",")
            if (f[3] == "forward" && f[5] + 0 > s && (t0 == "" || f[5] + 0 < t0)) t0 = f[5] + 0
            if (f[3] == "attention block forward" && f[1] + 1 > P) P = f[1] + 1
        }
        n = 0
        for (i in ev) { split(ev[i], f, ","); if (f[1] == P - 1 && f[3] == "attention block forward" && f[5] + 0 >= t0) e[++n] = f[6] + 0 }
        # the P-th of them in time
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (e[j] < e[i]) { x = e[i]; e[i] = e[j]; e[j] = x }
        pad = (e[P] - t0) * 0.03
        printf "%.9f %.9f\n", t0 - pad, e[P] + pad
    }' "$RING/trace.csv")
tools/plot_cp_timeline.sh "$RING" "$OUT/timeline-ring.png" \
    "train_cp cp 4, ring, $CONFIG, seq $SEQ: block 0's forward ring in step 1 (each send carries the keys and values the next block needs)" "$z0" "$z1"

# ---- the tables ---------------------------------------------------------------
echo
echo "bench-cp: balance, cp 4 on 4 ranks, $CONFIG, seq $SEQ, $STEPS steps (+1 held-out forward): per rank"
printf "%-8s %4s %12s %12s %6s %9s %11s %6s\n" algo rank pairs predicted equal "block s" "attention s" busy
tail -n +2 "$BAL" | while IFS=, read -r a r p pr eq bs as busy; do
    printf "%-8s %4s %12s %12s %6s %9s %11s %6s\n" "$a" "$r" "$p" "$pr" "$eq" "$bs" "$as" "$busy"
done
c=$((SEQ / 4))
echo "  contiguous chunks of c = Tg/cp = $c: rank r computes r c^2 + c(c+1)/2 = (r + 1/2) c^2 + c/2 pairs per head, row, block and pass"
echo "  (rank 0: $((c * (c + 1) / 2)), rank 3: $((3 * c * c + c * (c + 1) / 2))); summed over the ranks, cp^2 c^2/2 + cp c/2 = Tg(Tg+1)/2 = $((SEQ * (SEQ + 1) / 2)), the causal total"
awk -F, -v c="$c" 'NR > 1 && $1 != "ulysses" { if (!($1 in lo) || $3 < lo[$1]) lo[$1] = $3; if ($3 > hi[$1]) hi[$1] = $3; if (!($1 in plo) || $4 < plo[$1]) plo[$1] = $4; if ($4 > phi[$1]) phi[$1] = $4 }
    END { for (a in lo) printf "  %-8s max/min pairs counted %.3f, predicted %.3f%s\n", a, hi[a] / lo[a], phi[a] / plo[a],
          (a == "ring" ? sprintf(" (((2cp-1)c + 1)/(c + 1) = %.3f, toward 2 cp - 1 = 7)", (7 * c + 1) / (c + 1)) : "") }' "$BAL" | sort
echo "  busy = block s / attention s: the rest waits on the ring (and, 4 ranks on 2 cores, for a core)"
steps_ms=""
for a in ring zigzag striped ulysses; do steps_ms+="${steps_ms:+, }$a $(median_step_ms "$OUT/balance-$a")"; done
echo "  median step ms (steps 1 on; timings, not checked): $steps_ms"
echo "  ulysses: lab 00's attention on whole sequences of its n_head/cp heads, no blocks to count"
echo
echo "bench-cp: CP traffic per step and rank ($CONFIG, default seq; comm.csv of 3 steps minus 2), vs memplan"
printf "%3s %-8s %-9s %6s %6s %12s %12s %6s %12s %6s %12s %12s\n" cp algo op calls pred bytes predicted equal "recv bytes" "ranks=" leaving "pred leaving"
tail -n +2 "$TRAF" | while IFS=, read -r P a op c pc b pb eq rv same l pl; do
    printf "%3s %-8s %-9s %6s %6s %12s %12s %6s %12s %6s %12s %12s\n" "$P" "$a" "$op" "$c" "$pc" "$b" "$pb" "$eq" "$rv" "$same" "$l" "$pl"
done
echo "  leaving: a ring send's bytes all leave; an all-to-all keeps 1/cp of its buffer: (cp-1)/cp leaves (the loss all-reduce adds 2 (cp-1)/cp x 4 bytes)"
echo
echo "bench-cp: memory per rank (bytes; measured = rank 0, every rank compared), $CONFIG, seq $SEQ, vs memplan"
printf "%3s %-8s %11s %11s %9s %9s %10s %10s %6s %12s %12s\n" cp algo activations planned comm planned workspace planned equal "T^2 in acts" "T^2 in work"
tail -n +2 "$MEM" | while IFS=, read -r P a ac acp co cop wo wop t tp sa sw eq; do
    [ "$P" -eq 1 ] && a="(none)"
    printf "%3s %-8s %11s %11s %9s %9s %10s %10s %6s %12s %12s\n" "$P" "$a" "$ac" "$acp" "$co" "$cop" "$wo" "$wop" "$eq" "$sa" "$sw"
done
echo "  T^2 terms: cp 1 keeps lab 00's probabilities, B NH T^2 per block (and once more as their gradient in the workspace);"
echo "  the ring none (its lse, B NH T, is linear); Ulysses B NH/cp Tg^2 per block: whole sequences of its heads"
echo
echo "bench-cp: the longest sequence within $BUDGET MiB per rank ($CONFIG, ctx $FIT_CTX, batch $FIT_BATCH): memplan --fit, then train_cp there and one length further"
printf "%3s %-8s %6s %13s %13s %6s %13s %13s %9s\n" cp algo seq planned measured next planned measured confirmed
tail -n +2 "$FIT" | while IFS=, read -r P a bud s pk m n npk nm ok; do
    [ "$P" -eq 1 ] && a="(none)"
    printf "%3s %-8s %6s %13s %13s %6s %13s %13s %9s\n" "$P" "$a" "$s" "$pk" "$m" "$n" "$npk" "$nm" "$ok"
done
echo "  (a next of 0: the context itself fits; --ctx sets it. Budget $(awk -v b="$BUDGET" 'BEGIN { printf "%.0f", b * 1048576 }') bytes)"

# ---- the charts -------------------------------------------------------------------
# balance.png: per rank (groups), each ring placement (bars): the pairs and
# the busy fraction
tools/plot_cp_balance.sh "$OUT/balance.png" \
    "Causal attention over cp 4 ranks ($CONFIG, seq $SEQ, $STEPS steps; 4 ranks on 2 cores): the contiguous split leaves rank 0 idle" \
    "$OUT/balance-ring" "$OUT/balance-zigzag" "$OUT/balance-striped"

# memory.png: per layout, activations / comm / workspace measured (MiB) and
# the T^2 part of the activations
gnuplot <<EOF
set terminal pngcairo size 1000,560 font "sans,11"
set output "$OUT/memory.png"
set datafile separator ","
set title "Per-rank memory at seq $SEQ ($CONFIG): measured (memory.csv) = planned; hatched: the activations' terms in T^2"
set ylabel "peak bytes per rank (MiB)"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set key top right
set grid ytics
set yrange [0:*]
plot "< tail -n +2 $MEM" using (\$3/1048576):xtic(sprintf("cp %s %s", strcol(1), (\$1 == 1 ? "" : strcol(2)))) title "activations" lc rgb "#1f77b4", \
     "" using (\$11/1048576) title "activations: T^2 terms" lc rgb "#1f77b4" fs pattern 4, \
     "" using (\$5/1048576) title "comm" lc rgb "#ff7f0e", \
     "" using (\$7/1048576) title "workspace" lc rgb "#2ca02c"
EOF
echo
echo "bench-cp: wrote $OUT/{balance,traffic,memory,fit}.csv, $OUT/{balance,memory,timeline-step,timeline-ring}.png"
[ "$different" -eq 0 ] || die "a count, a byte total or a peak differs from its formula (see the tables)"
