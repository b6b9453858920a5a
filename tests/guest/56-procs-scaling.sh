#!/bin/sh
# How the aggregate (total bytes over the union of the processes' intervals, the result row)
# scales from 1 to 2 processes, beside the plain sum of the per-process averages (the '#sum'
# row; informational: under TCG the numbers move with the
# host's load, so nothing is asserted beyond every run working): vl_write_bw --procs 1, --procs 2
# and, for comparison, two ib_write_bw pairs at once on ports P and P+1 pinned with taskset to
# cores 0 and 1, their BW averages summed. Same parameters, alternating order, several rounds.
# The numbers go to .vm-out/perftest/procs-scaling.txt. In the suite one round proves that every
# run works; the measurement of docs/benchmarks.md is this scenario with more rounds
# (`scripts/softroce-vm run -- 'mkdir -p /tmp/s; TMPDIR=/tmp/s VL_PROCS_ROUNDS=5 sh
# tests/guest/56-procs-scaling.sh'`): speed is measured by benchmarks, and a test's time must
# not grow with how many rounds a statistic wants.
# timeout: 600
# slow: a warm-up and a round of --procs 1 and --procs 2 pairs, each measuring for seconds; 56 s idle
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"
# shellcheck source=tests/guest/perftest-lib.sh
. "$VL_TESTS/perftest-lib.sh"

ROUNDS=${VL_PROCS_ROUNDS:-1}
PARAMS="-x 1 -u 20 -F -s 65536 -n 1000 -Q 1 -I 0"
res=$VL_PT_OUT/procs-scaling.txt
: >"$res"

# one_vl N: vl_write_bw --procs N; sets V to the result row's BW average. (Not run in a
# command substitution: next_port must advance in this shell.)
one_vl() {
    next_port
    server_client "$PORT" \
        "vl_write_bw -d $VL_DEV0 -p $PORT $PARAMS --procs $1 --wait 60" \
        "vl_write_bw -d $VL_DEV1 -p $PORT $PARAMS --procs $1 --wait 60 $VL_ADDR0" \
        >"$TMPDIR/one.log" 2>&1 || { cat "$TMPDIR/one.log"; fail "vl_write_bw --procs $1 failed"; }
    next_port
    V=$(rows "$CLIENT_OUT" | awk 'NR == 1 { print $4 }')
}

# shellcheck disable=SC2086 # PARAMS is a list of options, split on purpose
# one_ib: two ib_write_bw pairs at once (ports P, P+1; cores 0, 1); sets V to the summed BW
# average and V0, V1 to each pair's.
one_ib() {
    next_port
    p0=$PORT
    next_port
    p1=$PORT
    taskset -c 0 ib_write_bw -d "$VL_DEV0" -p "$p0" $PARAMS >"$TMPDIR/s0" 2>&1 &
    s0=$!
    taskset -c 1 ib_write_bw -d "$VL_DEV0" -p "$p1" $PARAMS >"$TMPDIR/s1" 2>&1 &
    s1=$!
    wait_port "$p0" 60 "$s0"
    wait_port "$p1" 60 "$s1"
    taskset -c 0 ib_write_bw -d "$VL_DEV1" -p "$p0" $PARAMS "$VL_ADDR0" >"$TMPDIR/c0" 2>&1 &
    c0=$!
    taskset -c 1 ib_write_bw -d "$VL_DEV1" -p "$p1" $PARAMS "$VL_ADDR0" >"$TMPDIR/c1" 2>&1 &
    c1=$!
    for pid in $c0 $c1 $s0 $s1; do
        _vl_watch "$pid" 120 || { cat "$TMPDIR/s0" "$TMPDIR/s1" "$TMPDIR/c0" "$TMPDIR/c1"; fail "an ib_write_bw of the pair failed"; }
    done
    V0=$(perftest_bw_avg "$TMPDIR/c0")
    V1=$(perftest_bw_avg "$TMPDIR/c1")
    V=$(awk -v a="$V0" -v b="$V1" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2f\n", a + b; else print "broken" }')
    [ "$V" != broken ] || cat "$TMPDIR/s0" "$TMPDIR/s1" "$TMPDIR/c0" "$TMPDIR/c1"
}

have_ib=yes
command -v ib_write_bw >/dev/null 2>&1 || have_ib=
command -v taskset >/dev/null 2>&1 || have_ib=

step "warm-up (not counted)"
one_vl 2

r=1
while [ "$r" -le "$ROUNDS" ]; do
    step "round $r"
    if [ $((r % 2)) -eq 1 ]; then order="1 2 ib"; else order="ib 2 1"; fi
    for what in $order; do
        case $what in
            ib)
                [ -n "$have_ib" ] || continue
                one_ib
                name="ib_write_bw x2"
                echo "round $r: ib_write_bw pairs: $V0 + $V1 MB/s"
                ;;
            *)
                one_vl "$what"
                name="vl_write_bw --procs $what"
                proc_rows=$(grep '^#proc' "$CLIENT_OUT" | awk '{ printf "%s%s", (NR > 1 ? " + " : ""), $5 }')
                echo "round $r: $name processes: $proc_rows"
                S=$(grep '^#sum' "$CLIENT_OUT" | awk 'NR == 1 { print $5 }')
                echo "round $r: $name: sum of the processes' averages $S MiB/s; $(grep '^#sum' "$CLIENT_OUT" | sed 's/.*; all ran/all ran/')"
                [ "$what" = 1 ] || printf '%s\t%s\t%s\n' "$r" "$name (sum)" "$S" >>"$res"
                ;;
        esac
        echo "round $r: $name: $V MiB/s"
        printf '%s\t%s\t%s\n' "$r" "$name" "$V" >>"$res"
    done
    r=$((r + 1))
done

step "summary (MiB/s, BW average of the result row; medians over $ROUNDS rounds)"
for name in "vl_write_bw --procs 1" "vl_write_bw --procs 2" "vl_write_bw --procs 2 (sum)" "ib_write_bw x2"; do
    awk -F'\t' -v n="$name" '$2 == n && $3 != "broken" { print $3 }' "$res" | sort -n \
        | awk -v n="$name" '{ v[NR] = $1 } END {
            if (NR == 0) exit
            m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
            printf "%-24s median %.2f  min %.2f  max %.2f  (%d runs)\n", n, m, v[1], v[NR], NR }'
done | tee -a "$res"
awk -F'\t' '$2 == "vl_write_bw --procs 1" { a[$1] = $3 } $2 == "vl_write_bw --procs 2" { b[$1] = $3 }
    END { for (r in a) if (r in b && a[r] > 0) printf "round %s: procs2/procs1 = %.2f\n", r, b[r] / a[r] }' "$res" \
    | sort | tee -a "$res"
