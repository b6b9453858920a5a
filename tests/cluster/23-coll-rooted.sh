#!/bin/sh
# All-to-all and the rooted collectives across the hosts (issue 40): 4 nodes x 2 ranks, every
# element checked, under Open MPI's mpirun (all-to-all, reduce) and Slurm's srun (all-to-all,
# gather, scatter), the rank table naming each host with local ranks 0 and 1. Then a rank killed
# mid-all-to-all (SIGKILL to rank 5's process on node3): every survivor ends non-zero within its
# bound, naming rank 5. Took 87 s (cluster already booted, 2-core host shared with builds).
# cluster: nodes=4 topology=leaf-spine
# timeout: 600
# slow: five jobs of eight ranks on four emulated hosts, and a world of eight cut by a kill
set -eu
# shellcheck source=tests/cluster/lib.sh
. "$VL_TESTS/lib.sh"
# shellcheck source=tests/cluster/coll.sh
. "$VL_TESTS/coll.sh"
trap reap_nodes EXIT

nodes | sed 's/$/ slots=2/' >"$TMPDIR/hostfile"
MPIRUN="mpirun --allow-run-as-root --hostfile $TMPDIR/hostfile -np 8 --mca oob_tcp_if_include mgmt0 --mca btl_tcp_if_include mgmt0"

port=29900
for job in "mpirun alltoall" "mpirun reduce -r 3" "srun alltoall" "srun gather -r 5" "srun scatter -r 6"; do
    # shellcheck disable=SC2086 # a launcher, a collective and its flags
    set -- $job
    how=$1 c=$2
    shift 2
    port=$((port + 1))
    step "$how (4 nodes x 2) vl_${c}_perf $* $COLL_ARGS"
    case $how in
        mpirun) launch=$MPIRUN from="from Open MPI (OMPI_COMM_WORLD_*)" ;;
        *) launch='srun -N 4 -n 8' from="from Slurm (SLURM_PROCID" ;;
    esac
    rc=0
    # shellcheck disable=SC2086 # the launcher's command line and the flags
    run_timeout "$(scaled 150)" $launch "vl_${c}_perf" $COLL_ARGS "$@" --master "node1:$port" \
        >"$TMPDIR/$c.out" 2>&1 || rc=$?
    cat "$TMPDIR/$c.out"
    [ "$rc" = 0 ] || fail "$how vl_${c}_perf exited $rc"
    expect_contains "$TMPDIR/$c.out" "$from"
    check_world "$TMPDIR/$c.out" "vl_${c}_perf under $how" 8 2
done

step "a rank killed mid-all-to-all: rank 5 (node3) gets SIGKILL"
T=20
for r in 0 1 2 3 4 5 6 7; do
    remote_bg "node$((r / 2 + 1))" "exec vl_alltoall_perf --ib-dev rxe0 -b 1M -e 1M -n 100000 -w 1 -c 1 -T $T --bootstrap-timeout 120 --rank $r --world-size 8 --master node1:29950" "$TMPDIR/r$r.out"
    eval "PID$r=\$BG_PID"
done
# shellcheck disable=SC2153 # PID0 is set by the eval above
wait_for 150 "$PID0" grep -q '^#  Rank  7' "$TMPDIR/r0.out" \
    || { cat "$TMPDIR/r0.out"; fail "the world of 8 did not form"; }
sleep 3
# Rank 5's pid on node3, from rank 0's rank table.
pid5=$(awk '$2 == "Rank" && $3 == "5" { print $5 }' "$TMPDIR/r0.out")
[ -n "$pid5" ] || fail "no pid for rank 5 in rank 0's table"
on node3 "kill -KILL $pid5" || fail "could not kill rank 5 (pid $pid5 on node3)"
expect_survivors_fail "rank 5 killed" 'rank 5 \(host node3' 0 1 2 3 4 6 7
no_leftovers node1 node2 node3 node4
