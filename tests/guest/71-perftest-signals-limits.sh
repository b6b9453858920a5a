#!/bin/sh
# shellcheck disable=SC2086 # $VL_PT_COMMON holds several options, split on purpose
# Stopping on request, and a limit that is too small, end cleanly and say why on both sides.
# SIGINT to a client in the middle of a run: it exits 130 and the server (exit 1) names the
# interruption; the client ran as one thread (its signals and its device's events are taken by
# the run itself, verbs_lab::signals), and so does the client of vl_send_lat. SIGTERM to a server mid-run: it exits 143 and the client names it. SIGINT to a
# server still waiting for its client: 130 at once. A client whose locked-memory limit
# (ulimit -l, for a user without CAP_IPC_LOCK) cannot hold its buffers: exit 1 with the
# memlock hint, the server told the same cause, and no process left behind.
# timeout: 240
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"
# shellcheck source=tests/guest/perftest-lib.sh
. "$VL_TESTS/perftest-lib.sh"

srv=$TMPDIR/srv.out
cli=$TMPDIR/cli.out

# stop_one SIGNAL VICTIM-ROLE TOOL: a -D 60 pair; SIGNAL goes to VICTIM-ROLE (server or client)
# once the run is under way. Sets VICTIM_RC, OTHER_RC, VICTIM_OUT, OTHER_OUT and CLIENT_THREADS
# (the client's threads while it ran).
stop_one() {
    next_port
    "$3" -d "$VL_DEV0" $VL_PT_COMMON -p "$PORT" -D 60 >"$srv" 2>&1 &
    _spid=$!
    wait_port "$PORT" 60 "$_spid"
    "$3" -d "$VL_DEV1" $VL_PT_COMMON -p "$PORT" -D 60 "$VL_ADDR0" >"$cli" 2>&1 &
    _cpid=$!
    wait_header "$cli" "$_cpid"
    sleep 2
    CLIENT_THREADS=$(awk '$1 == "Threads:" { print $2 }' "/proc/$_cpid/status" 2>/dev/null || echo gone)
    if [ "$2" = server ]; then
        _v=$_spid _o=$_cpid VICTIM_OUT=$srv OTHER_OUT=$cli
    else
        _v=$_cpid _o=$_spid VICTIM_OUT=$cli OTHER_OUT=$srv
    fi
    _t0=$(_vl_now)
    kill "-$1" "$_v"
    VICTIM_RC=0
    _vl_watch "$_v" 20 || VICTIM_RC=$?
    OTHER_RC=0
    _vl_watch "$_o" 30 || OTHER_RC=$?
    _t1=$(_vl_now)
    echo "--- $2, sent $1 (exit $VICTIM_RC)"
    cat "$VICTIM_OUT"
    echo "--- the client ran $CLIENT_THREADS thread(s)"
    echo "--- its peer (exit $OTHER_RC)"
    cat "$OTHER_OUT"
    within "seconds until both sides ended" $(((_t1 - _t0) / 100)) 0 20
}

step "SIGINT to the client of vl_write_bw mid-run: 130; the server names the interruption"
stop_one INT client vl_write_bw
[ "$VICTIM_RC" = 130 ] || fail "the client exited $VICTIM_RC, expected 130"
[ "$OTHER_RC" = 1 ] || fail "the server exited $OTHER_RC, expected 1"
expect_contains "$VICTIM_OUT" "interrupted by SIGINT"
expect_contains "$OTHER_OUT" "the client reported: interrupted by SIGINT"
[ "$CLIENT_THREADS" = 1 ] || fail "the client of vl_write_bw ran $CLIENT_THREADS threads, expected 1"

step "SIGTERM to the server of vl_send_lat mid-run: 143; the client names the interruption"
stop_one TERM server vl_send_lat
[ "$VICTIM_RC" = 143 ] || fail "the server exited $VICTIM_RC, expected 143"
[ "$OTHER_RC" = 1 ] || fail "the client exited $OTHER_RC, expected 1"
expect_contains "$OTHER_OUT" "the server reported: interrupted by SIGTERM"
[ "$CLIENT_THREADS" = 1 ] || fail "the client of vl_send_lat ran $CLIENT_THREADS threads, expected 1"

step "SIGINT to a server still waiting for its client: 130 at once"
next_port
vl_read_bw -d "$VL_DEV0" -p "$PORT" >"$srv" 2>&1 &
spid=$!
wait_port "$PORT" 60 "$spid"
signal_exit INT "$spid" 5 130 "$srv" "interrupted by SIGINT (no peer connected yet)"

step "a locked-memory limit too small for the buffers: exit 1 with the memlock hint"
# root has CAP_IPC_LOCK and ignores the limit: the client runs as an unprivileged user.
grep -q '^vlnobody:' /etc/passwd || echo 'vlnobody:x:65534:65534::/tmp:/bin/sh' >>/etc/passwd
next_port
vl_write_bw -d "$VL_DEV0" $VL_PT_COMMON -p "$PORT" -s 1048576 -n 10 -q 4 >"$srv" 2>&1 &
spid=$!
wait_port "$PORT" 60 "$spid"
rc=0
su vlnobody -s /bin/sh -c "ulimit -l 64 && exec $(command -v vl_write_bw) -d $VL_DEV1 \
    $VL_PT_COMMON -p $PORT -s 1048576 -n 10 -q 4 $VL_ADDR0" >"$cli" 2>&1 || rc=$?
src=0
_vl_watch "$spid" 30 || src=$?
echo "--- client (exit $rc)"
cat "$cli"
echo "--- server (exit $src)"
cat "$srv"
[ "$rc" = 1 ] || fail "the client exited $rc, expected 1"
expect_contains "$cli" "ulimit -l"
expect_contains "$cli" "locked-memory limit"
[ "$src" = 1 ] || fail "the server exited $src, expected 1"
expect_contains "$srv" "the client reported"
expect_contains "$srv" "ulimit -l"
# Nothing left: no vl_* process, no QP or MR of ours in the kernel.
sleep 1
# shellcheck disable=SC2009 # busybox's ps, counted; the guest has no pgrep -c
left=$(ps | grep -c '[v]l_write_bw' || true)
[ "$left" = 0 ] || { ps; fail "$left vl_write_bw process(es) left"; }
if command -v rdma >/dev/null 2>&1; then
    rdma resource show qp | grep -v ' type GSI\| type SMI' | grep -c 'vl_write_bw' \
        | grep -qx 0 || { rdma resource show qp; fail "QPs of vl_write_bw left"; }
fi
echo "signals and limits end runs cleanly, named on both sides"
