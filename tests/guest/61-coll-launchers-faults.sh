#!/bin/sh
# Collectives launched the way clusters launch them, and ranks that misbehave:
# - four processes started by hand with torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK,
#   MASTER_ADDR, MASTER_PORT): rank 0 prints, every element checked;
# - four started with --rank/--world-size/--master and no local rank: each learns its local
#   rank (0..3 on this one host) from the host hashes at the rendezvous, and the header says so;
# - a rank with another world size is refused by name, and ranks given other options (-e, -t)
#   are refused at the rendezvous, both naming the option and both values; so are ranks given
#   GID indexes of different families (-x 0, link-local IPv6, against -x 1, IPv4), naming both;
# - a rank killed (SIGKILL) mid-run: every other rank exits non-zero within its peer timeout,
#   naming rank 2; a rank stopped (SIGSTOP: silent, its sockets open, as a host that lost
#   power) — rank 2, then rank 0 — is named by every other rank, not the stalled neighbours
#   downstream of it, within the peer timeout and rank 0's verdict; under --np (ranks coordinated over POSIX message queues) the launcher names
#   it too and tells the others at once, and no rank and no queue is left;
# - the --np launcher itself killed (SIGKILL): its ranks die with it (PR_SET_PDEATHSIG) and
#   remove its queues;
# - --np piped into `head -n 2`: rank 0 leaves at its first unread line, and the launcher ends
#   the run quietly (status 0, nothing on stderr) instead of its ranks blaming rank 0 after
#   their peer timeout; with --json and a gate owed, it runs to the end and the gate's status
#   (3) and the whole file come all the same.
# Took 68 s on a busy 2-core host (TCG guest, other builds and guests sharing it).
# timeout: 300
# slow: four ranks started five times; after a killed rank the TCP-started others wait for its socket or their peer timeout
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"

require_bin vl_all_reduce_perf
mqueue_ready


# start_rank R PORT WORLD ARGS...: starts rank R of vl_all_reduce_perf in the background with
# torchrun's variables; its pid in PID<R>, its output in $TMPDIR/r<R>.out.
start_rank() {
    _sr=$1 _port=$2 _world=$3
    shift 3
    RANK=$_sr WORLD_SIZE=$_world LOCAL_RANK=$_sr MASTER_ADDR=127.0.0.1 MASTER_PORT=$_port \
        vl_all_reduce_perf --ib-dev "$VL_DEV0,$VL_DEV1" "$@" >"$TMPDIR/r$_sr.out" 2>&1 </dev/null &
    eval "PID$_sr=\$!"
}

# start_ranks PORT WORLD ARGS...: starts ranks 0..WORLD-1 alike (start_rank).
start_ranks() {
    _port=$1 _world=$2
    shift 2
    _r=0
    while [ "$_r" -lt "$_world" ]; do
        start_rank "$_r" "$_port" "$_world" "$@"
        _r=$((_r + 1))
    done
}

# rank_rc R SECS: waits (bounded) for rank R; its exit status in RC. (Not in a $(...) subshell:
# a subshell cannot wait for its parent's children.)
rank_rc() {
    RC=0
    eval "_vl_watch \$PID$1 $2" || RC=$?
}

# ranks_listed FILE: until FILE lists all four ranks (90 s, scaled).
ranks_listed() {
    wait_for 90 - grep -q -F -e "#  Rank  3" "$1" 2>/dev/null \
        || { cat "$1"; fail "no '#  Rank  3' in $1 after $(scaled 90) s"; }
}

step "four ranks by hand, with torchrun's environment"
start_ranks 29511 4 -b 8 -e 64K -f 8 -n 1 -w 0 -c 1 --timeout 30
for r in 0 1 2 3; do
    rank_rc "$r" 150
    rc=$RC
    echo "--- rank $r (exit $rc)"
    cat "$TMPDIR/r$r.out"
    [ "$rc" = 0 ] || fail "rank $r exited $rc"
