#!/bin/sh
# Every vl_* tool, server on rxe0 and client on rxe1: both sides exit 0 and print the rows their
# role measures, and for the bandwidth tools the rows tell the truth: what the rxe port counters
# saw matches the messages the client reports.
#
# The check. rxe counts RoCE packets, not bytes (ports/1/hw_counters). At the active MTU a
# message of S bytes is ceil(S / MTU) packets, so a client that reports N iterations, after W
# warm-up iterations it does not report, must have made the server's port accept
# E = (N + W) x ceil(S / MTU) new request packets (writes, sends), or N + W (one read request or
# atomic each). Accepted = rcvd_pkts minus what the responder discarded and counted: duplicates
# (duplicate_request) and the first packet after a gap (out_of_seq_request).
#   - A clean run (no duplicate, gap or receiver-not-ready on either port, no retry by the
#     client's completer): accepted must be E exactly — one packet more or fewer means the
#     report and the wire disagree.
#   - Under QEMU the veth backlog sometimes drops a burst; the requester then retransmits from
#     the lost packet (go-back-N), and rxe drops further out-of-sequence packets without counting
#     them; a SEND refused as receiver-not-ready is counted as received, then resent. Then
#     accepted >= E still holds, and the excess is bounded by 2% + 64 packets.
#   - Sends are also counted as messages: the server's rdma_recvs must be N + W exactly.
# The client's port must have sent at least E packets; for reads it must have received at least
# (N + W) x ceil(S / MTU) response packets. The out-of-band exchange is TCP, which rxe does not
# count, and QP set-up sends no packets.
# slow: a pair of each of the 8 vl_* tools, 10-40 s each under TCG, packet counts checked, then 3 short latency pairs
# timeout: 480
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"
# shellcheck source=tests/guest/perftest-lib.sh
. "$VL_TESTS/perftest-lib.sh"

for t in write_bw read_bw send_bw atomic_bw write_lat read_lat send_lat atomic_lat; do
    require_bin "vl_$t"
done

n=200
w=8
size=65536

# counters DEV: all hw counters of DEV's port 1 as "name value" lines.
counters() {
    for f in /sys/class/infiniband/"$1"/ports/1/hw_counters/*; do
        echo "${f##*/} $(cat "$f")"
    done
}
# delta BEFORE AFTER NAME: the increase of counter NAME between two snapshots.
delta() {
    b=$(awk -v n="$3" '$1 == n { print $2 }' "$1")
    a=$(awk -v n="$3" '$1 == n { print $2 }' "$2")
    echo $((a - b))
}

# bw_check TOOL SIZE KIND: run TOOL with -s SIZE and compare the counters with the reported row.
# KIND: "data" (requests carry the payload: write, send) or "one" (one request packet per
# operation: read, atomic).
bw_check() {
    tool=$1 sz=$2 kind=$3
    step "$tool -s $sz: rows, and the port counters against the reported iterations"
    counters "$VL_DEV0" >"$TMPDIR/s0"
    counters "$VL_DEV1" >"$TMPDIR/c0"
    vl_pair_ok "$tool" "-s $sz -n $n --warmup $w"
    counters "$VL_DEV0" >"$TMPDIR/s1"
    counters "$VL_DEV1" >"$TMPDIR/c1"
    expect_row "$CLIENT_OUT" "$tool client"
    iters=$(row_field "$CLIENT_OUT" 2)
    bytes=$(row_field "$CLIENT_OUT" 1)
    [ "$bytes" = "$sz" ] || fail "$tool: the row is for $bytes bytes, expected $sz"
    [ "$iters" = "$n" ] || fail "$tool: the row reports $iters iterations, expected $n"
    mtu=$(header_value "$CLIENT_OUT" Mtu | tr -dc 0-9)
    [ -n "$mtu" ] || fail "$tool: no Mtu in the header"
    data=$(( (iters + w) * ((sz + mtu - 1) / mtu) ))
    case $kind in
        data) want=$data ;;
        one) want=$((iters + w)) ;;
    esac
    echo "counter deltas ($VL_DEV0 server | $VL_DEV1 client):"
    awk '{ print $1 }' "$TMPDIR/s0" >"$TMPDIR/names"
    while read -r c; do
        ds=$(delta "$TMPDIR/s0" "$TMPDIR/s1" "$c")
        dc=$(delta "$TMPDIR/c0" "$TMPDIR/c1" "$c")
        [ "$ds" = 0 ] && [ "$dc" = 0 ] || echo "  $c: $ds | $dc"
    done <"$TMPDIR/names"
    accepted=$(( $(delta "$TMPDIR/s0" "$TMPDIR/s1" rcvd_pkts) \
        - $(delta "$TMPDIR/s0" "$TMPDIR/s1" duplicate_request) \
        - $(delta "$TMPDIR/s0" "$TMPDIR/s1" out_of_seq_request) ))
    retries=0
    for c in s:duplicate_request s:out_of_seq_request s:send_rnr_err \
        c:completer_retry_err c:rcvd_rnr_err c:rcvd_seq_err; do
        side=${c%%:*} name=${c#*:}
        retries=$((retries + $(delta "$TMPDIR/${side}0" "$TMPDIR/${side}1" "$name")))
    done
    echo "$tool: reported $iters x $sz bytes (+ $w warm-up) at MTU $mtu: $want request packets"
    if [ "$retries" -eq 0 ]; then
        within "$tool: request packets $VL_DEV0 accepted (clean run)" "$accepted" "$want" "$want"
    else
        echo "$tool: retransmissions happened ($retries duplicate/gap/retry events)"
        within "$tool: request packets $VL_DEV0 accepted" "$accepted" "$want" $((want + want / 50 + 64))
    fi
    if [ "$tool" = vl_send_bw ]; then
        within "$tool: messages $VL_DEV0 received (rdma_recvs)" \
            "$(delta "$TMPDIR/s0" "$TMPDIR/s1" rdma_recvs)" $((iters + w)) $((iters + w))
    fi
    sent=$(delta "$TMPDIR/c0" "$TMPDIR/c1" sent_pkts)
    [ "$sent" -ge "$want" ] || fail "$tool: $VL_DEV1 sent $sent packets, fewer than $want"
    if [ "$kind" = one ] && [ "$sz" -gt 8 ]; then
        got=$(delta "$TMPDIR/c0" "$TMPDIR/c1" rcvd_pkts)
        [ "$got" -ge "$data" ] || fail "$tool: $VL_DEV1 received $got response packets, fewer than $data"
        echo "$tool: $VL_DEV1 received $got response packets (>= $data)"
    fi
}

