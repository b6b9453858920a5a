#!/bin/sh
# Faults and bad input for lessons 03 and 04. Each must end in bounded time with a message that
# names the step that was waiting, or refuse the input with the reason:
#   - a client with no server, a server with no client (OOB connect / accept);
#   - a peer killed with SIGKILL in the middle of a ping-pong (either side);
#   - ibv_rc_pingpong without -g on RoCE (it sends GID zero); different -s on the two sides;
#   - nonsense flags: size 0, unknown device, unusable GID index, bad MTU, size above max_msg_sz.
# timeout: 300
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"

require_bin lesson03_connect
require_bin lesson04_send_recv
out=$TMPDIR/fault.out

step "a client with no server gives up after --wait, naming the OOB connect"
expect_fail_within 30 "lesson04 client, no server" \
    lesson04_send_recv -d "$VL_DEV1" -p 18571 --wait 4 "$VL_ADDR0"
expect_contains "$out" "out-of-band connection: timed out after 4 s waiting for the server at $VL_ADDR0:18571 to accept"
expect_fail_within 30 "lesson03 client, no server" \
    lesson03_connect -d "$VL_DEV1" -p 18571 --wait 4 "$VL_ADDR0"
expect_contains "$out" "waiting for the server at $VL_ADDR0:18571 to accept"

step "a server with no client gives up after --wait, naming the accept"
expect_fail_within 30 "lesson04 server, no client" lesson04_send_recv -d "$VL_DEV0" -p 18572 --wait 4
expect_contains "$out" "timed out after 4 s waiting for a client to connect to TCP port 18572"

# lesson04_killed VICTIM PORT: kill one side of a long ping-pong once the client has sent; the
# other side must end, naming the iteration it waited for (a completion that never came) or the
# retry-exhausted SEND. The server waits 15 s times the suite's time scale, not 5 (as in scenario
# 34): its --wait also bounds its accept, which covers the client's whole start, and on a busy
# host (three --under-load suites at once, load average 20) that took over 15 s.
lesson04_killed() {
    _w=$(scaled 15)
    killed_mid_run lesson04_send_recv "$2" "$1" "first ibv_post_send" "-n 1000000 --wait $_w" \
        "-n 1000000 --wait 5" "timed out after $_w s waiting for iteration" \
        "timed out after 5 s waiting for iteration" "IBV_WC_RETRY_EXC_ERR"
    [ "$1" = client ] && _survivor=$srv || _survivor=$cli
    expect_contains "$_survivor" "iteration "
}

step "the client is killed mid-run: the server ends in bounded time, naming the step"
lesson04_killed client 18573
step "the server is killed mid-run: the client ends in bounded time, naming the step"
lesson04_killed server 18574

step "ibv_rc_pingpong without -g sends GID zero: refused with the fix"
server_client 18575 "lesson04_send_recv -d $VL_DEV0 -p 18575 --wait 20" \
    "ibv_rc_pingpong -d $VL_DEV1 -p 18575 $VL_ADDR0" && fail "GID zero was accepted"
expect_contains "$SERVER_OUT" "the peer sent GID zero, but $VL_DEV0 is RoCE (Ethernet)"
expect_contains "$SERVER_OUT" "give it -g, e.g. -g 1"

step "different -s on the two sides: the oversized SEND fails on both, and the error says why"
w=$(scaled 10) # the server's wait covers the client's start: grown with the suite's time scale
server_client 18576 "lesson04_send_recv -d $VL_DEV0 -p 18576 -s 4096 -n 5 --wait $w" \
    "lesson04_send_recv -d $VL_DEV1 -p 18576 -s 8192 -n 5 --wait $w $VL_ADDR0" && fail "a size mismatch went unnoticed"
expect_contains "$SERVER_OUT" "a posted receive (wr_id 1) completed with IBV_WC_"
expect_contains "$SERVER_OUT" "the usual cause is a different -s on the two sides"
expect_contains "$CLIENT_OUT" "our SEND (wr_id 2) completed with IBV_WC_"
expect_contains "$CLIENT_OUT" "the usual cause is a different -s on the two sides"

step "nonsense flags are refused with the reason"
expect_fail_within 30 "size 0" lesson04_send_recv -d "$VL_DEV0" -s 0
expect_contains "$out" "error: -s 0: too small; give 1 to 1G bytes"
expect_not_contains "$out" "[1] Open the device"
expect_fail_within 30 "iters 0" lesson04_send_recv -d "$VL_DEV0" -n 0
expect_contains "$out" "--iters 0: give 1 to 100000000"
expect_fail_within 30 "MTU 1500" lesson04_send_recv -d "$VL_DEV0" -m 1500
expect_contains "$out" "'1500' is not an MTU: use 256, 512, 1024, 2048 or 4096"
expect_fail_within 30 "unknown device" lesson04_send_recv -d nosuchdev0
expect_contains "$out" "RDMA device 'nosuchdev0' not found; available: $VL_DEV0, $VL_DEV1"
expect_fail_within 30 "unknown device (lesson03)" lesson03_connect -d nosuchdev0
expect_contains "$out" "available: $VL_DEV0, $VL_DEV1"
expect_fail_within 30 "empty GID index" lesson04_send_recv -d "$VL_DEV0" -g 7
expect_contains "$out" "GID index 7 is empty or out of range on this port; populated indexes: 0, 1"
expect_fail_within 30 "size above max_msg_sz" lesson04_send_recv -d "$VL_DEV0" -s 16777216
expect_contains "$out" "-s 16777216: larger than the port's max_msg_sz of"
echo "fault scenarios passed"
