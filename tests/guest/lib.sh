# shellcheck shell=sh
# Helpers for the guest scenarios tests/guest/NN-name.sh (POSIX sh; busybox sh in the guest).
#
# `scripts/softroce-vm test` runs each scenario with `sh FILE` in the repository root, in its own
# process group (killed when the scenario ends), with a private TMPDIR and this environment:
#   VL_DEV0=rxe0 VL_ADDR0=192.168.77.1   VL_DEV1=rxe1 VL_ADDR1=192.168.77.2   VL_GUEST=1
#   VL_REPO (repository root), VL_TESTS (this directory), VL_SCENARIO (scenario name)
#   PATH=/opt/vl-bin:$VL_REPO/target/release:/usr/sbin:/usr/bin (/opt/vl-bin: RAM copies of the
#   binaries of target/release, without debug sections), ulimit -l unlimited
# A scenario starts with
#   set -eu
#   . "$VL_TESTS/lib.sh"
# and fails by exiting non-zero: call `fail MESSAGE`, or let a helper return non-zero under set -e.
# A '# timeout: SECS' line overrides the default per-scenario timeout (300 s).
#
# Beware: busybox sh runs its own applets before PATH (ip, timeout, ...); use /sbin/ip for
# iproute2's ip, and run_timeout below instead of `timeout`.

# ---- messages ---------------------------------------------------------------------------------

# step TEXT: a heading in the scenario's log.
step() { printf '\n== %s\n' "$*"; }

# fail MESSAGE: end the scenario as failed.
fail() {
    printf 'FAIL: %s\n' "$*" >&2
    exit 1
}

# ---- time and processes -----------------------------------------------------------------------

# _vl_now: centiseconds since boot.
_vl_now() { awk '{ printf "%d\n", $1 * 100 }' /proc/uptime; }

# _vl_alive PID: true while PID exists and is not a zombie.
_vl_alive() {
    [ -r "/proc/$1/stat" ] || return 1
    _va_state=$(sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)
    [ -n "$_va_state" ] && [ "$_va_state" != Z ]
}

# kill_tree SIGNAL PID: send SIGNAL to PID and all its descendants (children first).
kill_tree() {
    for _kt_child in $(_vl_children "$2"); do
        kill_tree "$1" "$_kt_child"
    done
    kill "-$1" "$2" 2>/dev/null || true
}

# _vl_children PID: the PIDs whose parent is PID (field 4 of /proc/N/stat, after "(comm)").
_vl_children() {
    cat /proc/[0-9]*/stat 2>/dev/null \
        | awk -v p="$1" '{ pid = $1; sub(/^.*\) /, ""); if ($2 == p) print pid }'
}

# _vl_watch PID SECS: wait for the background job PID; after SECS seconds kill its process tree.
# Returns the job's exit status, or 124 when it had to be killed. The watchdog sleeps once for
# the whole bound: it does not poll, because a poll costs processes (awk, sed, sleep) that take
# the guest's CPU from the job it watches — in deterministic time (VL_VM_ACCEL=icount) a poll
# every 0.1 s took several ms of each 100 from a benchmark, more when it fell into the run.
_vl_watch() {
    _w_pid=$1
    _w_flag=${TMPDIR:-/tmp}/.vl-timed-out.$1
    rm -f "$_w_flag"
    (
        sleep "$2" || exit 0
        _vl_alive "$_w_pid" || exit 0
        : >"$_w_flag"
        kill_tree TERM "$_w_pid"
        sleep 2
        kill_tree KILL "$_w_pid"
    ) 2>/dev/null &
    # 2>/dev/null: the watchdog's shell says "Terminated" when its sleep is killed below and it
    # gets to run before it is killed too (on a busy host it does): a line on the job's stderr.
    _w_watchdog=$!
    _w_rc=0
    wait "$_w_pid" 2>/dev/null || _w_rc=$? # 2>/dev/null: no "Terminated" notice from sh
    kill_tree TERM "$_w_watchdog"          # its sleep, then the watchdog itself
    wait "$_w_watchdog" 2>/dev/null || true
    if [ -e "$_w_flag" ]; then
        rm -f "$_w_flag"
        return 124
    fi
    return "$_w_rc"
}

# run_timeout SECS CMD [ARGS...]: run CMD, killing it (and its children) after SECS seconds.
# Returns CMD's exit status, or 124 on timeout. (busybox's `timeout` leaves grandchildren.)
run_timeout() {
    _rt_secs=$1
    shift
    "$@" &
    _vl_watch $! "$_rt_secs"
}

