#!/bin/sh
# Side by side with perftest in the same boot: vl_write_bw against ib_write_bw and vl_write_lat
# against ib_write_lat, same sizes and iterations, alternating the order (A B B A) because the
# first run of a pair is faster under TCG. Absolute numbers mean nothing under emulation; the
# ratios of the medians are printed for the record. The checks: ours produces a non-zero row
# every time; perftest's zero rows (it prints 0.00 and exits 0 when its clock calibration fails,
# often here) are reported and left out of its median. The ratio is never a pass/fail check:
# speed is judged by scripts/bench-vs-perftest over many alternating rounds, not by a test (a
# 3x bound failed here under load when one of perftest's two valid latency runs took 7.9 ms and
# became half its median). Both get -F: perftest calibrates a cycle counter
# and, on a busy emulated CPU, refuses to report ("Correlation coefficient r^2 < 0.9") without
# it; for the vl_* tools, which use the monotonic clock, -F is accepted and changes nothing.
# slow: 20 runs (4+4 bandwidth, 6+6 latency pairs of vl_* and ib_*, alternating) for medians
# timeout: 900
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"
# shellcheck source=tests/guest/perftest-lib.sh
. "$VL_TESTS/perftest-lib.sh"

require_bin ib_write_bw
require_bin ib_write_lat

# Server on CPU 0, client on CPU 1, for both tools: two spinning processes left to the scheduler
# sometimes share one vCPU and take turns by its time slice (~4 ms rounds), whichever the tool.
# Ours pin with --cpu; perftest through taskset, as its users do.
if taskset -c 0 true 2>/dev/null; then
    PIN0="taskset -c 0" PIN1="taskset -c 1"
else
    PIN0='' PIN1=''
    echo "note: no taskset here; perftest runs unpinned"
fi

# one TOOL ARGS: runs a pair, prints the metric (BW average, or t_typical for latency), or
# "zero" when perftest printed a zero or non-finite row. Ours must never: that fails the scenario.
# A run takes 5-30 s under TCG on an idle host, but 40-100 s with the host's CPUs contended
# (scripts/test --under-load 2 on a shared 2-CPU machine): 1000 round trips took over 100 s.
# Hence 300 iterations per run, and 240 s before a pair counts as hung.
SC_CLIENT_TIMEOUT=240
one() {
    next_port
    _t0=$(_vl_now)
    _rc=0
    case $1 in
        ib_*) server_client "$PORT" "$PIN0 $1 -d $VL_DEV0 -x 1 -u 20 -p $PORT $2" \
                  "$PIN1 $1 -d $VL_DEV1 -x 1 -u 20 -p $PORT $2 $VL_ADDR0" >"$TMPDIR/pair.log" 2>&1 || _rc=$? ;;
        *) vl_pair "$1" "$2" "--cpu 1" "--cpu 0" >"$TMPDIR/pair.log" 2>&1 || _rc=$? ;;
    esac
    echo "run: $1 $2: exit $_rc (client $CLIENT_RC, server $SERVER_RC) in $(( ($(_vl_now) - _t0) / 100 )) s" >&2
    if [ "$_rc" -ne 0 ]; then
        case $1 in
            ib_*)
                # perftest is the reference, not what is tested: a run of it that fails or hangs
                # (as scenario 90 also sees) is reported and left out of its median.
                tail -n 5 "$CLIENT_OUT" "$SERVER_OUT" >&2
                echo "note: $1 failed (client exit $CLIENT_RC, server exit $SERVER_RC)" >&2
                echo zero
                return
                ;;
        esac
        cat "$TMPDIR/pair.log" >&2
        fail "$1 $2 failed"
    fi
    case $1 in
        *_bw) v=$(perftest_bw_avg "$CLIENT_OUT") ;;
        *) v=$(awk '/#bytes/ { h = 1; next } h && $1 ~ /^[0-9]+$/ { print $5; exit }' "$CLIENT_OUT") ;;
    esac
    if ! echo "$v" | grep -Eq '^[0-9]+(\.[0-9]+)?$' || ! num_gt "$v" 0; then
        case $1 in
            ib_*)
                # The known perftest fault: its cycle-counter calibration fails on a busy
                # emulated CPU and it prints 0.00 (or inf) while exiting 0. Report it, do not
                # average it in.
                echo "note: $1 printed '$v' ($(grep -h "Correlation" "$CLIENT_OUT" | head -n 1))" >&2
                echo zero
                return
                ;;
        esac
        cat "$CLIENT_OUT" >&2
        fail "$1: no or zero row"
    fi
    echo "$v"
}

median() {
    grep -v zero | sort -n | awk '{ a[NR] = $1 } END { if (NR == 0) print "none"; else print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}

compare() { # VL IB ARGS UNIT ORDERS
    : >"$TMPDIR/a" && : >"$TMPDIR/b"
    for order in $5; do
        case $order in
            ab) one "$1" "$3" >>"$TMPDIR/a"; one "$2" "$3" >>"$TMPDIR/b" ;;
            ba) one "$2" "$3" >>"$TMPDIR/b"; one "$1" "$3" >>"$TMPDIR/a" ;;
        esac
    done
    ma=$(median <"$TMPDIR/a")
    mb=$(median <"$TMPDIR/b")
    echo "$1: $(tr '\n' ' ' <"$TMPDIR/a")-> median $ma $4"
    echo "$2: $(tr '\n' ' ' <"$TMPDIR/b")-> median $mb $4"
    if [ "$mb" = none ]; then
        echo "$2 produced no valid row (zero rows, see the notes): nothing to compare"
        return
    fi
    ratio=$(awk -v a="$ma" -v b="$mb" 'BEGIN { printf "%.2f", a / b }')
    echo "RATIO $1 / $2 = $ratio"
    awk -v r="$ratio" 'BEGIN { exit !(r > 0.33 && r < 3) }' ||
        echo "note: off by more than 3x in this boot (a busy host moves single runs; see scripts/bench-vs-perftest)"
}

step "write bandwidth, 64 KiB x 300"
compare vl_write_bw ib_write_bw "-s 65536 -n 300 -F" "MiB/s" "ab ba ab ba"
step "write latency, 2 B x 300 (t_typical)"
compare vl_write_lat ib_write_lat "-s 2 -n 300 -F" "usec" "ab ba ab ba ab ba"
