//! # Lesson 16 — many hosts: how a job starts, as NCCL's own MPI example starts it
//!
//! Lesson 15 ran a ring on one machine, with a launcher that handed every rank its place. On a
//! cluster the ranks are spread over hosts by a launcher you do not write (mpirun, srun,
//! torchrun, DeepSpeed), and NCCL's example program (`Example 2: One Device per Process or
//! Thread` in NCCL's documentation) starts like this:
//!
//! 1. **MPI_Init**: the launcher's world — every rank knows its rank and the world size.
//! 2. **Local rank from host names**: each rank hashes its host name, an `MPI_Allgather` gives
//!    every rank all the hashes, and each counts the lower ranks with its own hash: that is its
//!    local rank (which GPU it takes), and the ranks with its hash are the local count.
//! 3. **The unique id**: rank 0 calls `ncclGetUniqueId` (the address of a listening socket and a
//!    random magic) and `MPI_Bcast`s it to every rank.
//! 4. **ncclCommInitRank(comm, nranks, id, rank)**: every rank meets the others at the id's
//!    address and builds the communicator — the rendezvous, the QPs, the ring.
//! 5. **ncclAllReduce**: one all-reduce, checked.
//!
//! There is no MPI here: the launcher's world is a TCP star around rank 0 at `--master` (or
//! `MASTER_ADDR:MASTER_PORT`), which gives the same gather and broadcast. The communicator is
//! lesson 15's, `vl_coll::Comm`, met at the unique id rank 0 made. Step 6 puts numbers
//! on the choice every data-parallel job makes: a parameter server, or collectives.
//!
//! ```text
//! srun -N 4 -n 8 lesson16_many_hosts -d rxe0 --master node1:29500     # Slurm
//! mpirun --hostfile HOSTS -np 8 -x MASTER_ADDR=node1 -x MASTER_PORT=29500 lesson16_many_hosts -d rxe0
//! RANK=3 WORLD_SIZE=8 MASTER_ADDR=node1 MASTER_PORT=29500 lesson16_many_hosts -d rxe0   # torchrun's
//! ```

#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use clap::Parser;
use verbs_lab::verbs::Gid;
use verbs_lab::wire::{Reader, Writer};
use verbs_lab_lessons::{outln, parse_args, until_stdout_closes, usage_error, Narrator};
use vl_coll::bootstrap::{self, place, Star, Via};
use vl_coll::comm::own_record;
use vl_coll::kernels::{load_value, store_value};
use vl_coll::schedule::ring_offset;
use vl_coll::{env, launch, Comm, CommOpts, DataType, RankFlags, RankInfo, RedOp};

#[derive(Parser, Debug)]
#[command(about = "Lesson 16: a job on many hosts, started as NCCL's MPI example starts it")]
struct Args {
    /// Rank 0's address for the launcher's world, HOST:PORT (else MASTER_ADDR/MASTER_PORT).
    #[arg(long)]
    master: Option<String>,
    /// RDMA devices, comma-separated; local ranks take them round-robin (one each here).
    #[arg(short = 'd', long = "ib-dev", value_delimiter = ',')]
    devices: Vec<String>,
    /// Elements in the all-reduced vector, 1 to 64.
    #[arg(long, default_value_t = 4, value_parser = count())]
    count: usize,
    /// The gradient of step 6's comparison, in MiB (1 to 1048576).
    #[arg(long = "gradient-mib", default_value_t = 1024, value_parser = gradient())]
    gradient_mib: u64,
    /// Print nothing but errors and the verdict.
    #[arg(short, long)]
    quiet: bool,
}

fn count() -> verbs_lab::cli::WholeRange<usize> {
    verbs_lab::cli::WholeRange::new(1..=64, "every rank's vector is printed")
}

fn gradient() -> verbs_lab::cli::WholeRange<u64> {
    verbs_lab::cli::WholeRange::new(1..=1 << 20, "a gradient of up to 1 TiB")
}

/// The variables a launcher may set that say where a rank is; each rank shows those it has.
const LAUNCHER_VARS: [&str; 22] = [
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "CROSS_RANK",
    "CROSS_SIZE",
    "LOCAL_SIZE",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "OMPI_COMM_WORLD_NODE_RANK",
    "PMI_RANK",
    "PMI_SIZE",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_LOCALID",
    "SLURM_NODEID",
    "SLURM_NNODES",
];

