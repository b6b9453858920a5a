#!/bin/sh
# Re-captures the "Real output" of the lesson READMEs from exactly the commands they show, in the
# SoftRoCE guest:  scripts/softroce-vm run --no-build -- 'sh lessons/tools/capture.sh [NAME...]'
# Each pair runs a server (no host argument, the default port 18515) and then its client;
# NAME.server and NAME.client (or NAME.out) land in .vm-out/capture/; without NAMEs all run.
set -eu
out=${VL_REPO:-.}/.vm-out/capture
mkdir -p "$out"
# shellcheck source=tests/guest/lib.sh
. "${VL_REPO:-.}/tests/guest/lib.sh"

# pair NAME 'SERVER COMMAND' 'CLIENT COMMAND': run both, the server first, and keep both outputs.
pair() {
    echo "== $1: $2  |  $3"
    sh -c "$2" >"$out/$1.server" 2>&1 &
    spid=$!
    port=$(echo "$2" | sed -n 's/.*-p \([0-9]*\).*/\1/p')
    wait_port "${port:-18515}" 60 "$spid" || true
    sh -c "$3" >"$out/$1.client" 2>&1 || echo "   (client exit $?)"
    wait "$spid" || echo "   (server exit $?)"
    sleep 1
}
# killed NAME MARK 'SERVER COMMAND' 'CLIENT COMMAND': as pair, but the client is killed with
# SIGKILL once its output shows MARK; the server's output is what the README shows.
killed() {
    echo "== $1: $3  |  $4, client killed after '$2'"
    sh -c "$3" >"$out/$1.server" 2>&1 &
    spid=$!
    wait_port 18515 60 "$spid" || true
    $4 >"$out/$1.client" 2>&1 &
    cpid=$!
    wait_for 120 "$cpid" grep -q -F -e "$2" "$out/$1.client" || true
    sleep 1
    kill -KILL "$cpid" 2>/dev/null || true
    wait "$cpid" 2>/dev/null || true
    wait "$spid" || echo "   (server exit $?)"
}
# cmpair NAME 'SERVER COMMAND' 'CLIENT COMMAND': as pair, for rdma_cm servers (lesson 13, rping),
# which listen on rping's port 7174 and open no TCP socket.
cmpair() {
    echo "== $1: $2  |  $3"
    sh -c "$2" >"$out/$1.server" 2>&1 &
    spid=$!
    wait_cm_port 7174 60 "$spid" || true
    sh -c "$3" >"$out/$1.client" 2>&1 || echo "   (client exit $?)"
    wait "$spid" || echo "   (server exit $?)"
    sleep 1
}
# one NAME 'COMMAND': a program without a peer.
one() {
    echo "== $1: $2"
    sh -c "$2" >"$out/$1.out" 2>&1 || echo "   (exit $?)"
}


