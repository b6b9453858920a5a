#!/bin/sh
# All-to-all and the rooted collectives (issue 40): vl_alltoall_perf, vl_reduce_perf,
# vl_gather_perf and vl_scatter_perf as 4 ranks (--np 4) over rxe0/rxe1 at 8 B and 4 MiB, every
# element checked (-c 1): 0 wrong, the footer OK, a --json that vl_jsoncheck accepts (it
# recomputes the bus bandwidth with the tool's factor) and a --csv with one line per row. The
# rooted ones with a root that is not rank 0. Then all-to-all under Open MPI's mpirun on 3 ranks,
# sizes not divisible by 3 (rounded down as nccl-tests does). Then nccl-tests' fidelity (issue
# 40, item 5): reduce-scatter and all-gather print and compute from what moves, half and
# bfloat16 reduce exactly, -d all runs each type in turn, -o avg divides where the result is,
# the time column keeps to nccl-tests' 7 characters. All-to-all's two algorithms on 5 ranks
# (direct, the default, and --algo ring), the algorithms it does not have refused, and a rank
# killed mid-all-to-all named by every survivor.
# Took 34-62 s on a 2-core host shared with builds (TCG guest); 157 s at load average 10.
# timeout: 500
# slow: four collectives of four ranks up to 4 MiB with every element checked, and an mpirun job, under emulation
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"

for t in alltoall reduce gather scatter reduce_scatter all_gather; do
    require_bin "vl_${t}_perf"
done
require_bin vl_jsoncheck
mqueue_ready

# check_rows FILE WHAT SIZES: 0 wrong in both placements of every row, the footer OK, the rows'
# sizes (column 1) exactly SIZES (space-separated).
check_rows() {
    expect_contains "$1" "# Out of bounds values : 0 OK"
    rows=$(grep -E '^ +[0-9]+ ' "$1")
    echo "$rows" | awk '{ if ($9 != "0" || $13 != "0") { print "wrong: " $0; bad = 1 } }
        END { exit bad }' || fail "$2: a row has wrong values"
    got=$(echo "$rows" | awk '{ print $1 }' | tr '\n' ' ')
    [ "$got" = "$3 " ] || fail "$2: rows of sizes '$got', expected '$3 '"
}

for t in alltoall reduce gather scatter; do
    step "vl_${t}_perf --np 4 over rxe0,rxe1, 8 B and 4 MiB of uint8, -c 1"
    root=''
    [ "$t" = alltoall ] || root='-r 2'
    rc=0
    # shellcheck disable=SC2086 # $root is a flag and its value
    run_timeout 150 "vl_${t}_perf" --np 4 --ib-dev "$VL_DEV0,$VL_DEV1" -b 8 -e 4M -f 524288 \
        -d uint8 -n 1 -w 0 -c 1 --timeout 60 $root --json "$TMPDIR/$t.json" \
        --csv "$TMPDIR/$t.csv" >"$TMPDIR/$t.out" 2>&1 || rc=$?
    cat "$TMPDIR/$t.out"
    [ "$rc" = 0 ] || fail "vl_${t}_perf exited $rc"
    no_queues "vl_${t}_perf --np 4"
    check_rows "$TMPDIR/$t.out" "vl_${t}_perf" "8 4194304"
    [ -z "$root" ] || grep -Eq '^ +8 +[0-9]+ +uint8 +[a-z]+ +2 ' "$TMPDIR/$t.out" \
        || fail "vl_${t}_perf: the root column does not say 2"
    vl_jsoncheck "$TMPDIR/$t.json" --sizes 8,4194304 \
        || fail "vl_jsoncheck refused the --json of vl_${t}_perf"
    [ "$(wc -l <"$TMPDIR/$t.csv")" -eq 3 ] || { cat "$TMPDIR/$t.csv"; fail "vl_${t}_perf: --csv is not a header and 2 rows"; }
    head -n 1 "$TMPDIR/$t.csv" | grep -q '^size_bytes,count,type,redop,root,oop_time_us,' \
        || fail "vl_${t}_perf: --csv header"
