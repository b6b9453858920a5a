#!/bin/sh
# --openmetrics FILE as a fleet uses it: a bandwidth and a latency pair and a collective
# (vl_all_reduce_perf --np 2) write their files into a
# directory that the real node_exporter (Debian's prometheus-node-exporter, textfile collector)
# serves, and its /metrics must hold our families with the numbers the tools printed, each
# gate's verdict (one that holds, one that fails on purpose: the run exits 3 and still writes
# the file), the port's counter deltas, and no textfile scrape error — node_exporter refuses a
# file it cannot parse. A file that cannot be written is refused before anything runs.
# timeout: 240
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"
# shellcheck source=tests/guest/perftest-lib.sh
. "$VL_TESTS/perftest-lib.sh"

dir=$(mktemp -d "${TMPDIR:-/tmp}/om.XXXXXX")
mkdir -p "$dir/textfile"

step "a bandwidth pair writes its metrics (a --min-bw gate that holds, a counter gate)"
vl_pair_ok vl_write_bw "-s 65536 -n 200" \
    "--openmetrics $dir/textfile/write.prom --min-bw 0.001 --max-counter hw_counters/retry_exceeded_err=0"
cp "$CLIENT_OUT" "$dir/write.out"
cat "$dir/textfile/write.prom"
tail -n 1 "$dir/textfile/write.prom" | grep -qx '# EOF' || fail "the file does not end with '# EOF'"

step "a latency pair whose p99 gate fails on purpose: exit 3, and the file says so"
rc=0
vl_pair vl_write_lat "-s 2 -n 200" "--openmetrics $dir/textfile/lat.prom --max-lat p99=0.001" || rc=$?
[ "$CLIENT_RC" = 3 ] || fail "the client exited $CLIENT_RC with a failing --max-lat gate, expected 3"
grep -q '^vl_gate_passed{.*gate="--max-lat p99=0.001"} 0$' "$dir/textfile/lat.prom" ||
    fail "lat.prom has no failed verdict for --max-lat p99=0.001"

step "a collective writes its metrics: vl_all_reduce_perf --np 2, every element checked, a gate that holds"
rc=0
run_timeout "$(scaled 90)" vl_all_reduce_perf --np 2 --ib-dev "$VL_DEV0,$VL_DEV1" -b 4K -e 64K -f 4 \
    -n 5 -w 1 -c 1 --min-busbw 0.000001 --openmetrics "$dir/textfile/coll.prom" >"$dir/coll.out" 2>&1 ||
    rc=$?
cat "$dir/coll.out"
[ "$rc" = 0 ] || fail "vl_all_reduce_perf --openmetrics exited $rc"
tail -n 1 "$dir/textfile/coll.prom" | grep -qx '# EOF' || fail "coll.prom does not end with '# EOF'"

step "node_exporter's textfile collector serves the three files"
port=9109
prometheus-node-exporter --web.listen-address="127.0.0.1:$port" --collector.disable-defaults \
    --collector.textfile --collector.textfile.directory="$dir/textfile" >"$dir/ne.log" 2>&1 &
ne=$!
trap 'kill $ne 2>/dev/null || true' EXIT
wait_port "$port" "$(scaled 30)" "$ne" || { cat "$dir/ne.log"; fail "node_exporter did not listen"; }
wget -q -O "$dir/metrics" "http://127.0.0.1:$port/metrics" || fail "could not scrape node_exporter"
grep -E '^(vl_|node_textfile)' "$dir/metrics"
grep -q '^node_textfile_scrape_error 0$' "$dir/metrics" ||
    { cat "$dir/ne.log"; fail "node_exporter could not parse our files (node_textfile_scrape_error)"; }

step "the served numbers are the ones the tool printed"
mib=$(row_field "$dir/write.out" 4)
bps=$(grep '^vl_bandwidth_average_bytes_per_second{' "$dir/metrics" | grep -F 'tool="vl_write_bw"' |
    grep -F 'bytes="65536"' | awk '{ print $2 }')
[ -n "$bps" ] || fail "no vl_bandwidth_average_bytes_per_second for vl_write_bw at 65536 bytes"
awk -v m="$mib" -v b="$bps" 'BEGIN { d = b / 1048576 - m; exit !(d < 0.01 && d > -0.01) }' ||
    fail "the served bandwidth $bps B/s is not the printed $mib MiB/s"
# served FAMILY 'LABEL="V"'... -- VALUE_RE: a served sample of FAMILY with every LABEL (in any
# order: node_exporter sorts them) whose value matches VALUE_RE.
served() {
    _f=$1
    shift
    _s=$(grep "^$_f{" "$dir/metrics")
    while [ "$1" != -- ]; do
        _s=$(printf '%s\n' "$_s" | grep -F "$1" || true)
        shift
    done
    printf '%s\n' "$_s" | grep -qE "} $2\$"
}
served vl_gate_passed 'tool="vl_write_bw"' 'gate="--min-bw 0.001"' -- 1 || fail "no held --min-bw verdict"
served vl_gate_passed 'gate="--max-counter hw_counters/retry_exceeded_err=0"' -- 1 ||
    fail "no held --max-counter verdict"
served vl_gate_passed 'tool="vl_write_lat"' 'gate="--max-lat p99=0.001"' -- 0 ||
    fail "no failed --max-lat verdict served"
served vl_nic_counter_delta 'tool="vl_write_bw"' 'counter="hw_counters/sent_pkts"' -- '[1-9][0-9]*' ||
    fail "no sent_pkts delta above 0"
served vl_latency_seconds 'tool="vl_write_lat"' 'stat="median"' 'bytes="2"' -- '[0-9.e+-]+' ||
    fail "no latency median served"
served vl_run_info 'tool="vl_write_lat"' 'role="client"' 'iterations="200"' -- 1 ||
    fail "no vl_run_info of the latency client"

# The collective's busbw at 64 KiB, out of place: the printed GB/s (column 8) is what is served.
gbs=$(awk '$1 == 65536 { print $8 }' "$dir/coll.out")
cbps=$(grep '^vl_coll_bus_bandwidth_bytes_per_second{' "$dir/metrics" | grep -F 'bytes="65536"' |
    grep -F 'placement="out_of_place"' | grep -F 'collective="all_reduce"' | awk '{ print $2 }')
[ -n "$gbs" ] && [ -n "$cbps" ] || fail "no busbw at 65536 bytes (printed '$gbs', served '$cbps')"
awk -v g="$gbs" -v b="$cbps" 'BEGIN { d = b / 1e9 - g; exit !(d < 0.0001 && d > -0.0001) }' ||
    fail "the served busbw $cbps B/s is not the printed $gbs GB/s"
served vl_coll_wrong_elements 'collective="all_reduce"' 'ranks="2"' 'placement="in_place"' -- 0 ||
    fail "no #wrong of 0 served for the collective"
served vl_gate_passed 'tool="vl_all_reduce_perf"' 'gate="--min-busbw' -- 1 ||
    fail "no held --min-busbw verdict served"

step "a file that cannot be written is refused before the run"
rc=0
run_timeout "$(scaled 30)" vl_write_bw -d "$VL_DEV1" --openmetrics /nonexistent/dir/x.prom 127.0.0.1 \
    >"$dir/bad.out" 2>&1 || rc=$?
cat "$dir/bad.out"
[ "$rc" != 0 ] && [ "$rc" != 124 ] || fail "an unwritable --openmetrics file: exit $rc"
expect_contains "$dir/bad.out" "--openmetrics /nonexistent/dir/x.prom: cannot write this file"
echo "ok"
