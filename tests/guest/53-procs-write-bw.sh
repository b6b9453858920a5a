#!/bin/sh
# vl_write_bw --procs N: N worker processes per side, each on its own core with its own QP and
# TCP port, started together over POSIX message queues. The client prints a '#procI' row per
# process, a '#sum' row (their plain sum, checked numerically) and THE result row (what a
# perftest parser reads): the aggregate over one interval, never above the sum. The processes'
# cores must differ, and JSON and CSV hold the processes, the sum and the aggregate. The
# server, which only served, reports the client workers' rows and their aggregate in every format.
# --procs 1 runs through the worker path; a mismatch of N is refused by the parameter check;
# the latency tools refuse --procs; a bad -d fails before any worker and any "Waiting" banner.
# No queue is left in /dev/mqueue.
# timeout: 300
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"
# shellcheck source=tests/guest/perftest-lib.sh
. "$VL_TESTS/perftest-lib.sh"

require_bin vl_write_bw
require_bin vl_jsoncheck
mqueue_ready

# proc_rows FILE: the '#procN' rows of a report.
proc_rows() { grep '^#proc[0-9]' "$1" || true; }
# proc_numbers FILE: the numbers of those rows (without the CPU and pid, which are each side's).
proc_numbers() { proc_rows "$1" | awk '{ print $1, $2, $3, $4, $5, $6 }'; }

# check_sum FILE N: N '#proc' rows whose BW average and MsgRate add up to the '#sum' row's,
# and a result row (the aggregate over one interval) that is positive and not above the sum.
check_sum() {
    _n=$(proc_rows "$1" | wc -l)
    [ "$_n" -eq "$2" ] || fail "$1: $_n '#proc' rows, expected $2"
    _total=$(rows "$1")
    [ "$(echo "$_total" | wc -l)" -eq 1 ] || fail "$1: expected exactly one result row: $_total"
    _sum=$(grep '^#sum' "$1") || fail "$1: no '#sum' row"
    proc_rows "$1" | awk -v avg="$(echo "$_sum" | awk '{ print $5 }')" \
        -v rate="$(echo "$_sum" | awk '{ print $6 }')" \
        -v agg="$(echo "$_total" | awk '{ print $4 }')" '
        { s += $5; r += $6 }
        END {
            printf "sum of the processes: BW average %.2f (#sum row %s), MsgRate %.6f (#sum row %s); aggregate %s\n", s, avg, r, rate, agg
            d = s - avg; if (d < 0) d = -d
            e = r - rate; if (e < 0) e = -e
            if (!(agg + 0 > 0) || d > 0.01 * NR + 0.001 || e > 0.000001 * NR + 1e-9) exit 1
            if (agg + 0 > avg + 0.01) exit 1
        }' || fail "$1: the processes do not add up to the #sum row, or the aggregate exceeds it"
}

step "vl_write_bw --procs 2: a row per process, and their sum"
vl_pair_ok vl_write_bw "-s 65536 -n 300 --procs 2 --wait 60" \
    "--json $TMPDIR/p2.json --csv $TMPDIR/p2.csv" "--json $TMPDIR/s2.json --csv $TMPDIR/s2.csv"
next_port # the pair used two ports
check_sum "$CLIENT_OUT" 2
expect_row "$CLIENT_OUT" "the aggregate, as the result row"
# #iterations counts the messages of both processes (2 x -n 300), as -q 2 counts both QPs'.
[ "$(rows "$CLIENT_OUT" | awk '{ print $2 }')" = 600 ] \
    || fail "the result row's #iterations is not 600 (2 processes x -n 300): $(rows "$CLIENT_OUT")"
[ "$(grep '^#sum' "$CLIENT_OUT" | awk '{ print $3 }')" = 600 ] \
    || fail "the #sum row's #iterations is not 600: $(grep '^#sum' "$CLIENT_OUT")"
cpus=$(proc_rows "$CLIENT_OUT" | awk '{ for (i = 1; i < NF; i++) if ($i == "cpu") print $(i + 1) }' | sort -u)
echo "client processes on CPUs: $cpus"
[ "$(echo "$cpus" | wc -l)" -eq 2 ] || fail "the two client processes share a CPU: $cpus"
echo "$cpus" | grep -qv -- '-' || fail "a client process was not pinned: $cpus"
expect_contains "$CLIENT_OUT" "Processes       : 2"
expect_contains "$CLIENT_OUT" "CPU pinned      : process 1: "
expect_contains "$SERVER_OUT" "Processes       : 2"
expect_contains "$CLIENT_OUT" "Number of qps   : 2"

