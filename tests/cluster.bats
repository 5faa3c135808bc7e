#!/usr/bin/env bats
# A cluster on one machine (scripts/cluster.sh, issue 23): 2 nodes of 2
# slots, each a network namespace, joined by shaped links through a bridge.
# Every parallel layout trained across the two nodes (TCP between them,
# shared memory inside each) must equal its run on one node, bit for bit;
# each rank must be on the node its rank says; a node that dies must end
# the job; and `down` must leave nothing behind. Needs root: without it
# every test skips, saying why.
load helpers

CL="$ROOT/scripts/cluster.sh"
NAME=batsc
SHORT=(--config tiny --steps 6 --eval-every 3 --threads 1 --batch 8)

# namespace_problem: why this machine cannot make the cluster (nothing: it can)
namespace_problem() {
    [ "$(id -u)" = 0 ] || { echo "needs root (network namespaces): run as root, as CI does"; return; }
    command -v ip > /dev/null && command -v tc > /dev/null ||
        { echo "iproute2 missing (no ip or tc): bash scripts/deps.sh installs it"; return; }
    ip netns add batsc-probe 2> /dev/null && ip netns del batsc-probe ||
        echo "this kernel or container refuses network namespaces (ip netns add failed)"
}

can_make_namespaces() { [ -z "$(namespace_problem)" ]; }

setup_file() {
    can_make_namespaces || return 0
    bash "$CL" down --name "$NAME" > /dev/null 2>&1 || true
    t 120 bash "$CL" up --name "$NAME" --nodes 2 --slots 2 > "$BATS_FILE_TMPDIR/up.log" 2>&1
}

teardown_file() {
    can_make_namespaces || return 0
    bash "$CL" down --name "$NAME" > /dev/null 2>&1 || true
}

setup() {
    local why
    why=$(namespace_problem)
    [ -z "$why" ] || skip "$why"
}

# cl_run SECONDS ARGS...: a program on the cluster's 4 ranks
cl_run() {
    local secs=$1
    shift
    t "$secs" bash "$CL" run --name "$NAME" -q -- "$@"
}

# across PROGRAM ARGS...: PROGRAM on 4 ranks of one node and on 2 nodes x 2
# ranks: the same losses (metrics.csv's loss, val_loss, grad_norm) and the
# same parameters, bit for bit
across() {
    local d="$BATS_TEST_TMPDIR/$(basename "$1")-$RANDOM"
    run mpirun_t 300 4 "$1" "${SHORT[@]}" "${@:2}" --out "$d/one" --dump-params "$d/one/p.bin"
    [ "$status" -eq 0 ] || { echo "one node: $output"; return 1; }
    run cl_run 300 "$1" "${SHORT[@]}" "${@:2}" --out "$d/two" --dump-params "$d/two/p.bin"
    [ "$status" -eq 0 ] || { echo "two nodes: $output"; return 1; }
    [[ "$output" != *DIFFERENT* ]] || { echo "$output"; return 1; }
    diff <(cut -d, -f1-3,5 "$d/one/metrics.csv") <(cut -d, -f1-3,5 "$d/two/metrics.csv") ||
        { echo "$*: the losses differ across nodes"; return 1; }
    cmp "$d/one/p.bin" "$d/two/p.bin" || { echo "$*: the parameters differ across nodes"; return 1; }
    echo "$*: the same losses and parameters on 2 nodes"
}

@test "cluster: up made 2 nodes of 2 slots behind a switch, a hostfile and an agent; status lists them" {
    cat "$BATS_FILE_TMPDIR/up.log"
    grep -q "up: 2 nodes x 2 slots" "$BATS_FILE_TMPDIR/up.log"
    run bash "$CL" status --name "$NAME"
    echo "$output"
    [ "$status" -eq 0 ]
    [ "$(grep -cE "^$NAME-(n0|n1|sw)$" <<<"$output")" -eq 3 ]
    [ "$(cat "/tmp/dtlab-cluster-$NAME/hostfile")" = "$(printf '10.77.0.1 slots=2\n10.77.0.2 slots=2')" ]
    # the machine's own network has no new interface
    ! ip link show | grep -qE "$NAME|10\.77\." || return 1
    # the links are shaped: each node's interface sends through a rate limiter
    ip netns exec "$NAME-n1" tc qdisc show dev eth0 | grep -qE "tbf|netem"
}

