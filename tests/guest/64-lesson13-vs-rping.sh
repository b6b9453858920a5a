#!/bin/sh
# Interoperability of lesson 13 with librdmacm's rping (rdmacm-utils), in both directions, on
# rping's default port 7174: rping's client against our server (which checks every ping it
# RDMA-reads), and our client (which checks every echo) against `rping -s`. Both sides run
# rping's -V and -v where it has them, so each side's view of the data is printed and checked.
# timeout: 240
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"

require_bin lesson13_rdma_cm
require_bin rping
pings=20
size=100
SC_WAIT=wait_cm_port

step "lesson13 server <- rping client (rping -c -a $VL_ADDR0 -C $pings -S $size -v -V)"
server_client 7174 "lesson13_rdma_cm -S $size -v --wait 60" \
    "rping -c -a $VL_ADDR0 -C $pings -S $size -v -V"
expect_contains "$SERVER_OUT" "private data: 56 bytes, all zero (an rping client sends none"
expect_contains "$SERVER_OUT" "server: $pings pings of up to $size bytes read, checked and written back; the client disconnected"
n=$(grep -c '^ping data: rdma-ping-' "$CLIENT_OUT" || true)
[ "$n" -eq "$pings" ] || fail "rping printed $n echoes, expected $pings"
expect_contains "$CLIENT_OUT" "ping data: rdma-ping-$((pings - 1)): "
expect_not_contains "$CLIENT_OUT" "data mismatch"

step "rping server (rping -s -a $VL_ADDR0 -S $size -v) <- lesson13 client"
server_client 7174 "rping -s -a $VL_ADDR0 -S $size -v" \
    "lesson13_rdma_cm -S $size -C $pings -v --wait 60 $VL_ADDR0"
expect_contains "$CLIENT_OUT" "is not ours: an rping server sends none"
expect_contains "$CLIENT_OUT" "client: $pings pings of $size bytes to $VL_ADDR0:7174, each RDMA-read by the server and written back, all verified"
n=$(grep -c '^server ping data: rdma-ping-' "$SERVER_OUT" || true)
[ "$n" -eq "$pings" ] || fail "rping's server printed $n pings, expected $pings"
n=$(grep -c '^ping data: rdma-ping-' "$CLIENT_OUT" || true)
[ "$n" -eq "$pings" ] || fail "our client printed $n echoes, expected $pings"
echo "interop with rping, both directions, passed"
