#!/bin/sh
# Lesson 10 when things go wrong: a worker that dies (--kill-worker) is named within seconds
# (not when --wait runs out) and the run fails; a worker that stalls is named when --wait runs
# out; SIGTERM to the coordinator removes its queues; what a coordinator and its workers killed
# outright (SIGKILL) left, the next run removes at start. After each: nothing in /dev/mqueue and
# no worker process left.
# timeout: 180
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"

require_bin lesson10_mqueue
L=lesson10_mqueue
out=$TMPDIR/l10.out

if ! grep -q ' mqueue ' /proc/mounts; then
    mkdir -p /dev/mqueue
    mount -t mqueue none /dev/mqueue
fi

# no_leftovers: no queue in /dev/mqueue, no worker process (checked for 10 s: orphans poll).
no_leftovers() {
    left=$(ls /dev/mqueue)
    [ -z "$left" ] || fail "queues left in /dev/mqueue: $left"
    _end=$(($(_vl_now) + 1000))
    pids=$(sed -n 's/^ *worker [0-9]*: pid \([0-9]*\)$/\1/p' "$out")
    for p in $pids; do
        while _vl_alive "$p"; do
            [ "$(_vl_now)" -lt "$_end" ] || fail "worker pid $p is still running"
            sleep 0.1
        done
    done
    echo "no queue and no worker left"
}

step "--kill-worker 1 with --wait 60: named at once"
t0=$(_vl_now)
rc=0
run_timeout 120 $L --no-tour --kill-worker 1 --wait 60 >"$out" 2>&1 || rc=$?
took=$(($(_vl_now) - t0))
cat "$out"
echo "exit status $rc after $((took / 100)).$((took % 100)) s"
[ "$rc" = 1 ] || fail "expected exit status 1, got $rc"
[ "$took" -lt 3000 ] || fail "took $((took / 100)) s to notice the dead worker (bound: 30 s, --wait 60)"
pid1=$(sed -n 's/^ *worker 1: pid \([0-9]*\)$/\1/p' "$out")
[ -n "$pid1" ] || fail "no pid for worker 1"
expect_contains "$out" "lesson10_mqueue: error: worker 1 (pid $pid1) was killed by SIGKILL before sending its Result and Done"
expect_contains "$out" "(mq_open of each name: ENOENT)"
no_leftovers

step "--stall-worker 0 --wait 3: named when the wait runs out"
rc=0
run_timeout 120 $L --no-tour --stall-worker 0 --wait 3 >"$out" 2>&1 || rc=$?
cat "$out"
[ "$rc" = 1 ] || fail "expected exit status 1, got $rc"
expect_contains "$out" "sent no Result and Done within 3 s (--wait); still running but silent"
expect_contains "$out" "stalled, then aborted"
no_leftovers

# start_stalled: starts a coordinator whose worker 0 stalls, in the background (its pid in
# $cpid), and waits until it waits for the results (step 13), its queues and workers all there.
start_stalled() {
    $L --no-tour --stall-worker 0 --wait 60 >"$out" 2>&1 &
    cpid=$!
    _rc=0
    wait_for 30 "$cpid" grep -q '^\[13\]' "$out" || _rc=$?
    case $_rc in
        0) ;;
        2) cat "$out"; fail "the coordinator ended before step 13" ;;
        *) cat "$out"; fail "no step 13 within $(scaled 30) s" ;;
    esac
}

step "SIGTERM to the coordinator while it waits: the queues go with it"
rc=0
start_stalled
ls /dev/mqueue
kill -TERM "$cpid"
_vl_watch "$cpid" 20 || rc=$?
cat "$out"
[ "$rc" = 143 ] || fail "expected the coordinator to die of SIGTERM (status 143), got $rc"
expect_contains "$out" "lesson10_mqueue: terminated (SIGTERM): removed 3 message queues this process created; exiting"
no_leftovers

step "SIGKILL to the coordinator and its workers: the next run removes what they left"
rc=0
start_stalled
wpids=$(sed -n 's/^ *worker [0-9]*: pid \([0-9]*\)$/\1/p' "$out")
# Stopped first, so that no one of them can react to another's death (the workers would
# remove their coordinator's queues when told it died): then nobody removes anything.
# shellcheck disable=SC2086 # one pid per word
kill -STOP "$cpid" $wpids
# shellcheck disable=SC2086
kill -KILL $wpids "$cpid"
_vl_watch "$cpid" 20 || rc=$?
[ "$rc" = 137 ] || fail "expected the coordinator to die of SIGKILL (status 137), got $rc"
left=$(ls /dev/mqueue)
echo "left in /dev/mqueue: $left"
[ -n "$left" ] || fail "nothing left in /dev/mqueue: this step shows nothing"
run_timeout 120 $L --no-tour -k 1 -n 10 >"$out" 2>&1 || fail "the next run failed"
cat "$out"
expect_contains "$out" "removed 3 message queues left by a coordinator that is gone (pid $cpid): /vl10-$cpid /vl10-$cpid-w0 /vl10-$cpid-w1"
no_leftovers
echo "lesson 10 fault scenarios passed"
