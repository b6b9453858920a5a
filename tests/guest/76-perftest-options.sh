#!/bin/sh
# perftest's remaining options, side by side with perftest itself in the same boot: each pair of
# ours and the same pair of ib_* with the same options, compared by the shape of their output
# (separators, titles, column headers, rows after the first column header) and by the traffic
# (who sent, the bytes arrived: --validate, and the devices' packet counters).
#   --report-both: with -b, after the sum, "Local results" and "Remote results"; one side's
#     Local row is the other side's Remote row, and Local + Remote is the sum.
#   --reversed: the server sends, the client receives (the server's device sends the data
#     packets, the client's only the acks); the header's TX depth moves to the server.
#   -H, -U, -C (latency): every sample sorted, as taken, in CPU cycles: perftest's "#, usec" /
#     "#, cycles" lists before the separator, the column header and the row again.
#   --send_with_imm: every receive checked for the immediate data; refused on one side only.
#   --recv_post_list: receives posted again in lists; the header's "Recv Post List" line.
# Where the guest's perftest (6.06) lacks an option, ours runs alone and the log says so.
# timeout: 300
# slow: 18 tool pairs (12 of ours, 6 of perftest's), 64 KiB x 100, 4 KiB x 200 or 2 B x 100, 1-5 s each under TCG; 38 s
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"
# shellcheck source=tests/guest/perftest-lib.sh
. "$VL_TESTS/perftest-lib.sh"

require_bin ib_write_bw
require_bin ib_send_bw

# block FILE TITLE: the rows under TITLE ("Local" or "Remote").
block() {
    awk -v t="$2 results:" 'index($0, t) { on = 1; next }
         on && /results:/ { exit }
         on && /^ [0-9]+ / { print }' "$1"
}

# check_both WHAT: the two sides' Local/Remote rows mirror each other.
check_both() {
    for f in "$SERVER_OUT" "$CLIENT_OUT"; do
        if [ -z "$(block "$f" Local)" ] || [ -z "$(block "$f" Remote)" ]; then
            fail "$1: no Local or Remote results in $f"
        fi
    done
    if [ "$(block "$SERVER_OUT" Local)" != "$(block "$CLIENT_OUT" Remote)" ] \
        || [ "$(block "$SERVER_OUT" Remote)" != "$(block "$CLIENT_OUT" Local)" ]; then
        fail "$1: the server's Local row is not the client's Remote row (or the other way)"
    fi
    echo "$1: server Local = client Remote: $(block "$SERVER_OUT" Local)"
}

# sent DEV: the device's sent packets so far.
sent() { hw_counter "$1" sent_pkts; }

# direction WHAT: the server's device sent the data (at least 4 times the client's packets,
# which are acks: rxe acks a message, not each of its 16 packets).
direction() {
    s=$(($(sent "$VL_DEV0") - S0)) c=$(($(sent "$VL_DEV1") - C0))
    if [ "$s" -lt 1600 ] || [ "$s" -le $((4 * c)) ]; then
        fail "$1: the server's device sent $s packets, the client's $c: the server did not send the data"
    fi
    echo "$1: the server's device sent $s packets, the client's $c"
}

step "--report-both with -b: ours, then perftest's"
vl_pair_ok vl_write_bw "-b --report-both -s 4096 -n 200 --validate"
check_both "vl_write_bw -b --report-both"
# The sum row is Local + Remote (each rounded to two decimals, so within 0.02).
rows "$CLIENT_OUT" | awk 'NR == 1 { sum = $4 } /./ { last[NR] = $4 } END {
    n = NR; if (n < 3) exit 1; d = last[n - 1] + last[n] - sum; if (d < -0.02 || d > 0.02) exit 1 }' \
    || { rows "$CLIENT_OUT"; fail "vl_write_bw --report-both: Local + Remote is not the sum"; }
cp "$CLIENT_OUT" "$TMPDIR/vl-both.out"
ib_pair ib_write_bw "-b --report-both -s 4096 -n 200"
check_both "ib_write_bw -b --report-both"
same_shape "-b --report-both" "$TMPDIR/vl-both.out" "$CLIENT_OUT"

