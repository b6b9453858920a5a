#!/bin/sh
# bench-guest.sh — the guest half of scripts/bench-vs-perftest: runs every vl_* tool and its
# perftest counterpart (ib_*) with the same parameters, alternating which goes first, and
# records each run's raw output, exit statuses and parsed result row. POSIX sh + busybox awk;
# no statistics here (vl_benchstat does them on the host, from runs.tsv).
#
#   scripts/softroce-vm run -- sh scripts/bench-guest.sh --out .vm-out/bench-DATE [OPTIONS]
#   sh scripts/bench-guest.sh --list          (works on the host too: the row names)
#
# Writes into --out DIR (on the host's share):
#   tests.tsv   one line per row: name kind runner ours perftest params server-cmd client-cmd
#   runs.tsv    one line per run (columns in RUNS_HEADER below), broken runs included
#   env.txt     key=value: guest kernel, CPU, perftest version, guest timings
#   raw/        every run's server and client output, and server_client's log
#   progress.log  the lines printed on the console
set -eu
# shellcheck source=scripts/lib/args.sh
. "$(dirname "$0")/lib/args.sh"

usage() {
    cat <<'EOF'
Usage: sh scripts/bench-guest.sh --out DIR [--runs N] [--only NAME,NAME] [--quick] [--sweep]
                                 [--max-extra K] [--small-iters N] [--rows FILE] [--remote NODE]
       sh scripts/bench-guest.sh --list [--quick] [--sweep] [--small-iters N] [--rows FILE]

Runs inside the SoftRoCE guest (scripts/softroce-vm run). For every row: N rounds, each a run of
ours and a run of perftest's tool, ours first in odd rounds and perftest first in even rounds
(A B B A ...). A row with fewer than N rounds in which both runs were valid gets extra rounds,
at most K (default: N). Every run has its own out-of-band TCP port and timeouts. Each side of a
run is started under busybox's `time -v` (wait4(2)'s rusage of the child: peak RSS, user and
system CPU time), recorded in runs.tsv. Progress (run k of n, elapsed, estimated time left)
goes to the console as "[bench]" lines.

  --out DIR      where to write tests.tsv, runs.tsv, env.txt and raw/ (created)
  --runs N       rounds per row (default 5)
  --only LIST    comma-separated row names (see --list)
  --quick        512 iterations instead of 1000 (a smoke run)
  --sweep        the size sweep instead of one size per tool: every bw tool at 2 B, 64 B, 4 KiB,
                 64 KiB and 1 MiB, every lat tool at 2 B, 64 B, 4 KiB and 64 KiB, atomics at 8 B;
                 rows are named TOOL_BYTES (write_bw_65536)
  --max-extra K  extra rounds allowed per row for broken runs (default: N)
  --small-iters N  iterations of the sweep's bandwidth rows of at most 4 KiB (default: as the
                 others). scripts/bench-vs-perftest --deterministic gives 10000: 1000 2-byte
                 messages last 22 ms of guest time, in which one timer tick or one periodic look
                 at the peer moves a run by 0.5 %; in 220 ms it is noise below 0.1 %
  --list         print the rows (name kind ours perftest parameters) and exit
  --remote NODE  in the cluster (scripts/softroce-vm cluster run): every server runs on NODE
                 (by ssh), every client here, both on rxe0, across the fabric; rows with a
                 runner other than pair (procs2) are left out
  --rows FILE    take the rows from FILE (lines NAME|KIND|RUNNER|OURS|PERFTEST|PARAMETERS, as
                 in bench_rows below) instead of the built-in table: for one-off experiments
EOF
}

OUT='' RUNS=5 ONLY='' QUICK='' MAX_EXTRA='' LIST='' ROWS='' SWEEP='' REMOTE='' SMALL_ITERS=''
while [ $# -gt 0 ]; do
    case $1 in
        -h | --help) usage; exit 0 ;;
        --out) OUT=${2:?--out needs a directory}; shift ;;
        --runs) RUNS=${2:?--runs needs a number}; shift ;;
        --only) ONLY=${2:?--only needs a list}; shift ;;
        --quick) QUICK=1 ;;
        --sweep) SWEEP=1 ;;
        --max-extra) MAX_EXTRA=${2:?--max-extra needs a number}; shift ;;
        --small-iters) SMALL_ITERS=${2:?--small-iters needs a number}; shift ;;
        --list) LIST=1 ;;
        --rows) ROWS=${2:?--rows needs a file}; shift ;;
        --remote) REMOTE=${2:?--remote needs a node}; shift ;;
        *) echo "bench-guest: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
    shift
done
need_count bench-guest --runs "$RUNS" 1
[ -z "$SMALL_ITERS" ] || need_count bench-guest --small-iters "$SMALL_ITERS" 10
[ -n "$MAX_EXTRA" ] || MAX_EXTRA=$RUNS
case $MAX_EXTRA in *[!0-9]*) echo "bench-guest: --max-extra needs a number" >&2; exit 2 ;; esac

