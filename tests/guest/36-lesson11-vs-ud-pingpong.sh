#!/bin/sh
# Interoperability of lesson 11 with rdma-core's ibv_ud_pingpong, in both directions. Against
# it our side echoes (as it does) and checks every datagram against the one it sent before.
# Both sides use -s 1024: rdma-core 44's ibv_ud_pingpong, given its default -s 2048 in this guest,
# sends 1024-byte datagrams (its own summary counts 1024 bytes per message), which our side
# refuses as a size mismatch.
# timeout: 240
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"

require_bin lesson11_ud
require_bin ibv_ud_pingpong
port=18572
iters=50
size=1024

# check_side OUR_OUTPUT THEIR_OUTPUT: both printed the summary; our QPN is what they received.
check_side() {
    for f in "$1" "$2"; do
        expect_contains "$f" "$iters iters in "
        expect_contains "$f" "$((size * iters * 2)) bytes in "
    done
    expect_contains "$1" "payload check: $iters datagrams of $size bytes verified as echoes of ours, all intact"
    ours=$(sed -n 's/.*local address:  LID 0x0000, QPN \(0x[0-9a-f]*\),.*/\1/p' "$1")
    theirs=$(sed -n 's/.*remote address: LID 0x0000, QPN \(0x[0-9a-f]*\),.*/\1/p' "$2")
    [ -n "$ours" ] && [ -n "$theirs" ] || fail "a side did not print its addresses"
    [ "$((ours))" -eq "$((theirs))" ] || fail "ibv_ud_pingpong saw QPN $theirs, we are $ours"
    echo "ibv_ud_pingpong received our QPN $ours"
}

step "lesson11_ud server on $VL_DEV0 <- ibv_ud_pingpong client on $VL_DEV1"
server_client "$port" "lesson11_ud -d $VL_DEV0 -p $port -s $size -n $iters --wait 60" \
    "ibv_ud_pingpong -d $VL_DEV1 -g 1 -s $size -n $iters -p $port $VL_ADDR0"
check_side "$SERVER_OUT" "$CLIENT_OUT"
expect_contains "$SERVER_OUT" "datagram 0 is all 0x7b, ibv_ud_pingpong's initial buffer"

step "ibv_ud_pingpong server on $VL_DEV0 <- lesson11_ud client on $VL_DEV1"
server_client "$port" "ibv_ud_pingpong -d $VL_DEV0 -g 1 -s $size -n $iters -p $port" \
    "lesson11_ud -d $VL_DEV1 -p $port -s $size -n $iters --wait 60 $VL_ADDR0"
check_side "$CLIENT_OUT" "$SERVER_OUT"
expect_contains "$CLIENT_OUT" "datagram 0 is our own datagram 0, echoed"
echo "interop with ibv_ud_pingpong, both directions, passed"
