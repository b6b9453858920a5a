#!/bin/sh
# Lesson 01 narrates both SoftRoCE devices through the raw verbs, in order: the device list, then
# for each device open, query_device, query_port (ACTIVE, MTU 4096, Ethernet, LID 0), the GID
# table with the IPv4-mapped RoCE v2 GID at index 1 chosen, close; the safe layer agrees; the
# list is freed last. --quiet prints one summary line per device; errors exit 1 with the cause.
# timeout: 120
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"

require_bin lesson01_devices
out=$TMPDIR/lesson
quiet=$TMPDIR/quiet

# gid_of ADDR: the sysfs spelling of the GID ::ffff:ADDR.
gid_of() {
    echo "$1" | awk -F. '{ printf "0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x", $1, $2, $3, $4 }'
}

# count FILE TEXT: how many lines of FILE contain the fixed string TEXT.
count() { grep -cF -e "$2" "$1" || true; }

# line_of FILE TEXT: the number of the first line containing TEXT (fails when there is none).
line_of() {
    _n=$(grep -nF -e "$2" "$1" | head -n 1 | cut -d: -f1)
    [ -n "$_n" ] || fail "expected '$2' in $1"
    echo "$_n"
}

step "lesson01_devices"
rc=0
lesson01_devices >"$out" 2>&1 || rc=$?
cat "$out"
[ "$rc" -eq 0 ] || fail "lesson01_devices exited $rc"

expect_contains "$out" "[1] List the RDMA devices — ibv_get_device_list(&num)"
expect_contains "$out" "returned 2 device(s):"

narrates_device() { # DEV ADDR NETDEV
    dev=$1 addr=$2 netdev=$3
    gid=$(gid_of "$addr")
    expect_contains "$out" "] $dev  node GUID "
    # This device's section: from "[2] Open DEV" to the next device's "[2]", or to "[8]".
    start=$(line_of "$out" "[2] Open $dev — ibv_open_device(dev)")
    awk -v s="$start" 'NR == s { print; next } NR > s && /^\[[28]\] / { exit } NR > s' "$out" \
        >"$TMPDIR/section.$dev"
    sec=$TMPDIR/section.$dev
    expect_contains "$sec" "returned context 0x"
    expect_contains "$sec" "[3] Ask $dev what it can do — ibv_query_device(ctx, &attr)"
    expect_contains "$sec" "atomic_cap IBV_ATOMIC_HCA"
    expect_contains "$sec" "[4] Ask about $dev port 1 — ibv_query_port(ctx, 1, &port_attr)"
    expect_contains "$sec" "state IBV_PORT_ACTIVE"
    expect_contains "$sec" "active_mtu 4096 bytes (max_mtu 4096)"
    expect_contains "$sec" "link_layer Ethernet — RoCE"
    expect_contains "$sec" "lid 0 — "
    expect_contains "$sec" "[5] Read the GID table of $dev port 1 — ibv_query_gid(ctx, 1, i, &gid), i = 0.."
    expect_contains "$sec" "[1] $gid  RoCE v2  on $netdev  = ::ffff:$addr, the IPv4 address $addr"
    expect_contains "$sec" "[0] fe80:"
    expect_contains "$sec" "→ use GID index 1: the first RoCE v2 GID with an IPv4 address ($addr)"
    expect_contains "$sec" "[6] Close $dev — ibv_close_device(ctx)"
    expect_contains "$sec" "[7] Cross-check $dev with the safe layer"
    expect_contains "$sec" "chosen GID for $dev: the raw calls and the safe layer agree"
    [ "$(count "$sec" "    returned 0")" = 3 ] \
        || fail "$dev: expected ibv_query_device, ibv_query_port and ibv_close_device to return 0"
    # The steps come in the order the hardware needs them.
    prev=0
    for s in "[2] " "[3] " "[4] " "[5] " "→ use GID" "[6] " "[7] "; do
        at=$(line_of "$sec" "$s")
        [ "$at" -gt "$prev" ] || fail "$dev: '$s' is out of order (line $at, after line $prev)"
        prev=$at
    done
    echo "$dev: narrated in order; GID 1 $gid ($addr on $netdev) chosen; safe layer agrees"
}
narrates_device "$VL_DEV0" "$VL_ADDR0" veth0
narrates_device "$VL_DEV1" "$VL_ADDR1" veth1