done
expect_contains "$TMPDIR/r0.out" "nranks 4 (from torchrun (RANK/WORLD_SIZE))"
expect_contains "$TMPDIR/r0.out" "# Out of bounds values : 0 OK"
grep -E '^ +32768 ' "$TMPDIR/r0.out" >/dev/null || fail "no 32 KiB row"
for r in 1 2 3; do
    [ ! -s "$TMPDIR/r$r.out" ] || fail "rank $r printed, but only rank 0 should"
done

step "four ranks by hand with --rank/--world-size/--master and no local rank: counted from the host name"
# No launcher gives a local rank: each rank learns it at the rendezvous from its host's hash
# (all four on this one guest), in rank order, and picks its device and CPU by it.
_r=0
while [ "$_r" -lt 4 ]; do
    vl_all_reduce_perf --ib-dev "$VL_DEV0,$VL_DEV1" --rank "$_r" --world-size 4 \
        --master 127.0.0.1:29519 -b 8 -e 64 -n 1 -w 0 -c 1 --timeout 30 \
        >"$TMPDIR/r$_r.out" 2>&1 </dev/null &
    eval "PID$_r=\$!"
    _r=$((_r + 1))
done
for r in 0 1 2 3; do
    rank_rc "$r" 150
    [ "$RC" = 0 ] || { cat "$TMPDIR/r$r.out"; fail "rank $r exited $RC"; }
done
cat "$TMPDIR/r0.out"
expect_contains "$TMPDIR/r0.out" "nranks 4 (from flags (--rank/--world-size))"
expect_contains "$TMPDIR/r0.out" "#  1 host, local ranks counted from the host names"
for r in 0 1 2 3; do
    grep -E "^#  Rank +$r .* local $r of 4\$" "$TMPDIR/r0.out" >/dev/null \
        || fail "rank $r's line does not say 'local $r of 4'"
done
# Local ranks 0..3 take the devices round-robin, as --np's ranks do.
devs=$(grep '^#  Rank' "$TMPDIR/r0.out" | awk '{ print $9 }' | tr '\n' ' ')
[ "$devs" = "$VL_DEV0 $VL_DEV1 $VL_DEV0 $VL_DEV1 " ] || fail "devices by local rank: $devs"

step "a rank with another world size is refused by name"
RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29512 vl_all_reduce_perf \
    --ib-dev "$VL_DEV0" -b 8 -e 8 -n 1 --bootstrap-timeout 30 >"$TMPDIR/r0.out" 2>&1 </dev/null &
eval "PID0=\$!" # read by rank_rc
RANK=1 WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=29512 vl_all_reduce_perf \
    --ib-dev "$VL_DEV1" -b 8 -e 8 -n 1 --bootstrap-timeout 30 >"$TMPDIR/r1.out" 2>&1 </dev/null &
eval "PID1=\$!" # read by rank_rc
rank_rc 0 60
rc0=$RC
rank_rc 1 60
rc1=$RC
cat "$TMPDIR/r0.out" "$TMPDIR/r1.out"
[ "$rc0" = 1 ] || fail "rank 0 exited $rc0, expected 1"
[ "$rc1" = 1 ] || fail "the odd rank exited $rc1, expected 1"
expect_contains "$TMPDIR/r0.out" "was started with world size 3, rank 0 with 2"
expect_contains "$TMPDIR/r1.out" "rank 0 refused the job"

# both_refused PORT ZERO ONE: ranks 0 and 1 of a world of two on PORT, with the options ZERO and
# ONE (split into words), each bootstrap timeout $bt: both exit 1 within it. Elapsed seconds in
# $elapsed.
both_refused() {
    echo "\$ rank 0: $2; rank 1: $3"
    t0=$(_vl_now)
    # shellcheck disable=SC2086 # $2 and $3 are lists of options
    start_rank 0 "$1" 2 $2 --bootstrap-timeout "$bt"
    # shellcheck disable=SC2086
    start_rank 1 "$1" 2 $3 --bootstrap-timeout "$bt"
    rank_rc 0 $((bt + 30))
    rc0=$RC
    rank_rc 1 $((bt + 30))
    rc1=$RC
    elapsed=$((($(_vl_now) - t0) / 100))
    cat "$TMPDIR/r0.out" "$TMPDIR/r1.out"
    [ "$rc0" = 1 ] || fail "rank 0 exited $rc0 with $2 against $3, expected 1"
    [ "$rc1" = 1 ] || fail "rank 1 exited $rc1 with $3 against $2, expected 1"
    [ "$elapsed" -le "$bt" ] || fail "the ranks took ${elapsed}s, more than their bootstrap timeout"
}

