#!/bin/sh
# Interoperability: rdma-core's ibv_rc_pingpong as the server, lesson04_send_recv as the client.
# timeout: 180
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"

require_bin lesson04_send_recv
require_bin ibv_rc_pingpong
port=18561
iters=50
step "ibv_rc_pingpong server on $VL_DEV0 <- lesson04_send_recv client on $VL_DEV1"
server_client "$port" "ibv_rc_pingpong -d $VL_DEV0 -g 1 -n $iters -p $port" \
    "lesson04_send_recv -d $VL_DEV1 -p $port -n $iters --wait 60 $VL_ADDR0"

step "checks"
for f in "$SERVER_OUT" "$CLIENT_OUT"; do
    expect_contains "$f" "$iters iters in "
    expect_contains "$f" "$((4096 * iters * 2)) bytes in "
done
expect_contains "$CLIENT_OUT" "round trip of 4096 bytes (usec): avg"
expect_contains "$CLIENT_OUT" "payload check: skipped, the peer is not lesson04"
our_qpn=$(sed -n 's/.*local address:  LID 0x0000, QPN \(0x[0-9a-f]*\),.*/\1/p' "$CLIENT_OUT")
their_view=$(sed -n 's/.*remote address: LID 0x0000, QPN \(0x[0-9a-f]*\),.*/\1/p' "$SERVER_OUT")
[ -n "$our_qpn" ] || fail "the client did not print its local address"
[ "$((our_qpn))" -eq "$((their_view))" ] || fail "ibv_rc_pingpong saw QPN $their_view, we are $our_qpn"
echo "ibv_rc_pingpong received our QPN $our_qpn"
echo "interop (ibv_rc_pingpong server, our client) passed"