step "the JSON document holds the processes (with their intervals) and the aggregate"
vl_jsoncheck "$TMPDIR/p2.json" --sizes 65536
grep -q '"processes": \[' "$TMPDIR/p2.json" || fail "no processes array in the JSON"
grep -q '"aggregate": \[' "$TMPDIR/p2.json" || fail "no aggregate array in the JSON"
[ "$(grep -c '"process": ' "$TMPDIR/p2.json")" -eq 2 ] || fail "the JSON does not list 2 processes"
[ "$(grep -c '"start_ns"' "$TMPDIR/p2.json")" -eq 3 ] \
    || fail "the JSON does not hold 3 intervals (2 processes + their union)"
[ "$(grep -c '"bw_avg_mib_s"' "$TMPDIR/p2.json")" -eq 4 ] \
    || fail "the JSON does not hold 4 rows (2 processes, the totals, the aggregate)"
cp "$TMPDIR/p2.json" "$VL_PT_OUT/procs2.json"

step "the CSV: process 0, 1, sum and all"
cat "$TMPDIR/p2.csv"
[ "$(cut -d, -f1 "$TMPDIR/p2.csv" | tr '\n' ' ')" = "process 0 1 sum all " ] \
    || fail "unexpected process column in the CSV"
awk -F, '$1 ~ /^[0-9]+$/ { s += $5 } $1 == "sum" { t = $5 } $1 == "all" { a = $5 }
    END { d = s - t; if (d < 0) d = -d; printf "CSV: processes %.3f, sum %.3f, all %.3f\n", s, t, a
          exit !(t > 0 && d < 0.01 && a > 0 && a <= t + 0.01) }' \
    "$TMPDIR/p2.csv" || fail "the CSV's processes do not add up to 'sum', or 'all' exceeds it"

step "the server (it only served) reports the client's processes, as without --procs"
check_sum "$SERVER_OUT" 2
expect_row "$SERVER_OUT" "the server's aggregate"
# The '#proc' rows are the client workers' rows, echoed: the same numbers (not the same CPUs).
[ "$(proc_numbers "$SERVER_OUT")" = "$(proc_numbers "$CLIENT_OUT")" ] \
    || fail "the server's '#proc' rows are not the client's: $(proc_rows "$SERVER_OUT")"
vl_jsoncheck "$TMPDIR/s2.json" --sizes 65536
[ "$(grep -c '"bw_avg_mib_s"' "$TMPDIR/s2.json")" -eq 4 ] \
    || fail "the server's JSON does not hold 4 rows (2 processes, the totals, the aggregate)"
[ "$(cut -d, -f1 "$TMPDIR/s2.csv" | tr '\n' ' ')" = "process 0 1 sum all " ] \
    || fail "unexpected process column in the server's CSV: $(cat "$TMPDIR/s2.csv")"

step "--procs 1: the worker path, one process"
vl_pair_ok vl_write_bw "-s 65536 -n 300 --procs 1 --wait 60"
check_sum "$CLIENT_OUT" 1

step "--procs 2 on the server, none on the client: refused by the parameter check"
vl_pair vl_write_bw "-s 4096 -n 100 --wait 20" "" "--procs 2" || true
next_port
[ "$CLIENT_RC" != 0 ] || fail "the client exited 0"
[ "$SERVER_RC" != 0 ] || fail "the server exited 0"
expect_contains "$CLIENT_OUT" "number of processes (--procs): client 1, server 2"
expect_contains "$SERVER_OUT" "worker 0 (pid "

step "the latency tools refuse --procs"
rc=0
vl_write_lat -d "$VL_DEV0" --procs 2 >"$TMPDIR/lat.out" 2>&1 || rc=$?
cat "$TMPDIR/lat.out"
[ "$rc" = 2 ] || fail "vl_write_lat --procs 2 exited $rc, expected 2"
expect_contains "$TMPDIR/lat.out" "--procs 2: vl_write_lat measures latency"

step "a --procs server with a bad -d fails as a single one (exit 2), before any worker and without the banner"
rc=0
vl_write_bw -d nosuch --procs 2 >"$TMPDIR/nodev.out" 2>&1 || rc=$?
cat "$TMPDIR/nodev.out"
[ "$rc" = 2 ] || fail "vl_write_bw -d nosuch --procs 2 exited $rc, expected 2"
expect_contains "$TMPDIR/nodev.out" "RDMA device 'nosuch' not found"
expect_not_contains "$TMPDIR/nodev.out" "Waiting for client"
expect_not_contains "$TMPDIR/nodev.out" "worker"

step "no queue left"
left=$(ls /dev/mqueue)
[ -z "$left" ] || fail "queues left in /dev/mqueue: $left"
echo "/dev/mqueue is empty"