step "--reversed: the server writes, the client's memory holds the server's messages"
S0=$(sent "$VL_DEV0") C0=$(sent "$VL_DEV1")
vl_pair_ok vl_write_bw "--reversed -s 65536 -n 100 --validate"
direction "vl_write_bw --reversed"
expect_row "$SERVER_OUT" "vl_write_bw --reversed server"
[ "$(rows "$SERVER_OUT")" = "$(rows "$CLIENT_OUT")" ] \
    || fail "vl_write_bw --reversed: the client does not print the server's row"
if [ -z "$(header_value "$SERVER_OUT" "TX depth")" ] || [ -n "$(header_value "$CLIENT_OUT" "TX depth")" ]; then
    fail "vl_write_bw --reversed: TX depth belongs in the sending server's header only"
fi
cp "$SERVER_OUT" "$TMPDIR/vl-rev-s.out"
cp "$CLIENT_OUT" "$TMPDIR/vl-rev-c.out"
S0=$(sent "$VL_DEV0") C0=$(sent "$VL_DEV1")
ib_pair ib_write_bw "--reversed -s 65536 -n 100"
direction "ib_write_bw --reversed"
same_shape "write --reversed, server" "$TMPDIR/vl-rev-s.out" "$SERVER_OUT"
same_shape "write --reversed, client" "$TMPDIR/vl-rev-c.out" "$CLIENT_OUT"

step "--reversed with Send: the client receives and checks every message"
S0=$(sent "$VL_DEV0") C0=$(sent "$VL_DEV1")
vl_pair_ok vl_send_bw "--reversed -s 65536 -n 100 --validate"
direction "vl_send_bw --reversed"
expect_row "$CLIENT_OUT" "vl_send_bw --reversed client (receiver)"
[ -n "$(header_value "$CLIENT_OUT" "RX depth")" ] \
    || fail "vl_send_bw --reversed: the receiving client's header has no RX depth"
cp "$CLIENT_OUT" "$TMPDIR/vl-srev-c.out"
ib_pair ib_send_bw "--reversed -s 65536 -n 100"
same_shape "send --reversed, client" "$TMPDIR/vl-srev-c.out" "$CLIENT_OUT"

step "--reversed with RDMA Read and atomics: the server reads the client's memory"
vl_pair_ok vl_read_bw "--reversed -s 4096 -n 200 --validate"
expect_row "$SERVER_OUT" "vl_read_bw --reversed server"
[ "$(rows "$SERVER_OUT")" = "$(rows "$CLIENT_OUT")" ] \
    || fail "vl_read_bw --reversed: the client does not print the server's row"
vl_pair_ok vl_atomic_bw "--reversed -n 200"
expect_row "$SERVER_OUT" "vl_atomic_bw --reversed server"

step "--reversed on one side only is refused by name (perftest marks it SYMMETRIC)"
vl_pair vl_write_bw "-s 4096 -n 50" "" "--reversed" && fail "a one-sided --reversed ran"
expect_contains "$SERVER_OUT" "--reversed"

# samples FILE: the values of the sample lists ("N, VALUE"), one a line.
samples() { awk -F', ' '/^[0-9]+, / { print $2 }' "$1"; }

# row_col FILE N: column N of the last result row.
row_col() { rows "$1" | awk -v n="$2" '{ v = $n } END { print v }'; }

step "-H: every sample sorted before the row; ours, then perftest's"
vl_pair_ok vl_write_lat "-H -s 2 -n 100 --validate"
n=$(samples "$CLIENT_OUT" | wc -l)
[ "$n" -eq 100 ] || fail "vl_write_lat -H -n 100: the client listed $n samples, not 100"
samples "$CLIENT_OUT" | sort -g -c || fail "vl_write_lat -H: the samples are not sorted"
# The row's t_min and t_max are the first and last samples (two decimals against %g's six
# significant digits).
close_to() { awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.006 + b * 1e-5) }'; }
if ! close_to "$(samples "$CLIENT_OUT" | head -n 1)" "$(row_col "$CLIENT_OUT" 3)" \
    || ! close_to "$(samples "$CLIENT_OUT" | tail -n 1)" "$(row_col "$CLIENT_OUT" 4)"; then
    fail "vl_write_lat -H: t_min/t_max are not the smallest/largest sample"
