#!/bin/sh
# The cluster is what it says: every node its own host (hostname, kernel, rxe0 ACTIVE on its own
# NIC with its own address), reachable by ssh under its name, known to Slurm; the fabric's
# switches list every port; across the leaf-spine fabric RoCE v2 is routed (ping's TTL drops by
# the three routers between the leaves: leaf, spine, leaf), within a leaf it is switched.
# cluster: nodes=4 topology=leaf-spine
# timeout: 120
set -eu
# shellcheck source=tests/cluster/lib.sh
. "$VL_TESTS/lib.sh"

step "every node: hostname, its own kernel boot id, rxe0 ACTIVE with its data address as GID 1"
ids=''
for n in $(nodes); do
    out=$(on "$n" 'echo "$(hostname) $(cat /proc/sys/kernel/random/boot_id) $VL_ADDR0"; . scripts/lib/rxe.sh; rxe_ready rxe0 "$VL_ADDR0" && echo rxe0-ready')
    echo "$n: $out"
    [ "$(echo "$out" | head -n 1 | cut -d' ' -f1)" = "$n" ] || fail "$n calls itself '$(echo "$out" | cut -d' ' -f1)'"
    echo "$out" | grep -q rxe0-ready || fail "$n: rxe0 is not ACTIVE with its data address"
    [ "$(echo "$out" | head -n 1 | cut -d' ' -f3)" = "$(data_addr "$n")" ] || fail "$n: VL_ADDR0 is not $(data_addr "$n")"
    ids="$ids $(echo "$out" | head -n 1 | cut -d' ' -f2)"
done
[ "$(echo "$ids" | tr ' ' '\n' | grep -c .)" = "$(echo "$ids" | tr ' ' '\n' | grep . | sort -u | grep -c .)" ] \
    || fail "two nodes share a kernel boot id: they are not separate hosts ($ids)"

step "Slurm knows every node, idle"
sinfo -N -h -o '%N %T' | tee "$TMPDIR/sinfo"
[ "$(grep -c ' idle' "$TMPDIR/sinfo")" = "$VL_NODES" ] || fail "not every node is idle in Slurm"

step "the fabric: every port of every switch up"
fabric ports | tee "$TMPDIR/ports"
[ "$(fabric topology)" = "$VL_TOPO" ] || fail "the fabric says it is $(fabric topology), the cluster $VL_TOPO"
for n in $(nodes); do
    grep -Eq "^(leaf[12]|switch) +$n +up " "$TMPDIR/ports" || fail "no switch port toward $n that is up"
done
if [ "$VL_TOPO" = leaf-spine ]; then
    for p in "leaf1 +spine1" "leaf1 +spine2" "leaf2 +spine1" "leaf2 +spine2" "spine1 +leaf1" "spine2 +leaf2"; do
        grep -Eq "^$p +up " "$TMPDIR/ports" || fail "no uplink '$p' up"
    done

    step "routed across the leaves (TTL 64 - 3 routers), switched within one"
    far=node$VL_NODES
    ping -c 1 -W 5 "$(data_addr "$far")" | tee "$TMPDIR/ping"
    grep -q 'ttl=61' "$TMPDIR/ping" || fail "node1 -> $far: expected ttl=61 (leaf, spine, leaf)"
    ping -c 1 -W 5 "$(data_addr node2)" | tee "$TMPDIR/ping2"
    grep -q 'ttl=64' "$TMPDIR/ping2" || fail "node1 -> node2 (same leaf): expected ttl=64 (no router)"
fi

step "a vl-fabric mistake is a usage error (exit 2) that names the links"
rc=0
fabric link node9 down >"$TMPDIR/bad" 2>&1 || rc=$?
cat "$TMPDIR/bad"
[ "$rc" = 2 ] || fail "vl-fabric link node9 down: exit $rc, expected 2"
expect_contains "$TMPDIR/bad" "no link 'node9'"