run_all() {
    one l01 'lesson01_devices'
    one l14 'lesson14_tuning'
    one l01q 'lesson01_devices --quiet'
    one l01i2 'lesson01_devices -d rxe0 -i 2'
    one l02 'lesson02_resources -d rxe0 --show-errors'
    one l02q 'lesson02_resources -d rxe1 --quiet'
    pair l03 'lesson03_connect -d rxe0' 'lesson03_connect -d rxe1 192.168.77.1'
    pair l03badqpn 'lesson03_connect -d rxe0 --wait 20' 'lesson03_connect -d rxe1 -u 18 --bad-qpn 192.168.77.1'
    pair l04 'lesson04_send_recv -d rxe0' 'lesson04_send_recv -d rxe1 192.168.77.1'
    pair l04rc 'lesson04_send_recv -d rxe0' 'ibv_rc_pingpong -d rxe1 -g 1 192.168.77.1'
    pair l04rcs 'ibv_rc_pingpong -d rxe0 -g 1' 'lesson04_send_recv -d rxe1 192.168.77.1'
    one l04nosrv 'lesson04_send_recv -d rxe1 --wait 3 192.168.77.1'
    pair l04size 'lesson04_send_recv -d rxe0 -s 4096 -n 5 --wait 10' 'lesson04_send_recv -d rxe1 -s 8192 -n 5 --wait 10 192.168.77.1'
    killed l04kill 'first ibv_post_send' 'lesson04_send_recv -d rxe0 -n 1000000 --wait 5' 'lesson04_send_recv -d rxe1 -n 1000000 --wait 5 192.168.77.1'
    pair l04rnr 'lesson04_send_recv -d rxe0 --show-rnr' 'lesson04_send_recv -d rxe1 --show-rnr 192.168.77.1'
    pair l05imm 'lesson05_rdma_write -d rxe0' 'lesson05_rdma_write -d rxe1 -s 4096 -n 3 --notify imm 192.168.77.1'
    pair l05flag 'lesson05_rdma_write -d rxe0' 'lesson05_rdma_write -d rxe1 -s 4096 -n 3 --notify flag 192.168.77.1'
    pair l05noqp 'lesson05_rdma_write -d rxe0 -q --no-write-access=qp --wait 20' 'lesson05_rdma_write -d rxe1 -q -n 2 --wait 20 192.168.77.1'
    pair l05nomr 'lesson05_rdma_write -d rxe0 -q --no-write-access=mr --wait 20' 'lesson05_rdma_write -d rxe1 -q -n 2 --wait 20 192.168.77.1'
    one l05nosrv 'lesson05_rdma_write -d rxe1 -q --wait 3 192.168.77.1'
    killed l07kill '[7] ' 'lesson07_events -d rxe0 -q --wait 5' 'lesson07_events -d rxe1 -n 1000 --wait 5 192.168.77.1'
    pair l06 'lesson06_rdma_read -d rxe0' 'lesson06_rdma_read -d rxe1 -s 4096 -o 4 -n 4 192.168.77.1'
    pair l07 'lesson07_events -d rxe0' 'lesson07_events -d rxe1 -n 500 --show-race 192.168.77.1'
    pair l07think 'lesson07_events -d rxe0 -q' 'lesson07_events -d rxe1 -q -n 200 --think 20000 192.168.77.1'
    one l07six 'for i in 1 2 3 4 5 6; do lesson07_events -d rxe0 -q >/dev/null 2>&1 & sleep 1; echo "== run $i"; lesson07_events -d rxe1 -q -n 500 192.168.77.1; wait; done'
    one l07sweep 'for t in 0 1000 5000 20000 0 1000 5000 20000; do lesson07_events -d rxe0 -q >/dev/null 2>&1 & sleep 1; echo "== --think $t"; lesson07_events -d rxe1 -q -n 200 --think $t 192.168.77.1; wait; done'
    pair l08 'lesson08_atomics -d rxe0 --clients 2 -p 18430' 'lesson08_atomics -d rxe1 -n 100 -p 18430 192.168.77.1 >'"$out"'/l08.client2 2>&1 & lesson08_atomics -d rxe1 -n 100 -p 18430 192.168.77.1; wait'
    pair l08never 'lesson08_atomics -d rxe0 -q --clients 2 --wait 5' 'lesson08_atomics -d rxe1 -q 192.168.77.1'
    pair l08err 'lesson08_atomics -d rxe0' 'lesson08_atomics -d rxe1 --show-errors 192.168.77.1'
    pair l08noacc 'lesson08_atomics -d rxe0 --no-atomic-access' 'lesson08_atomics -d rxe1 -q 192.168.77.1'
    pair l08noqp 'lesson08_atomics -d rxe0 -q --no-atomic-access=qp' 'lesson08_atomics -d rxe1 -q 192.168.77.1'
    pair l11 'lesson11_ud -d rxe0' 'lesson11_ud -d rxe1 192.168.77.1'
    pair l11c 'lesson11_ud -d rxe0 -s 1024' 'ibv_ud_pingpong -d rxe1 -g 1 -s 1024 192.168.77.1'
    pair l11s 'ibv_ud_pingpong -d rxe0 -g 1 -s 1024' 'lesson11_ud -d rxe1 -s 1024 192.168.77.1'
    pair l11udc 'ibv_ud_pingpong -d rxe0 -g 1 -n 5' 'ibv_ud_pingpong -d rxe1 -g 1 -n 5 192.168.77.1'
    pair l11loss 'lesson11_ud -d rxe0 --show-loss' 'lesson11_ud -d rxe1 --show-loss 192.168.77.1'
    pair l12 'lesson12_srq_events -d rxe0' 'lesson12_srq_events -d rxe1 192.168.77.1'
    pair l12c 'lesson12_srq_events -d rxe0 -q' 'ibv_srq_pingpong -d rxe1 -g 1 192.168.77.1'
    pair l12s 'ibv_srq_pingpong -d rxe0 -g 1' 'lesson12_srq_events -d rxe1 -q 192.168.77.1'
    cmpair l13 'lesson13_rdma_cm' 'lesson13_rdma_cm -a 192.168.77.2 192.168.77.1'
    cmpair l13rc 'lesson13_rdma_cm -q -v' 'rping -c -a 192.168.77.1 -C 3 -v -V'
    cmpair l13rs 'rping -s -a 192.168.77.1 -v' 'lesson13_rdma_cm -v -C 3 192.168.77.1'
    cmpair l13depth 'lesson13_rdma_cm' 'lesson13_rdma_cm -C 1 --initiator-depth 4 --responder-resources 2 192.168.77.1'
    cmpair l13size 'lesson13_rdma_cm -q -S 64' 'lesson13_rdma_cm -q -S 128 192.168.77.1'
    cmpair l13rsize 'timeout 30 rping -s -a 192.168.77.1 -S 64' 'lesson13_rdma_cm -q -S 128 -C 1 --wait 10 192.168.77.1'
    one l13nosrv 'lesson13_rdma_cm -q 192.168.77.1'
    one l15 'lesson15_ring_allreduce --np 3 -d rxe0,rxe1'
}
if [ $# -gt 0 ]; then
    # Only the named captures: run_all's lines for them.
    for name in "$@"; do
        eval "$(sed -n "/^    \(pair\|cmpair\|one\|killed\) $name /p" "$0")"
    done
else
    run_all
fi
echo "outputs in $out"
