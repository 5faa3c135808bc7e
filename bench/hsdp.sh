#!/usr/bin/env bash
# help: lab 03 on a cluster of namespaces (root): bytes leaving each node per step, DDP vs ZeRO-3 vs hybrid sharding vs ZeRO++, on the links
# bench/hsdp.sh: hybrid sharding (lab 03's second extension) on a cluster
# made on this machine (scripts/cluster.sh: network namespaces, shaped
# links; root only). `make bench-hsdp` builds, then runs this.
#
# 2 nodes of 2 ranks. DDP (lab 02, overlapped), ZeRO-3 over all 4 ranks and
# ZeRO-3 over each node's 2 ranks replicated across the nodes
# (--dp-shard 2) each train a 2-step and a 4-step run; the bytes each
# node's link sends (its interface's tx_bytes counter, headers included)
# over the difference of the two, halved, are one step's (the start-up and
# the one evaluation cancel out). Next to them, the ring algorithms'
# formulas for the bytes leaving one node per step, in units of the
# model's 4 Phi bytes (fp32), N = 4 ranks, K = 2 per node, R = 2 replicas:
#   DDP      2 (N-1)/N           the all-reduce ring crosses each node once
#   ZeRO-3   3 (N-1)/N           two all-gathers and a reduce-scatter
#   hybrid   2 (R-1)/R           K rings of Phi/K, one per shard position
#   ZeRO++   5/4 (1+4/256) / 4   ZeRO-3 with qwZ, hpZ and qgZ (lab 03's fourth
#                                extension) over nodes of K: the forward's
#                                int8 gather, a ring crossing each node once,
#                                (N-1)/N; the backward's gathers stay inside
#                                the node; qgZ's int8 all-to-all across the
#                                R nodes, (R-1)/R; int8 bytes with a 4-byte
#                                scale per 256 values, per 4 Phi bytes
# Open MPI picks its own algorithms (its non-blocking all-gather on 4
# ranks is not a ring), so ZeRO-3's measured bytes can differ from the
# ring's; hybrid's cross-node traffic is one all-reduce of 2 ranks, the
# same in any algorithm.
#
#   BENCH_CONFIG   tiny | small (default small)
#   BENCH_LINK_BW  the links' rate (default 1gbit)
#   BENCH_TIMEOUT  seconds allowed to each run (default 300)
#   BENCH_COPY     labs or solutions: whose train_zero (bench/common.sh)
#   BENCH_OUT      output directory (default runs/03_zero-hsdp)
#
# Writes runs/03_zero-hsdp/: one directory per run, nodes.csv
# (layout,node,bytes_per_step,in_4phi,ring_formula_in_4phi) and nodes.png,
# and ends with one line per layout and node.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
BENCH_NAME=bench-hsdp
source bench/common.sh

CONFIG=${BENCH_CONFIG:-small}
RATE=${BENCH_LINK_BW:-1gbit}
LIMIT=${BENCH_TIMEOUT:-300}
OUT=${BENCH_OUT:-runs/03_zero-hsdp}
NAME=dthsdp

[ "$(id -u)" = 0 ] || die "needs root: the cluster is made of network namespaces (scripts/cluster.sh); run it as root, as CI does"
[[ "$CONFIG" =~ ^(tiny|small)$ ]] || die "BENCH_CONFIG must be tiny or small, got '$CONFIG'"
check_timeout "$LIMIT"
ZERO=$(bench_program 03_zero train_zero)
DDP=$(earlier_program 02_ddp train_ddp)
for f in "$ZERO" "$DDP" build/bin/memplan; do [ -x "$f" ] || die "$f is missing: run 'make bench-hsdp'"; done
command -v gnuplot > /dev/null || die "gnuplot not installed (apt-get install gnuplot-nox)"
PHI=$(build/bin/memplan --config "$CONFIG" --csv | awk -F, '$1 == "replicated" && $2 == "params" { print $3 / 4 }')

