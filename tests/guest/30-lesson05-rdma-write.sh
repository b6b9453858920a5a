#!/bin/sh
# Lesson 05: one-sided RDMA Write, checked byte for byte on the target, in both notification
# modes: write-with-immediate (a receive completion on the target carries the iteration number
# and the byte count) and a polled flag word written after the payload. Sizes from 1 byte to
# the largest (1 MiB), narrated and quiet.
# timeout: 240
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"

require_bin lesson05_rdma_write
L=lesson05_rdma_write

step "--notify imm: 5 writes of 4096 bytes; the target checks each against pattern(i)"
server_client 18300 "$L -d $VL_DEV0 -p 18300" \
    "$L -d $VL_DEV1 -p 18300 -s 4096 -n 5 --notify imm $VL_ADDR0"
for i in 0 1 2 3 4; do
    expect_contains "$SERVER_OUT" "iteration $i: ibv_post_recv (wr_id $i, no SGE) ready for the WRITE_WITH_IMM"
    expect_contains "$SERVER_OUT" "iteration $i: ibv_poll_cq -> RECV_RDMA_WITH_IMM (wr_id $i), imm_data $i, byte_len 4096"
    expect_contains "$SERVER_OUT" "iteration $i: verified 4096 bytes == pattern($i) (--notify imm)"
    expect_contains "$CLIENT_OUT" "iteration $i: ibv_post_send IBV_WR_RDMA_WRITE_WITH_IMM: 4096 bytes"
    expect_contains "$CLIENT_OUT" "iteration $i: wrote 4096 bytes of pattern($i); the server verified them"
done
expect_contains "$SERVER_OUT" "all 5 writes of 4096 bytes verified on the target (--notify imm)"
expect_contains "$CLIENT_OUT" "all 5 writes of 4096 bytes completed and verified by the server (--notify imm)"
# The target exposes REMOTE_WRITE on both its MR and its QP; the writer needs neither.
expect_contains "$SERVER_OUT" "access LOCAL_WRITE|REMOTE_WRITE"
expect_contains "$SERVER_OUT" "qp_access_flags REMOTE_WRITE"
expect_contains "$CLIENT_OUT" "access (none)"

step "--notify flag: 4 writes of 64 KiB, payload then flag word, the target spinning on it"
server_client 18301 "$L -d $VL_DEV0 -p 18301" \
    "$L -d $VL_DEV1 -p 18301 -s 64K -n 4 --notify flag $VL_ADDR0"
for i in 0 1 2 3; do
    expect_contains "$SERVER_OUT" "iteration $i: flag word == $((i + 1)) after"
    expect_contains "$SERVER_OUT" "iteration $i: verified 65536 bytes == pattern($i) (--notify flag)"
    expect_contains "$CLIENT_OUT" "IBV_WR_RDMA_WRITE flag=$((i + 1))"
done
expect_contains "$SERVER_OUT" "all 4 writes of 65536 bytes verified on the target (--notify flag)"
expect_contains "$CLIENT_OUT" "all 4 writes of 65536 bytes completed and verified by the server (--notify flag)"
expect_not_contains "$SERVER_OUT" "RECV_RDMA_WITH_IMM"

step "the smallest write (1 byte, flag) and the largest (1 MiB, imm), quiet"
server_client 18302 "$L -d $VL_DEV0 -p 18302 -q" \
    "$L -d $VL_DEV1 -p 18302 -q -s 1 -n 3 --notify flag $VL_ADDR0"
expect_contains "$SERVER_OUT" "iteration 2: verified 1 bytes == pattern(2) (--notify flag)"
expect_contains "$SERVER_OUT" "all 3 writes of 1 bytes verified on the target (--notify flag)"
expect_not_contains "$SERVER_OUT" "[1] Open the device"
expect_not_contains "$CLIENT_OUT" "ibv_post_send"
server_client 18303 "$L -d $VL_DEV0 -p 18303 -q" \
    "$L -d $VL_DEV1 -p 18303 -q -s 1M -n 2 --notify imm $VL_ADDR0"
expect_contains "$SERVER_OUT" "iteration 1: verified 1048576 bytes == pattern(1) (--notify imm)"
expect_contains "$CLIENT_OUT" "all 2 writes of 1048576 bytes completed and verified by the server"

step "a server given the same flags as the client agrees; different ones are refused"
server_client 18304 "$L -d $VL_DEV0 -p 18304 -q -s 512 -n 2 --notify flag" \
    "$L -d $VL_DEV1 -p 18304 -q -s 512 -n 2 --notify flag $VL_ADDR0"
expect_contains "$SERVER_OUT" "all 2 writes of 512 bytes verified on the target (--notify flag)"
if server_client 18305 "$L -d $VL_DEV0 -p 18305 -q -s 64" \
    "$L -d $VL_DEV1 -p 18305 -q -s 4096 --wait 10 $VL_ADDR0"; then
    fail "a server started with -s 64 accepted a client with -s 4096"
fi
expect_contains "$SERVER_OUT" "the client uses -s 4096 but this server was started with -s 64"
[ "$CLIENT_RC" -ne 0 ] || fail "the client exited 0 although the server refused"
step "one device on both sides (its QPs connected to each other), TCP over loopback"
server_client 18306 "$L -d $VL_DEV0 -p 18306 -q" "$L -d $VL_DEV0 -p 18306 -q -n 2 --notify flag 127.0.0.1"
expect_contains "$SERVER_OUT" "all 2 writes of 4096 bytes verified on the target (--notify flag)"
echo "lesson 05 scenarios passed"
