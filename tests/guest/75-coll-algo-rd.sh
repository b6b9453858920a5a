#!/bin/sh
# All-reduce by recursive doubling (issue 40, item 2: --algo rd beside the ring) over rxe0/rxe1:
# - --np 3 (a world folded onto 2) and --np 4 (a power of two) from 8 B to 1 MiB, every
#   element checked (-c 1): 0 wrong; the header says the algorithm, every --csv row and --json
#   row says rd, and vl_jsoncheck accepts the document;
# - every data type and operator once (-d all -o all) on 3 ranks, sizes below the world (two
#   floats for three ranks) and not divisible by it;
# - auto (VL_ALGO=auto): rd for the small rows, the ring from the model's crossover on;
# - bad values: --algo tree and VL_ALGO=bogus are usage errors (exit 2, one line);
# - rank 1 of 3 killed (SIGKILL) mid-run, rank 0's only partner: the launcher and both
#   survivors name it.
# Took 12-25 s on a 2-core host shared with builds, load average up to 7 (TCG guest).
# timeout: 200
# slow: four runs of three or four ranks, one of them waiting for a killed rank's verdict
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"

require_bin vl_all_reduce_perf
require_bin vl_jsoncheck
mqueue_ready

# rd_rows FILE WHAT SIZES: the footer OK, 0 wrong in both placements, rows of exactly SIZES.
rd_rows() {
    expect_contains "$1" "# Out of bounds values : 0 OK"
    grep -E '^ +[0-9]+ ' "$1" | awk '$9 != "0" || $13 != "0" { bad = 1; print "wrong: " $0 } END { exit bad }' \
        || fail "$2: a row has wrong values"
    sizes=$(grep -E '^ +[0-9]+ ' "$1" | awk '{ printf "%s ", $1 }')
    [ "$sizes" = "$3 " ] || fail "$2: rows of sizes '$sizes', expected '$3 '"
}

# algo_column CSV: the last column of every row, space-separated.
algo_column() { tail -n +2 "$1" | awk -F, '{ printf "%s ", $NF }'; }

for np in 3 4; do
    if [ "$np" = 3 ]; then range='-b 8 -e 1M -f 8' sizes='8 64 512 4096 32768 262144'; else
        range='-b 16 -e 1M -f 16' sizes='16 256 4096 65536 1048576'
    fi
    step "vl_all_reduce_perf --np $np --algo rd $range -c 1"
    rc=0
    # shellcheck disable=SC2086 # $range is flags and their values
    run_timeout 120 vl_all_reduce_perf --np "$np" --ib-dev "$VL_DEV0,$VL_DEV1" --algo rd $range \
        -n 2 -w 1 -c 1 --timeout 30 --json "$TMPDIR/rd$np.json" --csv "$TMPDIR/rd$np.csv" \
        >"$TMPDIR/rd$np.out" 2>&1 || rc=$?
    cat "$TMPDIR/rd$np.out"
    [ "$rc" = 0 ] || fail "vl_all_reduce_perf --np $np --algo rd exited $rc"
    no_queues "--np $np --algo rd"
    rd_rows "$TMPDIR/rd$np.out" "--np $np --algo rd" "$sizes"
    grep -q "nranks $np .* algo: rd$" "$TMPDIR/rd$np.out" || fail "the header does not say algo: rd"
    want=$(echo "$sizes" | awk '{ for (i = 1; i <= NF; i++) printf "rd " }')
    [ "$(algo_column "$TMPDIR/rd$np.csv")" = "$want" ] || { cat "$TMPDIR/rd$np.csv"; fail "--csv: not rd on every row"; }
    # The params' "algo" (as asked), then each row's (as run).
    [ "$(grep -c '"algo": "rd"' "$TMPDIR/rd$np.json")" -eq "$(($(echo "$sizes" | wc -w) + 1))" ] \
        || fail "--json: not rd in the params and on every row"
    vl_jsoncheck "$TMPDIR/rd$np.json" || fail "vl_jsoncheck refused the --json of --algo rd"
    echo "$np ranks: 0 wrong at $sizes B, rd in the header, the CSV and the JSON"
done