# ---- servers and clients ----------------------------------------------------------------------

# _vl_listening PORT: true when a TCP socket listens on PORT (IPv4 or IPv6). Reads /proc, as
# busybox has no ss.
_vl_listening() {
    _l_hex=$(printf ':%04X' "$1")
    for _l_f in /proc/net/tcp /proc/net/tcp6; do
        [ -r "$_l_f" ] || continue
        if awk -v h="$_l_hex" 'NR > 1 && $4 == "0A" && substr($2, length($2) - 4) == h { f = 1 }
                END { exit !f }' "$_l_f"; then
            return 0
        fi
    done
    return 1
}

# _vl_cm_listening PORT: true when an rdma_cm id listens on PORT. rdma_cm listeners (rping -s,
# lesson 13) open no TCP socket; iproute2's `rdma resource show cm_id` lists them.
_vl_cm_listening() {
    rdma resource show cm_id 2>/dev/null \
        | grep -q -E "state LISTEN .*src-addr [^ ]*:$1( |\$)"
}

# scaled SECS: SECS times VL_TIME_SCALE (softroce-vm test sets it from the host's load), for the
# waits that only bound setup — a server starting to listen, workers appearing — not for the
# bounds a scenario checks the tools against.
scaled() { echo $(($1 * ${VL_TIME_SCALE:-1})); }

# wait_for SECS PID CMD...: run CMD every 0.1 s until it succeeds (return 0). Gives up after SECS
# seconds, scaled (return 1), or as soon as process PID has exited (return 2; "-" for no
# process). The one bounded wait of the scenarios: callers say what they waited for.
wait_for() {
    _wf_end=$(($(_vl_now) + $(scaled "$1") * 100))
    _wf_pid=$2
    shift 2
    until "$@"; do
        # A process that did it and then exited, between the two checks, did it.
        [ "$_wf_pid" = - ] || _vl_alive "$_wf_pid" || { "$@" && return 0; return 2; }
        [ "$(_vl_now)" -lt "$_wf_end" ] || return 1
        sleep 0.1
    done
}

# _vl_wait_listen CHECK WHAT PORT [TIMEOUT=60] [PID]: wait until `CHECK PORT` is true (TIMEOUT is
# scaled).
_vl_wait_listen() {
    _wp_check=$1 _wp_what=$2 _wp_port=$3 _wp_secs=${4:-60}
    _wp_rc=0
    wait_for "$_wp_secs" "${5:--}" "$_wp_check" "$_wp_port" || _wp_rc=$?
    case $_wp_rc in
        0) ;;
        2) echo "wait_port: the server (pid $5) exited before listening on $_wp_what port $_wp_port" >&2 ;;
        *) echo "wait_port: nothing listens on $_wp_what port $_wp_port after $(scaled "$_wp_secs")s" >&2 ;;
    esac
    return "$_wp_rc"
}

# wait_port PORT [TIMEOUT=60] [PID]: wait until something listens on TCP PORT. Fails after
# TIMEOUT seconds, or as soon as process PID (the server, if given) has exited.
wait_port() { _vl_wait_listen _vl_listening TCP "$@"; }

# wait_cm_port PORT [TIMEOUT=60] [PID]: as wait_port, for an rdma_cm listener on PORT.
wait_cm_port() { _vl_wait_listen _vl_cm_listening rdma_cm "$@"; }

# _vl_show LABEL STATUS COMMAND FILE: print one side's output under a heading.
_vl_show() {
    printf -- '--- %s (exit %s): %s\n' "$1" "$2" "$3"
    if [ -s "$4" ]; then cat "$4"; else echo "(no output)"; fi
}

