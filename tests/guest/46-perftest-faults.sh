#!/bin/sh
# Faults end in bounded time, non-zero, with a message naming what was waited for: no server; no
# client; a server stopped (SIGSTOP) in the middle of a send bandwidth run (its receive queue
# runs dry, the client's sends stall in RNR retries); a client killed in the middle of a run.
# A pause that is not a fault is not mistaken for one: a read latency server paused for 5 s
# (its NIC serves the reads alone) finishes with its client. Bad options never reach a verbs
# call.
# timeout: 300
# slow: eight fault cases, each bounded by --wait 4-15 s; the stopped server waits out its RNR retries
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"
# shellcheck source=tests/guest/perftest-lib.sh
. "$VL_TESTS/perftest-lib.sh"

out=$TMPDIR/fault.out
step "a client with no server, a server with no client: --wait bounds both"
next_port
expect_fail_within 30 "client without server" vl_write_bw -d "$VL_DEV1" -p "$PORT" --wait 3 "$VL_ADDR0"
expect_contains "$out" "connecting to the server $VL_ADDR0:$PORT"
expect_fail_within 30 "server without client" vl_write_bw -d "$VL_DEV0" -p "$PORT" --wait 3
expect_contains "$out" "waiting for a client on TCP port $PORT"

step "bad options are refused before any device is opened (exit 2)"
rc=0
vl_write_bw -d nosuchdev -s 0 >"$out" 2>&1 || rc=$?
cat "$out"
[ "$rc" = 2 ] || fail "exit $rc, expected 2"
expect_contains "$out" "-s 0"
expect_not_contains "$out" "nosuchdev"

step "a device, port or GID index this machine lacks is a usage error too (exit 2), named"
for args in "-d nosuchdev0" "-d $VL_DEV0 -i 2" "-d $VL_DEV0 -x 77"; do
    rc=0
    # shellcheck disable=SC2086 # the flags are words
    vl_write_bw $args --wait 3 >"$out" 2>&1 || rc=$?
    cat "$out"
    [ "$rc" = 2 ] || fail "vl_write_bw $args: exit $rc, expected 2"
    expect_contains "$out" "vl_write_bw: error: opening the RDMA device, its port and GID (-d, -i, -x): "
done

step "the server of vl_send_bw stops (SIGSTOP) mid-run: the client gives up, naming the phase"
next_port
# -u 17: a 0.5 s ack timeout, so that the stall is declared within ~10 s (timeout x 8 x 2).
vl_send_bw -d "$VL_DEV0" -u 17 -p "$PORT" -D 60 >"$TMPDIR/srv.out" 2>&1 &
spid=$!
wait_port "$PORT" 60 "$spid"
vl_send_bw -d "$VL_DEV1" -u 17 -p "$PORT" -D 60 "$VL_ADDR0" >"$TMPDIR/cli.out" 2>&1 &
cpid=$!
wait_header "$TMPDIR/cli.out" "$cpid"
wait_traffic "$VL_DEV1" 3000 "$cpid" # 16 warm-up sends of 65536 bytes are 256 packets
kill -STOP "$spid"
rc=0
_vl_watch "$cpid" 60 || rc=$?
cat "$TMPDIR/cli.out"
[ "$rc" -ne 124 ] || fail "the client still ran 60 s after the server stopped"
[ "$rc" -ne 0 ] || fail "the client exited 0"
expect_contains "$TMPDIR/cli.out" "no completion for"
expect_contains "$TMPDIR/cli.out" "measurement of size 65536"
kill -CONT "$spid"
rc=0
_vl_watch "$spid" 30 || rc=$?
cat "$TMPDIR/srv.out"
[ "$rc" -ne 124 ] || fail "the resumed server did not end"
[ "$rc" -ne 0 ] || fail "the resumed server exited 0"

step "the client of vl_send_bw is killed mid-run: the server notices at once"
next_port
vl_send_bw -d "$VL_DEV0" -u 20 -p "$PORT" -D 60 >"$TMPDIR/srv.out" 2>&1 &
spid=$!
wait_port "$PORT" 60 "$spid"
vl_send_bw -d "$VL_DEV1" -u 20 -p "$PORT" -D 60 "$VL_ADDR0" >"$TMPDIR/cli.out" 2>&1 &
cpid=$!
wait_header "$TMPDIR/cli.out" "$cpid"
wait_traffic "$VL_DEV1" 3000 "$cpid"
kill -KILL "$cpid"
rc=0
_vl_watch "$spid" 30 || rc=$?
cat "$TMPDIR/srv.out"
[ "$rc" -ne 124 ] || fail "the server still ran 30 s after the client died"
[ "$rc" -ne 0 ] || fail "the server exited 0"
expect_contains "$TMPDIR/srv.out" "closed the connection"

step "the server of vl_read_lat pauses (SIGSTOP, 5 s): its NIC answers alone; both finish"
next_port
vl_read_lat -d "$VL_DEV0" -u 20 -p "$PORT" -D 8 >"$TMPDIR/srv.out" 2>&1 &
spid=$!
wait_port "$PORT" 60 "$spid"
vl_read_lat -d "$VL_DEV1" -u 20 -p "$PORT" -D 8 "$VL_ADDR0" >"$TMPDIR/cli.out" 2>&1 &
cpid=$!
wait_header "$TMPDIR/cli.out" "$cpid"
wait_traffic "$VL_DEV1" 200 "$cpid"
kill -STOP "$spid"
sleep 5
kill -CONT "$spid"
_vl_watch "$cpid" 60 || { cat "$TMPDIR/cli.out"; fail "the client failed or hung"; }
_vl_watch "$spid" 30 || { cat "$TMPDIR/srv.out"; fail "the server failed or hung"; }
cat "$TMPDIR/cli.out"
expect_row "$TMPDIR/cli.out" "vl_read_lat -D 8 client"
echo "faults end in bounded time, with the reason"
