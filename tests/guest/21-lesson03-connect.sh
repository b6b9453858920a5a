#!/bin/sh
# Lesson 03: server on rxe0, client on rxe1. Both walk their QP RESET -> INIT -> RTR -> RTS,
# reading the state back after every step, pass the TCP barrier, and the client's proof SEND
# arrives intact at the server. Then the README's exercise 2: a client given the wrong
# dest_qp_num (--bad-qpn) passes RTR and fails only when its SEND is never acknowledged.
# timeout: 180
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"

require_bin lesson03_connect
port=18531
step "lesson03_connect server on $VL_DEV0, client on $VL_DEV1"
server_client "$port" "lesson03_connect -d $VL_DEV0 -p $port --wait 30" \
    "lesson03_connect -d $VL_DEV1 -p $port --wait 30 $VL_ADDR0"

step "checks"
for f in "$SERVER_OUT" "$CLIENT_OUT"; do
    expect_contains "$f" "created; qp.state() = RESET"
    expect_contains "$f" "qp.state() = INIT"
    expect_contains "$f" "qp.state() = RTR"
    expect_contains "$f" "qp.state() = RTS"
    expect_contains "$f" "states RESET -> INIT -> RTR -> RTS"
    expect_contains "$f" "barrier passed: both QPs are in RTS"
    expect_contains "$f" "is_global 1: dgid 0000:0000:0000:0000:0000:ffff:c0a8:4d0"
    expect_contains "$f" "(52 bytes with the NUL)"
    # Asked for hop limit 1; on RoCE the kernel stores the IP route's (the default TTL, 64).
    expect_contains "$f" "ibv_query_qp(IBV_QP_AV): hop_limit 64 held by the device (1 asked"
done
expect_contains "$SERVER_OUT" "server: QP 0x"
expect_contains "$CLIENT_OUT" "client: QP 0x"
expect_contains "$SERVER_OUT" "bytes from QP 0x"
expect_contains "$SERVER_OUT" "\"hello from QP 0x"
expect_contains "$CLIENT_OUT" "identical"
# Each side's dest_qp_num is the other's QP number.
sq=$(sed -n 's/^server: QP \(0x[0-9a-f]*\) connected to QP \(0x[0-9a-f]*\);.*/\1 \2/p' "$SERVER_OUT")
cq=$(sed -n 's/^client: QP \(0x[0-9a-f]*\) connected to QP \(0x[0-9a-f]*\);.*/\2 \1/p' "$CLIENT_OUT")
if [ -z "$sq" ] || [ "$sq" != "$cq" ]; then fail "QP numbers do not cross-match: server '$sq', client '$cq'"; fi
echo "QPs cross-connected: server/client $sq"

step "exercise 2: --bad-qpn on the client (RTR accepts it; the SEND fails with RETRY_EXC_ERR)"
# -u 18 and retry_cnt 6: 7 ACK timeouts of 1.07 s, about 7.5 s. The server's --wait 20 ends
# its wait for the SEND that never comes.
t0=$(date +%s)
SC_CLIENT_TIMEOUT=$(scaled 60) server_client "$port" "lesson03_connect -d $VL_DEV0 -p $port --wait 20" \
    "lesson03_connect -d $VL_DEV1 -p $port -u 18 --bad-qpn $VL_ADDR0" && fail "a wrong dest_qp_num passed"
t1=$(date +%s)
expect_contains "$CLIENT_OUT" "--bad-qpn: dest_qp_num 0x"
expect_contains "$CLIENT_OUT" "qp.state() = RTR"
expect_contains "$CLIENT_OUT" "qp.state() = RTS"
expect_contains "$CLIENT_OUT" "completed with IBV_WC_RETRY_EXC_ERR"
expect_not_contains "$CLIENT_OUT" "ibv_modify_qp(RTR) failed"
expect_contains "$SERVER_OUT" "timed out after 20.0 s waiting for the client's proof SEND (our posted receive)"
# The wrong QPN is the server's + 1.
want=$(sed -n 's/^    our endpoint: *LID 0x0000, QPN 0x\([0-9a-f]*\),.*/\1/p' "$SERVER_OUT")
got=$(sed -n 's/^    --bad-qpn: dest_qp_num 0x\([0-9a-f]*\) instead of the peer.s 0x\([0-9a-f]*\)/\2/p' "$CLIENT_OUT")
[ -n "$want" ] && [ "$want" = "$got" ] || fail "the client's 'peer QPN' '$got' is not the server's QPN '$want'"
# At RTR the client narrates the number it really programmed, the wrong one (issue 38).
expect_contains "$CLIENT_OUT" "what it sends will go to QP 0x$(printf '%x' $((0x$want + 1)))"
echo "exercise 2: RETRY_EXC_ERR; client and server done in $((t1 - t0)) s"
echo "lesson03 scenario passed"
