//! Who am I in the job: rank, world size, local rank and the rendezvous address, from flags or
//! from the environment a launcher sets.
//!
//! Flags (`--rank`, `--world-size`, `--master`) override the environment: with them it is not
//! read, nor compared. Otherwise the first source that is present is used, in this order (the
//! innermost launcher first): torchrun or DeepSpeed (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`), Open
//! MPI (`OMPI_COMM_WORLD_RANK`, `OMPI_COMM_WORLD_SIZE`, `OMPI_COMM_WORLD_LOCAL_RANK`),
//! MPICH/Hydra (`PMI_RANK`, `PMI_SIZE`), Slurm (`SLURM_PROCID`, `SLURM_NTASKS`,
//! `SLURM_LOCALID`). A source counts as present when any of its variables is set; a present
//! source must be complete and numeric, or the error names the variable. With none present the
//! job is a single rank.
//!
//! DeepSpeed's launcher sets torchrun's variables and, where it differs, its own: `CROSS_RANK`
//! (the node's rank), `CROSS_SIZE` (the nodes) and `LOCAL_SIZE` (the ranks on this node), all
//! three from `deepspeed.launcher.launch` (`deepspeed`, pdsh or `--no_ssh`), `LOCAL_SIZE` alone
//! from its MPICH and Intel MPI runners. When they are present the launcher is named DeepSpeed,
//! and they must be complete and agree with `RANK`, `WORLD_SIZE` and `LOCAL_RANK` as that
//! launcher sets them (`deepspeed`), or the job is refused naming the variables.
//!
//! Two present sources must agree on the rank, the world size and (where both have one) the
//! local rank, or the job is refused naming both: a `RANK=0 WORLD_SIZE=1` left exported in the
//! shell would otherwise make every rank of `mpirun -np 2` a world of its own that "passes"
//! without a byte on the network. Not compared, because a real launch sets them to other
//! values: the outer launcher's variables under torchrun (`srun torchrun`,
//! `mpirun torchrun`: one torchrun agent per outer task starts several ranks), recognised by
//! `TORCHELASTIC_RUN_ID`, which torchrun sets and a hand-exported `RANK` lacks, and under
//! DeepSpeed's per-node launcher (`srun deepspeed --no_ssh --node_rank ...`), recognised by its
//! `CROSS_RANK`/`CROSS_SIZE`; and Slurm's under an MPI launcher (`mpirun` or `mpiexec` inside
//! a Slurm allocation: `SLURM_PROCID` describes the batch step or the launcher's daemon, not
//! this rank; under `srun --mpi=...` they agree anyway) — except around an MPI world of one
//! started as Slurm task 1 or later, one of several single-rank jobs that `srun -n N` started,
//! each of which would run alone.
//!
//! The rendezvous address (rank 0's bootstrap listener) comes from `--master HOST:PORT`, else
//! `MASTER_ADDR` + `MASTER_PORT` (as torch under mpirun or srun expects), and is needed only
//! when there is more than one rank.

/// Where the rank and world size came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Launcher {
    Flags,
    Torchrun,
    /// torchrun's variables with DeepSpeed's `CROSS_RANK`, `CROSS_SIZE`, `LOCAL_SIZE`.
    DeepSpeed,
    OpenMpi,
    Mpich,
    Slurm,
    /// `--np N` of our tools: ranks on this machine, started by the local launcher and
    /// coordinated over its POSIX message queues.
    LocalQueues,
    /// `--np N --nnodes M --node-rank K`: one launcher per node, torchrun's way; the ranks meet
    /// over TCP at `--master`.
    Nodes,
    /// Nothing set: one rank alone.
    Single,
}

impl Launcher {
    pub fn name(self) -> &'static str {
        match self {
            Launcher::Flags => "flags (--rank/--world-size)",
            Launcher::Torchrun => "torchrun (RANK/WORLD_SIZE)",
            Launcher::DeepSpeed => "DeepSpeed (RANK/WORLD_SIZE, CROSS_RANK/CROSS_SIZE/LOCAL_SIZE)",
            Launcher::OpenMpi => "Open MPI (OMPI_COMM_WORLD_*)",
            Launcher::Mpich => "MPICH/Hydra (PMI_RANK/PMI_SIZE)",
            Launcher::Slurm => "Slurm (SLURM_PROCID/SLURM_NTASKS)",
            Launcher::LocalQueues => "--np (this machine, POSIX message queues)",
            Launcher::Nodes => "--np with --nnodes (one launcher per node, over TCP)",
            Launcher::Single => "none (a single rank)",
        }
    }
}