# server_client PORT "SERVER CMD" "CLIENT CMD"
#   Starts the server in the background, waits until it listens on TCP PORT, runs the client
#   with a timeout, then waits (bounded) for the server to exit. Prints both outputs, labelled.
#   Returns 0 when both exited 0; otherwise says which side failed and returns 1.
#   Afterwards: SERVER_OUT and CLIENT_OUT name files holding each side's output (stdout+stderr),
#   SERVER_RC and CLIENT_RC hold the exit statuses (124: killed by a timeout).
#   Knobs (environment): SC_WAIT (wait_port; wait_cm_port for rdma_cm servers),
#   SC_LISTEN_TIMEOUT (60 s, for the server to listen), SC_CLIENT_TIMEOUT
#   (120 s), SC_SERVER_TIMEOUT (30 s, for the server to exit once the client is done); the
#   defaults are scaled (VL_TIME_SCALE), values that are set are not.
server_client() {
    [ $# -eq 3 ] || fail "server_client: usage: server_client PORT 'SERVER CMD' 'CLIENT CMD'"
    _sc_port=$1 _sc_server=$2 _sc_client=$3
    _sc_dir=$(mktemp -d "${TMPDIR:-/tmp}/sc.XXXXXX")
    SERVER_OUT=$_sc_dir/server.out
    CLIENT_OUT=$_sc_dir/client.out
    SERVER_RC=
    CLIENT_RC=
    : >"$CLIENT_OUT"
    echo "server_client: server: $_sc_server"
    sh -c "$_sc_server" >"$SERVER_OUT" 2>&1 </dev/null &
    _sc_spid=$!
    if ! "${SC_WAIT:-wait_port}" "$_sc_port" "${SC_LISTEN_TIMEOUT:-60}" "$_sc_spid"; then
        kill_tree TERM "$_sc_spid"
        SERVER_RC=0
        _vl_watch "$_sc_spid" 5 || SERVER_RC=$?
        _vl_show server "$SERVER_RC" "$_sc_server" "$SERVER_OUT"
        echo "server_client: FAILED: the server never listened on port $_sc_port; the client was not started" >&2
        return 1
    fi
    echo "server_client: client: $_sc_client"
    CLIENT_RC=0
    run_timeout "${SC_CLIENT_TIMEOUT:-$(scaled 120)}" sh -c "$_sc_client" >"$CLIENT_OUT" 2>&1 </dev/null \
        || CLIENT_RC=$?
    SERVER_RC=0
    _vl_watch "$_sc_spid" "${SC_SERVER_TIMEOUT:-$(scaled 30)}" || SERVER_RC=$?
    _vl_show server "$SERVER_RC" "$_sc_server" "$SERVER_OUT"
    _vl_show client "$CLIENT_RC" "$_sc_client" "$CLIENT_OUT"
    _sc_why=
    case $CLIENT_RC in
        0) ;;
        124) _sc_why="the client timed out after ${SC_CLIENT_TIMEOUT:-$(scaled 120)}s and was killed" ;;
        *) _sc_why="the client exited with status $CLIENT_RC" ;;
    esac
    case $SERVER_RC in
        0) ;;
        124) _sc_why="${_sc_why:+$_sc_why; }the server was still running ${SC_SERVER_TIMEOUT:-$(scaled 30)}s after the client finished and was killed" ;;
        *) _sc_why="${_sc_why:+$_sc_why; }the server exited with status $SERVER_RC" ;;
    esac
    if [ -n "$_sc_why" ]; then
        echo "server_client: FAILED: $_sc_why" >&2
        return 1
    fi
    echo "server_client: both sides exited 0"
}

# ---- the guest's links and devices ---------------------------------------------------------

# shellcheck source=scripts/lib/rxe.sh
. "${VL_REPO:-.}/scripts/lib/rxe.sh"

# restore_link: the guest's set-up as /init made it, whatever a scenario did to it — veth1 up
# with MTU 9000 and 192.168.77.2/24, rxe1 on veth1 — then waits (60 s, scaled) until both
# devices are ready (rxe_ready). Returns 1, saying which device is not, when they are not.
# Scenarios that take the link down run it on EXIT, so that the next scenario finds the guest
# as it was.
restore_link() {
    /usr/sbin/ip link set veth1 mtu 9000 2>/dev/null || true
    /usr/sbin/ip link set veth1 up 2>/dev/null || true
    /usr/sbin/ip addr show dev veth1 | grep -q "inet $VL_ADDR1/24" \
        || /usr/sbin/ip addr add "$VL_ADDR1/24" dev veth1 2>/dev/null || true
    [ -d "/sys/class/infiniband/$VL_DEV1" ] \
        || rdma link add "$VL_DEV1" type rxe netdev veth1 2>/dev/null || true
    for _rl in "$VL_DEV0 $VL_ADDR0" "$VL_DEV1 $VL_ADDR1"; do
        # shellcheck disable=SC2086 # "DEV ADDR", split on purpose
        wait_for 60 - rxe_ready $_rl || {
            echo "restore_link: ${_rl% *} not ready $(scaled 60) s after the restore: state '$RXE_STATE', GID 1 '$RXE_GID' ($RXE_TYPE)" >&2
            return 1
        }
    done
}

