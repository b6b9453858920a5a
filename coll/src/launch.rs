//! `--np N`: N ranks of a collective on this machine, as child processes; with `--nnodes M
//! --node-rank K`, this node's N ranks of a job across M nodes, one launcher per node, as
//! torchrun starts them ([`NodeRanks`], [`run_node`]).
//!
//! The launcher re-executes its own binary (`/proc/self/exe`, through `verbs_lab::workers`, the
//! one supervisor of worker processes) N times with the arguments it was given plus `--rank R
//! --world-size W --local-rank I` ([`NodeRanks::rank_flags`]: on this machine alone R = I and
//! W = N; across nodes R = K × N + I and W = M × N), so each child is an ordinary rank that
//! bootstraps like any other. A local run adds `--master 127.0.0.1:PORT` (rank 0 listens on
//! PORT, a free loopback port); across nodes each child finds rank 0 where its launcher did,
//! at the `--master` among its arguments or the `MASTER_ADDR`/`MASTER_PORT` it inherits, and
//! node 0 must be that host, since its launcher starts rank 0 ([`check_master`]). The children
//! coordinate among themselves over the bootstrap star; the launcher only watches them
//! ([`workers::watch_all`]): when one exits non-zero or is killed it names that rank, gives the
//! others the grace period to notice and fail on their own (naming the same rank), then kills
//! whatever is left. A child dies with its launcher ([`child_setup`]), so nothing is left
//! behind. When the ranks' shared stdout loses its reader (`| head`), the launcher kills them
//! and ends quietly, and a rank that fails meanwhile says nothing ([`output_unread`]) — unless
//! the run still owes a report file or a gate's verdict (`owes_the_end`): then the ranks run to
//! the end. Across nodes each launcher does all this for its own ranks.
//!
//! With [`LocalRun::queues`] the ranks coordinate over POSIX message queues instead of TCP
//! (the benchmarks' `--np`; see [`super::mqlink`]): the children get
//! `--vl-coll-queues BASE` in place of `--master`, the rendezvous, barriers and results go
//! through the queues, and when a rank ends badly the launcher tells every other rank which one
//! and how ([`mqlink::gone_notice`]), so they fail naming it at once instead of after their
//! peer timeout. The queues are removed on every exit path (see [`child_setup`]). Queues are
//! per machine: a run across nodes goes over TCP.

use std::ffi::{OsStr, OsString};
use std::net::ToSocketAddrs;
use std::process::ExitCode;
use std::time::Duration;

mod args;
pub use args::LaunchArgs;

use super::env::MAX_WORLD;
use super::mqlink::{self, QUEUES, QUEUE_DEPTH};
use verbs_lab::mq::{self, Queue, MAX_MSG_LEN};
use verbs_lab::workers::{self, describe, Fate, Worker};

/// What happened to the ranks of a local run.
#[derive(Debug)]
pub struct Outcome {
    /// The exit code the launcher should end with: 0 all ok, 3 when every failure was a missed
    /// gate, 2 when every failure was a usage error, else 1.
    pub code: u8,
    /// One line per rank that did not end well, the first failure first.
    pub failures: Vec<String>,
}

impl Outcome {
    /// How a launcher ends: each failure of `run` (from [`run_local`]) on
    /// stderr as "TOOL: error: rank 2 (pid 4242) was killed by SIGKILL", and the exit code (1
    /// when the ranks could not be started).
    pub fn exit(run: Result<Outcome, String>, tool: &str) -> ExitCode {
        match run {
            Ok(o) => {
                for f in &o.failures {
                    verbs_lab::eprintln_whole!("{tool}: error: {f}");
                }
                ExitCode::from(o.code)
            }
            Err(e) => {
                verbs_lab::eprintln_whole!("{tool}: error: {e}");
                ExitCode::FAILURE
            }
        }
    }
}

