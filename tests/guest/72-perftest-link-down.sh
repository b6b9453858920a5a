#!/bin/sh
# shellcheck disable=SC2086 # $VL_PT_COMMON holds several options, split on purpose
# A link that goes away under a running benchmark ends it, named, on both sides — and the
# guest's devices are put back exactly as the guest's /init made them.
# 1. `ip link set veth1 down` in the middle of a -D run: the device's asynchronous event
#    (IBV_EVENT_PORT_ERR; rxe0 sees it too, as veth0 loses its carrier) ends both sides within
#    seconds, exit 1, each naming the port that went down (or the peer's report of it).
# 2. `rdma link delete rxe1` in the middle of a -D run: the tool on rxe1 sees the device being
#    removed, ends (exit 1, named) and tells its peer (exit 1, naming the client's report);
#    the delete, which on rxe waits for every process to close the device, then returns.
# 3. The same under vl_all_reduce_perf --np 2: the ranks end, exit 1, a rank naming its own
#    port that went down (not its neighbour as gone, nor its request as malformed).
# 4. `rdma link delete rxe1` while a server on rxe1 still waits for its client: the server ends
#    (exit 1, naming the removal) instead of holding the device for a client that never comes,
#    and the delete returns. 5. The same for a client on rxe1 whose server does not answer yet.
# After each: veth1 up (or rxe1 re-created on veth1), both ports ACTIVE with their GIDs, and a
# short vl_send_bw pair proves traffic flows again.
# timeout: 540
# slow: six faulted runs under TCG, each followed by a restore and a vl_send_bw pair that proves the devices work again (33-67 s)
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"
# shellcheck source=tests/guest/perftest-lib.sh
. "$VL_TESTS/perftest-lib.sh"

IP=/usr/sbin/ip
srv=$TMPDIR/srv.out
cli=$TMPDIR/cli.out
del=$TMPDIR/delete.out

trap 'restore_link || fail "the devices are not restored for the next scenario (above)"' EXIT

# start_pair TOOL: a -D 40 pair, server on rxe0, client on rxe1; returns once the measured
# run is under way. Sets SPID, CPID.
start_pair() {
    next_port
    "$1" -d "$VL_DEV0" $VL_PT_COMMON -p "$PORT" -D 40 >"$srv" 2>&1 &
    SPID=$!
    wait_port "$PORT" 60 "$SPID"
    "$1" -d "$VL_DEV1" $VL_PT_COMMON -p "$PORT" -D 40 "$VL_ADDR0" >"$cli" 2>&1 &
    CPID=$!
    wait_header "$cli" "$CPID"
    sleep 2
}

# end_pair LIMIT: waits (at most LIMIT s each) for both sides; sets SRC, CRC and SECS (whole
# seconds from T0 until both had ended); prints both outputs.
end_pair() {
    CRC=0
    _vl_watch "$CPID" "$1" || CRC=$?
    SRC=0
    _vl_watch "$SPID" "$1" || SRC=$?
    _ep=$(($(_vl_now) - T0))
    SECS=$((_ep / 100))
    echo "both sides ended $SECS.$((_ep % 100 / 10)) s after the fault (server exit $SRC, client exit $CRC)"
    echo "--- server (exit $SRC)"
    cat "$srv"
    echo "--- client (exit $CRC)"
    cat "$cli"
}

# delete_returned: waits (at most $lim) for the `rdma link delete` begun at T0 (pid DPID, output
# in $del); sets DRC and DCS (hundredths of a second from T0) and prints what it said.
delete_returned() {
    DRC=0
    _vl_watch "$DPID" "$lim" || DRC=$?
    DCS=$(($(_vl_now) - T0))
    echo "--- rdma link delete rxe1 (exit $DRC, returned $((DCS / 100)).$((DCS % 100 / 10)) s after it began)"
    cat "$del"
}

# rxe1_deleted: the delete succeeded within $lim and rxe1 is gone; then the devices are restored.
rxe1_deleted() {
    [ "$DRC" = 0 ] || fail "rdma link delete rxe1 exited $DRC"
    within "seconds until rdma link delete returned" $((DCS / 100)) 0 "$lim"
    [ ! -e /sys/class/infiniband/rxe1 ] || fail "rxe1 still exists after rdma link delete returned"
    traffic_again
}

# traffic_again: both devices as /init left them, and a short send_bw pair carries traffic.
traffic_again() {
    restore_link || fail "the devices are not ready after the restore (above)"
    rdma link show rxe1/1 | grep -q 'netdev veth1' || fail "rxe1 is not on veth1: $(rdma link show)"
    $IP link show veth1 | grep -q 'mtu 9000' || fail "veth1 lost its MTU 9000"
    vl_pair_ok vl_send_bw "-s 4096 -n 100"
    expect_row "$CLIENT_OUT" "vl_send_bw after the restore (client)"
    expect_row "$SERVER_OUT" "vl_send_bw after the restore (server)"
}

# link_down TOOL: veth1 goes down in the middle of a TOOL -D 40 pair; both sides end within
# 10 s, exit 1, each naming the port that went down (rxe0 loses its carrier with veth1, so the
# server may name its own port or the client's report); then the devices are restored.
link_down() {
    step "ip link set veth1 down in the middle of $1 -D 40"
    start_pair "$1"
    T0=$(_vl_now)
    $IP link set veth1 down
    end_pair 30
    within "seconds until both sides ended after the link went down" "$SECS" 0 10
    [ "$CRC" = 1 ] || fail "the client exited $CRC, expected 1"
    [ "$SRC" = 1 ] || fail "the server exited $SRC, expected 1"
    expect_contains "$cli" "port 1 of rxe1 went down (IBV_EVENT_PORT_ERR)"
    grep -q -E "port 1 of rxe[01] went down \(IBV_EVENT_PORT_ERR\)" "$srv" \
        || fail "the server does not name the port that went down"
    # Named at once, not after the QP's retries ran out.
    expect_not_contains "$cli" "RETRY_EXC_ERR"
    traffic_again
}

