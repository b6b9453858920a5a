#!/bin/sh
# A drop-in for perftest: for each of the eight tools, ib_* and vl_* run with the same flags on
# both sides, and one parser written for perftest's output (header "key : value" lines, the
# address and GID lines, the column header, the result rows) reads all four outputs. Client and
# server of ours must show the same fields in the same order as perftest's, with the same values
# where both sides know them (title, QPs, transport, depths, MTU, link, GID index, rdma_cm, data
# exchange, #bytes, #iterations, the number of columns). Our own extra header lines (CPU
# pinned) may follow perftest's. Numbers are not compared (see 47-perftest-vs-ib).
# timeout: 420
# slow: eight tool pairs, each run twice (ib_* and vl_*) with the same flags on both sides
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"
# shellcheck source=tests/guest/perftest-lib.sh
. "$VL_TESTS/perftest-lib.sh"

for t in write_bw read_bw send_bw atomic_bw write_lat read_lat send_lat atomic_lat; do
    require_bin "ib_$t"
    require_bin "vl_$t"
done

# shape FILE: what a perftest parser finds in FILE, one token a line. Values are kept for the
# keys whose value both implementations must agree on; our own keys are dropped.
shape() {
    awk '
        /^\* Waiting for client to connect\.\.\. \*$/ { print "banner"; next }
        /^ +[A-Za-z_]+( [A-Za-z_]+)* (BW|Latency) Test$/ { sub(/^ +/, ""); print "title " $0; next }
        /^ (local|remote) address: LID [0-9a-fx]+ QPN 0x[0-9a-f]+ PSN 0x[0-9a-f]+( OUT 0x[0-9a-f]+)?( RKey 0x[0-9a-f]+ VAddr 0x[0-9a-f]+)?$/ {
            print $1 " address " (index($0, "OUT") ? "out " : "") (index($0, "RKey") ? "rkey" : ""); next }
        /^ GID: [0-9][0-9]+(:[0-9][0-9]+){15}$/ { print "gid"; next }
        /^ #bytes / { gsub(/MB\/sec/, "MiB/sec"); sub(/ +$/, ""); print "columns" $0; hdr = 1; next }
        hdr && $1 ~ /^[0-9]+$/ { print "row fields=" NF " bytes=" $1 " iterations=" $2; next }
        /^ [A-Za-z][-A-Za-z0-9_ .*]*[A-Za-z*] *\t? *: / {
            line = $0
            while (match(line, /[A-Za-z][-A-Za-z0-9_ .*]*[A-Za-z*] *\t? *: *[^\t]*/)) {
                kv = substr(line, RSTART, RLENGTH); line = substr(line, RSTART + RLENGTH)
                k = kv; sub(/ *\t? *:.*/, "", k); v = kv; sub(/^[^:]*: */, "", v); sub(/ +$/, "", v)
                if (k == "CPU pinned" || k == "Processes") continue
                if (k ~ /^(Max inline data|Outstand reads|RX depth|PCIe relax order|ibv_wr\* API)$/) v = "*"
                print "key " k " = " v
            }
        }
    ' "$1"
}

# compare WHAT IB_FILE VL_FILE
compare() {
    shape "$2" >"$TMPDIR/ib.shape"
    shape "$3" >"$TMPDIR/vl.shape"
    if ! diff -u "$TMPDIR/ib.shape" "$TMPDIR/vl.shape" >"$TMPDIR/shape.diff"; then
        cat "$TMPDIR/shape.diff"
        echo "--- ib output:"; cat "$2"
        echo "--- vl output:"; cat "$3"
        fail "$1: a perftest parser reads different fields (- perftest, + ours)"
    fi
    grep -c . "$TMPDIR/ib.shape" | awk -v w="$1" '{ print w ": the same " $1 " fields" }'
}

# pair TOOL ARGS: ib_TOOL then vl_TOOL with the same flags; compare client and server outputs.
pair() {
    next_port
    server_client "$PORT" "ib_$1 -d $VL_DEV0 -x 1 -F -u 20 -p $PORT $2" \
        "ib_$1 -d $VL_DEV1 -x 1 -F -u 20 -p $PORT $2 $VL_ADDR0" >"$TMPDIR/ib.log" 2>&1 \
        || { cat "$TMPDIR/ib.log"; fail "ib_$1 $2 failed"; }
    cp "$SERVER_OUT" "$TMPDIR/ib.server"
    cp "$CLIENT_OUT" "$TMPDIR/ib.client"
    next_port
    server_client "$PORT" "vl_$1 -d $VL_DEV0 -x 1 -F -u 20 -p $PORT $2" \
        "vl_$1 -d $VL_DEV1 -x 1 -F -u 20 -p $PORT $2 $VL_ADDR0" >"$TMPDIR/vl.log" 2>&1 \
        || { cat "$TMPDIR/vl.log"; fail "vl_$1 $2 failed"; }
    compare "$1 $2 (client)" "$TMPDIR/ib.client" "$CLIENT_OUT"
    compare "$1 $2 (server)" "$TMPDIR/ib.server" "$SERVER_OUT"
}

step "bandwidth tools"
pair write_bw "-s 4096 -n 100"
pair write_bw "-s 4096 -n 50 -q 2"
pair read_bw "-s 4096 -n 100"
pair send_bw "-s 4096 -n 100"
pair atomic_bw "-n 100"
pair write_bw "-s 4096 -n 100 -b"

step "latency tools"
pair write_lat "-s 2 -n 100"
pair read_lat "-s 2 -n 100"
pair send_lat "-s 2 -n 100"
pair atomic_lat "-n 100"

step "--output=UNITS: one bare number on each side"
for spec in "write_bw bandwidth" "read_bw message_rate" "write_lat latency"; do
    # shellcheck disable=SC2086 # two words: the tool and the units
    set -- $spec
    next_port
    server_client "$PORT" "vl_$1 -d $VL_DEV0 -x 1 -u 20 -p $PORT -n 100 --output=$2" \
        "vl_$1 -d $VL_DEV1 -x 1 -u 20 -p $PORT -n 100 --output=$2 $VL_ADDR0" >/dev/null 2>&1 \
        || fail "vl_$1 --output=$2 failed"
    for f in "$CLIENT_OUT" "$SERVER_OUT"; do
        # write_lat's server measures its side too; the others print the client's number.
        if ! grep -Eqx '[0-9]+\.[0-9]{6}' "$f" || [ "$(grep -c . "$f")" != 1 ]; then
            cat "$f"
            fail "vl_$1 --output=$2: not one bare number in $f"
        fi
    done
    echo "vl_$1 --output=$2: client $(cat "$CLIENT_OUT"), server $(cat "$SERVER_OUT")"
done
echo "a perftest parser reads ours as it reads perftest's, on both sides"
