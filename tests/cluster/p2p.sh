# shellcheck shell=sh
# p2p.sh — the point-to-point tools between two hosts of the cluster, sourced by the scenarios
# 10-p2p-leaf-spine.sh and 11-p2p-flat.sh (after lib.sh): each of our eight vl_* tools and its
# perftest counterpart, server on $FAR, client on node1, the payload checked (--validate) and the
# server's rxe0 counters moved by at least the packets the messages need; then --procs and -R
# (rdma_cm) across the hosts.

# pair SERVER_NODE PORT 'SERVER CMD' 'CLIENT CMD': server on SERVER_NODE (in the background, by
# ssh), client here once it listens; both must exit 0. Leaves SERVER_OUT and CLIENT_OUT.
pair() {
    SERVER_OUT=$TMPDIR/server.out CLIENT_OUT=$TMPDIR/client.out
    echo "pair: $1: $3"
    remote_bg "$1" "$3" "$SERVER_OUT"
    _p_srv=$BG_PID
    _p_prog=${3%% *}
    if ! (wait_remote_port "$1" "$2" 30 "${_p_prog##*/}"); then
        _vl_watch "$_p_srv" 5 || true
        sed 's/^/  server| /' "$SERVER_OUT"
        fail "the server on $1 never listened on port $2"
    fi
    echo "pair: node1: $4"
    _p_crc=0
    run_timeout "$(scaled 120)" sh -c "$4" >"$CLIENT_OUT" 2>&1 </dev/null || _p_crc=$?
    _p_src=0
    _vl_watch "$_p_srv" "$(scaled 30)" || _p_src=$?
    sed 's/^/  server| /' "$SERVER_OUT"
    sed 's/^/  client| /' "$CLIENT_OUT"
    [ "$_p_crc" = 0 ] || fail "client exited $_p_crc: $4"
    [ "$_p_src" = 0 ] || fail "server on $1 exited $_p_src: $3"
}

# rcvd NODE: rxe0's received packets on NODE.
rcvd() { on "$1" 'cat /sys/class/infiniband/rxe0/ports/1/hw_counters/rcvd_pkts'; }

# tool_pair NAME OPTIONS MIN_PKTS: ours and perftest's NAME (write_bw, read_lat, ...) with OPTIONS
# between $FAR (server) and node1; the packets into the server (write, send, atomic) or into the
# client (read: the responses) must be at least MIN_PKTS for each.
tool_pair() {
    _tp_check='--validate'   # ours checks the payload; atomics have no payload pattern
    case $1 in atomic_*) _tp_check='' ;; esac
    for _tp in "vl_$1 $_tp_check" "ib_$1"; do
        _tp_bin=${_tp%% *}
        _tp_gid='-x 1'   # perftest needs the IPv4-mapped GID named; ours finds it (and is told here)
        case $_tp_bin in vl_*) _tp_gid='' ;; esac
        case $1 in read_*) _tp_into=node1 ;; *) _tp_into=$FAR ;; esac
        step "$_tp_bin $2 across the fabric: $FAR (server) <- node1"
        _tp_port=18515
        while :; do
            _tp_before=$(rcvd "$_tp_into")
            _tp_cmd="$_tp -d rxe0 $_tp_gid -u 20 -p $_tp_port $2"
            case $_tp_bin in
                vl_*)
                    pair "$FAR" "$_tp_port" "$_tp_cmd" "$_tp_cmd $FAR"
                    break
                    ;;
            esac
            # perftest's own tools, the reference, fail now and then on this emulated fabric
            # outside what they measure (CI, 2026-12-05: ib_send_bw's closing TCP exchange,
            # "ethernet_read_keys: Couldn't read remote address", after its result row; an
            # ib_read_bw client that exited 1 before its first row): a failed reference run is
            # shown, its leftovers killed, then run once more, on a fresh port. Ours get no second try.
            (pair "$FAR" "$_tp_port" "$_tp_cmd" "$_tp_cmd $FAR") && break
            [ "$_tp_port" = 18515 ] || fail "$_tp_bin, perftest's reference, failed twice in a row (above)"
            echo "perftest's $_tp_bin failed (above); the reference gets one more run"
            reap_nodes # a server left waiting for the failed client
            _tp_port=18516
        done
        _tp_moved=$(($(rcvd "$_tp_into") - _tp_before))
        echo "rxe0 of $_tp_into received $_tp_moved packets (at least $3 expected)"
        [ "$_tp_moved" -ge "$3" ] || fail "$_tp_bin: $_tp_into received $_tp_moved packets, fewer than the $3 the messages need"
        # Every tool prints perftest's result row: the size first, then the iterations.
        grep -Eq '^ *[0-9]+ +[0-9]+ ' "$CLIENT_OUT" || fail "$_tp_bin: no result row"
    done
}

p2p_all() {
    # 300 writes/sends/reads of 64 KiB at MTU 4096: 16 packets each.
    tool_pair write_bw "-s 65536 -n 300" 4800
    tool_pair read_bw "-s 65536 -n 300" 4800
    tool_pair send_bw "-s 65536 -n 300" 4800
    tool_pair atomic_bw "-n 300" 300
    tool_pair write_lat "-s 64 -n 200" 200
    tool_pair read_lat "-s 64 -n 200" 200
    tool_pair send_lat "-s 64 -n 200" 200
    tool_pair atomic_lat "-n 200" 200

    step "vl_write_bw --procs 2 across the hosts: a row per process and the sum"
    pair "$FAR" 18515 "vl_write_bw -d rxe0 -u 20 -s 65536 -n 200 --procs 2" \
        "vl_write_bw -d rxe0 -u 20 -s 65536 -n 200 --procs 2 $FAR"
    grep -q '#sum' "$CLIENT_OUT" || fail "--procs 2: no #sum row"

    step "vl_send_bw -R (rdma_cm) across the hosts: the CM resolves the route to $FAR's data address"
    remote_bg "$FAR" "vl_send_bw -d rxe0 -u 20 -R -s 4096 -n 200" "$TMPDIR/server.out"
    _cm_srv=$BG_PID
    # An rdma_cm listener opens no TCP port: its banner, which comes after rdma_listen, says it.
    wait_for 30 "$_cm_srv" grep -q "Waiting for client to connect" "$TMPDIR/server.out" \
        || { cat "$TMPDIR/server.out"; fail "the -R server on $FAR never listened"; }
    rc=0
    run_timeout "$(scaled 120)" vl_send_bw -d rxe0 -u 20 -R -s 4096 -n 200 "$(data_addr "$FAR")" \
        >"$TMPDIR/client.out" 2>&1 || rc=$?
    src=0
    _vl_watch "$_cm_srv" "$(scaled 30)" || src=$?
    cat "$TMPDIR/client.out" "$TMPDIR/server.out"
    [ "$rc" = 0 ] && [ "$src" = 0 ] || fail "-R across the hosts: client $rc, server $src"

    no_leftovers node1 "$FAR"
}
