# shellcheck shell=sh
# Helpers of the vl_* benchmark scenarios (tests/guest/4N-*.sh), on top of lib.sh: start a tool
# as server on rxe0 and client on rxe1 with the same options, and read its result rows.
#
#   . "$VL_TESTS/lib.sh"
#   . "$VL_TESTS/perftest-lib.sh"
#   vl_pair vl_write_bw "-s 4096 -n 200"       # then SERVER_OUT, CLIENT_OUT, SERVER_RC, CLIENT_RC

# -u 20: a ~4 s ack timeout. Under QEMU TCG perftest's default (-u 14, ~67 ms) fails runs at
# random: emulation stalls longer than that.
VL_PT_COMMON=${VL_PT_COMMON:-"-u 20"}
_vl_pt_port=${VL_PT_PORT:-18700}

# Output of the scenarios worth keeping (JSON reports): on the host's share.
VL_PT_OUT=${VL_REPO:-.}/.vm-out/perftest
mkdir -p "$VL_PT_OUT"

# next_port: a fresh out-of-band port per pair, so a server that lingers cannot block the next.
next_port() {
    _vl_pt_port=$((_vl_pt_port + 1))
    PORT=$_vl_pt_port
}

# vl_pair TOOL "OPTIONS" ["CLIENT-ONLY OPTIONS"] ["SERVER-ONLY OPTIONS"]: the server on
# $VL_DEV0, the client on $VL_DEV1 connecting to $VL_ADDR0, both with OPTIONS. Returns like
# server_client (0 only when both sides exited 0).
vl_pair() {
    next_port
    server_client "$PORT" \
        "$1 -d $VL_DEV0 $VL_PT_COMMON -p $PORT $2 ${4:-}" \
        "$1 -d $VL_DEV1 $VL_PT_COMMON -p $PORT $2 ${3:-} $VL_ADDR0"
}

# vl_pair_ok TOOL "OPTIONS" ["CLIENT-ONLY"] ["SERVER-ONLY"]: vl_pair that must succeed.
vl_pair_ok() {
    vl_pair "$@" || fail "$1 $2: the pair failed (outputs above)"
}

# sizes FROM TO: the powers of two FROM..TO, comma-separated.
sizes() {
    awk -v a="$1" -v b="$2" 'BEGIN { s = ""; for (x = a; x <= b; x *= 2) s = s (s == "" ? "" : ",") x; print s }'
}

# rows FILE: the result rows of a report (lines after a '#bytes' header that start with a number).
rows() {
    awk '/#bytes/ { hdr = 1; next } hdr && $1 ~ /^[0-9]+$/ { print }' "$1"
}

# row_field FILE N: field N of the first result row (empty when there is no row).
row_field() {
    rows "$1" | awk -v n="$2" 'NR == 1 { print $n; exit }'
}

# header_value FILE KEY: the value of a header line ' KEY   : value' (up to a tab).
header_value() {
    awk -v k="$2" '{ split($0, a, ":"); key = a[1]; gsub(/^ +| +$/, "", key) }
        key == k { sub(/^[^:]*: */, ""); sub(/\t.*/, ""); print; exit }' "$1"
}

# expect_row FILE WHAT: FILE holds a result row that measured something: its 4th field (BW
# average, or t_max of a latency row) or its 5th (message rate, or t_typical) is positive. Both
# count because perftest's two decimals print a slow small-message run (8 B atomics at a few
# hundred per second on a busy host) as 0.00 MiB/s beside a non-zero message rate. Prints the row.
expect_row() {
    _er=$(rows "$1" | sed -n 1p)
    [ -n "$_er" ] || fail "$2: no result row in $1"
    _er_v=$(echo "$_er" | awk '{ print ($4 > 0 || (NF >= 5 && $5 > 0)) ? 1 : 0 }')
    [ "$_er_v" = 1 ] || fail "$2: a zero row: $_er"
    echo "$2: $_er"
}

# expect_no_row FILE WHAT: FILE holds the header but no result row (a passive server).
expect_no_row() {
    [ -z "$(rows "$1")" ] || fail "$2: unexpected result rows in $1"
    expect_contains "$1" "#bytes"
}

