#!/bin/sh
# Lesson 08: remote atomics. Two client processes hammer one word at the same time with
# fetch-and-add and compare-and-swap loops; the server checks the final value equals the
# initial value plus every increment, and that every value in between was handed out exactly
# once. Then the error demonstrations: a misaligned atomic, and REMOTE_ATOMIC missing from the
# word's MR (IBV_WC_REM_ACCESS_ERR) or from the QP.
# timeout: 240
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"

require_bin lesson08_atomics
L=lesson08_atomics
srv=$TMPDIR/server.out c1=$TMPDIR/client1.out c2=$TMPDIR/client2.out

step "two concurrent clients, 1000 fetch-and-adds + 1000 CAS increments each, on one word"
# 1000 of each, not fewer: the server starts its clients one after the other, and 150 of each
# (36 ms on rxe) let a client finish before the second one was scheduled, once in a CI run.
$L -d "$VL_DEV0" -p 18330 --clients 2 --initial 5000 >"$srv" 2>&1 &
spid=$!
wait_port 18330 30 "$spid"
$L -d "$VL_DEV1" -p 18330 -n 1000 "$VL_ADDR0" >"$c1" 2>&1 &
p1=$!
$L -d "$VL_DEV1" -p 18330 -n 1000 "$VL_ADDR0" >"$c2" 2>&1 &
p2=$!
rc1=0 rc2=0 rcs=0
_vl_watch "$p1" 120 || rc1=$?
_vl_watch "$p2" 120 || rc2=$?
_vl_watch "$spid" 60 || rcs=$?
_vl_show server "$rcs" "$L --clients 2" "$srv"
_vl_show "client 1" "$rc1" "$L -n 1000" "$c1"
_vl_show "client 2" "$rc2" "$L -n 1000" "$c2"
if [ "$rcs" -ne 0 ] || [ "$rc1" -ne 0 ] || [ "$rc2" -ne 0 ]; then
    fail "exit statuses: server $rcs, clients $rc1 $rc2"
fi
expect_contains "$srv" "client 1/2: done: 1000 fetch-and-adds + 1000 compare-and-swap increments"
expect_contains "$srv" "client 2/2: done: 1000 fetch-and-adds + 1000 compare-and-swap increments"
expect_contains "$srv" "final value 9000 == initial 5000 + 4000 increments from 2 client(s): correct"
expect_contains "$srv" "every value from 5000 to 8999 was returned exactly once"
expect_contains "$c1" "IBV_WR_ATOMIC_FETCH_AND_ADD: remote 0x"
# The byte order of atomic results is the device's: each client learns it from a fetch-and-add
# of 0 on the probe word (0x0102030405060708), and rxe answers in host order (README exercise 1).
expect_contains "$srv" "the probe word at +8 holds 0x0102030405060708"
expect_contains "$srv" "the probe word still holds 0x0102030405060708"
for c in "$c1" "$c2"; do
    expect_contains "$c" "(the probe word) rkey 0x"
    expect_contains "$c" "atomic result bytes [08, 07, 06, 05, 04, 03, 02, 01] for the probe word 0x0102030405060708: host order (little-endian here)"
done
expect_contains "$c1" "IBV_WR_ATOMIC_CMP_AND_SWP: compare "
# The clients really ran at the same time: one saw the other's increments between its own.
grep -q -F "with gaps: another client's atomics came in between" "$c1" "$c2" \
    || fail "neither client saw the other's atomics between its own: they did not overlap"

step "--show-errors: a fetch-and-add at word + 4 (misaligned)"
server_client 18331 "$L -d $VL_DEV0 -p 18331" "$L -d $VL_DEV1 -p 18331 --show-errors $VL_ADDR0"
# rxe refuses it in ibv_post_send, before anything is sent; the QP stays usable.
expect_contains "$CLIENT_OUT" "misaligned fetch-and-add at word + 4 -> ibv_post_send:EINVAL"
expect_contains "$CLIENT_OUT" "or an atomic whose remote address is not 8-byte aligned"
expect_contains "$CLIENT_OUT" "the QP still works — an aligned compare-and-swap (compare 18446744073709551615, never equal) read the word: 1000"
expect_contains "$SERVER_OUT" "client 1/1: error demonstration: its misaligned atomic ended with ibv_post_send:EINVAL"
expect_contains "$SERVER_OUT" "final value 1000 == initial 1000 + 0 increments"

