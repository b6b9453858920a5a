//! Who am I in the job: rank, world size, local rank and the rendezvous address, from flags or
//! from the environment a launcher sets.
//!
//! Flags (`--rank`, `--world-size`, `--master`) override the environment: with them it is not
//! read, nor compared. Otherwise the first source that is present is used, in this order (the
//! innermost launcher first): torchrun (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`), Open MPI
//! (`OMPI_COMM_WORLD_RANK`, `OMPI_COMM_WORLD_SIZE`, `OMPI_COMM_WORLD_LOCAL_RANK`), MPICH/Hydra
//! (`PMI_RANK`, `PMI_SIZE`), Slurm (`SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_LOCALID`). A source
//! counts as present when any of its variables is set; a present source must be complete and
//! numeric, or the error names the variable. With none present the job is a single rank.
//!
//! Two present sources must agree on the rank, the world size and (where both have one) the
//! local rank, or the job is refused naming both: a `RANK=0 WORLD_SIZE=1` left exported in the
//! shell would otherwise make every rank of `mpirun -np 2` a world of its own that "passes"
//! without a byte on the network. Not compared, because a real launch sets them to other
//! values: the outer launcher's variables under torchrun (`srun torchrun`,
//! `mpirun torchrun`: one torchrun agent per outer task starts several ranks), recognised by
//! `TORCHELASTIC_RUN_ID`, which torchrun sets and a hand-exported `RANK` lacks; and Slurm's
//! under an MPI launcher (`mpirun` or `mpiexec` inside a Slurm allocation: `SLURM_PROCID`
//! describes the batch step or the launcher's daemon, not this rank; under `srun --mpi=...`
//! they agree anyway) — except around an MPI world of one started as Slurm task 1 or later,
//! one of several single-rank jobs that `srun -n N` started, each of which would run alone.
//!
//! The rendezvous address (rank 0's bootstrap listener) comes from `--master HOST:PORT`, else
//! `MASTER_ADDR` + `MASTER_PORT` (as torch under mpirun or srun expects), and is needed only
//! when there is more than one rank.

/// Where the rank and world size came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Launcher {
    Flags,
    Torchrun,
    OpenMpi,
    Mpich,
    Slurm,
    /// `--np N` of our tools: ranks on this machine, started by the local launcher and
    /// coordinated over its POSIX message queues.
    LocalQueues,
    /// Nothing set: one rank alone.
    Single,
}

impl Launcher {
    pub fn name(self) -> &'static str {
        match self {
            Launcher::Flags => "flags (--rank/--world-size)",
            Launcher::Torchrun => "torchrun (RANK/WORLD_SIZE)",
            Launcher::OpenMpi => "Open MPI (OMPI_COMM_WORLD_*)",
            Launcher::Mpich => "MPICH/Hydra (PMI_RANK/PMI_SIZE)",
            Launcher::Slurm => "Slurm (SLURM_PROCID/SLURM_NTASKS)",
            Launcher::LocalQueues => "--np (this machine, POSIX message queues)",
            Launcher::Single => "none (a single rank)",
        }
    }
}

crate::display_by_name!(Launcher);

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
/// not the outer launchers of a process torchrun started, nor Slurm under an MPI launcher —
/// unless that MPI job is a world of one started as a Slurm task other than 0, which is one of
/// several single-rank jobs `srun` started, each running alone (see the module documentation).
fn compared<'a>(
    first: &'static Source,
    world: u32,
    env: &'a dyn Fn(&str) -> Option<String>,
) -> impl Iterator<Item = &'static Source> + 'a {
    let by_torchrun = first.launcher == Launcher::Torchrun && env("TORCHELASTIC_RUN_ID").is_some();
    let under_mpi = present(env).any(|s| matches!(s.launcher, Launcher::OpenMpi | Launcher::Mpich));
    let one_of_many_lone_jobs = world == 1 && env("SLURM_PROCID").is_some_and(|p| p.trim() != "0");
    let slurm_is_outer = under_mpi && !one_of_many_lone_jobs;
    let explained =
        move |s: &Source| by_torchrun || (s.launcher == Launcher::Slurm && slurm_is_outer);
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
        for other in compared(first, mine.1, env) {
            agree(first, &mine, other, &read(other, env)?)?;
        }
        let (rank, world, local) = mine;
        (first.launcher, rank, world, local.or(flags.local_rank))
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
    let master = master(flags, env)?;
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

fn master(
    flags: &RankFlags,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<(String, u16)>, String> {
    if let Some(m) = &flags.master {
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
