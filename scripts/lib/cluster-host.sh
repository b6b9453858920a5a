# shellcheck shell=bash
# shellcheck disable=SC2034  # NO_BUILD, TIME_SCALE, ...: read by scripts/softroce-vm, which sources this
# cluster-host.sh — `scripts/softroce-vm cluster`: several hosts on one machine. Sourced by
# scripts/softroce-vm (it uses its boot, guest_qemu, kernel_append, prepare_boot, say, die, ...).
#
# N node guests (node1..nodeN, each its own kernel, hostname and rxe0 on its own virtio-net NIC)
# and one fabric guest whose network namespaces are the switches. Every link is a QEMU `stream`
# netdev over a unix socket in a private directory: no tap, no bridge, no address on the host.
# Each node has a data NIC (rxe0's, into the fabric's switches) and a management NIC (ssh,
# Slurm, the launchers' control traffic; one bridge in the fabric guest). The guests' side is
# scripts/lib/cluster-guest.sh; docs/cluster.md explains the design.
#
# The host stays in the loop as the cluster's "hands": the head node (node1, where the job or
# the scenarios run) asks it through files in the job directory (ctl/) to kill a node, start it
# again, or take a NIC's link down and up (QEMU's set_link, through each guest's monitor).

CLUSTER_NODES_DEFAULT=4
CLUSTER_TOPO_DEFAULT=leaf-spine
CLUSTER_NODE_MEM=${VL_CLUSTER_NODE_MEM:-1024}
CLUSTER_FABRIC_MEM=${VL_CLUSTER_FABRIC_MEM:-768}
CLUSTER_SMP=${VL_CLUSTER_SMP:-1}
CLUSTER_SCENARIO_TIMEOUT=300