done

step "all-to-all's algorithms: direct by default from 3 ranks, --algo ring relays; the same bytes"
expect_contains "$TMPDIR/alltoall.out" "algo: auto (direct: a QP pair to each rank)"
grep -q '"algo": "direct"' "$TMPDIR/alltoall.json" || fail "vl_alltoall_perf: the rows' algo is not direct"
head -n 1 "$TMPDIR/alltoall.csv" | grep -q ',channels,algo$' || fail "vl_alltoall_perf: no algo column in --csv"
[ "$(grep -c ',1,direct$' "$TMPDIR/alltoall.csv")" -eq 2 ] || fail "vl_alltoall_perf: --csv rows do not say direct"
# Five ranks (four lanes each, an odd world), sizes not divisible by 5, both algorithms.
for algo in ring direct; do
    rc=0
    run_timeout 150 vl_alltoall_perf --np 5 --ib-dev "$VL_DEV0,$VL_DEV1" --algo "$algo" -d int32 \
        -b 44 -e 1M -f 24 -n 2 -w 1 -c 1 --timeout 60 --json "$TMPDIR/a2a-$algo.json" \
        >"$TMPDIR/a2a-$algo.out" 2>&1 || rc=$?
    cat "$TMPDIR/a2a-$algo.out"
    [ "$rc" = 0 ] || fail "vl_alltoall_perf --np 5 --algo $algo exited $rc"
    expect_contains "$TMPDIR/a2a-$algo.out" "algo: $algo"
    # 11, 264, 6336, 152064 int32 rounded down to a multiple of 5.
    check_rows "$TMPDIR/a2a-$algo.out" "vl_alltoall_perf --algo $algo" "40 1040 25340 608240"
    grep -q "\"algo\": \"$algo\"" "$TMPDIR/a2a-$algo.json" || fail "--algo $algo: not in the --json rows"
done
no_queues "vl_alltoall_perf --np 5"
out=$TMPDIR/rd.out
expect_fail_within 10 "vl_alltoall_perf --algo rd" vl_alltoall_perf --np 3 --algo rd -e 64
[ "$FAIL_RC" = 2 ] || fail "vl_alltoall_perf --algo rd: exit $FAIL_RC, expected 2"
expect_contains "$out" "--algo rd: alltoall does not have it; rd is all_reduce's"
expect_fail_within 10 "vl_gather_perf --algo direct" vl_gather_perf --np 3 --algo direct -e 64
[ "$FAIL_RC" = 2 ] || fail "vl_gather_perf --algo direct: exit $FAIL_RC, expected 2"
expect_contains "$out" "--algo direct: gather has only the ring; direct is alltoall's"
# The mesh's queues are checked before they are made: 2 peers x 3000 slots pass rxe's max_cqe.
expect_fail_within 60 "the mesh past max_cqe" vl_alltoall_perf --np 3 --ib-dev "$VL_DEV0,$VL_DEV1" \
    --slots 3000 --slot-size 4K -b 8 -e 8 -n 1 -w 0
expect_contains "$out" "the direct all-to-all needs a pair of QPs and --slots x --slot-size to each of the 2 other ranks: 2 peer(s) x --slots 3000"
expect_contains "$out" "give --slots 2723 or fewer; or give --algo ring"
no_queues "the refused mesh"

step "a rank killed mid-all-to-all (direct, --np 4): the launcher and every survivor name it"
vl_alltoall_perf --np 4 --ib-dev "$VL_DEV0,$VL_DEV1" -b 64K -e 64K -n 1000000 -w 0 -c 0 \
    --timeout 20 >"$TMPDIR/kill.out" 2>&1 </dev/null &
