#!/bin/sh
# vl_devinfo sees both SoftRoCE devices as they are: rxe0 and rxe1, port 1 ACTIVE, active MTU
# 4096, Ethernet, RoCE v2 GIDs carrying ::ffff:192.168.77.1 and ::ffff:192.168.77.2 at index 1,
# which is also the GID verbs-lab chooses. Checked in the tables and, structurally, in --json.
# timeout: 120
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"

require_bin vl_devinfo

# run_ok NAME CMD...: run CMD, stdout+stderr into $TMPDIR/NAME; fail unless it exits 0.
run_ok() {
    _name=$1
    shift
    _rc=0
    "$@" >"$TMPDIR/$_name" 2>&1 || _rc=$?
    cat "$TMPDIR/$_name"
    [ "$_rc" -eq 0 ] || fail "'$*' exited $_rc"
}

# run_fails NAME CMD...: CMD must exit 1 (an error, not a crash or a usage error).
run_fails() {
    _name=$1
    shift
    _rc=0
    "$@" >"$TMPDIR/$_name" 2>&1 || _rc=$?
    cat "$TMPDIR/$_name"
    [ "$_rc" -eq 1 ] || fail "'$*' exited $_rc, expected 1"
}

# gid_of ADDR: the sysfs / vl_devinfo spelling of the GID ::ffff:ADDR.
gid_of() {
    echo "$1" | awk -F. '{ printf "0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x", $1, $2, $3, $4 }'
}

# squeeze FILE: the table rows with runs of blanks squeezed, so cells compare exactly.
squeeze() { sed 's/  */ /g' "$1"; }

# ---- the tables ---------------------------------------------------------------------------------
step "vl_devinfo (tables)"
run_ok table vl_devinfo
squeeze "$TMPDIR/table" >"$TMPDIR/table.sq"
table_has_device() { # DEV ADDR NETDEV
    dev=$1 addr=$2 netdev=$3
    gid=$(gid_of "$addr")
    expect_contains "$TMPDIR/table.sq" "Device $dev"
    expect_contains "$TMPDIR/table.sq" "| device | $dev |"
    expect_contains "$TMPDIR/table.sq" "| 1 | 1 | $gid | RoCE v2 | $netdev | $addr | * |"
    expect_contains "$TMPDIR/table.sq" \
        "verbs-lab uses GID index 1 on $dev port 1: the first RoCE v2 GID with an IPv4 address"
}
table_has_device "$VL_DEV0" "$VL_ADDR0" veth0
table_has_device "$VL_DEV1" "$VL_ADDR1" veth1
# One port row per device: port 1, ACTIVE, active and max MTU 4096, Ethernet, LID 0.
rows=$(grep -c '^| 1 | ACTIVE | 4096 | 4096 | Ethernet | 0 (unused on RoCE' "$TMPDIR/table.sq" || true)
[ "$rows" = 2 ] || fail "expected 2 port rows '1 | ACTIVE | 4096 | 4096 | Ethernet | 0', found $rows"
for cap in max_qp max_qp_wr max_sge max_cqe max_mr_size max_qp_rd_atom "atomic_cap | HCA (1)" \
    "node GUID" firmware "NUMA node"; do
    expect_contains "$TMPDIR/table.sq" "| $cap "
done
expect_not_contains "$TMPDIR/table.sq" "max_sge_rd" # only with -v

step "vl_devinfo -v -d $VL_DEV1 -i 1"
run_ok verbose vl_devinfo -v -d "$VL_DEV1" -i 1
squeeze "$TMPDIR/verbose" >"$TMPDIR/verbose.sq"
expect_contains "$TMPDIR/verbose.sq" "Device $VL_DEV1"
expect_not_contains "$TMPDIR/verbose.sq" "Device $VL_DEV0"
for cap in max_sge_rd max_cq max_mr max_pd max_srq max_ah max_qp_init_rd_atom page_size_cap \
    device_cap_flags "| LINK_UP (5) |" "| 1024 |"; do
    expect_contains "$TMPDIR/verbose.sq" "$cap"
