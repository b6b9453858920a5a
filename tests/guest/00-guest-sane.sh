#!/bin/sh
# The guest is what every other scenario assumes: rxe0 on veth0 and rxe1 on veth1, ports ACTIVE,
# GID index 1 the IPv4-mapped RoCEv2 GID of each address, active MTU 4096, unlimited memlock.
# timeout: 60
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"

step "environment"
[ "${VL_GUEST:-}" = 1 ] || fail "VL_GUEST is not 1: not running in the softroce-vm guest?"
memlock=$(awk '/^Max locked memory/ { print $4 }' /proc/self/limits)
[ "$memlock" = unlimited ] || fail "the memlock limit is $memlock bytes, expected unlimited (ulimit -l)"
echo "VL_DEV0=$VL_DEV0 VL_ADDR0=$VL_ADDR0 VL_DEV1=$VL_DEV1 VL_ADDR1=$VL_ADDR1, memlock unlimited"

check_device() { # DEV NETDEV ADDR
    dev=$1 netdev=$2 addr=$3
    step "$dev on $netdev, $addr"
    port=/sys/class/infiniband/$dev/ports/1
    [ -d "$port" ] || fail "no $port (rdma link: $(rdma link 2>&1))"

    state=$(cat "$port/state")
    case $state in *ACTIVE*) ;; *) fail "$dev port 1 state is '$state', expected ACTIVE" ;; esac
    echo "port state: $state"

    # sysfs spells GIDs as 8 groups of 4 hex digits: ::ffff:a.b.c.d is ...:ffff:aabb:ccdd.
    want=$(echo "$addr" | awk -F. '{ printf "0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x", $1, $2, $3, $4 }')
    gid=$(cat "$port/gids/1")
    [ "$gid" = "$want" ] || fail "$dev GID 1 is $gid, expected $want (::ffff:$addr)"
    type=$(cat "$port/gid_attrs/types/1")
    [ "$type" = "RoCE v2" ] || fail "$dev GID 1 type is '$type', expected 'RoCE v2'"
    ndev=$(cat "$port/gid_attrs/ndevs/1")
    [ "$ndev" = "$netdev" ] || fail "$dev GID 1 belongs to '$ndev', expected $netdev"
    echo "GID 1 (sysfs): $gid, $type on $ndev"

    # The same facts as a user sees them, through libibverbs and the rxe provider.
    out=$TMPDIR/devinfo.$dev
    ibv_devinfo -v -d "$dev" >"$out" 2>&1 || { cat "$out"; fail "ibv_devinfo -v -d $dev failed"; }
    grep -E 'state:|active_mtu:|link_layer:|GID\[ *1\]' "$out"
    grep -Eq 'state:[[:space:]]+PORT_ACTIVE' "$out" || fail "ibv_devinfo: $dev port is not PORT_ACTIVE"
    grep -Eq 'active_mtu:[[:space:]]+4096 ' "$out" \
        || fail "ibv_devinfo: $dev active_mtu is not 4096 (veth MTU $(cat "/sys/class/net/$netdev/mtu"))"
    grep -Eq 'link_layer:[[:space:]]+Ethernet' "$out" || fail "ibv_devinfo: $dev link layer is not Ethernet"
    grep -Eq "GID\\[ *1\\]:[[:space:]]+::ffff:$addr, RoCE v2\$" "$out" \
        || fail "ibv_devinfo: $dev GID[1] is not ::ffff:$addr, RoCE v2"

    rdma link show "$dev/1" >"$TMPDIR/link.$dev" 2>&1
    cat "$TMPDIR/link.$dev"
    expect_contains "$TMPDIR/link.$dev" "netdev $netdev"
}

check_device "$VL_DEV0" veth0 "$VL_ADDR0"
check_device "$VL_DEV1" veth1 "$VL_ADDR1"
step "ok"