launcher=$!
kill_rank_mid_run "$TMPDIR/kill.out" 3 vl_alltoall_perf 2
survivors_name_victim "$TMPDIR/kill.out" "$launcher" 2 0 1 3
[ "$elapsed" -le "$(scaled 20)" ] || fail "the survivors took ${elapsed}s, more than the peer timeout"
no_queues "the all-to-all with a killed rank"

step "the bus factors: alltoall, gather, scatter (n-1)/n = 0.75, reduce 1"
for t in alltoall gather scatter; do
    grep -q '"busbw_factor": 0.75' "$TMPDIR/$t.json" || fail "vl_${t}_perf: busbw_factor is not 0.75"
done
grep -q '"busbw_factor": 1.0' "$TMPDIR/reduce.json" || fail "vl_reduce_perf: busbw_factor is not 1"

step "mpirun -np 3 vl_alltoall_perf -d int32 -b 40 -e 160K -f 16 -c 1 (sizes not divisible by 3)"
if command -v mpirun >/dev/null; then
    rc=0
    run_timeout 150 sh "$VL_TESTS/mpi/mpirun.sh" 3 vl_alltoall_perf --ib-dev "$VL_DEV0,$VL_DEV1" \
        --master "$VL_ADDR0:29541" -d int32 -b 40 -e 160K -f 16 -n 1 -w 0 -c 1 --timeout 60 \
        >"$TMPDIR/mpi.out" 2>&1 || rc=$?
    cat "$TMPDIR/mpi.out"
    [ "$rc" = 0 ] || fail "mpirun vl_alltoall_perf exited $rc"
    expect_contains "$TMPDIR/mpi.out" "from Open MPI (OMPI_COMM_WORLD_*)"
    # 10, 160, 2560, 40960 int32 rounded down to a multiple of 3: 9, 159, 2559, 40959.
    check_rows "$TMPDIR/mpi.out" "mpirun vl_alltoall_perf" "36 636 10236 163836"
else
    fail "no mpirun in the guest image (rebuild it: scripts/softroce-vm build)"
fi

step "nccl-tests' rows: reduce-scatter and all-gather sized by what moves"
rc=0
run_timeout 90 vl_reduce_scatter_perf --np 3 --ib-dev "$VL_DEV0,$VL_DEV1" -b 7 -e 1000 -f 4 \
    -n 1 -w 0 -c 1 --timeout 30 --json "$TMPDIR/rs.json" >"$TMPDIR/rs.out" 2>&1 || rc=$?
cat "$TMPDIR/rs.out"
[ "$rc" = 0 ] || fail "vl_reduce_scatter_perf exited $rc"
# 7, 28, 112, 448 B of float over 3 ranks: 0, 6, 27, 111 floats; count is the per-rank part.
check_rows "$TMPDIR/rs.out" vl_reduce_scatter_perf "0 24 108 444"
grep -Eq '^ +444 +37 +float ' "$TMPDIR/rs.out" || fail "vl_reduce_scatter_perf: no row '444 37 float'"
# Its document too: a row of 0 B is what nccl-tests prints, and vl_jsoncheck accepts it.
vl_jsoncheck "$TMPDIR/rs.json" --sizes 0,24,108,444 || fail "vl_jsoncheck refused vl_reduce_scatter_perf's rows"

rc=0
run_timeout 90 vl_all_gather_perf --np 5 --ib-dev "$VL_DEV0,$VL_DEV1" -d int64 -b 8 -e 112 -i 104 \
    -n 1 -w 0 -c 1 --timeout 30 >"$TMPDIR/ag.out" 2>&1 || rc=$?
[ "$rc" = 0 ] || { cat "$TMPDIR/ag.out"; fail "vl_all_gather_perf exited $rc"; }
grep -E '^ +[0-9]+ ' "$TMPDIR/ag.out" | tail -n 2
grep -Eq '^ +80 +2 +int64 ' "$TMPDIR/ag.out" || fail "vl_all_gather_perf: no row '80 2 int64' for 112 B"

