#!/bin/sh
# Lesson 14: every row of the tuning table is printed, the bytes arrived (the lesson compares the
# receiving slots after each run and exits 1 on a difference; rxe1's packet counter must grow by
# at least one packet per write), CQ moderation gives its verdict, and the send-queue slot probe
# reports what the provider did; a type 2 memory window is bound, written through, invalidated
# and then refuses the peer's write. No timing is asserted: the lesson measures, the test checks.
# timeout: 240
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"

require_bin lesson14_tuning
L=lesson14_tuning
out=$TMPDIR/l14.out

step "$L -n 1000 --pp-iters 100 -r 2"
before=$(hw_counter "$VL_DEV1" rcvd_pkts)
rc=0
run_timeout 200 $L --dev-a "$VL_DEV0" --dev-b "$VL_DEV1" -n 1000 --pp-iters 100 -r 2 >"$out" 2>&1 || rc=$?
cat "$out"
[ "$rc" = 0 ] || fail "$L exited with status $rc"
after=$(hw_counter "$VL_DEV1" rcvd_pkts)
# 5 stream settings x 2 rounds x 1000 writes, each at least one packet.
num_gt "$((after - before))" 9999 || fail "$VL_DEV1 received $((after - before)) packets, expected at least 10000"
echo "$VL_DEV1 received $((after - before)) packets"

expect_contains "$out" "slots on $VL_DEV1 equalled the 64 source slots byte for byte"
for row in "signaling   every WR signaled" "signaling   every 16th signaled" \
    "inline      off (NIC reads the SGE)" "inline      IBV_SEND_INLINE" \
    "post list   1 WR per ibv_post_send" "post list   16 WRs per ibv_post_send" \
    "poll batch  ibv_poll_cq n=1" "poll batch  ibv_poll_cq n=16" \
    "wait        busy polling" "wait        events (channel)" \
    "placement   same core" "placement   different cores"; do
    line=$(grep -F -e "$row" "$out" | tail -n 1)
    [ -n "$line" ] || fail "no table row '$row'"
    # result and ratio must be numbers (not '-': every setting ran on the guest's 2 vCPUs)
    echo "$line" | grep -E -q ' [0-9]+(\.[0-9])? (kmsg/s|µs RTT) +[0-9]+\.[0-9]{2}x ' \
        || fail "row '$row' has no measured value and ratio: $line"
done
# The fixed facts of the stream runs: post lists cut the calls, signaling cuts the polls.
expect_contains "$out" "1000 writes: 63 ibv_post_send, 63 completions in "
expect_contains "$out" "1000 writes: 1000 ibv_post_send, 1000 completions in 1000 ibv_poll_cq"
expect_contains "$out" "moderation  ibv_modify_cq              refused: ibv_modify_cq failed: Operation not supported on transport endpoint (EOPNOTSUPP)"
expect_contains "$out" "accepted: this provider frees slots of executed unsignaled requests without a polled completion"
# The memory window: bound, written through (bytes checked by the lesson), invalidated, refused.
expect_contains "$out" "region of 64 bytes (rkey "
expect_contains "$out" "access LOCAL_WRITE|REMOTE_WRITE|MW_BIND), window allocated with rkey"
expect_contains "$out" ": completed, bytes in the region checked"
expect_contains "$out" "MW          type 2: bind, invalidate   write through rkey "
expect_contains "$out" "after IBV_WR_LOCAL_INV the next one: IBV_WC_REM_ACCESS_ERR, region unchanged"

step "$L -n 10: a usage error, exit 2"
rc=0
$L -n 10 >"$out" 2>&1 || rc=$?
cat "$out"
[ "$rc" = 2 ] || fail "-n 10 exited with $rc, expected 2"
expect_contains "$out" "-n 10: give 64 to 10000000 writes"
echo "lesson 14 table complete"