done

# ---- JSON ---------------------------------------------------------------------------------------
# json_flat FILE: validate FILE as JSON (RFC 8259) with awk and print each leaf as PATH=VALUE,
# e.g. devices[0].ports[0].gids[1].ip="192.168.77.1". Exits non-zero on invalid JSON.
json_flat() {
    awk '
function bad(msg) {
    printf "invalid JSON at character %d: %s\n", pos, msg > "/dev/stderr"
    failed = 1
    exit 1
}
function skip() {
    while (pos <= n && index(" \t\r\n", substr(s, pos, 1)) > 0) pos++
}
function value(path,    c) {
    skip()
    c = substr(s, pos, 1)
    if (c == "{") object(path)
    else if (c == "[") array(path)
    else if (c == "\"") print path "=" str()
    else if (substr(s, pos, 4) == "true" || substr(s, pos, 4) == "null") {
        print path "=" substr(s, pos, 4); pos += 4
    } else if (substr(s, pos, 5) == "false") {
        print path "=false"; pos += 5
    } else if (match(substr(s, pos), /^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?/)) {
        print path "=" substr(s, pos, RLENGTH); pos += RLENGTH
    } else bad("expected a value")
}
function object(path,    key, c) {
    pos++
    skip()
    if (substr(s, pos, 1) == "}") { pos++; print path "={}"; return }
    for (;;) {
        skip()
        if (substr(s, pos, 1) != "\"") bad("expected a string key")
        key = str()
        key = substr(key, 2, length(key) - 2)
        skip()
        if (substr(s, pos, 1) != ":") bad("expected a colon")
        pos++
        if (path == "") value(key); else value(path "." key)
        skip()
        c = substr(s, pos, 1)
        pos++
        if (c == "}") return
        if (c != ",") bad("expected a comma or }")
    }
}
function array(path,    i, c) {
    pos++
    skip()
    if (substr(s, pos, 1) == "]") { pos++; print path "=[]"; return }
    for (i = 0; ; i++) {
        value(path "[" i "]")
        skip()
        c = substr(s, pos, 1)
        pos++
        if (c == "]") return
        if (c != ",") bad("expected a comma or ]")
    }
}
function str(    start, c) {
    start = pos
    pos++
    for (;;) {
        if (pos > n) bad("unterminated string")
        c = substr(s, pos, 1)
        if (c == "\"") { pos++; return substr(s, start, pos - start) }
        if (c == "\\") {
            c = substr(s, pos + 1, 1)
            if (c == "u") {
                if (substr(s, pos + 2, 4) !~ /^[0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F]$/)
                    bad("bad \\u escape")
                pos += 6
            } else if (c != "" && index("\"\\/bfnrt", c) > 0) pos += 2
            else bad("bad escape")
        } else if (index(ctrl, c) > 0) bad("control character in a string")
        else pos++
    }
}
BEGIN { for (i = 1; i < 32; i++) ctrl = ctrl sprintf("%c", i) }
{ s = s $0 "\n" }
END {
    if (failed) exit 1
    n = length(s)
    pos = 1
    value("")
    skip()
    if (pos <= n) bad("trailing characters")
}' "$1"
}

# The validator itself must refuse broken documents, or the check below proves nothing.
for broken in '{"a":1,}' '[1 2]' '{"a":"x' '{"a":01}' '{"a":"\q"}' '{"a":1} x'; do
    printf '%s\n' "$broken" >"$TMPDIR/broken.json"
    if json_flat "$TMPDIR/broken.json" >/dev/null 2>&1; then
        fail "json_flat accepted invalid JSON: $broken"
    fi
done