link_down vl_write_bw
link_down vl_send_lat

step "ip link set veth1 down in the middle of vl_all_reduce_perf --np 2 on rxe0,rxe1"
# The ranks' work requests fail on the port that went down (rxe reports IBV_WC_LOC_QP_OP_ERR):
# a rank names its own port, not its neighbour as "gone" nor its request as malformed.
coll=$TMPDIR/coll.out
vl_all_reduce_perf --np 2 --ib-dev "$VL_DEV0,$VL_DEV1" -b 1M -e 1M -n 100000 -w 0 --timeout 10 \
    >"$coll" 2>&1 </dev/null &
CPID=$!
wait_for 90 - grep -q -F -e "#  Rank  1" "$coll" 2>/dev/null \
    || { cat "$coll"; fail "the ranks were not listed"; }
sleep 2
T0=$(_vl_now)
$IP link set veth1 down
CRC=0
_vl_watch "$CPID" "$(scaled 40)" || CRC=$?
_ep=$(($(_vl_now) - T0))
echo "--- vl_all_reduce_perf --np 2 (exit $CRC, ended $((_ep / 100)).$((_ep % 100 / 10)) s after the fault)"
cat "$coll"
[ "$CRC" = 1 ] || fail "vl_all_reduce_perf exited $CRC, expected 1"
grep -q -E "port 1 of rxe[01] is DOWN, not ACTIVE: this rank's link went down" "$coll" \
    || fail "no rank named its port that went down"
expect_not_contains "$coll" "malformed"
traffic_again

step "rdma link delete rxe1 in the middle of vl_write_bw -D 40"
# rxe cannot detach a process from a device (no disassociate_ucontext): the kernel sends no
# event and `rdma link delete` waits until every process has closed the device. It removes the
# device's uverbs node first; the tool's watcher sees that, ends the run named, tells the peer
# and closes the device, so the delete completes at once instead of after the run.
# The bounds grow with the time scale: under load (--under-load 2, three suites at once) the
# delete itself took 51 s to return, the tools' ends inside it.
lim=$(scaled 45)
start_pair vl_write_bw
T0=$(_vl_now)
rdma link delete rxe1 >"$del" 2>&1 &
DPID=$!
end_pair "$lim"
delete_returned
# 45 s: both sides ended 0.7-1.7 s after the delete began in three runs, 11 s and 16 s in two more
# (the kernel removes the device's uverbs directory, which the tools watch, only partway through).
within "seconds until both sides ended after the delete began" "$SECS" 0 "$lim"
[ "$CRC" = 1 ] || fail "the client exited $CRC, expected 1"
[ "$SRC" = 1 ] || fail "the server exited $SRC, expected 1"
expect_contains "$cli" "rxe1 is being removed (rdma link delete"
expect_contains "$srv" "the client reported: rxe1 is being removed"
rxe1_deleted

# delete_under_waiter WHO PID OUT: rdma link delete rxe1 while process PID (a WHO, its output in
# OUT) holds rxe1 open waiting for its peer; it ends within the bound, exit 1, naming the
# removal (not a timeout), and the delete returns; then the devices are restored.
delete_under_waiter() {
    lim=$(scaled 45)
    T0=$(_vl_now)
    rdma link delete rxe1 >"$del" 2>&1 &
    DPID=$!
    WRC=0
    _vl_watch "$2" "$lim" || WRC=$?
    WCS=$(($(_vl_now) - T0))
    echo "--- the waiting $1 (exit $WRC, ended $((WCS / 100)).$((WCS % 100 / 10)) s after the delete began)"
    cat "$3"
    delete_returned
    [ "$WRC" = 1 ] || fail "the waiting $1 exited $WRC, expected 1"
    expect_contains "$3" "rxe1 is being removed (rdma link delete"
    expect_not_contains "$3" "timed out"
    rxe1_deleted
}

step "rdma link delete rxe1 while a vl_read_bw server on it waits for its client"
# No client comes: the server holds rxe1 open, and the delete waits for it. The server looks at
# its device's watch every 250 ms while it waits, so the removal ends it, named.
next_port
vl_read_bw -d "$VL_DEV1" $VL_PT_COMMON -p "$PORT" >"$srv" 2>&1 &
SPID=$!
wait_port "$PORT" 60 "$SPID"
delete_under_waiter server "$SPID" "$srv"

step "rdma link delete rxe1 while a vl_write_bw client on it waits for a server that is not there"
# The client retries its connection (--wait 300) and looks at its device between attempts.
next_port
vl_write_bw -d "$VL_DEV1" $VL_PT_COMMON -p "$PORT" --wait 300 "$VL_ADDR0" >"$cli" 2>&1 &
CPID=$!
sleep 3
kill -0 "$CPID" 2>/dev/null || { cat "$cli"; fail "the client did not wait for its server"; }
delete_under_waiter client "$CPID" "$cli"
echo "link-down and device-delete runs end on both sides, named, as do a server still waiting for its client and a client still waiting for its server; the devices are restored"
