#!/bin/sh
# --procs when the coordinator is killed outright (SIGKILL, which it cannot catch): its workers
# are told by the kernel (PR_SET_PDEATHSIG), remove its queues and exit — within 2 s no worker
# and no queue of it is left, and the peer side ends too. When the workers are killed as well
# (nobody left to clean up), the next --procs run finds the queues by the dead coordinator's
# pid, removes them and says so.
# timeout: 240
# slow: two-process pairs, each left to connect and start measuring before the kill
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"
# shellcheck source=tests/guest/perftest-lib.sh
. "$VL_TESTS/perftest-lib.sh"

require_bin vl_write_bw
mqueue_ready

# client_workers_up: the client's two workers run; sets cworkers to their pids.
client_workers_up() {
    cworkers=$(workers_of "$VL_ADDR0")
    [ "$(echo "$cworkers" | wc -w)" -ge 2 ]
}

# start_pair: a --procs 2 server and client (-D 60); sets spid, cpid and cworkers (the client's
# two workers, once both run).
start_pair() {
    next_port
    vl_write_bw -d "$VL_DEV0" -u 20 -p "$PORT" -D 60 --procs 2 --wait 30 >"$TMPDIR/srv.out" 2>&1 &
    spid=$!
    wait_port "$PORT" 60 "$spid"
    vl_write_bw -d "$VL_DEV1" -u 20 -p "$PORT" -D 60 --procs 2 --wait 30 "$VL_ADDR0" \
        >"$TMPDIR/cli.out" 2>&1 &
    cpid=$!
    next_port
    cworkers=
    wait_for 30 - client_workers_up || true
    if [ "$(echo "$cworkers" | wc -w)" -ne 2 ]; then
        cat "$TMPDIR/srv.out" "$TMPDIR/cli.out"
        fail "the client's two workers did not appear"
    fi
    echo "client coordinator $cpid, workers: $(echo "$cworkers" | tr '\n' ' ')"
    # Let them connect and start measuring: 3000 packets from the client's device are well past
    # both workers' warm-ups (16 sends of 64 KiB each: 2 x 256 packets at rxe's MTU of 4096).
    wait_traffic "$VL_DEV1" 3000 "$cpid"
}

step "SIGKILL of the client's coordinator: its workers and queues are gone within 2 s"
start_pair
ls /dev/mqueue
if [ ! -e "/dev/mqueue/vl-procs-$cpid" ]; then
    cat "$TMPDIR/srv.out" "$TMPDIR/cli.out"
    fail "no queue of the client's coordinator during the run"
fi
kill -KILL "$cpid"
sleep 2
for w in $cworkers; do
    [ ! -d "/proc/$w" ] || fail "client worker $w outlived its coordinator by 2 s: $(head -3 "/proc/$w/status")"
done
echo "no client worker left"
left=
for q in /dev/mqueue/vl-procs-"$cpid"*; do
    [ ! -e "$q" ] || left="$left $q"
done
[ -z "$left" ] || fail "queues of the killed coordinator left: $left"
echo "no queue of the killed coordinator left"
cat "$TMPDIR/cli.out"
# Each worker says so, by name; the first removes the queues, the other finds them gone.
grep -Eq "^vl_write_bw worker [0-9]+: the coordinator \(pid $cpid\) is gone; removed" \
    "$TMPDIR/cli.out" || fail "no worker said that its coordinator (pid $cpid) is gone and what it removed"
rc=0
_vl_watch "$spid" 60 || rc=$?
cat "$TMPDIR/srv.out"
[ "$rc" -ne 124 ] || fail "the server still ran 60 s after the client's coordinator was killed"
[ "$rc" -ne 0 ] || fail "the server exited 0"
sleep 1
[ -z "$(workers_of vl_write_bw)" ] || fail "workers left: $(workers_of vl_write_bw)"
[ -z "$(ls /dev/mqueue)" ] || fail "queues left in /dev/mqueue: $(ls /dev/mqueue)"
echo "no worker and no queue left"

step "coordinator and workers all killed: the next run removes the queues and says so"
# A server coordinator whose workers wait for a client is enough: it has its three queues.
next_port
vl_write_bw -d "$VL_DEV0" -u 20 -p "$PORT" --procs 2 --wait 60 >"$TMPDIR/lone.out" 2>&1 &
lpid=$!
wait_port "$PORT" 60 "$lpid"
next_port
lworkers=$(workers_of "-p $((PORT - 1)) ")
echo "coordinator $lpid, workers: $(echo "$lworkers" | tr '\n' ' ')"
[ "$(echo "$lworkers" | wc -w)" -eq 2 ] || fail "expected 2 workers of coordinator $lpid: $lworkers"
# shellcheck disable=SC2086 # one pid a word
kill_outright "$lpid" $lworkers
ls /dev/mqueue
[ -e "/dev/mqueue/vl-procs-$lpid" ] || fail "the dead coordinator's queue is not there to be found"
vl_pair_ok vl_write_bw "-s 65536 -n 100 --procs 1 --wait 60"
next_port
expect_contains "$SERVER_OUT" "note: removed 3 message queues left by a coordinator that is gone (pid $lpid): /vl-procs-$lpid /vl-procs-$lpid-w0 /vl-procs-$lpid-w1"
[ -z "$(ls /dev/mqueue)" ] || fail "queues left in /dev/mqueue: $(ls /dev/mqueue)"
echo "/dev/mqueue is empty"
