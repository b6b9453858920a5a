#!/bin/sh
# by-hand.sh — lesson 16's ranks started over ssh with the variables a launcher would set, on the
# cluster's nodes (scripts/softroce-vm cluster; run it on node1). Rank 0's narration goes to
# stdout; every other rank's output to /tmp/lesson16.rankR.out on node1; the exit status is 1
# when any rank failed.
#   torchrun  torchrun's per-node agents: RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE GROUP_RANK
#             MASTER_ADDR MASTER_PORT TORCHELASTIC_RUN_ID, ranks 2K and 2K+1 on node K+1
#   deepspeed DeepSpeed's runner: a hostfile (node1..node4 slots=2) read into node_rank, each
#             node's launch.py setting RANK LOCAL_RANK WORLD_SIZE MASTER_* CROSS_RANK CROSS_SIZE
#             LOCAL_SIZE
#   roundrobin RANK WORLD_SIZE MASTER_* only, rank r on node (r mod 4)+1: no local rank given
# Usage: sh lessons/16-many-hosts/by-hand.sh torchrun|deepspeed|roundrobin PORT [LESSON FLAGS...]
# Exit status: 0 when every rank succeeded, 1 when one failed, 2 for a bad command line.
set -eu
usage() { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; }
case ${1:-} in -h | --help) usage; exit 0 ;; esac
[ $# -ge 2 ] || { usage >&2; exit 2; }
way=$1 port=$2
shift 2
flags="-d rxe0 $*"
pids=''

# start R NODE ENV: rank R on NODE with the variables ENV; rank 0 writes to our stdout.
start() {
    cmd="$3 MASTER_ADDR=node1 MASTER_PORT=$port exec lesson16_many_hosts $flags"
    # shellcheck disable=SC2029  # the variables are expanded here, on purpose
    if [ "$1" = 0 ]; then
        ssh "$2" "$cmd" </dev/null &
    else
        ssh "$2" "$cmd" >"/tmp/lesson16.rank$1.out" 2>&1 </dev/null &
    fi
    pids="$pids $!"
}

case $way in
    torchrun)
        for r in 0 1 2 3 4 5 6 7; do
            start "$r" "node$((r / 2 + 1))" "RANK=$r LOCAL_RANK=$((r % 2)) WORLD_SIZE=8 LOCAL_WORLD_SIZE=2 GROUP_RANK=$((r / 2)) TORCHELASTIC_RUN_ID=lesson16"
        done ;;
    deepspeed)
        # deepspeed --hostfile H: node K of the hostfile (node_rank K) runs launch.py, which
        # starts slots(K) ranks numbered after the slots of the nodes before it.
        printf 'node%s slots=2\n' 1 2 3 4 >/tmp/lesson16.hostfile
        base=0 node_rank=0
        while read -r host slots; do
            n=${slots#slots=}
            for l in $(seq 0 $((n - 1))); do
                start $((base + l)) "$host" "RANK=$((base + l)) LOCAL_RANK=$l WORLD_SIZE=8 CROSS_RANK=$node_rank CROSS_SIZE=4 LOCAL_SIZE=$n"
            done
            base=$((base + n)) node_rank=$((node_rank + 1))
        done </tmp/lesson16.hostfile ;;
    roundrobin)
        for r in 0 1 2 3 4 5 6 7; do
            start "$r" "node$((r % 4 + 1))" "RANK=$r WORLD_SIZE=8"
        done ;;
    *) echo "by-hand.sh: unknown way '$way' (torchrun, deepspeed, roundrobin)" >&2; exit 2 ;;
esac
bad=0
for p in $pids; do wait "$p" || bad=1; done
exit $bad
