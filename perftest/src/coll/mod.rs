//! The collective benchmarks `vl_{all_reduce,reduce_scatter,all_gather,broadcast,sendrecv}_perf`:
//! nccl-tests' flags and table over [`verbs_lab::coll`]. One rank per process, launched by
//! `--np N` (this machine; the ranks' rendezvous, barriers and results go over the launcher's
//! POSIX message queues, `verbs_lab::coll::mqlink`), by hand with flags, or by torchrun, mpirun
//! or srun through their environment (over TCP to rank 0: ranks on other hosts).
//!
//! Per size and placement: `-w` warm-up collectives, `-n` timed ones (the average is the rank's
//! time; the row shows the slowest rank's), then with `-c 1` one more on exact test data whose
//! every element is checked. Out of place, the copy of the input into the output is part of the
//! timed collective.

pub mod report;

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use crate::progress::Progress;
use clap::Parser;
use verbs_lab::coll::kernels::{self, count_wrong, fill_input, input_value};
use verbs_lab::coll::{
    launch, Coll, CollError, Comm, CommOpts, DataType, Phases, RankFlags, RedOp,
};
use verbs_lab::json::Object;
use verbs_lab::wire::{Reader, Writer};

use report::{Measure, Row, Table};

/// Exit codes, as for the other tools.
pub const EXIT_FAILED: u8 = 1;
pub const EXIT_USAGE: u8 = 2;
pub const EXIT_GATE: u8 = 3;

#[derive(Parser, Debug, Clone)]
#[command(
    about = "Collective bandwidth over RDMA verbs, in the layout of nccl-tests",
    after_help = "Ranks: --np N starts N on this machine, coordinated over POSIX message queues \
                  (/dev/mqueue/vl-coll-PID-r*, removed at the end); otherwise the rank comes from --rank/--world-size/--master, \
                  torchrun (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), Open MPI \
                  (OMPI_COMM_WORLD_*), MPICH (PMI_RANK, PMI_SIZE) or Slurm (SLURM_PROCID, SLURM_NTASKS), \
                  first match wins.\nExit status: 0 ok, 1 run failed or wrong values, 2 usage, 3 --min-busbw missed."
)]
pub struct Args {
    /// Smallest message, bytes (K, M, G suffixes).
    #[arg(short = 'b', long = "minbytes", default_value = "8", value_parser = parse_size)]
    pub min_bytes: usize,
    /// Largest message, bytes.
    #[arg(short = 'e', long = "maxbytes", default_value = "1M", value_parser = parse_size)]
    pub max_bytes: usize,
    /// Multiply the size by this factor from one row to the next.
    #[arg(short = 'f', long = "stepfactor")]
    pub step_factor: Option<u64>,
    /// Add this many bytes from one row to the next (instead of -f).
    #[arg(short = 'i', long = "stepbytes", value_parser = parse_size)]
    pub step_bytes: Option<usize>,
    /// Timed iterations per size.
    #[arg(short = 'n', long = "iters", default_value_t = 20)]
    pub iters: u32,
    /// Warm-up iterations per size.
    #[arg(short = 'w', long = "warmup_iters", default_value_t = 5)]
    pub warmup: u32,
    /// Check every element of one more collective against the exact expected value (0 or 1).
    #[arg(short = 'c', long = "check", default_value_t = 1)]
    pub check: u8,
    /// Reduction: sum, prod, min, max.
    #[arg(short = 'o', long = "op", default_value = "sum")]
    pub op: RedOp,
    /// Element type: float, double, int32, int64, uint8 (nccl-tests' -d; -d is the device here).
    #[arg(short = 't', long = "datatype", default_value = "float")]
    pub dtype: DataType,
    /// Root rank (broadcast).
    #[arg(short = 'r', long = "root", default_value_t = 0)]
    pub root: usize,
    /// RDMA devices, comma-separated; local ranks take them round-robin.
    #[arg(short = 'd', long = "ib-dev", value_delimiter = ',')]
    pub devices: Vec<String>,
    /// Port of the devices.
    #[arg(long = "ib-port", default_value_t = 1)]
    pub ib_port: u8,
    /// GID index (default: the first RoCE v2 IPv4 GID).
    #[arg(short = 'x', long = "gid-index")]
    pub gid_index: Option<u32>,
    /// QP ack timeout exponent: 4.096 µs × 2^N.
    #[arg(short = 'u', long = "qp-timeout", default_value_t = 20)]
    pub ack_timeout: u8,
    /// Start N ranks on this machine (child processes).
    #[arg(long = "np")]
    pub np: Option<u32>,
    /// This process's rank (with --world-size and --master).
    #[arg(long)]
    pub rank: Option<u32>,
    #[arg(long = "world-size")]
    pub world_size: Option<u32>,
    /// Rank among the ranks on this host (picks the device and CPU).
    #[arg(long = "local-rank")]
    pub local_rank: Option<u32>,
    /// Rank 0's rendezvous address HOST:PORT (else MASTER_ADDR/MASTER_PORT).
    #[arg(long)]
    pub master: Option<String>,
    /// Set by --np for its ranks: the base name of the launcher's message queues.
    #[arg(long = "vl-coll-queues", hide = true)]
    pub local_queues: Option<String>,
    /// Seconds without progress before a neighbour is declared gone.
    #[arg(long = "timeout", default_value_t = 30)]
    pub peer_timeout: u64,
    /// Seconds the rendezvous may take.
    #[arg(long = "bootstrap-timeout", default_value_t = 60)]
    pub bootstrap_timeout: u64,
    /// Bytes per receive slot (pipeline piece).
    #[arg(long = "slot-size", default_value = "128K", value_parser = parse_size)]
    pub slot_bytes: usize,
    /// Receive slots per link (pieces in flight).
    #[arg(long = "slots", default_value_t = 8)]
    pub nslots: usize,
    /// Write every size, every rank, as JSON to FILE (rank 0).
    #[arg(long)]
    pub json: Option<String>,
    /// Fail with exit status 3 when the average bus bandwidth is below this (GB/s).
    #[arg(long = "min-busbw")]
    pub min_busbw: Option<f64>,
    /// Every rank prints its own rows too.
    #[arg(long = "all-ranks")]
    pub all_ranks: bool,
    /// Print to stderr where rank 0's time went in each size's timed loop (posting, applying,
    /// polling, idle); with --all-ranks, every rank's.
    #[arg(long)]
    pub profile: bool,
}

