#!/bin/sh
# Collectives launched by Open MPI's mpirun, as on a cluster: four ranks of vl_all_reduce_perf
# take their rank, world size and local rank from OMPI_COMM_WORLD_* and meet at --master; every
# element checked, 0 wrong, the rank table names four ranks on rxe0/rxe1 round-robin. Then our
# MPI_Allreduce timer (tests/guest/mpi/coll_timer.c, in the image) on the same four ranks
# and devices with UCX held to its verbs transports: 0 wrong, and the rxe port counters moved at
# least the packets its payload needs — Open MPI went over RDMA, not shared memory.
# Then the timer's four other collectives (-o all_gather, reduce_scatter, alltoall, broadcast),
# every element checked, and a wrong -o refused.
# (scripts/bench-coll-vs-mpi compares the speeds; this scenario only proves both sides work.)
# Took 66-117 s on a busy 2-core host (TCG guest, load average 13-16).
# timeout: 300
# slow: two mpirun jobs of four ranks each, 8 B to 512 KiB with every element checked, under emulation
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"

require_bin vl_all_reduce_perf
command -v mpirun >/dev/null || fail "no mpirun in the guest image (rebuild it: scripts/softroce-vm build)"
timer=/usr/local/bin/vl_mpi_coll_timer
[ -x "$timer" ] || fail "no $timer in the guest image (rebuild it: scripts/softroce-vm build)"
MPI=$VL_TESTS/mpi

# check_rows FILE WHAT: 0 wrong in every row (the out-of-place column, and in-place where the
# tool has one), the footer OK, rows from 8 B to 512 KiB (-f 4 from 8 steps over 1 MiB), four
# ranks round-robin over rxe0/rxe1.
check_rows() {
    expect_contains "$1" "# Out of bounds values : 0 OK"
    expect_contains "$1" "nranks 4"
    rows=$(grep -E '^ +[0-9]+ ' "$1")
    echo "$rows" | awk '{ if ($9 != "0" || (NF > 9 && $13 != "0")) { print "wrong: " $0; bad = 1 } }
        END { exit bad }' || fail "$2: a row has wrong values"
    first=$(echo "$rows" | head -n 1 | awk '{ print $1 }')
    last=$(echo "$rows" | tail -n 1 | awk '{ print $1 }')
    if [ "$first" != 8 ] || [ "$last" != 524288 ]; then
        fail "$2: rows from $first to $last, expected 8 to 524288"
    fi
    devs=$(grep '^#  Rank' "$1" | awk '{ sub(/:1$/, "", $9); print $9 }' | tr '\n' ' ')
    [ "$devs" = "rxe0 rxe1 rxe0 rxe1 " ] || fail "$2: ranks on devices '$devs', expected round-robin rxe0 rxe1"
}

step "mpirun -np 4 vl_all_reduce_perf -b 8 -e 1M -f 4 -c 1 (ranks from OMPI_COMM_WORLD_*)"
rc=0
run_timeout 150 sh "$MPI/mpirun.sh" 4 vl_all_reduce_perf --ib-dev "$VL_DEV0,$VL_DEV1" \
    --master "$VL_ADDR0:29517" -b 8 -e 1M -f 4 -n 1 -w 0 -c 1 --timeout 60 \
    >"$TMPDIR/ours.out" 2>&1 || rc=$?
cat "$TMPDIR/ours.out"
[ "$rc" = 0 ] || fail "mpirun vl_all_reduce_perf exited $rc"
expect_contains "$TMPDIR/ours.out" "from Open MPI (OMPI_COMM_WORLD_*)"
check_rows "$TMPDIR/ours.out" vl_all_reduce_perf