fn main() -> ExitCode {
    let args: Args = parse_args("lesson16_many_hosts");
    // [1] MPI_Init: the rank and the world size from the launcher (flags are not offered: a
    // launcher starts this lesson). A world of one, or no rendezvous address, is refused.
    let flags = RankFlags {
        master: args.master.clone(),
        ..Default::default()
    };
    let info = match env::from_env(&flags) {
        Ok(info) if info.world_size >= 2 => info,
        Ok(_) => usage_error::<Args>(
            "lesson16_many_hosts",
            &anyhow::anyhow!(
                "no launcher started this rank (no RANK/WORLD_SIZE, OMPI_COMM_WORLD_*, PMI_* or \
                 SLURM_* variables, or a world of one): start it with srun, mpirun or torchrun's \
                 variables, as the README shows"
            ),
        ),
        Err(e) => usage_error::<Args>("lesson16_many_hosts", &anyhow::Error::msg(e)),
    };
    until_stdout_closes(|| match run(&args, info) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => verbs_lab_lessons::report_error("lesson16_many_hosts", &e),
    })
}

fn run(args: &Args, info: RankInfo) -> Result<()> {
    let n = info.world_size as usize;
    let me = info.rank as usize;
    let say = Narrator {
        quiet: args.quiet || me != 0,
    };
    let (host, hash) = place::this_host();

    // [1] The launcher's world. MPI_Init would connect this rank to the others through the
    // launcher's daemons; here every rank connects to rank 0's TCP star at the master address.
    let mut world = launcher_world(&info, args.count)?;
    let mine: Vec<String> = LAUNCHER_VARS
        .iter()
        .filter_map(|v| std::env::var(v).ok().map(|x| format!("{v}={x}")))
        .collect();
    let mut w = Writer::new();
    w.str(&host)?;
    w.str(&mine.join(" "))?;
    let told = world.gather(&w.into_bytes())?;
    say.step(1, "MPI_Init: what the launcher told each rank");
    say.say(format!(
        "rank {me} of {n}, from {}; the launcher's world meets at rank 0's {}:{}",
        info.launcher,
        info.master.as_ref().map_or("-", |m| m.0.as_str()),
        info.master.as_ref().map_or(0, |m| m.1)
    ));
    if let Some(told) = &told {
        for (r, b) in told.iter().enumerate() {
            let mut rd = Reader::new(b);
            let (h, vars) = (rd.str("host")?, rd.str("variables")?);
            say.say(format!("rank {r} on {h:<6} {vars}"));
        }
    }

    // [2] Local rank from host names: all-gather the hashes (a gather to rank 0 and a
    // broadcast of them all: MPI_Allgather), then count.
    let hashes = all_gather_u64(&mut world, hash)?;
    let local_rank = hashes[..me].iter().filter(|h| **h == hash).count() as u32;
    let local_count = hashes.iter().filter(|h| **h == hash).count() as u32;
    let hosts = {
        let mut h = hashes.clone();
        h.sort_unstable();
        h.dedup();
        h.len()
    };
    let mut w = Writer::new();
    w.u32(local_rank);
    w.u32(local_count);
    w.u32(info.local_rank.unwrap_or(u32::MAX));
    let places = world.gather(&w.into_bytes())?;
    say.step(
        2,
        "Local rank from host names: hash, all-gather, count the lower ranks with my hash",
    );
    say.say(format!(
        "each rank: hash = FNV-1a(host name + boot id); the all-gather gives all {n} hashes"
    ));
    if let (Some(places), Some(told)) = (&places, &told) {
        say.say(
            "rank  host    host hash           local rank  local count  the launcher's local rank",
        );
        for (r, b) in places.iter().enumerate() {
            let mut rd = Reader::new(b);
            let (l, c, given) = (rd.u32("local")?, rd.u32("count")?, rd.u32("given")?);
            let h = Reader::new(&told[r]).str("host")?;
            let given = match given {
                u32::MAX => "none given".to_string(),
                g if g == l => format!("{g} (the same)"),
                g => format!("{g} (differs: the hash's is used)"),
            };
            say.say(format!(
                "{r:>4}  {h:<6}  {:#018x}  {l:>10}  {c:>11}  {given}",
                hashes[r]
            ));
        }
        say.say(format!(
            "{hosts} hosts; rank r's device is the local rank's: -d {} round-robin",
            if args.devices.is_empty() {
                "(the first device)".to_string()
            } else {
                args.devices.join(",")
            }
        ));
    }

    // [3] The unique id: rank 0 makes it — where the communicator's rendezvous will listen,
    // and a random magic — and broadcasts it (MPI_Bcast).
    let id = if me == 0 {
        let port = launch::free_port().context("choosing the unique id's port")?;
        let host = info.master.as_ref().map_or("localhost", |m| m.0.as_str());
        UniqueId {
            host: host.to_string(),
            port,
            magic: verbs_lab::connect::random_u64(),
        }
        .encode()?
    } else {
        Vec::new()
    };
    let id = UniqueId::decode(&world.broadcast(&id)?)?;
    say.step(3, "ncclGetUniqueId on rank 0, then MPI_Bcast to every rank");
    say.say(format!(
        "unique id: {}:{} (where rank 0 will listen), magic {:#018x}",
        id.host, id.port, id.magic
    ));
    say.say("every rank now holds the same id; a rank given another id is refused at its magic");

    // [4] ncclCommInitRank(&comm, n, id, rank): the rendezvous at the id's address (the magic
    // is a term every rank must share), then the QPs to both neighbours on the local rank's
    // device.
    let bytes = args.count * DataType::I64.size();
    let opts = CommOpts {
        devices: args.devices.clone(),
        max_bytes: bytes,
        slot_bytes: bytes.max(8),
        nslots: 4,
        terms: vec![("unique id magic".into(), format!("{:#x}", id.magic))],
        ..Default::default()
    };
    let comm_info = RankInfo {
        local_rank: Some(local_rank),
        master: Some((id.host.clone(), id.port)),
        ..info.clone()
    };
    let mut comm = Comm::init(comm_info, &opts).context("ncclCommInitRank")?;
    say.step(
        4,
        "ncclCommInitRank: every rank met rank 0 at the unique id; the communicator's table",
    );
    say.say("rank  host    local  device  address        left QPN  right QPN  → right neighbour");
    let table = comm.table().to_vec();
    let mut crossings = 0;
    for r in &table {
        let right = &table[ring_offset(r.rank as usize, n, 1)];
        let to = if right.host_hash == r.host_hash {
            "same host"
        } else {
            crossings += 1;
            "another host, through the fabric"
        };
        say.say(format!(
            "{:>4}  {:<6}  {:>5}  {:<6}  {:<13}  {:#08x}  {:#08x}   rank {} ({to})",
            r.rank,
            r.host,
            r.local_rank.map_or("-".into(), |l| l.to_string()),
            r.device,
            address(&r.gid),
            r.left_qpn,
            r.right_qpn,
            right.rank,
        ));
    }
    let why = if crossings == hosts {
        "each host's ranks are neighbours, so only one hop leaves each host"
    } else {
        "the ranks of a host are not numbered together, so neighbours sit on different hosts"
    };
    say.say(format!(
        "the ring has {n} hops, {crossings} of them between hosts: {why}"
    ));

    // [5] ncclAllReduce: rank r's element i is 100·r + i; the sum is checked on every rank.
    let value = |r: usize, i: usize| 100 * r as i64 + i as i64;
    for i in 0..args.count {
        let mut b = [0u8; 8];
        store_value(DataType::I64, value(me, i), &mut b);
        comm.write_output(i * 8, &b);
    }
    comm.all_reduce(DataType::I64, RedOp::Sum, args.count, true)
        .context("the all-reduce")?;
    let want: Vec<i64> = (0..args.count)
        .map(|i| (0..n).map(|r| value(r, i)).sum())
        .collect();
    let got: Vec<i64> = comm
        .read_output(0..bytes)
        .chunks_exact(8)
        .map(|b| load_value(DataType::I64, b).unwrap_or(i64::MIN))
        .collect();
    let wrong = got.iter().zip(&want).filter(|(g, w)| g != w).count() as u64;
    let wrongs = all_gather_u64(comm.star(), wrong)?;
    let total: u64 = wrongs.iter().sum();
    say.step(5, "ncclAllReduce: one all-reduce over the ring");
    say.say(format!(
        "rank r's element i is 100·r + i; the sum on every rank: {want:?}"
    ));
    say.say(format!(
        "wrong elements per rank: {wrongs:?}; rank 0 holds {got:?}"
    ));
    comm.finish()?;
    world.barrier()?;
    if total != 0 {
        bail!("{total} elements are wrong over all ranks");
    }

    // [6] Parameter server against collectives: what crosses the busiest link per step.
    say.step(
        6,
        "A parameter server or collectives: bytes through the busiest link per training step",
    );
    let s = args.gradient_mib as f64 * (1u64 << 20) as f64;
    for line in comparison(n, hosts, s) {
        say.say(line);
    }
    if me == 0 {
        outln!(
            "\nall-reduce over {n} ranks on {hosts} hosts: every element of every rank is right"
        );
    }
    Ok(())
}