fi
expect_contains "$CLIENT_OUT" "#, usec"
cp "$CLIENT_OUT" "$TMPDIR/vl-h.out"
ib_pair ib_write_lat "-H -s 2 -n 100"
same_shape "write_lat -H, client" "$TMPDIR/vl-h.out" "$CLIENT_OUT"
echo "perftest listed $(samples "$CLIENT_OUT" | wc -l) samples for -n 100 (it leaves out the two largest)"

step "-U -C: every sample as taken, in CPU cycles; ours, then perftest's"
vl_pair_ok vl_send_lat "-U -C -s 2 -n 100 --validate"
expect_contains "$CLIENT_OUT" "#, cycles"
n=$(samples "$CLIENT_OUT" | wc -l)
[ "$n" -eq 100 ] || fail "vl_send_lat -U -n 100: the client listed $n samples, not 100"
# Cycles: the MHz in /proc/cpuinfo times the microseconds; a round trip here is tens of
# microseconds or more, so every sample is over 1000 cycles, and t_min is the smallest.
mhz=$(awk -F': *' '/^cpu MHz/ { print $2; exit }' /proc/cpuinfo)
min=$(samples "$CLIENT_OUT" | sort -g | head -n 1)
num_gt "$min" 1000 || fail "vl_send_lat -C: the smallest sample is $min cycles"
close_to "$min" "$(row_col "$CLIENT_OUT" 3)" \
    || fail "vl_send_lat -C: t_min $(row_col "$CLIENT_OUT" 3) is not the smallest sample $min"
echo "vl_send_lat -C: smallest sample $min cycles at $mhz MHz"
cp "$CLIENT_OUT" "$TMPDIR/vl-uc.out"
ib_pair ib_send_lat "-U -C -s 2 -n 100"
expect_contains "$CLIENT_OUT" "#, cycles"
same_shape "send_lat -U -C, client" "$TMPDIR/vl-uc.out" "$CLIENT_OUT"

step "--send_with_imm: every receive carries the immediate data (checked by ours)"
vl_pair_ok vl_send_bw "--send_with_imm -s 4096 -n 200 --validate"
expect_contains "$CLIENT_OUT" "Send_imm BW Test"
expect_row "$SERVER_OUT" "vl_send_bw --send_with_imm server (receiver)"
cp "$CLIENT_OUT" "$TMPDIR/vl-imm-bw.out"
vl_pair_ok vl_send_lat "--send_with_imm -s 2 -n 100 --validate"
expect_contains "$CLIENT_OUT" "Send_imm Latency Test"
expect_row "$SERVER_OUT" "vl_send_lat --send_with_imm server"
if ib_send_bw --help 2>&1 | grep -q -e '--send_with_imm'; then
    ib_pair ib_send_bw "--send_with_imm -s 4096 -n 200"
    expect_contains "$CLIENT_OUT" "Send_imm BW Test"
    same_shape "send_bw --send_with_imm, client" "$TMPDIR/vl-imm-bw.out" "$CLIENT_OUT"
else
    echo "note: this perftest ($(ib_send_bw --version 2>&1 | head -n 1)) has no --send_with_imm; ours ran alone"
fi
vl_pair vl_send_bw "-s 4096 -n 50" "--send_with_imm" && fail "a one-sided --send_with_imm ran"
expect_contains "$SERVER_OUT" "--send_with_imm"

step "--recv_post_list: consumed receives posted again in lists (the warm-up's 16 leave 4 for the end-of-phase list)"
vl_pair_ok vl_send_bw "--recv_post_list 12 -r 32 -s 4096 -n 204 --validate"
[ "$(header_value "$SERVER_OUT" "Recv Post List")" = 12 ] || fail "vl_send_bw: no 'Recv Post List : 12' in the header"
expect_row "$SERVER_OUT" "vl_send_bw --recv_post_list 12 server (receiver)"
cp "$SERVER_OUT" "$TMPDIR/vl-rpl.out"
if ib_send_bw --help 2>&1 | grep -q -e '--recv_post_list'; then
    ib_pair ib_send_bw "--recv_post_list 12 -r 32 -s 4096 -n 204"
    [ "$(header_value "$SERVER_OUT" "Recv Post List")" = 12 ] || fail "ib_send_bw: no 'Recv Post List : 12' in the header"
    same_shape "send_bw --recv_post_list, server" "$TMPDIR/vl-rpl.out" "$SERVER_OUT"
else
    echo "note: this perftest has no --recv_post_list; ours ran alone"
fi
