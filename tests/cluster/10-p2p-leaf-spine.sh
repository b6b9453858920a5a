#!/bin/sh
# The eight vl_* tools and their perftest counterparts between two hosts on different leaves:
# routed RoCE v2 (GID 1, rxe resolving the next hop through the leaf's gateway), the payload
# checked, the server's counters moved; --procs and -R (rdma_cm) across the hosts; nothing left.
# cluster: nodes=4 topology=leaf-spine
# timeout: 600
# slow: eighteen two-host runs through three emulated routers (leaf, spine, leaf), each 5-20 s
set -eu
# shellcheck source=tests/cluster/lib.sh
. "$VL_TESTS/lib.sh"
# shellcheck source=tests/cluster/p2p.sh
. "$VL_TESTS/p2p.sh"
trap reap_nodes EXIT
FAR=node$VL_NODES
p2p_all
