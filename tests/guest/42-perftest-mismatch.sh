#!/bin/sh
# The server refuses a client whose options differ, and BOTH sides fail (exit 1) with a message
# naming the parameter and both values. perftest's habit is symmetric options on both sides;
# where it silently runs something else (or hangs), we say what differs.
# timeout: 240
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"
# shellcheck source=tests/guest/perftest-lib.sh
. "$VL_TESTS/perftest-lib.sh"

# refused TOOL "SERVER OPTS" "CLIENT OPTS" TEXT [CLIENT TOOL]: both sides exit 1, both outputs
# hold TEXT.
refused() {
    next_port
    ctool=${5:-$1}
    if server_client "$PORT" "$1 -d $VL_DEV0 $VL_PT_COMMON -p $PORT $2" \
        "$ctool -d $VL_DEV1 $VL_PT_COMMON -p $PORT $3 $VL_ADDR0"; then
        fail "the mismatch was accepted"
    fi
    [ "$SERVER_RC" = 1 ] || fail "the server exited $SERVER_RC, expected 1"
    [ "$CLIENT_RC" = 1 ] || fail "the client exited $CLIENT_RC, expected 1"
    expect_contains "$SERVER_OUT" "$4"
    expect_contains "$CLIENT_OUT" "$4"
    expect_contains "$SERVER_OUT" "refused the client"
    expect_contains "$CLIENT_OUT" "the server refused the run"
}

step "message size: server -s 4096, client -s 8192"
refused vl_write_bw "-s 4096 -n 10" "-s 8192 -n 10" "message size (-s / -a): client 8192, server 4096"

step "connection type: server RC, client UC"
refused vl_write_bw "-c RC -n 10" "-c UC -n 10" "connection type (-c): client UC, server RC"

step "several at once: iterations and QPs, each named"
refused vl_send_bw "-n 10 -q 1" "-n 20 -q 2" "iterations (-n): client 20, server 10"
expect_contains "$CLIENT_OUT" "number of QPs (-q): client 2, server 1"

step "a sweep against a single size"
refused vl_read_lat "-n 10" "-a -n 10" "message size (-s / -a): client sweep 2..8388608, server 2"

step "another tool: vl_read_bw client, vl_write_bw server"
refused vl_write_bw "-n 10" "-n 10" "the client runs vl_read_bw, this server vl_write_bw" vl_read_bw

step "perftest's ib_write_bw against vl_write_bw: the server says what it met, and waits on"
# A perftest client is a stray connection to our server (docs/oob-protocol.md): logged in one
# line, dropped, and the server keeps waiting for a real client until --wait, then exits 1.
next_port
require_bin ib_write_bw
if server_client "$PORT" "vl_write_bw -d $VL_DEV0 -u 20 -p $PORT -n 10 --wait 15" \
    "ib_write_bw -d $VL_DEV1 -x 1 -u 20 -p $PORT -n 10 $VL_ADDR0"; then
    fail "ib_write_bw against vl_write_bw succeeded"
fi
[ "$SERVER_RC" = 1 ] || fail "the server exited $SERVER_RC, expected 1 (no real client within --wait 15)"
expect_contains "$SERVER_OUT" "does not speak the verbs-lab protocol"
expect_contains "$SERVER_OUT" "still waiting for a client"
echo "mismatches are refused on both sides, by name"