/// `4096`, `64K`, `4M`, `1G`.
pub fn parse_size(s: &str) -> Result<usize, String> {
    let (num, mult) = match s.chars().last() {
        Some('K' | 'k') => (&s[..s.len() - 1], 1 << 10),
        Some('M' | 'm') => (&s[..s.len() - 1], 1 << 20),
        Some('G' | 'g') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| format!("'{s}' is not a size (e.g. 8, 64K, 4M)"))
}

/// The sizes of the rows: from `min` to `max` by `factor` (or by `step` bytes), each rounded
/// down to whole elements (at least one).
pub fn sizes(
    min: usize,
    max: usize,
    factor: Option<u64>,
    step: Option<usize>,
    elem: usize,
) -> Result<Vec<usize>, String> {
    if min == 0 || max < min {
        return Err(format!(
            "-b {min} -e {max}: sizes must satisfy 0 < minbytes <= maxbytes"
        ));
    }
    if factor.is_some() && step.is_some() {
        return Err("give -f (factor) or -i (increment), not both".into());
    }
    let mut v = Vec::new();
    let mut s = min;
    loop {
        v.push((s / elem).max(1) * elem);
        let next = match (factor, step) {
            (_, Some(0)) | (Some(0 | 1), _) => {
                return Err("-f must be at least 2 and -i at least 1".into())
            }
            (_, Some(i)) => s + i,
            (f, None) => s.saturating_mul(f.unwrap_or(2) as usize),
        };
        if next > max || v.len() > 10_000 {
            break;
        }
        s = next;
    }
    v.dedup();
    Ok(v)
}

