#!/bin/sh
# QoS and rdma_cm for the eight vl_* tools. -S, --tclass and --flow_label reach each QP's
# address vector: read back from the device with ibv_query_qp (the tools print it on stderr
# when a QoS option is given), on both sides, with a per-QP flow label list. rxe keeps no SL
# (on RoCE it only selects a VLAN priority): the tools say that -S 3 did not reach the device.
# Then -R: all eight tools connect their QPs through rdma_cm (payloads validated where the tool
# can), with -T and per-QP flow labels read back, and the faults end by name within a bound: a
# peer without -R, a client whose source address is on the other device, no server at all, and
# perftest's ib_write_bw -R (whose -R moves its control exchange onto rdma_cm too: no meeting).
# timeout: 420
# slow: all eight tools with -R plus the QoS and fault runs, each a server/client pair under TCG
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"
# shellcheck source=tests/guest/perftest-lib.sh
. "$VL_TESTS/perftest-lib.sh"

# expect_av FILE QP SL TCLASS FLOW: FILE holds QP's address vector as the device reports it.
expect_av() {
    expect_contains "$1" "QP $2 ("
    grep -E "QP $2 \(0x[0-9a-f]+\) address vector \(ibv_query_qp\): sl $3, traffic class $4, flow label $5," "$1" \
        || fail "$1: QP $2's address vector is not sl $3, traffic class $4, flow label $5"
}

step "QoS: -S 3 --tclass 32 --flow_label 0x12345,0x54321 on two QPs, read back on both sides"
vl_pair_ok vl_write_bw "-q 2 -n 100 --validate -S 3 --tclass 32 --flow_label 0x12345,0x54321"
expect_row "$CLIENT_OUT" "vl_write_bw QoS client"
for f in "$SERVER_OUT" "$CLIENT_OUT"; do
    expect_av "$f" 0 0 32 0x12345
    expect_av "$f" 1 0 32 0x54321
    expect_contains "$f" "(set: -S 3; the device does not hold it)"
done

step "QoS on a latency tool: --tclass 184 (DSCP 46, EF) and one flow label"
vl_pair_ok vl_read_lat "-n 100 --tclass 184 --flow_label 7"
expect_av "$CLIENT_OUT" 0 0 184 0x7

step "QoS on UD: the address handle carries them (no QP address vector to read); bytes validated"
vl_pair_ok vl_send_bw "-c UD -s 1024 -n 200 --validate -S 1 --tclass 32 --flow_label 9"
expect_row "$SERVER_OUT" "vl_send_bw UD QoS receiver"
expect_contains "$CLIENT_OUT" "UD, the address vector is in its address handle (sl 1, traffic class 32, flow label 0x9 given)"

step "-R: the eight tools connect their QPs through rdma_cm"
for t in write_bw read_bw send_bw atomic_bw write_lat read_lat send_lat atomic_lat; do
    v=--validate
    case $t in atomic_*) v= ;; esac
    vl_pair_ok "vl_$t" "-R -n 50 $v"
    expect_row "$CLIENT_OUT" "vl_$t -R client"
    expect_contains "$CLIENT_OUT" "$(printf 'rdma_cm QPs\t : ON')"
    expect_not_contains "$CLIENT_OUT" "validation failed"
done

step "-R with completion events (-e) and two QPs of send bandwidth"
vl_pair_ok vl_send_bw "-R -e -q 2 -n 100 --validate"
expect_row "$SERVER_OUT" "vl_send_bw -R -e receiver"

step "-R with two QPs, -T 96 and a flow label per QP: the CM's address vector, read back"
vl_pair_ok vl_write_bw "-R -q 2 -n 100 --validate -T 96 --flow_label 0x11,0x22"
expect_av "$CLIENT_OUT" 0 0 96 0x11
expect_av "$CLIENT_OUT" 1 0 96 0x22
expect_av "$SERVER_OUT" 1 0 "[0-9]+" 0x22

step "-R --retry_count 3 --tclass 32 --bind_source_ip $VL_ADDR1: accepted, tclass overrides"
vl_pair_ok vl_send_bw "-R -n 100 --retry_count 3 --tclass 32" "--bind_source_ip $VL_ADDR1"
# (Without --flow_label the CM's own flow label stays: on RoCE v2 a hash of the two ports.)
expect_av "$CLIENT_OUT" 0 0 32 "0x[0-9a-f]+"

step "-R against a server without -R: refused by the HELLO, naming -R"
next_port
server_client "$PORT" "vl_write_bw -d $VL_DEV0 $VL_PT_COMMON -p $PORT -n 50 --wait 30" \
    "vl_write_bw -d $VL_DEV1 $VL_PT_COMMON -p $PORT -n 50 -R --wait 30 $VL_ADDR0" \
    && fail "a -R client ran against a server without -R"
expect_contains "$CLIENT_OUT" "connection through rdma_cm (-R)"

step "-R client whose source address is on the other device: named, both sides end"
next_port
SC_SERVER_TIMEOUT=60 server_client "$PORT" "vl_write_bw -d $VL_DEV0 $VL_PT_COMMON -p $PORT -n 50 -R --wait 30" \
    "vl_write_bw -d $VL_DEV1 $VL_PT_COMMON -p $PORT -n 50 -R --bind_source_ip $VL_ADDR0 --wait 30 $VL_ADDR0" \
    && fail "a client bound to the other device's address ran"
expect_contains "$CLIENT_OUT" "but this side runs on $VL_DEV1 port 1"

out=$TMPDIR/r.out
step "-R client with no server: an error naming the server within 30 s"
next_port
expect_fail_within 30 "no server" vl_write_bw -d "$VL_DEV1" -p "$PORT" -R -n 10 --wait 10 "$VL_ADDR0"
expect_contains "$out" "connecting to the server $VL_ADDR0:$PORT"

step "perftest's ib_write_bw -R server, vl_write_bw -R client: no common protocol, ends by name"
next_port
ib_write_bw -d "$VL_DEV0" -R -p "$PORT" -n 10 >"$TMPDIR/ib.out" 2>&1 &
ibpid=$!
wait_cm_port "$PORT" 30 "$ibpid"
expect_fail_within 30 "vl client vs ib server" vl_write_bw -d "$VL_DEV1" -p "$PORT" -R -n 10 --wait 10 "$VL_ADDR0"
expect_contains "$out" "connecting to the server $VL_ADDR0:$PORT"
kill_tree TERM "$ibpid"