# ---- several processes (--procs, --np) ------------------------------------------------------

# mqueue_ready: /dev/mqueue mounted and empty (a queue left by an earlier scenario fails here).
mqueue_ready() {
    if ! grep -q ' mqueue ' /proc/mounts; then
        mkdir -p /dev/mqueue
        mount -t mqueue none /dev/mqueue
    fi
    [ -z "$(ls /dev/mqueue)" ] || fail "/dev/mqueue is not empty before the run: $(ls /dev/mqueue)"
}

# no_queues [WHAT]: nothing is left in /dev/mqueue (after WHAT, named in the failure).
no_queues() {
    _nq_left=$(ls /dev/mqueue)
    [ -z "$_nq_left" ] || fail "${1:+$1: }queues left in /dev/mqueue: $_nq_left"
    echo "/dev/mqueue is empty"
}

# pids_with_args GLOB: the pids of the processes whose arguments, joined by spaces and followed
# by one, match the shell pattern GLOB. One `ps` for all of them: a scan that forked a reader per
# process took over a minute under emulation on a busy host, starving the processes it watched.
pids_with_args() {
    ps -o pid,args 2>/dev/null | while read -r _pa_pid _pa_args; do
        # shellcheck disable=SC2254 # GLOB is a pattern on purpose
        case "$_pa_args " in
            $1) echo "$_pa_pid" ;;
        esac
    done
}

# workers_of PATTERN [INDEX]: the pids of the worker processes (--vl-worker, INDEX if given)
# whose command line contains PATTERN among the coordinator's arguments (a worker's command line
# is its coordinator's followed by --vl-worker INDEX --vl-queue NAME).
workers_of() {
    pids_with_args "*$1*--vl-worker ${2:+$2 }*"
}

# wait_worker_pid INDEX PATTERN: the pid of worker INDEX whose command line contains PATTERN,
# waited for up to 30 s, scaled (fails the scenario if it never appears).
wait_worker_pid() {
    wait_for 30 - _vl_worker_up "$1" "$2" || fail "no worker $1 ($2) appeared within $(scaled 30) s"
    echo "$_ww_pid"
}
_vl_worker_up() {
    _ww_pid=$(workers_of "$2" "$1" | head -n 1)
    [ -n "$_ww_pid" ]
}

# kill_outright PID CHILD...: leaves behind what PID (a --procs coordinator, a --np launcher)
# would clean up: PID stopped first so that it cannot, each CHILD killed (SIGKILL), then PID;
# waits until none of them runs (10 s, scaled; fails the scenario after that).
kill_outright() {
    _ko_pid=$1
    shift
    kill -STOP "$_ko_pid"
    for _ko_c in "$@"; do kill -KILL "$_ko_c"; done
    kill -KILL "$_ko_pid"
    wait_for 10 - _vl_none_alive "$_ko_pid" "$@" \
        || fail "kill_outright: still running $(scaled 10) s after SIGKILL: $_ko_pid $*"
    # PID is a zombie by now: reap it if it is this shell's job, or its pid still counts as a
    # running owner (a /proc entry) and nothing it held is an orphan yet.
    wait "$_ko_pid" 2>/dev/null || true
}
_vl_none_alive() {
    for _na_pid in "$@"; do
        ! _vl_alive "$_na_pid" || return 1
    done
}

# no_workers: no worker process (--vl-worker) is left running.
no_workers() {
    _nw=$(workers_of "")
    [ -z "$_nw" ] || fail "worker(s) still running: $(ps -o pid,args | grep -F -e '--vl-worker ' | grep -vF 'grep -F')"
    echo "no worker process left"
}

# kill_rank_mid_run OUT LAST PROG VICTIM: once the --np run of PROG writing OUT lists its last
# rank LAST (the header's "#  Rank  LAST" line, printed when every rank is connected) and has run
# 2 s more, SIGKILLs its rank VICTIM; the pid in $victim. Fails the scenario when the ranks do
# not start within 60 s (scaled).
kill_rank_mid_run() {
    wait_for 60 - grep -q -F -e "#  Rank  $2" "$1" 2>/dev/null \
        || { cat "$1"; fail "the ranks did not start"; }
    sleep 2
    victim=$(pids_with_args "*$3*--rank $4 *" | tail -n 1)
    kill -KILL "${victim:?no rank $4 process found}"
}

