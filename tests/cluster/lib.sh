# shellcheck shell=sh
# Helpers for the cluster scenarios tests/cluster/NN-name.sh (busybox sh, on node1: the head).
#
# `scripts/softroce-vm cluster test` boots one cluster per shape that scenarios ask for, with a
# line '# cluster: nodes=N topology=flat|leaf-spine' (default: 4 nodes, leaf-spine), and runs each
# scenario on node1 with `sh FILE` in the repository root, in its own process group, with the
# guest scenarios' environment (tests/guest/lib.sh: step, fail, run_timeout, expect_contains, ...)
# and, from the cluster:
#   VL_NODE=node1 VL_NODES=N VL_TOPO=flat|leaf-spine VL_DEV0=rxe0 VL_ADDR0 (node1's data address)
#   VL_JOB (this boot's job directory, shared with the host and every guest)
# Every node sees the repository at the same path; names resolve in every guest's /etc/hosts:
#   nodeK (management, 10.0.0.K), nodeK-data (its rxe0's address), fabric (10.0.0.254).
set -eu
# shellcheck source=tests/guest/lib.sh
. "$VL_REPO/tests/guest/lib.sh"

# step TEXT: a heading, with the seconds since the scenario started (ssh and emulated routers
# make a cluster scenario's time worth seeing).
_vl_t0=$(_vl_now)
step() { printf '\n== [%ss] %s\n' "$((($(_vl_now) - _vl_t0) / 100))" "$*"; }

# ---- reaching the nodes and the fabric ----------------------------------------------------------

# on NODE 'CMD': run CMD with sh on NODE (node1 included) in the repository, with the node's
# environment (/etc/vl-env: PATH with our binaries, VL_*); its status is CMD's (255: ssh failed).
on() {
    [ $# -eq 2 ] || fail "on: usage: on NODE 'CMD'"
    if [ "$1" = "$VL_NODE" ]; then
        sh -c ". /etc/vl-env; cd '$VL_REPO' && $2"
    else
        ssh "$1" ". /etc/vl-env; cd '$VL_REPO' && $2"
    fi
}

# fabric ARGS...: vl-fabric in the fabric guest (ports, counters, link, netem; see its --help).
fabric() { ssh fabric vl-fabric "$@"; }

# data_addr NODE: NODE's data address (its rxe0's GID), from /etc/hosts.
data_addr() { awk -v h="$1-data" '$2 == h { print $1 }' /etc/hosts; }

# nodes: node1 .. nodeN.
nodes() { seq 1 "$VL_NODES" | sed 's/^/node/'; }

# ---- the host's hands -------------------------------------------------------------------------

# host_ctl VERB NODE [ARG]: ask the host harness (scripts/lib/cluster-host.sh) to act on a
# guest: kill NODE (its QEMU gets SIGKILL: a power cut), start NODE (boot it again), link NODE
# on|off (QEMU's set_link on both ends of its data cable). Prints the answer; fails on an error.
host_ctl() {
    _hc_id=$$.$(_vl_now)
    echo "$*" >"$VL_JOB/ctl/$_hc_id.tmp"
    mv "$VL_JOB/ctl/$_hc_id.tmp" "$VL_JOB/ctl/$_hc_id.req"
    _hc_end=$(($(_vl_now) + 3000))
    until [ -e "$VL_JOB/ctl/$_hc_id.rep" ]; do
        [ "$(_vl_now)" -lt "$_hc_end" ] || fail "host_ctl $*: the host did not answer within 30 s"
        sleep 0.2
    done
    _hc_ans=$(cat "$VL_JOB/ctl/$_hc_id.rep")
    rm -f "$VL_JOB/ctl/$_hc_id.rep"
    echo "host: $* -> $_hc_ans"
    case $_hc_ans in ok*) ;; *) fail "host_ctl $*: $_hc_ans" ;; esac
}

# wait_node NODE SECS: until NODE is up again (its ready file) and answers ssh.
wait_node() {
    _wn_end=$(($(_vl_now) + $(scaled "$2") * 100))
    until [ -e "$VL_JOB/ready/$1" ] && ssh "$1" true 2>/dev/null; do
        [ "$(_vl_now)" -lt "$_wn_end" ] || fail "$1 did not come back within $(scaled "$2") s"
        sleep 1
    done
}

