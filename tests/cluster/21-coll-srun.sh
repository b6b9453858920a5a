#!/bin/sh
# Slurm starts the collectives across the hosts: `srun -N 4 -n 8`, as the README shows it, with
# slurmctld on node1, slurmd on every node and munge authenticating them; the ranks' numbers come
# from SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID. Each of the five collectives on 4 nodes x 2
# ranks, every element checked; then the README's own line without -N (Slurm spreads 8 tasks
# over the 4 nodes' 2 CPUs each), and sbatch's way: a batch script whose srun inherits the job.
# cluster: nodes=4 topology=leaf-spine
# timeout: 900
# slow: seven jobs of eight ranks on four emulated hosts of one vCPU each, every element checked
set -eu
# shellcheck source=tests/cluster/lib.sh
. "$VL_TESTS/lib.sh"
# shellcheck source=tests/cluster/coll.sh
. "$VL_TESTS/coll.sh"
trap reap_nodes EXIT

port=29600
for c in $COLLS; do
    step "srun -N 4 -n 8 vl_${c}_perf $COLL_ARGS"
    port=$((port + 1))
    rc=0
    run_timeout "$(scaled 150)" srun -N 4 -n 8 "vl_${c}_perf" $COLL_ARGS --master "node1:$port" \
        >"$TMPDIR/$c.out" 2>&1 || rc=$?
    cat "$TMPDIR/$c.out"
    [ "$rc" = 0 ] || fail "srun vl_${c}_perf exited $rc"
    expect_contains "$TMPDIR/$c.out" "from Slurm (SLURM_PROCID"
    check_world "$TMPDIR/$c.out" "vl_${c}_perf under srun" 8 2
done

step "the README's line: srun -n 8 vl_all_reduce_perf --ib-dev rxe0 --master node1:29700 ..."
rc=0
run_timeout "$(scaled 150)" srun -n 8 vl_all_reduce_perf --ib-dev rxe0 --master node1:29700 \
    -b 8 -e 64K -f 8 -n 2 -w 1 >"$TMPDIR/readme.out" 2>&1 || rc=$?
cat "$TMPDIR/readme.out"
[ "$rc" = 0 ] || fail "srun -n 8 exited $rc"
check_world "$TMPDIR/readme.out" "srun -n 8" 8 2

step "sbatch: a batch job whose srun inherits the allocation (-N 4 --ntasks-per-node 2)"
cat >"$TMPDIR/job.sh" <<JOB
#!/bin/sh
srun vl_all_reduce_perf $COLL_ARGS --master node1:29701
JOB
jobid=$(sbatch --parsable -N 4 --ntasks-per-node 2 -o "$TMPDIR/batch.out" "$TMPDIR/job.sh")
echo "job $jobid"
wait_for 200 - sh -c "squeue -h -j $jobid 2>/dev/null | grep -q . && exit 1; exit 0" \
    || fail "batch job $jobid still queued or running after $(scaled 200) s"
cat "$TMPDIR/batch.out"
check_world "$TMPDIR/batch.out" "sbatch" 8 2