usage_cluster() {
  cat <<EOF
Usage: scripts/$PROG cluster run   [OPTIONS] -- CMD...
       scripts/$PROG cluster shell [OPTIONS] [NODE]
       scripts/$PROG cluster test  [--filter REGEX] [--no-build] [--timeout SECS]

A cluster on this machine: N node guests and a fabric guest, all under QEMU, joined by
unix-socket links (no host networking). Each node is a host of its own: hostname nodeK, its own
kernel, rxe0 on its own NIC eth0, Dropbear's ssh, munge and slurmd (slurmctld on node1), Open
MPI, perftest and our binaries on PATH. The fabric guest switches between them:
  flat        one switch; nodes 192.168.80.K/24
  leaf-spine  two leaves, two spines, routed, ECMP with an L4 hash (RoCE v2's UDP source port
              picks the spine); nodes 1..ceil(N/2) on leaf1 (192.168.81.K/24), the rest on
              leaf2 (192.168.82.K/24)
Management network: nodeK = 10.0.0.K, fabric = 10.0.0.254 (names in every guest's /etc/hosts).

  run -- CMD   boot, wait until every node is up and Slurm has them, run CMD with sh -c on
               node1 in the repository; exit with CMD's status
  shell [NODE] boot, and give this terminal NODE's console (default node1); leave with 'exit'
  test         the cluster scenarios tests/cluster/[0-9]*.sh, grouped by the cluster each one
               asks for ('# cluster: nodes=N topology=T'), one boot per group

Options (run, shell):
  --nodes N          node guests, 2 to 8 (default $CLUSTER_NODES_DEFAULT)
  --topology T       flat or leaf-spine (default $CLUSTER_TOPO_DEFAULT)
  --no-build         do not run cargo; use the binaries in target/release
  --timeout SECS     kill the cluster after SECS (run; default \$VL_VM_TIMEOUT or $DEFAULT_TIMEOUT)
Options (test): --filter REGEX (scenario names, grep -E), --no-build, --timeout SECS (each
group's backstop; default: its scenarios' timeouts + 300).

Environment: VL_CLUSTER_SMP (vCPUs per node, default $CLUSTER_SMP), VL_CLUSTER_NODE_MEM
($CLUSTER_NODE_MEM MiB), VL_CLUSTER_FABRIC_MEM ($CLUSTER_FABRIC_MEM MiB), and softroce-vm's own.
Consoles and logs: .vm-out/cluster-latest/ (NAME.console per guest, scenario logs).
Exit status as softroce-vm's: the command's (run), 0/1 (test), 2 bad command line, 124 timeout,
125 the cluster could not be set up.
EOF
}

# ---- the pieces of a boot ----------------------------------------------------------------------

# cluster_keys JOBDIR: this boot's secrets: an ssh key every guest trusts (made with the image's
# own dropbearkey, run through the image's loader: the host needs no ssh) and the munge key.
cluster_keys() {
  local root=$IMAGE_DIR/rootfs dir=$1/ssh
  mkdir -p "$dir"
  local run=("$root/usr/lib64/ld-linux-x86-64.so.2" --library-path "$root/usr/lib/x86_64-linux-gnu")
  "${run[@]}" "$root/usr/bin/dropbearkey" -t ed25519 -f "$dir/id_dropbear" >/dev/null 2>&1 \
    || die "dropbearkey (from the guest image) could not make the cluster's ssh key"
  "${run[@]}" "$root/usr/bin/dropbearkey" -y -f "$dir/id_dropbear" 2>/dev/null \
    | grep '^ssh-' >"$dir/id.pub" || die "dropbearkey -y printed no public key"
  # A host key per guest, and every guest's known_hosts with all of them: ssh checks whom it
  # reaches, as on a cluster whose admins distribute ssh_known_hosts.
  local g pub addr k
  : >"$dir/known_hosts"
  for ((k = 0; k <= CLUSTER_N; k++)); do
    if ((k == 0)); then g=fabric addr=10.0.0.254; else g=node$k addr=10.0.0.$k; fi
    "${run[@]}" "$root/usr/bin/dropbearkey" -t ed25519 -f "$dir/host_$g" >/dev/null 2>&1 \
      || die "dropbearkey could not make $g's host key"
    pub=$("${run[@]}" "$root/usr/bin/dropbearkey" -y -f "$dir/host_$g" 2>/dev/null | grep '^ssh-' | cut -d' ' -f1,2)
    printf '%s %s\n' "$g" "$pub" "$addr" "$pub" >>"$dir/known_hosts" # Dropbear: one name a line
  done
  head -c 1024 /dev/urandom >"$1/munge.key"
  chmod 600 "$dir"/id_dropbear "$dir"/host_* "$1/munge.key"
}

# slurm_conf NODES: Slurm for the cluster: slurmctld on node1, each node 2 CPUs whatever its
# vCPUs (config_overrides), no cgroups, no accounting: `srun -N 4 -n 8` as on a real cluster.
slurm_conf() {
  cat <<EOF
# Written by scripts/softroce-vm cluster for this boot (docs/cluster.md).
ClusterName=verbslab
SlurmctldHost=node1
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmdParameters=config_overrides
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
MessageTimeout=30
KillWait=5
MinJobAge=30
NodeName=node[1-$1] CPUs=2 RealMemory=500 State=UNKNOWN
PartitionName=cluster Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
}

hex2() { printf '%02x' "$1"; }

# child_pids PID: the processes whose parent is PID (from /proc: no procps needed).
child_pids() {
  local st f
  for st in /proc/[0-9]*/stat; do
    read -r -a f 2>/dev/null <"$st" || continue
    [[ ${f[1]} == *')' && ${f[3]} == "$1" ]] && printf '%s\n' "${f[0]}"
  done
  return 0
}
# signal_guest NAME SIGNAL: SIGNAL to a background guest's QEMU (the child of its timeout(1)).
signal_guest() {
  local pid c
  pid=$(cat -- "$CSOCK/$1.pid" 2>/dev/null) || return 0
  for c in $(child_pids "$pid"); do kill "-$2" "$c" 2>/dev/null || true; done
}

# fabric_args NODES: the fabric guest's NICs: for node K a data port (MAC ..:02:00:KK) and a
# management port (..:04:00:KK), each the listening end of a unix socket in $CSOCK.
fabric_args() {
  local k
  FABRIC_ARGS=()
  for ((k = 1; k <= $1; k++)); do
    FABRIC_ARGS+=(-netdev "stream,id=d$k,server=on,addr.type=unix,addr.path=$CSOCK/d$k"
      -device "virtio-net-pci,netdev=d$k,mac=52:54:00:02:00:$(hex2 "$k")"
      -netdev "stream,id=m$k,server=on,addr.type=unix,addr.path=$CSOCK/m$k"
      -device "virtio-net-pci,netdev=m$k,mac=52:54:00:04:00:$(hex2 "$k")")
  done
}

# node_args K: node K's two NICs, the connecting ends of the fabric's sockets for it.
node_args() {
  NODE_ARGS=(-netdev "stream,id=data,server=off,addr.type=unix,addr.path=$CSOCK/d$1"
    -device "virtio-net-pci,netdev=data,mac=52:54:00:01:00:$(hex2 "$1")"
    -netdev "stream,id=mgmt,server=off,addr.type=unix,addr.path=$CSOCK/m$1"
    -device "virtio-net-pci,netdev=mgmt,mac=52:54:00:03:00:$(hex2 "$1")")
}

# monitor_args NAME: a QEMU monitor on two FIFOs ($CSOCK/NAME.mon.in/.out), so that the harness
# can say set_link without a socket client; its answers are kept in JOBDIR/NAME.monitor.
monitor_args() {
  mkfifo "$CSOCK/$1.mon.in" "$CSOCK/$1.mon.out"
  MON_ARGS=(-chardev "pipe,id=hmon,path=$CSOCK/$1.mon" -mon "chardev=hmon,mode=readline")
}

# bg_guest NAME MODE MEM APPEND QEMU_ARGS...: a guest in the background, its console in
# JOBDIR/NAME.console, its PID in $CSOCK/NAME.pid.
bg_guest() {
  local name=$1 mode=$2 mem=$3 append=$4 q=()
  shift 4
  guest_qemu q "verbs-lab-$name" "$mem" "$CLUSTER_SMP"
  rm -f -- "$CSOCK/$name.mon.in" "$CSOCK/$name.mon.out"
  monitor_args "$name"
  BOOT_APPEND=$append
  (
    trap - ERR
    exec timeout -k 10 "$CLUSTER_LIMIT" "${q[@]}" "$@" "${MON_ARGS[@]}" \
      -append "$(kernel_append "$mode" "$CJOB")" -serial "file:$CJOB/$name.console" \
      </dev/null >>"$CJOB/$name.qemu.log" 2>&1
  ) &
  echo $! >"$CSOCK/$name.pid"
  disown # a guest killed on purpose (a node's power cut) is no job for bash to report
  (trap - ERR; exec cat "$CSOCK/$name.mon.out" >>"$CJOB/$name.monitor" 2>/dev/null) &
  BOOT_APPEND=''
}

# monitor NAME COMMAND: one HMP command to a guest's QEMU. Bounded: a FIFO whose QEMU is gone
# (a node killed) has no reader, and opening it would block the host's hands for ever.
monitor() {
  [[ -p $CSOCK/$1.mon.in ]] || return 1
  timeout 5 bash -c 'printf "%s\n" "$2" >"$1"' monitor "$CSOCK/$1.mon.in" "$2"
}

node_append() {
  local a="vl.role=node vl.node=$1 vl.nodes=$CLUSTER_N vl.topo=$CLUSTER_TOPO"
  (($1 == 1)) && a+=" vl.head=1"
  printf '%s' "$a"
}

start_node() {
  local k=$1 mode=${2:-idle}
  rm -f -- "$CJOB/ready/node$k"
  node_args "$k"
  bg_guest "node$k" "$mode" "$CLUSTER_NODE_MEM" "$(node_append "$k")" "${NODE_ARGS[@]}"
}

# ---- the host's hands: requests from the head node ----------------------------------------------

# ctl_do REQUEST: carry out one request ("kill node3", "start node3", "link node3 off|on");
# prints the answer ("ok ..." or "error: ...").
ctl_do() {
  local verb=$1 target=${2:-} arg=${3:-} k pid
  case $target in
    node[0-9]*) k=${target#node} ;;
    *) echo "error: '$target' is not a node (node2..node$CLUSTER_N)"; return ;;
  esac
  if ! [[ $k =~ ^[0-9]+$ ]] || ((k < 1 || k > CLUSTER_N)); then
    echo "error: no $target in this cluster (node1..node$CLUSTER_N)"
    return
  fi
  case $verb in
    kill)
      ((k != 1)) || { echo "error: node1 is the head: it runs the job and cannot be killed"; return; }
      # timeout(1) runs QEMU as its child: SIGKILL to QEMU itself, as a power cut.
      signal_guest "$target" KILL
      rm -f -- "$CJOB/ready/$target"
      echo "ok: $target killed (its QEMU got SIGKILL)" ;;
    start)
      pid=$(cat -- "$CSOCK/$target.pid" 2>/dev/null || true)
      if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then echo "error: $target is running"; return; fi
      start_node "$k"
      echo "ok: $target booting (ready when $CJOB_REL/ready/$target appears)" ;;
    link)
      [[ $arg == on || $arg == off ]] || { echo "error: link $target needs on or off"; return; }
      monitor "$target" "set_link data $arg" && monitor fabric "set_link d$k $arg" \
        || { echo "error: $target's QEMU did not take set_link within 5 s (is $target running? start it first)"; return; }
      echo "ok: $target's data link $arg at both ends (QEMU set_link)" ;;
    *) echo "error: unknown request '$verb' (kill, start, link)" ;;
  esac
}

