#!/usr/bin/env bash
# help: lab 01 on a cluster of namespaces (root): both links' alpha-beta, hierarchical vs flat all-reduce on 2x2 and 4x1, predicted and measured, charts
# bench/cluster.sh: lab 01 on a cluster made on this machine
# (scripts/cluster.sh: network namespaces, shaped links; root only).
# `make bench-cluster` builds, then runs this.
#
#  1. The links, each alone, with lab 01's ring all-reduce:
#       intra     2 ranks inside one node (shared memory), t = 2 alpha + S beta
#       one-way   3 ranks on 3 nodes: every connection between nodes carries
#                 one direction, t = 4 alpha + 4/3 S beta
#       exchange  2 ranks on 2 nodes: the pair swaps halves both ways at once
#                 on one connection, t = 2 alpha + S beta
#     Each fitted through its smallest and its largest size (alpha from the
#     first, beta from the slope between them), so the model is exact at
#     both ends; bench_collectives' own least-squares fit is in run.json.
#  2. The hierarchical all-reduce against the flat ring, on 4 ranks laid out
#     as 2 nodes x 2 ranks and as 4 nodes x 1 rank: predicted from the
#     links, then measured. With N nodes of k ranks, p = N k, and S bytes:
#       flat ring     2(p-1) (alpha + S/p beta), each step as long as its
#                     slowest hop: one-way between nodes when N > 1
#       hierarchical  2(k-1) (alpha_i + S/k beta_i)   reduce-scatter and
#                                                     all-gather in the node
#                   + 2(N-1) (alpha + S/N beta)       all-reduce across: the k
#                     rings of S/k bytes share the node's one link, so each
#                     step puts k S/(kN) = S/N bytes on it; one-way for
#                     N > 2, the exchange's alpha and beta for N = 2
#     On 4 x 1 both are the same ring (k = 1): the control.
#
#   BENCH_LINK_BW  the inter-node links' rate (default 1gbit, which the links
#                  reach; at 10gbit the kernel's TCP on this machine's cores
#                  is the limit, not the link)
#   BENCH_MAX      largest buffer (default 16M; sizes double from 1K)
#   BENCH_TIMEOUT  seconds allowed to each run (default 300)
#   BENCH_COPY     labs or solutions: whose bench_collectives (bench/common.sh)
#
# Writes runs/01_collectives-cluster/: {intra,one-way,exchange,2x2-flat,
# 2x2-hierarchical,4x1-flat,4x1-hierarchical}/ (bench_collectives' busbw.csv,
# run.json), links.csv (link,alpha_us,inv_beta_GBps), predicted.csv
# (layout,algorithm,size_bytes,predicted_us,measured_us), links.png and
# hierarchical.png, and ends with key=value lines: each link's alpha_us and
# inv_beta_GBps, and per layout and algorithm the predicted and measured
# time at the smallest and largest size.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
BENCH_NAME=bench-cluster
source bench/common.sh

RATE=${BENCH_LINK_BW:-1gbit}
MAX=${BENCH_MAX:-16M}
LIMIT=${BENCH_TIMEOUT:-300}
OUT=runs/01_collectives-cluster
NAME=dtbench

[ "$(id -u)" = 0 ] || die "needs root: the cluster is made of network namespaces (scripts/cluster.sh); run it as root, as CI does"
check_timeout "$LIMIT"
BENCH=$(bench_program 01_collectives bench_collectives)
[ -x "$BENCH" ] || die "$BENCH is missing: run 'make all' (or 'make bench-cluster')"
export OMP_NUM_THREADS=1

# 4 nodes of 2 slots: -np 2 fills node 0 (intra), -np P --map-by node takes
# one slot on each of nodes 0 .. P-1 (one-way, exchange, 4 x 1), -np 4
# fills nodes 0 and 1 (2 x 2)
bash scripts/cluster.sh down --name "$NAME" > /dev/null 2>&1 || true
trap 'bash scripts/cluster.sh down --name "$NAME" > /dev/null 2>&1 || true' EXIT
bash scripts/cluster.sh up --name "$NAME" --nodes 4 --slots 2 --link-bandwidth "$RATE"
rm -rf "$OUT"

# measure DIR OP MPIRUN_OPTIONS...: lab 01's OP on the cluster into $OUT/DIR
measure() {
    local dir=$1 op=$2
    shift 2
    echo "$BENCH_NAME: $dir: cluster.sh run $* -- bench_collectives --op $op"
    timeout --kill-after=10 "$LIMIT" bash scripts/cluster.sh run --name "$NAME" -q "$@" -- \
        "$BENCH" --op "$op" --impl student --max-bytes "$MAX" --out "$OUT/$dir" |
        grep -E "nodes:|alpha =" || die "bench_collectives failed for $dir (rerun it by hand to see why)"
    [ -s "$OUT/$dir/busbw.csv" ] || die "bench_collectives wrote no $OUT/$dir/busbw.csv"
}

measure intra allreduce -np 2
measure one-way allreduce -np 3 --map-by node
measure exchange allreduce -np 2 --map-by node
measure 2x2-flat allreduce -np 4
measure 2x2-hierarchical hierarchical_allreduce -np 4
measure 4x1-flat allreduce -np 4 --map-by node
measure 4x1-hierarchical hierarchical_allreduce -np 4 --map-by node
for layout in 2x2 4x1; do
    nodes=$(json_number "$OUT/$layout-hierarchical/run.json" nodes)
    [ "$nodes" = "${layout%x*}" ] || die "$layout: hierarchical_allreduce found $nodes nodes, not ${layout%x*}"
