#!/bin/sh
# Interoperability: lesson04_send_recv as the server, rdma-core's ibv_rc_pingpong as the client.
# Same record, same handshake, same data path: both exit 0 and print the iters line.
# timeout: 180
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"

require_bin lesson04_send_recv
require_bin ibv_rc_pingpong
port=18551
iters=50
step "lesson04_send_recv server on $VL_DEV0 <- ibv_rc_pingpong client on $VL_DEV1"
server_client "$port" "lesson04_send_recv -d $VL_DEV0 -p $port -n $iters --wait 60" \
    "ibv_rc_pingpong -d $VL_DEV1 -g 1 -n $iters -p $port $VL_ADDR0"

step "checks"
for f in "$SERVER_OUT" "$CLIENT_OUT"; do
    expect_contains "$f" "$iters iters in "
    expect_contains "$f" "$((4096 * iters * 2)) bytes in "
done
# ibv_rc_pingpong's buffer starts as 0x7b bytes: our side notices a foreign peer and says so.
expect_contains "$SERVER_OUT" "payload check: skipped, the peer is not lesson04 (its first message: all 4096 bytes are 0x7b)"
# The endpoints each side printed must match what the other received.
our_qpn=$(sed -n 's/.*local address:  LID 0x0000, QPN \(0x[0-9a-f]*\),.*/\1/p' "$SERVER_OUT")
their_view=$(sed -n 's/.*remote address: LID 0x0000, QPN \(0x[0-9a-f]*\),.*/\1/p' "$CLIENT_OUT")
[ -n "$our_qpn" ] || fail "the server did not print its local address"
[ "$((our_qpn))" -eq "$((their_view))" ] || fail "ibv_rc_pingpong saw QPN $their_view, we are $our_qpn"
echo "ibv_rc_pingpong received our QPN $our_qpn"
echo "interop (our server, ibv_rc_pingpong client) passed"