step "half and bfloat16 reduce exactly on the ring (4 ranks, every element checked)"
for spec in "-d bfloat16 -o sum" "-d half -o prod"; do
    rc=0
    # shellcheck disable=SC2086 # $spec is flags and their values
    run_timeout 90 vl_all_reduce_perf --np 4 --ib-dev "$VL_DEV0,$VL_DEV1" -b 8 -e 64K -f 8192 \
        -n 1 -w 0 -c 1 --timeout 30 $spec >"$TMPDIR/t16.out" 2>&1 || rc=$?
    grep -E '^ +[0-9]+ ' "$TMPDIR/t16.out" || true
    [ "$rc" = 0 ] || { cat "$TMPDIR/t16.out"; fail "vl_all_reduce_perf $spec exited $rc"; }
    check_rows "$TMPDIR/t16.out" "vl_all_reduce_perf $spec" "8 65536"
done

step "-d all -o avg: vl_reduce_perf --np 3 -r 1 averages each of the ten types in turn, every element checked"
rc=0
run_timeout 120 vl_reduce_perf --np 3 --ib-dev "$VL_DEV0,$VL_DEV1" -d all -o avg -r 1 -b 96 -e 96 \
    -n 1 -w 0 -c 1 --timeout 30 >"$TMPDIR/all.out" 2>&1 || rc=$?
grep -E '^ +[0-9]+ ' "$TMPDIR/all.out" || true
[ "$rc" = 0 ] || { cat "$TMPDIR/all.out"; fail "vl_reduce_perf -d all exited $rc"; }
types=$(grep -E '^ +[0-9]+ ' "$TMPDIR/all.out" | awk '{ print $3 }' | tr '\n' ' ')
[ "$types" = "float double int32 int64 uint8 int8 uint32 uint64 half bfloat16 " ] \
    || fail "vl_reduce_perf -d all ran the types '$types'"
expect_contains "$TMPDIR/all.out" "# Out of bounds values : 0 OK"
rc=0
run_timeout 90 vl_reduce_scatter_perf --np 3 --ib-dev "$VL_DEV0,$VL_DEV1" -d half -o avg -b 96 -e 96 \
    -n 1 -w 0 -c 1 --timeout 30 >"$TMPDIR/rsavg.out" 2>&1 || rc=$?
grep -E '^ +[0-9]+ ' "$TMPDIR/rsavg.out" || true
[ "$rc" = 0 ] || { cat "$TMPDIR/rsavg.out"; fail "vl_reduce_scatter_perf -o avg exited $rc"; }
check_rows "$TMPDIR/rsavg.out" "vl_reduce_scatter_perf -d half -o avg" "96"

step "the time column: 7 characters at most, two decimals below 10000 us, one below 100000, then none"
cat "$TMPDIR"/*.out | grep -E '^ +[0-9]+ ' | awk '{
    for (i = 6; i <= 10; i += 4) {
        t = $i
        if (t !~ /^[0-9][0-9]?[0-9]?[0-9]?\.[0-9][0-9]$/ && t !~ /^[0-9][0-9][0-9][0-9][0-9]\.[0-9]$/ \
            && t !~ /^[0-9][0-9][0-9][0-9][0-9][0-9][0-9]?$/ && t !~ /^[0-9]\.[0-9]e\+[0-9][0-9]$/) {
            print "time " t ": " $0; bad = 1
        }
    }
} END { exit bad }' || fail "a time column is not nccl-tests' format"
echo "every time column fits nccl-tests' rule"

step "nothing left behind"
# shellcheck disable=SC2009 # busybox: ps, not pgrep -a
left=$(ps -o pid,args 2>/dev/null | grep '[v]l_.*_perf' || true)
[ -z "$left" ] || fail "ranks still running: $left"
no_queues "the runs above"
echo "no rank and no message queue left behind"