done

# fit_ends DIR L F: "alpha_us inv_beta_GBps" of t = L alpha + F S beta
# through the smallest and the largest size of DIR/busbw.csv. Where noise
# makes that line fall (the smallest size slower than the largest: a rank
# descheduled on a busy machine), it bounds each term by one end instead,
# alpha by the smallest size's time and beta by the largest's, and says so.
fit_ends() {
    awk -F, -v L="$2" -v F="$3" -v name="$1" -v prog="$BENCH_NAME" '
        NR > 1 { if (!lo || $1 + 0 < lo) { lo = $1 + 0; tlo = $4 }
                 if ($1 + 0 > hi) { hi = $1 + 0; thi = $4 } }
        END { if (hi <= lo) exit 1
              beta = (thi - tlo) / (F * (hi - lo))       # us per byte
              alpha = (tlo - F * lo * beta) / L
              if (beta <= 0 || alpha < 0) {
                  printf "%s: %s: %d bytes took longer than %d (noise): alpha and beta bounded by one end each\n",
                         prog, name, lo, hi > "/dev/stderr"
                  alpha = tlo / L; beta = thi / (F * hi)
              }
              printf "%.3f %.4f\n", alpha, 1e-3 / beta }' "$OUT/$1/busbw.csv"
}
read -r ai bi < <(fit_ends intra 2 1) || die "no fit for the intra-node link"
read -r ae be < <(fit_ends one-way 4 1.3333333) || die "no fit for the one-way link"
read -r ax bx < <(fit_ends exchange 2 1) || die "no fit for the exchange across nodes"
printf 'link,alpha_us,inv_beta_GBps\nintra,%s,%s\none-way,%s,%s\nexchange,%s,%s\n' \
    "$ai" "$bi" "$ae" "$be" "$ax" "$bx" > "$OUT/links.csv"

# predicted.csv: every measured size of the four runs, with the model's time
{
    echo "layout,algorithm,size_bytes,predicted_us,measured_us"
    for layout in 2x2 4x1; do
        for alg in flat hierarchical; do
            awk -F, -v N="${layout%x*}" -v k="${layout#*x}" -v alg="$alg" -v layout="$layout" \
                -v ai="$ai" -v bi="$bi" -v ae="$ae" -v be="$be" -v ax="$ax" -v bx="$bx" '
                NR > 1 && $3 == "student" {
                    S = $1 + 0; p = N * k
                    Bi = 1e-3 / bi; Be = 1e-3 / be; Bx = 1e-3 / bx    # us per byte
                    if (alg == "flat")
                        t = 2 * (p - 1) * (N > 1 ? ae + S / p * Be : ai + S / p * Bi)
                    else
                        t = 2 * (k - 1) * (ai + S / k * Bi) + 2 * (N - 1) * (N == 2 ? ax + S / N * Bx : ae + S / N * Be)
                    printf "%s,%s,%d,%.1f,%s\n", layout, alg, S, t, $4 }' \
                "$OUT/$layout-$alg/busbw.csv"
        done
    done
} > "$OUT/predicted.csv"
bash tools/plot_cluster_links.sh "$OUT" "$RATE"

# key=value summary at the smallest and the largest size
echo
echo "link_rate=$RATE"
echo "intra_alpha_us=$ai"
echo "intra_inv_beta_GBps=$bi"
echo "oneway_alpha_us=$ae"
echo "oneway_inv_beta_GBps=$be"
echo "exchange_alpha_us=$ax"
echo "exchange_inv_beta_GBps=$bx"
awk -F, 'NR > 1 { k = $1 "_" $2; if (!(k in lo) || $3 + 0 < lo[k]) { lo[k] = $3 + 0; plo[k] = $4; mlo[k] = $5 }
                  if ($3 + 0 >= hi[k]) { hi[k] = $3 + 0; phi[k] = $4; mhi[k] = $5 } }
     END { for (k in lo) {
               printf "%s_%d_predicted_us=%s\n%s_%d_measured_us=%s\n", k, lo[k], plo[k], k, lo[k], mlo[k]
               printf "%s_%d_predicted_us=%s\n%s_%d_measured_us=%s\n", k, hi[k], phi[k], k, hi[k], mhi[k] } }' \
    "$OUT/predicted.csv" | sort
# flat / hierarchical at the largest size: predicted and measured
awk -F, 'NR > 1 && $3 + 0 >= big { big = $3 + 0 }
         { p[$1 "," $2 "," $3] = $4; m[$1 "," $2 "," $3] = $5 }
         END { for (l = 1; l <= 2; l++) { L = l == 1 ? "2x2" : "4x1"
                   printf "%s_flat_over_hierarchical_predicted=%.2f\n", L, p[L ",flat," big] / p[L ",hierarchical," big]
                   printf "%s_flat_over_hierarchical_measured=%.2f\n", L, m[L ",flat," big] / m[L ",hierarchical," big] } }' \
    "$OUT/predicted.csv"