step "every type and operator once: --np 3 --algo rd -d all -o all, 8 and 88 B"
rc=0
run_timeout 90 vl_all_reduce_perf --np 3 --ib-dev "$VL_DEV0,$VL_DEV1" --algo rd -b 8 -e 88 -f 11 \
    -d all -o all -n 1 -w 0 -c 1 --timeout 30 >"$TMPDIR/all.out" 2>&1 || rc=$?
tail -n 5 "$TMPDIR/all.out"
[ "$rc" = 0 ] || { cat "$TMPDIR/all.out"; fail "-d all -o all --algo rd exited $rc"; }
expect_contains "$TMPDIR/all.out" "# Out of bounds values : 0 OK"
rows=$(grep -cE '^ +[0-9]+ ' "$TMPDIR/all.out")
# 10 types x 5 operators, 2 sizes each: 8 B is one element of the 8-byte types, fewer than the
# ranks for the 4-byte ones; 88 B is not a multiple of 3 elements for most.
[ "$rows" -eq 100 ] || fail "$rows rows, expected 100 (10 types x 5 operators x 2 sizes)"
rd_rows "$TMPDIR/all.out" "-d all -o all --algo rd" "$(for _ in $(seq 50); do printf '8 88 '; done | sed 's/ $//')"
echo "100 rows, 0 wrong"

step "auto: VL_ALGO=auto --np 4, 8 B, 1 KiB and 128 KiB"
rc=0
run_timeout 90 env VL_ALGO=auto vl_all_reduce_perf --np 4 --ib-dev "$VL_DEV0,$VL_DEV1" -b 8 -e 128K -f 128 \
    -n 1 -w 0 -c 1 --timeout 30 --csv "$TMPDIR/auto.csv" >"$TMPDIR/auto.out" 2>&1 || rc=$?
cat "$TMPDIR/auto.out" "$TMPDIR/auto.csv"
[ "$rc" = 0 ] || fail "VL_ALGO=auto exited $rc"
rd_rows "$TMPDIR/auto.out" "VL_ALGO=auto" "8 1024 131072"
expect_contains "$TMPDIR/auto.out" "algo: auto (rd below 71111 B per rank, ring from there)"
[ "$(algo_column "$TMPDIR/auto.csv")" = "rd rd ring " ] || fail "auto did not pick rd, rd, ring"

step "bad values are usage errors"
out=$TMPDIR/bad.out
expect_fail_within 10 "--algo tree" vl_all_reduce_perf --np 2 --algo tree -e 64
[ "$FAIL_RC" = 2 ] || fail "--algo tree: exit $FAIL_RC, expected 2"
expect_contains "$out" "unknown algorithm 'tree': use ring, rd, direct or auto"
expect_fail_within 10 "VL_ALGO=bogus" env VL_ALGO=bogus vl_all_reduce_perf --np 2 -e 64
[ "$FAIL_RC" = 2 ] || fail "VL_ALGO=bogus: exit $FAIL_RC, expected 2"
[ "$(wc -l <"$out")" -eq 1 ] || fail "VL_ALGO=bogus: not one line"
expect_contains "$out" 'VL_ALGO="bogus": unknown algorithm'

step "--np 3 --algo rd: rank 1 killed mid-run, the rank whose partner waits on it alone"
# Rank 1 folds rank 0's buffer in and hands it the result back: rank 0 talks to nobody else.
vl_all_reduce_perf --np 3 --ib-dev "$VL_DEV0,$VL_DEV1" --algo rd -b 1K -e 1K -n 1000000 -w 0 -c 0 \
    --timeout 20 >"$TMPDIR/kill.out" 2>&1 </dev/null &
launcher=$!
kill_rank_mid_run "$TMPDIR/kill.out" 2 vl_all_reduce_perf 1
rc=0
_vl_watch "$launcher" 60 || rc=$?
cat "$TMPDIR/kill.out"
case $rc in 0 | 124) fail "the launcher exited $rc" ;; esac
for said in "rank 1 (pid $victim) was killed by SIGKILL" "rank 1 (host"; do
    expect_contains "$TMPDIR/kill.out" "$said"
done
# Both survivors name it, rank 0 too.
[ "$(grep -c "error: rank 1 (host .*) is gone" "$TMPDIR/kill.out")" -eq 2 ] \
    || fail "not both survivors named rank 1"
no_queues "the --algo rd run with a killed rank"
echo "rank 1 named by the launcher and both survivors; no rank and no queue left"