step "mpirun -np 4 vl_mpi_coll_timer -b 8 -e 1M -f 4 -c 1, UCX on rc_verbs/ud_verbs, one rxe per rank"
mtu=$(/usr/bin/rdma link show "$VL_DEV0/1" 2>/dev/null | sed -n 's/.*mtu \([0-9]*\).*/\1/p' | head -n 1)
[ -n "$mtu" ] || mtu=4096
before=$(($(hw_counter "$VL_DEV0" sent_pkts) + $(hw_counter "$VL_DEV1" sent_pkts)))
rc=0
run_timeout 150 sh "$MPI/mpirun.sh" 4 sh "$MPI/one-device.sh" "$VL_DEV0:1,$VL_DEV1:1" \
    "$timer" -b 8 -e 1M -f 4 -n 1 -w 0 -c 1 >"$TMPDIR/mpi.out" 2>&1 || rc=$?
after=$(($(hw_counter "$VL_DEV0" sent_pkts) + $(hw_counter "$VL_DEV1" sent_pkts)))
cat "$TMPDIR/mpi.out"
[ "$rc" = 0 ] || fail "mpirun vl_mpi_coll_timer exited $rc"
check_rows "$TMPDIR/mpi.out" vl_mpi_coll_timer
# At 512 KiB alone: 2 all-reduces (1 timed + 1 checked), each of the 4 ranks sending at least
# 2(n-1)/n = 1.5 x 512 KiB in MTU-sized packets.
need=$((2 * 4 * (3 * 524288 / 2 / mtu)))
echo "rxe0+rxe1 sent $((after - before)) packets; the 512 KiB all-reduces alone need at least $need"
[ $((after - before)) -ge "$need" ] || fail "too few RDMA packets: Open MPI did not run over rxe"

step "the timer's other collectives (-o), every element checked: the references of scripts/bench-coll-vs-mpi"
# nccl-tests' sizes: where each rank has a part, the count is rounded down to a multiple of the
# 4 ranks (8 B is 2 floats: a row of 0 B), and the count column is the part.
for c in all_gather reduce_scatter alltoall broadcast; do
    rc=0
    run_timeout 120 sh "$MPI/mpirun.sh" 4 sh "$MPI/one-device.sh" "$VL_DEV0:1,$VL_DEV1:1" \
        "$timer" -o "$c" -b 8 -e 64K -f 8 -n 1 -w 0 -c 1 >"$TMPDIR/mpi-$c.out" 2>&1 || rc=$?
    grep -E '^ +[0-9]+ ' "$TMPDIR/mpi-$c.out" | sed "s/^/$c: /"
    [ "$rc" = 0 ] || { cat "$TMPDIR/mpi-$c.out"; fail "mpirun vl_mpi_coll_timer -o $c exited $rc"; }
    expect_contains "$TMPDIR/mpi-$c.out" "# Out of bounds values : 0 OK"
    expect_contains "$TMPDIR/mpi-$c.out" "Open MPI $c float, nranks 4"
    rows=$(grep -E '^ +[0-9]+ ' "$TMPDIR/mpi-$c.out")
    echo "$rows" | awk '$9 != "0" { bad = 1 } END { exit bad }' || fail "-o $c: a row has wrong values"
    # 8 B x 8^4: the last row is 32 KiB = 8192 floats, 2048 per rank where each has a part
    case $c in broadcast) want=8192 ;; *) want=2048 ;; esac
    echo "$rows" | tail -n 1 | awk -v w="$want" '$1 == 32768 && $2 == w { ok = 1 } END { exit !ok }' \
        || fail "-o $c: the last row is not 32768 B of $want elements per rank"
done
rc=0
run_timeout 60 sh "$MPI/mpirun.sh" 4 sh "$MPI/one-device.sh" "$VL_DEV0:1,$VL_DEV1:1" \
    "$timer" -o allgather >"$TMPDIR/bad.out" 2>&1 || rc=$?
[ "$rc" != 0 ] || fail "-o allgather (not a collective's name) was accepted"
expect_contains "$TMPDIR/bad.out" "-o takes all_reduce, all_gather, reduce_scatter, alltoall or broadcast"
