#!/bin/sh
# Progress on a terminal: an -a sweep and a collective's size sweep, run with stdout and stderr on
# a pseudo-terminal (script(1)), show the bar counting the sizes, and every result row still
# arrives. Without a terminal the bar stays out (scenario 80 checks that for -a; here for the
# collectives too).
# timeout: 300
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"
# shellcheck source=tests/guest/perftest-lib.sh
. "$VL_TESTS/perftest-lib.sh"

require_bin script
require_bin vl_all_reduce_perf

# plain FILE: FILE without carriage returns and the terminal's escape sequences.
plain() {
    tr -d '\r' <"$1" | tr '\033' '\n' | sed 's/^\[[0-9;]*[A-Za-z]//'
}

# result_rows FILE: the number of result rows (lines whose first field is a size) in FILE.
result_rows() {
    plain "$1" | awk '$1 ~ /^[0-9]+$/ && NF >= 4' | wc -l
}

step "vl_write_bw -a with its output on a terminal: the bar counts 23 sizes; 23 rows arrive"
next_port
server_client "$PORT" \
    "vl_write_bw -d $VL_DEV0 $VL_PT_COMMON -p $PORT -a -n 4 --warmup 1" \
    "script -qec 'vl_write_bw -d $VL_DEV1 $VL_PT_COMMON -p $PORT -a -n 4 --warmup 1 $VL_ADDR0' /dev/null" ||
    fail "the -a sweep on a terminal failed (outputs above)"
grep -q "vl_write_bw: \[.*\] [0-9]*/23 sizes, running [0-9]* B after 1 warm-up" "$CLIENT_OUT" ||
    fail "no progress bar counting 23 sizes (each after its warm-up) on the terminal"
n=$(result_rows "$CLIENT_OUT")
[ "$n" = 23 ] || fail "the terminal got $n result rows of the sweep, expected 23"

step "vl_all_reduce_perf --np 2, 8 B .. 32 KiB by 8, on a terminal: a bar over 5 sizes; 5 rows"
out=$TMPDIR/81-coll-tty.out
rc=0
run_timeout "$(scaled 120)" script -qec \
    "vl_all_reduce_perf --np 2 --ib-dev $VL_DEV0,$VL_DEV1 -b 8 -e 32K -f 8 -n 5 -w 1" /dev/null \
    >"$out" 2>&1 </dev/null || rc=$?
cat "$out"
[ "$rc" = 0 ] || fail "vl_all_reduce_perf on a terminal exited $rc"
grep -q "vl_all_reduce_perf: \[.*\] [0-9]*/5 sizes, running [0-9]* B" "$out" ||
    fail "no progress bar counting 5 sizes on the terminal"
n=$(result_rows "$out")
[ "$n" = 5 ] || fail "the terminal got $n result rows, expected 5"

step "the same sweep into a file: the rows, and no bar"
out=$TMPDIR/81-coll-file.out
rc=0
run_timeout "$(scaled 120)" vl_all_reduce_perf --np 2 --ib-dev "$VL_DEV0,$VL_DEV1" -b 8 -e 32K -f 8 \
    -n 5 -w 1 >"$out" 2>&1 </dev/null || rc=$?
cat "$out"
[ "$rc" = 0 ] || fail "vl_all_reduce_perf into a file exited $rc"
expect_not_contains "$out" "sizes, running"
n=$(result_rows "$out")
[ "$n" = 5 ] || fail "the file got $n result rows, expected 5"
echo "progress shows on a terminal only, and every row arrives either way"
