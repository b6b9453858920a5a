#!/bin/sh
# The exercises of lessons 01, 02, 04, 05, 06, 09 and 10: each command as the README gives it
# (plus a private -p for the two-sided ones), and the answer the README folds away.
# timeout: 400
# slow: two exercises wait out a --wait 10 on purpose (a peer that never answers), and lesson 06 reads 3 x 255 buffers of 4 KiB twice
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"

for b in lesson01_devices lesson02_resources lesson04_send_recv lesson05_rdma_write \
    lesson06_rdma_read lesson09_affinity lesson10_mqueue; do
    require_bin "$b"
done
port=18577
out=$TMPDIR/ex66.out

# run_rc WANT CMD...: run CMD (bounded) into $out; its exit status must be WANT.
run_rc() {
    _want=$1
    shift
    echo "\$ $*"
    _rc=0
    run_timeout 120 "$@" >"$out" 2>&1 || _rc=$?
    cat "$out"
    [ "$_rc" = "$_want" ] || fail "$* exited with $_rc, expected $_want"
}

step "lesson 01, exercise 1: a device that does not exist"
run_rc 1 lesson01_devices -d rxe9
expect_contains "$out" "lesson01_devices: error: RDMA device 'rxe9' not found; available: $VL_DEV0, $VL_DEV1"
expect_contains "$out" "(on the way out after an error: ibv_free_device_list(list))"

step "lesson 01, exercise 2: the active MTU on a 9000-byte veth, and the GID chosen"
run_rc 0 lesson01_devices -q
expect_contains "$out" "$VL_DEV0: fw 0.0.0"
expect_contains "$out" "port 1 IBV_PORT_ACTIVE MTU 4096 Ethernet LID 0 GID[1] 0000:0000:0000:0000:0000:ffff:c0a8:4d01 (RoCE v2, veth0, 192.168.77.1)"

step "lesson 02, exercise 1: --max-send-wr 128"
run_rc 0 lesson02_resources -d "$VL_DEV0" -q --max-send-wr 128
expect_contains "$out" "max_send_wr 255 max_recv_wr 511"

step "lesson 02, exercise 2: --max-inline 0"
run_rc 0 lesson02_resources -d "$VL_DEV0" -q --max-inline 0
expect_contains "$out" "max_send_sge 1 max_recv_sge 1 max_inline_data 16"

step "lesson 02, exercise 3: --max-inline 1000"
run_rc 1 lesson02_resources -d "$VL_DEV0" -q --max-inline 1000
expect_contains "$out" "ibv_create_qp failed: Invalid argument (EINVAL)"

step "lesson 04, exercise 1: server -s 4096, client -s 8192"
server_client "$port" "lesson04_send_recv -d $VL_DEV0 -p $port -s 4096 -n 5 --wait 10" \
    "lesson04_send_recv -d $VL_DEV1 -p $port -s 8192 -n 5 --wait 10 $VL_ADDR0" && fail "mismatched sizes passed"
expect_contains "$SERVER_OUT" "a posted receive (wr_id 1) completed with IBV_WC_LOC_QP_OP_ERR"
expect_contains "$CLIENT_OUT" "our SEND (wr_id 2) completed with IBV_WC_REM_OP_ERR"

step "lesson 04, exercise 2: server -s 4096, client -s 1024"
server_client "$port" "lesson04_send_recv -d $VL_DEV0 -p $port -s 4096 -n 5 --wait 10" \
    "lesson04_send_recv -d $VL_DEV1 -p $port -s 1024 -n 5 --wait 10 $VL_ADDR0" && fail "mismatched sizes passed"
expect_contains "$SERVER_OUT" "message 0 from the peer has 1024 bytes, we expect 4096"
expect_contains "$CLIENT_OUT" "timed out after 10 s waiting for iteration 0: the peer's message"

step "lesson 05, exercise 1: --bad-rkey"
server_client "$port" "lesson05_rdma_write -d $VL_DEV0 -p $port --wait 20" \
    "lesson05_rdma_write -d $VL_DEV1 -p $port -n 2 --bad-rkey --wait 20 $VL_ADDR0" && fail "a bad rkey passed"
expect_contains "$CLIENT_OUT" "completed with IBV_WC_REM_ACCESS_ERR"
expect_contains "$SERVER_OUT" "waiting for the client's write: work request 0 on QP"
expect_contains "$SERVER_OUT" "completed with IBV_WC_REM_ACCESS_ERR"

step "lesson 05, exercise 2: --no-write-access=qp (and =mr, which the answer compares)"
server_client "$port" "lesson05_rdma_write -d $VL_DEV0 -p $port --no-write-access=qp --wait 20" \
    "lesson05_rdma_write -d $VL_DEV1 -p $port -n 2 --wait 20 $VL_ADDR0" && fail "a write to a QP without REMOTE_WRITE passed"
