#!/bin/sh
# The verbs-lab demo, run inside the SoftRoCE guest by `scripts/softroce-vm demo`: the devices,
# the lessons that are built (server on rxe0, client on rxe1), and a write-bandwidth benchmark.
# Runs every section even when one fails; exits non-zero if any failed.
set -u
[ "${VL_GUEST:-}" = 1 ] || { echo "demo-guest.sh runs inside the guest: use scripts/softroce-vm demo" >&2; exit 2; }
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"

ok_list=
failed_list=
section() { printf '\n======== %s ========\n' "$*"; }
# record NAME STATUS
record() {
    if [ "$2" -eq 0 ]; then
        ok_list="$ok_list $1"
    else
        failed_list="$failed_list $1"
        echo ">>> $1 FAILED (exit $2)"
    fi
}
built() { [ -x "$VL_REPO/target/release/$1" ]; }

# single NAME ARGS...: one process.
single() {
    name=$1
    section "$*"
    if ! built "$name"; then
        echo "$name is not built (target/release/$name)"
        record "$name" 1
        return
    fi
    rc=0
    "$@" || rc=$?
    record "$name" "$rc"
}

# pair NAME PORT [ARGS...]: NAME -d rxe0 as the server, NAME -d rxe1 ... 192.168.77.1 as the client.
pair() {
    name=$1 port=$2
    shift 2
    section "$name: server on $VL_DEV0, client on $VL_DEV1"
    rc=0
    server_client "$port" "$name -d $VL_DEV0 -p $port $*" "$name -d $VL_DEV1 -p $port $* $VL_ADDR0" || rc=$?
    record "$name" "$rc"
}

single vl_devinfo
single lesson01_devices
if built lesson02_resources; then single lesson02_resources -d "$VL_DEV0"; fi
port=18530
for lesson in lesson03_connect lesson04_send_recv lesson05_rdma_write lesson06_rdma_read; do
    port=$((port + 1))
    if built "$lesson"; then pair "$lesson" "$port"; else echo "($lesson is not built yet: skipped)"; fi
done

# -u 20: a ~4 s ack timeout; perftest's default (~67 ms) is too short under TCG emulation.
bw_args="-u 20 -s 65536 -n 1000"
if built vl_write_bw; then
    pair vl_write_bw 18600 "$bw_args"
else
    section "ib_write_bw (perftest): server on $VL_DEV0, client on $VL_DEV1"
    echo "vl_write_bw is not built yet: showing perftest's ib_write_bw instead"
    rc=0
    server_client 18600 "ib_write_bw -d $VL_DEV0 -x 1 $bw_args -p 18600" \
        "ib_write_bw -d $VL_DEV1 -x 1 $bw_args -p 18600 $VL_ADDR0" || rc=$?
    record ib_write_bw "$rc"
fi

section "summary"
echo "ok:${ok_list:- none}"
if [ -n "$failed_list" ]; then
    echo "failed:$failed_list"
    exit 1
fi
echo "demo complete"
