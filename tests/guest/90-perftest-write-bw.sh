#!/bin/sh
# perftest's ib_write_bw between rxe0 (server) and rxe1 (client): the reference every vl_* tool
# is compared with. Both sides exit 0, the client reports a non-zero average bandwidth (perftest
# has printed 0.00 rows while exiting 0), and rxe1 really sent the packets.
# timeout: 240
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"

require_bin ib_write_bw
port=18515
iters=200
size=65536
# -x 1: the IPv4-mapped RoCEv2 GID; -u 20: a ~4 s ack timeout, as TCG is slow.
args="-x 1 -u 20 -s $size -n $iters -p $port"

sent_before=$(hw_counter "$VL_DEV1" sent_pkts)
step "ib_write_bw server on $VL_DEV0, client on $VL_DEV1"
server_client "$port" "ib_write_bw -d $VL_DEV0 $args" "ib_write_bw -d $VL_DEV1 $args $VL_ADDR0"
sent=$(($(hw_counter "$VL_DEV1" sent_pkts) - sent_before))

step "checks"
bw=$(perftest_bw_avg "$CLIENT_OUT")
[ -n "$bw" ] || fail "no result row (#bytes ... BW average) in the client's output"
num_gt "$bw" 0 || fail "the client reports BW average $bw: a zero row although ib_write_bw exited 0"
echo "client BW average: $bw MiB/s"
# At MTU 4096 a 64 KiB write is 16 packets.
want=$((iters * size / 4096))
[ "$sent" -ge "$want" ] || fail "$VL_DEV1 sent $sent packets; $iters writes of $size bytes need at least $want"
echo "$VL_DEV1 sent $sent packets (>= $want for $iters x $size bytes)"
