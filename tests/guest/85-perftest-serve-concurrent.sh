#!/bin/sh
# shellcheck disable=SC2086 # $VL_PT_COMMON holds several options, split on purpose
# Incast (--serve --concurrent N). vl_send_bw and vl_read_bw servers sum two clients that ran
# at once; SIGTERM in the middle of a third client's run stops the server with 0 and its
# summary, and the client hears why. One vl_write_bw server serves three clients at once, each
# with its own QPs and its own row (the same as the client's, bytes = iterations x size, with
# --validate), then a #total row over the three (3 x iterations, 3 x iterations x size bytes);
# a fourth client that comes while they run is refused as busy. A second wave of three: one is
# killed (SIGKILL) mid-run and its run ends alone; a client with another -s is refused by name
# and a stranger's garbage is logged and dropped; the other two complete and are summed. The
# server stays up and serves a seventh client alone (no sum: one client). A latency tool
# refuses --concurrent by name. SIGTERM then ends the server with 0 and the summary, and no QP
# of the tool is left.
# timeout: 150
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"
# shellcheck source=tests/guest/perftest-lib.sh
. "$VL_TESTS/perftest-lib.sh"

srv=$TMPDIR/serve.out
size=65536
iters=1000
opts="-s $size -n $iters --validate"

step "a latency tool refuses --concurrent by name"
rc=0
vl_write_lat -d "$VL_DEV0" --serve --concurrent 3 >"$TMPDIR/lat.out" 2>&1 </dev/null || rc=$?
cat "$TMPDIR/lat.out"
[ "$rc" = 2 ] || fail "vl_write_lat --serve --concurrent 3 exited $rc, expected 2"
expect_contains "$TMPDIR/lat.out" "serve them one after another"

step "vl_send_bw and vl_read_bw: two clients at once (-D 3), their #total; SIGTERM mid-run"
for t in vl_send_bw vl_read_bw; do
    next_port
    $t -d "$VL_DEV0" $VL_PT_COMMON -p "$PORT" -s "$size" -D 3 --serve --concurrent 2 \
        >"$TMPDIR/$t.srv" 2>&1 </dev/null &
    tpid=$!
    wait_port "$PORT" 60 "$tpid"
    for c in 1 2; do
        $t -d "$VL_DEV1" $VL_PT_COMMON -p "$PORT" -s "$size" -D 3 "$VL_ADDR0" \
            >"$TMPDIR/$t.c$c" 2>&1 </dev/null &
        echo $! >"$TMPDIR/$t.p$c"
    done
    for c in 1 2; do
        rc=0
        _vl_watch "$(cat "$TMPDIR/$t.p$c")" 60 || rc=$?
        cat "$TMPDIR/$t.c$c"
        [ "$rc" = 0 ] || { cat "$TMPDIR/$t.srv"; fail "$t client $c exited $rc"; }
        expect_row "$TMPDIR/$t.c$c" "$t client $c"
    done
    wait_for 30 "$tpid" grep -q '^#total' "$TMPDIR/$t.srv" ||
        { cat "$TMPDIR/$t.srv"; fail "$t: no #total row for two clients at once"; }
    grep '^#total' "$TMPDIR/$t.srv" | awk -v s="$size" '$2 == s && $3 > 0 && $5 > 0 { ok = 1 } END { exit !ok }' ||
        fail "$t: the #total row has no iterations or average"
    expect_contains "$TMPDIR/$t.srv" "2 clients, "
    # A third client, and SIGTERM in the middle of its run: it is told, the server exits 0.
    $t -d "$VL_DEV1" $VL_PT_COMMON -p "$PORT" -s "$size" -D 3 "$VL_ADDR0" \
        >"$TMPDIR/$t.c3" 2>&1 </dev/null &
    p3=$!
    case $t in vl_read_bw) dev=$VL_DEV0 ;; *) dev=$VL_DEV1 ;; esac
    wait_traffic "$dev" 2000 "$p3"
    signal_exit TERM "$tpid" 30 0 "$TMPDIR/$t.srv" "served 3 client(s): 2 completed, 1 failed"
    rc=0
    _vl_watch "$p3" 30 || rc=$?
    cat "$TMPDIR/$t.c3"
    [ "$rc" != 0 ] || fail "$t client 3 exited 0 though its server was stopped mid-run"
    expect_contains "$TMPDIR/$t.c3" "SIGTERM"
done

next_port
vl_write_bw -d "$VL_DEV0" $VL_PT_COMMON -p "$PORT" $opts --serve --concurrent 3 >"$srv" 2>&1 </dev/null &
spid=$!
wait_port "$PORT" 60 "$spid"