/// Entry point of the five tools.
pub fn main(coll_of: fn(usize) -> Coll, tool: &'static str) -> ExitCode {
    verbs_lab::cli::generate_if_asked(<Args as clap::CommandFactory>::command);
    let args = match Args::try_parse() {
        Ok(a) => a,
        Err(e) => {
            let usage = e.use_stderr();
            let _ = e.print();
            return ExitCode::from(if usage { EXIT_USAGE } else { 0 });
        }
    };
    if let Some(np) = args.np {
        if args.rank.is_none() {
            return launcher(np, &args, tool);
        }
        let tied = match &args.local_queues {
            Some(base) => launch::child_setup_mq(base, np),
            None => launch::child_setup(),
        };
        if let Err(e) = tied {
            eprintln!("{tool}: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    }
    match run(&args, coll_of(args.root), tool) {
        Ok(code) => ExitCode::from(code),
        Err((code, msg)) => {
            eprintln!("{tool}: {msg}");
            ExitCode::from(code)
        }
    }
}

fn launcher(np: u32, args: &Args, tool: &str) -> ExitCode {
    if np == 0 || np > verbs_lab::coll::env::MAX_WORLD {
        eprintln!(
            "{tool}: --np {np}: give 1..{} ranks",
            verbs_lab::coll::env::MAX_WORLD
        );
        return ExitCode::from(EXIT_USAGE);
    }
    if args.world_size.is_some() || args.master.is_some() || args.local_queues.is_some() {
        eprintln!("{tool}: --np starts its own ranks: leave out --world-size and --master");
        return ExitCode::from(EXIT_USAGE);
    }
    let own: Vec<OsString> = std::env::args_os().skip(1).collect();
    let grace = Duration::from_secs(args.peer_timeout + 10);
    launch::Outcome::exit(launch::run_local_mq(np, &own, grace), tool)
}

type Fail = (u8, String);

fn usage(s: impl Into<String>) -> Fail {
    (EXIT_USAGE, s.into())
}

fn failed(e: CollError) -> Fail {
    let code = if matches!(e, CollError::Usage(_)) {
        EXIT_USAGE
    } else {
        EXIT_FAILED
    };
    (code, e.to_string())
}

fn run(args: &Args, coll: Coll, tool: &'static str) -> Result<u8, Fail> {
    let flags = RankFlags {
        rank: args.rank,
        world_size: args.world_size,
        local_rank: args.local_rank,
        master: args.master.clone(),
    };
    let info = match (&args.local_queues, args.rank, args.world_size) {
        // A rank of --np: the launcher set every flag; the queues stand for --master.
        (Some(_), Some(rank), Some(world_size)) => verbs_lab::coll::env::RankInfo {
            rank,
            world_size,
            local_rank: args.local_rank.unwrap_or(rank),
            launcher: verbs_lab::coll::env::Launcher::LocalQueues,
            master: None,
        },
        (Some(_), _, _) => return Err(usage("--vl-coll-queues is set by --np, not by hand")),
        _ => verbs_lab::coll::env::from_env(&flags).map_err(usage)?,
    };
    if let Some(np) = args.np {
        if info.world_size != np {
            return Err(usage(format!(
                "--np {np} but a world size of {}",
                info.world_size
            )));
        }
    }
    let elem = args.dtype.size();
    let sizes = sizes(
        args.min_bytes,
        args.max_bytes,
        args.step_factor,
        args.step_bytes,
        elem,
    )
    .map_err(usage)?;
    if args.check > 1 {
        return Err(usage("-c takes 0 or 1"));
    }
    if args.iters == 0 {
        return Err(usage("-n must be at least 1"));
    }
    let n = info.world_size as usize;
    if let Coll::Broadcast { root } = coll {
        if root >= n {
            return Err(usage(format!(
                "-r {root}: the root must be a rank of the {n} (0..{})",
                n - 1
            )));
        }
    }
    let max = *sizes.last().expect("at least one size");
    let cpu = match verbs_lab::coll::env::pick_device(&args.devices, info.local_rank) {
        Some(dev) => crate::procs::worker_cpu(dev, None, info.local_rank)
            .ok()
            .flatten()
            .map(|(c, _)| c),
        None => None,
    };
    let opts = CommOpts {
        devices: args.devices.clone(),
        ib_port: args.ib_port,
        gid_index: args.gid_index,
        max_bytes: max,
        slot_bytes: args.slot_bytes,
        nslots: args.nslots,
        bootstrap_timeout: Duration::from_secs(args.bootstrap_timeout),
        peer_timeout: Duration::from_secs(args.peer_timeout),
        ack_timeout: args.ack_timeout,
        cpu: if n > 1 { cpu } else { None },
        local_queues: args.local_queues.clone(),
    };
    let launcher = info.launcher;
    let mut comm = Comm::init(info, &opts).map_err(failed)?;
    comm.star()
        .set_timeout(Duration::from_secs(args.peer_timeout.max(5)));
    let rank = comm.rank();
    let op = coll.reduces().then_some(args.op);
    let table = Table {
        tool,
        coll,
        n,
        dtype: args.dtype,
        op,
    };
    let from = match &args.local_queues {
        Some(base) => format!("--np, coordinated over the message queues {base}-r*"),
        None => launcher.to_string(),
    };
    let params = format!(
        "nranks {n} (from {from}), minBytes {} maxBytes {} step: {} warmup iters: {} iters: {} \
         validation: {} slots: {} x {} B",
        args.min_bytes,
        args.max_bytes,
        match (args.step_factor, args.step_bytes) {
            (_, Some(i)) => format!("{i}(bytes)"),
            (f, None) => format!("{}(factor)", f.unwrap_or(2)),
        },
        args.warmup,
        args.iters,
        args.check,
        args.nslots,
        args.slot_bytes
    );
    let records = comm.table().to_vec();
    if rank == 0 {
        println!("{}", table.header(&records, &params));
    }
    let mut rows = Vec::new();
    let progress = Progress::sweep(tool, sizes.len(), rank == 0);
    for &size in &sizes {
        progress.size(size as u64);
        let count = size / elem;
        let mut measure = |in_place: bool| -> Result<(f64, Option<u64>), Fail> {
            bench_one(&mut comm, coll, args, count, in_place)
        };
        let oop = measure(false)?;
        let ip = if coll == Coll::SendRecv {
            None
        } else {
            Some(measure(true)?)
        };
        // Every rank's numbers to rank 0.
        let mut w = Writer::new();
        for m in std::iter::once(&oop).chain(ip.as_ref()) {
            w.f64(m.0);
            w.u64(m.1.unwrap_or(u64::MAX));
        }
        let all = comm.star().gather(&w.into_bytes()).map_err(failed)?;
        let mine = |m: Option<&(f64, Option<u64>)>| {
            m.map(|m| Measure {
                per_rank_us: vec![m.0],
                wrong: m.1.map(|w| vec![w]),
            })
        };
        if args.all_ranks && rank != 0 {
            let r = Row {
                size,
                count: report::count_column(coll, n, size, args.dtype),
                out_of_place: mine(Some(&oop)).expect("measured"),
                in_place: mine(ip.as_ref()),
            };
            println!("[rank {rank}] {}", table.row(&r));
        }
        if let Some(all) = all {
            let row = assemble(
                &all,
                size,
                report::count_column(coll, n, size, args.dtype),
                ip.is_some(),
            )
            .map_err(|e| (EXIT_FAILED, e))?;
            progress.row(|| println!("{}", table.row(&row)));
            rows.push(row);
        }
    }
    drop(progress);
    let code = if rank == 0 {
        println!("{}", table.footer(&rows));
        if let Some(path) = &args.json {
            let p = Object::new()
                .field("min_bytes", args.min_bytes)
                .field("max_bytes", args.max_bytes)
                .field("iters", args.iters)
                .field("warmup_iters", args.warmup)
                .field("check", args.check)
                .field("slot_bytes", args.slot_bytes)
                .field("slots", args.nslots)
                .field("launcher", launcher.name());
            let doc = table.json(&records, p, &rows);
            std::fs::write(path, doc.pretty() + "\n")
                .map_err(|e| (EXIT_FAILED, format!("cannot write --json {path}: {e}")))?;
        }
        let wrong = report::total_wrong(&rows);
        let avg = table.avg_busbw(&rows);
        if wrong > 0 {
            eprintln!("{tool}: {wrong} wrong values (see #wrong)");
            EXIT_FAILED
        } else if let Some(min) = args.min_busbw.filter(|m| avg < *m) {
            eprintln!(
                "{tool}: gate failed: average bus bandwidth {avg:.6} GB/s < --min-busbw {min}"
            );
            EXIT_GATE
        } else {
            0
        }
    } else {
        0
    };
    // Everyone learns rank 0's verdict, so every rank exits with the same status.
    let verdict = comm.star().broadcast(&[code]).map_err(failed)?;
    comm.finish().map_err(failed)?;
    Ok(verdict.first().copied().unwrap_or(EXIT_FAILED))
}

/// Rank 0 turns the gathered (time, wrong) pairs into a row.
fn assemble(all: &[Vec<u8>], size: usize, count: usize, has_ip: bool) -> Result<Row, String> {
    let per = if has_ip { 2 } else { 1 };
    let mut m: Vec<Measure> = (0..per)
        .map(|_| Measure {
            per_rank_us: Vec::new(),
            wrong: Some(Vec::new()),
        })
        .collect();
    for (r, b) in all.iter().enumerate() {
        if b.len() != 16 * per {
            return Err(format!(
                "rank {r} sent {} bytes of results, not {}",
                b.len(),
                16 * per
            ));
        }
        let mut rd = Reader::new(b);
        for mk in m.iter_mut() {
            let (t, w) = rd
                .f64("time")
                .and_then(|t| Ok((t, rd.u64("wrong count")?)))
                .map_err(|e| format!("rank {r}'s results: {e}"))?;
            mk.per_rank_us.push(t);
            if w == u64::MAX {
                mk.wrong = None;
            } else if let Some(v) = mk.wrong.as_mut() {
                v.push(w);
            }
        }
    }
    let mut it = m.into_iter();
    Ok(Row {
        size,
        count,
        out_of_place: it.next().expect("out of place"),
        in_place: it.next(),
    })
}

fn call(
    comm: &mut Comm,
    coll: Coll,
    args: &Args,
    count: usize,
    in_place: bool,
) -> Result<(), CollError> {
    match coll {
        Coll::AllReduce => comm.all_reduce(args.dtype, args.op, count, in_place),
        Coll::ReduceScatter => comm.reduce_scatter(args.dtype, args.op, count, in_place),
        Coll::AllGather => comm.all_gather(args.dtype, count, in_place),
        Coll::Broadcast { root } => comm.broadcast(args.dtype, count, root, in_place),
        Coll::SendRecv => comm.sendrecv(args.dtype, count),
    }
}

/// Warm-up, the timed loop (average µs per collective), and with `-c 1` one checked run.
fn bench_one(
    comm: &mut Comm,
    coll: Coll,
    args: &Args,
    count: usize,
    in_place: bool,
) -> Result<(f64, Option<u64>), Fail> {
    for _ in 0..args.warmup {
        call(comm, coll, args, count, in_place).map_err(failed)?;
    }
    comm.barrier().map_err(failed)?;
    comm.take_phases();
    let t0 = Instant::now();
    for _ in 0..args.iters {
        call(comm, coll, args, count, in_place).map_err(failed)?;
    }
    let us = t0.elapsed().as_secs_f64() * 1e6 / f64::from(args.iters);
    if args.profile && (comm.rank() == 0 || args.all_ranks) {
        eprintln!(
            "{}",
            profile_line(
                comm.rank(),
                count * args.dtype.size(),
                in_place,
                us,
                &comm.take_phases()
            )
        );
    }
    let wrong = if args.check == 1 {
        prepare_check(comm, coll, args, count, in_place);
        call(comm, coll, args, count, in_place).map_err(failed)?;
        Some(count_check(comm, coll, args, count))
    } else {
        None
    };
    Ok((us, wrong))
}

/// One `--profile` line: per collective, where the time went, in ms.
fn profile_line(rank: usize, bytes: usize, in_place: bool, us: f64, p: &Phases) -> String {
    let n = p.collectives.max(1) as f64;
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3 / n;
    format!(
        "# profile rank {rank} {bytes} B {}: {:.2} ms per collective = post {:.2} + apply {:.2} \
         ({:.0} B) + poll {:.2} + idle {:.2} ms; {:.1} writes, {:.1} sleeps",
        if in_place { "in-place" } else { "out-of-place" },
        us / 1e3,
        ms(p.post),
        ms(p.apply),
        p.applied_bytes as f64 / n,
        ms(p.poll),
        ms(p.idle),
        p.writes as f64 / n,
        p.sleeps as f64 / n
    )
}

/// The exact value every element should hold after a checked run, and who contributes what.
fn owner(comm: &Comm, count: usize, i: usize) -> usize {
    (0..comm.world_size())
        .find(|&r| comm.chunk_of(count, r).contains(&i))
        .unwrap_or(0)
}

fn prepare_check(comm: &mut Comm, coll: Coll, args: &Args, count: usize, in_place: bool) {
    let (t, op, rank) = (args.dtype, args.op, comm.rank());
    let s = t.size();
    let bytes = count * s;
    // values(rank, op, first element, elements): a rank's checked input.
    let values = |r: usize, op: RedOp, first: usize, n: usize| {
        let mut v = vec![0u8; n * s];
        fill_input(t, op, r, first, &mut v);
        v
    };
    let put = |comm: &mut Comm, to_output: bool, offset: usize, v: &[u8]| {
        if to_output {
            comm.write_output(offset, v)
        } else {
            comm.write_input(offset, v)
        }
    };
    match coll {
        Coll::AllReduce | Coll::ReduceScatter => {
            put(comm, in_place, 0, &values(rank, op, 0, count));
        }
        Coll::AllGather => {
            let c = comm.chunk_of(count, rank);
            comm.write_output(0, &vec![0xee; bytes]);
            let v = values(rank, RedOp::Sum, c.start, c.len());
            put(comm, in_place, if in_place { c.start * s } else { 0 }, &v);
        }
        Coll::Broadcast { root } => {
            comm.write_output(0, &vec![0xee; bytes]);
            if rank == root {
                put(comm, in_place, 0, &values(root, RedOp::Sum, 0, count));
            }
        }
        Coll::SendRecv => {
            comm.write_output(0, &vec![0xee; bytes]);
            comm.write_input(0, &values(rank, RedOp::Sum, 0, count));
        }
    }
}

fn count_check(comm: &Comm, coll: Coll, args: &Args, count: usize) -> u64 {
    let (t, op, n, rank) = (args.dtype, args.op, comm.world_size(), comm.rank());
    let s = t.size();
    let out = comm.read_output(0..count * s);
    match coll {
        Coll::AllReduce => count_wrong(t, 0, &out[..count * s], |i| {
            kernels::expected_value(t, op, n, i)
        }),
        Coll::ReduceScatter => {
            let c = comm.chunk_of(count, rank);
            count_wrong(t, c.start, &out[c.start * s..c.end * s], |i| {
                kernels::expected_value(t, op, n, i)
            })
        }
        Coll::AllGather => count_wrong(t, 0, &out[..count * s], |i| {
            wrap_sum(t, input_value(RedOp::Sum, owner(comm, count, i), i))
        }),
        Coll::Broadcast { root } => count_wrong(t, 0, &out[..count * s], |i| {
            wrap_sum(t, input_value(RedOp::Sum, root, i))
        }),
        Coll::SendRecv => {
            let left = verbs_lab::coll::schedule::ring_offset(rank, n, -1);
            count_wrong(t, 0, &out[..count * s], |i| {
                wrap_sum(t, input_value(RedOp::Sum, left, i))
            })
        }
    }
}

/// One rank's input value as stored in `t` (what a plain copy must deliver).
fn wrap_sum(t: DataType, v: i64) -> i64 {
    kernels::expected_value_of(t, v)
}

#[cfg(test)]
mod tests {
    use super::report::{algbw, busbw, count_column, Measure, Row, Table};
    use super::*;

    #[test]
    fn sizes_follow_b_e_f_i() {
        assert_eq!(sizes(8, 64, None, None, 4).unwrap(), [8, 16, 32, 64]);
        assert_eq!(sizes(8, 100, Some(4), None, 4).unwrap(), [8, 32]);
        assert_eq!(sizes(10, 30, None, Some(10), 4).unwrap(), [8, 20, 28]);
        assert_eq!(sizes(1, 2, None, None, 8).unwrap(), [8]);
        assert!(sizes(0, 8, None, None, 4).is_err());
        assert!(sizes(16, 8, None, None, 4)
            .unwrap_err()
            .contains("minbytes <= maxbytes"));
        assert!(sizes(8, 16, Some(2), Some(4), 4)
            .unwrap_err()
            .contains("not both"));
        assert!(sizes(8, 16, Some(1), None, 4).is_err());
        assert_eq!(parse_size("4M").unwrap(), 4 << 20);
        assert!(parse_size("4X").is_err());
    }

    #[test]
    fn bandwidths_are_nccl_tests() {
        // 1 MB in 1000 µs = 1 GB/s; all-reduce on 4 ranks: busbw 1.5 GB/s.
        assert!((algbw(1_000_000, 1000.0) - 1.0).abs() < 1e-12);
        assert!((busbw(Coll::AllReduce, 4, 1_000_000, 1000.0) - 1.5).abs() < 1e-12);
        assert!((busbw(Coll::AllGather, 4, 1_000_000, 1000.0) - 0.75).abs() < 1e-12);
        assert!((busbw(Coll::SendRecv, 4, 1_000_000, 1000.0) - 1.0).abs() < 1e-12);
        assert_eq!(algbw(8, 0.0), 0.0);
        assert_eq!(count_column(Coll::AllGather, 4, 1024, DataType::F32), 64);
        assert_eq!(count_column(Coll::AllReduce, 4, 1024, DataType::F32), 256);
    }

    #[test]
    fn the_row_and_footer_read_like_nccl_tests() {
        let t = Table {
            tool: "vl_all_reduce_perf",
            coll: Coll::AllReduce,
            n: 4,
            dtype: DataType::F32,
            op: Some(RedOp::Sum),
        };
        let m = |us: f64, w: u64| Measure {
            per_rank_us: vec![us / 2.0, us],
            wrong: Some(vec![0, w]),
        };
        let rows = vec![Row {
            size: 1_000_000,
            count: 250_000,
            out_of_place: m(1000.0, 0),
            in_place: Some(m(500.0, 2)),
        }];
        let line = t.row(&rows[0]);
        let f: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(f[..5], ["1000000", "250000", "float", "sum", "-1"]);
        assert_eq!(f[5..9], ["1000.0", "1.0000", "1.5000", "0"]);
        assert_eq!(f[9..], ["500.0", "2.0000", "3.0000", "2"]);
        let foot = t.footer(&rows);
        assert!(foot.contains("# Out of bounds values : 2 FAILED"), "{foot}");
        assert!(foot.contains("# Avg bus bandwidth    : 2.250000"), "{foot}");
        let j = t.json(&[], Object::new(), &rows).to_string();
        assert!(j.contains("\"per_rank_time_us\":[500.0,1000.0]"), "{j}");
        assert!(j.contains("\"wrong\":2"), "{j}");
    }
}
