#!/bin/sh
# vl_fabric_check on 4 hosts of the leaf-spine fabric, one rank per node:
# - no fault, under mpirun: exit 0, no suspect;
# - a check of node1 and node2 alone beside a lone vl_write_bw between them (the check must not
#   measure itself; printed, not asserted: no timed assertions);
# - node3's cable slowed (netem rate 10mbit on the leaf's port toward node3: it shapes only what
#   goes to node3): exit 3, node3 the one suspect;
# - node3's cable losing 5 %: exit 3, node3 the one suspect;
# - node4 killed in round 1: exit 3, node4 named gone, its pairs listed as not measured and every
#   pair of the others measured.
# Its time: ~180 s on the 2-core machine, a third of it node4 booting again.
# cluster: nodes=4 topology=leaf-spine
# timeout: 900
# slow: five checks of four hosts through emulated routers, and a node booted again
set -eu
# shellcheck source=tests/cluster/lib.sh
. "$VL_TESTS/lib.sh"
trap 'restore_cluster' EXIT

# Emulated hosts (TCG, one vCPU each, five machines on the host's 2 cores, every packet routed by
# the fabric guest) scatter from 2.5 to 15 MiB/s between runs of one healthy pair, and their
# latency by 7x: the rules hold the pairs to half the median direction (one lucky run must not
# raise the bar) and latency to 10x the lowest; the planted faults (10 Mbit/s = 1.2 MiB/s, 5 %
# loss) sit below either. A slow pair is re-tested alone, where the noise of the others is gone.
ARGS="-d rxe0 -u 16 -s 64K --lat-iters 50 --reference median --tolerance 0.5 --lat-factor 10"

# check NAME PORT [OPTION...]: a check of the 4 nodes (-n $N messages per direction, 60 unless
# set; --wait $W, 10 unless set), ranks 1-3 started over ssh, rank 0 here (node1) writing
# $TMPDIR/NAME.out and NAME.json (checked by vl_jsoncheck); sets RC.
check() {
    name=$1 port=$2
    shift 2
    pids=''
    for k in 2 3 4; do
        remote_bg "node$k" "exec vl_fabric_check $ARGS -n ${N:-60} --wait ${W:-10} --rank $((k - 1)) --world-size 4 --master node1:$port $*" "$TMPDIR/$name.r$k.out"
        pids="$pids $BG_PID"
    done
    RC=0
    # busybox's timeout, not run_timeout: its watchdog's forks ten times a second would slow
    # node1, one of the hosts measured, on its one vCPU (rank 0 has no child to leave behind).
    # shellcheck disable=SC2086  # ARGS and the options are words
    timeout "$(scaled 400)" vl_fabric_check $ARGS -n "${N:-60}" --wait "${W:-10}" --rank 0 --world-size 4 --master "node1:$port" \
        --json "$TMPDIR/$name.json" "$@" >"$TMPDIR/$name.out" 2>&1 || RC=$?
    cat "$TMPDIR/$name.out"
    # A killed node's ssh never ends by itself: the kill step waits only a moment for it.
    for p in $pids; do _vl_watch "$p" "$(scaled "${WATCH:-30}")" || kill "$p" 2>/dev/null || true; done
    vl_jsoncheck "$TMPDIR/$name.json" || fail "$name: the --json report does not pass vl_jsoncheck"
}

# suspects NAME: the hosts NAME's report names suspect, space-separated ('' for none).
suspects() {
    awk '/^Suspect hosts:$/ { on = 1; next } on && /^  / { printf "%s%s", sep, $1; sep = " "; next } { on = 0 }' "$TMPDIR/$1.out"
}

# expect NAME RC SUSPECTS: the check ended with RC and named exactly SUSPECTS.
expect() {
    [ "$RC" = "$2" ] || fail "$1: exit $RC, expected $2"
    got=$(suspects "$1")
    [ "$got" = "$3" ] || fail "$1: suspects '$got', expected '${3:-none}'"
}

# lone NODE: a lone vl_write_bw node1 -> NODE with the check's size and count; prints MiB/s.
lone() {
    remote_bg "$1" "exec vl_write_bw -d rxe0 -u 16 -s 65536 -n 60" "$TMPDIR/lone.srv"
    srv=$BG_PID
    rc=0
    timeout "$(scaled 60)" vl_write_bw -d rxe0 -u 16 -s 65536 -n 60 --wait 30 "$1" >"$TMPDIR/lone.out" 2>&1 || rc=$?
    _vl_watch "$srv" "$(scaled 30)" || true
    [ "$rc" = 0 ] || { cat "$TMPDIR/lone.out" "$TMPDIR/lone.srv" >&2; fail "vl_write_bw to $1 exited $rc"; }
    awk '$1 ~ /^[0-9]+$/ && NF >= 5 { v = $4 } END { print v }' "$TMPDIR/lone.out"
}

