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

mod args;
mod bench;
mod check;
pub mod report;

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use crate::progress::Progress;
use clap::Parser;
use verbs_lab::coll::env::{Launcher, RankInfo};
use verbs_lab::coll::{launch, Coll, CollError, Comm, CommOpts, RankFlags, RankRecord};
use verbs_lab::wire::{Reader, Writer};

pub use args::{sizes, Args};
use bench::bench_one;
use report::{Measure, Row, Table};

/// Exit codes, as for the other tools.
pub const EXIT_FAILED: u8 = 1;
pub const EXIT_USAGE: u8 = 2;
pub const EXIT_GATE: u8 = 3;

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
    launch::Outcome::exit(launch::run_local_mq(np, &own, grace, tool), tool)
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

/// One rank of the benchmark: who it is, the flags checked, the communicator, one row per size,
/// rank 0's verdict — which every rank exits with.
fn run(args: &Args, coll: Coll, tool: &'static str) -> Result<u8, Fail> {
    let info = rank_info(args)?;
    let n = info.world_size as usize;
    let sizes = checked_sizes(args, coll, n)?;
    let max = *sizes.last().expect("at least one size");
    let opts = comm_opts(args, &info, max);
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
    let records = comm.table().to_vec();
    if rank == 0 {
        println!(
            "{}",
            table.header(&records, &params_line(args, n, launcher))
        );
    }
    let mut rows = Vec::new();
    let progress = Progress::sweep(tool, sizes.len(), rank == 0);
    for &size in &sizes {
        progress.size(size as u64);
        if let Some(row) = one_size(&mut comm, &table, args, size)? {
            progress.row(|| println!("{}", table.row(&row)));
            rows.push(row);
        }
    }
    drop(progress);
    let code = if rank == 0 {
        verdict(args, &table, &records, &rows, launcher)?
    } else {
        0
    };
    // Everyone learns rank 0's verdict, so every rank exits with the same status.
    let verdict = comm.star().broadcast(&[code]).map_err(failed)?;
    comm.finish().map_err(failed)?;
    Ok(verdict.first().copied().unwrap_or(EXIT_FAILED))
}