/// A free TCP port on the loopback interface (the kernel's choice).
pub fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// How the ranks of a local run coordinate, and how the launcher behaves.
#[derive(Debug, Clone)]
pub struct LocalRun<'a> {
    /// The program's name, as [`Outcome::exit`] prints it (in the launcher's notes too).
    pub tool: &'a str,
    /// How long the others may take to fail by themselves once one has failed (their peer
    /// timeout, plus a margin).
    pub grace: Duration,
    /// Over POSIX message queues this launcher creates (each child must call [`child_setup`]
    /// with them first); `false`: over TCP to rank 0 on a free loopback port.
    pub queues: bool,
    /// The run owes more than its lines on stdout (a report file, a gate's verdict): when the
    /// ranks' stdout loses its reader, they go on to the end instead of being stopped.
    pub owes_the_end: bool,
}

/// Starts `np` ranks of this program with `args` (the caller's own arguments, without `argv[0]`)
/// and waits for them. Over queues (see the module documentation), the queues that launchers
/// now gone left behind are removed first, each removal said on stderr as "TOOL: note:
/// removed ...", and this launcher's queues are removed on every way out.
pub fn run_local(np: u32, args: &[OsString], run: &LocalRun<'_>) -> Result<Outcome, String> {
    let mut queues = Vec::new();
    let (flag, value) = if run.queues {
        for note in QUEUES.remove_orphans() {
            verbs_lab::eprintln_whole!("{}: note: {note}", run.tool);
        }
        mq::install_cleanup_on_signals()
            .map_err(|e| format!("cannot arrange for the queues' removal on Ctrl-C: {e}"))?;
        let base = QUEUES.base(std::process::id());
        queues = QUEUES
            .all(&base, np)
            .iter()
            .map(|n| Queue::create(n, QUEUE_DEPTH, MAX_MSG_LEN))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("cannot create the ranks' message queues: {e}"))?;
        ("--vl-coll-queues", base)
    } else {
        let port =
            free_port().map_err(|e| format!("no free loopback port for the rendezvous: {e}"))?;
        ("--master", format!("127.0.0.1:{port}"))
    };
    let mut ranks = spawn_ranks(&NodeRanks::this_machine(np), args, &[flag, &value])?;
    Ok(supervise(&mut ranks, run.grace, !run.owes_the_end, &queues))
    // `queues` dropped here: their names are removed.
}

/// One launcher's share of a job, as torchrun divides it (`--nproc-per-node`, `--nnodes`,
/// `--node-rank`): `np` ranks on this node, which is node `node_rank` of `nnodes`. Its ranks are
/// `node_rank × np` to `node_rank × np + np − 1` of a world of `nnodes × np`, with local ranks
/// `0..np`, so that the launchers of all the nodes, started alike, make each rank once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeRanks {
    pub np: u32,
    pub nnodes: u32,
    pub node_rank: u32,
}

impl NodeRanks {
    /// `--np np` alone: the whole job on this machine (the caller checks `np`).
    pub fn this_machine(np: u32) -> NodeRanks {
        NodeRanks {
            np,
            nnodes: 1,
            node_rank: 0,
        }
    }

    /// Node `node_rank` of `nnodes`, with `np` ranks each. Refused, saying what to give: no
    /// node, a node rank outside `0..nnodes`, no rank, or a world above [`MAX_WORLD`].
    pub fn new(np: u32, nnodes: u32, node_rank: u32) -> Result<NodeRanks, String> {
        if nnodes == 0 || nnodes > MAX_WORLD {
            return Err(format!(
                "--nnodes {nnodes}: give 1..{MAX_WORLD} nodes (each runs one launcher with --np \
                 ranks)"
            ));
        }
        if node_rank >= nnodes {
            return Err(format!(
                "--node-rank {node_rank}: give 0..{}, this node's number among the --nnodes \
                 {nnodes} (each node's launcher its own, node 0 on the host of --master)",
                nnodes - 1
            ));
        }
        if np == 0 || u64::from(np) * u64::from(nnodes) > u64::from(MAX_WORLD) {
            return Err(match nnodes {
                1 => format!("--np {np}: give 1..{MAX_WORLD} ranks"),
                _ => format!(
                    "--np {np}: give 1..{} ranks per node: the world, --nnodes {nnodes} × --np, \
                     is at most {MAX_WORLD} ranks",
                    MAX_WORLD / nnodes
                ),
            });
        }
        Ok(NodeRanks {
            np,
            nnodes,
            node_rank,
        })
    }

