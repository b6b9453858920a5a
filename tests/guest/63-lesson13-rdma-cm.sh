#!/bin/sh
# Lesson 13 (rdma_cm) against itself: resolve, connect with private data in both directions,
# rping's READ/WRITE exchange with every ping checked on both sides, disconnect; then its faults
# (no server, unreachable and unknown addresses, mismatched sizes, bad flags) and the README's
# exercises, each with the answer the README folds away. Nothing may be left behind.
# timeout: 300
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"

require_bin lesson13_rdma_cm
port=18613
out=$TMPDIR/l13.out
SC_WAIT=wait_cm_port

step "our server on every address <- our client from $VL_ADDR1 ($VL_DEV1): 20 pings of 100 bytes"
server_client "$port" "lesson13_rdma_cm -p $port -S 100 --wait 60" \
    "lesson13_rdma_cm -p $port -S 100 -C 20 -a $VL_ADDR1 --wait 60 $VL_ADDR0"
expect_contains "$CLIENT_OUT" "RDMA_CM_EVENT_ADDR_RESOLVED: $VL_ADDR1 -> $VL_ADDR0:$port goes through $VL_DEV1 port 1"
expect_contains "$CLIENT_OUT" "RDMA_CM_EVENT_ROUTE_RESOLVED"
expect_contains "$CLIENT_OUT" "RDMA_READ it: 'hello from lesson13's server on $VL_DEV0'"
expect_contains "$CLIENT_OUT" "(max_rd_atomic 1, max_dest_rd_atomic 1); the server granted responder_resources 1, initiator_depth 1"
expect_contains "$CLIENT_OUT" "ping 0: 'rdma-ping-0: ABCDEFGHIJ"
expect_contains "$CLIENT_OUT" "client: 20 pings of 100 bytes to $VL_ADDR0:$port, each RDMA-read by the server and written back, all verified"
expect_contains "$SERVER_OUT" "RDMA_CM_EVENT_CONNECT_REQUEST from $VL_ADDR1:"
expect_contains "$SERVER_OUT" "on $VL_DEV0 port 1"
expect_contains "$SERVER_OUT" "private data: 56 bytes, ours: the client's sink is addr"
expect_contains "$SERVER_OUT" "RDMA_CM_EVENT_ESTABLISHED: QP"
expect_contains "$SERVER_OUT" "is RTS — the CM did INIT -> RTR -> RTS"
expect_contains "$SERVER_OUT" "ping 0: the client's sink is the one its private data announced"
expect_contains "$SERVER_OUT" "server: 20 pings of up to 100 bytes read, checked and written back; the client disconnected"

step "exercise 1: a client with no server is rejected at once, not timed out"
expect_fail_within 20 "no server" lesson13_rdma_cm -q -p "$port" "$VL_ADDR0"
[ "$FAIL_RC" -eq 1 ] || fail "no server: exit $FAIL_RC, expected 1"
expect_contains "$out" "expected RDMA_CM_EVENT_ESTABLISHED, got RDMA_CM_EVENT_REJECTED"
expect_contains "$out" "invalid service ID' (IB CM reject reason 8): nothing listens on that port"

step "exercise 2: the client's default (our sink in 24 bytes of private data) arrives as 56 bytes"
server_client "$port" "lesson13_rdma_cm -p $port --wait 60" "lesson13_rdma_cm -q -p $port -C 1 --wait 60 $VL_ADDR0"
expect_contains "$SERVER_OUT" "private data: 56 bytes, ours"

step "exercise 3: the client offers initiator depth 4 and responder resources 2, the server 1 and 1"
server_client "$port" "lesson13_rdma_cm -p $port --wait 60" \
    "lesson13_rdma_cm -p $port -C 1 --initiator-depth 4 --responder-resources 2 --wait 60 $VL_ADDR0"
expect_contains "$SERVER_OUT" "the client asks: initiator_depth 4 (reads it may issue; our responder_resources), responder_resources 2 (reads it accepts; our initiator_depth)"
expect_contains "$CLIENT_OUT" "REQ sent: responder_resources 2, initiator_depth 4,"
expect_contains "$CLIENT_OUT" "is RTS (max_rd_atomic 1, max_dest_rd_atomic 1)"

step "mismatched sizes: server -S 64, client -S 128"
server_client "$port" "lesson13_rdma_cm -q -p $port -S 64 --wait 30" \
    "lesson13_rdma_cm -q -p $port -S 128 --wait 30 $VL_ADDR0" && fail "mismatched sizes passed"
expect_contains "$SERVER_OUT" "the client's pings are 128 bytes, our buffer is 64: start the server with -S 128"
expect_contains "$CLIENT_OUT" "the server disconnected"

step "faults: an address no RDMA device reaches, a neighbour that does not answer, a bad name"
# An address no RDMA device reaches, inside the guest: the local end of a veth pair that has no
# rxe device on it (no address outside the guest is ever named).
nord=192.168.78.1
ip link add vlnord0 type veth peer name vlnord1 || fail "cannot create the veth pair vlnord0/vlnord1"
trap 'ip link del vlnord0 2>/dev/null || true' EXIT
ip addr add "$nord/24" dev vlnord0
ip link set vlnord0 up
expect_fail_within 20 "address without an RDMA device" lesson13_rdma_cm -q -p "$port" "$nord"
expect_contains "$out" "the address could not be resolved to a local RDMA device (status -19: No such device)"
expect_contains "$out" "check that the address is on an interface with an RDMA device (rdma link)"
ip link del vlnord0
trap - EXIT
expect_fail_within 30 "silent neighbour" lesson13_rdma_cm -q -p "$port" --wait 20 192.168.77.9
expect_contains "$out" "got RDMA_CM_EVENT_ADDR_ERROR: no neighbour answered for the address"
expect_fail_within 20 "bad name" lesson13_rdma_cm -q -p "$port" no.such.host.invalid
expect_contains "$out" "'no.such.host.invalid' is not an address or a known host name"
expect_fail_within 20 "size below rping's minimum" lesson13_rdma_cm -S 20 "$VL_ADDR0"
[ "$FAIL_RC" -eq 2 ] || fail "-S 20: exit $FAIL_RC, expected 2 (usage)"

step "nothing left behind"
sleep 1
if rdma resource show cm_id | grep -F "comm lesson13"; then fail "an rdma_cm id of lesson13 is left"; fi
if rdma resource show qp | grep -F "comm lesson13"; then fail "a QP of lesson13 is left"; fi
echo "lesson 13 passed"