# ---- the rows -----------------------------------------------------------------------------------
#
# One line per row: NAME|KIND|RUNNER|OURS|PERFTEST|PARAMETERS
#   KIND: bw (BW average in MiB/s, higher is better), rate (MsgRate in Mpps, higher is better:
#   for atomics, whose BW average of 8-byte messages prints as 0.02-0.07 MiB/s, two decimals that
#   would make a ratio of quantisation steps) or lat (t_typical in usec, lower is better).
#   RUNNER: how one run is made; "pair" = run_pair below (server on rxe0, client on rxe1).
#   PARAMETERS: given to both tools on both sides, after COMMON and -p PORT.
# The parameters make the *effective* settings equal, not only the command lines (each run's
# header is recorded and the host compares them):
#   -Q 1  perftest turns CQ moderation off (1) for messages over 8 KiB unless -Q is given; ours
#         keeps its default of 100, so the 64 KiB rows pin it to 1 for both.
#   -I 0  perftest finds no inline support for rxe in its vendor table ("Device not recognized
#         to implement inline feature") and ignores -I; ours inlines by default (16 B for bw,
#         64 B for lat). Both without inline. Read and atomic tools have no inline (ours rejects -I).
# COMMON: GID 1 (rxe's IPv4-mapped RoCE v2 GID; perftest needs it), a ~4 s ack timeout (under
# TCG perftest's default -u 14 fails runs with retry-exceeded), -F (perftest: no CPU-frequency
# warning; accepted and ignored by ours).
COMMON='-x 1 -u 20 -F'

bench_rows() {
    if [ -n "$ROWS" ]; then
        grep -v '^#' "$ROWS" | grep -v '^ *$'
        return
    fi
    # --quick: 512, not fewer: perftest's send tools cap the receive queue (-r, 512) at -n.
    if [ -n "$QUICK" ]; then n=512; else n=1000; fi
    if [ -n "$SWEEP" ]; then
        sweep_rows
        return
    fi
    cat <<EOF
write_bw|bw|pair|vl_write_bw|ib_write_bw|-s 65536 -n $n -Q 1 -I 0
read_bw|bw|pair|vl_read_bw|ib_read_bw|-s 65536 -n $n -Q 1
send_bw|bw|pair|vl_send_bw|ib_send_bw|-s 65536 -n $n -Q 1 -I 0
atomic_bw|rate|pair|vl_atomic_bw|ib_atomic_bw|-n $n
write_lat|lat|pair|vl_write_lat|ib_write_lat|-s 2 -n $n -I 0
read_lat|lat|pair|vl_read_lat|ib_read_lat|-s 2 -n $n
send_lat|lat|pair|vl_send_lat|ib_send_lat|-s 2 -n $n -I 0
send_lat_ev|lat|pair|vl_send_lat|ib_send_lat|-s 2 -n $n -I 0 -e
read_lat_ev|lat|pair|vl_read_lat|ib_read_lat|-s 2 -n $n -e
EOF
    # ==== ADDITIONAL ROWS GO HERE ===============================================================
    # The multi-process row: ours `vl_write_bw --procs 2` against two ib_write_bw pairs running at
    # once on ports PORT and PORT+1, each side pinned with taskset to cores 0 and 1, their BW
    # averages and MsgRates summed. run_procs2 is defined here, with the row, so that this block
    # stays the only edit of the script (a --rows FILE naming the runner procs2 is not supported).
    echo "write_bw_procs2|bw|procs2|vl_write_bw|ib_write_bw|-s 65536 -n $n -Q 1 -I 0"
    # run_procs2 BIN PARAMS PORT PREFIX: run_pair's contract. Ours: run_pair with --procs 2 (its
    # workers use PORT and PORT+1). perftest: two pairs at once; PREFIX.client holds client 0's
    # header and one row in perftest's layout with the sums (so classify() and the host's report
    # need no change); every raw output goes to PREFIX.log.
    run_procs2() {
        SEQ=$((SEQ + 1)) # reserve PORT+1
        case $1 in
            vl_*)
                run_pair "$1" "$2 --procs 2" "$3" "$4"
                return 0
                ;;
        esac
        R_SERVER_RC=- R_CLIENT_RC=-
        _p2_dir=$(mktemp -d "$TMPDIR/procs2.XXXXXX")
        _p2_q=$(($3 + 1))
        # shellcheck disable=SC2086 # COMMON and PARAMS are lists of options
        taskset -c 0 "$1" -d "$DEV0" $COMMON -p "$3" $2 >"$_p2_dir/server0" 2>&1 </dev/null &
        _p2_s0=$!
        # shellcheck disable=SC2086
        taskset -c 1 "$1" -d "$DEV0" $COMMON -p "$_p2_q" $2 >"$_p2_dir/server1" 2>&1 </dev/null &
        _p2_s1=$!
        if ! wait_port "$3" "$SC_LISTEN_TIMEOUT" "$_p2_s0" >>"$4.log" 2>&1 \
            || ! wait_port "$_p2_q" "$SC_LISTEN_TIMEOUT" "$_p2_s1" >>"$4.log" 2>&1; then
            kill_tree TERM "$_p2_s0"
            kill_tree TERM "$_p2_s1"
            wait "$_p2_s0" "$_p2_s1" 2>/dev/null || true
            cat "$_p2_dir"/server* >"$4.server" 2>/dev/null || : >"$4.server"
            : >"$4.client"
            rm -rf "$_p2_dir"
            return 0
        fi
        # shellcheck disable=SC2086
        taskset -c 0 "$1" -d "$DEV1" $COMMON -p "$3" $2 "$ADDR0" >"$_p2_dir/client0" 2>&1 </dev/null &
        _p2_c0=$!
        # shellcheck disable=SC2086
        taskset -c 1 "$1" -d "$DEV1" $COMMON -p "$_p2_q" $2 "$ADDR0" >"$_p2_dir/client1" 2>&1 </dev/null &
        _p2_c1=$!
        R_CLIENT_RC=0 R_SERVER_RC=0
        for _p2_pid in "$_p2_c0" "$_p2_c1"; do
            _p2_rc=0
            _vl_watch "$_p2_pid" "$SC_CLIENT_TIMEOUT" || _p2_rc=$?
            [ "$R_CLIENT_RC" != 0 ] || R_CLIENT_RC=$_p2_rc
        done
        for _p2_pid in "$_p2_s0" "$_p2_s1"; do
            _p2_rc=0
            _vl_watch "$_p2_pid" "$SC_SERVER_TIMEOUT" || _p2_rc=$?
            [ "$R_SERVER_RC" != 0 ] || R_SERVER_RC=$_p2_rc
        done
        for _p2_f in server0 server1 client0 client1; do
            printf -- '--- %s\n' "$_p2_f"
            cat "$_p2_dir/$_p2_f"
        done >>"$4.log"
        # Each side's file: pair 0's header with the QPs of both pairs (as ours counts them). The
        # client's then holds the sums of the two result rows: no row when one lacks a row, and
        # 0.00 when one printed 0.00 or worse (perftest's failed clock calibration), so that
        # classify() calls the run broken as it would call a single pair.
        # shellcheck disable=SC2016 # an awk program, expanded by awk
        _p2_qps='NR == FNR && /Number of qps/ && !done { split($0, a, ":"); sub(/: *[0-9]+/, ": " 2 * (a[2] + 0)); done = 1 }'
        awk "$_p2_qps { print }" "$_p2_dir/server0" "$_p2_dir/server1" >"$4.server"
        awk "/#bytes/ { print; exit } $_p2_qps { print }" "$_p2_dir/client0" >"$4.client"
        awk '/#bytes/ { hdr = 1; next } hdr && $1 ~ /^[0-9]+$/ && NF >= 5 { print; hdr = 0 }' \
            "$_p2_dir/client0" "$_p2_dir/client1" \
            | awk 'function ok(v) { return v ~ /^[0-9]+(\.[0-9]+)?$/ && v + 0 > 0 }
                { b = $1; it = $2; pk += $3; av += $4; mr += $5; n++; if (!ok($4) || !ok($5)) bad = 1 }
                END {
                    if (n != 2) exit
                    if (bad) { pk = 0; av = 0; mr = 0 }
                    printf " %-7s    %-10s       %-7.2f            %-7.2f\t\t     %-7.6f\n", b, it, pk, av, mr
                }' >>"$4.client"
        rm -rf "$_p2_dir"
        return 0
    }
    # ============================================================================================
}