# ctl_loop: answer the head's requests (JOBDIR/ctl/NAME.req -> NAME.rep) until killed.
ctl_loop() {
  trap - ERR
  local f rep line
  while :; do
    for f in "$CJOB"/ctl/*.req; do
      [[ -f $f ]] || continue
      rep=${f%.req}.rep
      line=$(<"$f")
      rm -f -- "$f"
      # shellcheck disable=SC2086  # a request is words
      ctl_do $line >"$rep.tmp" 2>&1
      mv -f -- "$rep.tmp" "$rep"
      printf '%s: host: %s -> %s\n' "$PROG" "$line" "$(<"$rep")" >>"$CJOB/ctl.log"
    done
    sleep 0.2
  done
}

# stop_cluster: every background guest and helper of this boot, then the socket directory.
stop_cluster() {
  local f name
  if [[ -n ${CTL_PID:-} ]]; then kill "$CTL_PID" 2>/dev/null || true; fi
  [[ -n ${CSOCK:-} && -d $CSOCK ]] || return 0
  for f in "$CSOCK"/*.pid; do
    [[ -f $f ]] || continue
    name=${f##*/}
    signal_guest "${name%.pid}" TERM
  done
  sleep 1
  for f in "$CSOCK"/*.pid; do
    [[ -f $f ]] || continue
    name=${f##*/}
    signal_guest "${name%.pid}" KILL
  done
  wait 2>/dev/null || true
  rm -rf -- "$CSOCK"
  CSOCK=''
  return 0
}

