#!/bin/sh
# Interoperability of lesson 12 with rdma-core's ibv_srq_pingpong, both directions: the same
# 256 records, 16 QPs on one SRQ each side. ibv_srq_pingpong sends its one buffer, so with it
# our side sends zeros and checks that every message arrives as zeros.
# timeout: 300
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"

require_bin lesson12_srq_events
require_bin ibv_srq_pingpong
port=18574
iters=300

check_side() {
    for f in "$1" "$2"; do
        expect_contains "$f" "$iters iters in "
        expect_contains "$f" "$((4096 * iters * 2)) bytes in "
    done
    expect_contains "$1" "the peer is not lesson12 (no marker record)"
    expect_contains "$1" "bytes verified (all zeros, as a zero-sending ibv_srq_pingpong peer returns them), all intact"
    ours=$(sed -n 's/.*local address:  LID 0x0000, QPN \(0x[0-9a-f]*\),.*/\1/p' "$2" | head -n 1)
    echo "ibv_srq_pingpong's first remote QPN: $(sed -n 's/.*remote address: LID 0x0000, QPN \(0x[0-9a-f]*\),.*/\1/p' "$2" | head -n 1)"
    [ -n "$ours" ] || fail "ibv_srq_pingpong printed no addresses"
}

step "lesson12_srq_events server on $VL_DEV0 <- ibv_srq_pingpong client on $VL_DEV1"
server_client "$port" "lesson12_srq_events -d $VL_DEV0 -p $port -n $iters --wait 60" \
    "ibv_srq_pingpong -d $VL_DEV1 -g 1 -n $iters -p $port $VL_ADDR0"
check_side "$SERVER_OUT" "$CLIENT_OUT"

step "ibv_srq_pingpong server on $VL_DEV0 <- lesson12_srq_events client on $VL_DEV1"
server_client "$port" "ibv_srq_pingpong -d $VL_DEV0 -g 1 -n $iters -p $port" \
    "lesson12_srq_events -d $VL_DEV1 -p $port -n $iters --wait 60 $VL_ADDR0"
check_side "$CLIENT_OUT" "$SERVER_OUT"
echo "interop with ibv_srq_pingpong, both directions, passed"
