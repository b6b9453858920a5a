#!/bin/sh
# PID 1 of the verbs-lab SoftRoCE guest (busybox sh), copied into the image as /init by
# scripts/softroce-vm (write_guest_files). Modes (kernel parameter vl.mode): probe, run, test,
# shell. Editing this file changes the image stamp, so the next boot rebuilds the image.
PATH=/usr/sbin:/usr/bin
export PATH
mount -t devtmpfs devtmpfs /dev
exec </dev/console >/dev/console 2>&1
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
hostname softroce

mode='' repo='' job='' cols='' rows='' scale=1
# shellcheck disable=SC2013  # the kernel command line is one line of words
for w in $(cat /proc/cmdline); do
    case $w in
        vl.mode=*) mode=${w#vl.mode=} ;;
        vl.repo=*) repo=${w#vl.repo=} ;;
        vl.job=*) job=${w#vl.job=} ;;
        vl.cols=*) cols=${w#vl.cols=} ;;
        vl.rows=*) rows=${w#vl.rows=} ;;
        vl.scale=*) scale=${w#vl.scale=} ;;
    esac
done
jobdir=
[ -n "$job" ] && jobdir=$repo/$job

say() { echo "[guest] $*"; }
uptime_s() { cut -d' ' -f1 /proc/uptime; }
uptime_cs() { awk '{ printf "%d\n", $1 * 100 }' /proc/uptime; }

finish() {
    if [ -n "$jobdir" ] && [ -d "$jobdir" ]; then
        echo "$1" >"$jobdir/status"
    fi
    sync
    poweroff -f
    sleep 10
}
die() {
    say "ERROR: $*"
    dmesg | tail -n 30 | sed 's/^/[guest]   dmesg: /'
    finish 125
}

if [ "$mode" = probe ]; then
    echo VL_PROBE_OK
    poweroff -f
fi

# "NAME TIMEOUT" per line of $jobdir/list; results to $jobdir/results, logs to $jobdir/NAME.log.
run_suite() {
    : >"$jobdir/results"
    while read -r name limit; do
        [ -n "$name" ] || continue
        file=$VL_TESTS/$name.sh
        log=$jobdir/$name.log
        tmp=/tmp/scenario/$name
        mkdir -p "$tmp"
        rm -f /tmp/timed-out
        t0=$(uptime_cs)
        # setsid: the scenario and everything it starts form one process group, killed below.
        TMPDIR=$tmp VL_SCENARIO=$name setsid sh "$file" >"$log" 2>&1 </dev/null &
        pid=$!
        (
            end=$(( $(uptime_cs) + limit * 100 ))
            while kill -0 "$pid" 2>/dev/null; do
                if [ "$(uptime_cs)" -ge "$end" ]; then
                    : >/tmp/timed-out
                    echo "softroce-vm: scenario timed out after ${limit}s; killing it" >>"$log"
                    kill -TERM -- "-$pid" 2>/dev/null
                    sleep 3
                    kill -KILL -- "-$pid" 2>/dev/null
                    exit 0
                fi
                sleep 0.2
            done
        ) &
        watchdog=$!
        rc=0
        wait "$pid" 2>/dev/null || rc=$?   # 2>/dev/null: no "Terminated" notice from sh
        kill "$watchdog" 2>/dev/null
        wait "$watchdog" 2>/dev/null
        kill -KILL -- "-$pid" 2>/dev/null   # whatever the scenario left running
        secs=$(awk -v a="$t0" -v b="$(uptime_cs)" 'BEGIN { printf "%.1f", (b - a) / 100 }')
        if [ -e /tmp/timed-out ]; then
            verdict=FAIL why="timeout after ${limit}s"
        elif [ "$rc" -eq 0 ]; then
            verdict=PASS why="${secs}s"
        else
            verdict=FAIL why="exit $rc, ${secs}s"
        fi
        printf '%s\t%s\t%s\t%s\n' "$verdict" "$name" "$secs" "$why" >>"$jobdir/results"
        printf '%-4s  %s  (%s)\n' "$verdict" "$name" "$why"
        if [ "$verdict" = FAIL ]; then
            echo "      log: ${log#"$repo"/}"
            tail -n 25 "$log" | sed 's/^/      | /'
        fi
        sync
    done <"$jobdir/list"
}

for m in virtio_pci 9pnet_virtio 9p; do
    modprobe "$m" || die "modprobe $m failed"
done
mkdir -p "$repo" || die "cannot create $repo"
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 host "$repo" \
    || die "cannot mount the host's repository (9p tag 'host') at $repo"
[ -z "$jobdir" ] || [ -d "$jobdir" ] || die "job directory $jobdir missing on the share"

# A guest of the cluster (scripts/softroce-vm cluster): a node or the fabric, set up by a script
# read from the share, so that changing the cluster does not rebuild the image.
case " $(cat /proc/cmdline) " in
    *" vl.role="*)
        [ -r "$repo/scripts/lib/cluster-guest.sh" ] || die "no scripts/lib/cluster-guest.sh in $repo"
        # shellcheck source=scripts/lib/cluster-guest.sh
        . "$repo/scripts/lib/cluster-guest.sh"
        ;;
esac

for m in veth dummy crc32_generic rdma_rxe rdma_ucm ib_uverbs; do
    modprobe "$m" || die "modprobe $m failed"