# sweep_rows: the --sweep table. -Q pins CQ moderation to what perftest picks by itself for the
# size (100 up to 8 KiB, 1 above), so that both tools run with the same; -I 0 as above. The 2 and
# 64 B rows compare MsgRate (kind rate): their BW average prints as 0.01-0.5 MiB/s, two decimals
# that would make the ratio a ratio of rounding steps.
sweep_rows() {
    for _t in write read send; do
        for _s in 2 64 4096 65536 1048576; do
            if [ "$_s" -le 8192 ]; then _q=100; else _q=1; fi
            if [ "$_s" -le 64 ]; then _k=rate; else _k=bw; fi
            case $_t in read) _i='' ;; *) _i=' -I 0' ;; esac
            # 1 MiB: at most 128 messages (the default tx depth): 1000 of them take minutes
            # under TCG on a loaded host.
            _n=$n
            if [ "$_s" -ge 1048576 ] && [ "$n" -gt 128 ]; then _n=128; fi
            if [ "$_s" -le 4096 ] && [ -n "$SMALL_ITERS" ]; then _n=$SMALL_ITERS; fi
            echo "${_t}_bw_$_s|$_k|pair|vl_${_t}_bw|ib_${_t}_bw|-s $_s -n $_n -Q $_q$_i"
        done
    done
    echo "atomic_bw_8|rate|pair|vl_atomic_bw|ib_atomic_bw|-n ${SMALL_ITERS:-$n}"
    for _t in write read send; do
        for _s in 2 64 4096 65536; do
            case $_t in read) _i='' ;; *) _i=' -I 0' ;; esac
            echo "${_t}_lat_$_s|lat|pair|vl_${_t}_lat|ib_${_t}_lat|-s $_s -n $n$_i"
        done
    done
    echo "atomic_lat_8|lat|pair|vl_atomic_lat|ib_atomic_lat|-n $n"
    # Event mode (-e): each side sleeps until its completion event instead of spinning, so the
    # round trip is the work on its path and nothing else; the latency rows of the deterministic
    # mode (docs/measurement.md). Write latency has no event mode (it polls memory), in either
    # tool.
    for _t in send read; do
        for _s in 2 4096; do
            case $_t in read) _i='' ;; *) _i=' -I 0' ;; esac
            echo "${_t}_lat_ev_$_s|lat|pair|vl_${_t}_lat|ib_${_t}_lat|-s $_s -n $n$_i -e"
        done
    done
    echo "atomic_lat_ev_8|lat|pair|vl_atomic_lat|ib_atomic_lat|-n $n -e"
}