verbs_lab::display_by_name!(Launcher);

/// The bootstrap flags as a tool parsed them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RankFlags {
    pub rank: Option<u32>,
    pub world_size: Option<u32>,
    pub local_rank: Option<u32>,
    /// `HOST:PORT` of rank 0's bootstrap listener.
    pub master: Option<String>,
}

/// This process's place in the job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankInfo {
    pub rank: u32,
    pub world_size: u32,
    /// The rank among the ranks on this host, as the launcher gave it (`LOCAL_RANK`,
    /// `OMPI_COMM_WORLD_LOCAL_RANK`, `SLURM_LOCALID`, `--local-rank`); it picks the device and
    /// CPU. `None`: no launcher gave it, and the rendezvous counts the ranks of each host from
    /// their host names ([`super::bootstrap::place`]).
    pub local_rank: Option<u32>,
    pub launcher: Launcher,
    /// Rank 0's bootstrap address; `None` only for a single rank.
    pub master: Option<(String, u16)>,
}

/// The largest world size accepted (the bootstrap table and the tests' schedules stay small).
pub const MAX_WORLD: u32 = 1024;

struct Source {
    launcher: Launcher,
    rank: &'static str,
    size: &'static str,
    local: Option<&'static str>,
}

const SOURCES: [Source; 4] = [
    Source {
        launcher: Launcher::Torchrun,
        rank: "RANK",
        size: "WORLD_SIZE",
        local: Some("LOCAL_RANK"),
    },
    Source {
        launcher: Launcher::OpenMpi,
        rank: "OMPI_COMM_WORLD_RANK",
        size: "OMPI_COMM_WORLD_SIZE",
        local: Some("OMPI_COMM_WORLD_LOCAL_RANK"),
    },
    Source {
        launcher: Launcher::Mpich,
        rank: "PMI_RANK",
        size: "PMI_SIZE",
        local: None,
    },
    Source {
        launcher: Launcher::Slurm,
        rank: "SLURM_PROCID",
        size: "SLURM_NTASKS",
        local: Some("SLURM_LOCALID"),
    },
];

fn number(name: &str, v: &str) -> Result<u32, String> {
    use std::num::IntErrorKind;
    v.trim().parse::<u32>().map_err(|e| match e.kind() {
        IntErrorKind::PosOverflow => {
            format!("{name}={v:?} is too large: ranks and world sizes go up to {MAX_WORLD}")
        }
        _ => format!("{name}={v:?} is not a non-negative integer"),
    })
}

/// The sources whose variables are set, in [`SOURCES`]' order.
fn present<'a>(
    env: &'a dyn Fn(&str) -> Option<String>,
) -> impl Iterator<Item = &'static Source> + 'a {
    SOURCES
        .iter()
        .filter(move |s| env(s.rank).is_some() || env(s.size).is_some())
}

/// The present sources after `first` (whose world size is `world`) that must agree with it:
/// not the outer launchers of a process that a per-node agent started (`by_agent`: torchrun,
/// or DeepSpeed's launcher), nor Slurm under an MPI launcher — unless that MPI job is a world
/// of one started as a Slurm task other than 0, which is one of several single-rank jobs `srun`
/// started, each running alone (see the module documentation).
fn compared<'a>(
    first: &'static Source,
    world: u32,
    by_agent: bool,
    env: &'a dyn Fn(&str) -> Option<String>,
) -> impl Iterator<Item = &'static Source> + 'a {
    let under_mpi = present(env).any(|s| matches!(s.launcher, Launcher::OpenMpi | Launcher::Mpich));
    let one_of_many_lone_jobs = world == 1 && env("SLURM_PROCID").is_some_and(|p| p.trim() != "0");
    let slurm_is_outer = under_mpi && !one_of_many_lone_jobs;
    let explained = move |s: &Source| by_agent || (s.launcher == Launcher::Slurm && slurm_is_outer);
    present(env)
        .skip_while(move |s| s.launcher != first.launcher)
        .skip(1)
        .filter(move |s| !explained(s))
}