expect_contains "$SERVER_OUT" "--no-write-access=qp: REMOTE_WRITE is missing from the QP's access flags"
expect_contains "$CLIENT_OUT" "completed with IBV_WC_REM_INV_REQ_ERR (remote invalid request error)"
expect_not_contains "$CLIENT_OUT" "IBV_WC_REM_ACCESS_ERR"
expect_contains "$SERVER_OUT" "waiting for the client's write: work request 0 on QP"
expect_contains "$SERVER_OUT" "completed with IBV_WC_WR_FLUSH_ERR"
server_client "$port" "lesson05_rdma_write -d $VL_DEV0 -p $port --no-write-access=mr --wait 20" \
    "lesson05_rdma_write -d $VL_DEV1 -p $port -n 2 --wait 20 $VL_ADDR0" && fail "a write to an MR without REMOTE_WRITE passed"
expect_contains "$CLIENT_OUT" "RDMA WRITE to rkey 0x0: work request 0 on QP"
expect_contains "$CLIENT_OUT" "completed with IBV_WC_REM_ACCESS_ERR (remote access error)"

step "lesson 06, exercise 1: -o 255"
server_client "$port" "lesson06_rdma_read -d $VL_DEV0 -p $port" \
    "lesson06_rdma_read -d $VL_DEV1 -p $port -o 255 $VL_ADDR0"
expect_contains "$CLIENT_OUT" "note: -o 255 is more than the devices allow at once; 128 reads will be in flight"
expect_contains "$CLIENT_OUT" "ibv_query_qp reads back max_rd_atomic 128 / max_dest_rd_atomic 0"
expect_contains "$SERVER_OUT" "ibv_query_qp reads back max_rd_atomic 0 / max_dest_rd_atomic 128"
expect_contains "$CLIENT_OUT" "all 3 rounds verified: 255 reads of 4096 bytes each"

step "lesson 06, exercise 2: --bad-rkey"
server_client "$port" "lesson06_rdma_read -d $VL_DEV0 -p $port --wait 20" \
    "lesson06_rdma_read -d $VL_DEV1 -p $port --bad-rkey --wait 20 $VL_ADDR0" && fail "a bad rkey passed"
expect_contains "$CLIENT_OUT" "the warm-up read: RDMA READ from rkey"
expect_contains "$CLIENT_OUT" "completed with IBV_WC_REM_ACCESS_ERR"
expect_contains "$SERVER_OUT" "the peer closed the connection while we waited for the client's report on round 0"

step "lesson 09, exercise 1: --cpus 1,1"
run_rc 0 lesson09_affinity -q -n 60 -r 1 --cpus 1,1
expect_contains "$out" "round 1 medians (µs): same-core "
expect_not_contains "$out" "diff-cores"
for k in same-core same-yield; do
    awk -v k="$k" '$1 == k && $2 == 1 && $3 == 1 { found = 1 } END { exit !found }' "$out" \
        || fail "the $k row does not show both threads on CPU 1"
done

step "lesson 09, exercise 3: the same run, yielding against not"
expect_contains "$out" "same core vs same core, yielding: median round trip "
# The answer's count, not a speed: one CPU for two pollers means at least one switch per round
# trip for each thread in both rows (60 measured + 10 warm-up), whoever causes it.
for k in same-core same-yield; do
    sw=$(awk -v k="$k" '$1 == k && NF == 10 { print $9; exit }' "$out")
    c=${sw%/*} s=${sw#*/}
    [ "${c:-0}" -ge 60 ] && [ "${s:-0}" -ge 60 ] \
        || fail "$k: '$sw' switches (client/server), expected at least one per round trip each"
done

step "lesson 09, exercise 2: the CPUs local to rxe0"
run_rc 0 lesson09_affinity -q -n 30 -r 1
expect_contains "$out" "$VL_DEV0: no NUMA locality (virtual device)"
[ ! -e "/sys/class/infiniband/$VL_DEV0/device" ] || fail "/sys/class/infiniband/$VL_DEV0/device exists"

step "lesson 10, exercise 1: the order of four messages of priorities 1, 9, 5, 9"
run_rc 0 lesson10_mqueue -q -k 1 -n 1000
expect_contains "$out" "received in priority order: high(9) high again(9) mid(5) low(1)"

step "lesson 10, exercise 2: --kill-worker 1"
run_rc 1 lesson10_mqueue -q --no-tour -k 2 -n 1000 --kill-worker 1
expect_contains "$out" "was killed by SIGKILL before sending its Result and Done"
expect_contains "$out" "(mq_open of each name: ENOENT)"
echo "exercise answers hold"