@test "cluster: every rank runs on the node its rank says, with its node's hostname and local rank" {
    run cl_run 120 sh -c 'echo "rank $OMPI_COMM_WORLD_RANK local $OMPI_COMM_WORLD_LOCAL_RANK host $(hostname)"'
    echo "$output"
    [ "$status" -eq 0 ]
    for r in 0 1 2 3; do
        grep -qx "rank $r local $((r % 2)) host $NAME-n$((r / 2))" <<<"$output"
    done
    # the kit's own view: train_4d's mesh.csv (node from the ranks sharing memory)
    require_solution 10
    run cl_run 300 "$BUILD/solutions/10_composed/train_4d" "${SHORT[@]}" --tp 2 --pp 2 \
        --out "$BATS_TEST_TMPDIR/4d"
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"mesh order tp-cp-dp-pp on 2 nodes; the most nodes a group spans: tp 1, cp 1, dp 1, pp 2"* ]]
    awk -F, 'NR > 1 && $2 != int($1 / 2) { print "rank " $1 " on node " $2; bad = 1 } END { exit bad }' \
        "$BATS_TEST_TMPDIR/4d/mesh.csv"
}

@test "cluster: DDP and ZeRO-1, 2 and 3 on 2 nodes x 2 ranks equal their runs on one node, bit for bit" {
    require_solution 02 03
    across "$BUILD/solutions/02_ddp/train_ddp" --ddp bucketed --bucket-mb 0.1
    across "$BUILD/solutions/02_ddp/train_ddp" --ddp overlapped --bucket-mb 0.1
    for z in 1 2 3; do across "$BUILD/solutions/03_zero/train_zero" --zero $z; done
}

@test "cluster: TP 2 x DP 2, PP 2 x DP 2, CP 2 x DP 2 and EP 2 x DP 2 on 2 nodes equal their runs on one node" {
    require_solution 04 06 07 08
    across "$BUILD/solutions/04_tensor_parallel/train_tp" --tp 2
    across "$BUILD/solutions/06_pipeline/train_pp" --pp 2 --micro-batches 2
    across "$BUILD/solutions/07_context_parallel/train_cp" --cp 2 --cp-algo zigzag
    across "$BUILD/solutions/08_moe/train_moe" --ep 2 --config tiny-moe
}

@test "cluster: the composed trainer (tp 2 x pp 2, and tp 2 x cp 2 with ZeRO-1) on 2 nodes equals its run on one node" {
    require_solution 10
    across "$BUILD/solutions/10_composed/train_4d" --tp 2 --pp 2
    across "$BUILD/solutions/10_composed/train_4d" --tp 2 --cp 2 --zero 1
}

@test "cluster: lab 01's hierarchical all-reduce on the real nodes (2 x 2 and 2 x 1), to the bit and the byte" {
    require_solution 01
    local out="$BATS_TEST_TMPDIR/hier"
    # the nodes are the ranks that share memory: no --ranks-per-node
    run cl_run 300 "$BUILD/solutions/01_collectives/check_collectives" --op hierarchical_allreduce
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"on 4 ranks, 2 nodes of 2"* ]]
    [[ "$output" == *"all 16 cases pass"* ]]
    run t 300 bash "$CL" run --name "$NAME" -q -np 2 --map-by node -- \
        "$BUILD/solutions/01_collectives/check_collectives" --op hierarchical_allreduce
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"on 2 ranks, 2 nodes of 1"* ]]
}

