#!/bin/sh
# The bench pins the neighbour entries rxe resolves for every packet (scripts/bench-guest.sh,
# docs/measurement.md) and puts them back afterwards: a finished bench leaves none of its
# permanent entries behind and says in env.txt what it pinned; a bench stopped mid-run (SIGTERM
# to its process group, as a job's timeout sends it; a background job here ignores SIGINT, which
# the bench traps the same way) puts them back too, exits 143 and leaves no tool running; an
# entry the user had made permanent before keeps its address.
# timeout: 240
# slow: three short bench runs of write_bw (one interrupted)
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"
require_bin vl_write_bw
require_bin ib_write_bw

IP=/usr/sbin/ip
netdev_of() { cat "/sys/class/infiniband/$1/ports/1/gid_attrs/ndevs/1"; }
ND0=$(netdev_of "$VL_DEV0") ND1=$(netdev_of "$VL_DEV1")
MAC0=$(cat "/sys/class/net/$ND0/address")
# The two entries: VL_ADDR0 as rxe1's netdev resolves it, VL_ADDR1 as rxe0's does.
state() { $IP neigh show "$1" dev "$2"; }
permanent() { state "$1" "$2" | grep -q PERMANENT; }
forget() { $IP neigh del "$1" dev "$2" 2>/dev/null || true; }
cleanup() {
    forget "$VL_ADDR0" "$ND1"
    forget "$VL_ADDR1" "$ND0"
}
trap cleanup EXIT

bench() { sh scripts/bench-guest.sh --only write_bw --max-extra 0 "$@"; }

step "a finished bench: both entries pinned for it, none left permanent after it"
cleanup
bench --out "$TMPDIR/a" --runs 1 --quick >"$TMPDIR/a.log" 2>&1 || {
    cat "$TMPDIR/a.log"
    fail "the bench failed"
}
expect_contains "$TMPDIR/a/env.txt" "neighbours_pinned=$VL_ADDR0 on $ND1, $VL_ADDR1 on $ND0"
for e in "$VL_ADDR0 $ND1" "$VL_ADDR1 $ND0"; do
    # shellcheck disable=SC2086 # "ADDR NETDEV"
    ! permanent $e || fail "the bench left a permanent entry behind: $(state $e)"
done
echo "pinned: $(grep '^neighbours_pinned=' "$TMPDIR/a/env.txt"); after it: none permanent"

step "a stopped bench: the user's permanent entry kept, the other forgotten, exit 143"
cleanup
$IP neigh replace "$VL_ADDR0" lladdr "$MAC0" dev "$ND1" nud permanent
setsid sh scripts/bench-guest.sh --only write_bw --max-extra 0 --out "$TMPDIR/b" --runs 5 \
    >"$TMPDIR/b.log" 2>&1 &
bpid=$!
wait_for 60 "$bpid" permanent "$VL_ADDR1" "$ND0" || {
    cat "$TMPDIR/b.log"
    fail "the bench never pinned $VL_ADDR1 on $ND0"
}
echo "pinned during the run: $(state "$VL_ADDR1" "$ND0")"
# Mid-run: one of the tools is up.
tools() { pids_with_args "*_write_bw -d *"; }
running() { [ -n "$(tools)" ]; }
stopped() { [ -z "$(tools)" ]; }
wait_for 60 "$bpid" running || {
    cat "$TMPDIR/b.log"
    fail "no run of the bench started"
}
kill -TERM "-$bpid"
st=0
run_timeout 60 sh -c "while kill -0 $bpid 2>/dev/null; do sleep 0.1; done" ||
    fail "the bench still runs 60 s after SIGTERM"
wait "$bpid" || st=$?
[ "$st" = 143 ] || { cat "$TMPDIR/b.log"; fail "a stopped bench exited $st, not 143"; }
state "$VL_ADDR0" "$ND1" | grep -q "lladdr $MAC0 .*PERMANENT" ||
    fail "the user's permanent entry was not kept: $(state "$VL_ADDR0" "$ND1")"
! permanent "$VL_ADDR1" "$ND0" || fail "left permanent after SIGTERM: $(state "$VL_ADDR1" "$ND0")"
wait_for 20 - stopped || fail "tools still running after the stopped bench: $(tools)"
echo "exit 143; $VL_ADDR0 on $ND1: $(state "$VL_ADDR0" "$ND1");" \
    "$VL_ADDR1 on $ND0: not permanent; no tool left"