# survivors_name_victim OUT LAUNCHER VICTIM SURVIVORS...: after kill_rank_mid_run, the --np
# launcher (pid LAUNCHER, output OUT) ends with status 1 within 60 s (scaled), saying rank VICTIM
# (pid $victim) was killed; each of SURVIVORS exited with status 1 by itself (one still running
# at the launcher's grace would have been killed and said so instead), and every one of them
# named rank VICTIM, and no other rank, as gone. The seconds it took are left in $elapsed.
survivors_name_victim() {
    _sv_out=$1 _sv_launcher=$2 _sv_victim=$3
    shift 3
    _sv_t0=$(_vl_now)
    _sv_rc=0
    _vl_watch "$_sv_launcher" 60 || _sv_rc=$?
    elapsed=$((($(_vl_now) - _sv_t0) / 100))
    cat "$_sv_out"
    [ "$_sv_rc" = 1 ] || fail "the launcher exited $_sv_rc, expected 1 (a rank failed)"
    expect_contains "$_sv_out" "rank $_sv_victim (pid $victim) was killed by SIGKILL"
    for _sv_r in "$@"; do
        grep -q "error: rank $_sv_r (pid [0-9]*) exited with status 1$" "$_sv_out" \
            || fail "rank $_sv_r did not exit with status 1 by itself"
    done
    [ "$(grep -c "error: rank $_sv_victim (host .*) is gone" "$_sv_out")" -eq $# ] \
        || fail "not every survivor named rank $_sv_victim"
    if grep "is gone" "$_sv_out" | grep -v -q "rank $_sv_victim (host "; then
        fail "a survivor named another rank"
    fi
    echo "every survivor named rank $_sv_victim and exited 1, ${elapsed}s after the kill"
}

# ---- assertions -------------------------------------------------------------------------------

# expect_fail_within SECS NAME CMD...: CMD must exit non-zero (not by our timeout) within SECS
# (scaled: on a busy host a tool's start and exit alone have taken 16 s).
# Its output is printed and left in "$out" (the caller sets out=FILE); FAIL_RC holds its status.
expect_fail_within() {
    _ef_secs=$(scaled "$1") _ef_name=$2 _ef_out=${out:?expect_fail_within: set out=FILE first}
    shift 2
    echo "\$ $*"
    _ef_t0=$(_vl_now)
    FAIL_RC=0
    run_timeout "$_ef_secs" "$@" >"$_ef_out" 2>&1 || FAIL_RC=$?
    _ef_took=$(( ($(_vl_now) - _ef_t0) / 100 ))
    cat "$_ef_out"
    [ "$FAIL_RC" -ne 124 ] || fail "$_ef_name: still running after ${_ef_secs}s"
    [ "$FAIL_RC" -ne 0 ] || fail "$_ef_name: exited 0"
    echo "($_ef_name: exit $FAIL_RC after ~${_ef_took}s)"
}

# killed_mid_run PROG PORT VICTIM MARK "SERVER ARGS" "CLIENT ARGS" PATTERNS...: start a long run
# of PROG (server on $VL_DEV0, client on $VL_DEV1), SIGKILL VICTIM (client or server) once the
# client's output shows MARK, then the survivor must fail within 40 s (scaled) with
# "PROG: error: " and one of PATTERNS (fixed strings), i.e. naming the step it waited at.
# Outputs: $srv and $cli (default $TMPDIR/srv.out, cli.out).
# The kill comes 1 s after MARK, or, when $mark_from is set, a third of the time between
# $mark_from and MARK after MARK (at most 1 s): a phase that follows an equally long one is then
# killed early in its run on an idle host and on a busy one alike.
killed_mid_run() {
    srv=${srv:-$TMPDIR/srv.out} cli=${cli:-$TMPDIR/cli.out}
    _l=$1 _port=$2 _victim=$3 _mark=$4 _sargs=$5 _cargs=$6
    shift 6
    # shellcheck disable=SC2086 # the argument strings are word lists
    $_l -d "$VL_DEV0" -p "$_port" $_sargs >"$srv" 2>&1 &
    _spid=$!
    wait_port "$_port" 60 "$_spid"
    # shellcheck disable=SC2086
    $_l -d "$VL_DEV1" -p "$_port" $_cargs "$VL_ADDR0" >"$cli" 2>&1 &
    _cpid=$!
    # Up to 240 s for the mark: lesson07's 3000 busy-polled round trips before its [7] took
    # over 90 s on a busy host (scripts/test --under-load 2).
    _end=$(($(_vl_now) + $(scaled 240) * 100))
    _from_t=
    until grep -q -F -e "$_mark" "$cli"; do
        [ "$(_vl_now)" -lt "$_end" ] || { cat "$srv" "$cli"; fail "'$_mark' never appeared"; }
        _vl_alive "$_cpid" || { cat "$srv" "$cli"; fail "the client ended before '$_mark'"; }
        if [ -n "${mark_from:-}" ] && [ -z "$_from_t" ] && grep -q -F -e "$mark_from" "$cli"; then
            _from_t=$(_vl_now)
        fi
        sleep 0.1
    done
    _delay=100
    if [ -n "$_from_t" ]; then
        _delay=$(( ($(_vl_now) - _from_t) / 3 ))
        [ "$_delay" -le 100 ] || _delay=100
    fi
    _delay_s="$((_delay / 100)).$(printf '%02d' $((_delay % 100)))"
    sleep "$_delay_s"
    if [ "$_victim" = client ]; then
        _kill=$_cpid _other=$_spid _other_out=$srv
    else
        _kill=$_spid _other=$_cpid _other_out=$cli
    fi
    # A victim that already finished is a test that chose too short a run, not a fault of PROG.
    _vl_alive "$_kill" || {
        cat "$srv" "$cli"
        fail "the $_victim had already ended ${_delay_s} s after '$_mark': give it a longer run"
    }
    kill -KILL "$_kill"
    _t0=$(_vl_now)
    _rc=0
    _vl_watch "$_other" "$(scaled 40)" || _rc=$?
    wait "$_kill" 2>/dev/null || true
    echo "--- survivor ($_l, $_victim killed): exit $_rc after ~$(( ($(_vl_now) - _t0) / 100 ))s"
    tail -n 8 "$_other_out"
    [ "$_rc" -ne 124 ] || fail "the survivor was still running $(scaled 40) s after its peer was killed"
    [ "$_rc" -ne 0 ] || fail "the survivor exited 0 although its peer died mid-run"
    expect_contains "$_other_out" "$_l: error: "
    _named=
    for _p in "$@"; do
        if grep -q -F -e "$_p" "$_other_out"; then _named=$_p; fi
    done
    [ -n "$_named" ] || fail "the survivor's error does not name the step it waited at"
    echo "(the survivor named: '$_named')"
}

# expect_contains FILE TEXT: FILE must contain the fixed string TEXT.
expect_contains() {
    [ -f "$1" ] || fail "expect_contains: no file $1"
    if ! grep -F -q -e "$2" "$1"; then
        echo "--- last lines of $1:" >&2
        tail -n 20 "$1" >&2
        fail "expected '$2' in $1"
    fi
}

# expect_not_contains FILE TEXT: FILE must not contain the fixed string TEXT.
expect_not_contains() {
    [ -f "$1" ] || fail "expect_not_contains: no file $1"
    if grep -F -n -e "$2" "$1" >&2; then
        fail "did not expect '$2' in $1 (lines above)"
    fi
}

# num_gt A B: true when the decimal number A is greater than B.
num_gt() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a + 0 > b + 0) }'; }

# require_bin NAME: fail unless the program NAME is on PATH (our binaries: /opt/vl-bin).
require_bin() {
    command -v "$1" >/dev/null 2>&1 \
        || fail "$1 is not on PATH; is it built? (cargo build --release --workspace)"
}

# ---- RDMA facts -------------------------------------------------------------------------------

# hw_counter DEV NAME: an rxe port counter (packets, not bytes), e.g. sent_pkts, rcvd_pkts.
hw_counter() {
    cat "/sys/class/infiniband/$1/ports/1/hw_counters/$2" \
        || fail "no hw counter $2 on $1"
}

# perftest_bw_avg FILE: the "BW average" column of the first result row of a perftest
# bandwidth report (ib_write_bw, ib_send_bw, ib_read_bw); prints nothing if there is no row.
perftest_bw_avg() {
    awk '/#bytes/ && /BW average/ { hdr = 1; next }
         hdr && $1 ~ /^[0-9]+$/ && NF >= 4 { print $4; exit }' "$1"
}
