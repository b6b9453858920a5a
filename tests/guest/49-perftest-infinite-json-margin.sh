#!/bin/sh
# perftest's run modes and files on SoftRoCE: --run_infinitely prints a row per -D period and
# ends cleanly (exit 0 on both sides) when the client gets SIGINT; --out_json writes perftest's
# keys (valid JSON, the same row as the text); -f/--margin measures the middle of a -D run
# (fewer iterations than the whole run); the NIC counter deltas (-W, --counters, --json, --max-counter) agree with the
# packets the run sent; --cpu_util adds perftest's column; and perftest's own options we refuse are refused by name.
# timeout: 300
# slow: --run_infinitely runs of 3+ periods (one piped into head), -D runs with margins, --out_json and counter runs, then the refusals
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"
# shellcheck source=tests/guest/perftest-lib.sh
. "$VL_TESTS/perftest-lib.sh"

step "--run_infinitely -D 1: periodic rows, then SIGINT on the client"
next_port
srv=$TMPDIR/inf.server cli=$TMPDIR/inf.client
# shellcheck disable=SC2086 # VL_PT_COMMON holds several options
vl_write_bw -d "$VL_DEV0" $VL_PT_COMMON -p "$PORT" -s 4096 -D 1 --run_infinitely >"$srv" 2>&1 &
spid=$!
wait_port "$PORT" 60 "$spid" || fail "the server never listened"
# shellcheck disable=SC2086 # VL_PT_COMMON holds several options
vl_write_bw -d "$VL_DEV1" $VL_PT_COMMON -p "$PORT" -s 4096 -D 1 --run_infinitely "$VL_ADDR0" \
    >"$cli" 2>&1 &
cpid=$!
# Wait for 3 periodic rows (bounded), then interrupt the client.
i=0
while [ "$(rows "$cli" | wc -l)" -lt 3 ]; do
    i=$((i + 1))
    [ "$i" -le 120 ] || { cat "$cli"; fail "fewer than 3 rows after 60 s"; }
    _vl_alive "$cpid" || { cat "$cli"; fail "the client ended by itself"; }
    sleep 0.5
done
kill -INT "$cpid"
crc=0
_vl_watch "$cpid" 60 || crc=$?
src=0
_vl_watch "$spid" 60 || src=$?
cat "$cli"
[ "$crc" = 0 ] || fail "the client exited $crc after SIGINT, expected 0"
[ "$src" = 0 ] || { cat "$srv"; fail "the server exited $src, expected 0"; }
n=$(rows "$cli" | wc -l)
[ "$n" -ge 3 ] || fail "only $n rows"
expect_contains "$cli" "stopping after the current period"
[ "$(rows "$srv")" = "$(rows "$cli")" ] || fail "the server's rows differ from the client's"
tail -n 1 "$cli" | grep -q -- '-----' || fail "the client's report has no closing line"
echo "--run_infinitely: $n rows on each side, both exited 0"

step "--run_infinitely | head -n 3: the client ends by itself after its period, quietly"
# Once its stdout has no reader and no file or gate needs the end, the client stops as SIGINT
# would stop it (after the period under way, the server told): exit 0, not a word on stderr.
next_port
# shellcheck disable=SC2086 # VL_PT_COMMON holds several options
vl_write_bw -d "$VL_DEV0" $VL_PT_COMMON -p "$PORT" -s 4096 -D 1 --run_infinitely >"$srv" 2>&1 &
spid=$!
wait_port "$PORT" 60 "$spid" || fail "the server never listened"
# shellcheck disable=SC2086 # VL_PT_COMMON holds several options
{
    _rc=0
    run_timeout 30 vl_write_bw -d "$VL_DEV1" $VL_PT_COMMON -p "$PORT" -s 4096 -D 1 \
        --run_infinitely "$VL_ADDR0" 2>"$TMPDIR/head.err" </dev/null || _rc=$?
    echo "$_rc" >"$TMPDIR/head.rc"
} | head -n 3 >"$TMPDIR/head.out"
src=0
_vl_watch "$spid" 30 || src=$?
cat "$TMPDIR/head.out" "$TMPDIR/head.err"
[ "$(wc -l <"$TMPDIR/head.out")" -eq 3 ] || fail "head did not read its 3 lines"
rc=$(cat "$TMPDIR/head.rc")
[ "$rc" = 0 ] || fail "vl_write_bw --run_infinitely | head -n 3 exited $rc, expected 0 (124: it ran on)"
[ ! -s "$TMPDIR/head.err" ] || fail "vl_write_bw --run_infinitely | head -n 3 wrote on stderr"
[ "$src" = 0 ] || { cat "$srv"; fail "the server exited $src, expected 0"; }
# (head may leave before the first period ends: then neither side has a row to print.)
echo "the server printed $(rows "$srv" | wc -l) period row(s) and exited 0"
echo "the client exited 0 without a word, the server exited 0 after $(rows "$srv" | wc -l) period(s)"

