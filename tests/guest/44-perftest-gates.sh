#!/bin/sh
# Gates for CI: a run that completes but misses --min-bw, --max-lat or perftest's -w/--limit_bw
# and -y/--limit_msgrate exits with 3, distinct from 1 (the run failed) and 0, and says which
# gate, at which size, by how much. A gate the run meets exits 0. perftest's own ib_write_bw with
# the same -w fails the same way (exit 1 there) and prints the same error line.
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

step "-w/--limit_bw as perftest: above the link's rate the client fails, the server prints the row"
vl_pair vl_write_bw "-n 100 -w 1000000" || true
[ "$CLIENT_RC" = 3 ] || fail "the client exited $CLIENT_RC, expected 3"
[ "$SERVER_RC" = 0 ] || fail "the server exited $SERVER_RC, expected 0 (perftest's server does not check)"
expect_contains "$CLIENT_OUT" "Error: BW result is below bw limit"
expect_row "$SERVER_OUT" "the server prints the client's row"
if command -v ib_write_bw >/dev/null 2>&1; then
    next_port
    server_client "$PORT" "ib_write_bw -d $VL_DEV0 -x 1 -F -u 20 -p $PORT -n 100 -w 1000000" \
        "ib_write_bw -d $VL_DEV1 -x 1 -F -u 20 -p $PORT -n 100 -w 1000000 $VL_ADDR0" || true
    [ "$CLIENT_RC" != 0 ] || fail "ib_write_bw -w 1000000: the client exited 0"
    [ "$SERVER_RC" = 0 ] || fail "ib_write_bw -w 1000000: the server exited $SERVER_RC"
    expect_contains "$CLIENT_OUT" "Error: BW result is below bw limit"
fi
vl_pair_ok vl_write_bw "-n 100 -w 0.01"
vl_pair vl_write_bw "-n 100 -y 1000" || true
[ "$CLIENT_RC" = 3 ] || fail "-y 1000: the client exited $CLIENT_RC, expected 3"
expect_contains "$CLIENT_OUT" "Error: Msg rate  is below msg_rate limit"
vl_pair_ok vl_read_bw "-n 100 -y 0.00001"

step "gates that hold: exit 0"
vl_pair_ok vl_send_bw "-n 100" "--min-bw 0.001"
expect_contains "$CLIENT_OUT" "gates passed: --min-bw 0.001"
vl_pair_ok vl_send_lat "-n 100" "--max-lat p50=1000000"
echo "gates fail with exit code 3 and pass with 0"