/// This rank's place: from `--np`'s flags (the queues stand for `--master`), else from the
/// flags or the launcher's environment; the world must be `--np`'s.
fn rank_info(args: &Args) -> Result<RankInfo, Fail> {
    let flags = RankFlags {
        rank: args.rank,
        world_size: args.world_size,
        local_rank: args.local_rank,
        master: args.master.clone(),
    };
    let info = match (&args.local_queues, args.rank, args.world_size) {
        // A rank of --np: the launcher set every flag; the queues stand for --master.
        (Some(_), Some(rank), Some(world_size)) => RankInfo {
            rank,
            world_size,
            local_rank: args.local_rank.unwrap_or(rank),
            launcher: Launcher::LocalQueues,
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
    Ok(info)
}

/// The rows' sizes, after refusing flags that make no sense for a world of `n`.
fn checked_sizes(args: &Args, coll: Coll, n: usize) -> Result<Vec<usize>, Fail> {
    let sizes = sizes(
        args.min_bytes,
        args.max_bytes,
        args.step_factor,
        args.step_bytes,
        args.dtype.size(),
    )
    .map_err(usage)?;
    if args.check > 1 {
        return Err(usage("-c takes 0 or 1"));
    }
    if args.iters == 0 {
        return Err(usage("-n must be at least 1"));
    }
    if let Coll::Broadcast { root } = coll {
        if root >= n {
            return Err(usage(format!(
                "-r {root}: the root must be a rank of the {n} (0..{})",
                n - 1
            )));
        }
    }
    Ok(sizes)
}

/// The communicator's options: buffers for the largest size, the rank pinned near its device
/// when the world has more than one rank.
fn comm_opts(args: &Args, info: &RankInfo, max: usize) -> CommOpts {
    let cpu = match verbs_lab::coll::env::pick_device(&args.devices, info.local_rank) {
        Some(dev) => crate::procs::worker_cpu(dev, None, info.local_rank)
            .ok()
            .flatten()
            .map(|(c, _)| c),
        None => None,
    };
    CommOpts {
        devices: args.devices.clone(),
        ib_port: args.ib_port,
        gid_index: args.gid_index,
        max_bytes: max,
        slot_bytes: args.slot_bytes,
        nslots: args.nslots,
        bootstrap_timeout: Duration::from_secs(args.bootstrap_timeout),
        peer_timeout: Duration::from_secs(args.peer_timeout),
        ack_timeout: args.ack_timeout,
        cpu: if info.world_size > 1 { cpu } else { None },
        local_queues: args.local_queues.clone(),
    }
}

/// The header's parameter line.
fn params_line(args: &Args, n: usize, launcher: Launcher) -> String {
    let from = match &args.local_queues {
        Some(base) => format!("--np, coordinated over the message queues {base}-r*"),
        None => launcher.to_string(),
    };
    format!(
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
    )
}

/// One size out of place (and in place, but for sendrecv); every rank's numbers go to rank 0,
/// which returns the row (`None` on the other ranks, which print their own with --all-ranks).
fn one_size(comm: &mut Comm, table: &Table, args: &Args, size: usize) -> Result<Option<Row>, Fail> {
    let (coll, n, rank) = (table.coll, table.n, comm.rank());
    let count = size / args.dtype.size();
    let mut measure = |in_place: bool| -> Result<(f64, Option<u64>), Fail> {
        bench_one(comm, coll, args, count, in_place)
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
    let Some(all) = all else {
        return Ok(None);
    };
    let row = assemble(
        &all,
        size,
        report::count_column(coll, n, size, args.dtype),
        ip.is_some(),
    )
    .map_err(|e| (EXIT_FAILED, e))?;
    Ok(Some(row))
}

/// The `"params"` of the `--json` document: the command line's numbers and the launcher.
#[derive(serde::Serialize)]
struct JsonParams {
    min_bytes: usize,
    max_bytes: usize,
    iters: u32,
    warmup_iters: u32,
    check: u8,
    slot_bytes: usize,
    slots: usize,
    launcher: &'static str,
}

impl JsonParams {
    fn new(args: &Args, launcher: Launcher) -> JsonParams {
        JsonParams {
            min_bytes: args.min_bytes,
            max_bytes: args.max_bytes,
            iters: args.iters,
            warmup_iters: args.warmup,
            check: args.check,
            slot_bytes: args.slot_bytes,
            slots: args.nslots,
            launcher: launcher.name(),
        }
    }
}

/// Rank 0's end: the footer, `--json`, and the exit status (wrong values, then the gate).
fn verdict(
    args: &Args,
    table: &Table,
    records: &[RankRecord],
    rows: &[Row],
    launcher: Launcher,
) -> Result<u8, Fail> {
    let tool = table.tool;
    println!("{}", table.footer(rows));
    if let Some(path) = &args.json {
        let doc = table.json(records, JsonParams::new(args, launcher), rows);
        std::fs::write(path, crate::report::pretty_json(&doc))
            .map_err(|e| (EXIT_FAILED, format!("cannot write --json {path}: {e}")))?;
    }
    let wrong = report::total_wrong(rows);
    let avg = table.avg_busbw(rows);
    Ok(if wrong > 0 {
        eprintln!("{tool}: {wrong} wrong values (see #wrong)");
        EXIT_FAILED
    } else if let Some(min) = args.min_busbw.filter(|m| avg < *m) {
        eprintln!("{tool}: gate failed: average bus bandwidth {avg:.6} GB/s < --min-busbw {min}");
        EXIT_GATE
    } else {
        0
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_params_are_the_command_lines_numbers_in_order() {
        let line = "vl_all_reduce_perf -b 64 -e 4K -n 7 -w 2 -c 0 --slot-size 1K --slots 3";
        let args = Args::try_parse_from(line.split(' ')).unwrap();
        assert_eq!(
            serde_json::to_string(&JsonParams::new(&args, Launcher::Flags)).unwrap(),
            concat!(
                r#"{"min_bytes":64,"max_bytes":4096,"iters":7,"warmup_iters":2,"check":0,"#,
                r#""slot_bytes":1024,"slots":3,"launcher":"flags (--rank/--world-size)"}"#
            )
        );
    }
}
