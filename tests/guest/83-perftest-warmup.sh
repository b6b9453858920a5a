#!/bin/sh
# shellcheck disable=SC2086 # $VL_PT_COMMON holds several options, split on purpose
# The warm-up as a perftest user expects it. A server started without --warmup runs its
# client's --warmup 0 (perftest's cold default) instead of refusing it; a server given a number
# refuses a client left at the default, saying both ways out. The default warm-up scales with
# the size: vl_read_lat -s 4M -n 5 warms up with one read, not 16, and ends well within the 80 s
# that ib_read_lat's run was given.
# timeout: 200
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"
# shellcheck source=tests/guest/perftest-lib.sh
. "$VL_TESTS/perftest-lib.sh"

# warmup_row FILE: the value of the "warm-up iterations" row of a --format table header.
warmup_row() {
    sed -n 's/^| warm-up iterations *| *\([0-9]*\) *|$/\1/p' "$1" | sed -n 1p
}

step "a server without --warmup runs its client's --warmup 0"
vl_pair_ok vl_write_bw "-s 4096 -n 100 --format table" "--warmup 0"
[ "$(warmup_row "$SERVER_OUT")" = 0 ] || fail "the server's header does not say 0 warm-up iterations"
[ "$(warmup_row "$CLIENT_OUT")" = 0 ] || fail "the client's header does not say 0 warm-up iterations"

step "a server with --warmup 3 refuses a client left at the default, saying both ways out"
if vl_pair vl_write_bw "-s 4096 -n 100" "" "--warmup 3"; then
    fail "a client at the default warm-up ran against a server with --warmup 3"
fi
expect_contains "$CLIENT_OUT" "client auto (the default), server 3"
expect_contains "$CLIENT_OUT" "start the server without it"

step "vl_read_lat -s 4M -n 5: the default warm-up is one read at 4 MiB"
next_port
SC_CLIENT_TIMEOUT=$(scaled 80)
server_client "$PORT" \
    "vl_read_lat -d $VL_DEV0 $VL_PT_COMMON -p $PORT -s 4M -n 5" \
    "vl_read_lat -d $VL_DEV1 $VL_PT_COMMON -p $PORT -s 4M -n 5 --format table $VL_ADDR0" ||
    fail "vl_read_lat -s 4M -n 5 failed or outlasted 80 s (outputs above)"
unset SC_CLIENT_TIMEOUT
[ "$(warmup_row "$CLIENT_OUT")" = 1 ] || fail "the header does not say 1 warm-up iteration at 4 MiB"
echo "the warm-up follows the client, refuses by name, and scales with the size"
