#!/bin/sh
# --min-bw with --procs gates the sum of the processes: the failure quotes the result row's BW
# average (the sum), and a gate the sum meets exits 0.
# timeout: 180
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"
# shellcheck source=tests/guest/perftest-lib.sh
. "$VL_TESTS/perftest-lib.sh"

step "vl_write_bw --procs 2 --min-bw 1000000: missed, quoting the sum"
vl_pair vl_write_bw "-s 65536 -n 300 --procs 2 --wait 60" "--min-bw 1000000" || true
next_port
[ "$CLIENT_RC" = 3 ] || fail "the client exited $CLIENT_RC, expected 3 (gate failed)"
[ "$SERVER_RC" = 0 ] || fail "the server exited $SERVER_RC, expected 0"
total=$(rows "$CLIENT_OUT" | awk '{ print $4 }')
echo "the sum's BW average: $total"
expect_contains "$CLIENT_OUT" "gate failed: average BW $total MiB/sec at 65536 bytes"

step "a gate the sum meets: exit 0"
# A quarter of the first run's sum: met by a second run's sum unless it is 4 times slower.
min=$(awk -v t="$total" 'BEGIN { printf "%d", t / 4 + 1 }')
vl_pair_ok vl_write_bw "-s 65536 -n 300 --procs 2 --wait 60" "--min-bw $min"
next_port
expect_contains "$CLIENT_OUT" "gates passed: --min-bw $min"
