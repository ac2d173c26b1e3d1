#!/usr/bin/env bash
# Two nodes on one machine: two network namespaces joined by a veth pair, one `pardash launch`
# in each (a real two-node torchrun rendezvous over 10.200.0.x). Node 0 runs the hub; node 1's
# ranks send to it over TCP. Needs root (ip netns, unshare), iproute2 and util-linux.
#
#   sudo demos/two_nodes_netns.sh                  # ddp, 1 rank per node, 100 steps
#   sudo NPROC=2 demos/two_nodes_netns.sh --strategy fsdp --steps 50
#
# Extra arguments go to both launches. Each namespace gets its own host name (pardash-node0,
# pardash-node1), so the run shows ranks on two hosts. Afterwards the script prints
# `pardash report` of node 0's log; the namespaces are removed on exit, whatever happened.
# The addresses exist only inside the two namespaces: no traffic leaves the veth pair.
set -euo pipefail
cd "$(dirname "$0")/.."
PARDASH="${PARDASH:-$PWD/.venv/bin/pardash}"
NPROC="${NPROC:-1}"
OUT="${OUT:-$(mktemp -d -t pardash-two-nodes.XXXXXX)}"
mkdir -p "$OUT"
# Names of this run's own (its pid in them): a second run beside it, another user's, is left
# alone (fixed names made each run start by killing whatever ran in the namespaces of the same
# names). Interface names hold 15 characters at most.
NS=("pardash-n0-$$" "pardash-n1-$$")
DEV=("pdv0-$$" "pdv1-$$")
ADDR=(10.200.0.1 10.200.0.2)

cleanup() {
    for ns in "${NS[@]}"; do
        for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
        ip netns del "$ns" 2>/dev/null || true
    done
    ip link del "${DEV[0]}" 2>/dev/null || true
}
trap cleanup EXIT

ip netns add "${NS[0]}"
ip netns add "${NS[1]}"
ip link add "${DEV[0]}" type veth peer name "${DEV[1]}"
for i in 0 1; do
    ip link set "${DEV[$i]}" netns "${NS[$i]}"
    ip -n "${NS[$i]}" addr add "${ADDR[$i]}/24" dev "${DEV[$i]}"
    ip -n "${NS[$i]}" link set "${DEV[$i]}" up
    ip -n "${NS[$i]}" link set lo up
done

# --insecure: the hub binds 10.200.0.1, beyond loopback, on a network only these two
# namespaces share. On a real cluster make keys instead (`pardash keys`, --curve-dir).
node() {  # node RANK [extra launch args...]
    local i="$1"; shift
    # Node 0's hub keeps the run's one log, every node's ranks in it: node 1 writes none (its
    # folder, runs1/<run id>-node1, holds its ranks' output and its result.json).
    local log=()
    if [ "$i" = 0 ]; then log=(--log "$OUT/node0.jsonl"); fi
    # gloo picks its address from the host name, which resolves nowhere here: name the
    # interface, as on any machine with several networks.
    GLOO_SOCKET_IFNAME="${DEV[$i]}" OMP_NUM_THREADS=1 \
    ip netns exec "${NS[$i]}" unshare --uts sh -c 'hostname "$0" && exec "$@"' \
        "pardash-node$i" "$PARDASH" launch --headless --insecure \
        --nnodes 2 --node-rank "$i" --master-addr "${ADDR[0]}" --nproc "$NPROC" \
        ${log[@]+"${log[@]}"} --runs-dir "$OUT/runs$i" \
        --strategy ddp --steps 100 --log-every 20 "$@"
}

node 0 "$@" > "$OUT/node0.out" 2>&1 &
n0=$!
node 1 "$@" > "$OUT/node1.out" 2>&1 &
n1=$!
code=0
wait "$n0" || code=$?
wait "$n1" || code=$?
tail -n 5 "$OUT/node0.out" "$OUT/node1.out"
"$PARDASH" report "$OUT/node0.jsonl"
echo "logs and outputs in $OUT (node 0's log holds every rank; node 1 records nothing itself: runs1/<run id>-node1 holds its output)"
exit "$code"