# start N: client N in the background, its output in $TMPDIR/cN.out, its pid in $TMPDIR/cN.pid.
start() {
    vl_write_bw -d "$VL_DEV1" $VL_PT_COMMON -p "$PORT" $opts "$VL_ADDR0" \
        >"$TMPDIR/c$1.out" 2>&1 </dev/null &
    echo $! >"$TMPDIR/c$1.pid"
}
# finish N: wait for client N (at most 90 s); it must exit 0 with a row of $iters x $size that
# the server printed too.
finish() {
    _fc=0
    _vl_watch "$(cat "$TMPDIR/c$1.pid")" 90 || _fc=$?
    cat "$TMPDIR/c$1.out"
    [ "$_fc" = 0 ] || { cat "$srv"; fail "client $1 exited $_fc"; }
    expect_row "$TMPDIR/c$1.out" "client $1"
    _row=$(rows "$TMPDIR/c$1.out" | sed -n 1p)
    echo "$_row" | awk -v s="$size" -v n="$iters" '$1 == s && $2 == n { ok = 1 } END { exit !ok }' ||
        fail "client $1's row is not $size bytes x $iters iterations: $_row"
    # (The server prints a client's report once its run is torn down: a moment after the client.)
    wait_for 30 "$spid" server_has_row "$_row" ||
        { cat "$srv"; fail "client $1's row is not among the server's: $_row"; }
}
server_has_row() { rows "$srv" | grep -qxF "$1"; }
# sum_count N: the number of #total lines in the server's output is N.
sum_count() { [ "$(grep -c '^#total' "$srv")" = "$1" ]; }
# check_sum K: the last #total line adds up K clients of $iters x $size.
check_sum() {
    _s=$(grep '^#total' "$srv" | tail -n 1)
    echo "server: $_s"
    _want=$(($1 * iters * size))
    echo "$_s" | awk -v s="$size" -v n="$(($1 * iters))" '$2 == s && $3 == n && $5 > 0 { ok = 1 } END { exit !ok }' ||
        fail "the #total row is not $size bytes x $(($1 * iters)) iterations with an average: $_s"
    echo "$_s" | grep -qF "$1 clients, $_want bytes over the" ||
        fail "the #total line does not say $1 clients and $_want bytes: $_s"
}

# refused WHAT OPTS TEXT: a client with OPTS exits non-zero at once, saying TEXT.
refused() {
    _rc=0
    run_timeout 30 vl_write_bw -d "$VL_DEV1" $VL_PT_COMMON -p "$PORT" $2 "$VL_ADDR0" \
        >"$TMPDIR/refused.out" 2>&1 </dev/null || _rc=$?
    cat "$TMPDIR/refused.out"
    [ "$_rc" != 0 ] || fail "$1 was served"
    expect_contains "$TMPDIR/refused.out" "$3"
}

step "three clients at once (a fourth is busy): three rows and their sum"
start 1
start 2
start 3
wait_traffic "$VL_DEV1" 8000 "$(cat "$TMPDIR/c3.pid")"
refused "a fourth client" "$opts" "the server is busy with 3 clients (--concurrent 3)"
for c in 1 2 3; do finish "$c"; done
wait_for 30 "$spid" sum_count 1 || { cat "$srv"; fail "no #total row after the first three clients"; }
check_sum 3
expect_contains "$srv" "# clients 1, 2, 3 ran together; 3 completed"

step "three more at once, one killed mid-run; a mismatched client and a stranger refused"
start 4
start 5
start 6
wait_traffic "$VL_DEV1" 8000 "$(cat "$TMPDIR/c5.pid")"
kill -KILL "$(cat "$TMPDIR/c5.pid")"
wait "$(cat "$TMPDIR/c5.pid")" 2>/dev/null || true
refused "a client with -s 4096" "-s 4096 -n $iters --validate" "message size (-s / -a): client 4096, server $size"
printf '\000\000\000\004\336\255\276\357' | nc -w 1 "$VL_ADDR0" "$PORT" >/dev/null 2>&1 || true
wait_for 10 "$spid" grep -q "ignored a connection from" "$srv" ||
    { cat "$srv"; fail "the stranger was not logged"; }
for c in 4 6; do finish "$c"; done
wait_for 60 "$spid" sum_count 2 || { cat "$srv"; fail "no #total row after the second wave"; }
check_sum 2
expect_contains "$srv" "failed: "
_vl_alive "$spid" || { cat "$srv"; fail "the server ended with its killed client"; }

step "the server stays up: a seventh client alone (no sum for one)"
start 7
finish 7
sum_count 2 || { cat "$srv"; fail "a #total row for a client that ran alone"; }

step "SIGTERM: the server stops with 0 and a summary, and leaves no QP"
signal_exit TERM "$spid" 30 0 "$srv" "served 9 client(s): 6 completed, 3 failed"
n=$(grep -c '^# client [0-9]* from ' "$srv")
[ "$n" = 6 ] || fail "the server printed $n client reports, expected 6"
rdma resource show qp | grep -v ' type GSI\| type SMI' | grep -c 'vl_write_bw' |
    grep -qx 0 || { rdma resource show qp; fail "QPs of vl_write_bw left"; }
echo "one --serve --concurrent 3 server: 7 clients, 2 waves summed, one killed, stopped cleanly"