[ "$(count "$out" "— ibv_close_device(ctx)")" = 2 ] || fail "expected 2 ibv_close_device steps"
[ "$(count "$out" "ibv_free_device_list(list)")" = 1 ] || fail "expected 1 ibv_free_device_list step"
free_at=$(line_of "$out" "[8] Free the device list — ibv_free_device_list(list)")
last_close=$(grep -nF "— ibv_close_device(ctx)" "$out" | tail -n 1 | cut -d: -f1)
[ "$free_at" -gt "$last_close" ] || fail "the list was freed before the last device was closed"
expect_contains "$out" "verbs_lab::verbs::DeviceList::new()"
expect_not_contains "$out" "on the way out"

step "lesson01_devices --quiet"
rc=0
lesson01_devices --quiet >"$quiet" 2>&1 || rc=$?
cat "$quiet"
[ "$rc" -eq 0 ] || fail "lesson01_devices --quiet exited $rc"
[ "$(wc -l <"$quiet")" -eq 2 ] || fail "--quiet printed $(wc -l <"$quiet") lines, expected 2"
expect_not_contains "$quiet" "[1] List"
expect_contains "$quiet" "$VL_DEV0: fw "
expect_contains "$quiet" "port 1 IBV_PORT_ACTIVE MTU 4096 Ethernet LID 0 GID[1] $(gid_of "$VL_ADDR0") (RoCE v2, veth0, $VL_ADDR0)"
expect_contains "$quiet" "$VL_DEV1: fw "
expect_contains "$quiet" "port 1 IBV_PORT_ACTIVE MTU 4096 Ethernet LID 0 GID[1] $(gid_of "$VL_ADDR1") (RoCE v2, veth1, $VL_ADDR1)"

step "lesson01_devices -d $VL_DEV1 -i 1 --quiet"
rc=0
lesson01_devices -d "$VL_DEV1" -i 1 --quiet >"$quiet" 2>&1 || rc=$?
cat "$quiet"
[ "$rc" -eq 0 ] || fail "exited $rc"
[ "$(wc -l <"$quiet")" -eq 1 ] || fail "-d $VL_DEV1 printed $(wc -l <"$quiet") lines, expected 1"
expect_contains "$quiet" "$VL_DEV1: fw "

step "lesson01_devices -d nope (unknown device)"
rc=0
lesson01_devices -d nope --quiet >"$TMPDIR/err" 2>&1 || rc=$?
cat "$TMPDIR/err"
[ "$rc" -eq 1 ] || fail "exited $rc, expected 1"
expect_contains "$TMPDIR/err" "lesson01_devices: error: RDMA device 'nope' not found; available:"
expect_contains "$TMPDIR/err" "$VL_DEV0"
expect_contains "$TMPDIR/err" "$VL_DEV1"

step "lesson01_devices -i 2 (no such port)"
rc=0
lesson01_devices -d "$VL_DEV0" -i 2 >"$TMPDIR/err" 2>&1 || rc=$?
cat "$TMPDIR/err"
[ "$rc" -eq 1 ] || fail "exited $rc, expected 1"
expect_contains "$TMPDIR/err" "lesson01_devices: error: $VL_DEV0 has no port 2"
# The device opened in step 2 is closed on the way out, then the list is freed.
expect_contains "$TMPDIR/err" "(on the way out after an error: ibv_close_device($VL_DEV0))"
expect_contains "$TMPDIR/err" "(on the way out after an error: ibv_free_device_list(list))"
[ "$(line_of "$TMPDIR/err" "ibv_close_device")" -lt "$(line_of "$TMPDIR/err" "ibv_free_device_list")" ] \
    || fail "the list was freed before the device was closed"

step "ok"
