#!/bin/sh
# --plot FILE.svg on real -a sweeps: the chart is an SVG (no fonts needed in this busybox guest)
# with one line per series and one point per measured size, and vl_jsoncheck --plot proves its
# points are exactly the --json report's numbers. Stderr is no terminal here, so the progress
# bar must not appear in the output. The files are kept in .vm-out/perftest/ on the host.
# timeout: 300
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"
# shellcheck source=tests/guest/perftest-lib.sh
. "$VL_TESTS/perftest-lib.sh"

require_bin vl_jsoncheck

# line_points SVG COLOUR: the number of points of the <polyline> drawn in COLOUR.
line_points() {
    grep -o "stroke=\"$2\"[^>]*points=\"[^\"]*\"" "$1" | sed 's/.*points="//; s/"$//' |
        awk '{ print NF }'
}

step "vl_write_bw -a --plot: bandwidth and message rate, 23 sizes each"
json=$VL_PT_OUT/80-write-bw-sweep.json
svg=$VL_PT_OUT/80-write-bw-sweep.svg
rm -f "$json" "$svg" "$VL_PT_OUT/80-server.svg"
# The server gets --plot too, as a symmetric command line would: it measures nothing, says so,
# and still exits 0.
sjson=$VL_PT_OUT/80-server.json
rm -f "$sjson"
vl_pair_ok vl_write_bw "-a -n 4 --warmup 1" "--json $json --plot $svg" \
    "--json $sjson --plot $VL_PT_OUT/80-server.svg"
# The write server prints the client's report, as perftest's does, and plots those rows.
[ -s "$VL_PT_OUT/80-server.svg" ] || fail "the server wrote no chart of the client's report"
vl_jsoncheck "$sjson" --plot "$VL_PT_OUT/80-server.svg" || fail "the server's chart is not its report"
[ -s "$svg" ] || fail "the client wrote no $svg"
head -c 4 "$svg" | grep -q '<svg' || fail "$svg does not start with <svg"
expect_contains "$svg" "message size [bytes]"
expect_contains "$svg" "bandwidth [MiB/s]"
expect_contains "$svg" "message rate [Mpps]"
# average (blue), peak (orange), message rate (green): one line each, a point per size.
for colour in '#1F77B4' '#FF7F0E' '#2CA02C'; do
    n=$(line_points "$svg" "$colour")
    [ "$n" = 23 ] || fail "the $colour line of $svg has '$n' points, expected 23"
done
vl_jsoncheck "$json" --sizes "$(sizes 2 8388608)" --plot "$svg"
expect_not_contains "$CLIENT_OUT" "sizes, running"

step "vl_send_lat -a -c UD --plot: six percentile lines (min .. max), a point per size up to the MTU"
json=$VL_PT_OUT/80-send-lat-ud-sweep.json
svg=$VL_PT_OUT/80-send-lat-ud-sweep.svg
rm -f "$json" "$svg"
vl_pair_ok vl_send_lat "-a -c UD -n 20 --warmup 2" "--json $json --plot $svg"
mtu=$(header_value "$CLIENT_OUT" Mtu | tr -dc 0-9)
nsizes=$(sizes 2 "$mtu" | tr ',' '\n' | wc -l)
expect_contains "$svg" "latency [usec]"
for colour in '#7F7F7F' '#1F77B4' '#2CA02C' '#FF7F0E' '#D62728' '#9467BD'; do
    n=$(line_points "$svg" "$colour")
    [ "$n" = "$nsizes" ] || fail "the $colour line of $svg has '$n' points, expected $nsizes (2 .. $mtu)"
done
vl_jsoncheck "$json" --sizes "$(sizes 2 "$mtu")" --plot "$svg"

step "a --plot file that cannot be written is refused before the run, naming the file"
# Checked before any connection: no server is needed, and nothing runs.
rc=0
run_timeout 30 vl_write_bw -d "$VL_DEV1" -s 4096 -n 20 --plot /nonexistent-dir/x.svg 127.0.0.1 \
    >"$TMPDIR/plot-bad.out" 2>&1 || rc=$?
cat "$TMPDIR/plot-bad.out"
[ "$rc" = 2 ] || fail "an unwritable --plot file: exit $rc, expected 2 (a bad command line)"
expect_contains "$TMPDIR/plot-bad.out" "--plot /nonexistent-dir/x.svg: cannot write this file"
expect_contains "$TMPDIR/plot-bad.out" "nothing was run"
echo "the charts plot the reports' numbers"
