#!/bin/sh
# Lesson 12: 16 RC QPs per side share one SRQ; every message is checked against its QP's
# pattern; the SRQ limit fires as IBV_EVENT_SRQ_LIMIT_REACHED (and is re-armed). Then
# --show-port-down: while messages flow, veth1 goes down for 2 s and up again; both sides see
# IBV_EVENT_PORT_ERR then IBV_EVENT_PORT_ACTIVE, every message that completes is verified, and
# the client says what became of the traffic.
# timeout: 300
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"

require_bin lesson12_srq_events
port=18573
iters=600

step "lesson12_srq_events server on $VL_DEV0, client on $VL_DEV1: $iters messages over 16 QPs"
server_client "$port" "lesson12_srq_events -d $VL_DEV0 -p $port -n $iters --wait 60" \
    "lesson12_srq_events -d $VL_DEV1 -p $port -n $iters --wait 60 $VL_ADDR0"
step "checks"
for f in "$SERVER_OUT" "$CLIENT_OUT"; do
    expect_contains "$f" "(asked 500), max_sge 1, srq_limit 0 (disarmed)"
    expect_contains "$f" "16 RC QPs"
    expect_contains "$f" "srq_limit 250 (read back)"
    expect_contains "$f" "the peer is lesson12 (its marker record is there)"
    expect_contains "$f" "$iters iters in "
    expect_contains "$f" "payload check: "
    expect_contains "$f" "bytes verified (each QP's own pattern), all intact"
    # 600 receives from a pool of 500 refilled at <= 16 left: the limit (250) is crossed.
    expect_contains "$f" "async event +"
    expect_contains "$f" "IBV_EVENT_SRQ_LIMIT_REACHED on an SRQ — fewer than 250 receives left; the device disarmed the limit"
    expect_contains "$f" "ibv_query_srq reads srq_limit 0 (0: the limit event disarmed it); re-armed at 250"
    expect_contains "$f" "at the end, ibv_query_srq: srq_limit 250 (armed"
    # 600-odd receives from a pool of 500, refilled once at <= 16 left and re-armed then: the
    # limit is crossed exactly once (the second pass ends above 250).
    expect_contains "$f" "IBV_EVENT_SRQ_LIMIT_REACHED 1 times (limit 250, re-armed after each refill)"
done

step "a mismatched --num-qp is refused with the reason"
w=$(scaled 10) # the server's wait covers the client's start: grown with the suite's time scale
server_client "$port" "lesson12_srq_events -d $VL_DEV0 -p $port -n 20 --num-qp 4 --wait $w" \
    "lesson12_srq_events -d $VL_DEV1 -p $port -n 20 --num-qp 8 --wait 30 $VL_ADDR0" && fail "mismatched --num-qp passed"
expect_contains "$CLIENT_OUT" "names no QP: it has fewer QPs than our --num-qp 8"

step "--show-port-down: veth1 down for 2 s while messages flow"
# Whatever happens, the link comes back and the guest's devices are ready for the next scenario.
trap 'restore_link || fail "the devices are not restored for the next scenario (above)"' EXIT
srv=$TMPDIR/pd-server.out cli=$TMPDIR/pd-client.out
lesson12_srq_events -d "$VL_DEV0" -p "$port" --show-port-down --wait 60 >"$srv" 2>&1 &
spid=$!
wait_port "$port" 60 "$spid"
lesson12_srq_events -d "$VL_DEV1" -p "$port" --show-port-down --wait 60 "$VL_ADDR0" >"$cli" 2>&1 &
cpid=$!
wait_for 60 "$cpid" grep -q "traffic running on QP 0" "$cli" \
    || { cat "$srv" "$cli"; fail "the client never started its traffic"; }
sleep 1
step "ip link set veth1 down; sleep 2; ip link set veth1 up"
/usr/sbin/ip link set veth1 down
sleep 2
/usr/sbin/ip link set veth1 up
restore_link || fail "the devices are not ready after the link came back (above)"
rcs=0 rcc=0
_vl_watch "$cpid" 120 || rcc=$?
_vl_watch "$spid" 30 || rcs=$?
echo "--- server (exit $rcs)"; cat "$srv"
echo "--- client (exit $rcc)"; cat "$cli"
[ "$rcs" -eq 0 ] && [ "$rcc" -eq 0 ] || fail "--show-port-down: server exit $rcs, client exit $rcc"
for f in "$srv" "$cli"; do
    expect_contains "$f" "IBV_EVENT_PORT_ERR on port 1 — the link is down"
    expect_contains "$f" "IBV_EVENT_PORT_ACTIVE on port 1 — the link is up again"
    expect_contains "$f" "--show-port-down done in "
done
expect_contains "$srv" "server: echoed "
expect_contains "$srv" "messages on QP 0, every one verified"
# What the traffic did is the provider's: on rxe a send whose own port is down fails
# (IBV_WC_LOC_QP_OP_ERR seen); elsewhere RC may carry it across. Either way it is said.
grep -E -q "client: [0-9]+ messages verified(, [0-9]+ of them sent while the port was down and delivered|, then message [0-9]+ failed with IBV_WC_)" "$cli" \
    || fail "the client did not say what happened to its traffic"
echo "lesson12 scenario passed"