step "--run_infinitely --json | head -n 3: the file still needs the end, so SIGINT ends it"
# The JSON is written at the end with every period: the run goes on until the signal.
next_port
json=$VL_PT_OUT/49-infinite.json
rm -f "$json" "$TMPDIR/head.pid" "$TMPDIR/head.rc"
# shellcheck disable=SC2086 # VL_PT_COMMON holds several options
vl_write_bw -d "$VL_DEV0" $VL_PT_COMMON -p "$PORT" -s 4096 -D 1 --run_infinitely >"$srv" 2>&1 &
spid=$!
wait_port "$PORT" 60 "$spid" || fail "the server never listened"
# The client writes its pid before it becomes vl_write_bw (exec), for the SIGINT below.
# shellcheck disable=SC2016,SC2086 # $1/$$ are the inner shell's; VL_PT_COMMON holds several options
{
    _rc=0
    sh -c 'echo $$ >"$1"; shift; exec "$@"' sh "$TMPDIR/head.pid" \
        vl_write_bw -d "$VL_DEV1" $VL_PT_COMMON -p "$PORT" -s 4096 -D 1 --run_infinitely \
        --json "$json" "$VL_ADDR0" 2>"$TMPDIR/head.err" </dev/null || _rc=$?
    echo "$_rc" >"$TMPDIR/head.rc"
} | head -n 3 >"$TMPDIR/head.out" &
i=0
until [ -s "$TMPDIR/head.pid" ] && [ "$(wc -l <"$TMPDIR/head.out")" -ge 3 ]; do
    i=$((i + 1))
    [ "$i" -le 120 ] || fail "the client printed no 3 lines in 60 s"
    sleep 0.5
done
cpid=$(cat "$TMPDIR/head.pid")
# Three periods after head left: a client that ended on the closed stdout would be gone.
sleep 4
_vl_alive "$cpid" || { cat "$TMPDIR/head.err"; fail "the client ended although --json needs the end"; }
kill -INT "$cpid"
i=0
until [ -s "$TMPDIR/head.rc" ]; do
    i=$((i + 1))
    [ "$i" -le 120 ] || { kill_tree KILL "$cpid"; fail "the client ran on 60 s after SIGINT"; }
    sleep 0.5
done
src=0
_vl_watch "$spid" 30 || src=$?
cat "$TMPDIR/head.err"
rc=$(cat "$TMPDIR/head.rc")
[ "$rc" = 0 ] || fail "the client exited $rc after SIGINT, expected 0"
[ "$src" = 0 ] || { cat "$srv"; fail "the server exited $src, expected 0"; }
expect_contains "$TMPDIR/head.err" "stopping after the current period"
vl_jsoncheck "$json" >"$TMPDIR/head.check" 2>&1 || { cat "$TMPDIR/head.check"; fail "the --json file is not a valid report"; }
n=$(grep -o '"bytes"' "$json" | wc -l)
[ "$n" -ge 3 ] || { cat "$json"; fail "the --json file holds $n periods, expected 3 or more"; }
echo "the client ran until SIGINT and wrote $n periods to $json, both exited 0"

step "--out_json --out_json_file: perftest's keys, valid JSON, the text's row"
json=$VL_PT_OUT/49-out.json
vl_pair_ok vl_write_bw "-s 4096 -n 200" "--out_json --out_json_file $json"
for k in '"test_info"' '"test": "RDMA_Write_BW_Test"' '"results"' '"MsgSize": 4096' \
    '"n_iterations": 200' '"BW_average"' '"MsgRate"' '"Data_ex_method": "Ethernet"'; do
    expect_contains "$json" "$k"
