#!/bin/sh
# Lesson 06: one-sided RDMA Read with N reads outstanding. The read depth is negotiated
# (min of -o, the reader's max_qp_init_rd_atom and the target's max_qp_rd_atom), set at RTS on
# the reader and RTR on the target, and read back with ibv_query_qp; every byte read is
# checked against the pattern the server wrote for that round.
# timeout: 240
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"

require_bin lesson06_rdma_read
L=lesson06_rdma_read

step "-o 4: 3 rounds of 4 x 4096-byte reads, one at a time and all at once"
server_client 18310 "$L -d $VL_DEV0 -p 18310" "$L -d $VL_DEV1 -p 18310 -s 4096 -o 4 -n 3 $VL_ADDR0"
for f in "$SERVER_OUT" "$CLIENT_OUT"; do
    expect_contains "$f" "negotiated read depth 4 = min(-o 4, reader's max_qp_init_rd_atom "
done
# The reader issues (max_rd_atomic at RTS), the target answers (max_dest_rd_atomic at RTR).
expect_contains "$CLIENT_OUT" "set max_rd_atomic 4 / max_dest_rd_atomic 0; ibv_query_qp reads back max_rd_atomic 4 / max_dest_rd_atomic 0"
expect_contains "$SERVER_OUT" "set max_rd_atomic 0 / max_dest_rd_atomic 4; ibv_query_qp reads back max_rd_atomic 0 / max_dest_rd_atomic 4"
expect_contains "$SERVER_OUT" "access REMOTE_READ:"
expect_contains "$CLIENT_OUT" "access LOCAL_WRITE:"
for r in 0 1 2; do
    expect_contains "$SERVER_OUT" "round $r: filled bytes 0..16384 with pattern($r)"
    expect_contains "$CLIENT_OUT" "round $r: ibv_post_send 4 x IBV_WR_RDMA_READ of 4096 bytes"
    expect_contains "$CLIENT_OUT" "round $r: ibv_poll_cq -> 4 RDMA_READ completions, wr_ids in order [0, 1, 2, 3]"
    expect_contains "$CLIENT_OUT" "round $r: verified 4 reads x 4096 bytes == pattern($r)"
    expect_contains "$SERVER_OUT" "round $r: the client read and verified 4 x 4096 bytes of pattern($r)"
done
expect_contains "$CLIENT_OUT" "all 3 rounds verified: 4 reads of 4096 bytes each"

step "-o 3 with odd sizes: rxe rounds the depth it holds up to a power of two"
server_client 18311 "$L -d $VL_DEV0 -p 18311 -q" "$L -d $VL_DEV1 -p 18311 -q -s 1000 -o 3 -n 2 $VL_ADDR0"
expect_contains "$CLIENT_OUT" "set max_rd_atomic 3 / max_dest_rd_atomic 0; ibv_query_qp reads back max_rd_atomic 4"
expect_contains "$SERVER_OUT" "set max_rd_atomic 0 / max_dest_rd_atomic 3; ibv_query_qp reads back max_rd_atomic 0 / max_dest_rd_atomic 4"
expect_contains "$CLIENT_OUT" "round 1: verified 3 reads x 1000 bytes == pattern(1)"

step "-o 200: more than the devices allow; negotiated down, the rest queue, all verified"
server_client 18312 "$L -d $VL_DEV0 -p 18312 -q" "$L -d $VL_DEV1 -p 18312 -q -s 2048 -o 200 -n 1 $VL_ADDR0"
expect_contains "$CLIENT_OUT" "note: -o 200 is more than the devices allow at once"
expect_contains "$CLIENT_OUT" "round 0: verified 200 reads x 2048 bytes == pattern(0)"
expect_contains "$SERVER_OUT" "round 0: the client read and verified 200 x 2048 bytes of pattern(0)"
echo "lesson 06 scenarios passed"
