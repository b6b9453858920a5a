#!/bin/sh
# Lesson 02 on one device: the granted QP capabilities are read back (and are at least what was
# asked), both MRs print their lkey and rkey, the requests that must be refused are refused with
# the errno and the hint, and the tear-down is narrated children before parents.
# timeout: 120
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"

require_bin lesson02_resources
out=$TMPDIR/lesson02.out

step "lesson02_resources -d $VL_DEV0 --max-inline 64 --show-errors"
rc=0
lesson02_resources -d "$VL_DEV0" --max-inline 64 --show-errors >"$out" 2>&1 || rc=$?
cat "$out"
[ "$rc" -eq 0 ] || fail "lesson02_resources exited $rc"

step "checks"
# Requested vs granted: "max_inline_data  64  <granted>", granted >= requested for every cap.
for cap in max_send_wr max_recv_wr max_send_sge max_recv_sge max_inline_data; do
    line=$(grep -E "^ +$cap +[0-9]+ +[0-9]+$" "$out") || fail "no '$cap requested granted' line"
    asked=$(echo "$line" | awk '{ print $2 }')
    granted=$(echo "$line" | awk '{ print $3 }')
    [ "$granted" -ge "$asked" ] || fail "$cap: granted $granted is less than the requested $asked"
    echo "$cap: requested $asked, granted $granted"
done
grep -E '^ +max_inline_data +64 +[0-9]+$' "$out" >/dev/null || fail "max_inline_data was not requested as 64"
n=$(grep -c -E '^ +lkey 0x[0-9a-f]{8}  rkey 0x[0-9a-f]{8}$' "$out") || true
[ "$n" -eq 2 ] || fail "expected 2 'lkey .. rkey ..' lines (send MR, target MR), found $n"
expect_contains "$out" "access LOCAL_WRITE|REMOTE_WRITE|REMOTE_READ"
expect_contains "$out" "RC QP number 0x"
# --show-errors: each bad request refused, naming the verb and the cause.
expect_contains "$out" "refused: ibv_create_qp failed: Invalid argument (EINVAL)"
expect_contains "$out" "a requested capability exceeds what the device grants"
expect_contains "$out" "REMOTE_WRITE and REMOTE_ATOMIC require LOCAL_WRITE"
expect_contains "$out" "refused: ibv_create_cq failed"
expect_not_contains "$out" "unexpectedly granted"
# Tear-down in order: QP, CQ, MRs, PD, device.
prev=0
for verb in ibv_destroy_qp ibv_destroy_cq ibv_dereg_mr ibv_dealloc_pd ibv_close_device; do
    at=$(grep -n "^ *$verb " "$out" | head -n 1 | cut -d: -f1)
    [ -n "$at" ] || fail "tear-down step $verb not narrated"
    [ "$at" -gt "$prev" ] || fail "$verb narrated out of order (line $at, previous step at line $prev)"
    prev=$at
done
echo "tear-down narrated in order: QP, CQ, MR, PD, device"

step "lesson02_resources -d $VL_DEV1 --quiet: results only"
rc=0
lesson02_resources -d "$VL_DEV1" --quiet >"$out" 2>&1 || rc=$?
cat "$out"
[ "$rc" -eq 0 ] || fail "lesson02_resources --quiet exited $rc"
[ "$(wc -l <"$out")" -eq 2 ] || fail "--quiet printed more than the two result lines"
expect_contains "$out" "max_inline_data"
expect_contains "$out" "send_mr lkey 0x"
echo "lesson02 scenario passed"