/// A present source's rank, world size and local rank (if it has one); an incomplete or
/// non-numeric source is refused naming the variable.
fn read(
    s: &Source,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(u32, u32, Option<u32>), String> {
    let get = |name: &str| -> Result<u32, String> {
        match env(name) {
            Some(v) => number(name, &v),
            None => Err(format!(
                "{} is set but {name} is not: the {} environment is incomplete",
                if name == s.rank { s.size } else { s.rank },
                s.launcher
            )),
        }
    };
    let rank = get(s.rank)?;
    let world = get(s.size)?;
    let local = match s.local.and_then(|l| env(l).map(|v| (l, v))) {
        Some((l, v)) => Some(number(l, &v)?),
        None => None,
    };
    Ok((rank, world, local))
}

/// Two launchers' variables that give this process different places: refused, naming both
/// and what to do (one of them is stale, left exported from another run).
fn agree(
    a: &Source,
    (ar, aw, al): &(u32, u32, Option<u32>),
    b: &Source,
    (br, bw, bl): &(u32, u32, Option<u32>),
) -> Result<(), String> {
    let local_differs = matches!((al, bl), (Some(x), Some(y)) if x != y);
    if ar == br && aw == bw && !local_differs {
        return Ok(());
    }
    let vars = |s: &Source, r: u32, w: u32, l: Option<u32>| {
        let mut v = format!("{}={r} {}={w}", s.rank, s.size);
        if let (Some(name), Some(l), true) = (s.local, l, local_differs) {
            v.push_str(&format!(" {name}={l}"));
        }
        v
    };
    let unset = |s: &Source| {
        std::iter::once(s.rank)
            .chain([s.size])
            .chain(s.local)
            .collect::<Vec<_>>()
            .join(" ")
    };
    Err(format!(
        "two launchers disagree about this process: {} ({}) but {} ({}); one of them is \
         stale, left exported from another run: unset its variables (`unset {}` or `unset {}`), \
         or give --rank and --world-size (with --master), which override the environment",
        vars(a, *ar, *aw, *al),
        a.launcher,
        vars(b, *br, *bw, *bl),
        b.launcher,
        unset(a),
        unset(b),
    ))
}

/// Which of DeepSpeed's launchers set its variables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DeepSpeedVia {
    /// `deepspeed.launcher.launch`, one per node (`deepspeed` over pdsh, or `--no_ssh`):
    /// `CROSS_RANK`, `CROSS_SIZE` and `LOCAL_SIZE`. An agent like torchrun's: the variables of
    /// a launcher around it (`srun`) describe the agent, not this rank.
    PerNode,
    /// Its MPICH and Intel MPI runners: `LOCAL_SIZE` alone, inside the MPI launch.
    MpiRunner,
}

const CROSS_RANK: &str = "CROSS_RANK";
const CROSS_SIZE: &str = "CROSS_SIZE";
const LOCAL_SIZE: &str = "LOCAL_SIZE";