step "ranks given different options are refused at the rendezvous, naming the option"
# Before, -e 64 against -e 1M ended with rank 0 printing a full table (exit 0) and rank 1 blaming
# it as gone; -d float against -d int32 reported wrong values. Now rank 0 compares the options
# every rank must share with its own and refuses the job: both ranks exit 1 within their
# bootstrap timeout, each naming the option and both values.
bt=$(scaled 30)
port=29515
for case in "-e 64|-e 1M|-e 1048576, rank 0 with -e 64" \
    "-d float|-d int32|-d int32, rank 0 with -d float"; do
    zero=${case%%|*} rest=${case#*|}
    one=${rest%%|*} said="runs with ${rest#*|}: give every rank the same options"
    both_refused "$port" "-b 8 $zero -n 1 -w 0" "-b 8 $one -n 1 -w 0"
    expect_contains "$TMPDIR/r0.out" "bootstrap failed: rank 1 (host"
    expect_contains "$TMPDIR/r0.out" "$said"
    expect_contains "$TMPDIR/r1.out" "bootstrap failed: rank 0 refused the job: rank 1 (host"
    expect_contains "$TMPDIR/r1.out" "$said"
    expect_not_contains "$TMPDIR/r0.out" "is gone"
    expect_not_contains "$TMPDIR/r1.out" "is gone"
    echo "both refused in ${elapsed}s, exit 1, naming the option"
    port=$((port + 1))
done

step "ranks given GID indexes of two families are refused at the rendezvous, naming both GIDs"
# Index 0 of rxe0 is its fe80:: link-local GID, index 1 of rxe1 its IPv4-mapped one (both
# RoCE v2; 10-devinfo shows the table). Before, both ranks failed at the QP connect with
# ibv_modify_qp(RTR) EINVAL; now rank 0 compares the GIDs' families and refuses the job: both
# exit 1 within their bootstrap timeout, naming both GIDs as addresses and -x.
gids=/sys/class/infiniband
gid0=$(cat "$gids/$VL_DEV0/ports/1/gids/0") gid1=$(cat "$gids/$VL_DEV1/ports/1/gids/1")
case $gid0 in fe80:*) ;; *) fail "$VL_DEV0 GID index 0 is $gid0, not link-local" ;; esac
case $gid1 in
    0000:0000:0000:0000:0000:ffff:*) ;;
    *) fail "$VL_DEV1 GID index 1 is $gid1, not IPv4-mapped" ;;
esac
both_refused 29517 "-b 8 -e 8 -n 1 -w 0 -x 0" "-b 8 -e 8 -n 1 -w 0 -x 1"
for out in "$TMPDIR/r0.out" "$TMPDIR/r1.out"; do
    expect_contains "$out" "uses GID $VL_ADDR1 (IPv4), rank 0 (host"
    expect_contains "$out" "$VL_DEV0) GID fe80::"
    expect_contains "$out" "(IPv6): an IPv4 and an IPv6 GID cannot address each other"
    expect_contains "$out" "give every rank a GID index of the same kind with -x"
    expect_not_contains "$out" "ibv_modify_qp"
done
expect_contains "$TMPDIR/r1.out" "bootstrap failed: rank 0 refused the job: rank 1 (host"
echo "both refused in ${elapsed}s, exit 1, naming $VL_ADDR1 and the fe80:: GID"

