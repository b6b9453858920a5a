#!/bin/sh
# A cluster's trouble, mid-collective, on 4 nodes x 2 ranks (each rank started over ssh with
# --rank/--world-size/--master, as a hand-made launcher would):
# - a node killed (its QEMU gets SIGKILL: a power cut, no FIN on any socket): every surviving
#   rank ends non-zero within its peer timeout, naming a rank of the dead node or the node;
# - a fabric link taken down (the switch port and both NICs lose carrier): every rank ends
#   non-zero within its bound, naming who it lost; after the link comes back the same world
#   runs clean again.
# - a node's NIC removed mid-write (a hot-unplug, as its kernel sees it: the PCI device goes,
#   eth0 and rxe0 with it): the tool on that node ends non-zero saying its device went, the peer
#   ends non-zero within its bound.
# Nothing is left behind on any survivor: no process of ours, no QP, CQ, MR or PD.
# cluster: nodes=4 topology=leaf-spine
# timeout: 900
# slow: two eight-rank worlds that run until a fault stops them, and a node booted again
set -eu
# shellcheck source=tests/cluster/lib.sh
. "$VL_TESTS/lib.sh"
# shellcheck source=tests/cluster/coll.sh
. "$VL_TESTS/coll.sh"
trap 'restore_cluster' EXIT

T=20   # the ranks' peer timeout (-T): a neighbour silent this long is reported to rank 0, whose verdict names who went
# A long run: 1 MiB all-reduces, every element checked, long enough to be cut in the middle.
ARGS="--ib-dev rxe0 -b 1M -e 1M -n 100000 -w 1 -c 1 -T $T --bootstrap-timeout 120"

# start_world PORT: ranks 0..7, two per node (rank r on node r/2+1), outputs $TMPDIR/rR.out.
start_world() {
    PIDS=''
    for r in 0 1 2 3 4 5 6 7; do
        n=node$((r / 2 + 1))
        remote_bg "$n" "exec vl_all_reduce_perf $ARGS --rank $r --world-size 8 --master node1:$1" "$TMPDIR/r$r.out"
        PIDS="$PIDS $BG_PID"
        eval "PID$r=\$BG_PID"
    done
    # Under way: rank 0 printed the header and its rank table (the world formed).
    wait_for 150 "$PID0" grep -q '^#  Rank  7' "$TMPDIR/r0.out" \
        || { cat "$TMPDIR/r0.out"; fail "the world of 8 did not form"; }
    sleep 3
}

step "a node killed mid-all-reduce: node3 (ranks 4 and 5) loses power"
start_world 29801
host_ctl kill node3
# Every survivor names a rank of node3 — not the live neighbour downstream that went silent
# waiting on it (rank 0 pings a reported rank before it is called gone).
expect_survivors_fail "node3 killed" 'rank [45] \(host node3' 0 1 2 3 6 7
for r in 4 5; do eval "kill \$PID$r 2>/dev/null || true"; done
no_leftovers node1 node2 node4

step "node3 boots again"
host_ctl start node3
wait_node node3 180
reap_nodes

step "a fabric link down mid-all-reduce: node2's cable (ranks 2 and 3 cut off)"
start_world 29802
link_down node2
expect_survivors_fail "node2's link down" 'rank [0-9]|node[0-9]' 0 1 2 3 4 5 6 7
link_up node2
no_leftovers node1 node2 node3 node4

step "the link back up: the same world of 8 runs clean"
ARGS="--ib-dev rxe0 -b 8 -e 64K -f 8 -n 2 -w 1 -c 1 -T $T --bootstrap-timeout 120"
# Give rxe0 on node2 time to see its port ACTIVE again.
on node2 '. scripts/lib/rxe.sh; i=0; until rxe_ready rxe0 "$VL_ADDR0"; do i=$((i + 1)); [ $i -lt 300 ] || exit 1; sleep 0.1; done' \
    || fail "node2's rxe0 did not come back ACTIVE"
start_world 29803
for r in 0 1 2 3 4 5 6 7; do
    pid=$(eval "echo \$PID$r")
    rc=0
    _vl_watch "$pid" "$(scaled 150)" || rc=$?
    [ "$rc" = 0 ] || { cat "$TMPDIR/r$r.out"; fail "after the link came back, rank $r exited $rc"; }
done
expect_contains "$TMPDIR/r0.out" "# Out of bounds values : 0 OK"

step "node4's NIC removed mid-write: vl_write_bw node1 -> node4, then node4's eth0 unplugged"
remote_bg node4 "exec vl_write_bw -d rxe0 -u 20 -D 60 -s 65536" "$TMPDIR/srv.out"
srv=$BG_PID
vl_write_bw -d rxe0 -u 20 -D 60 -s 65536 --wait 60 node4 >"$TMPDIR/cli.out" 2>&1 &
cli=$!
wait_for 60 "$cli" grep -q 'remote address' "$TMPDIR/cli.out" || { cat "$TMPDIR/cli.out"; fail "the write never started"; }
sleep 3
on node4 'echo 1 >/sys/class/net/eth0/device/../remove' || fail "could not remove node4's NIC"
for side in srv cli; do
    pid=$(eval "echo \$$side")
    rc=0
    _vl_watch "$pid" "$(scaled 90)" || rc=$?
    echo "--- $side: exit $rc"
    tail -n 5 "$TMPDIR/$side.out"
    [ "$rc" != 124 ] || fail "$side still ran $(scaled 90) s after node4's NIC went"
    [ "$rc" != 0 ] || fail "$side exited 0 although node4's NIC went mid-run"
done
grep -Eiq 'remov|fatal|device' "$TMPDIR/srv.out" || fail "node4's vl_write_bw does not say its device went"
no_leftovers node1
host_ctl kill node4
host_ctl start node4
wait_node node4 180