if [ -n "$LIST" ]; then
    bench_rows | awk -F'|' '{ printf "%-16s %-4s %-14s %-14s %s\n", $1, $2, $4, $5, $6 }'
    exit 0
fi

[ -n "$OUT" ] || { echo "bench-guest: --out DIR is required (see --help)" >&2; exit 2; }
: "${VL_TESTS:?not in the SoftRoCE guest (VL_TESTS unset): run through scripts/softroce-vm}"
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"

DEV0=${VL_DEV0:-rxe0} DEV1=${VL_DEV1:-rxe1} ADDR0=${VL_ADDR0:-192.168.77.1}
# The cost of a run: every side runs under busybox's time -v (its rusage lines end the output).
busybox time -v true >/dev/null 2>&1 || { echo "bench-guest: busybox has no 'time -v' applet" >&2; exit 2; }
TIMEV='busybox time -v'
DONE=0
TMPDIR=$(mktemp -d /tmp/bench.XXXXXX)
export TMPDIR
mkdir -p "$OUT/raw"
# Our binaries run from the guest's RAM, as perftest's do (its root file system is in RAM):
# run from the 9p share, each start faults the binary's pages in over 9p, which under TCG cost
# our servers 1-3 s of CPU time that perftest's never pay (docs/benchmarks.md, *Cost of a tool*).
BIN=$TMPDIR/bin
mkdir -p "$BIN"
for _b in $(bench_rows | awk -F'|' '$4 ~ /^vl_/ { print $4 }' | sort -u); do
    _p=$(command -v "$_b") || continue
    cp "$_p" "$BIN/" || { echo "bench-guest: cannot copy $_p into $BIN" >&2; exit 1; }
done
PATH=$BIN:$PATH
export PATH
PROGRESS=$OUT/progress.log
: >"$PROGRESS"

# Every run gets its own out-of-band port: a server left in TIME_WAIT or still exiting can never
# block the next one.
PORT_BASE=19100
SEQ=0
# Timeouts (seconds): for the server to listen, for the client to finish, for the server to exit
# after the client. A 1000 x 64 KiB run takes 3-6 s under TCG.
export SC_LISTEN_TIMEOUT=30 SC_CLIENT_TIMEOUT=180 SC_SERVER_TIMEOUT=30

say() { printf '[bench] %s\n' "$*" | tee -a "$PROGRESS"; }

# ---- one run ------------------------------------------------------------------------------------

# run_pair BIN PARAMS PORT PREFIX: server on DEV0, client on DEV1, both with COMMON PARAMS.
# Contract of every runner: leaves PREFIX.server, PREFIX.client (outputs) and PREFIX.log, and sets
# R_SERVER_RC and R_CLIENT_RC ("-" when that side never ran; 124 when killed by a timeout).
run_pair() {
    R_SERVER_RC=- R_CLIENT_RC=-
    SERVER_OUT='' CLIENT_OUT='' SERVER_RC='' CLIENT_RC=''
    server_client "$3" "$TIMEV $1 -d $DEV0 $COMMON -p $3 $2" "$TIMEV $1 -d $DEV1 $COMMON -p $3 $2 $ADDR0" \
        >"$4.log" 2>&1 || true
    [ -n "$SERVER_RC" ] && R_SERVER_RC=$SERVER_RC
    [ -n "$CLIENT_RC" ] && R_CLIENT_RC=$CLIENT_RC
    if [ -n "$SERVER_OUT" ] && [ -f "$SERVER_OUT" ]; then cp "$SERVER_OUT" "$4.server"; else : >"$4.server"; fi
    if [ -n "$CLIENT_OUT" ] && [ -f "$CLIENT_OUT" ]; then cp "$CLIENT_OUT" "$4.client"; else : >"$4.client"; fi
    [ -n "$SERVER_OUT" ] && rm -rf "${SERVER_OUT%/*}"
    return 0
}

