#!/bin/sh
# Channels on the leaf-spine fabric, read from the spines' own byte counters: an all-reduce of
# two ranks across the leaves (rank 0 on node1 behind leaf1, rank 1 on node3 behind leaf2),
# 1 MiB, every element checked, run with 1, 4 and 8 channels (QPs per ring neighbour).
# - 1 channel: in each direction one QP carries the data, one flow that keeps one path, so one
#   spine carries (nearly) all of that direction's bytes (the other sees only the reverse QP's
#   acknowledgements and credits): asserted >= 90 % per direction.
# - 4 and 8 channels: per direction 4 (8) QPs, each its own UDP source port, which the leaves'
#   L4 ECMP hash spreads. Asserted: with 4, both spines carry >= 10 % of the cross-leaf bytes;
#   with 8, both >= 15 %. The hash is the kernel's on each QP's source port, which rxe derives
#   from the QP number: a draw per run, not a property of the build. And the draws of a
#   channel's two directions are not independent: the kernel's flow hash is symmetric (it
#   orders addresses and ports), so when both hosts numbered their QPs alike (a fresh boot)
#   both directions of a channel take the same spine (measured: 75/25, 75/25, 50/50 in both
#   directions in three draws of one boot). So 4 channels are 4 coin flips, not 8: all on one
#   spine once in 8 draws; 8 channels miss the 15 % floor in 9 of 128. A miss is therefore
#   drawn again, with new QPs (new numbers, new ports), up to 8 draws: a build whose channels
#   are one flow misses every draw; a correct one misses 8 in a row once in 16 million runs
#   (CI saw a single draw miss, 2026-12-05).
# Prints each spine's bytes per direction. One boot (2026-12-05, host load 12): 1 channel put
# 100.0 % of each direction on spine1; 4 channels 50.0/50.0 %; 8 channels 37.5/62.5 %.
# Took 25 s (TCG, five machines on 2 cores under a load of 12).
# cluster: nodes=4 topology=leaf-spine
# timeout: 300
# slow: three two-host all-reduces of 1 MiB through three emulated routers
set -eu
# shellcheck source=tests/cluster/lib.sh
. "$VL_TESTS/lib.sh"
trap reap_nodes EXIT

# spine_bytes: bytes the spines sent so far, "S1->leaf2 S2->leaf2 S1->leaf1 S2->leaf1" (the
# first two: traffic from leaf1 to leaf2; the last two: from leaf2 to leaf1).
spine_bytes() {
    fabric counters spine1:leaf2 spine2:leaf2 spine1:leaf1 spine2:leaf1 \
        | awk 'NR > 1 { printf "%s ", $6 } END { print "" }'
}

# allreduce K PORT: vl_all_reduce_perf --channels K, rank 0 here (node1), rank 1 on node3;
# sets DELTA to the spines' byte counts meanwhile, "A B C D" (as spine_bytes).
allreduce() {
    args="--ib-dev rxe0 --algo ring --channels $1 -b 1M -e 1M -n 3 -w 1 -c 1 -T 60 --bootstrap-timeout 120"
    before=$(spine_bytes)
    remote_bg node3 "exec vl_all_reduce_perf $args --rank 1 --world-size 2 --master node1:$2" "$TMPDIR/r1-$1.out"
    peer=$BG_PID
    rc=0
    # shellcheck disable=SC2086 # $args is flags and their values
    run_timeout "$(scaled 150)" vl_all_reduce_perf $args --rank 0 --world-size 2 --master "node1:$2" \
        >"$TMPDIR/r0-$1.out" 2>&1 || rc=$?
    prc=0
    _vl_watch "$peer" "$(scaled 30)" || prc=$?
    after=$(spine_bytes)
    cat "$TMPDIR/r0-$1.out"
    [ "$rc" = 0 ] || { cat "$TMPDIR/r1-$1.out"; fail "--channels $1: rank 0 exited $rc"; }
    [ "$prc" = 0 ] || { cat "$TMPDIR/r1-$1.out"; fail "--channels $1: rank 1 (node3) exited $prc"; }
    expect_contains "$TMPDIR/r0-$1.out" "# Out of bounds values : 0 OK"
    expect_contains "$TMPDIR/r0-$1.out" "channels: $1 (QPs per ring neighbour, from --channels"
    DELTA=$(echo "$before $after" | awk '{ print $5 - $1, $6 - $2, $7 - $3, $8 - $4 }')
}

# report K A B C D: the numbers, per direction and over both.
report() {
    echo "$2 $3 $4 $5" | awk -v k="$1" '{ t = $1 + $2 + $3 + $4
        printf "%d channel(s): leaf1->leaf2 spine1 %d B, spine2 %d B; leaf2->leaf1 spine1 %d B, spine2 %d B; spine1 %.1f %%, spine2 %.1f %% of %d cross-leaf bytes\n",
            k, $1, $2, $3, $4, 100 * ($1 + $3) / t, 100 * ($2 + $4) / t, t }'
}

step "1 channel: each direction's data is one flow on one spine"
allreduce 1 29521
# shellcheck disable=SC2086 # four numbers
set -- $DELTA
report 1 "$@"
echo "$@" | awk '{ if ($1 + $2 < 1048576 || $3 + $4 < 1048576) exit 1 }' \
    || fail "less than 1 MiB crossed the spines each way: is the all-reduce on the fabric?"
echo "$@" | awk '{ m = ($1 > $2 ? $1 : $2) / ($1 + $2); r = ($3 > $4 ? $3 : $4) / ($3 + $4)
    printf "one spine carried %.1f %% of leaf1->leaf2, %.1f %% of leaf2->leaf1\n", 100 * m, 100 * r
    exit !(m >= 0.9 && r >= 0.9) }' \
    || fail "one channel's bytes were split over both spines in a direction"

for k in 4 8; do
    floor=10
    [ "$k" = 8 ] && floor=15
    step "$k channels: $((2 * k)) flows across the leaves, both spines >= $floor %"
    draw=1
    while :; do
        allreduce "$k" $((29530 + 10 * draw + k))
        # shellcheck disable=SC2086 # four numbers
        set -- $DELTA
        report "$k" "$@"
        echo "$@" | awk -v f="$floor" '{ t = $1 + $2 + $3 + $4; exit !(100 * ($1 + $3) / t >= f && 100 * ($2 + $4) / t >= f) }' \
            && break
        [ "$draw" -lt 8 ] \
            || fail "$k channels: a spine carried less than $floor % of the cross-leaf bytes in 8 draws of new QPs (ECMP did not spread the channels' QPs: are they one flow?)"
        echo "draw $draw: the hash left a spine under $floor %, as it does now and then for a correct build; drawing again with new QPs"
        draw=$((draw + 1))
    done
done
