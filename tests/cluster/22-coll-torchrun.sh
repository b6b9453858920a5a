#!/bin/sh
# torchrun's way and DeepSpeed's across the hosts, and ranks that no launcher numbers locally:
# - one launcher per node, `--np 2 --nnodes 4 --node-rank K --master node1:PORT` (torchrun's
#   --nproc-per-node/--nnodes/--node-rank): ranks 2K and 2K+1 on node K+1, one world of 8;
# - eight ranks started by hand with DeepSpeed's variables (RANK, LOCAL_RANK, WORLD_SIZE,
#   MASTER_ADDR, MASTER_PORT, CROSS_RANK, CROSS_SIZE, LOCAL_SIZE): the header says DeepSpeed;
# - eight ranks with only RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, ranks 0 and 4 on node1, 1 and 5
#   on node2, ...: no local rank given, so each rank learns it from the hash of its host name at
#   the rendezvous (as NCCL does) — the two ranks of a host get local ranks 0 and 1, not both 0.
# Every element checked each time.
# cluster: nodes=4 topology=leaf-spine
# timeout: 600
# slow: three worlds of eight ranks on four emulated hosts of one vCPU each
set -eu
# shellcheck source=tests/cluster/lib.sh
. "$VL_TESTS/lib.sh"
# shellcheck source=tests/cluster/coll.sh
. "$VL_TESTS/coll.sh"
trap reap_nodes EXIT

# wait_all WHAT: every background launch (PIDS) exits 0 within its bound.
wait_all() {
    for p in $PIDS; do
        rc=0
        _vl_watch "$p" "$(scaled 200)" || rc=$?
        [ "$rc" = 0 ] || { cat "$TMPDIR"/*.out; fail "$1: a launch exited $rc"; }
    done
}

step "torchrun's way: one launcher per node, --np 2 --nnodes 4 --node-rank 0..3 --master node1:29901"
PIDS=''
for k in 0 1 2 3; do
    remote_bg "node$((k + 1))" "exec vl_all_reduce_perf $COLL_ARGS --np 2 --nnodes 4 --node-rank $k --master node1:29901" "$TMPDIR/n$k.out"
    PIDS="$PIDS $BG_PID"
done
wait_all "--nnodes"
cat "$TMPDIR/n0.out"
expect_contains "$TMPDIR/n0.out" "--nnodes 4 x --np 2"
check_world "$TMPDIR/n0.out" "--nnodes 4 --np 2" 8 2
rm -f "$TMPDIR"/*.out

step "DeepSpeed's variables: RANK LOCAL_RANK WORLD_SIZE MASTER_* CROSS_RANK CROSS_SIZE LOCAL_SIZE"
PIDS=''
for r in 0 1 2 3 4 5 6 7; do
    env="RANK=$r LOCAL_RANK=$((r % 2)) WORLD_SIZE=8 MASTER_ADDR=node1 MASTER_PORT=29902"
    env="$env CROSS_RANK=$((r / 2)) CROSS_SIZE=4 LOCAL_SIZE=2"
    remote_bg "node$((r / 2 + 1))" "$env exec vl_all_reduce_perf $COLL_ARGS" "$TMPDIR/r$r.out"
    PIDS="$PIDS $BG_PID"
done
wait_all "DeepSpeed's variables"
cat "$TMPDIR/r0.out"
expect_contains "$TMPDIR/r0.out" "DeepSpeed"
check_world "$TMPDIR/r0.out" "DeepSpeed's variables" 8 2
rm -f "$TMPDIR"/*.out

step "no local rank from any launcher: RANK/WORLD_SIZE/MASTER_* only, ranks r and r+4 on node r+1"
PIDS=''
for r in 0 1 2 3 4 5 6 7; do
    remote_bg "node$((r % 4 + 1))" "RANK=$r WORLD_SIZE=8 MASTER_ADDR=node1 MASTER_PORT=29903 exec vl_all_reduce_perf $COLL_ARGS" "$TMPDIR/r$r.out"
    PIDS="$PIDS $BG_PID"
done
wait_all "ranks without a local rank"
cat "$TMPDIR/r0.out"
expect_contains "$TMPDIR/r0.out" "local ranks counted from the host names"
check_world "$TMPDIR/r0.out" "local ranks from host names" 8 2
