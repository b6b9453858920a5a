#!/bin/sh
# The exercises of the lesson READMEs whose commands no other scenario runs: each command as the
# README gives it (plus a private -p), and the answer the README folds away.
# timeout: 300
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"

require_bin lesson11_ud
require_bin lesson12_srq_events
port=18575

step "lesson 11, exercise 3: server -s 2048, client -s 1024"
server_client "$port" "lesson11_ud -d $VL_DEV0 -p $port --wait 5" \
    "lesson11_ud -d $VL_DEV1 -p $port -s 1024 --wait 5 $VL_ADDR0" && fail "mismatched sizes passed"
expect_contains "$SERVER_OUT" "a datagram of 1064 bytes arrived; we expect 40 (GRH) + 2048"
expect_contains "$CLIENT_OUT" "timed out after 5"

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
echo "exercise answers hold"
