#!/usr/bin/env bash
# cluster.sh: a cluster of N "nodes" on this machine, for multi-node runs.
#
#   cluster.sh up [--nodes N] [--slots K] [--link-bandwidth RATE] [--link-latency DELAY] [--name NAME]
#   cluster.sh run [MPIRUN_OPTIONS...] -- PROGRAM [ARGS...]
#   cluster.sh down [--name NAME]
#   cluster.sh status [--name NAME]
#
# Each node is a Linux network namespace (NAME-n0, NAME-n1, ...) with one
# interface, eth0, at 10.77.0.(i+1)/24, plugged into a bridge that lives
# in a namespace of its own (NAME-sw): the machine's own network is not
# touched. Every node's eth0 sends through tc's netem at RATE (default
# 10gbit) with DELAY one way (default 20us), so a message between two
# nodes crosses one shaped link each way, like a NIC into a switch. A
# kernel without netem (sch_netem) can shape the rate only (tbf): up then
# says so, and refuses a --link-latency given explicitly.
#
# `run` is mpirun with the cluster's hostfile (K slots per node, by slot:
# ranks 0..K-1 on node 0, K..2K-1 on node 1, ...) and an agent in place of
# ssh that starts Open MPI's daemon inside the node's namespace (ip netns
# exec). mpirun itself runs in node 0's namespace. Ranks of one node share
# memory (Open MPI's shared-memory transport, as on a real node); ranks of
# different nodes talk TCP over the shaped links. Any kit program runs
# unchanged: `cluster.sh run -- build/solutions/02_ddp/train_ddp --config tiny`.
#
# State (hostfile, agent, settings) is in $CLUSTER_DIR (default
# /tmp/dtlab-cluster-NAME). `down` removes the namespaces (their links go
# with them) after killing what still runs in them; `up` tears down on any
# failure, so nothing is left half made. Needs root (network namespaces):
# without it, one clear error, exit 2.
set -euo pipefail

die() { echo "cluster.sh: error: $*" >&2; exit 2; }
usage() { sed -n '4,7p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

NAME=dtlab
NODES=2
SLOTS=2
RATE=10gbit
DELAY=20us
DELAY_GIVEN=0
cmd=${1:-}
[ -n "$cmd" ] || usage
shift

need_root() {
    [ "$(id -u)" = 0 ] || die "needs root: network namespaces (ip netns) and tc are root's (run it as root, or in CI)"
    command -v ip > /dev/null || die "ip not found (apt-get install iproute2)"
    command -v tc > /dev/null || die "tc not found (apt-get install iproute2)"
}

# positive integer flag value
count() {
    [[ "$2" =~ ^[1-9][0-9]*$ ]] || die "$1 expects a positive integer, got '$2'"
    echo "$2"
}

parse_common() {
    while [ $# -gt 0 ]; do
        case $1 in
            --name) [[ "${2:-}" =~ ^[a-z][a-z0-9]{0,7}$ ]] ||
                        die "--name expects 1-8 lowercase letters and digits, starting with a letter, got '${2:-}'"
                    NAME=$2; shift ;;
            --nodes) NODES=$(count --nodes "${2:-}"); shift ;;
            --slots) SLOTS=$(count --slots "${2:-}"); shift ;;
            --link-bandwidth) [[ "${2:-}" =~ ^[0-9]+(\.[0-9]+)?([kmg]?bit|[kmg]?bps)$ ]] ||
                        die "--link-bandwidth expects a rate as tc writes it (10gbit, 500mbit), got '${2:-}'"
                    RATE=$2; shift ;;
            --link-latency) [[ "${2:-}" =~ ^[0-9]+(\.[0-9]+)?(us|ms)$ ]] ||
                        die "--link-latency expects a delay in us or ms (20us, 1ms), got '${2:-}'"
                    DELAY=$2; DELAY_GIVEN=1; shift ;;
            *) die "unknown option '$1' for '$cmd'" ;;
        esac
        shift
    done
    [ "$NODES" -le 200 ] || die "--nodes $NODES: at most 200"
    DIR=${CLUSTER_DIR:-/tmp/dtlab-cluster-$NAME}
}