@test "bench-cluster: the links' fits, and flat vs hierarchical predicted and measured on 2x2 and 4x1, with charts" {
    require_solution 01
    # a short sweep (1K to 64K) on a cluster of its own, shaped to 1gbit
    run t 600 env BENCH_MAX=64K bash "$ROOT/bench/cluster.sh"
    echo "$output"
    [ "$status" -eq 0 ]
    local out="$ROOT/runs/01_collectives-cluster" key
    for key in intra_alpha_us intra_inv_beta_GBps oneway_alpha_us oneway_inv_beta_GBps \
               exchange_alpha_us exchange_inv_beta_GBps \
               2x2_flat_over_hierarchical_predicted 2x2_flat_over_hierarchical_measured; do
        grep -qE "^$key=[0-9.]+$" <<<"$output"
    done
    # the model: 4 x 1 is the same ring both ways
    grep -qx "4x1_flat_over_hierarchical_predicted=1.00" <<<"$output"
    # the 2x2 predictions at 1K follow the model from links.csv's fits (the
    # figures themselves are timings: printed, not asserted)
    awk -F, 'FNR == NR { a[$1] = $2; b[$1] = $3; next }
             $1 == "2x2" && $3 == 1024 {
                 want = $2 == "flat" ? 6 * (a["one-way"] + 256 * 1e-3 / b["one-way"]) \
                                     : 2 * (a["intra"] + 512 * 1e-3 / b["intra"]) + 2 * (a["exchange"] + 512 * 1e-3 / b["exchange"])
                 if ((want - $4) ^ 2 > (0.2 + 0.02 * want) ^ 2) bad = 1; n++ }
             END { exit bad || n != 2 }' "$out/links.csv" "$out/predicted.csv"
    # every measured size of the four runs (7 sizes each), with a positive measured time
    [ "$(awk -F, 'NR > 1 && $5 > 0' "$out/predicted.csv" | wc -l)" -eq 28 ]
    [ "$(wc -l < "$out/links.csv")" -eq 4 ]
    grep -q '"nodes": 2,' "$out/2x2-hierarchical/run.json"
    grep -q '"nodes": 4,' "$out/4x1-hierarchical/run.json"
    for png in links hierarchical; do
        [ "$(head -c 4 "$out/$png.png" | tail -c 3)" = PNG ]
    done
    # its cluster is gone
    [ "$(ip netns list | grep -c '^dtbench-')" -eq 0 ]
}

@test "bench-hsdp: on 2 nodes of 2, hybrid sharding's nodes each send one shard's all-reduce per step (1.0 x 4 Phi bytes, on the links' counters), less than DDP (1.5 on average) and ZeRO-3; ZeRO++ under half of hybrid's; with a chart" {
    require_solution 02 03
    local out="$BATS_TEST_TMPDIR/hsdp"
    run t 300 env BENCH_CONFIG=tiny BENCH_OUT="$out" bash "$ROOT/bench/hsdp.sh"
    echo "$output"
    [ "$status" -eq 0 ]
    # units of 4 Phi bytes per node and step; headers, TCP's acknowledgements
    # and MPI's own messages add 1 to 3 % (5 % allowed). ZeRO++ (qwZ, hpZ,
    # qgZ): its ring formula is 0.32; Open MPI's all-gather on 4 ranks is no
    # ring (ZeRO-3's 2.25 measures about 2.8), about 0.39 here
    awk -F, 'NR > 1 { s[$1] += $4; n[$1]++; if ($1 == "hybrid K=2" && ($4 < 1 || $4 > 1.05)) bad = 1
                      if ($1 == "ZeRO++ K=2" && ($4 < 0.25 || $4 > 0.5)) bad = 1 }
             END { if (bad || n["hybrid K=2"] != 2 || n["ZeRO++ K=2"] != 2) exit 1
                   d = s["DDP"] / 2; z = s["ZeRO-3 over 4"] / 2
                   exit !(d > 1.5 && d < 1.545 && z > d) }' "$out/nodes.csv"
    [ "$(head -c 4 "$out/nodes.png" | tail -c 3)" = PNG ]
    [ "$(ip netns list | grep -c '^dthsdp-')" -eq 0 ]
}