/// The launcher's world: a TCP star around rank 0 at the master address (the stand-in for
/// MPI_COMM_WORLD), with the `--count` every rank must share.
fn launcher_world(info: &RankInfo, count: usize) -> Result<Star> {
    let Some((mhost, mport)) = &info.master else {
        bail!("no master address: give --master HOST:PORT or MASTER_ADDR and MASTER_PORT");
    };
    // Who and where this rank is, without a device: the launcher's world has no QPs. No
    // local rank: step 2 counts it.
    let me = own_record(
        &RankInfo {
            local_rank: None,
            ..info.clone()
        },
        &CommOpts {
            terms: vec![("--count".into(), count.to_string())],
            ..Default::default()
        },
    );
    bootstrap::rendezvous(me, Via::Tcp((mhost, *mport)), Duration::from_secs(120))
        .context("joining the launcher's world at the master address")
}

/// MPI_Allgather of one u64 per rank over the star: rank 0 gathers, then broadcasts them all.
fn all_gather_u64(star: &mut Star, v: u64) -> Result<Vec<u64>> {
    let all = star.gather(&v.to_be_bytes())?;
    let mut w = Writer::new();
    for b in all.iter().flatten() {
        w.raw(b);
    }
    let blob = star.broadcast(&w.into_bytes())?;
    let mut r = Reader::new(&blob);
    let mut out = Vec::new();
    while r.remaining() > 0 {
        out.push(r.u64("a gathered value")?);
    }
    Ok(out)
}

