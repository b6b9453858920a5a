#!/bin/sh
# perftest's options do what NIC engineers expect, each run ending with a sane row: several QPs
# with post lists and CQ moderation, bidirectional runs (with events and 16 QPs: perftest hangs
# there), completion events, duration mode with a peak, UD and UC, both atomics, outstanding
# reads, inline on and off, Gb/s, no-peak, CPU pinning.
# timeout: 420
# slow: over twenty tool pairs, one per option combination, 2-8 s each under TCG; 73 s idle
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"
# shellcheck source=tests/guest/perftest-lib.sh
. "$VL_TESTS/perftest-lib.sh"

run_ok() { # TOOL OPTIONS [CLIENT-ONLY]
    step "$1 $2 ${3:-}"
    vl_pair_ok "$1" "$2" "${3:-}"
    expect_row "$CLIENT_OUT" "$1 client"
}

# A given -Q must divide the post list (perftest's rule; -l 4 -Q 16 is refused).
run_ok vl_write_bw "-q 4 -l 8 -t 64 -Q 4 -n 200 -s 8192"
[ "$(header_value "$CLIENT_OUT" "Number of qps")" = 4 ] || fail "the header does not say 4 QPs"
expect_contains "$CLIENT_OUT" "Post List BW Test"
[ "$(header_value "$CLIENT_OUT" "CQ Moderation")" = 4 ] || fail "CQ moderation is not 4"

run_ok vl_write_bw "-b -n 200"
# The 64 KiB default is over 8 KiB: every request signaled, as ib_write_bw does without -Q.
[ "$(header_value "$CLIENT_OUT" "CQ Moderation")" = 1 ] || fail "CQ moderation at 64 KiB is not 1"
expect_row "$SERVER_OUT" "vl_write_bw -b server"
expect_contains "$CLIENT_OUT" "Bidirectional BW Test"
# As perftest's: both sides print the sum of both directions, the same row.
[ "$(rows "$SERVER_OUT")" = "$(rows "$CLIENT_OUT")" ] \
    || fail "vl_write_bw -b: the two sides print different sums"

run_ok vl_send_bw "-b -e -q 16 -t 32 -r 64 -n 50 -s 4096"
run_ok vl_send_bw "-e -n 200"
expect_contains "$CLIENT_OUT" "Test with events."
run_ok vl_read_lat "-e -n 200"

run_ok vl_write_bw "-D 3"
# Duration mode has a peak too (perftest leaves it out).
p=$(row_field "$CLIENT_OUT" 3)
num_gt "$p" 0 || fail "no peak bandwidth in duration mode"
run_ok vl_send_lat "-D 2"
expect_contains "$CLIENT_OUT" "tps average"

run_ok vl_send_bw "-c UD -s 2048 -n 300"
expect_row "$SERVER_OUT" "vl_send_bw UD receiver"
run_ok vl_send_lat "-c UD -s 1024 -n 200"
# Send latency with unsignaled SENDs (one in -Q, as ib_send_lat): a send queue of 4 fills with
# them, and each fifth post waits for the signaled fourth one's completion to free the queue;
# with -e that wait sleeps on the channel. The header's TX depth is the QP's send queue.
run_ok vl_send_lat "-t 4 -Q 4 -s 64 -n 300"
[ "$(header_value "$CLIENT_OUT" "TX depth")" = 4 ] || fail "vl_send_lat -t 4: TX depth is not 4"
run_ok vl_send_lat "-t 4 -Q 2 -e -n 200"
run_ok vl_send_lat "-t 4 -Q 4 -c UD -s 512 -n 200"
# Write latency signals every write at any depth, as ib_write_lat.
run_ok vl_write_lat "-t 16 -Q 8 -n 300"
run_ok vl_write_bw "-c UC -n 200"
run_ok vl_write_lat "-c UC -n 200"
run_ok vl_send_bw "-c UC -n 200 -s 16384"

run_ok vl_atomic_bw "-A CMP_AND_SWAP -o 4 -n 300"
expect_contains "$CLIENT_OUT" "Atomic CMP_AND_SWAP BW Test"
run_ok vl_atomic_lat "-A CMP_AND_SWAP -n 200"
run_ok vl_read_bw "-o 1 -n 200"
[ "$(header_value "$CLIENT_OUT" "Outstand reads")" = 1 ] || fail "-o 1 not in the header"

# On rxe the default is no inline (one more copy there, as perftest decides on a device it does
# not know); -I asks for it, -I 0 turns it off.
run_ok vl_write_lat "-s 64 -n 200"
[ "$(header_value "$CLIENT_OUT" "Max inline data")" = "0[B]" ] || fail "the default inlined on rxe"
run_ok vl_write_lat "-s 64 -I 64 -n 200"
[ "$(header_value "$CLIENT_OUT" "Max inline data")" = "64[B]" ] || fail "-I 64: 64-byte writes not inline"
run_ok vl_write_lat "-s 64 -I 0 -n 200"
[ "$(header_value "$CLIENT_OUT" "Max inline data")" = "0[B]" ] || fail "-I 0 did not turn inline off"

run_ok vl_write_bw "-n 200" "--report_gbits -N"
expect_contains "$CLIENT_OUT" "BW peak[Gb/sec]"
p=$(row_field "$CLIENT_OUT" 3)
awk -v p="$p" 'BEGIN { exit !(p == 0) }' || fail "-N: the peak is $p, not 0"

run_ok vl_write_bw "-n 100 --cpu 1"
expect_contains "$CLIENT_OUT" "CPU pinned      : 1 (requested CPU list 1)"

run_ok vl_send_bw "-n 100 -m 1024 -s 10000"
[ "$(header_value "$CLIENT_OUT" Mtu)" = "1024[B]" ] || fail "-m 1024 not in the header"
echo "every option ran"
