#!/bin/sh
# perftest's last four options, side by side with perftest itself in the same boot, compared as
# scenario 76 compares (ib_pair, same_shape: perftest-lib.sh): ours with --validate (every byte
# that arrived checked), the server's packet counter for the traffic, perftest's pair where the
# guest's perftest (6.06) has the option.
#   --write_with_imm: the responder reaps one receive per write and checks its immediate data;
#     the title reads RDMA_Write_imm; refused on one side only. Not in perftest 6.06: ours alone.
#   --use-srq: the send tools' receives come from one shared receive queue (-q 2: two QPs draw
#     from it).
#   --mr_per_qp: each QP's buffers are regions of their own (-q 2).
#   --use_hugepages: with no huge pages reserved the run fails (exit 1) and says to run
#     `sysctl vm.nr_hugepages=N`; with 128 reserved it runs, and takes some of them.
# timeout: 300
# slow: 13 tool pairs (9 of ours, 4 of perftest's), 64 KiB x 100, 4 KiB x 200 or 2 B x 100, 1-5 s each under TCG; 36 s
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"
# shellcheck source=tests/guest/perftest-lib.sh
. "$VL_TESTS/perftest-lib.sh"

require_bin ib_write_bw
require_bin ib_send_bw

HUGE=/proc/sys/vm/nr_hugepages
HUGE0=$(cat "$HUGE")
trap 'echo "$HUGE0" >"$HUGE"' EXIT

# mark: the server's received packets now. arrived WHAT MIN: the server's device received at
# least MIN packets since the mark (rxe counts packets, not bytes: MIN = messages x their
# packets at the largest MTU, 4096).
mark() { R0=$(hw_counter "$VL_DEV0" rcvd_pkts); }
arrived() {
    r=$(($(hw_counter "$VL_DEV0" rcvd_pkts) - R0))
    [ "$r" -ge "$2" ] || fail "$1: the server's device received $r packets, fewer than $2"
    echo "$1: the server's device received $r packets (at least $2)"
}

step "--write_with_imm: a receive per write, its immediate data checked (ours)"
mark
vl_pair_ok vl_write_bw "--write_with_imm -s 65536 -n 100 --validate"
expect_contains "$CLIENT_OUT" "RDMA_Write_imm BW Test"
expect_row "$SERVER_OUT" "vl_write_bw --write_with_imm server (responder)"
arrived "vl_write_bw --write_with_imm" 1600
cp "$CLIENT_OUT" "$TMPDIR/vl-wimm.out"
vl_pair_ok vl_write_lat "--write_with_imm -s 2 -n 100 --validate"
expect_contains "$CLIENT_OUT" "RDMA_Write_imm Latency Test"
expect_row "$CLIENT_OUT" "vl_write_lat --write_with_imm client"
if ib_write_bw --help 2>&1 | grep -q -e '--write_with_imm'; then
    ib_pair ib_write_bw "--write_with_imm -s 65536 -n 100"
    same_shape "write_bw --write_with_imm, client" "$TMPDIR/vl-wimm.out" "$CLIENT_OUT"
else
    echo "note: this perftest ($(ib_write_bw --version 2>&1 | head -n 1)) has no --write_with_imm; ours ran alone"
fi
vl_pair vl_write_bw "-s 4096 -n 50" "--write_with_imm" && fail "a one-sided --write_with_imm ran"
expect_contains "$SERVER_OUT" "--write_with_imm"

step "--use-srq: two QPs' receives from one shared receive queue; ours, then perftest's"
mark
vl_pair_ok vl_send_bw "--use-srq -q 2 -s 4096 -n 200 --validate"
expect_row "$SERVER_OUT" "vl_send_bw --use-srq -q 2 server (receiver)"
arrived "vl_send_bw --use-srq" 400
cp "$SERVER_OUT" "$TMPDIR/vl-srq-s.out"
cp "$CLIENT_OUT" "$TMPDIR/vl-srq-c.out"
mark
ib_pair ib_send_bw "--use-srq -q 2 -s 4096 -n 200"
arrived "ib_send_bw --use-srq" 400
same_shape "send_bw --use-srq, server" "$TMPDIR/vl-srq-s.out" "$SERVER_OUT"
same_shape "send_bw --use-srq, client" "$TMPDIR/vl-srq-c.out" "$CLIENT_OUT"
vl_pair_ok vl_send_lat "--use-srq -s 2 -n 100 --validate"
expect_row "$CLIENT_OUT" "vl_send_lat --use-srq client"