# run_remote BIN PARAMS PORT PREFIX: run_pair's contract across two hosts of the cluster: the
# server on $REMOTE (ssh; tests/cluster/lib.sh), the client here, both on rxe0.
run_remote() {
    R_SERVER_RC=- R_CLIENT_RC=-
    : >"$4.client"
    on "$REMOTE" "exec $TIMEV $1 -d rxe0 $COMMON -p $3 $2" >"$4.server" 2>&1 </dev/null &
    _rr_pid=$!
    if ! (wait_remote_port "$REMOTE" "$3" "$SC_LISTEN_TIMEOUT" "$1") >"$4.log" 2>&1; then
        kill_tree TERM "$_rr_pid"
        R_SERVER_RC=0
        _vl_watch "$_rr_pid" 5 || R_SERVER_RC=$?
        return 0
    fi
    R_CLIENT_RC=0
    run_timeout "$SC_CLIENT_TIMEOUT" sh -c "$TIMEV $1 -d rxe0 $COMMON -p $3 $2 $REMOTE" \
        >"$4.client" 2>&1 </dev/null || R_CLIENT_RC=$?
    R_SERVER_RC=0
    _vl_watch "$_rr_pid" "$SC_SERVER_TIMEOUT" || R_SERVER_RC=$?
}

# cost FILE: what busybox's `time -v` appended to a side's output, as "RSS_KIB<TAB>CPU_SECONDS"
# (user + system), or "-<TAB>-" when it is not there (the procs2 runner, a killed run). busybox
# prints ru_maxrss (already KiB) converted as if it counted 4 KiB pages: 4 times the peak RSS
# (checked against /proc/PID/status's VmHWM: 4468 kB printed as 18480), so it is divided by 4.
cost() {
    awk -F': ' '/^\tMaximum resident set size \(kbytes\)/ { rss = int($2 / 4) }
        /^\tUser time \(seconds\)/ { u = $2; got++ } /^\tSystem time \(seconds\)/ { sy = $2; got++ }
        END { printf "%s\t%s\n", (rss == "" ? "-" : rss), (got == 2 ? sprintf("%.2f", u + sy) : "-") }' "$1"
}

# classify KIND BYTES ITERS FILE: the first result row of a client report, checked. Prints
# STATUS<TAB>REASON<TAB>9 fields (the row's columns 1-9, "-" when absent).
#   bw row:  #bytes #iterations BW-peak BW-average MsgRate
#   lat row: #bytes #iterations t_min t_max t_typical t_avg t_stdev p99 p99.9
# A row is broken unless the fields the report uses are positive finite numbers (perftest prints
# 0.00, inf or -nan when its cycle-counter calibration fails) and it is for BYTES x ITERS.
classify() {
    awk -v kind="$1" -v wb="$2" -v wi="$3" '
        function num(v) { return v ~ /^[0-9]+(\.[0-9]+)?$/ && v + 0 > 0 }
        function bad(i, name) { if (!num(f[i])) why = why (why == "" ? "" : ", ") name " " f[i] }
        /#bytes/ { hdr = 1; next }
        hdr && !got && $1 ~ /^[0-9]+$/ { got = 1; for (i = 1; i <= 9; i++) f[i] = (i <= NF ? $i : "-") }
        END {
            if (!got) { printf "broken\tno result row"; for (i = 1; i <= 9; i++) printf "\t-"; print ""; exit }
            why = ""
            if (kind == "bw") { bad(4, "BW average"); bad(5, "MsgRate") }
            else if (kind == "rate") bad(5, "MsgRate")
            else { bad(5, "t_typical"); bad(6, "t_avg"); bad(8, "99% percentile") }
            if (why != "") why = "printed " why
            if (wb != "" && f[1] != wb) why = why (why == "" ? "" : "; ") "row for " f[1] " bytes, not " wb
            if (wi != "" && f[2] != wi) why = why (why == "" ? "" : "; ") "row for " f[2] " iterations, not " wi
            printf "%s\t%s", (why == "" ? "ok" : "broken"), (why == "" ? "-" : why)
            for (i = 1; i <= 9; i++) printf "\t%s", f[i]
            print ""
        }' "$4"
}

# settings FILE: the header settings that must match between the tools, as "key=value ..."
# (fixed order; keys a tool does not print are left out).
settings() {
    awk 'BEGIN { FS = "\t+"; n = split("qps conn tx rx cqmod mtu inline outs", order, " ") }
        /#bytes/ { exit }
        {
            for (i = 1; i <= NF; i++) {
                p = $i
                if (index(p, ":") == 0) continue
                k = p; sub(/:.*/, "", k); gsub(/^ +| +$/, "", k)
                v = p; sub(/^[^:]*:/, "", v); gsub(/^ +| +$/, "", v); sub(/\[B\]$/, "", v)
                if (k == "Number of qps") s["qps"] = v
                else if (k == "Connection type") s["conn"] = v
                else if (k == "TX depth") s["tx"] = v
                else if (k == "RX depth") s["rx"] = v
                else if (k == "CQ Moderation") s["cqmod"] = v
                else if (k == "Mtu") s["mtu"] = v
                else if (k == "Max inline data") s["inline"] = v
                else if (k == "Outstand reads") s["outs"] = v
            }
        }
        END {
            o = ""
            for (i = 1; i <= n; i++) if (order[i] in s) o = o (o == "" ? "" : " ") order[i] "=" s[order[i]]
            print (o == "" ? "-" : o)
        }' "$1"
}