# bytes per second of a tc rate (10gbit, 500mbit, 100mbps...)
tc_rate_bytes() {
    awk -v r="$1" 'BEGIN {
        n = r + 0; u = substr(r, length(n "") + 1)
        m = u ~ /^k/ ? 1e3 : u ~ /^m/ ? 1e6 : u ~ /^g/ ? 1e9 : 1
        printf "%d", n * m / (u ~ /bit$/ ? 8 : 1) }'
}

node_ns() { echo "$NAME-n$1"; }
node_ip() { echo "10.77.0.$(($1 + 1))"; }

# Remove every namespace of NAME (killing what runs in it) and the state.
teardown() {
    local ns
    for ns in $(ip netns list 2> /dev/null | awk '{ print $1 }' | grep -E "^$NAME-(n[0-9]+|sw)$" || true); do
        ip netns pids "$ns" 2> /dev/null | xargs -r kill -9 2> /dev/null || true
        # a signal is sent, not awaited: return once they are gone (5 s at most)
        for _ in $(seq 50); do
            [ -z "$(ip netns pids "$ns" 2> /dev/null)" ] && break
            sleep 0.1
        done
        ip netns del "$ns" 2> /dev/null || true
    done
    rm -rf "$DIR"
}

up() {
    parse_common "$@"
    need_root
    [ ! -e "$DIR/hostfile" ] || die "a cluster '$NAME' is up already ($DIR): cluster.sh down --name $NAME first"
    trap 'teardown; die "could not bring the cluster up (see the messages above); nothing is left"' ERR
    teardown
    mkdir -p "$DIR"
    local sw i ns shaper
    sw="$NAME-sw"
    ip netns add "$sw"
    ip -n "$sw" link add br0 type bridge
    ip -n "$sw" link set br0 up
    # netem shapes rate and delay; without it, tbf the rate alone, with a
    # bucket of 1 ms of traffic (at least 64 KiB: a whole TCP segment burst)
    if ip netns exec "$sw" tc qdisc add dev br0 root netem delay "$DELAY" 2> /dev/null; then
        ip netns exec "$sw" tc qdisc del dev br0 root
        shaper=(netem rate "$RATE" delay "$DELAY" limit 100000)
    else
        [ "$DELAY_GIVEN" = 0 ] ||
            die "--link-latency $DELAY needs the kernel's netem queueing discipline (sch_netem), which this kernel lacks; leave it out to shape the bandwidth only"
        local bytes
        bytes=$(tc_rate_bytes "$RATE")
        shaper=(tbf rate "$RATE" burst "$(( bytes / 1000 > 65536 ? bytes / 1000 : 65536 ))" latency 50ms)
        DELAY=none
        echo "cluster.sh: this kernel has no netem: links shaped to $RATE, with the veth's own latency (no delay added)"
    fi
    : > "$DIR/hostfile"
    for ((i = 0; i < NODES; i++)); do
        ns=$(node_ns "$i")
        ip netns add "$ns"
        ip -n "$ns" link set lo up
        # eth0 in the node, its peer p$i on the switch's bridge
        ip -n "$ns" link add eth0 type veth peer name "p$i" netns "$sw"
        ip -n "$sw" link set "p$i" master br0 up
        ip -n "$ns" addr add "$(node_ip "$i")/24" dev eth0
        ip -n "$ns" link set eth0 up
        ip netns exec "$ns" tc qdisc add dev eth0 root "${shaper[@]}"
        echo "$(node_ip "$i") slots=$SLOTS" >> "$DIR/hostfile"
    done
    # the agent Open MPI calls instead of ssh: agent HOST COMMAND...
    cat > "$DIR/agent" <<EOF
#!/usr/bin/env bash
# cluster.sh's stand-in for ssh: run COMMAND in the namespace of HOST's node
host=\$1
shift
i=\${host##*.}
node=$NAME-n\$((i - 1))
# a hostname of its own (a UTS namespace): Open MPI names its session
# directory and shared-memory files after it, which two nodes must not share
exec ip netns exec "\$node" unshare --uts /bin/sh -c "hostname \$node && \$*"
EOF
    chmod +x "$DIR/agent"
    printf 'NAME=%s\nNODES=%s\nSLOTS=%s\nRATE=%s\nDELAY=%s\n' "$NAME" "$NODES" "$SLOTS" "$RATE" "$DELAY" \
        > "$DIR/settings"
    trap - ERR
    echo "cluster.sh: up: $NODES nodes x $SLOTS slots ($NAME-n0 .. $NAME-n$((NODES - 1)), 10.77.0.1-$NODES)," \
         "links $RATE with $DELAY one way; run with: cluster.sh run -- PROGRAM ARGS"
}

load_settings() {
    [ -s "$DIR/settings" ] || die "no cluster '$NAME' is up (cluster.sh up first)"
    # shellcheck disable=SC1091
    source "$DIR/settings"
}

run() {
    local mpi=()
    while [ $# -gt 0 ] && [ "$1" != -- ]; do
        case $1 in
            --name) NAME=${2:-}; shift 2 ;;
            *) mpi+=("$1"); shift ;;
        esac
    done
    [ "${1:-}" = -- ] && [ $# -ge 2 ] || die "usage: cluster.sh run [MPIRUN_OPTIONS...] -- PROGRAM [ARGS...]"
    shift
    DIR=${CLUSTER_DIR:-/tmp/dtlab-cluster-$NAME}
    need_root
    load_settings
    # every slot, unless the options choose how many ranks (-np 2 --map-by node...)
    local np=(-np $((NODES * SLOTS))) opt
    for opt in "${mpi[@]}"; do
        case $opt in -np | -n | --np | -c) np=() ;; esac
    done
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    # A waiting rank yields its core when nothing progressed. Here the
    # kernel's network processing (ksoftirqd) is the NIC, and it shares the
    # cores with the ranks: a rank that spins gives it a core only at the
    # scheduler's next tick, and every message between nodes then took one
    # tick (4 ms) instead of ~30 us. (--mca mpi_yield_when_idle 0 restores
    # spinning.)
    export OMPI_MCA_mpi_yield_when_idle=${OMPI_MCA_mpi_yield_when_idle:-1}
    # the daemons and the ranks talk over eth0 only (the nodes have no other
    # interface but lo, which Open MPI would otherwise try between nodes)
    exec ip netns exec "$(node_ns 0)" unshare --uts "$(dirname "$0")/cluster.sh" _mpirun "$NAME" \
        --hostfile "$DIR/hostfile" "${np[@]}" \
        --mca plm_rsh_agent "$DIR/agent" --mca oob_tcp_if_include 10.77.0.0/24 \
        --mca btl_tcp_if_include 10.77.0.0/24 --mca btl self,vader,tcp "${mpi[@]}" "$@"
}

status() {
    parse_common "$@"
    load_settings
    echo "cluster '$NAME': $NODES nodes x $SLOTS slots, links $RATE, $DELAY one way ($DIR)"
    ip netns list | awk '{ print $1 }' | grep -E "^$NAME-" | sort
}

case $cmd in
    # (inside node 0's namespaces: its hostname, then mpirun)
    _mpirun) hostname "$1-n0"; shift; exec mpirun "$@" ;;
    up) up "$@" ;;
    run) run "$@" ;;
    down) parse_common "$@"; need_root; teardown; echo "cluster.sh: down: cluster '$NAME' removed" ;;
    status) status "$@" ;;
    -h | --help) sed -n '2,29p' "$0" | sed 's/^# \{0,1\}//' ;;
    *) die "unknown command '$cmd' (up, run, down, status)" ;;
esac