bw_check vl_write_bw "$size" data
# As perftest's: the server of a one-way RDMA test prints the client's row.
[ "$(rows "$SERVER_OUT")" = "$(rows "$CLIENT_OUT")" ] \
    || fail "vl_write_bw: the server's row differs from the client's"
bw_check vl_write_bw 3000 data
bw_check vl_send_bw "$size" data
expect_row "$SERVER_OUT" "vl_send_bw server (receive side)"
bw_check vl_read_bw "$size" one
bw_check vl_atomic_bw 8 one
expect_contains "$CLIENT_OUT" "Atomic FETCH_AND_ADD BW Test"

for t in write_lat send_lat read_lat atomic_lat; do
    step "vl_$t"
    vl_pair_ok "vl_$t" "-n $n --warmup $w"
    expect_row "$CLIENT_OUT" "vl_$t client"
    [ "$(row_field "$CLIENT_OUT" 2)" = "$n" ] || fail "vl_$t: the row does not report $n iterations"
    # t_min <= t_typical <= t_max, all positive.
    rows "$CLIENT_OUT" | awk 'NR == 1 { if (!($3 > 0 && $3 <= $5 && $5 <= $4)) exit 1 }' \
        || fail "vl_$t: t_min/t_typical/t_max out of order: $(rows "$CLIENT_OUT" | sed -n 1p)"
    case $t in
        write_lat|send_lat) expect_row "$SERVER_OUT" "vl_$t server (its side of the ping-pong)" ;;
        # As perftest's: the passive server prints its header and endpoints, no row.
        *) [ -z "$(rows "$SERVER_OUT")" ] || fail "vl_$t server: unexpected rows" ;;
    esac
done
# Round trips over 10 ms (1 MiB under TCG), past the point where a wait looks at the
# out-of-band channel: the server's samples run from one answer to the next, and every answer
# after its first ends one however long it waited. So the server prints the 1 MiB row too, with
# the client's 10 round trips and 9 samples (the first answer only starts one).
for t in write_lat send_lat; do
    step "vl_$t -s 1M -n 10: the server's row, whatever the round trip"
    json=$VL_PT_OUT/40-$t-1m-server.json
    rm -f "$json"
    vl_pair_ok "vl_$t" "-s 1048576 -n 10 --warmup 1" "" "--json $json"
    expect_row "$CLIENT_OUT" "vl_$t -s 1M client"
    expect_row "$SERVER_OUT" "vl_$t -s 1M server"
    for side in "$CLIENT_OUT" "$SERVER_OUT"; do
        [ "$(row_field "$side" 1)" = 1048576 ] || fail "vl_$t: a row in $side is not for 1048576 bytes"
        [ "$(row_field "$side" 2)" = 10 ] || fail "vl_$t: a row in $side does not report 10 iterations"
    done
    grep -q '"samples": 9,' "$json" || fail "vl_$t -s 1M server: its JSON ($json) has not 9 samples"
    # Half the round trip: under 5000 us the path was fast and the case above was not exercised.
    num_gt "$(row_field "$CLIENT_OUT" 5)" 5000 \
        || echo "note: vl_$t -s 1M round trip under 10 ms here; the slow path was not exercised"
done

# -n 1: the server answers once and times nothing; its row still prints and says so.
step "vl_write_lat -n 1: the server's row with no sample"
vl_pair_ok vl_write_lat "-s 2 -n 1 --warmup 0"
expect_row "$CLIENT_OUT" "vl_write_lat -n 1 client"
rows "$SERVER_OUT" | awk 'NR == 1 { exit !($1 == 2 && $2 == 1 && $3 == "nan") }' \
    || fail "vl_write_lat -n 1 server: no row of 1 iteration with nan times: $(rows "$SERVER_OUT")"
echo "every tool ran and its counters agree"
