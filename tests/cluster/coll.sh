# shellcheck shell=sh
# coll.sh — checks of a collective's output across the cluster's hosts, sourced by the launcher
# and fault scenarios (after lib.sh).

# shellcheck disable=SC2034  # used by the scenarios that source this file
COLLS='all_reduce all_gather reduce_scatter broadcast sendrecv'
# Small sizes, every element checked: the point is who runs where and that the bytes arrive.
COLL_ARGS='--ib-dev rxe0 -b 8 -e 64K -f 8 -n 2 -w 1 -c 1 -T 60 --bootstrap-timeout 120'

# check_world FILE WHAT RANKS PER_NODE: rank 0's output of a collective over RANKS ranks,
# PER_NODE on each of the first RANKS/PER_NODE nodes: 0 wrong values, every row checked, the rank
# table names each host with PER_NODE ranks, local ranks 0..PER_NODE-1 on each, and rxe0.
check_world() {
    expect_contains "$1" "# Out of bounds values : 0 OK"
    expect_contains "$1" "nranks $3 "
    rows=$(grep -cE '^ +[0-9]+ ' "$1" || true)
    [ "$rows" -ge 4 ] || fail "$2: $rows result rows, expected the sizes 8 B .. 64 KiB"
    grep -E '^ +[0-9]+ ' "$1" | awk '{ if ($9 != "0" || (NF > 9 && $13 != "0" && $13 != "N/A")) { print "wrong: " $0; bad = 1 } }
        END { exit bad }' || fail "$2: a row has wrong values"
    grep '^#  Rank' "$1" >"$TMPDIR/ranks"
    [ "$(wc -l <"$TMPDIR/ranks")" = "$3" ] || fail "$2: the rank table has $(wc -l <"$TMPDIR/ranks") ranks, expected $3"
    hosts=$(($3 / $4))
    for n in $(seq 1 "$hosts"); do
        got=$(awk -v h="node$n" '$7 == h { print $NF " " $(NF-2) }' "$TMPDIR/ranks" | sort | tr '\n' ' ')
        want=$(seq 0 $(($4 - 1)) | awk -v n="$4" '{ printf "%s %s ", n, $1 }')
        [ "$got" = "$want" ] || fail "$2: node$n has local ranks '$got' (of, local), expected '$want'"
    done
    grep -q "^#  $hosts hosts," "$1" || fail "$2: the header does not say '$hosts hosts'"
    awk '$9 != "rxe0" { exit 1 }' "$TMPDIR/ranks" || fail "$2: a rank is not on rxe0"
}

# expect_survivors_fail WHAT PATTERN RANKS...: each of RANKS (their ssh pids in PID0..PID7, their
# outputs in $TMPDIR/rR.out) ends non-zero within T + 60 s (scaled, T: the ranks' peer timeout)
# and its output matches PATTERN (who went).
expect_survivors_fail() {
    what=$1 pat=$2
    shift 2
    for r in "$@"; do
        pid=$(eval "echo \$PID$r")
        rc=0
        _vl_watch "$pid" "$(scaled $((T + 60)))" || rc=$?
        echo "--- rank $r: exit $rc"
        tail -n 4 "$TMPDIR/r$r.out"
        [ "$rc" != 124 ] || fail "$what: rank $r still ran $(scaled $((T + 60))) s later"
        [ "$rc" != 0 ] || fail "$what: rank $r exited 0"
        grep -Eq "$pat" "$TMPDIR/r$r.out" || fail "$what: rank $r does not name who went (/$pat/)"
    done
}
