#!/bin/sh
# Open MPI's mpirun starts the collectives across the hosts as on a cluster: a hostfile of four
# nodes with two slots each, orted started on every node over ssh (Dropbear, keys made at boot),
# the ranks' numbers from OMPI_COMM_WORLD_*; each of the five collectives on 4 nodes x 2 ranks,
# every element checked, the rank table naming each host with local ranks 0 and 1; all-reduce
# once more by recursive doubling (--algo rd, 8 B to 256 KiB, partners on other hosts; 17 s).
# Then Open MPI's own MPI_Allreduce (tests/guest/mpi/coll_timer.c) on the same nodes over UCX's
# verbs transports: Open MPI across the fabric too, where docs/benchmarks.md compares the two.
# cluster: nodes=4 topology=leaf-spine
# timeout: 900
# slow: seven jobs of eight ranks on four emulated hosts of one vCPU each, every element checked
set -eu
# shellcheck source=tests/cluster/lib.sh
. "$VL_TESTS/lib.sh"
# shellcheck source=tests/cluster/coll.sh
. "$VL_TESTS/coll.sh"
trap reap_nodes EXIT

nodes | sed 's/$/ slots=2/' >"$TMPDIR/hostfile"
cat "$TMPDIR/hostfile"
# The launcher's own traffic on the management network; the ranks' data goes over rxe0.
MPIRUN="mpirun --allow-run-as-root --hostfile $TMPDIR/hostfile -np 8 --mca oob_tcp_if_include mgmt0 --mca btl_tcp_if_include mgmt0"

port=29500
for c in $COLLS; do
    step "mpirun -np 8 (4 nodes x 2) vl_${c}_perf $COLL_ARGS"
    port=$((port + 1))
    rc=0
    run_timeout "$(scaled 150)" $MPIRUN "vl_${c}_perf" $COLL_ARGS --master "node1:$port" \
        >"$TMPDIR/$c.out" 2>&1 || rc=$?
    cat "$TMPDIR/$c.out"
    [ "$rc" = 0 ] || fail "mpirun vl_${c}_perf exited $rc"
    expect_contains "$TMPDIR/$c.out" "from Open MPI (OMPI_COMM_WORLD_*)"
    check_world "$TMPDIR/$c.out" "vl_${c}_perf under mpirun" 8 2
done

step "mpirun -np 8 (4 nodes x 2) vl_all_reduce_perf --algo rd -b 8 -e 1M -f 32 (8 B .. 256 KiB)"
port=$((port + 1))
rc=0
run_timeout "$(scaled 150)" $MPIRUN vl_all_reduce_perf --ib-dev rxe0 --algo rd -b 8 -e 1M -f 32 -n 2 -w 1 \
    -c 1 -T 60 --bootstrap-timeout 120 --master "node1:$port" >"$TMPDIR/rd.out" 2>&1 || rc=$?
cat "$TMPDIR/rd.out"
[ "$rc" = 0 ] || fail "mpirun vl_all_reduce_perf --algo rd exited $rc"
grep -q "nranks 8 .* algo: rd$" "$TMPDIR/rd.out" || fail "--algo rd: the header does not say algo: rd"
check_world "$TMPDIR/rd.out" "vl_all_reduce_perf --algo rd under mpirun" 8 2

step "Open MPI's MPI_Allreduce on the same 4 x 2 ranks, UCX on its verbs transports over rxe0"
rc=0
run_timeout "$(scaled 200)" $MPIRUN --mca pml ucx -x UCX_TLS=rc_verbs,ud_verbs,self \
    -x UCX_UD_ETH_DGID_CHECK=n -x UCX_NET_DEVICES=rxe0:1 \
    /usr/local/bin/vl_mpi_coll_timer -b 8 -e 64K -f 8 -n 2 -w 1 -c 1 >"$TMPDIR/mpi.out" 2>&1 || rc=$?
cat "$TMPDIR/mpi.out"
[ "$rc" = 0 ] || fail "mpirun vl_mpi_coll_timer exited $rc"
expect_contains "$TMPDIR/mpi.out" "# Out of bounds values : 0 OK"