/// DeepSpeed's variables beside torchrun's `(rank, world, local)`: `None` when none is set,
/// else which launcher set them, once they are complete and agree with the three as DeepSpeed
/// sets them (`deepspeed/launcher/launch.py`: the ranks numbered node by node, at least one
/// per node, `LOCAL_RANK` = `RANK` mod `LOCAL_SIZE`). Under DeepSpeed's elastic agent (torch
/// elastic, `TORCHELASTIC_RUN_ID`) the rendezvous may place a node elsewhere than `CROSS_RANK`
/// and fewer nodes than `CROSS_SIZE` may join: only the bounds are checked then. An incomplete
/// set, or one that disagrees ([`deepspeed_mismatch`]), is refused naming the variables and
/// what to do.
fn deepspeed(
    env: &dyn Fn(&str) -> Option<String>,
    (rank, world, local): (u32, u32, Option<u32>),
) -> Result<Option<DeepSpeedVia>, String> {
    let Some(first) = [CROSS_RANK, CROSS_SIZE, LOCAL_SIZE]
        .into_iter()
        .find(|v| env(v).is_some())
    else {
        return Ok(None);
    };
    let get = |name: &str| match env(name) {
        Some(v) => number(name, &v),
        None => Err(format!(
            "{first} is set but {name} is not: the {} environment is incomplete (its launchers \
             set {LOCAL_SIZE} and LOCAL_RANK, and {CROSS_RANK} with {CROSS_SIZE})",
            Launcher::DeepSpeed
        )),
    };
    let local_size = get(LOCAL_SIZE)?;
    let local = match local {
        Some(l) => l,
        None => get("LOCAL_RANK")?,
    };
    let cross = match (env(CROSS_RANK), env(CROSS_SIZE)) {
        (None, None) => None,
        _ => Some((get(CROSS_RANK)?, get(CROSS_SIZE)?)),
    };
    let via = match cross {
        Some(_) => DeepSpeedVia::PerNode,
        None => DeepSpeedVia::MpiRunner,
    };
    let elastic = env("TORCHELASTIC_RUN_ID").is_some();
    let Some(why) = deepspeed_mismatch((rank, world, local), local_size, cross, elastic) else {
        return Ok(Some(via));
    };
    let mut vars =
        format!("RANK={rank} WORLD_SIZE={world} LOCAL_RANK={local} {LOCAL_SIZE}={local_size}");
    if let Some((node, nodes)) = cross {
        vars.push_str(&format!(" {CROSS_RANK}={node} {CROSS_SIZE}={nodes}"));
    }
    Err(format!(
        "DeepSpeed's variables disagree about this process: {vars}: {why}; some of them are \
         stale, left exported from another run: unset them (`unset RANK WORLD_SIZE LOCAL_RANK \
         {CROSS_RANK} {CROSS_SIZE} {LOCAL_SIZE}`), or give --rank and --world-size (with \
         --master), which override the environment"
    ))
}

/// Why DeepSpeed's `LOCAL_SIZE` and (`CROSS_RANK`, `CROSS_SIZE`) cannot go with `(rank, world,
/// local)` as its launchers set them, if they cannot (see [`deepspeed`]); `elastic`: under its
/// elastic agent, where only the bounds hold. A rank not below the world size is left to
/// [`resolve`]'s own check.
fn deepspeed_mismatch(
    (rank, world, local): (u32, u32, u32),
    local_size: u32,
    cross: Option<(u32, u32)>,
    elastic: bool,
) -> Option<&'static str> {
    if rank >= world {
        None
    } else if local >= local_size {
        Some("LOCAL_RANK must be below LOCAL_SIZE, the ranks on this node")
    } else if local_size > world {
        Some("LOCAL_SIZE, the ranks on this node, cannot exceed WORLD_SIZE")
    } else {
        match cross {
            Some((node, nodes)) if node >= nodes => {
                Some("CROSS_RANK, this node's rank, must be below CROSS_SIZE, the nodes")
            }
            Some(_) if elastic => None,
            Some(_) if local != rank % local_size => {
                Some("DeepSpeed's launcher gives LOCAL_RANK = RANK mod LOCAL_SIZE")
            }
            Some((node, nodes)) => {
                // At least one rank on each node before this one, and on each after it.
                let (node, nodes, rank, world) = (
                    u64::from(node),
                    u64::from(nodes),
                    u64::from(rank),
                    u64::from(world),
                );
                let fits = rank >= node
                    && world - rank >= nodes - node
                    && u64::from(local_size) + nodes - 1 <= world;
                (!fits).then_some(
                    "DeepSpeed's launcher numbers the ranks node by node, at least one on each \
                     node: node CROSS_RANK of CROSS_SIZE, with LOCAL_SIZE ranks, cannot hold \
                     this RANK of WORLD_SIZE",
                )
            }
            None => None,
        }
    }
}

