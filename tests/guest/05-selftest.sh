#!/bin/sh
# The safe verbs layer proves itself end to end before any lesson leans on it: an RC QP on one
# device connected to one on another (and on the same device), SEND / RDMA WRITE / RDMA READ /
# both atomics checked byte for byte, and a wrong rkey failing with IBV_WC_REM_ACCESS_ERR.
set -u

check_run() {
    label=$1
    shift
    echo "== vl_selftest $*"
    out=$(vl_selftest "$@" 2>&1)
    rc=$?
    echo "$out"
    [ "$rc" -eq 0 ] || { echo "FAIL: $label exited $rc"; exit 1; }
    for want in "ok    SEND bytes" "ok    RDMA WRITE" "ok    RDMA READ" "ok    FETCH_AND_ADD" \
                "ok    CMP_AND_SWP" "ok    send list:" "ok    send list refusals" "ok    byte writes:" "ok    byte write refusal:" "ok    wrong rkey" \
                "all checks passed"; do
        echo "$out" | grep -q "$want" || { echo "FAIL: $label: missing '$want'"; exit 1; }
    done
}

check_run "rxe0 -> rxe1" --dev-a "$VL_DEV0" --dev-b "$VL_DEV1" -u 20
check_run "rxe1 -> rxe0" --dev-a "$VL_DEV1" --dev-b "$VL_DEV0" -u 20 -s 1
check_run "rxe0 loopback" --dev-a "$VL_DEV0" --dev-b "$VL_DEV0" -u 20 -s 8192

# A device that does not exist is refused with the list of those that do.
out=$(vl_selftest --dev-a nosuchdev0 2>&1) && { echo "FAIL: unknown device accepted"; exit 1; }
echo "$out"
echo "$out" | grep -q "not found; available: .*$VL_DEV0" || { echo "FAIL: no device list in: $out"; exit 1; }
echo "selftest scenarios passed"
