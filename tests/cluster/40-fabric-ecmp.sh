#!/bin/sh
# The leaf-spine fabric at work, read from the switches' own counters:
# - one QP is one flow: it keeps one path, so one spine carries (nearly) all of a single-QP
#   write across the leaves;
# - many QPs are many flows: RoCE v2's UDP source port differs per QP and the leaves' L4 ECMP hash
#   spreads them, so both spines carry a share of a 16-QP write;
# - a slow cable (tc netem rate on the leaf's port toward node3) slows what goes to node3 and
#   not what goes to node2; a lossy one (5 %) still delivers every byte (RC retransmits).
# cluster: nodes=4 topology=leaf-spine
# timeout: 600
# slow: five two-host runs through three emulated routers
set -eu
# shellcheck source=tests/cluster/lib.sh
. "$VL_TESTS/lib.sh"
trap 'restore_cluster' EXIT

# bw_to NODE OPTIONS [U]: vl_write_bw from node1 to NODE with the retransmission timeout
# 4.096 us x 2^U (20, about 4.3 s, by default); prints the average MiB/s.
bw_to() {
    remote_bg "$1" "exec vl_write_bw -d rxe0 -u ${3:-20} $2" "$TMPDIR/srv.out"
    srv=$BG_PID
    rc=0
    run_timeout "$(scaled 150)" vl_write_bw -d rxe0 -u "${3:-20}" --wait 60 $2 "$1" >"$TMPDIR/cli.out" 2>&1 || rc=$?
    _vl_watch "$srv" "$(scaled 30)" || true
    [ "$rc" = 0 ] || { cat "$TMPDIR/cli.out" "$TMPDIR/srv.out" >&2; fail "vl_write_bw $2 to $1 exited $rc"; }
    awk '$1 ~ /^[0-9]+$/ && NF >= 5 { v = $4 } END { print v }' "$TMPDIR/cli.out"
}

# spread OPTIONS: the share of the spines' packets that spine1 carried during a write to node4.
spread() {
    before=$(spine_packets)
    bw=$(bw_to "node$VL_NODES" "$1")
    after=$(spine_packets)
    echo "$before $after" | awk -v bw="$bw" '{ a = $3 - $1; b = $4 - $2
        printf "spine1 %d packets, spine2 %d packets (%.0f%% on spine1), %s MiB/s\n", a, b, 100 * a / (a + b), bw }' >&2
    echo "$before $after" | awk '{ a = $3 - $1; b = $4 - $2; printf "%.3f\n", a / (a + b) }'
}

step "one QP across the leaves: one flow, one spine"
share=$(spread "-s 65536 -n 300 -q 1")
awk -v s="$share" 'BEGIN { exit !(s >= 0.95 || s <= 0.05) }' \
    || fail "a single QP's packets were split over both spines (spine1's share $share)"

step "sixteen QPs across the leaves: sixteen flows, both spines"
share=$(spread "-s 65536 -n 64 -q 16")
awk -v s="$share" 'BEGIN { exit !(s >= 0.1 && s <= 0.9) }' \
    || fail "sixteen QPs all took one spine (spine1's share $share): no ECMP spreading"

step "a slow cable toward node3 (netem rate 20mbit): writes to node3 slow down, to node2 not"
fabric netem node3 rate 20mbit
fast=$(bw_to node2 "-s 65536 -n 200")
slow=$(bw_to node3 "-s 65536 -n 200")
echo "to node2 $fast MiB/s, to node3 (20 Mbit/s cable) $slow MiB/s"
awk -v f="$fast" -v s="$slow" 'BEGIN { exit !(s < 2.6 && s < f) }' \
    || fail "the 20 Mbit/s cable (2.4 MiB/s) did not bound writes to node3 ($slow MiB/s; node2 $fast)"

step "a lossy cable toward node3 (netem loss 5%): every byte still arrives (--validate)"
# A lost packet the responder cannot NAK (the NAK itself lost, or a retransmission lost again)
# waits for the requester's retransmission timeout. At -u 20 (4.3 s) those waits made this step
# take 150 s of TCG time, near its bound; -u 15 (134 ms) keeps each wait short while a late ACK on
# a busy host costs only a spurious retransmission. It prints the time it took.
fabric netem node3 loss 5%
t0=$(_vl_now)
bw=$(bw_to node3 "-s 65536 -n 100 --validate" 15)
echo "5 % loss: $bw MiB/s, $(( ($(_vl_now) - t0) / 100 )) s with -u 15"
fabric netem node3 clear
