#!/bin/sh
# torchrun's way in one guest: one launcher per "node", `--np 2 --nnodes 2 --node-rank 0|1`,
# meeting at rank 0 on node 0 over TCP.
# - node 1's launcher runs in a UTS namespace of its own (host name node2): a host of its own
#   for the rendezvous, as another machine would be. Node 0 gives --master, node 1 the same
#   address as MASTER_ADDR/MASTER_PORT: one world of 4, ranks 0..3, local ranks 0 and 1 on each
#   of 2 hosts, every element checked, only rank 0 printing;
# - both launchers on one host: their ranks have the same local ranks, and rank 0 refuses the
#   job naming both ranks and saying one launcher per host;
# - a rank killed on node 1: its launcher names it, node 0's ranks fail naming it and its host,
#   both launchers end non-zero within their grace period, and no rank is left.
# timeout: 300
# slow: three runs of two launchers; the killed rank's peers wait for their peer timeout
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"

require_bin vl_all_reduce_perf
command -v unshare >/dev/null || fail "no unshare in the guest"

# start_nodes PORT UTS ARGS...: node 0's launcher (--master $VL_ADDR0:PORT) and node 1's
# (MASTER_ADDR/MASTER_PORT; in a UTS namespace with host name node2 when UTS is "own") in the
# background with ARGS; their pids in N0 and N1, their output in $TMPDIR/n0.out and n1.out.
start_nodes() {
    _sn_port=$1 _sn_uts=$2
    shift 2
    vl_all_reduce_perf --np 2 --nnodes 2 --node-rank 0 --master "$VL_ADDR0:$_sn_port" \
        --ib-dev "$VL_DEV0,$VL_DEV1" "$@" >"$TMPDIR/n0.out" 2>&1 </dev/null &
    N0=$!
    if [ "$_sn_uts" = own ]; then
        MASTER_ADDR=$VL_ADDR0 MASTER_PORT=$_sn_port unshare -u sh -c \
            'hostname node2 && exec vl_all_reduce_perf "$@"' sh \
            --nproc-per-node 2 --nnodes 2 --node_rank 1 --ib-dev "$VL_DEV0,$VL_DEV1" "$@" \
            >"$TMPDIR/n1.out" 2>&1 </dev/null &
    else
        MASTER_ADDR=$VL_ADDR0 MASTER_PORT=$_sn_port vl_all_reduce_perf \
            --nproc-per-node 2 --nnodes 2 --node_rank 1 --ib-dev "$VL_DEV0,$VL_DEV1" "$@" \
            >"$TMPDIR/n1.out" 2>&1 </dev/null &
    fi
    N1=$!
}

# nodes_rc SECS: waits (bounded) for both launchers; their exit statuses in RC0 and RC1.
nodes_rc() {
    RC0=0
    _vl_watch "$N0" "$1" || RC0=$?
    RC1=0
    _vl_watch "$N1" "$1" || RC1=$?
    echo "--- node 0 (exit $RC0)"
    cat "$TMPDIR/n0.out"
    echo "--- node 1 (exit $RC1)"
    cat "$TMPDIR/n1.out"
}

step "two nodes of 2 ranks, node 1 a host of its own: one world of 4, every element checked"
start_nodes 29541 own -b 16 -e 1M -f 4 -n 2 -w 1 -c 1 --timeout 30
nodes_rc 150
[ "$RC0" = 0 ] || fail "node 0's launcher exited $RC0"
[ "$RC1" = 0 ] || fail "node 1's launcher exited $RC1"
expect_contains "$TMPDIR/n0.out" \
    "nranks 4 (from --nnodes 2 x --np 2, one launcher per node, over TCP to $VL_ADDR0:29541)"
expect_contains "$TMPDIR/n0.out" "#  2 hosts, local ranks given by the launcher"
expect_contains "$TMPDIR/n0.out" "# Out of bounds values : 0 OK"
# Ranks 0 and 1 on this host, 2 and 3 on node2, local 0 and 1 on each, the devices round-robin.
for r in 0 1 2 3; do
    host=$(hostname)
    [ "$r" -lt 2 ] || host=node2
    grep -E "^#  Rank +$r .* on +$host device .* local $((r % 2)) of 2\$" "$TMPDIR/n0.out" >/dev/null \
        || fail "rank $r's line does not say 'on $host' and 'local $((r % 2)) of 2'"
done
devs=$(grep '^#  Rank' "$TMPDIR/n0.out" | awk '{ print $9 }' | tr '\n' ' ')
[ "$devs" = "$VL_DEV0 $VL_DEV1 $VL_DEV0 $VL_DEV1 " ] || fail "devices by local rank: $devs"
grep -E '^ +1048576 ' "$TMPDIR/n0.out" >/dev/null || fail "no 1 MiB row"
[ ! -s "$TMPDIR/n1.out" ] || fail "node 1 printed, but only rank 0 (on node 0) should"

step "both launchers on one host: rank 0 refuses their equal local ranks"
start_nodes 29542 shared -b 8 -e 8 -n 1 -w 0 -c 1 --timeout 30 --bootstrap-timeout 30
nodes_rc 90
[ "$RC0" = 1 ] || fail "node 0's launcher exited $RC0, expected 1"
[ "$RC1" = 1 ] || fail "node 1's launcher exited $RC1, expected 1"
expect_contains "$TMPDIR/n0.out" "rank 0 (host $(hostname), pid"
expect_contains "$TMPDIR/n0.out" "run on one host with the same local rank 0"
expect_contains "$TMPDIR/n0.out" "--nnodes: one launcher per host"
expect_contains "$TMPDIR/n1.out" "rank 0 refused the job"

step "a rank killed on node 1: both launchers end non-zero, naming it"
start_nodes 29543 own -b 1M -e 1M -n 100000 -w 0 -c 0 --timeout 20
wait_for 90 "$N0" grep -q -F -e "#  Rank  3" "$TMPDIR/n0.out" 2>/dev/null \
    || { cat "$TMPDIR/n0.out" "$TMPDIR/n1.out"; fail "no '#  Rank  3' in node 0's output"; }
sleep 3
victim=$(pids_with_args "*vl_all_reduce_perf*--rank 3 *" | tail -n 1)
[ -n "$victim" ] || fail "no rank 3 process found"
kill -KILL "$victim"
nodes_rc 90
for rc in "$RC0" "$RC1"; do
    if [ "$rc" = 0 ] || [ "$rc" = 124 ]; then fail "a launcher exited $rc"; fi
done
expect_contains "$TMPDIR/n1.out" "vl_all_reduce_perf: error: rank 3 (pid $victim) was killed by SIGKILL"
expect_contains "$TMPDIR/n0.out" "rank 3 (host node2, pid $victim"

step "nothing left behind"
sleep 1
# shellcheck disable=SC2009 # busybox: ps, not pgrep -a
left=$(ps -o pid,args 2>/dev/null | grep '[v]l_all_reduce_perf' || true)
[ -z "$left" ] || fail "ranks still running: $left"
echo "no rank left running"