# cluster_boot MODE NODES TOPO LIMIT [SHELL_NODE]: boot the fabric and the nodes; the head's (or
# the shell node's) console is this terminal. Sets VM_STATUS as boot does.
cluster_boot() {
  local mode=$1 k t0
  CLUSTER_N=$2 CLUSTER_TOPO=$3 CLUSTER_LIMIT=$4
  local front=${5:-1}
  [[ -n ${ACCEL_NAME:-} ]] || choose_accel
  CSOCK=$(mktemp -d "${TMPDIR:-/tmp}/vl-cluster.XXXXXX") # unix socket paths must stay short
  mkdir -p "$CJOB/ctl" "$CJOB/ready"
  CJOB_REL=${CJOB#"$REPO"/}
  cluster_keys "$CJOB"
  slurm_conf "$CLUSTER_N" >"$CJOB/slurm.conf"
  t0=$(now)
  say "cluster: $CLUSTER_N nodes + fabric ($CLUSTER_TOPO), $ACCEL_NAME, $CLUSTER_SMP vCPU(s) and $CLUSTER_NODE_MEM MiB per node; consoles in $CJOB_REL/"
  fabric_args "$CLUSTER_N"
  bg_guest fabric idle "$CLUSTER_FABRIC_MEM" "vl.role=fabric vl.nodes=$CLUSTER_N vl.topo=$CLUSTER_TOPO" "${FABRIC_ARGS[@]}"
  # The nodes connect to the fabric's sockets: wait until it listens on all of them.
  local end=$((SECONDS + 30)) s
  for ((k = 1; k <= CLUSTER_N; k++)); do
    for s in d m; do
      until [[ -S $CSOCK/$s$k ]]; do
        ((SECONDS < end)) || die "the fabric guest did not open its sockets within 30 s; see $CJOB_REL/fabric.qemu.log"
        sleep 0.05
      done
    done
  done
  for ((k = 1; k <= CLUSTER_N; k++)); do
    ((k == front)) && continue
    start_node "$k" idle
  done
  ctl_loop &
  CTL_PID=$!
  node_args "$front"
  rm -f -- "$CSOCK/node$front.mon.in" "$CSOCK/node$front.mon.out"
  monitor_args "node$front"
  (trap - ERR; exec cat "$CSOCK/node$front.mon.out" >>"$CJOB/node$front.monitor" 2>/dev/null) &
  BOOT_NAME=verbs-lab-node$front BOOT_EXTRA=("${NODE_ARGS[@]}" "${MON_ARGS[@]}")
  BOOT_APPEND=$(node_append "$front")
  local save_mem=$VM_MEM save_smp=$VM_SMP
  VM_MEM=$CLUSTER_NODE_MEM VM_SMP=$CLUSTER_SMP
  boot "$mode" "$CJOB" "$CLUSTER_LIMIT"
  # shellcheck disable=SC2034  # boot's inputs, reset for the next boot
  VM_MEM=$save_mem VM_SMP=$save_smp BOOT_EXTRA=() BOOT_APPEND='' BOOT_NAME=''
  cp -f -- "$CJOB/console.log" "$CJOB/node$front.console" 2>/dev/null || true
  stop_cluster
  local ready=''
  [[ -f $CJOB/ready-at ]] && ready=" (cluster ready $(<"$CJOB/ready-at") s after node1's kernel started)"
  say "cluster stopped after $(since "$t0") s$ready"
}

# ---- commands --------------------------------------------------------------------------------

# parse_cluster_opts CMD ARGS...: sets C_NODES C_TOPO NO_BUILD LIMIT ARGS.
parse_cluster_opts() {
  local cmd=$1
  shift
  C_NODES=$CLUSTER_NODES_DEFAULT C_TOPO=$CLUSTER_TOPO_DEFAULT NO_BUILD='' ARGS=()
  LIMIT=${VL_VM_TIMEOUT:-$DEFAULT_TIMEOUT}
  while (($#)); do
    case $1 in
      -h | --help) usage_cluster; exit 0 ;;
      --nodes)
        [[ $# -ge 2 ]] || usage_error "cluster $cmd: --nodes needs a number, 2 to 8"
        C_NODES=$2
        shift ;;
      --nodes=*) C_NODES=${1#--nodes=} ;;
      --topology)
        [[ $# -ge 2 ]] || usage_error "cluster $cmd: --topology needs flat or leaf-spine"
        C_TOPO=$2
        shift ;;
      --topology=*) C_TOPO=${1#--topology=} ;;
      --no-build) NO_BUILD=1 ;;
      --timeout)
        [[ $cmd == run ]] || usage_error "cluster $cmd: no --timeout (it runs until you leave it)"
        [[ $# -ge 2 ]] || usage_error "cluster run: --timeout needs a number of seconds"
        LIMIT=$2
        shift ;;
      --)
        shift
        ARGS=("$@")
        break ;;
      -*) usage_error "cluster $cmd: unknown option '$1' (see scripts/$PROG cluster --help)" ;;
      *)
        [[ $cmd == shell ]] || usage_error "cluster $cmd: unexpected '$1' (the command goes after --)"
        ARGS+=("$1") ;;
    esac
    shift
  done
  [[ $C_NODES =~ ^[0-9]+$ ]] && ((C_NODES >= 2 && C_NODES <= 8)) \
    || usage_error "cluster $cmd: --nodes must be 2 to 8 (got '$C_NODES')"
  [[ $C_TOPO == flat || $C_TOPO == leaf-spine ]] \
    || usage_error "cluster $cmd: --topology must be flat or leaf-spine (got '$C_TOPO')"
  check_secs "cluster $cmd: --timeout (or VL_VM_TIMEOUT)" "$LIMIT"
}

cluster_jobdir() {
  CJOB=$(new_jobdir "cluster-$(date +%Y%m%d-%H%M%S)")
  if [[ -d $OUT/cluster-latest && ! -L $OUT/cluster-latest ]]; then rm -rf -- "$OUT/cluster-latest"; fi
  ln -sfn -- "${CJOB##*/}" "$OUT/cluster-latest"
  find "$OUT" -maxdepth 1 -name 'cluster-2*' -type d -printf '%T@ %p\n' | sort -rn | tail -n +6 \
    | cut -d' ' -f2- | xargs -r rm -rf --
}

cluster_traps() {
  trap 'stop_cluster' EXIT
}

cmd_cluster_run() {
  parse_cluster_opts run "$@"
  ((${#ARGS[@]})) || usage_error "cluster run: no command given (usage: $PROG cluster run [OPTIONS] -- CMD...)"
  prepare_boot
  cluster_jobdir
  cluster_traps
  printf '%s\n' "${ARGS[*]}" >"$CJOB/cmd"
  cluster_boot run "$C_NODES" "$C_TOPO" "$LIMIT"
  exit "$VM_STATUS"
}

cmd_cluster_shell() {
  parse_cluster_opts shell "$@"
  local target=${ARGS[0]:-node1}
  ((${#ARGS[@]} <= 1)) || usage_error "cluster shell: one NODE at most (got '${ARGS[*]}')"
  [[ $target =~ ^node([0-9]+)$ ]] && ((BASH_REMATCH[1] >= 1 && BASH_REMATCH[1] <= C_NODES)) \
    || usage_error "cluster shell: no node '$target' in a cluster of $C_NODES (node1..node$C_NODES)"
  prepare_boot
  cluster_jobdir
  cluster_traps
  LIMIT=$((7 * 24 * 3600))
  cluster_boot shell "$C_NODES" "$C_TOPO" "$LIMIT" "${BASH_REMATCH[1]}"
}

# The cluster a scenario asks for: its '# cluster: nodes=N topology=T' line (default 4 nodes,
# leaf-spine), printed as "N T".
scenario_cluster() {
  local line n=$CLUSTER_NODES_DEFAULT t=$CLUSTER_TOPO_DEFAULT w
  line=$(sed -n 's/^#[[:space:]]*cluster:[[:space:]]*//p' "$1" | head -n 1)
  for w in $line; do
    case $w in
      nodes=*) n=${w#nodes=} ;;
      topology=*) t=${w#topology=} ;;
      *) die "${1#"$REPO"/}: unknown '# cluster:' word '$w' (nodes=N topology=flat|leaf-spine)" ;;
    esac
  done
  [[ $n =~ ^[2-8]$ && ($t == flat || $t == leaf-spine) ]] \
    || die "${1#"$REPO"/}: '# cluster: $line' asks for 2-8 nodes, flat or leaf-spine"
  printf '%s %s\n' "$n" "$t"
}

cmd_cluster_test() {
  local filter='' limit='' f n
  NO_BUILD=''
  while (($#)); do
    case $1 in
      -h | --help) usage_cluster; return 0 ;;
      --filter)
        [[ $# -ge 2 ]] || usage_error "cluster test: --filter needs a pattern"
        filter=$2
        shift ;;
      --filter=*) filter=${1#--filter=} ;;
      --no-build) NO_BUILD=1 ;;
      --timeout)
        check_secs "cluster test: --timeout" "${2:-}"
        limit=$2
        shift ;;
      *) usage_error "cluster test: unknown argument '$1' (see scripts/$PROG cluster --help)" ;;
    esac
    shift
  done
  local rc=0
  grep -qE -- "$filter" </dev/null 2>/dev/null || rc=$?
  ((rc != 2)) || usage_error "cluster test: --filter '$filter' is not an extended regular expression"
  local all=() names=()
  shopt -s nullglob
  all=("$REPO"/tests/cluster/[0-9]*.sh)
  shopt -u nullglob
  ((${#all[@]})) || die "no cluster scenarios: tests/cluster/[0-9]*.sh matches nothing"
  for f in "${all[@]}"; do
    n=$(basename "$f" .sh)
    [[ -z $filter ]] || grep -qE -- "$filter" <<<"$n" || continue
    names+=("$n")
  done
  ((${#names[@]})) || usage_error "cluster test: no scenario matches --filter '$filter'"
  prepare_boot
  local scale
  scale=$(time_scale 0 "$(cut -d' ' -f1 /proc/loadavg)")
  TIME_SCALE=$scale
  # Groups: one boot per cluster shape, in the order their first scenario comes.
  declare -A group_of=()
  local shapes=() shape
  for n in "${names[@]}"; do
    shape=$(scenario_cluster "$REPO/tests/cluster/$n.sh")
    [[ -n ${group_of[$shape]:-} ]] || shapes+=("$shape")
    group_of[$shape]+="$n "
  done
  local passed=0 failed=0 verdict name glimit secs
  cluster_traps
  for shape in "${shapes[@]}"; do
    cluster_jobdir
    glimit=300
    for n in ${group_of[$shape]}; do
      f=$(scenario_timeout "$REPO/tests/cluster/$n.sh")
      printf '%s %s\n' "$n" "$((${f:-$CLUSTER_SCENARIO_TIMEOUT} * scale))"
      glimit=$((glimit + ${f:-$CLUSTER_SCENARIO_TIMEOUT} * scale + 5))
    done >"$CJOB/list"
    [[ -z $limit ]] || glimit=$limit
    say "cluster group: ${shape% *} nodes, ${shape#* }: ${group_of[$shape]}"
    cluster_boot test "${shape% *}" "${shape#* }" "$glimit"
    declare -A seen=()
    if [[ -f $CJOB/results ]]; then
      while IFS=$'\t' read -r verdict name secs _; do
        seen[$name]=1
        if [[ $verdict == PASS ]]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
      done <"$CJOB/results"
    fi
    for n in ${group_of[$shape]}; do
      [[ -n ${seen[$n]:-} ]] && continue
      printf 'FAIL  %s  (not run: the cluster stopped before it; see .vm-out/%s/)\n' "$n" "${CJOB##*/}"
      failed=$((failed + 1))
    done
    unset seen
  done
  printf '%d passed, %d failed\n' "$passed" "$failed"
  ((failed == 0)) || exit 1
}

cmd_cluster() {
  (($#)) || { usage_cluster >&2; exit 2; }
  local sub=$1
  shift
  case $sub in
    -h | --help | help) usage_cluster ;;
    run) cmd_cluster_run "$@" ;;
    shell) cmd_cluster_shell "$@" ;;
    test) cmd_cluster_test "$@" ;;
    *) usage_error "cluster: unknown command '$sub' (run, shell or test; see scripts/$PROG cluster --help)" ;;
  esac
}
