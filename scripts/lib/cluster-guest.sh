# shellcheck shell=sh
# shellcheck disable=SC2154  # repo, jobdir, mode, scale, cols, rows, say, die: set by guest-init.sh
# cluster-guest.sh — the part of a cluster guest's /init that makes it a node or the fabric
# (scripts/softroce-vm cluster; docs/cluster.md). Sourced by scripts/lib/guest-init.sh from the
# 9p share after it mounted the repository, when the kernel command line has vl.role=node|fabric;
# it never returns. It uses guest-init's say, die, finish, uptime_s, uptime_cs and $repo, $jobdir.
#
# Kernel parameters (set by scripts/lib/cluster-host.sh):
#   vl.role=node|fabric  vl.node=K  vl.nodes=N  vl.topo=flat|leaf-spine  vl.head=1 (node1 only)
#
# Every guest has two NICs, told apart by MAC (52:54:00:RR:00:KK, RR the role of the link, KK the
# node in hex): the data NIC (RR=01 on a node, the fabric's port toward it RR=02), on which rxe0
# runs, and the management NIC (RR=03 on a node, RR=04 on the fabric), on which ssh, Slurm, the
# launchers' control traffic and the rendezvous run. Addresses:
#   management   nodeK 10.0.0.K/24, fabric 10.0.0.254 (one bridge in the fabric guest)
#   data, flat   nodeK 192.168.80.K/24 (one bridge: the switch)
#   data, leaf-spine  nodes 1..ceil(N/2) on leaf1: 192.168.81.K/24, gateway .254;
#                the others on leaf2: 192.168.82.K/24; leaf L - spine S: 172.16.LS.1 - .2/24

