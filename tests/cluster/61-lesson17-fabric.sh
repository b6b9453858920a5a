#!/bin/sh
# Lesson 17 on the leaf-spine fabric, run on node1 as its README shows: one QP takes one spine,
# sixteen spread over both, two QPs through slowed spine cables (polarization when they hash
# onto one), three senders into one slowed cable (incast), and rxe's counters. Checked from the
# switches' counters and physics: two flows on one cable together never beat it, nor do three
# senders through one. The output lands in .vm-out/lessons-cluster/ for the README.
# cluster: nodes=4 topology=leaf-spine
# timeout: 600
# slow: about ten two-host writes through emulated routers and slowed cables
set -eu
# shellcheck source=tests/cluster/lib.sh
. "$VL_TESTS/lib.sh"
trap restore_cluster EXIT

keep=$VL_REPO/.vm-out/lessons-cluster
mkdir -p "$keep"
out=$keep/l17.out

step "lesson17_fabric"
rc=0
run_timeout "$(scaled 400)" lesson17_fabric >"$out" 2>&1 || rc=$?
cat "$out"
[ "$rc" = 0 ] || fail "lesson17_fabric exited $rc"
expect_contains "$out" "fib_multipath_hash_policy = 1"
expect_contains "$out" "nexthop via"
summary=$(grep '^fabric: ' "$out")
echo "$summary"
one=$(echo "$summary" | sed 's/.*1 QP spine1 share \([0-9.]*\);.*/\1/')
many=$(echo "$summary" | sed 's/.*16 QPs spine1 share \([0-9.]*\);.*/\1/')
awk -v s="$one" 'BEGIN { exit !(s >= 0.95 || s <= 0.05) }' || fail "one QP was split over both spines ($one)"
awk -v s="$many" 'BEGIN { exit !(s >= 0.1 && s <= 0.9) }' || fail "sixteen QPs took one spine ($many)"
# Two QPs that share one 10 Mbit/s cable (1.19 MiB/s) cannot together beat it (10 % margin
# for the counting of MiB/s over the run).
grep '^    round ' "$out" | grep 'both on one spine' | awk '{ if ($(NF-1) > 1.31) { print "beat the cable: " $0; bad = 1 } } END { exit bad }' \
    || fail "two flows on one slowed cable together beat it"
# Incast: three senders through node1's one slowed cable: together no more than it.
inc=$(echo "$summary" | sed 's/.*incast \([0-9.]*\) MiB\/s.*/\1/')
awk -v s="$inc" 'BEGIN { exit !(s <= 1.31) }' || fail "incast: $inc MiB/s through a 1.19 MiB/s cable"
expect_contains "$out" "counters of ECN marks or CNPs: none"
expect_contains "$out" "the packets were dropped, not marked: rxe sends them Not-ECT"
