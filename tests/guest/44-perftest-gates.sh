#!/bin/sh
# Gates for CI: a run that completes but misses --min-bw or --max-lat exits with 3, distinct
# from 1 (the run failed) and 0, and says which gate, at which size, by how much. A gate the run
# meets exits 0.
# timeout: 180
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"
# shellcheck source=tests/guest/perftest-lib.sh
. "$VL_TESTS/perftest-lib.sh"

step "vl_write_bw --min-bw 1000000 (MiB/s): not met under emulation"
vl_pair vl_write_bw "-n 100" "--min-bw 1000000" || true
[ "$CLIENT_RC" = 3 ] || fail "the client exited $CLIENT_RC, expected 3 (gate failed)"
[ "$SERVER_RC" = 0 ] || fail "the server exited $SERVER_RC, expected 0"
expect_contains "$CLIENT_OUT" "gate failed: average BW"
expect_row "$CLIENT_OUT" "the row is printed all the same"

step "vl_write_lat --max-lat p99=0.001 (usec): not met"
vl_pair vl_write_lat "-n 100" "--max-lat p99=0.001" || true
[ "$CLIENT_RC" = 3 ] || fail "the client exited $CLIENT_RC, expected 3 (gate failed)"
expect_contains "$CLIENT_OUT" "gate failed: p99 latency"

step "the same gates on both sides: the server of a one-way test measures nothing and passes"
vl_pair vl_read_bw "-n 100 --min-bw 1000000" || true
[ "$CLIENT_RC" = 3 ] || fail "the client exited $CLIENT_RC, expected 3"
[ "$SERVER_RC" = 0 ] || fail "the server exited $SERVER_RC, expected 0"
expect_contains "$SERVER_OUT" "gates are checked by the client"

step "gates that hold: exit 0"
vl_pair_ok vl_send_bw "-n 100" "--min-bw 0.001"
expect_contains "$CLIENT_OUT" "gates passed: --min-bw 0.001"
vl_pair_ok vl_send_lat "-n 100" "--max-lat p50=1000000"
echo "gates fail with exit code 3 and pass with 0"