role='' node='' nodes='' topo=flat head=''
# shellcheck disable=SC2013  # the kernel command line is one line of words
for w in $(cat /proc/cmdline); do
    case $w in
        vl.role=*) role=${w#vl.role=} ;;
        vl.node=*) node=${w#vl.node=} ;;
        vl.nodes=*) nodes=${w#vl.nodes=} ;;
        vl.topo=*) topo=${w#vl.topo=} ;;
        vl.head=*) head=${w#vl.head=} ;;
    esac
done
IP=/usr/sbin/ip
ctl=$jobdir/ctl          # requests to the host harness (kill, start, link) and their answers
ready=$jobdir/ready      # one file per guest that is up

# leaf_of K: the leaf a node hangs on in leaf-spine (the first half of the nodes on leaf1).
leaf_of() {
    if [ "$1" -le $(((nodes + 1) / 2)) ]; then echo 1; else echo 2; fi
}
# data_addr K: node K's data address (the GID of its rxe0).
data_addr() {
    if [ "$topo" = flat ]; then echo "192.168.80.$1"; else echo "192.168.8$(leaf_of "$1").$1"; fi
}
hexbyte() { printf '%02x' "$1"; }
# nic_by_mac MAC: the interface that has MAC.
nic_by_mac() {
    for _n in /sys/class/net/*; do
        [ "$(cat "$_n/address" 2>/dev/null)" = "$1" ] && { basename "$_n"; return 0; }
    done
    return 1
}
# rename_nic MAC NAME: give the NIC with MAC its fixed name.
rename_nic() {
    _cur=$(nic_by_mac "$1") || die "no NIC with MAC $1 (the harness gives every guest its NICs by MAC)"
    [ "$_cur" = "$2" ] || $IP link set dev "$_cur" name "$2" || die "cannot rename $_cur to $2"
}

write_hosts() {
    {
        printf '127.0.0.1\tlocalhost\n::1\tlocalhost\n10.0.0.254\tfabric\n'
        _k=1
        while [ "$_k" -le "$nodes" ]; do
            printf '10.0.0.%s\tnode%s\n%s\tnode%s-data\n' "$_k" "$_k" "$(data_addr "$_k")" "$_k"
            _k=$((_k + 1))
        done
    } >/etc/hosts
}

# A remote shell for mpirun and the tests: Dropbear with the key the harness made for this boot,
# started with an unlimited memlock limit that every session inherits (ranks register memory).
start_sshd() {
    mkdir -p /root/.ssh /etc/dropbear
    chmod 700 /root /root/.ssh
    cp "$jobdir/ssh/id_dropbear" /root/.ssh/id_dropbear || die "no ssh key in $jobdir/ssh"
    cp "$jobdir/ssh/id.pub" /root/.ssh/authorized_keys
    cp "$jobdir/ssh/known_hosts" /root/.ssh/known_hosts
    cp "$jobdir/ssh/host_$(hostname)" /etc/dropbear/dropbear_ed25519_host_key || die "no host key for $(hostname)"
    chmod 600 /root/.ssh/id_dropbear /root/.ssh/authorized_keys /etc/dropbear/dropbear_ed25519_host_key
    # dbclient as `ssh`; it checks every host's key against known_hosts, which the harness wrote
    # with the keys it made for this boot; Open MPI's `-x`
    # (no X11 forwarding) is dbclient's default and not an option it knows.
    cat >/usr/bin/ssh <<'EOF'
#!/bin/sh
# ssh for the cluster's guests: Dropbear's client with this boot's key (scripts/lib/cluster-guest.sh)
for a; do
    shift
    case $a in -x | -X | -oBatchMode=yes) ;; *) set -- "$@" "$a" ;; esac
done
exec dbclient -i /root/.ssh/id_dropbear "$@"
EOF
    chmod 755 /usr/bin/ssh
    # shellcheck disable=SC3045  # busybox ash has ulimit -l
    ulimit -l unlimited
    dropbear -r /etc/dropbear/dropbear_ed25519_host_key -s -E -p 22 -P /run/dropbear.pid 2>>/tmp/dropbear.log \
        || die "dropbear did not start: $(tail -n 3 /tmp/dropbear.log)"
}

mgmt_up() {
    rename_nic "$1" mgmt0
    $IP link set mgmt0 up || die "cannot bring mgmt0 up"
    $IP addr add "$2/24" dev mgmt0 || die "cannot address mgmt0"
}

# ---- the fabric ------------------------------------------------------------------------------

# in NS CMD...: run CMD in the switch namespace NS.
in_ns() { _ns=$1; shift; $IP netns exec "$_ns" "$@"; }

# veth_link A B ADDR_A ADDR_B: a cable between routers A and B (namespaces); in A the port is
# called B and in B it is called A.
veth_link() {
    $IP link add "$1-$2" type veth peer name "$2-$1" || die "cannot create the cable $1-$2"
    $IP link set "$1-$2" netns "$1" && $IP link set "$2-$1" netns "$2" || die "cannot place $1-$2"
    in_ns "$1" "$IP" link set "$1-$2" name "$2" mtu 9000 up
    in_ns "$2" "$IP" link set "$2-$1" name "$1" mtu 9000 up
    in_ns "$1" "$IP" addr add "$3/24" dev "$2"
    in_ns "$2" "$IP" addr add "$4/24" dev "$1"
}

router_ns() {
    $IP netns add "$1" || die "cannot create namespace $1"
    in_ns "$1" "$IP" link set lo up
    in_ns "$1" sh -c 'echo 1 >/proc/sys/net/ipv4/ip_forward
        echo 1 >/proc/sys/net/ipv4/fib_multipath_hash_policy
        echo 0 >/proc/sys/net/ipv4/conf/all/rp_filter
        echo 0 >/proc/sys/net/ipv4/conf/default/rp_filter'
}

fabric_main() {
    hostname fabric
    for m in virtio_net bridge sch_netem; do modprobe "$m" || die "modprobe $m failed"; done
    write_hosts
    $IP link set lo up
    # Management: one bridge of every node's management port, the fabric's own address on it.
    $IP link add mgmt type bridge || die "cannot create the management bridge"
    $IP link set mgmt up
    $IP addr add 10.0.0.254/24 dev mgmt
    k=1
    while [ "$k" -le "$nodes" ]; do
        rename_nic "52:54:00:04:00:$(hexbyte "$k")" "m$k"
        $IP link set "m$k" master mgmt up
        rename_nic "52:54:00:02:00:$(hexbyte "$k")" "node$k"
        $IP link set "node$k" mtu 9000
        k=$((k + 1))
    done
    if [ "$topo" = flat ]; then
        router_ns switch
        in_ns switch "$IP" link add br0 type bridge
        in_ns switch "$IP" link set br0 mtu 9000 up
        k=1
        while [ "$k" -le "$nodes" ]; do
            $IP link set "node$k" netns switch
            in_ns switch "$IP" link set "node$k" master br0 up
            k=$((k + 1))
        done
    else
        for r in leaf1 leaf2 spine1 spine2; do router_ns "$r"; done
        for l in 1 2; do
            in_ns "leaf$l" "$IP" link add br0 type bridge
            in_ns "leaf$l" "$IP" link set br0 mtu 9000 up
            in_ns "leaf$l" "$IP" addr add "192.168.8$l.254/24" dev br0
            for s in 1 2; do veth_link "leaf$l" "spine$s" "172.16.$l$s.1" "172.16.$l$s.2"; done
        done
        k=1
        while [ "$k" -le "$nodes" ]; do
            l=$(leaf_of "$k")
            $IP link set "node$k" netns "leaf$l"
            in_ns "leaf$l" "$IP" link set "node$k" master br0 up
            k=$((k + 1))
        done
        # Each leaf reaches the other leaf's subnet over both spines (ECMP, an L4 hash: RoCE v2's
        # UDP source port picks the spine); each spine reaches each leaf's subnet directly.
        in_ns leaf1 "$IP" route add 192.168.82.0/24 nexthop via 172.16.11.2 nexthop via 172.16.12.2 \
            || die "cannot add leaf1's multipath route"
        in_ns leaf2 "$IP" route add 192.168.81.0/24 nexthop via 172.16.21.2 nexthop via 172.16.22.2 \
            || die "cannot add leaf2's multipath route"
        for s in 1 2; do
            in_ns "spine$s" "$IP" route add 192.168.81.0/24 via "172.16.1$s.1"
            in_ns "spine$s" "$IP" route add 192.168.82.0/24 via "172.16.2$s.1"
        done
    fi
    ln -sf "$repo/scripts/cluster/vl-fabric" /usr/sbin/vl-fabric
    start_sshd
    echo "$topo" >"$ready/fabric"
    say "fabric ($topo, $nodes nodes) up at $(uptime_s) s after boot"
    # The fabric switches until the harness stops it.
    while :; do sleep 3600; done
}

# ---- a node ----------------------------------------------------------------------------------

start_slurm() {
    # munge: one key for the cluster, made by the harness for this boot.
    mkdir -p /etc/munge /var/lib/munge /var/log/munge /run/munge
    cp "$jobdir/munge.key" /etc/munge/munge.key || die "no munge key in $jobdir"
    chmod 700 /etc/munge /var/lib/munge /var/log/munge
    chmod 755 /run/munge
    chmod 400 /etc/munge/munge.key
    munged --force 2>>/tmp/munged.log || die "munged did not start: $(tail -n 3 /tmp/munged.log)"
    # slurmd sets up its cgroup plugin even with task/none and no limits: cgroup v2 without
    # systemd (IgnoreSystemd: slurmd makes its own slurmstepd.scope in system.slice).
    mount -t cgroup2 cgroup2 /sys/fs/cgroup || die "cannot mount cgroup2 on /sys/fs/cgroup"
    mkdir -p /sys/fs/cgroup/system.slice
    for c in cpuset cpu memory pids; do echo "+$c" >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null || true; done
    mkdir -p /etc/slurm /var/spool/slurmd /var/spool/slurmctld /var/log/slurm
    printf 'CgroupPlugin=cgroup/v2\nIgnoreSystemd=yes\n' >/etc/slurm/cgroup.conf
    cp "$jobdir/slurm.conf" /etc/slurm/slurm.conf || die "no slurm.conf in $jobdir"
    if [ -n "$head" ]; then
        slurmctld -L /var/log/slurm/slurmctld.log || die "slurmctld did not start: $(tail -n 5 /var/log/slurm/slurmctld.log)"
    fi
    slurmd -L /var/log/slurm/slurmd.log || die "slurmd did not start: $(tail -n 5 /var/log/slurm/slurmd.log)"
}

node_main() {
    hostname "node$node"
    for m in virtio_net crc32_generic rdma_rxe rdma_ucm ib_uverbs sch_netem; do
        modprobe "$m" || die "modprobe $m failed"
    done
    modprobe crc32-pclmul 2>/dev/null || true
    write_hosts
    $IP link set lo up
    mgmt_up "52:54:00:03:00:$(hexbyte "$node")" "10.0.0.$node"
    rename_nic "52:54:00:01:00:$(hexbyte "$node")" eth0
    addr=$(data_addr "$node")
    $IP link set eth0 mtu 9000 up || die "cannot bring eth0 up"
    $IP addr add "$addr/24" dev eth0 || die "cannot address eth0"
    if [ "$topo" != flat ]; then
        # Routed RoCE v2: the other leaf's nodes are behind this leaf's gateway.
        $IP route add 192.168.80.0/20 via "192.168.8$(leaf_of "$node").254" dev eth0 \
            || die "cannot add the route to the other leaf"
    fi
    rdma link add rxe0 type rxe netdev eth0 || die "rdma link add rxe0 failed"
    . "$repo/scripts/lib/rxe.sh"
    end=$(($(uptime_cs) + 6000))
    until rxe_ready rxe0 "$addr"; do
        [ "$(uptime_cs)" -lt "$end" ] || die "rxe0 not ready after 60 s: state '$RXE_STATE', GID 1 '$RXE_GID'"
        sleep 0.1
    done
    # Our binaries from the guest's RAM, on every PATH: also in ssh sessions, which get
    # Dropbear's default PATH, and under Slurm.
    mkdir -p /opt/vl-bin
    cp -p "$repo/.vm-out/bin/"* /opt/vl-bin/ 2>/dev/null || true
    for b in /opt/vl-bin/*; do [ -e "$b" ] && ln -sf "$b" "/usr/bin/${b##*/}"; done
    export VL_GUEST=1 VL_CLUSTER=1 VL_NODE="node$node" VL_NODES="$nodes" VL_TOPO="$topo"
    export VL_DEV0=rxe0 VL_ADDR0="$addr" VL_REPO="$repo" HOME=/root
    export VL_TIME_SCALE="$scale" VL_TESTS="$repo/tests/cluster" VL_JOB="$jobdir"
    export PATH="/opt/vl-bin:$repo/target/release:/usr/sbin:/usr/bin"
    # The same environment for commands that arrive by ssh (tests/cluster/lib.sh's `on`).
    export -p | grep -E ' (VL_[A-Z_0-9]*|PATH|HOME)=' >/etc/vl-env
    start_sshd
    start_slurm
    echo "$addr" >"$ready/node$node"
    say "node$node: rxe0 on eth0 $addr ACTIVE at $(uptime_s) s after boot"
    cd "$repo" || die "cannot cd to $repo"
    if [ -n "$head" ]; then head_main; fi
    if [ "$mode" = shell ]; then shell_main; fi
    while :; do sleep 3600; done
}

