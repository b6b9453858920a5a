#!/bin/sh
# Lesson 11: UD ping-pong between two lesson11 processes (every datagram checked byte for byte,
# the GRH area decoded, the hop limit resolved from the route), then --show-loss: a datagram with
# the wrong Q_Key completes on the sender and never arrives.
# timeout: 180
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"

require_bin lesson11_ud
port=18571
iters=50
step "lesson11_ud server on $VL_DEV0, client on $VL_DEV1, $iters round trips"
server_client "$port" "lesson11_ud -d $VL_DEV0 -p $port -n $iters --wait 60" \
    "lesson11_ud -d $VL_DEV1 -p $port -n $iters --wait 60 $VL_ADDR0"

step "checks"
for f in "$SERVER_OUT" "$CLIENT_OUT"; do
    expect_contains "$f" "$iters iters in "
    expect_contains "$f" "$((2048 * iters * 2)) bytes in "
    expect_contains "$f" "payload check: $iters datagrams of 2048 bytes verified, all intact"
    expect_contains "$f" "byte_len 2088 = 40 (GRH area) + 2048"
    expect_contains "$f" "IBV_WC_GRH set"
    # The AH asked for hop limit 1; rxe creates AHs in the kernel, which puts in the route's
    # hop limit (the system default TTL, 64). mlx5/mlx4/hns would send the 1 (README exercise 1).
    expect_contains "$f" "hop_limit 1"
    expect_contains "$f" "the IPv4 header: TTL 64, protocol 17 (UDP)"
done
expect_contains "$SERVER_OUT" "source $VL_ADDR1, destination $VL_ADDR0"
expect_contains "$CLIENT_OUT" "source $VL_ADDR0, destination $VL_ADDR1"
expect_contains "$CLIENT_OUT" "round trip of 2048 bytes (usec)"

step "a message larger than the MTU is refused before any verbs call"
rc=0
lesson11_ud -d "$VL_DEV0" -s 4096 -p "$port" --wait 2 >"$TMPDIR/big.out" 2>&1 || rc=$?
cat "$TMPDIR/big.out"
# 4096 is the active MTU on the guest's 9000-byte veths: allowed; 4097 is refused by clap.
rc=0
lesson11_ud -d "$VL_DEV0" -s 4097 >"$TMPDIR/big.out" 2>&1 || rc=$?
cat "$TMPDIR/big.out"
[ "$rc" -eq 2 ] || fail "-s 4097 exited $rc, expected 2"

step "--show-loss: a datagram with the wrong Q_Key is dropped silently"
server_client "$port" "lesson11_ud -d $VL_DEV0 -p $port --show-loss --wait 60" \
    "lesson11_ud -d $VL_DEV1 -p $port --show-loss --wait 60 $VL_ADDR0"
expect_contains "$CLIENT_OUT" "completed with IBV_WC_SUCCESS"
expect_contains "$SERVER_OUT" "server: 0 datagrams arrived in 2000 ms after the client's SEND with Q_Key 0x1111eeee"
expect_contains "$SERVER_OUT" "the datagram with the right Q_Key 0x11111111 arrived: 2048 bytes, verified"
expect_contains "$CLIENT_OUT" "client: the datagram with the right Q_Key arrived"
echo "lesson11 scenario passed"