step "a device, port or GID index this machine does not have: one line, exit 2, no rank started"
# The --np launcher opens what its ranks would (README: checked before anything runs); a rank
# alone says the same with the same code.
for bad in "--np 2 --ib-dev nosuch|RDMA device 'nosuch' not found; available: " \
    "--np 2 --ib-dev $VL_DEV0,nosuch|RDMA device 'nosuch' not found" \
    "--np 2 --ib-dev $VL_DEV0 --ib-port 2|invalid argument: device $VL_DEV0 has no port 2" \
    "--np 2 --ib-dev $VL_DEV0 -x 77|invalid argument: $VL_DEV0 port 1: " \
    "--ib-dev nosuch|RDMA device 'nosuch' not found"; do
    flags=${bad%%|*} want=${bad#*|}
    out=$TMPDIR/baddev.out
    # shellcheck disable=SC2086 # $flags is a list of flags
    expect_fail_within 30 "vl_all_reduce_perf $flags" vl_all_reduce_perf $flags -b 8 -e 8 -n 1 -w 0
    [ "$FAIL_RC" = 2 ] || fail "vl_all_reduce_perf $flags: exit $FAIL_RC, expected 2"
    [ "$(wc -l <"$out")" -eq 1 ] || fail "vl_all_reduce_perf $flags: not one line"
    expect_contains "$out" "vl_all_reduce_perf: error: opening the RDMA device, its port and GID: $want"
    expect_not_contains "$out" "rank 0"
done

step "nccl-tests' NCCL_TESTS_MIN_BW gates an --np run: exit 3, the footer says FAILED"
out=$TMPDIR/minbw.out
rc=0
run_timeout 120 env NCCL_TESTS_MIN_BW=1000000 vl_all_reduce_perf --np 2 --ib-dev "$VL_DEV0,$VL_DEV1" \
    -b 8 -e 64 -n 2 -w 0 >"$out" 2>&1 || rc=$?
cat "$out"
[ "$rc" = 3 ] || fail "exit $rc, expected 3 (the gate)"
expect_contains "$out" "# Out of bounds values : 0 OK"
grep -q '^# Avg bus bandwidth    : [0-9.]* FAILED$' "$out" || fail "the footer does not say FAILED"
expect_contains "$out" "< 90 % of NCCL_TESTS_MIN_BW=1000000 (900000 GB/s)"

step "a rank killed mid-run: the others fail within the peer timeout and name it"
start_ranks 29513 4 -b 1M -e 1M -n 100000 -w 0 -c 0 --timeout 20
ranks_listed "$TMPDIR/r0.out"
sleep 3
eval "victim=\$PID2" # set by start_ranks
kill -KILL "$victim"
t0=$(_vl_now)
# Every survivor's output is shown before any verdict, so a failure shows what the others said.
bad=""
for r in 0 1 3; do
    rank_rc "$r" 60
    rc=$RC
    echo "--- rank $r (exit $rc) after $((($(_vl_now) - t0) / 100)) s"
    cat "$TMPDIR/r$r.out"
    if [ "$rc" = 0 ] || [ "$rc" = 124 ]; then bad="$bad; rank $r exited $rc after rank 2 was killed"; fi
    grep -q "rank 2 (host" "$TMPDIR/r$r.out" || bad="$bad; rank $r does not name rank 2"
done
[ -z "$bad" ] || fail "${bad#; }"
elapsed=$((($(_vl_now) - t0) / 100))
echo "every rank ended ${elapsed}s after the kill (peer timeout 20 s)"
[ "$elapsed" -le 30 ] || fail "the ranks took ${elapsed}s to notice"

step "a rank stopped mid-run (no FIN, as a host that lost power): every other rank names it"
# SIGSTOP keeps the rank's sockets open and silent. In a ring every rank downstream of it goes
# silent too, so a plain per-neighbour timeout blamed the wrong rank; now a rank whose
# neighbour is silent for the peer timeout reports it to rank 0 and waits its verdict: rank 0
# pings the suspect, a live rank answers, the stopped one does not and is named to all. When
# the stopped rank is rank 0 itself, no verdict comes, and every rank names rank 0. Bound: the
# peer timeout (10 s) + 3 s as a rule, + 10 s at most; 30 s with the guest's slack.
port=29520
for victim_rank in 2 0; do
    echo "\$ four ranks with --rank/--world-size/--master -T 10; rank $victim_rank stopped"
    _r=0
    while [ "$_r" -lt 4 ]; do
        vl_all_reduce_perf --ib-dev "$VL_DEV0,$VL_DEV1" --rank "$_r" --world-size 4 \
            --master 127.0.0.1:$port -b 1M -e 1M -n 100000 -w 0 -c 0 -T 10 \
            >"$TMPDIR/r$_r.out" 2>&1 </dev/null &
        eval "PID$_r=\$!"
        _r=$((_r + 1))
    done
    ranks_listed "$TMPDIR/r0.out"
    sleep 3
    eval "victim=\$PID$victim_rank"
    kill -STOP "$victim"
    t0=$(_vl_now)
    bad=""
    for r in 0 1 2 3; do
        [ "$r" != "$victim_rank" ] || continue
        rank_rc "$r" 60
        rc=$RC
        echo "--- rank $r (exit $rc) after $((($(_vl_now) - t0) / 100)) s"
        cat "$TMPDIR/r$r.out"
        if [ "$rc" = 0 ] || [ "$rc" = 124 ]; then bad="$bad; rank $r exited $rc"; fi
        grep -q "rank $victim_rank (host .*) is gone: " "$TMPDIR/r$r.out" \
            || bad="$bad; rank $r does not name rank $victim_rank gone"
        if grep "is gone: " "$TMPDIR/r$r.out" | grep -v -q "rank $victim_rank (host "; then
            bad="$bad; rank $r names another rank gone"
        fi
    done
    elapsed=$((($(_vl_now) - t0) / 100))
    kill -KILL "$victim"
    rank_rc "$victim_rank" 10
    [ -z "$bad" ] || fail "rank $victim_rank stopped: ${bad#; }"
    echo "every rank named rank $victim_rank, ${elapsed}s after it stopped (peer timeout 10 s)"
    [ "$elapsed" -le 30 ] || fail "the ranks took ${elapsed}s to name the stopped rank $victim_rank"
    port=$((port + 1))
done

step "--np 4: a rank killed mid-run is named by the launcher and by the others"
vl_all_reduce_perf --np 4 --ib-dev "$VL_DEV0,$VL_DEV1" -b 1M -e 1M -n 100000 -w 0 -c 0 --timeout 20 \
    >"$TMPDIR/np.out" 2>&1 </dev/null &
launcher=$!
ranks_listed "$TMPDIR/np.out"
sleep 3
victim=$(pids_with_args "*vl_all_reduce_perf*--rank 2 *" | tail -n 1)
[ -n "$victim" ] || fail "no rank 2 process found"
kill -KILL "$victim"
rc=0
_vl_watch "$launcher" 60 || rc=$?
cat "$TMPDIR/np.out"
if [ "$rc" = 0 ] || [ "$rc" = 124 ]; then fail "the launcher exited $rc"; fi
expect_contains "$TMPDIR/np.out" "rank 2 (pid $victim) was killed by SIGKILL"
expect_contains "$TMPDIR/np.out" "rank 2 (host"
# The others heard it from the launcher over their queues, not only from a timeout.
expect_contains "$TMPDIR/np.out" "the launcher saw it end: pid $victim was killed by SIGKILL"
no_queues "the --np run with a killed rank"

step "--np 4: the launcher killed outright takes its ranks and its queues with it"
vl_all_reduce_perf --np 4 --ib-dev "$VL_DEV0,$VL_DEV1" -b 1M -e 1M -n 100000 -w 0 -c 0 --timeout 20 \
    >"$TMPDIR/np2.out" 2>&1 </dev/null &
launcher=$!
ranks_listed "$TMPDIR/np2.out"
ls "/dev/mqueue/vl-coll-$launcher-r0" || fail "no queues of launcher $launcher while it runs"
kill -KILL "$launcher"
_vl_watch "$launcher" 10 || true
end=$(($(_vl_now) + 1500))
# shellcheck disable=SC2009 # busybox: ps, not pgrep -a
while ps -o pid,args 2>/dev/null | grep -q '[v]l_all_reduce_perf'; do
    [ "$(_vl_now)" -lt "$end" ] || fail "ranks still running 15 s after their launcher was killed"
    sleep 0.2
done
cat "$TMPDIR/np2.out"
no_queues "a launcher killed outright"
echo "the ranks ended and removed the queues of launcher $launcher"

step "--np with a reader that leaves early (| head -n 2): the run ends quietly"
# Rank 0 leaves at its first unread line; the others would wait for it until their peer
# timeout and then blame it. The launcher sees its stdout lose its reader and ends the run:
# status 0, not a word on stderr, no rank and no queue left.
for cmd in "lesson15_ring_allreduce --np 3 -d $VL_DEV0,$VL_DEV1 --count 4096" \
    "vl_all_reduce_perf --np 3 --ib-dev $VL_DEV0,$VL_DEV1 -b 8 -e 1M -n 200 -w 0 -c 1 --timeout 60"; do
    echo "\$ $cmd | head -n 2"
    # shellcheck disable=SC2086 # $cmd is split into its words on purpose
    { _rc=0; run_timeout 150 $cmd 2>"$TMPDIR/head.err" </dev/null || _rc=$?; echo "$_rc" >"$TMPDIR/head.rc"; } \
        | head -n 2 >"$TMPDIR/head.out"
    cat "$TMPDIR/head.out" "$TMPDIR/head.err"
    [ "$(wc -l <"$TMPDIR/head.out")" -eq 2 ] || fail "head did not read its 2 lines"
    rc=$(cat "$TMPDIR/head.rc")
    [ "$rc" = 0 ] || fail "${cmd%% *} --np | head -n 2 exited $rc, expected 0 (124: it hung)"
    [ ! -s "$TMPDIR/head.err" ] || fail "${cmd%% *} --np | head -n 2 wrote on stderr"
    echo "exit 0, stderr empty"
done

step "--np | head -n 2 with a report file and a gate still owed: the run goes to the end"
# The lines are unread, but --json and --min-busbw wait for the whole sweep: all 14 sizes in
# the file, the gate's verdict on stderr and in the status (3), not a quiet 0.
cmd="vl_all_reduce_perf --np 3 --ib-dev $VL_DEV0,$VL_DEV1 -b 8 -e 64K -n 20 -w 0 -c 1 --timeout 60"
cmd="$cmd --min-busbw 1000 --json $TMPDIR/head.json"
echo "\$ $cmd | head -n 2"
rm -f "$TMPDIR/head.rc"
# shellcheck disable=SC2086 # $cmd is split into its words on purpose
{ _rc=0; run_timeout 150 $cmd 2>"$TMPDIR/head.err" </dev/null || _rc=$?; echo "$_rc" >"$TMPDIR/head.rc"; } \
    | head -n 2 >"$TMPDIR/head.out"
cat "$TMPDIR/head.out" "$TMPDIR/head.err"
rc=$(cat "$TMPDIR/head.rc")
[ "$rc" = 3 ] || fail "--np | head -n 2 with a gate of 1000 GB/s exited $rc, expected 3 (the gate)"
grep -q "gate failed" "$TMPDIR/head.err" || fail "the gate's verdict is not on stderr"
[ "$(grep -c '"size": ' "$TMPDIR/head.json")" -eq 14 ] || fail "the --json file does not hold the 14 sizes"
echo "exit 3, the gate named, all 14 sizes in the report file"

step "nothing left behind"
sleep 1
# shellcheck disable=SC2009 # busybox: ps, not pgrep -a
left=$(ps -o pid,args 2>/dev/null | grep '[v]l_all_reduce_perf' || true)
[ -z "$left" ] || fail "ranks still running: $left"
echo "no rank left running"
no_queues "the runs above"
