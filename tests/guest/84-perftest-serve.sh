#!/bin/sh
# shellcheck disable=SC2086 # $VL_PT_COMMON holds several options, split on purpose
# A server that stays up (--serve): one vl_write_bw server serves three clients in a row. The
# first completes; the second is killed (SIGKILL) mid-run, which ends its run only: the server
# logs it and listens again; the third completes. The server printed each completed run's row,
# the same as its client's; SIGTERM then stops it with exit 0 and a summary that counts 2
# completed and 1 failed.
# timeout: 180
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"
# shellcheck source=tests/guest/perftest-lib.sh
. "$VL_TESTS/perftest-lib.sh"

srv=$TMPDIR/serve.out
opts="-s 65536 -D 3"

next_port
vl_write_bw -d "$VL_DEV0" $VL_PT_COMMON -p "$PORT" $opts --serve >"$srv" 2>&1 </dev/null &
spid=$!
wait_port "$PORT" 60 "$spid"

# client N [ARGS...]: client N in the foreground, its output in $TMPDIR/cN.out.
client() {
    _c=$1
    rc=0
    run_timeout 60 vl_write_bw -d "$VL_DEV1" $VL_PT_COMMON -p "$PORT" $opts "$VL_ADDR0" \
        >"$TMPDIR/c$_c.out" 2>&1 </dev/null || rc=$?
    cat "$TMPDIR/c$_c.out"
    [ "$rc" = 0 ] || fail "client $_c exited $rc"
}

step "client 1 completes"
client 1
expect_row "$TMPDIR/c1.out" "client 1"

step "client 2 is killed mid-run: its run ends, the server stays up"
wait_port "$PORT" 60 "$spid"
vl_write_bw -d "$VL_DEV1" $VL_PT_COMMON -p "$PORT" $opts "$VL_ADDR0" >"$TMPDIR/c2.out" 2>&1 </dev/null &
cpid=$!
wait_traffic "$VL_DEV1" 3000 "$cpid"
kill -KILL "$cpid"
wait "$cpid" 2>/dev/null || true
wait_for 60 "$spid" grep -q -- "--serve: client 2 failed" "$srv" ||
    { cat "$srv"; fail "the server did not log client 2's failure"; }
_vl_alive "$spid" || { cat "$srv"; fail "the server ended with its killed client"; }

step "client 3 completes"
wait_port "$PORT" 60 "$spid"
client 3
expect_row "$TMPDIR/c3.out" "client 3"

step "SIGTERM: the server stops with 0 and a summary"
signal_exit TERM "$spid" 30 0 "$srv" "served 3 client(s): 2 completed, 1 failed"
# The server printed the row of each completed run: the same as its client's.
n=$(rows "$srv" | wc -l)
[ "$n" = 2 ] || fail "the server printed $n rows, expected 2 (clients 1 and 3)"
for c in 1 3; do
    row=$(rows "$TMPDIR/c$c.out" | sed -n 1p)
    rows "$srv" | grep -qxF "$row" || fail "client $c's row is not among the server's: $row"
done
echo "one --serve server: 3 clients in a row, one killed, 2 rows, stopped cleanly"
