#!/bin/sh
# --np when the launcher and its ranks are all killed outright (SIGKILL, nobody left to clean
# up): their message queues stay in /dev/mqueue; the next --np run finds them by the dead
# launcher's pid, removes them and says so with the tool's name first, as every message of
# the tool ("vl_all_reduce_perf: note: removed 2 message queues ...").
# timeout: 240
# slow: two --np 2 runs, the first left to start before the kill
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"

require_bin vl_all_reduce_perf
mqueue_ready
no_queues "before the scenario"

step "--np 2: launcher stopped, its ranks and then it killed outright: its queues stay"
vl_all_reduce_perf --np 2 --ib-dev "$VL_DEV0,$VL_DEV1" -b 1M -e 1M -n 100000 -w 0 -c 0 --timeout 20 \
    >"$TMPDIR/np.out" 2>&1 </dev/null &
launcher=$!
wait_for 90 "$launcher" grep -q -F -e "#  Rank  1" "$TMPDIR/np.out" 2>/dev/null \
    || { cat "$TMPDIR/np.out"; fail "no '#  Rank  1' in the launcher's output after $(scaled 90) s"; }
ranks=$(pids_with_args "*vl_all_reduce_perf*--rank *")
echo "launcher $launcher, ranks: $(echo "$ranks" | tr '\n' ' ')"
[ "$(echo "$ranks" | wc -w)" -eq 2 ] || fail "expected 2 ranks of launcher $launcher: $ranks"
# shellcheck disable=SC2086 # one pid a word
kill_outright "$launcher" $ranks
ls /dev/mqueue
for q in r0 r1; do
    [ -e "/dev/mqueue/vl-coll-$launcher-$q" ] || fail "the dead launcher's queue vl-coll-$launcher-$q is not there to be found"
done

step "the next --np run removes them and says so, named"
rc=0
run_timeout "$(scaled 120)" vl_all_reduce_perf --np 2 --ib-dev "$VL_DEV0,$VL_DEV1" -b 8 -e 8 -n 1 -w 0 -c 1 \
    --timeout 30 >"$TMPDIR/next.out" 2>&1 </dev/null || rc=$?
cat "$TMPDIR/next.out"
[ "$rc" -eq 0 ] || fail "the next --np run exited $rc"
expect_contains "$TMPDIR/next.out" "vl_all_reduce_perf: note: removed 2 message queues left by a coordinator that is gone (pid $launcher): /vl-coll-$launcher-r0 /vl-coll-$launcher-r1"
no_queues "after the next run"