# within LABEL GOT LOW HIGH: LOW <= GOT <= HIGH, or fail.
within() {
    if [ "$2" -lt "$3" ] || [ "$2" -gt "$4" ]; then
        fail "$1: $2 is outside [$3, $4]"
    fi
    echo "$1: $2 in [$3, $4]"
}

# wait_header FILE PID: until FILE shows a result header ('#bytes': the run is under way), at
# most 60 s (scaled); fails if process PID exits first. For faults injected mid-run: a fixed
# sleep is too short on a loaded machine.
wait_header() {
    _wh_rc=0
    wait_for 60 "$2" grep -q '#bytes' "$1" 2>/dev/null || _wh_rc=$?
    case $_wh_rc in
        0) ;;
        2) cat "$1"; fail "the tool (pid $2) exited before its run started" ;;
        *) cat "$1"; fail "no run under way after $(scaled 60) s" ;;
    esac
}

# wait_traffic DEV PKTS PID: until DEV has sent PKTS more RoCE packets than when called (rxe's
# hw_counters/sent_pkts), at most 60 s (scaled); fails if process PID exits first. Past the
# warm-up's few hundred packets this means the measured run is under way.
wait_traffic() {
    _wt_f=/sys/class/infiniband/$1/ports/1/hw_counters/sent_pkts
    [ -r "$_wt_f" ] || fail "wait_traffic: no $_wt_f"
    _wt_end=$(($(cat "$_wt_f") + $2))
    _wt_rc=0
    wait_for 60 "$3" _vl_sent_at_least "$_wt_f" "$_wt_end" || _wt_rc=$?
    case $_wt_rc in
        0) ;;
        2) fail "the tool (pid $3) exited before sending $2 packets" ;;
        *) fail "$1 sent fewer than $2 packets in $(scaled 60) s" ;;
    esac
}
_vl_sent_at_least() { [ "$(cat "$1")" -ge "$2" ]; }

# signal_exit SIG PID SECS CODE OUT TEXT: send SIG to PID, which must exit with CODE within SECS
# seconds with TEXT in its output OUT (printed).
signal_exit() {
    kill "-$1" "$2"
    _se=0
    _vl_watch "$2" "$3" || _se=$?
    cat "$5"
    [ "$_se" = "$4" ] || fail "pid $2 exited $_se on SIG$1, expected $4"
    expect_contains "$5" "$6"
}

# ---- side by side with perftest (scenarios 76, 77) ---------------------------------------------

# ib_pair TOOL "OPTIONS": perftest's pair as vl_pair runs ours (-x 1: perftest picks no RoCE v2
# GID by itself; -F: its cycle-counter check fails on an emulated CPU).
ib_pair() {
    next_port
    server_client "$PORT" \
        "$1 -d $VL_DEV0 -x 1 -F $VL_PT_COMMON -p $PORT $2" \
        "$1 -d $VL_DEV1 -x 1 -F $VL_PT_COMMON -p $PORT $2 $VL_ADDR0" \
        || fail "$1 $2: perftest's pair failed (outputs above)"
}

# shape FILE: the lines from the first column header on, each as its kind (SEP, HDR, ROW, a
# title such as "Local results:", BLANK, "LIST UNIT" for a sample list's head, SAMPLES for its
# lines, however many); other lines (notes, warnings) are left out.
shape() {
    awk '/#bytes/ { on = 1 }
         !on { next }
         /^-{87}$/ { print "SEP"; next }
         /#bytes/ { print "HDR"; next }
         /^ [0-9]+ / { print "ROW"; next }
         /results:/ { sub(/^ +/, ""); sub(/ +$/, ""); print; next }
         /^#, / { print "LIST " $2; next }
         /^[0-9]+, / { print "SAMPLES"; next }
         /^ *$/ { print "BLANK"; next }' "$1" | awk '$0 != prev || $0 != "SAMPLES" { print } { prev = $0 }'
}

# same_shape WHAT VL_FILE IB_FILE
same_shape() {
    if [ "$(shape "$2")" != "$(shape "$3")" ]; then
        echo "--- ours ($2):"; shape "$2"; echo "--- perftest's ($3):"; shape "$3"
        fail "$1: our output's shape differs from perftest's"
    fi
    echo "$1: the same shape as perftest's ($(shape "$2" | tr '\n' ' '))"
}
