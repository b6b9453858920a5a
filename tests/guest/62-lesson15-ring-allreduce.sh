#!/bin/sh
# Lesson 15: a narrated ring all-reduce over 3 ranks (rxe0/rxe1 round-robin): the endpoint table,
# the ring's QPNs, every reduce-scatter and all-gather step with every rank's vector, and the
# check. Its output is kept in $VL_REPO/.vm-out/lesson15.out for the README.
# timeout: 240
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"

require_bin lesson15_ring_allreduce

step "lesson15_ring_allreduce --np 3 -d rxe0,rxe1"
rc=0
run_timeout 180 lesson15_ring_allreduce --np 3 -d "$VL_DEV0,$VL_DEV1" >"$TMPDIR/l15.out" 2>&1 || rc=$?
cat "$TMPDIR/l15.out"
mkdir -p "$VL_REPO/.vm-out" && cp "$TMPDIR/l15.out" "$VL_REPO/.vm-out/lesson15.out"
[ "$rc" = 0 ] || fail "lesson 15 exited $rc"
expect_contains "$TMPDIR/l15.out" "Bootstrap: rank 0 collected every endpoint"
expect_contains "$TMPDIR/l15.out" "──RDMA WRITE WITH IMM──▶"
# 3 ranks, 7 elements: rank r holds 10(r+1)+i; the sum is 60 + 3i.
expect_contains "$TMPDIR/l15.out" "expected on every rank: [60 63 66 | 69 72 | 75 78]"
expect_contains "$TMPDIR/l15.out" "every element of every rank is right"
# Two steps of each phase, three ranks each.
[ "$(grep -c 'rank [0-2]: sent chunk' "$TMPDIR/l15.out")" -eq 12 ] \
    || fail "expected 12 step lines (2 steps x 3 ranks x 2 phases)"