# one_run TEST KIND RUNNER BIN PARAMS ROUND SLOT SIDE: a run, recorded in runs.tsv.
# Sets LAST_STATUS (ok/broken).
RUNS_HEADER='seq	test	round	slot	side	tool	port	server_rc	client_rc	secs	status	reason	c1	c2	c3	c4	c5	c6	c7	c8	c9	calibration_warning	client_settings	server_settings	raw	client_rss_kib	client_cpu_s	server_rss_kib	server_cpu_s'
one_run() {
    SEQ=$((SEQ + 1))
    _port=$((PORT_BASE + SEQ))
    _raw=raw/$(printf '%03d' "$SEQ")-$1-r$6-$8-$4
    _t0=$(_vl_now)
    "run_$3" "$4" "$5" "$_port" "$OUT/$_raw"
    _t1=$(_vl_now)
    _secs=$(awk -v a="$_t0" -v b="$_t1" 'BEGIN { printf "%.1f", (b - a) / 100 }')
    _bytes=$(echo " $5 " | sed -n 's/.* -s \([0-9][0-9]*\) .*/\1/p')
    [ -n "$_bytes" ] || case $4 in *atomic*) _bytes=8 ;; esac
    _iters=$(echo " $5 " | sed -n 's/.* -n \([0-9][0-9]*\) .*/\1/p')
    _cls=$(classify "$2" "$_bytes" "$_iters" "$OUT/$_raw.client")
    _status=${_cls%%"	"*}
    _rest=${_cls#*"	"}
    _reason=${_rest%%"	"*}
    _cols=${_rest#*"	"}
    # Exit statuses come first: a run is broken when either side failed, whatever it printed.
    _why=''
    case $R_SERVER_RC in
        0) ;;
        -) _why='the server never started listening; no client run' ;;
        124) _why='the server was killed by the timeout' ;;
        *) _why="the server exited with $R_SERVER_RC" ;;
    esac
    case $R_CLIENT_RC in
        0 | -) ;;
        124) _why="${_why:+$_why; }the client was killed after ${SC_CLIENT_TIMEOUT}s" ;;
        *) _why="${_why:+$_why; }the client exited with $R_CLIENT_RC" ;;
    esac
    if [ -n "$_why" ]; then
        _status=broken
        if [ "$_reason" != - ]; then _reason="$_why; $_reason"; else _reason=$_why; fi
    fi
    _calib=-
    if grep -q 'Correlation coefficient' "$OUT/$_raw.client" "$OUT/$_raw.server" 2>/dev/null; then
        _calib=$(grep -h 'Correlation coefficient' "$OUT/$_raw.client" "$OUT/$_raw.server" | head -n 1 | tr -d '\t')
    fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' \
        "$SEQ" "$1" "$6" "$7" "$8" "$4" "$_port" "$R_SERVER_RC" "$R_CLIENT_RC" "$_secs" \
        "$_status" "$_reason" "$_cols" "$_calib" \
        "$(settings "$OUT/$_raw.client")" "$(settings "$OUT/$_raw.server")" "$_raw" \
        "$(cost "$OUT/$_raw.client")" "$(cost "$OUT/$_raw.server")" \
        >>"$OUT/runs.tsv"
    case $2 in
        bw) _val=$(echo "$_cols" | cut -f4) _unit=MiB/s ;;
        rate) _val=$(echo "$_cols" | cut -f5) _unit=Mpps ;;
        *) _val=$(echo "$_cols" | cut -f5) _unit=usec ;;
    esac
    DONE=$((DONE + 1))
    _el=$(( ($(_vl_now) - _bench_t0) / 100 ))
    _left=$(( TOTAL > DONE ? _el * (TOTAL - DONE) / DONE : 0 ))
    _pr="[$DONE/$TOTAL ${_el}s, ~${_left}s left]"
    if [ "$_status" = ok ]; then
        say "$_pr $SEQ  $1 round $6 ($7/2) $4: $_val $_unit (${_secs}s)"
    else
        say "$_pr $SEQ  $1 round $6 ($7/2) $4: BROKEN: $_reason (${_secs}s; $_raw.*)"
    fi
    LAST_STATUS=$_status
}

