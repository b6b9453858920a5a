#!/bin/sh
# The five collective benchmarks, each as 4 ranks (--np 4) over rxe0/rxe1, sizes 8 B to 4 MiB
# (8 B: fewer elements than ranks), every element checked (-c 1): 0 wrong, the nccl-tests footer,
# a JSON document with every size and rank that vl_jsoncheck accepts (it recomputes the
# bandwidths, counts and footer, and knows the types and operators; 3 ranks and uneven
# chunks too). The rxe port counters must have moved at least the packets the all-reduce's
# payload needs: 2(n-1)/n x size per rank per collective, at the active MTU — the payload went over RDMA, not TCP. --np coordinates its ranks over POSIX message
# queues (/vl-coll-PID-rN): the header says so, and none is left in /dev/mqueue after a run.
# Took 398 s on a busy 2-core host (TCG guest, seven builds and guests sharing it); 246 s with
# word-wise MR copies (four builds sharing it).
# timeout: 600
# slow: five collectives, each a sweep of 8 B to 4 MiB over four ranks with every element checked, under emulation
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"

for t in all_reduce reduce_scatter all_gather broadcast sendrecv; do
    require_bin "vl_${t}_perf"
done
require_bin vl_jsoncheck

mqueue_ready

# pkts DEV: packets sent by DEV's port 1.
pkts() { hw_counter "$1" sent_pkts; }
mtu=$(/usr/bin/rdma link show "$VL_DEV0/1" 2>/dev/null | sed -n 's/.*mtu \([0-9]*\).*/\1/p' | head -n 1)
[ -n "$mtu" ] || mtu=4096
echo "active MTU of $VL_DEV0: $mtu"

# check_run FILE TOOL: exit status 0 was checked by the caller; every row has 0 wrong on both
# placements, the footer says OK, rows from 8 B to 4 MiB.
check_run() {
    expect_contains "$1" "# Out of bounds values : 0 OK"
    expect_contains "$1" "# Avg bus bandwidth"
    expect_contains "$1" "nranks 4 (from --np, coordinated over the message queues /vl-coll-"
    rows=$(grep -E '^ +[0-9]+ ' "$1")
    echo "$rows" | awk '{ if ($9 != "0" || ($13 != "0" && $13 != "N/A")) { print "wrong: " $0; bad = 1 } }
        END { exit bad }' || fail "$2: a row has wrong values"
    first=$(echo "$rows" | head -n 1 | awk '{ print $1 }')
    last=$(echo "$rows" | tail -n 1 | awk '{ print $1 }')
    if [ "$first" != 8 ] || [ "$last" != 4194304 ]; then
        fail "$2: rows from $first to $last, expected 8 to 4194304"
    fi
    devs=$(grep '^#  Rank' "$1" | awk '{ print $9 }' | tr '\n' ' ')
    [ "$devs" = "rxe0 rxe1 rxe0 rxe1 " ] || fail "$2: ranks on devices '$devs', expected round-robin rxe0 rxe1"
}

