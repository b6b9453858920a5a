#!/bin/sh
# syscalls-guest.sh — how many system calls each vl_* tool and its perftest counterpart (ib_*)
# make per iteration, and how many to start and stop (docs/benchmarks.md, *System calls*).
#
#   scripts/softroce-vm run -- sh scripts/syscalls-guest.sh [--only ROW,ROW] [-n N] [--out DIR]
#
# Every side of every run goes under `strace -f -c` (all threads counted), once with N iterations
# and once with 3N. The difference divided by 2N is the per-iteration count: the start-up and the
# tear-down are the same in both runs and cancel out. What is left of the N-run is the fixed cost.
# Counts, not times: strace slows every system call, which can change how often a tool that waits
# (a sched_yield loop) goes round, so those rows are a bound on the idle case, not a measurement
# of it. Runs inside the SoftRoCE guest; POSIX sh + busybox awk.
set -eu
# shellcheck source=scripts/lib/args.sh
. "$(dirname "$0")/lib/args.sh"

usage() {
    cat <<'EOF'
Usage: sh scripts/syscalls-guest.sh [--only ROW,ROW] [-n N] [--out DIR]

Inside the SoftRoCE guest (scripts/softroce-vm run). For each row, ours and perftest's tool run
under `strace -f -c` on both sides with N and with 3N iterations (server on rxe0, client on rxe1,
same parameters); prints per-iteration system calls by name and the fixed start/stop cost.

  --only LIST   comma-separated rows (default: all): write_bw read_bw send_bw atomic_bw
                write_lat read_lat send_lat atomic_lat
  -n N          iterations of the short run (default 500; the long run is 3N)
  --out DIR     keep every strace summary and tool output there (default: a temporary directory)
EOF
}

ONLY='' N=500 OUT=''
while [ $# -gt 0 ]; do
    case $1 in
        -h | --help) usage; exit 0 ;;
        --only) ONLY=${2:?--only needs a list}; shift ;;
        -n) N=${2:?-n needs a number}; shift ;;
        --out) OUT=${2:?--out needs a directory}; shift ;;
        *) echo "syscalls-guest: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
    shift
done
need_count syscalls-guest -n "$N" 10
: "${VL_TESTS:?not in the SoftRoCE guest (VL_TESTS unset): run through scripts/softroce-vm}"
command -v strace >/dev/null || { echo "syscalls-guest: no strace in the guest (GUEST_PKGS in scripts/softroce-vm)" >&2; exit 1; }
# shellcheck source=tests/guest/lib.sh
. "$VL_TESTS/lib.sh"

# NAME|OURS|PERFTEST|PARAMETERS (both tools, both sides; -n is added). The settings are those of
# scripts/bench-guest.sh's default rows, so that the effective settings match.
ROWS='write_bw|vl_write_bw|ib_write_bw|-s 65536 -Q 1 -I 0
read_bw|vl_read_bw|ib_read_bw|-s 65536 -Q 1
send_bw|vl_send_bw|ib_send_bw|-s 65536 -Q 1 -I 0
atomic_bw|vl_atomic_bw|ib_atomic_bw|
write_lat|vl_write_lat|ib_write_lat|-s 2 -I 0
read_lat|vl_read_lat|ib_read_lat|-s 2
send_lat|vl_send_lat|ib_send_lat|-s 2 -I 0
atomic_lat|vl_atomic_lat|ib_atomic_lat|'
COMMON='-x 1 -u 20 -F'
DEV0=${VL_DEV0:-rxe0} DEV1=${VL_DEV1:-rxe1} ADDR0=${VL_ADDR0:-192.168.77.1}

TMPDIR=$(mktemp -d /tmp/syscalls.XXXXXX)
export TMPDIR
[ -n "$OUT" ] || OUT=$TMPDIR/out
mkdir -p "$OUT"
# Ours run from the guest's RAM, as perftest's do (see scripts/bench-guest.sh).
BIN=$TMPDIR/bin
mkdir -p "$BIN"
for _b in $(printf '%s\n' "$ROWS" | awk -F'|' '{ print $2 }'); do cp "$(command -v "$_b")" "$BIN/"; done
PATH=$BIN:$PATH
export SC_LISTEN_TIMEOUT=60 SC_CLIENT_TIMEOUT=600 SC_SERVER_TIMEOUT=60
PORT=19400

# counts FILE: strace -c's summary as "SYSCALL CALLS" lines (the total line left out).
counts() {
    awk '$NF ~ /^[a-z_0-9]+$/ && $4 ~ /^[0-9]+$/ && $NF != "total" { print $NF, $4 }' "$1"
}

# one TOOL PARAMS ITERS TAG: a run of TOOL, both sides under strace; the summaries in OUT/TAG.*
one() {
    PORT=$((PORT + 1))
    _st="strace -f -qq -c -o $OUT/$4"
    if ! server_client "$PORT" "$_st.server.strace $1 -d $DEV0 $COMMON -p $PORT -n $3 $2" \
        "$_st.client.strace $1 -d $DEV1 $COMMON -p $PORT -n $3 $2 $ADDR0" >"$OUT/$4.log" 2>&1; then
        cat "$OUT/$4.log"
        echo "syscalls-guest: the run $4 failed (its output is above)" >&2
        exit 1
    fi
}

# report ROW SIDE TOOL: per-iteration and fixed counts of TOOL's SIDE from the N and 3N runs.
report() {
    counts "$OUT/$1.$3.n.$2.strace" >"$TMPDIR/short"
    counts "$OUT/$1.$3.3n.$2.strace" >"$TMPDIR/long"
    awk -v n="$N" -v row="$1" -v side="$2" -v tool="$3" '
        FNR == NR { s[$1] = $2; names[$1] = 1; next }
        { l[$1] = $2; names[$1] = 1 }
        END {
            per = 0; fixed = 0; top = ""
            for (k in names) {
                d = (l[k] - s[k]) / (2 * n); per += d; fixed += s[k]
                if (d >= 0.05) top = top sprintf(" %s %.2f", k, d)
            }
            fixed -= per * n
            printf "%-10s %-6s %-14s %8.2f %8.0f  %s\n", row, side, tool, per, fixed, top
        }' "$TMPDIR/short" "$TMPDIR/long"
}

printf '%-10s %-6s %-14s %8s %8s  %s\n' row side tool per-iter fixed 'per iteration, by call (>= 0.05)'
printf '%s\n' "$ROWS" | while IFS='|' read -r name ours theirs params; do
    case ",${ONLY:-$name}," in *",$name,"*) ;; *) continue ;; esac
    for tool in "$ours" "$theirs"; do
        one "$tool" "$params" "$N" "$name.$tool.n"
        one "$tool" "$params" "$((3 * N))" "$name.$tool.3n"
        for side in client server; do report "$name" "$side" "$tool"; done
    done
done
echo "syscalls-guest: strace summaries and outputs in $OUT"