/// Resolves the rank from `flags` and the environment `env` (a lookup, so tests need not touch
/// the process environment). Errors say which flag or variable is wrong and what to do.
pub fn resolve(
    flags: &RankFlags,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<RankInfo, String> {
    let (launcher, rank, world, local) = if flags.rank.is_some() || flags.world_size.is_some() {
        match (flags.rank, flags.world_size) {
            (Some(r), Some(w)) => (Launcher::Flags, r, w, flags.local_rank),
            (Some(_), None) => return Err("--rank needs --world-size too".into()),
            _ => return Err("--world-size needs --rank too".into()),
        }
    } else if let Some(first) = present(env).next() {
        let mine = read(first, env)?;
        let torchrun = first.launcher == Launcher::Torchrun;
        let deepspeed = if torchrun {
            deepspeed(env, mine)?
        } else {
            None
        };
        // A per-node agent started this process: the outer launcher's variables are its own.
        let by_agent = torchrun
            && (env("TORCHELASTIC_RUN_ID").is_some() || deepspeed == Some(DeepSpeedVia::PerNode));
        for other in compared(first, mine.1, by_agent, env) {
            agree(first, &mine, other, &read(other, env)?)?;
        }
        let (rank, world, local) = mine;
        let launcher = match deepspeed {
            Some(_) => Launcher::DeepSpeed,
            None => first.launcher,
        };
        (launcher, rank, world, local.or(flags.local_rank))
    } else {
        (Launcher::Single, 0, 1, flags.local_rank)
    };
    if world == 0 {
        return Err(format!(
            "world size 0 (from {launcher}): a job needs at least one rank"
        ));
    }
    if world > MAX_WORLD {
        return Err(format!(
            "world size {world} (from {launcher}) is above the limit of {MAX_WORLD}"
        ));
    }
    if rank >= world {
        return Err(format!(
            "rank {rank} is not below the world size {world} (from {launcher}): ranks are numbered \
             0..{}",
            world - 1
        ));
    }
    let master = master_address(flags.master.as_deref(), env)?;
    if world > 1 && master.is_none() {
        return Err(format!(
            "{world} ranks need a rendezvous address: give --master HOST:PORT (rank 0's host) or \
             set MASTER_ADDR and MASTER_PORT"
        ));
    }
    Ok(RankInfo {
        rank,
        world_size: world,
        local_rank: local,
        launcher,
        master,
    })
}

/// Resolves from the flags and this process's environment.
pub fn from_env(flags: &RankFlags) -> Result<RankInfo, String> {
    resolve(flags, &|k| std::env::var(k).ok())
}

/// `HOST:PORT` → host and port (`[v6]:port` accepted).
pub fn parse_host_port(s: &str) -> Result<(String, u16), String> {
    let (host, port) = s
        .rsplit_once(':')
        .ok_or_else(|| format!("--master {s:?}: expected HOST:PORT"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(format!("--master {s:?}: the host is empty"));
    }
    let port = port
        .parse::<u16>()
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| format!("--master {s:?}: the port must be 1..65535"))?;
    Ok((host.to_string(), port))
}

/// Rank 0's rendezvous address: `flag` (`--master HOST:PORT`), else `MASTER_ADDR` and
/// `MASTER_PORT` from `env`; `None` when neither is given. Every rank and launcher finds it
/// this way.
pub fn master_address(
    flag: Option<&str>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<(String, u16)>, String> {
    if let Some(m) = flag {
        return parse_host_port(m).map(Some);
    }
    match (env("MASTER_ADDR"), env("MASTER_PORT")) {
        (Some(a), Some(p)) if !a.is_empty() => {
            let port = p
                .trim()
                .parse::<u16>()
                .ok()
                .filter(|p| *p != 0)
                .ok_or_else(|| format!("MASTER_PORT={p:?} is not a port number (1..65535)"))?;
            Ok(Some((a, port)))
        }
        (Some(_), Some(_)) => Err("MASTER_ADDR is empty: set it to rank 0's host".into()),
        (Some(_), None) => Err("MASTER_ADDR is set but MASTER_PORT is not".into()),
        (None, Some(_)) => Err("MASTER_PORT is set but MASTER_ADDR is not".into()),
        _ => Ok(None),
    }
}

/// The device of local rank `local` from a `-d` list (round-robin).
pub fn pick_device(devices: &[String], local: u32) -> Option<&str> {
    (!devices.is_empty()).then(|| devices[local as usize % devices.len()].as_str())
}