    /// The ranks of the whole job.
    pub fn world_size(&self) -> u32 {
        self.np * self.nnodes
    }

    /// The rank of this node's local rank `local`.
    pub fn rank(&self, local: u32) -> u32 {
        self.node_rank * self.np + local
    }

    /// What the child for local rank `local` is given to be that rank: `--rank`,
    /// `--world-size` and `--local-rank`, with their values.
    pub fn rank_flags(&self, local: u32) -> [String; 6] {
        [
            "--rank".into(),
            self.rank(local).to_string(),
            "--world-size".into(),
            self.world_size().to_string(),
            "--local-rank".into(),
            local.to_string(),
        ]
    }
}

/// Whether rank 0's rendezvous address `host:port` (written `given`, as the user gave it:
/// `--master node1:29500`, `MASTER_ADDR=node1 MASTER_PORT=29500`) can work from this node:
/// every node must resolve it, and node 0, whose launcher starts rank 0, must be that host —
/// rank 0 listens on the port on all of its host's addresses, and the other ranks connect to
/// `host`. Refused, saying what to do: a host that does not resolve or is no address at all
/// (`0.0.0.0`), and on node 0 a host that is not one of this machine's addresses. A loopback
/// master is accepted (every "node" on one machine, as the tests start them); across machines
/// the other nodes then find no rank 0 and say so.
pub fn check_master(
    node: &NodeRanks,
    (host, port): (&str, u16),
    given: &str,
) -> Result<(), String> {
    let addrs: Vec<std::net::SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| {
            format!(
                "{given}: cannot resolve {host}: {e}; give node 0's address, or a host name \
                 every node resolves"
            )
        })?
        .collect();
    if addrs.iter().any(|a| a.ip().is_unspecified()) {
        return Err(format!(
            "{given}: {host} is no host's address; give node 0's address, the same on every node"
        ));
    }
    if node.node_rank != 0 {
        return Ok(());
    }
    // An address of this machine is one a socket can be bound to.
    if addrs
        .iter()
        .any(|a| std::net::UdpSocket::bind((a.ip(), 0)).is_ok())
    {
        return Ok(());
    }
    let ips: Vec<String> = addrs.iter().map(|a| a.ip().to_string()).collect();
    let what = match ips.as_slice() {
        [ip] if ip == host => host.to_string(),
        _ => format!("{host} ({})", ips.join(", ")),
    };
    Err(format!(
        "{given}: {what} is not an address of this host ({}): node 0's launcher starts rank 0, \
         which listens there for every other rank — start --node-rank 0 on {host}, or give as \
         master an address of this host, the same on every node",
        super::bootstrap::place::this_host().0
    ))
}

/// Starts this node's ranks of a job across nodes (`node`) with `args` (the caller's own
/// arguments, without `argv[0]`) and waits for them, as [`run_local`] does for a local run:
/// each child gets `args` and [`NodeRanks::rank_flags`], and finds rank 0 where this launcher
/// did (the `--master` among `args`, or the `MASTER_ADDR`/`MASTER_PORT` it inherits; see
/// [`check_master`]). Over TCP: message queues are per machine.
pub fn run_node(
    node: &NodeRanks,
    args: &[OsString],
    run: &LocalRun<'_>,
) -> Result<Outcome, String> {
    if run.queues {
        return Err("message queues are per machine: ranks on several nodes meet over TCP".into());
    }
    let mut ranks = spawn_ranks(node, args, &[])?;
    Ok(supervise(&mut ranks, run.grace, !run.owes_the_end, &[]))
}

