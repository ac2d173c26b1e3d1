#!/usr/bin/env bash
# A job on two nodes, watched from node 0. Run this on each node, the same script and flags,
# with that node's rank:
#
#   node 0:  MASTER_ADDR=10.0.0.1 NODE_RANK=0 demos/two_nodes.sh
#   node 1:  MASTER_ADDR=10.0.0.1 NODE_RANK=1 demos/two_nodes.sh
#
# MASTER_ADDR is node 0's address, reachable from node 1. Node 0's `pardash launch` starts the
# hub (on MASTER_ADDR, ports 29600-29602, --telemetry-addr/--telemetry-port to change them)
# and shows the run; node 1's ranks send to it. What node 1 runs amounts to
#
#   PARDASH_ENDPOINT=tcp://$MASTER_ADDR:29600 torchrun --nnodes 2 --node-rank 1 \
#       --master-addr $MASTER_ADDR --master-port 29500 --nproc-per-node $NPROC \
#       -m pardash.trainer.autorun demos/ddp_plain.py --steps 200
#
# Extra arguments go to pardash launch (e.g. --headless on a node without a terminal).
set -euo pipefail
: "${MASTER_ADDR:?set MASTER_ADDR to the address of node 0}"
: "${NODE_RANK:?set NODE_RANK to 0 on the first node, 1 on the second}"
NPROC="${NPROC:-2}"
cd "$(dirname "$0")/.."

# Telemetry crosses the network: use CURVE keys made once with `pardash keys --dir keys/` and
# copied to both nodes (CURVE_DIR=keys), or accept an open port on a trusted network (--insecure).
if [ -n "${CURVE_DIR:-}" ]; then security=(--curve-dir "$CURVE_DIR"); else security=(--insecure); fi
exec .venv/bin/pardash launch \
    --nnodes 2 --node-rank "$NODE_RANK" "${security[@]}" \
    --master-addr "$MASTER_ADDR" --master-port 29500 \
    --nproc "$NPROC" "$@" \
    -- demos/ddp_plain.py --steps 200
