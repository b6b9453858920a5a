#!/bin/sh
# Lesson 16 on 4 nodes x 2 ranks, started by each launcher the README shows: srun, mpirun with a
# hostfile, torchrun's variables (one agent per node), DeepSpeed's (a hostfile read into
# node_rank, master_addr and master_port), and ranks placed round-robin with no local rank given
# (exercise 1); mpirun's run has --gradient-mib 4096 (exercise 2). Each time: the ranks' local
# ranks from the host-name hashes, the unique id broadcast by rank 0, the ring's table, and every
# element of the all-reduce checked on every rank. The outputs land in .vm-out/lessons-cluster/
# for the READMEs.
# cluster: nodes=4 topology=leaf-spine
# timeout: 600
# slow: five worlds of eight ranks on four emulated hosts, about 45 s
set -eu
# shellcheck source=tests/cluster/lib.sh
. "$VL_TESTS/lib.sh"
trap reap_nodes EXIT
port=29810

keep=$VL_REPO/.vm-out/lessons-cluster
mkdir -p "$keep"

# check_l16 FILE WHAT LAUNCHER: rank 0's narration of a good run under LAUNCHER.
check_l16() {
    cat "$1"
    expect_contains "$1" "all-reduce over 8 ranks on 4 hosts: every element of every rank is right"
    expect_contains "$1" "from $3"
    expect_contains "$1" "wrong elements per rank: [0, 0, 0, 0, 0, 0, 0, 0]"
    expect_contains "$1" "the sum on every rank: [2800, 2808, 2816, 2824]"
    expect_contains "$1" "unique id: node1:"
    grep -q 'differs: the hash' "$1" && fail "$2: a launcher's local rank differs from the hash's"
    return 0
}

step "srun -N 4 -n 8 lesson16_many_hosts -d rxe0 --master node1:$port"
rc=0
# TMPDIR is the scenario's, on node1 only: the other nodes' slurmstepd could not create it.
run_timeout "$(scaled 150)" env TMPDIR=/tmp srun -N 4 -n 8 lesson16_many_hosts -d rxe0 --master "node1:$port" \
    >"$keep/l16-srun.out" 2>&1 || rc=$?
check_l16 "$keep/l16-srun.out" srun "Slurm (SLURM_PROCID/SLURM_NTASKS)"
[ "$rc" = 0 ] || fail "srun exited $rc"
expect_contains "$keep/l16-srun.out" "the ring has 8 hops, 4 of them between hosts: each host's ranks are neighbours"
expect_contains "$keep/l16-srun.out" "SLURM_PROCID=5 SLURM_NTASKS=8 SLURM_LOCALID=1 SLURM_NODEID=2"

step "mpirun --hostfile (node1..4 slots=2) -np 8 -x MASTER_ADDR=node1 -x MASTER_PORT=$((port + 1))"
nodes | sed 's/$/ slots=2/' >"$TMPDIR/hostfile"
rc=0
run_timeout "$(scaled 150)" mpirun --allow-run-as-root --hostfile "$TMPDIR/hostfile" -np 8 \
    --mca oob_tcp_if_include mgmt0 --mca btl_tcp_if_include mgmt0 \
    -x MASTER_ADDR=node1 -x MASTER_PORT=$((port + 1)) lesson16_many_hosts -d rxe0 --gradient-mib 4096 \
    >"$keep/l16-mpirun.out" 2>&1 || rc=$?
check_l16 "$keep/l16-mpirun.out" mpirun "Open MPI (OMPI_COMM_WORLD_*)"
[ "$rc" = 0 ] || fail "mpirun exited $rc"
expect_contains "$keep/l16-mpirun.out" "OMPI_COMM_WORLD_RANK=5 OMPI_COMM_WORLD_SIZE=8 OMPI_COMM_WORLD_LOCAL_RANK=1"

port=$((port + 1))
for way in torchrun deepspeed roundrobin; do
    port=$((port + 1))
    step "sh lessons/16-many-hosts/by-hand.sh $way $port"
    rc=0
    run_timeout "$(scaled 150)" sh lessons/16-many-hosts/by-hand.sh "$way" "$port" >"$keep/l16-$way.out" 2>&1 || rc=$?
    [ "$rc" = 0 ] || { cat /tmp/lesson16.rank*.out; fail "by-hand.sh $way exited $rc"; }
done
check_l16 "$keep/l16-torchrun.out" torchrun "torchrun (RANK/WORLD_SIZE)"
expect_contains "$keep/l16-torchrun.out" "LOCAL_WORLD_SIZE=2 GROUP_RANK=2"
check_l16 "$keep/l16-deepspeed.out" deepspeed "DeepSpeed (RANK/WORLD_SIZE, CROSS_RANK/CROSS_SIZE/LOCAL_SIZE)"
expect_contains "$keep/l16-deepspeed.out" "CROSS_RANK=2 CROSS_SIZE=4 LOCAL_SIZE=2"
# Exercise 1: rank r on node (r mod 4)+1, no local rank given: the hashes give them.
check_l16 "$keep/l16-roundrobin.out" "round-robin" "torchrun (RANK/WORLD_SIZE)"
expect_contains "$keep/l16-roundrobin.out" "the ring has 8 hops, 8 of them between hosts: the ranks of a host are not numbered together"
grep -E '^ +5  node2 .* 1 +2  none given' "$keep/l16-roundrobin.out" \
    || fail "rank 5 (node2, with rank 1) is not local rank 1 of 2"

# Exercise 2 is mpirun's run above, with --gradient-mib 4096.
expect_contains "$keep/l16-mpirun.out" "one parameter server: its link takes in 8 gradients and sends out 8 models: 8·S = 32.00 GiB each way (1374 ms at 25 GB/s)"
expect_contains "$keep/l16-mpirun.out" "ring all-reduce: each link 2·(n−1)/n·S = 7.00 GiB (301 ms)"
expect_contains "$keep/l16-mpirun.out" "n²/(2(n−1)) = 4.6× the ring's"