/// Starts the children of `node`'s ranks through `verbs_lab::workers` (worker index = rank):
/// `args`, then the rank flags, then `extra`. Those started before one that fails are killed
/// and reaped (a [`Worker`] dropped).
fn spawn_ranks(node: &NodeRanks, args: &[OsString], extra: &[&str]) -> Result<Vec<Worker>, String> {
    (0..node.np)
        .map(|local| {
            let rank = node.rank(local);
            let flags = node.rank_flags(local);
            let all = args
                .iter()
                .map(OsString::as_os_str)
                .chain(flags.iter().map(OsStr::new))
                .chain(extra.iter().map(OsStr::new));
            Worker::spawn(rank, all, true).map_err(|e| format!("cannot start rank {rank}: {e}"))
        })
        .collect()
}

/// Waits for every rank ([`workers::watch_all`]); see [`run_local`]. `notify`: the ranks'
/// queues of a local run (index = rank), where the first rank that ends badly is announced to
/// the others.
fn supervise(
    ranks: &mut [Worker],
    grace: Duration,
    stop_when_unread: bool,
    notify: &[Queue],
) -> Outcome {
    let failures = workers::watch_all(ranks, grace, stop_when_unread, |w, st| {
        let notice = mqlink::gone_notice(w.index, &format!("pid {} {}", w.pid(), describe(st)));
        for (r, q) in notify.iter().enumerate() {
            if r as u32 != w.index {
                let _ = q.send_timeout(&notice, 0, Duration::from_millis(200));
            }
        }
    });
    let codes: Vec<i32> = failures
        .iter()
        .map(|f| match f.fate {
            Fate::Failed(st) => st.code().unwrap_or(1),
            Fate::Killed => 1,
        })
        .collect();
    let code = if codes.is_empty() {
        0
    } else if codes.iter().all(|c| *c == 3) {
        3
    } else if codes.iter().all(|c| *c == 2) {
        2
    } else {
        1
    };
    let failures = failures
        .iter()
        .map(|f| match f.fate {
            Fate::Failed(st) => format!("rank {} (pid {}) {}", f.index, f.pid, describe(st)),
            Fate::Killed => format!(
                "rank {} (pid {}) was still running {:.0} s after the first failure and was \
                 killed",
                f.index,
                f.pid,
                grace.as_secs_f64()
            ),
        })
        .collect();
    Outcome { code, failures }
}

/// Whether this is a rank that `--np` started whose output no one reads any more (the
/// stdout it shares with its launcher lost its reader: `| head`). Such a rank keeps a failure
/// to itself: it is only the echo of a rank that left at its first unread line, and the
/// launcher ends the run quietly ([`workers::watch_all`]).
pub fn output_unread() -> bool {
    started_by_launcher() && verbs_lab::stdout::reader_gone()
}

/// Whether this process is a rank that a launcher here started ([`run_local`], [`run_node`]):
/// [`Worker::spawn`] names its launcher in [`workers::COORDINATOR_ENV`].
pub fn started_by_launcher() -> bool {
    std::env::var_os(workers::COORDINATOR_ENV).is_some()
}

/// Called first thing in a rank that [`run_local`] started, before any other thread starts: it
/// dies when its launcher dies, even by SIGKILL, so no rank outlives an interrupted run. A rank
/// coordinated over the launcher's queues (`queues`: their base name and how many) also removes
/// them then (`PR_SET_PDEATHSIG`, then a thread removes the queues and ends the rank), so a
/// launcher killed outright leaves nothing in /dev/mqueue. Fails when no launcher started this
/// process, or the launcher is already gone.
pub fn child_setup(queues: Option<(&str, u32)>) -> Result<(), String> {
    match queues {
        None => workers::follow_coordinator(&[]).map(drop),
        Some((base, world)) => {
            workers::follow_queues(&QUEUES, base, world, "--vl-coll-queues").map(drop)
        }
    }
    .map_err(|e| format!("tying this rank to its launcher (--np): {e}"))
}