bash scripts/cluster.sh down --name "$NAME" > /dev/null 2>&1 || true
trap 'bash scripts/cluster.sh down --name "$NAME" > /dev/null 2>&1 || true' EXIT
bash scripts/cluster.sh up --name "$NAME" --nodes 2 --slots 2 --link-bandwidth "$RATE"
rm -rf "$OUT"
mkdir -p "$OUT"

# sent: each node's interface's bytes sent so far, one line
sent() { for n in 0 1; do ip netns exec "$NAME-n$n" cat /sys/class/net/eth0/statistics/tx_bytes; done | paste -sd' '; }

# measure LAYOUT STEPS PROGRAM ARGS...: the nodes' bytes sent by one run
measure() {
    local layout=$1 steps=$2 dir=$OUT/$1-$2 before after
    shift 2
    echo "$BENCH_NAME: $layout, $steps steps"
    before=$(sent)
    timeout --kill-after=10 "$LIMIT" bash scripts/cluster.sh run --name "$NAME" -q -np 4 -- "$@" \
        --config "$CONFIG" --steps "$steps" --eval-every 0 --eval-batches 1 --threads 1 \
        --out "$dir" > "$dir.log" 2>&1 || { tail -n 5 "$dir.log" >&2; die "$layout failed (log: $dir.log)"; }
    after=$(sent)
    echo "$before $after" > "$dir.sent"
}

echo "layout,node,bytes_per_step,in_4phi,ring_formula_in_4phi" > "$OUT/nodes.csv"
for entry in "DDP|1.5|$DDP --ddp overlapped" "ZeRO-3 over 4|2.25|$ZERO --zero 3" \
             "hybrid K=2|1.0|$ZERO --zero 3 --dp-shard 2" \
             "ZeRO++ K=2|0.3174|$ZERO --zero 3 --qwz --hpz 2 --qgz 2"; do
    IFS='|' read -r layout formula cmd <<< "$entry"
    slug=${layout// /-}
    # shellcheck disable=SC2086  # cmd is a program and its flags
    for s in 2 4; do measure "$slug" "$s" $cmd; done
    # per node: (4-step run's bytes - 2-step run's) / 2
    paste -d' ' "$OUT/$slug-2.sent" "$OUT/$slug-4.sent" |
        awk -v l="$layout" -v f="$formula" -v p="$PHI" '{
            for (n = 0; n < 2; n++) {
                b = (($(7 + n) - $(5 + n)) - ($(3 + n) - $(1 + n))) / 2
                printf "%s,%d,%.0f,%.4f,%s\n", l, n, b, b / (4 * p), f } }' >> "$OUT/nodes.csv"
done

# one bar per node of each layout, the ring formula beside them
awk -F, 'NR > 1 { printf "%s node %s,%s,%s\n", $1, $2, $4, $5 }' "$OUT/nodes.csv" > "$OUT/nodes.dat"
gnuplot <<EOF_GP
$(bars_plot "$OUT/nodes.png" 960 "Bytes each node sends to the other per step (its link's counter), config $CONFIG, 2 nodes x 2 ranks, links $RATE\nin units of the model's 4 Phi bytes; diamonds: the ring algorithms' formulas" "clustered gap 1" 540)
set ylabel "sent per step and node, units of 4 Phi bytes"
set yrange [0:*]
set xtics rotate by -30 left
plot "$OUT/nodes.dat" using 2:xtic(1) title "measured" lc rgb "#d62728", \\
     "" using 0:3 with points pt 13 ps 2 lc rgb "black" title "ring formula"
EOF_GP
echo "$BENCH_NAME: wrote $OUT/nodes.png"

echo "bytes each node sends to the other per step (units of 4 Phi = $((4 * ${PHI%.*})) bytes):"
awk -F, 'NR > 1 { printf "  %-14s node %s  %12s bytes  %.3f  (ring formula %s)\n", $1, $2, $3, $4, $5
                  s[$1] += $4; f[$1] = $5; if (!($1 in o)) o[$1] = ++n; l[n] = $1 }
         END { for (i = 1; i <= n; i++)
                   printf "  %-14s mean    %.3f  (ring formula %s)\n", l[i], s[l[i]] / 2, f[l[i]] }' \
    "$OUT/nodes.csv"
