#!/bin/sh
# --validate: every message carries a pattern and its sequence number, checked by the side that
# ends up holding it — the RDMA Write target (the last message of every slot), the RDMA Read
# initiator (what it read), the receiver of sends (every message, in order). Passes on good
# runs, over the paths that differ: inline and not, several QPs, post lists, both directions, UD.
# timeout: 300
# slow: thirteen --validate pairs (every tool and path that differs), 2-15 s each under TCG; 34 s idle
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"
# shellcheck source=tests/guest/perftest-lib.sh
. "$VL_TESTS/perftest-lib.sh"

ok_validated() { # TOOL OPTIONS
    step "$1 $2 --validate"
    vl_pair_ok "$1" "$2 --validate"
    expect_row "$CLIENT_OUT" "$1 client"
}

ok_validated vl_write_bw "-s 65536 -n 300"
ok_validated vl_write_bw "-s 12 -n 300"
ok_validated vl_write_bw "-s 100000 -n 100 -q 2 -l 4 -t 16 -b"
ok_validated vl_read_bw "-s 65536 -n 300"
ok_validated vl_read_bw "-s 5 -n 300 -q 3"
ok_validated vl_send_bw "-s 65536 -n 300"
ok_validated vl_send_bw "-s 7 -n 300 -b"
ok_validated vl_send_bw "-s 2048 -n 300 -c UD"
ok_validated vl_write_lat "-s 100 -n 100"
ok_validated vl_write_lat "-s 32 -n 100"
ok_validated vl_send_lat "-s 4096 -n 100"
ok_validated vl_read_lat "-s 1000 -n 100"
echo "payloads arrived intact"