# ---- neighbours -----------------------------------------------------------------------------------
# rxe looks up its peer's MAC address in the kernel's neighbour table for every packet it sends,
# and nothing rxe does confirms an entry learnt by ARP: some 30 s after it was learnt (the kernel's
# base_reachable_time, randomised 0.5-1.5x) it goes stale, and for the next 5 s (DELAY, then
# PROBE until the ARP reply) every packet takes the slow path (neigh_resolve_output, an Ethernet
# header built per packet). Measured in deterministic time, write_bw 4 KiB: 91.3 MiB/s in that
# state against 95.1 in the other, for either tool; which runs of a sweep fall into it depends
# only on when they run. A hardware RoCE NIC resolves the address once, when the QP connects.
# Both entries are pinned (PERMANENT) for the bench and, after it (also when interrupted), put
# back as they were: an entry someone had made permanent keeps its address, any other is
# forgotten and learnt again by ARP at the next packet.
netdev_of() { cat "/sys/class/infiniband/$1/ports/1/gid_attrs/ndevs/1" 2>/dev/null; }
NEIGH_PINNED='' NEIGH_UNDO=''
# pin_one ADDR NETDEV MAC: pins ADDR on NETDEV to MAC; NEIGH_UNDO gets what undoes it.
pin_one() {
    _was=$(/usr/sbin/ip neigh show "$1" dev "$2" 2>/dev/null |
        awk '/PERMANENT/ { for (i = 1; i < NF; i++) if ($i == "lladdr") { print $(i + 1); exit } }')
    /usr/sbin/ip neigh replace "$1" lladdr "$3" dev "$2" nud permanent || return 1
    NEIGH_UNDO="$NEIGH_UNDO $1 $2 ${_was:--}"
}
pin_neighbours() {
    _nd0=$(netdev_of "$DEV0") _nd1=$(netdev_of "$DEV1")
    [ -n "$_nd0" ] && [ -n "$_nd1" ] && [ "$_nd0" != "$_nd1" ] || return 0
    _a1=$(/usr/sbin/ip -4 -o addr show dev "$_nd1" | awk '{ sub("/.*", "", $4); print $4; exit }')
    [ -n "$_a1" ] || return 0
    pin_one "$ADDR0" "$_nd1" "$(cat "/sys/class/net/$_nd0/address")" || return 0
    pin_one "$_a1" "$_nd0" "$(cat "/sys/class/net/$_nd1/address")" || return 0
    NEIGH_PINNED="$ADDR0 on $_nd1, $_a1 on $_nd0"
}
# Puts the pinned entries back: a permanent one as it was, any other forgotten.
unpin_neighbours() {
    # shellcheck disable=SC2086 # "ADDR NETDEV WAS ..."
    set -- $NEIGH_UNDO
    while [ $# -ge 3 ]; do
        if [ "$3" = - ]; then
            /usr/sbin/ip neigh del "$1" dev "$2" 2>/dev/null || true
        else
            /usr/sbin/ip neigh replace "$1" lladdr "$3" dev "$2" nud permanent 2>/dev/null || true
        fi
        shift 3
    done
    NEIGH_UNDO=''
}
if [ -z "$REMOTE" ]; then
    # The EXIT trap runs on INT and TERM too only if they end the shell through exit.
    trap unpin_neighbours EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    pin_neighbours
fi

# ---- environment ----------------------------------------------------------------------------------

{
    echo "guest_kernel=$(uname -r)"
    echo "guest_cpu=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)"
    echo "guest_vcpus=$(grep -c '^processor' /proc/cpuinfo)"
    echo "guest_mem_kib=$(awk '/^MemTotal/ { print $2 }' /proc/meminfo)"
    echo "guest_clocksource=$(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null)"
    echo "perftest_version=$(ib_write_bw --version 2>&1 | sed -n '1s/^Version: *//p')"
    echo "verbs_lab_version=$(vl_write_bw --version 2>&1 | sed -n 1p)"
    echo "busybox=$(busybox 2>&1 | sed -n '1s/ (.*//p')"
    echo "rxe0_mtu=$(ibv_devinfo -d "$DEV0" 2>/dev/null | awk '/active_mtu/ { print $2; exit }')"
    echo "rxe0_vendor_id=$(ibv_devinfo -d "$DEV0" 2>/dev/null | awk '/vendor_id/ { print $2; exit }')"
    echo "sweep=${SWEEP:-0}"
    echo "runs=$RUNS"
    echo "max_extra=$MAX_EXTRA"
    echo "quick=${QUICK:-0}"
    echo "common=$COMMON"
    echo "neighbours_pinned=${NEIGH_PINNED:-no}"
    echo "guest_start_uptime=$(cut -d' ' -f1 /proc/uptime)"
} >"$OUT/env.txt"

# ---- the rows to run --------------------------------------------------------------------------------

bench_rows >"$TMPDIR/rows"
if [ -n "$ONLY" ]; then
    for _n in $(echo "$ONLY" | tr ',' ' '); do
        grep -q "^$_n|" "$TMPDIR/rows" || { echo "bench-guest: no row '$_n' (see --list)" >&2; exit 2; }
    done
    awk -F'|' -v only=",$ONLY," 'index(only, "," $1 ",")' "$TMPDIR/rows" >"$TMPDIR/rows.only"
    mv "$TMPDIR/rows.only" "$TMPDIR/rows"
fi
if [ -n "$REMOTE" ]; then
    # Across two hosts: the pair rows, each run by run_remote.
    awk -F'|' -v OFS='|' '$3 == "pair" { $3 = "remote"; print }' "$TMPDIR/rows" >"$TMPDIR/rows.remote"
    mv "$TMPDIR/rows.remote" "$TMPDIR/rows"
    DEV0=rxe0 DEV1=rxe0 ADDR0=$REMOTE
fi
for _t in $(cut -d'|' -f4,5 "$TMPDIR/rows" | tr '|' ' '); do
    require_bin "$_t"
done

: >"$OUT/tests.tsv"
while IFS='|' read -r name kind runner ours theirs params; do
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$kind" "$runner" "$ours" "$theirs" "$params" \
        "TOOL -d $DEV0 $COMMON -p PORT $params" "TOOL -d $DEV1 $COMMON -p PORT $params $ADDR0" \
        >>"$OUT/tests.tsv"
done <"$TMPDIR/rows"
printf '%s\n' "$RUNS_HEADER" >"$OUT/runs.tsv"

# ---- warm-up (not recorded in runs.tsv) ---------------------------------------------------------------
# The first run of a boot pays for loading the binaries over 9p and the first QP set-up.
say "warm-up: one short run of each tool of the first row (not counted)"
IFS='|' read -r _name _kind _runner _ours _theirs _params <"$TMPDIR/rows"
for _bin in "$_ours" "$_theirs"; do
    SEQ=$((SEQ + 1))
    "run_$_runner" "$_bin" "$(echo " $_params " | sed 's/ -n [0-9]* / -n 50 /')" \
        $((PORT_BASE + SEQ)) "$OUT/raw/$(printf '%03d' "$SEQ")-warmup-$_bin"
    say "warm-up $_bin: server exit $R_SERVER_RC, client exit $R_CLIENT_RC"
done

# ---- rounds --------------------------------------------------------------------------------------------
# Round-major: every row's round r before any row's round r+1, so a slow spell of the host (other
# builds, other guests) spreads over all rows instead of spoiling one. Odd rounds run ours first,
# even rounds perftest first: A B, B A, A B, ...

# round R ROWSFILE: one round of every row in ROWSFILE; appends to $TMPDIR/valid "NAME R" for
# rounds in which both runs were valid.
round() {
    # The rows come on fd 3: nothing a run starts can eat them from stdin.
    while IFS='|' read -r name kind runner ours theirs params <&3; do
        if [ $(($1 % 2)) -eq 1 ]; then
            one_run "$name" "$kind" "$runner" "$ours" "$params" "$1" 1 ours
            _a=$LAST_STATUS
            one_run "$name" "$kind" "$runner" "$theirs" "$params" "$1" 2 perftest
            _b=$LAST_STATUS
        else
            one_run "$name" "$kind" "$runner" "$theirs" "$params" "$1" 1 perftest
            _b=$LAST_STATUS
            one_run "$name" "$kind" "$runner" "$ours" "$params" "$1" 2 ours
            _a=$LAST_STATUS
        fi
        if [ "$_a" = ok ] && [ "$_b" = ok ]; then echo "$name $1" >>"$TMPDIR/valid"; fi
    done 3<"$2"
}

: >"$TMPDIR/valid"
_bench_t0=$(_vl_now)
# Runs planned (extra rounds for broken runs come on top), for the progress lines.
TOTAL=$(( $(wc -l <"$TMPDIR/rows") * RUNS * 2 ))
r=0
while [ "$r" -lt "$RUNS" ]; do
    r=$((r + 1))
    say "round $r of $RUNS ($([ $((r % 2)) -eq 1 ] && echo 'ours first' || echo 'perftest first'))"
    round "$r" "$TMPDIR/rows"
done
# Extra rounds for rows with fewer than RUNS comparable rounds (a broken run on either side).
extra=0
while [ "$extra" -lt "$MAX_EXTRA" ]; do
    : >"$TMPDIR/short"
    while IFS='|' read -r name rest; do
        if [ "$(grep -c "^$name " "$TMPDIR/valid")" -lt "$RUNS" ]; then
            echo "$name|$rest" >>"$TMPDIR/short"
        fi
    done <"$TMPDIR/rows"
    [ -s "$TMPDIR/short" ] || break
    extra=$((extra + 1))
    r=$((r + 1))
    say "extra round $r (broken runs left fewer than $RUNS comparable rounds): $(cut -d'|' -f1 "$TMPDIR/short" | tr '\n' ' ')"
    round "$r" "$TMPDIR/short"
done
_bench_t1=$(_vl_now)

{
    echo "rounds=$r"
    echo "extra_rounds=$extra"
    echo "bench_secs=$(awk -v a="$_bench_t0" -v b="$_bench_t1" 'BEGIN { printf "%.1f", (b - a) / 100 }')"
    echo "guest_end_uptime=$(cut -d' ' -f1 /proc/uptime)"
} >>"$OUT/env.txt"
_broken=$(awk -F'\t' 'NR > 1 && $11 != "ok"' "$OUT/runs.tsv" | wc -l)
say "done: $SEQ runs (2 warm-up), $((r)) rounds ($extra extra), $_broken broken; results in $OUT"
rm -rf "$TMPDIR"
sync
