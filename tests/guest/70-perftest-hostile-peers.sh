#!/bin/sh
# shellcheck disable=SC2086 # $VL_PT_COMMON holds several options, split on purpose
# A server is not at the mercy of whoever connects first. Before the real client: a connection
# that closes at once, a well-framed record of garbage, a real perftest client (ib_write_bw), a
# silent connection and a HELLO trickled slower than its 5 s bound — each is logged in one line
# with its address and dropped, and the real client then runs with --validate and gets its 200
# messages of 4096 bytes. A second client during a run is refused at once ("busy") and the first
# run completes. --bind: an IPv4 address and IPv6 loopback (the out-of-band TCP only; RDMA still
# runs over rxe).
# timeout: 240
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"
# shellcheck source=tests/guest/perftest-lib.sh
. "$VL_TESTS/perftest-lib.sh"

srv=$TMPDIR/srv.out
cli=$TMPDIR/cli.out

step "strays before the real client: each logged and dropped, then the real run succeeds"
next_port
vl_write_bw -d "$VL_DEV0" $VL_PT_COMMON -p "$PORT" -s 4096 -n 200 --validate --wait 120 \
    >"$srv" 2>&1 &
spid=$!
wait_port "$PORT" 60 "$spid"
# 1. connect and close (a port scan).
nc -w 2 "$VL_ADDR0" "$PORT" </dev/null >/dev/null 2>&1 || true
# 2. a well-formed frame of 4 bytes of garbage (message type 0xde).
printf '\000\000\000\004\336\255\276\357' | nc -w 2 "$VL_ADDR0" "$PORT" >/dev/null 2>&1 || true
# 3. a perftest client: its text exchange is no frame of ours.
run_timeout 30 ib_write_bw -d "$VL_DEV1" -p "$PORT" "$VL_ADDR0" >"$TMPDIR/ib.out" 2>&1 || true
# 4. a HELLO trickled a byte a second: first, so that the server reads it from the moment it
# connects (nc does not forward what it was given while its connection waits in the backlog),
# and 5. silence for longer than the HELLO bound (held open well past it).
(for b in '\000' '\000' '\000' '\100' '\001' '\126' '\114' '\120' '\124'; do
    # shellcheck disable=SC2059 # $b is an octal escape: the format is the byte to send
    printf "$b"
    sleep 1
done) | nc "$VL_ADDR0" "$PORT" >/dev/null 2>&1 &
trickle=$!
sleep 1
(sleep 20) | nc "$VL_ADDR0" "$PORT" >/dev/null 2>&1 &
quiet=$!
sleep 1
rc=0
run_timeout 90 vl_write_bw -d "$VL_DEV1" $VL_PT_COMMON -p "$PORT" -s 4096 -n 200 --validate \
    "$VL_ADDR0" >"$cli" 2>&1 || rc=$?
src=0
_vl_watch "$spid" 30 || src=$?
kill "$quiet" "$trickle" 2>/dev/null || true
echo "--- server (exit $src)"
cat "$srv"
echo "--- client (exit $rc)"
cat "$cli"
[ "$rc" = 0 ] || fail "the real client failed after the strays (exit $rc)"
[ "$src" = 0 ] || fail "the server failed (exit $src)"
strays=$(grep -c "ignored a connection from" "$srv" || true)
[ "$strays" -ge 5 ] || fail "expected 5 strays logged, found $strays"
expect_contains "$srv" "it closed the connection without a word"
expect_contains "$srv" "its opening bytes are not a HELLO (unknown message type 222)"
expect_contains "$srv" "it does not speak the verbs-lab protocol (a perftest ib_* client?)"
expect_contains "$srv" "no whole HELLO within 5 s"
expect_contains "$srv" "the rest of the client's HELLO"
row=$(rows "$cli" | sed -n 1p)
echo "client row: $row"
[ "$(echo "$row" | awk '{ print $1 }')" = 4096 ] || fail "the row is not of 4096 bytes: $row"
[ "$(echo "$row" | awk '{ print $2 }')" = 200 ] || fail "the row is not of 200 messages: $row"
expect_row "$cli" "vl_write_bw client after 5 strays"

step "a second client during a run is refused at once; the first run completes"
next_port
vl_write_bw -d "$VL_DEV0" $VL_PT_COMMON -p "$PORT" -D 6 >"$srv" 2>&1 &
spid=$!
wait_port "$PORT" 60 "$spid"
vl_write_bw -d "$VL_DEV1" $VL_PT_COMMON -p "$PORT" -D 6 "$VL_ADDR0" >"$cli" 2>&1 &
cpid=$!
sleep 3
t0=$(_vl_now)
rc=0
run_timeout 30 vl_write_bw -d "$VL_DEV1" $VL_PT_COMMON -p "$PORT" -D 6 "$VL_ADDR0" \
    >"$TMPDIR/second.out" 2>&1 || rc=$?
t1=$(_vl_now)
cat "$TMPDIR/second.out"
[ "$rc" = 1 ] || fail "the second client exited $rc, expected 1"
expect_contains "$TMPDIR/second.out" "the server refused the run: the server is busy"
within "seconds until the second client was refused" $(((t1 - t0) / 100)) 0 10
rc=0
_vl_watch "$cpid" 60 || rc=$?
src=0
_vl_watch "$spid" 30 || src=$?
echo "--- server (exit $src)"
cat "$srv"
echo "--- first client (exit $rc)"
cat "$cli"
if [ "$rc" != 0 ] || [ "$src" != 0 ]; then
    fail "the first run did not complete (client $rc, server $src)"
fi
expect_contains "$srv" "refused a second client"
expect_row "$cli" "the first client"

step "--bind: an IPv4 address, and IPv6 loopback for the out-of-band channel"
vl_pair_ok vl_send_bw "-s 1024 -n 100" "" "--bind $VL_ADDR0"
expect_row "$CLIENT_OUT" "vl_send_bw --bind $VL_ADDR0"
next_port
server_client "$PORT" \
    "vl_send_lat -d $VL_DEV0 $VL_PT_COMMON -p $PORT -s 64 -n 100 --bind ::1" \
    "vl_send_lat -d $VL_DEV1 $VL_PT_COMMON -p $PORT -s 64 -n 100 ::1" \
    || fail "the pair over IPv6 loopback failed"
expect_row "$CLIENT_OUT" "vl_send_lat over [::1]"
echo "strays dropped, busy clients refused, --bind honoured"
