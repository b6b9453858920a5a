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
# perftest itself fails a run now and then under TCG (0.00 rows, or both sides exiting 1 right
# after the header); the guest is sound when one of three attempts is.
attempt=1
while :; do
    p=$((port + attempt))
    args="-x 1 -u 20 -s $size -n $iters -p $p"
    sent_before=$(hw_counter "$VL_DEV1" sent_pkts)
    step "ib_write_bw server on $VL_DEV0, client on $VL_DEV1 (attempt $attempt)"
    if server_client "$p" "ib_write_bw -d $VL_DEV0 $args" "ib_write_bw -d $VL_DEV1 $args $VL_ADDR0"; then
        sent=$(($(hw_counter "$VL_DEV1" sent_pkts) - sent_before))
        bw=$(perftest_bw_avg "$CLIENT_OUT")
        if [ -n "$bw" ] && num_gt "$bw" 0; then
            break
        fi
        echo "attempt $attempt: no positive BW average row (perftest printed '$bw')"
    fi
    [ "$attempt" -lt 3 ] || fail "ib_write_bw failed 3 attempts in a row: the guest is not sound"
    attempt=$((attempt + 1))
done

step "checks"
echo "client BW average: $bw MiB/s"
want=$((iters * size / 4096))
[ "$sent" -ge "$want" ] || fail "$VL_DEV1 sent $sent packets; $iters writes of $size bytes need at least $want"
echo "$VL_DEV1 sent $sent packets (>= $want for $iters x $size bytes)"
