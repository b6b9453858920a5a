#!/bin/sh
# vl_fabric_check on one switch (flat), node1 and node2, beside lone vl_write_bw runs:
# - no fault: each check ends with exit 0 and no suspect, its --json passing vl_jsoncheck;
# - the check must not measure itself: three rounds, each a lone vl_write_bw node1 -> node2 then
#   a check of the two with the same size and count; the medians of the two kinds and their
#   ratio are printed (docs/fabric-check.md keeps the numbers of a quiet run). Asserted only
#   within a factor of 2 either way, which host load cannot break: emulated runs of one healthy
#   pair scatter by 2x between runs, so a 5 % bound would be a timed assertion.
# Here, not in 50-fabric-check.sh: three machines share the host's cores (two nodes and the
# fabric), not five, so the runs scatter less; and this cluster's boot is shared with 11-p2p-flat.
# Its time: ~40 s on the 2-core machine.
# cluster: nodes=2 topology=flat
# timeout: 300
# slow: six two-host runs under emulation
set -eu
# shellcheck source=tests/cluster/lib.sh
. "$VL_TESTS/lib.sh"
trap reap_nodes EXIT

SIZE=65536
N=200
ARGS="-d rxe0 -u 16 -s $SIZE -n $N --lat-iters 50 --reference median --tolerance 0.5 --lat-factor 10 --wait 10"

# lone I: a lone vl_write_bw node1 -> node2 (-s $SIZE -n $N), port 1891I; prints MiB/s.
lone() {
    remote_bg node2 "exec vl_write_bw -d rxe0 -u 16 -s $SIZE -n $N -p 1891$1" "$TMPDIR/lone$1.srv"
    srv=$BG_PID
    rc=0
    timeout "$(scaled 60)" vl_write_bw -d rxe0 -u 16 -s "$SIZE" -n "$N" -p "1891$1" --wait 30 node2 >"$TMPDIR/lone$1.out" 2>&1 || rc=$?
    _vl_watch "$srv" "$(scaled 30)" || true
    [ "$rc" = 0 ] || { cat "$TMPDIR/lone$1.out" "$TMPDIR/lone$1.srv" >&2; fail "vl_write_bw to node2 exited $rc"; }
    awk '$1 ~ /^[0-9]+$/ && NF >= 5 { v = $4 } END { print v }' "$TMPDIR/lone$1.out"
}

# pair I: a check of node1 (rank 0, here) and node2, master port 2963I, tests from port 18I20;
# it must end with exit 0 and no suspect; prints its node1 -> node2 bandwidth, MiB/s.
pair() {
    remote_bg node2 "exec vl_fabric_check $ARGS --rank 1 --world-size 2 --master node1:2963$1 -p 18${1}20" "$TMPDIR/pair$1.r2.out"
    two=$BG_PID
    rc=0
    # shellcheck disable=SC2086  # ARGS are words
    timeout "$(scaled 120)" vl_fabric_check $ARGS --rank 0 --world-size 2 --master "node1:2963$1" -p "18${1}20" \
        --json "$TMPDIR/pair$1.json" >"$TMPDIR/pair$1.out" 2>&1 || rc=$?
    _vl_watch "$two" "$(scaled 30)" || true
    [ "$rc" = 0 ] || { cat "$TMPDIR/pair$1.out" "$TMPDIR/pair$1.r2.out" >&2; fail "check $1 of node1 and node2 exited $rc, expected 0 (no fault)"; }
    vl_jsoncheck "$TMPDIR/pair$1.json" >&2 || fail "check $1: the --json report does not pass vl_jsoncheck"
    expect_contains "$TMPDIR/pair$1.out" "Suspect hosts: none"
    expect_contains "$TMPDIR/pair$1.out" "Slow pairs: none"
    # The bandwidth matrix's row 0, column 1.
    awk '/^Bandwidth/ { on = 1 } on && $2 == 0 && $3 ~ /^node/ { split($0, f, "|"); print f[4] + 0; exit }' "$TMPDIR/pair$1.out"
}

# median A B C: the middle one of three numbers.
median() {
    awk -v a="$1" -v b="$2" -v c="$3" 'BEGIN { a += 0; b += 0; c += 0
        if ((a - b) * (c - a) >= 0) print a; else if ((b - a) * (c - b) >= 0) print b; else print c }'
}

step "no fault on one switch, three rounds of a lone vl_write_bw then a check, node1 -> node2"
lones='' checks=''
for i in 1 2 3; do
    l=$(lone "$i")
    c=$(pair "$i")
    echo "round $i: lone vl_write_bw $l MiB/s, vl_fabric_check $c MiB/s"
    lones="$lones $l" checks="$checks $c"
done
# shellcheck disable=SC2086  # three numbers
ml=$(median $lones)
# shellcheck disable=SC2086
mc=$(median $checks)
ratio=$(awk -v c="$mc" -v l="$ml" 'BEGIN { printf "%.3f", c / l }')
echo "medians: lone $ml MiB/s, check $mc MiB/s, check/lone $ratio (the goal on a quiet host: 0.95 to 1.05)"
awk -v r="$ratio" 'BEGIN { exit !(r >= 0.5 && r <= 2) }' \
    || fail "the check's median ($mc MiB/s) is not within a factor of 2 of the lone runs' ($ml MiB/s): it measures itself"