done
# rdma_rxe needs a crc32 algorithm; crc32_generic is enough, the PCLMUL one is faster.
modprobe crc32-pclmul 2>/dev/null || say "note: crc32-pclmul did not load (no PCLMULQDQ?); using crc32_generic"

IP=/usr/sbin/ip   # iproute2: busybox's ip applet cannot create veth pairs
$IP link set lo up || die "ip link set lo up failed"
$IP link add veth0 type veth peer name veth1 || die "cannot create the veth pair"
for d in veth0 veth1; do
    $IP link set "$d" mtu 9000 || die "cannot set MTU 9000 on $d"   # 9000 -> active MTU 4096
done
$IP addr add 192.168.77.1/24 dev veth0 || die "cannot address veth0"
$IP addr add 192.168.77.2/24 dev veth1 || die "cannot address veth1"
# Both ends live in one namespace (rxe works only in the initial one): accept packets from our
# own addresses and skip reverse-path filtering, or the QP never reaches RTR.
for c in all default veth0 veth1; do
    echo 1 >"/proc/sys/net/ipv4/conf/$c/accept_local"
    echo 0 >"/proc/sys/net/ipv4/conf/$c/rp_filter"
done
for d in veth0 veth1; do
    $IP link set "$d" up || die "cannot bring $d up"
done
rdma link add rxe0 type rxe netdev veth0 || die "rdma link add rxe0 failed"
rdma link add rxe1 type rxe netdev veth1 || die "rdma link add rxe1 failed"

# Wait (bounded) until each port is ACTIVE and GID 1 is its IPv4-mapped RoCEv2 GID.
[ -r "$repo/scripts/lib/rxe.sh" ] || die "no scripts/lib/rxe.sh in $repo (the host's repository)"
# shellcheck source=scripts/lib/rxe.sh
. "$repo/scripts/lib/rxe.sh"
wait_rxe() {
    end=$(( $(uptime_cs) + 6000 ))
    until rxe_ready "$1" "$2"; do
        [ "$(uptime_cs)" -lt "$end" ] \
            || die "$1 not ready after 60 s: state '$RXE_STATE', GID 1 '$RXE_GID' ($RXE_TYPE)"
        sleep 0.1
    done
}
wait_rxe rxe0 192.168.77.1
wait_rxe rxe1 192.168.77.2
say "rxe0 (veth0, 192.168.77.1) and rxe1 (veth1, 192.168.77.2) ACTIVE at $(uptime_s) s after boot"

# shellcheck disable=SC3045  # busybox ash has ulimit -l (RLIMIT_MEMLOCK)
ulimit -l unlimited
# VL_TIME_SCALE: how much slower than on an idle host the scenarios may be (softroce-vm test).
export VL_DEV0=rxe0 VL_DEV1=rxe1 VL_ADDR0=192.168.77.1 VL_ADDR1=192.168.77.2 VL_GUEST=1
export VL_TIME_SCALE="$scale"
export VL_REPO="$repo" VL_TESTS="$repo/tests/guest" HOME=/root
# Our binaries run from the guest's RAM (softroce-vm's stage_bins: stripped copies in
# .vm-out/bin): started from the 9p share, each start page-faults its code over 9p, seconds each
# on a busy host. target/release stays on PATH behind them for anything not staged.
bins=/opt/vl-bin
mkdir -p "$bins"
t0=$(uptime_cs)
# Nothing staged yet (a fresh clone's `softroce-vm shell --no-build`): target/release serves.
staged=$(find "$repo/.vm-out/bin" -maxdepth 1 -type f 2>/dev/null | head -n 1)
if [ -n "$staged" ]; then
    cp -p "$repo/.vm-out/bin/"* "$bins/" || die "cannot copy $repo/.vm-out/bin into the guest's RAM (see cp's error above)"
fi
say "$(find "$bins" -type f | wc -l) binaries copied into the guest's RAM ($bins) in $(( ($(uptime_cs) - t0) / 100 )) s"
export PATH="$bins:$repo/target/release:/usr/sbin:/usr/bin"
cd "$repo" || die "cannot cd to $repo"

case $mode in
    run)
        sh -c "$(cat "$jobdir/cmd")" </dev/null
        finish $?
        ;;
    test)
        run_suite
        finish 0
        ;;
    shell)
        [ -n "$cols" ] && [ -n "$rows" ] && stty cols "$cols" rows "$rows" 2>/dev/null
        export TERM=xterm
        cat <<EOF

  verbs-lab SoftRoCE guest (busybox; $(uname -r))
    rxe0 on veth0  192.168.77.1     \$VL_DEV0 \$VL_ADDR0
    rxe1 on veth1  192.168.77.2     \$VL_DEV1 \$VL_ADDR1
  $repo is the host's repository (shared); our binaries are on PATH (RAM copies of target/release).
  Try:  ibv_devinfo -d rxe0;  rdma link
        ib_write_bw -d rxe0 -x 1 -u 20 &  sleep 1;  ib_write_bw -d rxe1 -x 1 -u 20 192.168.77.1
  'exit' powers the VM off (Ctrl-A X kills it from outside).

EOF
        setsid cttyhack sh -l
        finish 0
        ;;
    *)
        die "unknown vl.mode '$mode'"
        ;;
esac
