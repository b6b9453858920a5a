#!/bin/sh
# --procs faults: a client worker killed (SIGKILL) mid-run fails both sides cleanly and quickly,
# the client naming the worker (index, pid, CPU) and stopping the other one; a coordinator
# stopped by SIGTERM takes its workers with it. No queue stays in /dev/mqueue, no worker runs on.
# timeout: 300
# slow: four faults of two-process runs; the stopped worker is declared stalled only after --wait 10 s
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"
# shellcheck source=tests/guest/perftest-lib.sh
. "$VL_TESTS/perftest-lib.sh"

require_bin vl_write_bw
mqueue_ready

# both_outputs: the client's and the server's output so far, for a failure that ends the step.
both_outputs() {
    echo "-- client output:"
    cat "$TMPDIR/cli.out"
    echo "-- server output:"
    cat "$TMPDIR/srv.out"
}

step "a client worker is killed (SIGKILL) in the middle of a run"
next_port
vl_write_bw -d "$VL_DEV0" -u 20 -p "$PORT" -D 60 --procs 2 --wait 30 >"$TMPDIR/srv.out" 2>&1 &
spid=$!
wait_port "$PORT" 60 "$spid"
vl_write_bw -d "$VL_DEV1" -u 20 -p "$PORT" -D 60 --procs 2 --wait 30 "$VL_ADDR0" >"$TMPDIR/cli.out" 2>&1 &
cpid=$!
next_port
wpid=$(wait_worker_pid 1 "$VL_ADDR0") || { both_outputs; exit 1; }
echo "client worker 1: pid $wpid"
# Let it connect and start measuring.
sleep 10
_vl_alive "$wpid" || { both_outputs; fail "worker 1 ended before the kill"; }
t0=$(_vl_now)
kill -KILL "$wpid"
rc=0
_vl_watch "$cpid" 30 || rc=$?
t1=$(_vl_now)
cat "$TMPDIR/cli.out"
[ "$rc" -ne 124 ] || fail "the client still ran 30 s after its worker died"
[ "$rc" -ne 0 ] || fail "the client exited 0"
within "client seconds after the kill" $(((t1 - t0) / 100)) 0 5
expect_contains "$TMPDIR/cli.out" "worker 1 (pid $wpid, CPU "
expect_contains "$TMPDIR/cli.out" "was killed by SIGKILL"
expect_contains "$TMPDIR/cli.out" "note: worker 0 (pid "
rc=0
_vl_watch "$spid" 60 || rc=$?
cat "$TMPDIR/srv.out"
[ "$rc" -ne 124 ] || fail "the server still ran 60 s after the client failed"
[ "$rc" -ne 0 ] || fail "the server exited 0"
expect_contains "$TMPDIR/srv.out" "vl_write_bw: error: worker "
sleep 1
no_workers
no_queues

step "a client worker is stopped (SIGSTOP) mid-run: declared stalled after --wait"
# --wait bounds the setup as well as the stall: on a busy host (two suites and four busy loops on
# two CPUs) the workers took over 10 s to start and connect, so it grows with the time scale.
w=$(scaled 10)
next_port
vl_write_bw -d "$VL_DEV0" -u 20 -p "$PORT" -D $((4 * w)) --procs 2 --wait "$w" >"$TMPDIR/srv.out" 2>&1 &
spid=$!
wait_port "$PORT" 60 "$spid"
vl_write_bw -d "$VL_DEV1" -u 20 -p "$PORT" -D $((4 * w)) --procs 2 --wait "$w" "$VL_ADDR0" >"$TMPDIR/cli.out" 2>&1 &
cpid=$!
next_port
wpid=$(wait_worker_pid 1 "$VL_ADDR0") || { both_outputs; exit 1; }
sleep "$w"
_vl_alive "$wpid" || { both_outputs; fail "worker 1 ended before the stop"; }
t0=$(_vl_now)
kill -STOP "$wpid"
rc=0
_vl_watch "$cpid" $((4 * w)) || rc=$?
t1=$(_vl_now)
cat "$TMPDIR/cli.out"
[ "$rc" -ne 124 ] || fail "the client still ran $((4 * w)) s after its worker stopped"
[ "$rc" -ne 0 ] || fail "the client exited 0"
secs=$(((t1 - t0) / 100))
[ "$secs" -ge $((w - 1)) ] || { echo "-- server output:"; cat "$TMPDIR/srv.out"; }
within "client seconds after the stop" $(((t1 - t0) / 100)) $((w - 1)) $((w + 10))
expect_contains "$TMPDIR/cli.out" "worker 1 (pid $wpid, CPU 1) has been stopped (SIGSTOP or a debugger) for $w s"
rc=0
_vl_watch "$spid" $((w + 50)) || rc=$?
cat "$TMPDIR/srv.out"
[ "$rc" -ne 124 ] || fail "the server still ran $((w + 50)) s after the client failed"
[ "$rc" -ne 0 ] || fail "the server exited 0"
sleep 1
no_workers
no_queues

step "the coordinator gets SIGTERM while its workers wait for a client"
next_port
vl_write_bw -d "$VL_DEV0" -u 20 -p "$PORT" --procs 2 --wait 60 >"$TMPDIR/srv.out" 2>&1 &
spid=$!
wait_port "$PORT" 60 "$spid"
next_port
sleep 1
ls /dev/mqueue
[ -n "$(ls /dev/mqueue)" ] || fail "no queue in /dev/mqueue during the run"
kill -TERM "$spid"
rc=0
_vl_watch "$spid" 10 || rc=$?
cat "$TMPDIR/srv.out"
[ "$rc" -ne 124 ] || fail "the coordinator did not end on SIGTERM"
[ "$rc" -eq 143 ] || fail "the coordinator exited $rc on SIGTERM, expected 143"
# It passes the signal on to its workers (none had a peer), which end; its queues go with it.
expect_contains "$TMPDIR/srv.out" "vl_write_bw: interrupted by SIGTERM (no peer connected yet): passed on to the 2 workers"
sleep 2
no_workers
no_queues
