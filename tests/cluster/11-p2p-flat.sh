#!/bin/sh
# The eight vl_* tools and their perftest counterparts between two hosts on one switch (flat):
# the same checks as on the leaf-spine fabric, without a router between them.
# cluster: nodes=2 topology=flat
# timeout: 600
# slow: eighteen two-host runs under emulation, each 3-15 s
set -eu
# shellcheck source=tests/cluster/lib.sh
. "$VL_TESTS/lib.sh"
# shellcheck source=tests/cluster/p2p.sh
. "$VL_TESTS/p2p.sh"
trap reap_nodes EXIT
FAR=node2
p2p_all