# link_down NODE / link_up NODE: NODE's data cable down (the switch port and, through the host,
# both NICs lose carrier: rxe0's port goes DOWN as on a pulled cable) or back up.
link_down() {
    fabric link "$1" down
    host_ctl link "$1" off
}
link_up() {
    host_ctl link "$1" on
    fabric link "$1" up
}

# restore_cluster: every fault undone: links up, no netem, killed nodes booted again, none of
# our processes left on any node. Scenarios that break something call it in their EXIT trap.
restore_cluster() {
    for _rc_l in $(fabric links); do
        fabric netem "$_rc_l" clear >/dev/null 2>&1 || true
        fabric link "$_rc_l" up >/dev/null 2>&1 || true
    done
    for _rc_n in $(nodes); do
        [ "$_rc_n" = node1 ] && continue
        if [ ! -e "$VL_JOB/ready/$_rc_n" ]; then
            host_ctl start "$_rc_n"
            wait_node "$_rc_n" 120
        else
            host_ctl link "$_rc_n" on >/dev/null
        fi
    done
    reap_nodes
}

# reap_nodes: kill what our tools left on every node (a scenario's remote processes outlive its
# process group, which only reaches node1's).
reap_nodes() {
    for _rn in $(nodes); do
        # shellcheck disable=SC2016  # expanded on the node
        on "$_rn" 'for c in /proc/[0-9]*/comm; do
                case $(cat "$c" 2>/dev/null) in
                    vl_* | ib_* | lesson* | orted | orterun | mpirun | srun) p=${c%/comm}; kill -KILL "${p#/proc/}" 2>/dev/null ;;
                esac
            done; true' >/dev/null 2>&1 || true
    done
}

# ---- checks -----------------------------------------------------------------------------------

# no_leftovers NODE...: no process of ours and no QP, CQ, MR or PD of any process left on those
# nodes (the kernel's own, such as the GSI QP 1, have no pid).
no_leftovers() {
    for _nl in "$@"; do
        # shellcheck disable=SC2016  # expanded on the node
        _nl_out=$(on "$_nl" 'for o in qp cq mr pd; do /usr/bin/rdma resource show $o 2>/dev/null | grep " pid "; done
            for c in /proc/[0-9]*/comm; do case $(cat "$c" 2>/dev/null) in vl_*) echo "process ${c%/comm} $(cat "$c")" ;; esac; done' || true)
        [ -z "$_nl_out" ] || fail "$_nl has objects or processes left: $_nl_out"
    done
}

# remote_bg NODE 'CMD' OUT: CMD on NODE in the background (ssh), output to OUT; sets BG_PID.
remote_bg() {
    on "$1" "$2" >"$3" 2>&1 </dev/null &
    # shellcheck disable=SC2034  # read by the scenarios
    BG_PID=$!
}

# wait_remote_port NODE PORT SECS PROGRAM: until a TCP socket listens on PORT on NODE (one ssh);
# fails at once when PROGRAM, once seen there, runs no more (the server gave up), or after SECS
# (scaled).
wait_remote_port() {
    _wr_secs=$(scaled "$3")
    on "$1" ". '$VL_REPO/tests/guest/lib.sh'; end=\$((\$(_vl_now) + $_wr_secs * 100)) seen=
        until _vl_listening $2; do
            if pidof '$4' >/dev/null; then seen=1
            elif [ -n \"\$seen\" ]; then echo '$4 ended on $1 before it listened' >&2; exit 3; fi
            [ \$(_vl_now) -lt \$end ] || exit 1
            sleep 0.1
        done" || fail "nothing listens on $1:$2 (after up to $_wr_secs s)"
}

# spine_packets: packets the spines forwarded so far, "SPINE1 SPINE2" (what left each spine
# toward either leaf).
spine_packets() {
    fabric counters spine1:leaf1 spine1:leaf2 spine2:leaf1 spine2:leaf2 \
        | awk 'NR > 1 { tx[$1] += $4 } END { printf "%d %d\n", tx["spine1"], tx["spine2"] }'
}
