#!/bin/sh
# The exercises of the lesson READMEs whose commands no other scenario runs: each command as the
# README gives it (plus a private -p; lesson 14 names both devices), and the answer the README
# folds away. Lessons 11, 12, 14 and 15.
# timeout: 360
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"

require_bin lesson11_ud
require_bin lesson12_srq_events
require_bin lesson14_tuning
require_bin lesson15_ring_allreduce
port=18575
out=$TMPDIR/ex39.out

# run_ok CMD...: run CMD (bounded) into $out; it must succeed.
run_ok() {
    echo "\$ $*"
    _rc=0
    run_timeout 150 "$@" >"$out" 2>&1 || _rc=$?
    cat "$out"
    [ "$_rc" = 0 ] || fail "$* exited with $_rc, expected 0"
}

step "lesson 11, exercise 3: server -s 2048, client -s 1024"
# The README's --wait 5, grown with the suite's time scale: --wait also bounds the out-of-band
# connect, which under load took longer than 5 s (both sides timed out before they met).
w=$(scaled 5)
server_client "$port" "lesson11_ud -d $VL_DEV0 -p $port --wait $w" \
    "lesson11_ud -d $VL_DEV1 -p $port -s 1024 --wait $w $VL_ADDR0" && fail "mismatched sizes passed"
expect_contains "$SERVER_OUT" "a datagram of 1064 bytes arrived (40 bytes of GRH + 1024); we expect 40 + 2048: start both sides with the same -s"
expect_contains "$CLIENT_OUT" "timed out after $w"
expect_contains "$CLIENT_OUT" "none arrived yet: does the peer use the same -s?"

step "lesson 12, exercise 1: -n 100 raises no SRQ limit event"
server_client "$port" "lesson12_srq_events -d $VL_DEV0 -p $port -q -n 100 --wait 60" \
    "lesson12_srq_events -d $VL_DEV1 -p $port -q -n 100 --wait 60 $VL_ADDR0"
for f in "$SERVER_OUT" "$CLIENT_OUT"; do
    expect_contains "$f" "IBV_EVENT_SRQ_LIMIT_REACHED 0 times (limit 250"
    expect_contains "$f" "at the end, ibv_query_srq: srq_limit 250 (armed"
done

step "lesson 12, exercise 2: --srq-limit 490 fires once per side"
server_client "$port" "lesson12_srq_events -d $VL_DEV0 -p $port -q -n 100 --srq-limit 490 --wait 60" \
    "lesson12_srq_events -d $VL_DEV1 -p $port -q -n 100 --srq-limit 490 --wait 60 $VL_ADDR0"
for f in "$SERVER_OUT" "$CLIENT_OUT"; do
    expect_contains "$f" "IBV_EVENT_SRQ_LIMIT_REACHED 1 times (limit 490"
    expect_contains "$f" "at the end, ibv_query_srq: srq_limit 0 (disarmed: its event fired and no refill re-armed it)"
done
step "lesson 14, exercises 2 and 3: -s 256 (above max_inline_data), the send-queue slot probe"
run_ok lesson14_tuning --dev-a "$VL_DEV0" --dev-b "$VL_DEV1" -s 256 -n 200 --pp-iters 20 -r 1
expect_contains "$out" "write 8 accepted: this provider frees slots of executed unsignaled requests without a polled completion"
expect_contains "$out" "-s 256 exceeds the granted max_inline_data 64: no inline run"
expect_contains "$out" "inline      IBV_SEND_INLINE                         -        -  not run here"
expect_contains "$out" "region of 256 bytes (rkey "
expect_contains "$out" "window -> region bytes 0..256, REMOTE_WRITE"
expect_contains "$out" "after IBV_WR_LOCAL_INV the next one: IBV_WC_REM_ACCESS_ERR, region unchanged"

step "lesson 15, exercise 1: --np 4 --count 10"
run_ok lesson15_ring_allreduce --np 4 -d "$VL_DEV0,$VL_DEV1" --count 10
expect_contains "$out" "The vectors: 10 elements in 4 chunks (chunk 0 = elements 0..3, chunk 1 = elements 3..6, chunk 2 = elements 6..8, chunk 3 = elements 8..10)"
expect_contains "$out" "rank 2: sent chunk 3 right; added chunk 2 from rank 1 → [50 52 54 | 33 34 35 | 124 128 | 84 87]"
expect_contains "$out" "each rank sent about 2(n−1)/n × 80 B = 120 B over RDMA"
expect_contains "$out" "all-reduce over 4 ranks: every element of every rank is right"

step "lesson 15, exercise 2: --np 3 --count 2, an empty chunk"
run_ok lesson15_ring_allreduce --np 3 -d "$VL_DEV0,$VL_DEV1" --count 2
expect_contains "$out" "chunk 2 = elements 2..2)"
grep -q "rank 1: sent chunk 0 right; added" "$out" && fail "rank 1 added an empty chunk in step 0"
grep -q "sent chunk 2 right" "$out" && fail "a rank narrates sending the empty chunk 2"
expect_contains "$out" "rank 0: sent nothing (chunk 2 is empty); added chunk 1 from rank 2"
expect_contains "$out" "rank 1: sent chunk 0 right; nothing from rank 0 (chunk 2 is empty) → [20 | 21 | ]"
expect_contains "$out" "expected on every rank: [60 | 63 | ]"
expect_contains "$out" "all-reduce over 3 ranks: every element of every rank is right"
echo "exercise answers hold"
