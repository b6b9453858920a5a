#!/bin/sh
# Lesson 09: thread vs process affinity, rxe's missing NUMA locality, and the ping-pong latency
# table for the four placements. Both vCPUs are used: "same core" and "same core, yielding" make
# the two polling threads share CPU 0 (they must be seen on CPU 0 only), "different cores" puts
# them on CPUs 0 and 1 (distinct). Every row says how many round trips met a stalled vCPU.
# timeout: 300
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"

require_bin lesson09_affinity
L=lesson09_affinity
out=$TMPDIR/l09.out

step "$L --dev-a $VL_DEV0 --dev-b $VL_DEV1 -n 100"
rc=0
run_timeout 240 $L --dev-a "$VL_DEV0" --dev-b "$VL_DEV1" -n 100 >"$out" 2>&1 || rc=$?
cat "$out"
[ "$rc" = 0 ] || fail "$L exited with status $rc"

expect_contains "$out" "sched_getaffinity(0) -> cpu_set_t of 1024 slots; CPU_ISSET is true for 0-1 (2 CPUs)"
expect_contains "$out" "thread masks: pinned thread 1, its child 1 (inherited), core_affinity thread 0; main thread and process still 0-1"
expect_contains "$out" "$VL_DEV0: no NUMA locality (virtual device)"
expect_contains "$out" "$VL_DEV1: no NUMA locality (virtual device)"
expect_contains "$out" "round trip of 64 bytes, 100 samples per placement in 3 rounds"
expect_contains "$out" "round 1 medians (µs): same-core "
expect_contains "$out" "round 2 medians (µs): unpinned "

# field KEY N: field N of a placement's table row (1 placement, 2 client-CPU, 3 server-CPU,
#   4 median, 5 avg, 6 min, 7 p99, 8 max, 9 preempted, 10 host-hit).
field() { awk -v k="$1" -v n="$2" '$1 == k && NF == 10 { print $n; exit }' "$out"; }
for k in same-core same-yield diff-cores unpinned; do
    [ -n "$(field "$k" 1)" ] || fail "no '$k' row in the table"
    for n in 4 5 6 7 8; do
        v=$(field "$k" "$n")
        num_gt "$v" 0 || fail "$k: field $n '$v' is not a positive number of µs"
    done
    hit=$(field "$k" 10)
    [ "$hit" -ge 0 ] 2>/dev/null && [ "$hit" -le 100 ] \
        || fail "$k: host-hit '$hit' is not a count of the row's 100 round trips"
    echo "$k: client on CPU $(field "$k" 2), server on CPU $(field "$k" 3), median $(field "$k" 4) µs, preempted $(field "$k" 9), $hit round trips met a stalled vCPU"
done
for k in same-core same-yield; do
    if [ "$(field $k 2)" != 0 ] || [ "$(field $k 3)" != 0 ]; then
        fail "$k: the threads ran on CPUs '$(field $k 2)' and '$(field $k 3)', expected 0 and 0"
    fi
done
if [ "$(field diff-cores 2)" != 0 ] || [ "$(field diff-cores 3)" != 1 ]; then
    fail "diff-cores: the threads ran on CPUs '$(field diff-cores 2)' and '$(field diff-cores 3)', expected 0 and 1 (distinct)"
fi
# The effect itself (two pollers on one CPU wait for each other's time slices) is what the
# lesson measures and prints; it is not asserted here: timings on a shared, emulated machine are
# noise-prone (a loaded CI host once made the diff-cores round trip as slow as same-core), and
# tests assert behaviour, never speed. The placements above are asserted exactly.
expect_contains "$out" "same core vs different cores: median round trip "
expect_contains "$out" "same core vs same core, yielding: median round trip "
expect_contains "$out" "host-hit: round trips during which a polling thread's vCPU stopped executing"

step "one device for both QPs, --quiet"
rc=0
run_timeout 120 $L --dev-a "$VL_DEV0" --dev-b "$VL_DEV0" -n 30 --warmup 5 -s 4096 --quiet >"$out" 2>&1 || rc=$?
cat "$out"
[ "$rc" = 0 ] || fail "$L on one device exited with status $rc"
expect_contains "$out" "round trip of 4096 bytes, 30 samples per placement in 3 rounds"
expect_not_contains "$out" "[1] The CPUs"
[ -n "$(field unpinned 4)" ] || fail "no unpinned row"
echo "lesson 09 scenario passed"