for t in all_reduce reduce_scatter all_gather broadcast sendrecv; do
    step "vl_${t}_perf --np 4 over rxe0,rxe1, 8 B to 4 MiB, -c 1"
    extra="--json $TMPDIR/$t.json"
    [ "$t" = broadcast ] && extra="$extra -r 2"
    before=$(($(pkts "$VL_DEV0") + $(pkts "$VL_DEV1")))
    rc=0
    # shellcheck disable=SC2086 # $extra is a list of flags
    run_timeout 150 "vl_${t}_perf" --np 4 --ib-dev "$VL_DEV0,$VL_DEV1" -b 16 -e 4M -f 64 -n 1 -w 0 -c 1 \
        --timeout 60 $extra >"$TMPDIR/$t.out" 2>&1 || rc=$?
    after=$(($(pkts "$VL_DEV0") + $(pkts "$VL_DEV1")))
    cat "$TMPDIR/$t.out"
    [ "$rc" = 0 ] || fail "vl_${t}_perf exited $rc"
    no_queues "vl_${t}_perf --np 4"
    # 8 B (2 floats for 4 ranks: fewer elements than ranks) in a run of its own, checked too.
    # Reduce-scatter and all-gather round the count down to a multiple of the ranks, as
    # nccl-tests does: 2 floats would be a row of 0 B, so theirs is 8 uint8, 2 per rank.
    small=''
    case $t in reduce_scatter | all_gather) small='-d uint8' ;; esac
    rc=0
    # shellcheck disable=SC2086 # $small is a flag and its value
    run_timeout 60 "vl_${t}_perf" --np 4 --ib-dev "$VL_DEV0,$VL_DEV1" -b 8 -e 8 -n 1 -w 0 -c 1 \
        --timeout 30 $small >"$TMPDIR/$t.8" 2>&1 || rc=$?
    grep -E '^ +8 ' "$TMPDIR/$t.8" || { cat "$TMPDIR/$t.8"; fail "vl_${t}_perf at 8 B exited $rc"; }
    [ "$rc" = 0 ] || { cat "$TMPDIR/$t.8"; fail "vl_${t}_perf at 8 B exited $rc"; }
    { grep -E '^ +8 ' "$TMPDIR/$t.8"; cat "$TMPDIR/$t.out"; } >"$TMPDIR/$t.all"
    mv "$TMPDIR/$t.all" "$TMPDIR/$t.out"
    check_run "$TMPDIR/$t.out" "vl_${t}_perf"
    # The document holds what the table does, and adds up (vl_jsoncheck recomputes it).
    vl_jsoncheck "$TMPDIR/$t.json" --sizes 16,1024,65536,4194304 \
        || fail "vl_jsoncheck refused the --json of vl_${t}_perf"
    if [ "$t" = all_reduce ]; then
        # Every size of the counted run ran 1 timed + 1 checked collective, out of place and in
        # place: 4 all-reduces per size, each of the 4 ranks sending 2(n-1)/n = 1.5 x size.
        need=$(grep -E '^ +[0-9]+ ' "$TMPDIR/$t.out" | tail -n 4 | awk -v m="$mtu" \
            '{ p += 4 * 4 * int((1.5 * $1 + m - 1) / m) } END { print p }')
        echo "rxe0+rxe1 sent $((after - before)) packets; the payload needs at least $need"
        [ $((after - before)) -ge "$need" ] || fail "too few RDMA packets for the payload"
    fi
done

step "the JSON document: every size, every rank"
grep -q '"collective": "all_reduce"' "$TMPDIR/all_reduce.json" || fail "no collective in the JSON"
[ "$(grep -c '"size": ' "$TMPDIR/all_reduce.json")" -eq 4 ] || fail "the JSON does not hold 4 sizes"
[ "$(grep -c '"device": "rxe' "$TMPDIR/all_reduce.json")" -eq 4 ] || fail "the JSON does not list 4 ranks"
grep -q '"per_rank_time_us": \[' "$TMPDIR/all_reduce.json" || fail "no per-rank times in the JSON"
grep -q '"launcher": "--np (this machine, POSIX message queues)"' "$TMPDIR/all_reduce.json" || fail "the JSON does not name the --np launcher"

step "other types and operators are exact too"
for spec in "-d double -o prod" "-d uint8 -o min"; do
    rc=0
    # shellcheck disable=SC2086
    run_timeout 120 vl_all_reduce_perf --np 3 --ib-dev "$VL_DEV0,$VL_DEV1" -b 8 -e 4K -f 8 -n 1 -w 0 \
        $spec --json "$TMPDIR/t.json" >"$TMPDIR/t.out" 2>&1 || rc=$?
    tail -n 8 "$TMPDIR/t.out"
    [ "$rc" = 0 ] || fail "vl_all_reduce_perf $spec exited $rc"
    expect_contains "$TMPDIR/t.out" "# Out of bounds values : 0 OK"
    vl_jsoncheck "$TMPDIR/t.json" --sizes 8,64,512,4096 \
        || fail "vl_jsoncheck refused the --json of vl_all_reduce_perf $spec"
done

step "nothing left behind"
# shellcheck disable=SC2009 # busybox: ps, not pgrep -a
left=$(ps -o pid,args 2>/dev/null | grep '[v]l_.*_perf' || true)
[ -z "$left" ] || fail "ranks still running: $left"
echo "no rank left running"
no_queues "the runs above"
echo "no message queue left in /dev/mqueue"