# The head (node1) waits for every guest, then runs the job: a command (run) or the scenarios
# (test); its status ends the cluster.
head_main() {
    end=$(($(uptime_cs) + 6000 * scale))
    for g in fabric $(seq 1 "$nodes" | sed 's/^/node/'); do
        until [ -e "$ready/$g" ]; do
            [ "$(uptime_cs)" -lt "$end" ] || die "$g did not come up within $((60 * scale)) s (see its console: .vm-out/cluster-latest/$g.console)"
            sleep 0.2
        done
    done
    # Slurm: every node's slurmd registered and idle (bounded).
    until [ "$(sinfo -h -o '%T %D' -t idle 2>/dev/null | awk '{ n += $2 } END { print n + 0 }')" -ge "$nodes" ]; do
        [ "$(uptime_cs)" -lt "$end" ] || die "Slurm: not every node is idle: $(sinfo 2>&1 | tr '\n' ' ')"
        sleep 0.5
    done
    say "cluster ready: $nodes nodes + fabric ($topo) at $(uptime_s) s after node1's boot"
    echo "$(uptime_s)" >"$jobdir/ready-at"
    case $mode in
        run)
            sh -c "$(cat "$jobdir/cmd")" </dev/null
            finish $?
            ;;
        test)
            VL_TESTS=$repo/tests/cluster run_suite
            finish 0
            ;;
        shell) shell_main ;;
        idle) while :; do sleep 3600; done ;;
    esac
    die "unknown vl.mode '$mode'"
}

shell_main() {
    [ -n "$cols" ] && [ -n "$rows" ] && stty cols "$cols" rows "$rows" 2>/dev/null
    export TERM=xterm
    cat <<BANNER

  verbs-lab cluster: node$node of $nodes ($topo fabric; $(uname -r))
    rxe0 on eth0 $addr; management 10.0.0.$node; the others: node1..node$nodes, fabric
  Try:  ssh node2 hostname;  sinfo;  srun -N $nodes hostname
        vl_write_bw -d rxe0 -u 20 &    (then on another node: vl_write_bw -d rxe0 -u 20 node$node)
        ssh fabric vl-fabric counters
  'exit' powers the cluster off.

BANNER
    setsid cttyhack sh -l
    finish 0
}

mkdir -p "$ctl" "$ready"
case $role in
    fabric) fabric_main ;;
    node) node_main ;;
    *) die "unknown vl.role '$role'" ;;
esac