step "--no-atomic-access (the MR lacks REMOTE_ATOMIC): IBV_WC_REM_ACCESS_ERR, word unchanged"
if server_client 18332 "$L -d $VL_DEV0 -p 18332 --no-atomic-access" "$L -d $VL_DEV1 -p 18332 -q $VL_ADDR0"; then
    fail "the client's atomics succeeded against a word without REMOTE_ATOMIC"
fi
[ "$SERVER_RC" -eq 0 ] || fail "the server should confirm the refusal and exit 0 (got $SERVER_RC)"
if [ "$CLIENT_RC" -eq 0 ] || [ "$CLIENT_RC" -eq 124 ]; then
    fail "the client should fail on its own (got $CLIENT_RC)"
fi
expect_contains "$SERVER_OUT" "access LOCAL_WRITE|REMOTE_READ, rkey"
# The first atomic a client sends is the probe: it is the one refused.
expect_contains "$CLIENT_OUT" "lesson08_atomics: error: IBV_WR_ATOMIC_FETCH_AND_ADD on the probe word at 0x"
expect_contains "$CLIENT_OUT" "completed with IBV_WC_REM_ACCESS_ERR (remote access error)"
expect_contains "$SERVER_OUT" "client 1/1: its atomics failed with IBV_WC_REM_ACCESS_ERR"
expect_contains "$SERVER_OUT" "final value 1000 == initial 1000: no atomic reached the word (refused with IBV_WC_REM_ACCESS_ERR)"

step "--no-atomic-access=qp (the QP lacks REMOTE_ATOMIC): rxe answers IBV_WC_REM_INV_REQ_ERR"
if server_client 18333 "$L -d $VL_DEV0 -p 18333 -q --no-atomic-access=qp" "$L -d $VL_DEV1 -p 18333 -q $VL_ADDR0"; then
    fail "the client's atomics succeeded on a QP without REMOTE_ATOMIC"
fi
[ "$SERVER_RC" -eq 0 ] || fail "the server should confirm the refusal and exit 0 (got $SERVER_RC)"
expect_contains "$CLIENT_OUT" "completed with IBV_WC_REM_INV_REQ_ERR"
expect_contains "$SERVER_OUT" "no atomic reached the word (refused with IBV_WC_REM_INV_REQ_ERR)"
step "the server vanishes while a client's atomics run: IBV_WC_RETRY_EXC_ERR, not a silent hang"
# Issue 15: an atomic sent to a QP that no longer exists is never answered. The lessons connect
# with a retry count of 6, so the client's NIC gives up after 7 ack timeouts (-u 18: ~1.1 s
# each) with a failed completion; with 7, rxe would retransmit for ever and only --wait ends it.
$L -d "$VL_DEV0" -p 18334 -q >"$TMPDIR/vanish-server.out" 2>&1 &
spid=$!
wait_port 18334 30 "$spid"
$L -d "$VL_DEV1" -p 18334 -n 10000 --wait 60 "$VL_ADDR0" >"$TMPDIR/vanish-client.out" 2>&1 &
cpid=$!
wait_for 60 "$cpid" grep -q -F "fetch-and-adds of 1, then" "$TMPDIR/vanish-client.out" \
    || { cat "$TMPDIR/vanish-client.out"; fail "the client never started its atomics ($(scaled 60) s)"; }
kill -9 "$spid"
rc=0
_vl_watch "$cpid" 120 || rc=$?
_vl_show "client (server killed)" "$rc" "$L -n 10000" "$TMPDIR/vanish-client.out" | tail -n 3
if [ "$rc" -eq 0 ]; then
    echo "note: the client finished its 20000 atomics before the server was killed: nothing to check"
else
    [ "$rc" -eq 1 ] || fail "the client should fail on its own with exit 1 (got $rc)"
    expect_contains "$TMPDIR/vanish-client.out" "completed with IBV_WC_RETRY_EXC_ERR"
fi
echo "lesson 08 scenarios passed"
