#!/bin/sh
# QoS and rdma_cm for the eight vl_* tools. -S, --tclass and --flow_label reach each QP's
# address vector: read back from the device with ibv_query_qp (the tools print it on stderr
# when a QoS option is given), on both sides, with a per-QP flow label list. rxe keeps no SL
# (on RoCE it only selects a VLAN priority): the tools say that -S 3 did not reach the device.
# timeout: 420
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