# cell NAME ROW COLUMN: the bandwidth matrix's cell (MiB/s) of NAME's report.
cell() {
    awk -v r="$2" -v c="$3" '/^Bandwidth/ { on = 1 } on && $2 == r && $3 ~ /^node/ { split($0, f, "|"); print f[c + 3] + 0; exit }' "$TMPDIR/$1.out"
}

step "no fault, under mpirun (one slot per node): exit 0, no suspect"
nodes | sed 's/$/ slots=1/' >"$TMPDIR/hostfile"
RC=0
# shellcheck disable=SC2086
timeout "$(scaled 300)" mpirun --allow-run-as-root --hostfile "$TMPDIR/hostfile" -np 4 \
    --mca oob_tcp_if_include mgmt0 --mca btl_tcp_if_include mgmt0 \
    vl_fabric_check $ARGS -n 60 --wait 10 --master node1:29610 --json "$TMPDIR/clean.json" >"$TMPDIR/clean.out" 2>&1 || RC=$?
cat "$TMPDIR/clean.out"
vl_jsoncheck "$TMPDIR/clean.json" || fail "clean: the --json report does not pass vl_jsoncheck"
expect clean 0 ''

step "the check's own number against a lone vl_write_bw: node1 and node2 alone, twice each"
# Alone, so that nothing else shares the 2 host cores the 5 emulated machines run on.
for i in 1 2; do
    solo=$(lone node2)
    remote_bg node2 "exec vl_fabric_check $ARGS -n 60 --wait 10 --rank 1 --world-size 2 --master node1:2962$i -p 1890$i" "$TMPDIR/two$i.r2.out"
    two=$BG_PID
    RC=0
    # shellcheck disable=SC2086
    timeout "$(scaled 120)" vl_fabric_check $ARGS -n 60 --wait 10 --rank 0 --world-size 2 --master "node1:2962$i" -p "1890$i" \
        >"$TMPDIR/two$i.out" 2>&1 || RC=$?
    _vl_watch "$two" "$(scaled 30)" || true
    [ "$RC" = 0 ] || { cat "$TMPDIR/two$i.out"; fail "the check of node1 and node2 exited $RC"; }
    echo "node1 -> node2: lone vl_write_bw $solo MiB/s, vl_fabric_check $(cell "two$i" 0 1) MiB/s"
done

step "node3's cable slowed to 10 Mbit/s toward node3: node3 suspect, nobody else"
# 10 Mbit/s is 1.19 MiB/s, a quarter of the slowest median seen here: a halved rate would sit
# inside the scatter of single runs on emulated hosts (2.5 to 20 MiB/s for healthy pairs).
fabric netem node3 rate 10mbit
N=30 check slow 29611 -p 18600
expect slow 3 node3

step "node3's cable losing 5 %: node3 suspect, nobody else"
fabric netem node3 loss 5%
# Writes into node3 crawl at ~0.4 MiB/s (go-back-N over 5 % loss): fewer messages keep it short.
N=10 check loss 29612 -p 18700
expect loss 3 node3
fabric netem node3 clear

step "node4 killed in round 1: named gone, its pairs not measured, the others' all measured"
(
    wait_remote_port node4 18800 60 vl_fabric_check
    sleep 1
    host_ctl kill node4
) >"$TMPDIR/kill.log" 2>&1 &
killer=$!
WATCH=3 W=5 check kill 29613 -p 18800
_vl_watch "$killer" "$(scaled 60)" || true
cat "$TMPDIR/kill.log"
# Not "node4 alone": with node4 gone, node3 is the one host on leaf2, and every pair of its
# crosses the emulated routers, which here run at a third of the speed of the bridge within
# leaf1 — by the rules a slow host (see docs/fabric-check.md: hosts spread unevenly over leaves).
[ "$RC" = 3 ] || fail "kill: exit $RC, expected 3"
case " $(suspects kill) " in *" node4 "*) ;; *) fail "kill: node4 is not named" ;; esac
expect_contains "$TMPDIR/kill.out" "node4 (rank 3): gone in round 1/3"
grep -Eq '^Not measured \(a host gone\): ([0-2]-3 ?)+$' "$TMPDIR/kill.out" \
    || fail "kill: the pairs not measured are not exactly node4's"
for r in 0 1 2; do
    for c in 0 1 2; do
        [ "$r" = "$c" ] && continue
        v=$(cell kill "$r" "$c")
        awk -v v="$v" 'BEGIN { exit !(v > 0) }' || fail "kill: pair $r -> $c not measured ($v)"
    done
done
