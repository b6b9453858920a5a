#!/bin/sh
# -a sweeps every size through the same code as a single size, and --json holds every one of
# them in one valid document (perftest rewrites its JSON per size, so only the last survives).
# The document is checked by vl_jsoncheck (a strict RFC 8259 parser: the guest has no python
# or jq) and kept in .vm-out/perftest/ on the host.
# timeout: 720
# slow: three -a sweeps of up to 23 sizes each (write_bw to 8 MiB, send_lat over UD, read_lat); 100 s idle
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"
# shellcheck source=tests/guest/perftest-lib.sh
. "$VL_TESTS/perftest-lib.sh"

require_bin vl_jsoncheck

step "vl_write_bw -a: 23 rows, 2 B .. 8 MiB, in the text and in the JSON"
json=$VL_PT_OUT/41-write-bw-sweep.json
rm -f "$json"
vl_pair_ok vl_write_bw "-a -n 4 --warmup 1" "--json $json"
nrows=$(rows "$CLIENT_OUT" | wc -l)
[ "$nrows" -eq 23 ] || fail "the client printed $nrows rows, expected 23 (2 .. 8388608)"
# Small sizes at 4 iterations print 0.00 MiB/s with perftest's two decimals; the JSON keeps
# the digits and vl_jsoncheck requires every row's average to be positive.
vl_jsoncheck "$json" --sizes "$(sizes 2 8388608)"

step "vl_send_lat -a -c UD: sizes up to the MTU, each with its statistics"
json=$VL_PT_OUT/41-send-lat-ud-sweep.json
rm -f "$json"
vl_pair_ok vl_send_lat "-a -c UD -n 20 --warmup 2" "--json $json"
mtu=$(header_value "$CLIENT_OUT" Mtu | tr -dc 0-9)
vl_jsoncheck "$json" --sizes "$(sizes 2 "$mtu")"
grep -q '"t_p99_99_us"' "$json" || fail "no p99.99 in $json"

step "vl_read_lat -a --csv: the same 23 sizes"
csv=$VL_PT_OUT/41-read-lat-sweep.csv
# One 8 MiB read takes seconds under TCG on a busy host: give the sweep's client 6 minutes.
SC_CLIENT_TIMEOUT=360
vl_pair_ok vl_read_lat "-a -n 5 --warmup 1" "--csv $csv"
SC_CLIENT_TIMEOUT=120
lines=$(($(wc -l <"$csv") - 1))
[ "$lines" -eq 23 ] || fail "$csv holds $lines rows, expected 23"
echo "sweeps and reports hold every size"
