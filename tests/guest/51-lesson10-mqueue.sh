#!/bin/sh
# Lesson 10 in the guest: the tour of the calls (priority order, a timeout, EAGAIN, the limit
# errors), three worker processes whose sums are verified, and no queue left in /dev/mqueue.
# Root in the guest holds CAP_SYS_RESOURCE, so the limits are shown by a child that drops root.
# timeout: 180
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"

require_bin lesson10_mqueue
L=lesson10_mqueue
out=$TMPDIR/l10.out

step "mount the mqueue file system (so queues show as files)"
if ! grep -q ' mqueue ' /proc/mounts; then
    mkdir -p /dev/mqueue
    mount -t mqueue none /dev/mqueue
fi
grep ' mqueue ' /proc/mounts
head /proc/sys/fs/mqueue/*
[ -z "$(ls /dev/mqueue)" ] || fail "/dev/mqueue is not empty before the run: $(ls /dev/mqueue)"

step "$L -k 3 --pin"
rc=0
run_timeout 120 $L -k 3 --pin >"$out" 2>&1 || rc=$?
cat "$out"
[ "$rc" = 0 ] || fail "$L exited with status $rc"
expect_contains "$out" "received in priority order: high(9) high again(9) mid(5) low(1)"
expect_contains "$out" "mq_timedreceive timed out after"
expect_contains "$out" "nonblocking mq_receive on an empty queue: EAGAIN at once"
expect_contains "$out" "the fifth mq_send on the full queue: EAGAIN"
expect_contains "$out" "/dev/mqueue/vl10-"
expect_contains "$out" "QSIZE:"
# The limits: root may exceed them, the child that dropped root may not.
expect_contains "$out" "this process holds CAP_SYS_RESOURCE"
expect_contains "$out" "setuid(65534) -> uid 65534, CAP_SYS_RESOURCE gone"
expect_contains "$out" "limit refused: mq_maxmsg 11 = msg_max + 1: EINVAL"
expect_contains "$out" "limit refused: mq_msgsize 8193 = msgsize_max + 1: EINVAL"
expect_contains "$out" "refused maxmsg=11 msgsize=128 (EINVAL): /proc/sys/fs/mqueue/msg_max is 10 and msgsize_max is 8192"
# Three workers, pinned round-robin on the two vCPUs, every sum verified.
expect_contains "$out" "Hello from worker 2: pid "
expect_contains "$out" "pinned to CPU 1"
expect_contains "$out" "all 3 results verified against the closed form n(n-1)(2n-1)/6"
rows=$(awk 'NF == 9 && $1 ~ /^[0-9]+$/ && $8 == "yes"' "$out" | wc -l)
[ "$rows" -eq 3 ] || fail "expected 3 verified worker rows, found $rows"
expect_contains "$out" "(mq_open of each name: ENOENT)"
left=$(ls /dev/mqueue)
[ -z "$left" ] || fail "queues left in /dev/mqueue: $left"
echo "/dev/mqueue is empty after the run"

step "$L --no-tour -q -k 1 -n 1000"
rc=0
run_timeout 60 $L --no-tour -q -k 1 -n 1000 >"$out" 2>&1 || rc=$?
cat "$out"
[ "$rc" = 0 ] || fail "$L -q exited with status $rc"
expect_contains "$out" "all 1 results verified"
expect_not_contains "$out" "[9] Create the queues"
[ -z "$(ls /dev/mqueue)" ] || fail "queues left in /dev/mqueue: $(ls /dev/mqueue)"
echo "lesson 10 scenario passed"