/// What `ncclGetUniqueId` returns, in our terms: where the rendezvous listens, and a magic.
struct UniqueId {
    host: String,
    port: u16,
    magic: u64,
}

impl UniqueId {
    fn encode(&self) -> Result<Vec<u8>> {
        let mut w = Writer::new();
        w.str(&self.host)?;
        w.u16(self.port);
        w.u64(self.magic);
        Ok(w.into_bytes())
    }

    fn decode(b: &[u8]) -> Result<UniqueId> {
        let mut r = Reader::new(b);
        Ok(UniqueId {
            host: r.str("the id's host")?,
            port: r.u16("the id's port")?,
            magic: r.u64("the id's magic")?,
        })
    }
}

/// A GID as the address it carries (RoCE v2's IPv4-mapped GIDs), else in full.
fn address(g: &Gid) -> String {
    g.to_ipv4().map_or_else(|| g.to_string(), |a| a.to_string())
}

/// Step 6's lines: per training step, a gradient of `s` bytes on each of `n` ranks on `hosts`
/// hosts; what the busiest link carries, one way, under each design, and how long that takes on
/// a 200 Gb/s (25 GB/s) link.
fn comparison(n: usize, hosts: usize, s: f64) -> Vec<String> {
    let nf = n as f64;
    let gib = |b: f64| b / (1u64 << 30) as f64;
    let at = |b: f64| b / 25e9 * 1e3;
    let ps = nf * s;
    let sharded = (nf - 1.0) / nf * s * 2.0;
    let ring = 2.0 * (nf - 1.0) / nf * s;
    vec![
        format!(
            "a gradient of {:.2} GiB per rank, {n} ranks on {hosts} hosts; one way, per step:",
            gib(s)
        ),
        format!(
            "  one parameter server: its link takes in {n} gradients and sends out {n} models: \
             {n}·S = {:.2} GiB each way ({:.0} ms at 25 GB/s); every worker's link: S",
            gib(ps),
            at(ps)
        ),
        format!(
            "  {n} parameter-server shards, one on every rank: each link 2·(n−1)/n·S = {:.2} GiB \
             ({:.0} ms)",
            gib(sharded),
            at(sharded)
        ),
        format!(
            "  ring all-reduce: each link 2·(n−1)/n·S = {:.2} GiB ({:.0} ms), the least any \
             all-reduce can send",
            gib(ring),
            at(ring)
        ),
        format!(
            "  the single server's link is the bottleneck: n²/(2(n−1)) = {:.1}× the ring's, and \
             it grows with n; the ring's does not",
            ps / ring
        ),
    ]
}