step "--mr_per_qp: each of two QPs with its own regions; ours, then perftest's"
mark
vl_pair_ok vl_write_bw "--mr_per_qp -q 2 -s 4096 -n 200 --validate"
expect_row "$CLIENT_OUT" "vl_write_bw --mr_per_qp -q 2 client"
arrived "vl_write_bw --mr_per_qp" 400
cp "$CLIENT_OUT" "$TMPDIR/vl-mr.out"
mark
ib_pair ib_write_bw "--mr_per_qp -q 2 -s 4096 -n 200"
arrived "ib_write_bw --mr_per_qp" 400
same_shape "write_bw --mr_per_qp, client" "$TMPDIR/vl-mr.out" "$CLIENT_OUT"
vl_pair_ok vl_read_bw "--mr_per_qp -q 2 -s 4096 -n 200 --validate"
expect_row "$CLIENT_OUT" "vl_read_bw --mr_per_qp -q 2 client"

step "--use_hugepages with none reserved: exit 1, and the error says what to do"
echo 0 >"$HUGE"
vl_pair vl_write_bw "--use_hugepages -s 65536 -n 100" && fail "--use_hugepages ran with no huge pages"
[ "$SERVER_RC" = 1 ] || fail "--use_hugepages with no huge pages: the server exited $SERVER_RC, expected 1"
expect_contains "$SERVER_OUT" "sysctl vm.nr_hugepages="
expect_contains "$SERVER_OUT" "no huge pages are reserved"
echo "ours: $(grep -m 1 'nr_hugepages' "$SERVER_OUT")"
next_port
server_client "$PORT" \
    "ib_write_bw -d $VL_DEV0 -x 1 -F $VL_PT_COMMON -p $PORT --use_hugepages" \
    "ib_write_bw -d $VL_DEV1 -x 1 -F $VL_PT_COMMON -p $PORT --use_hugepages $VL_ADDR0" \
    && fail "perftest's --use_hugepages ran with no huge pages"
echo "perftest's (server exit $SERVER_RC): $(cat "$SERVER_OUT" "$CLIENT_OUT" | grep -m 1 -i 'huge')"

step "--use_hugepages with 128 reserved: the run takes huge pages and its bytes arrive"
echo 128 >"$HUGE"
[ "$(cat "$HUGE")" -ge 16 ] || fail "the guest reserved only $(cat "$HUGE") huge pages"
free0=$(awk '/^HugePages_Free/ { print $2 }' /proc/meminfo)
# While the pair runs (the server keeps its resources 2 s more: --wait_destroy), a watcher
# notes the free huge pages every 0.1 s.
rm -f "$TMPDIR/huge.stop"
(while [ ! -e "$TMPDIR/huge.stop" ]; do
    awk '/^HugePages_Free/ { print $2 }' /proc/meminfo
    sleep 0.1
done) >"$TMPDIR/huge.free" &
watcher=$!
mark
next_port
server_client "$PORT" \
    "vl_write_bw -d $VL_DEV0 $VL_PT_COMMON -p $PORT --use_hugepages -s 65536 -n 100 --validate --wait_destroy 2" \
    "vl_write_bw -d $VL_DEV1 $VL_PT_COMMON -p $PORT --use_hugepages -s 65536 -n 100 --validate $VL_ADDR0" \
    || fail "vl_write_bw --use_hugepages with 128 huge pages failed"
touch "$TMPDIR/huge.stop"
wait "$watcher" || true
least=$(sort -n "$TMPDIR/huge.free" | head -n 1)
if [ -z "$least" ] || [ "$least" -ge "$free0" ]; then
    fail "vl_write_bw --use_hugepages: HugePages_Free never dropped below $free0 (least: ${least:-none})"
fi
echo "vl_write_bw --use_hugepages: $((free0 - least)) of $free0 free huge pages taken while it ran"
expect_row "$CLIENT_OUT" "vl_write_bw --use_hugepages client"
arrived "vl_write_bw --use_hugepages" 1600
cp "$CLIENT_OUT" "$TMPDIR/vl-huge.out"
ib_pair ib_write_bw "--use_hugepages -s 65536 -n 100"
same_shape "write_bw --use_hugepages, client" "$TMPDIR/vl-huge.out" "$CLIENT_OUT"
echo "--write_with_imm, --use-srq, --mr_per_qp and --use_hugepages behave as documented"