done
avg=$(row_field "$CLIENT_OUT" 4)
grep -q "\"BW_average\": $(echo "$avg" | sed 's/0*$//; s/\.$//')" "$json" \
    || { cat "$json"; fail "the JSON's BW_average is not the row's $avg"; }
echo "out_json: BW_average $avg as in the row"

step "-f/--margin: the middle of a -D run"
vl_pair_ok vl_write_bw "-s 4096 -D 4 -f 0"
whole=$(row_field "$CLIENT_OUT" 2)
vl_pair_ok vl_write_bw "-s 4096 -D 4 -f 1"
middle=$(row_field "$CLIENT_OUT" 2)
echo "iterations: whole 4 s $whole, within 1 s margins $middle"
[ "$middle" -lt "$whole" ] || fail "-f 1 counted $middle iterations, not fewer than the whole run's $whole"
[ "$middle" -gt 0 ] || fail "-f 1 counted nothing"

step "NIC counters: -W and --counters agree with the packets the run sent"
vl_pair_ok vl_write_bw "-s 4096 -n 200 --warmup 16" \
    "--counters -W hw_counters/sent_pkts,hw_counters/rcvd_pkts --max-counter hw_counters/retry_exceeded_err=0 --json $VL_PT_OUT/49-counters.json"
expect_contains "$CLIENT_OUT" "NIC counters (port deltas over the whole run):"
sent=$(sed -n 's/^\thw_counters\/sent_pkts=//p' "$CLIENT_OUT")
[ -n "$sent" ] || { cat "$CLIENT_OUT"; fail "no -W line for hw_counters/sent_pkts"; }
# 216 writes of 4096 bytes at MTU 4096: one request packet each (plus retransmissions, if any).
within "hw_counters/sent_pkts of $VL_DEV1 (216 writes)" "$sent" 216 $((216 + 216 / 50 + 32))
expect_contains "$VL_PT_OUT/49-counters.json" '"hw_counters/sent_pkts": '"$sent"
expect_contains "$CLIENT_OUT" "gates passed: --max-counter hw_counters/retry_exceeded_err=0"
vl_pair vl_write_bw "-s 4096 -n 50" "--max-counter hw_counters/sent_pkts=1" || true
[ "$CLIENT_RC" = 3 ] || fail "--max-counter sent_pkts=1: the client exited $CLIENT_RC, expected 3"
expect_contains "$CLIENT_OUT" "gate failed: NIC counter hw_counters/sent_pkts rose by"
vl_pair vl_write_bw "-s 4096 -n 50" "--max-counter hw_counters/no_such_counter=0" || true
[ "$CLIENT_RC" = 3 ] || fail "--max-counter on a missing counter: exit $CLIENT_RC, expected 3"
expect_contains "$CLIENT_OUT" "the port has no counter 'hw_counters/no_such_counter'"

step "--cpu_util -D 2: perftest's CPU_Util column on each row"
vl_pair_ok vl_write_bw "-s 4096 -D 2 --cpu_util"
expect_contains "$CLIENT_OUT" "MsgRate[Mpps]    CPU_Util[%]"
u=$(row_field "$CLIENT_OUT" 6)
echo "$u" | grep -Eq '^[0-9]+\.[0-9]{2}$' || { cat "$CLIENT_OUT"; fail "no CPU_Util value in the row: '$u'"; }
echo "CPU_Util: $u %"

step "perftest's options we do not support are refused by name"
for o in "--odp" "-z" "--write_with_imm" "--use_ooo" "-H" "--run_infinitely -n 5"; do
    rc=0
    # shellcheck disable=SC2086
    vl_send_bw $o >"$TMPDIR/r.out" 2>&1 || rc=$?
    [ "$rc" = 2 ] || { cat "$TMPDIR/r.out"; fail "vl_send_bw $o exited $rc, expected 2"; }
    expect_contains "$TMPDIR/r.out" "$(echo "$o" | cut -d' ' -f1)"
    echo "vl_send_bw $o: $(head -n 1 "$TMPDIR/r.out")"
done
echo "run_infinitely, out_json, margins and refusals behave as documented"
