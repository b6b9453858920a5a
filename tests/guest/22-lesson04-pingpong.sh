#!/bin/sh
# Lesson 04 against itself: ping-pongs whose every message is checked byte for byte (one-packet
# and multi-packet messages), then --show-rnr: a SEND that finds no posted receive fails with
# IBV_WC_RNR_RETRY_EXC_ERR, and rxe's counters saw the RNR NAK.
# timeout: 240
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"

require_bin lesson04_send_recv

# pingpong PORT ITERS SIZE [EXTRA FLAGS]: ours <-> ours, bytes checked on both sides.
pingpong() {
    _port=$1 _iters=$2 _size=$3
    shift 3
    step "lesson04_send_recv -n $_iters -s $_size $*"
    server_client "$_port" "lesson04_send_recv -d $VL_DEV0 -p $_port -n $_iters -s $_size $* --wait 30" \
        "lesson04_send_recv -d $VL_DEV1 -p $_port -n $_iters -s $_size $* --wait 30 $VL_ADDR0"
    for f in "$SERVER_OUT" "$CLIENT_OUT"; do
        expect_contains "$f" "payload check: $_iters messages of $_size bytes verified, all intact"
        expect_contains "$f" "$_iters iters in "
        expect_contains "$f" "$((_size * _iters * 2)) bytes in "
    done
    expect_contains "$CLIENT_OUT" "round trip of $_size bytes (usec): avg"
    expect_contains "$CLIENT_OUT" "($_iters samples)"
    cp "$CLIENT_OUT" "$TMPDIR/client-$_size.out"
}

pingpong 18541 50 4096
# 10000 bytes at path MTU 4096: three packets per message.
pingpong 18542 30 10000 -m 4096
pingpong 18543 100 1 -r 4 --quiet

step "--show-rnr: the server posts no receive, the client sends with rnr_retry 0"
port=18544
server_client "$port" "lesson04_send_recv -d $VL_DEV0 -p $port --show-rnr --wait 30" \
    "lesson04_send_recv -d $VL_DEV1 -p $port --show-rnr --wait 30 $VL_ADDR0"
expect_contains "$SERVER_OUT" "posting NO receive on purpose"
expect_contains "$SERVER_OUT" "server: posted no receive; the client's SEND failed with IBV_WC_RNR_RETRY_EXC_ERR"
expect_contains "$SERVER_OUT" "hw_counters/send_rnr_err: +1"
expect_contains "$CLIENT_OUT" "rnr_retry 0"
expect_contains "$CLIENT_OUT" "IBV_WC_RNR_RETRY_EXC_ERR (RNR retry counter exceeded)"
expect_contains "$CLIENT_OUT" "client: SEND to a peer without a posted receive completed with IBV_WC_RNR_RETRY_EXC_ERR (status 13)"
expect_contains "$CLIENT_OUT" "hw_counters/rcvd_rnr_err: +1"
expect_contains "$CLIENT_OUT" "our QP is now ERR"
echo "lesson04 ours<->ours scenario passed"
