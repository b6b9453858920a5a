#!/bin/sh
# --min-bw with --procs gates the aggregate of the processes (total bytes over the union of their
# intervals): the failure quotes the result row's BW average (the aggregate, not the '#sum'
# row), and a gate the aggregate meets exits 0.
# timeout: 180
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"
# shellcheck source=tests/guest/perftest-lib.sh
. "$VL_TESTS/perftest-lib.sh"

step "vl_write_bw --procs 2 --min-bw 1000000: missed, quoting the aggregate"
vl_pair vl_write_bw "-s 65536 -n 300 --procs 2 --wait 60" "--min-bw 1000000" || true
next_port
[ "$CLIENT_RC" = 3 ] || fail "the client exited $CLIENT_RC, expected 3 (gate failed)"
[ "$SERVER_RC" = 0 ] || fail "the server exited $SERVER_RC, expected 0"
total=$(rows "$CLIENT_OUT" | awk '{ print $4 }')
echo "the aggregate's BW average: $total"
sum=$(grep '^#sum' "$CLIENT_OUT" | awk '{ print $5 }')
echo "the #sum row's: $sum"
if [ "$sum" != "$total" ]; then
    expect_not_contains "$CLIENT_OUT" "gate failed: average BW $sum MiB/sec"
fi
expect_contains "$CLIENT_OUT" "gate failed: average BW $total MiB/sec at 65536 bytes"

step "a gate the aggregate meets: exit 0"
# A quarter of the first run's aggregate: met by a second run's unless it is 4 times slower.
min=$(awk -v t="$total" 'BEGIN { printf "%d", t / 4 + 1 }')
vl_pair_ok vl_write_bw "-s 65536 -n 300 --procs 2 --wait 60" "--min-bw $min"
next_port
expect_contains "$CLIENT_OUT" "gates passed: --min-bw $min"