@test "cluster: a node that dies ends the job within seconds, with a reason, and leaves no rank behind" {
    require_solution 02
    local d="$BATS_TEST_TMPDIR/die"
    bash "$CL" run --name "$NAME" -- "$BUILD/solutions/02_ddp/train_ddp" --config tiny --steps 100000 \
        --threads 1 --eval-every 100000 --out "$d" > "$d.log" 2>&1 &
    local job=$!
    # training has started on every rank: rank 0 has begun stepping
    for _ in $(seq 1 120); do grep -q "step " "$d.log" 2> /dev/null && break; sleep 0.5; done
    grep -q "step " "$d.log"
    ip netns pids "$NAME-n1" | xargs -r kill -9
    local start=$SECONDS
    t 120 tail --pid "$job" -f /dev/null
    wait "$job" && { echo "the job exited 0"; cat "$d.log"; return 1; }
    echo "ended in $((SECONDS - start)) s: $(tr '\r' '\n' < "$d.log" | grep -v '^step' | tail -n 5)"
    [ "$((SECONDS - start))" -lt 100 ]
    # one says why: Open MPI (the lost node, or its daemon's connection) or
    # the kit's watchdog (a rank that died), whichever notices first
    grep -Eiq "10\.77\.0\.2|died without a message|lost|connection" "$d.log"
    [ -z "$(ip netns pids "$NAME-n0")" ] && [ -z "$(ip netns pids "$NAME-n1")" ]
}

@test "cluster: bad input is one clear error; a second cluster of the same name is refused; not root says so" {
    for args in "up --nodes 0" "up --slots x" "up --link-bandwidth fast" "up --name Bad!" \
                "up --frobnicate" "frob" "run --name $NAME" "status --name nosuch"; do
        # shellcheck disable=SC2086  # args is a list
        run t 30 bash "$CL" $args
        echo "$args: $output"
        [ "$status" -eq 2 ]
        [ "$(grep -c 'error:' <<<"$output")" -eq 1 ]
    done
    run t 30 bash "$CL" up --name "$NAME"
    [ "$status" -eq 2 ]
    [[ "$output" == *"a cluster '$NAME' is up already"* ]]
    # not root: an `id` that says so
    mkdir -p "$BATS_TEST_TMPDIR/notroot"
    printf '#!/bin/sh\necho 1000\n' > "$BATS_TEST_TMPDIR/notroot/id"
    chmod +x "$BATS_TEST_TMPDIR/notroot/id"
    run env PATH="$BATS_TEST_TMPDIR/notroot:$PATH" bash "$CL" up --name other
    echo "$output"
    [ "$status" -eq 2 ]
    [[ "$output" == *"needs root"* ]]
}

@test "cluster: down removes every namespace, link, process and file of the cluster" {
    local d="$BATS_TEST_TMPDIR"
    t 60 bash "$CL" up --name batsd --nodes 3 --slots 1 > /dev/null
    [ "$(ip netns list | grep -c '^batsd-')" -eq 4 ]
    # something left running in a node, as a crashed job would
    # (named, so that no other sleep on the machine is taken for it)
    ip netns exec batsd-n2 bash -c 'exec -a dtlab-batsd-leftover sleep 300' &
    run t 60 bash "$CL" down --name batsd
    echo "$output"
    [ "$status" -eq 0 ]
    [ "$(ip netns list | grep -c '^batsd-')" -eq 0 ]
    [ ! -e /tmp/dtlab-cluster-batsd ]
    ! pgrep -f dtlab-batsd-leftover > /dev/null || return 1
    ! ip link show | grep -q batsd || return 1
    # and down of nothing is no error
    run t 60 bash "$CL" down --name batsd
    [ "$status" -eq 0 ]
}