step "vl_devinfo --json"
rc=0
vl_devinfo --json >"$TMPDIR/devinfo.json" 2>"$TMPDIR/json.err" || rc=$?
cat "$TMPDIR/json.err"
[ "$rc" -eq 0 ] || fail "vl_devinfo --json exited $rc"
json_flat "$TMPDIR/devinfo.json" >"$TMPDIR/flat" || {
    cat "$TMPDIR/devinfo.json"
    fail "vl_devinfo --json printed invalid JSON"
}
echo "valid JSON: $(wc -l <"$TMPDIR/flat") leaves"
[ ! -s "$TMPDIR/json.err" ] || fail "vl_devinfo --json wrote to stderr"

# expect_leaf LINE: the flattened document has exactly this PATH=VALUE line.
expect_leaf() {
    grep -qxF -e "$1" "$TMPDIR/flat" || {
        grep -F -e "${1%%=*}" "$TMPDIR/flat" >&2 || echo "(no such path)" >&2
        fail "expected $1 in vl_devinfo --json"
    }
}

expect_leaf 'tool="vl_devinfo"'
n=$(grep -c '^devices\[[0-9]*\]\.name=' "$TMPDIR/flat" || true)
[ "$n" = 2 ] || fail "vl_devinfo --json lists $n devices, expected 2"
json_has_device() { # DEV ADDR NETDEV
    dev=$1 addr=$2 netdev=$3
    gid=$(gid_of "$addr")
    # Devices are listed in libibverbs' order: find this one's position.
    d=$(sed -n "s/^devices\\[\\([0-9]*\\)\\]\\.name=\"$dev\"\$/\\1/p" "$TMPDIR/flat")
    [ -n "$d" ] || fail "$dev is not in vl_devinfo --json"
    p="devices[$d].ports[0]"
    expect_leaf "devices[$d].phys_port_cnt=1"
    expect_leaf "devices[$d].caps.atomic_cap=\"HCA\""
    expect_leaf "$p.port=1"
    expect_leaf "$p.state=\"ACTIVE\""
    expect_leaf "$p.active_mtu=4096"
    expect_leaf "$p.link_layer=\"Ethernet\""
    expect_leaf "$p.lid=0"
    expect_leaf "$p.gids[1].index=1"
    expect_leaf "$p.gids[1].gid=\"$gid\""
    expect_leaf "$p.gids[1].type=\"RoCE v2\""
    expect_leaf "$p.gids[1].netdev=\"$netdev\""
    expect_leaf "$p.gids[1].ip=\"$addr\""
    expect_leaf "$p.chosen_gid.index=1"
    expect_leaf "$p.chosen_gid.ip=\"$addr\""
    expect_leaf "$p.chosen_gid_error=null"
    for cap in max_qp max_qp_wr max_sge max_cqe max_mr_size max_qp_rd_atom max_sge_rd max_cq \
        max_mr max_pd max_srq max_ah max_qp_init_rd_atom device_cap_flags page_size_cap; do
        v=$(sed -n "s/^devices\\[$d\\]\\.caps\\.$cap=//p" "$TMPDIR/flat")
        case $v in
            '' | *[!0-9]*) fail "$dev caps.$cap is '$v', expected a non-negative integer" ;;
        esac
        num_gt "$v" 0 || fail "$dev caps.$cap is $v, expected > 0"
    done
    echo "$dev: ACTIVE, MTU 4096, GID 1 $gid ($addr, RoCE v2, $netdev), chosen"
}
json_has_device "$VL_DEV0" "$VL_ADDR0" veth0
json_has_device "$VL_DEV1" "$VL_ADDR1" veth1

# ---- errors -------------------------------------------------------------------------------------
step "vl_devinfo -d nope (unknown device)"
run_fails unknown vl_devinfo -d nope
expect_contains "$TMPDIR/unknown" "vl_devinfo: error: RDMA device 'nope' not found; available:"
expect_contains "$TMPDIR/unknown" "$VL_DEV0"
expect_contains "$TMPDIR/unknown" "$VL_DEV1"

step "vl_devinfo -i 2 (no such port)"
run_fails noport vl_devinfo -d "$VL_DEV0" -i 2
expect_contains "$TMPDIR/noport" "vl_devinfo: error: $VL_DEV0 has no port 2"

step "ok"
