//! The collective benchmarks
//! `vl_{all_reduce,reduce_scatter,all_gather,broadcast,sendrecv,alltoall,reduce,gather,scatter}_perf`:
//! nccl-tests' flags and table over [`crate`]. One rank per process, launched by
//! `--np N` (this machine; the ranks' rendezvous, barriers and results go over the launcher's
//! POSIX message queues, `crate::mqlink`), by `--np N --nnodes M --node-rank K` on
//! each node (torchrun's way, over TCP to rank 0 at `--master`), by hand with flags, or by
//! torchrun, DeepSpeed, mpirun or srun through their environment (over TCP to rank 0: ranks on
//! other hosts).
//!
//! Per size and placement: `-w` warm-up collectives, `-n` timed ones (the average is the rank's
//! time; the row shows the slowest rank's), then with `-c 1` one more on exact test data whose
//! every element is checked. Out of place, the copy of the input into the output is part of the
//! timed collective.

mod args;
mod bench;
mod check;
mod openmetrics;
pub mod report;
mod stdout;

use std::ffi::OsString;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use crate::env::{self, Launcher, RankInfo};
use crate::launch::{self, NodeRanks};
use crate::{Algo, Coll, CollError, Comm, CommOpts, DataType, RankRecord, RedOp};
use verbs_lab::fail::{self, Fail};
use verbs_lab::wire::{Reader, Writer};
use vl_perftest::progress::Progress;

pub use args::{sizes, Args, BusbwGate, MAX_BYTES, MAX_ROWS};
use bench::bench_one;
use report::{Measure, Row, Table};
use stdout::Stdout;

/// Exit codes, as for the other tools ([`Fail`]'s).
pub const EXIT_FAILED: u8 = Fail::FAILED;
pub const EXIT_USAGE: u8 = Fail::USAGE;
pub const EXIT_GATE: u8 = 3;

/// Entry point of the nine tools.
pub fn main(coll_of: fn(usize) -> Coll, tool: &'static str) -> ExitCode {
    verbs_lab::cli::generate_if_asked(<Args as clap::CommandFactory>::command);
    let mut command =
        verbs_lab::cli::negative_numbers_are_values(<Args as clap::CommandFactory>::command())
            .name(tool);
    let parsed = command
        .try_get_matches_from_mut(std::env::args_os())
        .map_err(|e| verbs_lab::cli::explain_number_error(e, &mut command))
        .and_then(|m| <Args as clap::FromArgMatches>::from_arg_matches(&m));
    let args = match parsed {
        Ok(a) => a.resolved(),
        // --help and --version: status 0; a bad flag: `NAME: error: ...`, status 2 (EXIT_USAGE).
        Err(e) => verbs_lab::cli::exit_on_usage_error(&e, tool),
    };
    let coll = coll_of(args.root);
    let run = match (args.launch.np, &args.launch.local_queues) {
        // A rank that --np started: it ends with its launcher.
        (Some(np), Some(base)) => launch::child_setup(Some((base, np)))
            .map_err(usage)
            .and_then(|()| run(&args, coll, tool)),
        // A rank that --nnodes's launcher started (over TCP): it ends with its launcher too.
        (Some(_), None) if args.launch.rank.is_some() && launch::started_by_launcher() => {
            launch::child_setup(None)
                .map_err(usage)
                .and_then(|()| run(&args, coll, tool))
        }
        (Some(np), None) => return launcher(np, &args, coll, tool),
        (None, _) => run(&args, coll, tool),
    };
    // Rank 0 left at a closed `| head`: a failure is its echo, and --np ends quietly — unless
    // the run owed a report file or a verdict, which then did not come.
    let echo = launch::output_unread() && !owes_the_end(&args);
    fail::exit(tool, run.map_err(|f| if echo { f.quiet() } else { f }))
}

/// `--np N` (with `--nnodes M --node-rank K`: this node's share of a job across nodes):
/// checks what every rank would check (so a bad flag is said once, before any rank starts, and
/// the --json file exists on the node that writes it), then starts the ranks and waits for them.
fn launcher(np: u32, args: &Args, coll: Coll, tool: &str) -> ExitCode {
    let checked = node_plan(np, args).and_then(|(node, across)| {
        every_size(args, coll, node.world_size() as usize)
            .and_then(|_| args.busbw_gate(&env_var).map_err(usage))
            .and_then(|_| args.algo_for(coll, &env_var).map_err(usage))
            .and_then(|_| args.channels_for(&env_var).map_err(usage))
            // Rank 0 writes it, on node 0.
            .and_then(|_| match node.node_rank {
                0 => check_json(args),
                _ => Ok(()),
            })
            .and_then(|()| check_devices(args, np))
            .map(|()| (node, across))
    });
    let (node, across) = match checked {
        Ok(plan) => plan,
        Err(fail) => return fail.exit(tool),
    };
    let own: Vec<OsString> = std::env::args_os().skip(1).collect();
    // The others' peer timeout, rank 0's verdict at its longest, and a margin.
    let grace = Duration::from_secs(args.peer_timeout + 5) + 2 * crate::bootstrap::VERDICT_BOUND;
    let run = launch::LocalRun {
        tool,
        grace,
        queues: !across,
        owes_the_end: owes_the_end(args),
    };
    let outcome = if across {
        launch::run_node(&node, &own, &run)
    } else {
        launch::run_local(np, &own, &run)
    };
    launch::Outcome::exit(outcome, tool)
}

/// What `--np np` asks of this launcher: its share of the job, and whether its ranks meet
/// others over TCP at a master (`--nnodes`, torchrun's way) rather than over this machine's
/// message queues ([`launch::LaunchArgs::node_plan`]).
fn node_plan(np: u32, args: &Args) -> Result<(NodeRanks, bool), Fail> {
    args.launch.node_plan(np, &env_var).map_err(usage)
}

/// Whether the run owes more than the lines on stdout — a `--json` file, or a gate's verdict
/// (`--min-busbw`, `NCCL_TESTS_MIN_BW`) — so that it goes on to the end when `| head` stops
/// reading, and a rank that fails meanwhile says why.
fn owes_the_end(args: &Args) -> bool {
    args.json.is_some()
        || args.csv.is_some()
        || args.openmetrics.is_some()
        || matches!(args.busbw_gate(&env_var), Ok(Some(_)))
}

/// `--json FILE` checked before the run, as the `vl_*` tools check theirs, so that a path that
/// cannot be written fails at once with exit status 2, not after the sweep.
fn check_json(args: &Args) -> Result<(), Fail> {
    for (flag, file) in [
        ("--json", &args.json),
        ("--csv", &args.csv),
        ("--openmetrics", &args.openmetrics),
    ] {
        if file.is_some() && args.sweeps() {
            return Err(usage(format!(
                "{flag} holds one type and one operator: with -d all or -o all, run once per \
                 type (or operator) for the documents"
            )));
        }
        if let Some(path) = file {
            vl_perftest::output::can_write(Path::new(path)).map_err(|e| {
                usage(format!(
                    "{flag} {path}: cannot write this file: {e}; nothing was run"
                ))
            })?;
        }
    }
    Ok(())
}

/// The process's environment, as the gate and the launchers read it.
fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

fn usage(s: impl Into<String>) -> Fail {
    Fail::usage(s.into())
}

/// A failure's exit code: 2 for a usage error, including a `-d`, `--ib-port` or GID index
/// this machine does not have; 1 otherwise.
fn failed(e: CollError) -> Fail {
    let code = match &e {
        CollError::Usage(_) => EXIT_USAGE,
        CollError::Verbs { err, .. } if err.is_bad_argument() => EXIT_USAGE,
        _ => EXIT_FAILED,
    };
    Fail::new(code, e)
}

/// The devices the ranks of `--np np` will use (round-robin over `-d`, or the first device),
/// each opened with its port and GID index as a rank opens it: a name, port or index this
/// machine does not have, or a port that is not ACTIVE, is said once by the launcher before
/// any rank starts, instead of by every rank.
fn check_devices(args: &Args, np: u32) -> Result<(), Fail> {
    if np == 1 && args.launch.devices.is_empty() && args.launch.gid_index.is_none() {
        // A world of one opens no device unless one is named (the communicator's rule).
        return Ok(());
    }
    let mut devices: Vec<Option<&str>> = (0..np)
        .map(|r| env::pick_device(&args.launch.devices, r))
        .collect();
    devices.sort_unstable();
    devices.dedup();
    for dev in devices {
        verbs_lab::verbs::DeviceList::open_port(dev, args.launch.ib_port, args.launch.gid_index)
            .map_err(|err| {
                failed(CollError::Verbs {
                    what: "opening the RDMA device, its port and GID".into(),
                    err,
                })
            })?;
    }
    Ok(())
}

/// One rank of the benchmark: who it is, the flags checked, the communicator, one row per size,
/// rank 0's verdict — which every rank exits with.
fn run(args: &Args, coll: Coll, tool: &'static str) -> Result<u8, Fail> {
    let gate = args.busbw_gate(&env_var).map_err(usage)?;
    let algo = args.algo_for(coll, &env_var).map_err(usage)?;
    let (channels, channels_from) = args.channels_for(&env_var).map_err(usage)?;
    let info = rank_info(args)?;
    let n = info.world_size as usize;
    let runs = every_size(args, coll, n)?;
    if info.rank == 0 {
        check_json(args)?;
    }
    let max = runs
        .iter()
        .filter_map(|(_, sizes)| sizes.last().copied())
        .max()
        .expect("at least one size");
    let opts = comm_opts(args, coll, &info, max, (algo, channels));
    let launcher = info.launcher;
    let from = from_note(args, &info);
    let mut comm = Comm::init(info, &opts).map_err(failed)?;
    comm.star()
        .set_timeout(Duration::from_secs(args.peer_timeout.max(5)));
    let rank = comm.rank();
    let table_of = |a: &Args| Table {
        tool,
        coll,
        n,
        dtype: a.dtype,
        op: coll.reduces().then_some(a.op),
        channels,
    };
    let table = table_of(args);
    let records = comm.table().to_vec();
    let mut out = Stdout::new();
    if rank == 0 {
        let channels = channels_note(channels, &channels_from, coll, (algo, n));
        out.line(&table.header(
            &records,
            &params_line(args, n, &from, (coll, algo), &channels),
        ))
        .map_err(stdout_failed)?;
    }
    let mut rows = Vec::new();
    let total = runs.iter().map(|(_, sizes)| sizes.len()).sum();
    let progress = Progress::sweep(tool, total, rank == 0);
    // One pass over the sizes per type and operator (`-d all`, `-o all`: each in turn).
    'sweep: for (a, sizes) in &runs {
        let table = table_of(a);
        for &size in sizes {
            progress.size(size as u64);
            if let Some(row) = one_size(&mut comm, &mut out, &table, a, size)? {
                progress
                    .row(|| out.line(&table.row(&row)))
                    .map_err(stdout_failed)?;
                rows.push(row);
            }
            // Rank 0's reader gone (`| head`) and nothing else wanting the rest: every rank
            // stops here together, and the run ends as it would have, quietly.
            let done = rank == 0 && out.closed() && !owes_the_end(args);
            if comm.star().broadcast(&[u8::from(done)]).map_err(failed)? != [0] {
                break 'sweep;
            }
        }
    }
    drop(progress);
    let code = if rank == 0 {
        verdict(
            args,
            gate.as_ref(),
            &mut out,
            &table,
            &records,
            &rows,
            launcher,
        )?
    } else {
        0
    };
    // Everyone learns rank 0's verdict, so every rank exits with the same status.
    let verdict = comm.star().broadcast(&[code]).map_err(failed)?;
    comm.finish().map_err(failed)?;
    Ok(verdict.first().copied().unwrap_or(EXIT_FAILED))
}

/// This rank's place: from `--np`'s flags (the queues stand for `--master`), else from the
/// flags or the launcher's environment; the world must be `--np`'s (times `--nnodes`)
/// ([`launch::LaunchArgs::rank_info`]).
fn rank_info(args: &Args) -> Result<RankInfo, Fail> {
    args.launch.rank_info().map_err(usage)
}

/// A write to stdout that failed for another reason than a closed pipe.
fn stdout_failed(e: std::io::Error) -> Fail {
    Fail::new(
        EXIT_FAILED,
        anyhow::Error::new(e).context("cannot write to stdout"),
    )
}

/// The flags and sizes of each pass of the run: one per type and operator of `-d` and `-o`
/// ([`Args::each`]), each checked by [`checked_sizes`].
fn every_size(args: &Args, coll: Coll, n: usize) -> Result<Vec<(Args, Vec<usize>)>, Fail> {
    args.each(coll.reduces())
        .into_iter()
        .map(|c| {
            let a = args.with(c);
            checked_sizes(&a, coll, n).map(|sizes| (a, sizes))
        })
        .collect()
}

/// The rows' sizes, after refusing flags that make no sense for a world of `n` — the same
/// checks whatever `n`, one rank or many.
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
    if args.root >= n && n == 1 {
        // The world is one rank: given so, or nothing gave a world size (the rendezvous is
        // what tells a rank the others; with no launcher, no flag and no --np there is none).
        return Err(usage(format!(
            "-r {}: the world here is a single rank (rank 0): --np 1 or --world-size 1, or no \
             --np, --world-size or launcher variables (WORLD_SIZE, OMPI_COMM_WORLD_SIZE, \
             SLURM_NTASKS...) to give a larger one, so the only root is 0; start the ranks \
             with --np N (or a launcher), or give each its --rank and --world-size",
            args.root
        )));
    }
    if args.root >= n {
        return Err(usage(format!(
            "-r {}: the root must be a rank of the {n} (0..{}){}",
            args.root,
            n - 1,
            if coll.root().is_some() {
                ""
            } else {
                ", whether or not this collective has one (as nccl-tests)"
            }
        )));
    }
    check_slots(args.slot_bytes, args.nslots)?;
    check_exact(args, coll, n)?;
    Ok(sizes)
}

/// `-c 1` checks exact values: a checked sum of the narrow floats must stay within the integers
/// they hold exactly (each rank gives at most [`CHECKED_MAX`] per element).
fn check_exact(args: &Args, coll: Coll, n: usize) -> Result<(), Fail> {
    let t = args.dtype;
    let (Some(limit), true) = (t.exact_integers(), args.check == 1) else {
        return Ok(());
    };
    let sum = CHECKED_MAX * n as i64;
    if coll.reduces() && matches!(args.op, RedOp::Sum | RedOp::Avg) && sum > limit {
        return Err(usage(format!(
            "-d {t} -c 1 with {n} ranks: {t} holds every integer only up to {limit}, and the \
             checked sum reaches {sum} ({CHECKED_MAX} per rank), so its rounding could not be \
             told from a wrong value; run -c 0, or at most {} ranks",
            limit / CHECKED_MAX
        )));
    }
    Ok(())
}

/// The largest value [`crate::kernels::input_value`] gives.
const CHECKED_MAX: i64 = 32;

/// `--slot-size` and `--slots`: the slots are one registered region, whose length must fit an
/// SGE's 32 bits as `-e` must.
fn check_slots(slot_bytes: usize, nslots: usize) -> Result<(), Fail> {
    let max = args::MAX_BYTES;
    match slot_bytes.checked_mul(nslots) {
        _ if slot_bytes < 8 || nslots == 0 => Err(usage(format!(
            "--slot-size {slot_bytes} --slots {nslots}: give at least one slot of at least 8 bytes"
        ))),
        Some(total) if total <= max => Ok(()),
        _ => Err(usage(format!(
            "--slots {nslots} x --slot-size {slot_bytes}: more than {max} bytes; the slots are \
             one registered region, whose length must fit an SGE's 32 bits"
        ))),
    }
}

/// The communicator's options: buffers for the largest size, the rank pinned near its device
/// (by its local rank, which the rendezvous may have to tell it) when the world has more than
/// one rank, and the [`terms`] every rank must share.
fn comm_opts(
    args: &Args,
    coll: Coll,
    info: &RankInfo,
    max: usize,
    (algo, channels): (Algo, usize),
) -> CommOpts {
    let pin = if info.world_size > 1 {
        crate::Pinning::ByLocalRank(near_device)
    } else {
        crate::Pinning::None
    };
    CommOpts {
        devices: args.launch.devices.clone(),
        ib_port: args.launch.ib_port,
        gid_index: args.launch.gid_index,
        max_bytes: max,
        // The ring relays all-to-all's blocks through a scratch area; the direct exchange
        // writes them in place.
        scratch: coll == Coll::AllToAll
            && algo.resolve_alltoall(info.world_size as usize) == Algo::Ring,
        slot_bytes: args.slot_bytes,
        nslots: args.nslots,
        channels,
        bootstrap_timeout: Duration::from_secs(args.launch.bootstrap_timeout),
        peer_timeout: Duration::from_secs(args.peer_timeout),
        ack_timeout: args.ack_timeout,
        algo,
        pin,
        local_queues: args.launch.local_queues.clone(),
        terms: terms(args, coll, algo),
    }
}

/// The CPU of local rank `local` near device `dev` (as the `--procs` workers choose theirs); no
/// pinning without a device named by `-d`.
fn near_device(dev: Option<&str>, local: u32) -> Option<usize> {
    vl_perftest::procs::worker_cpu(dev?, None, local)
        .ok()
        .flatten()
        .map(|(c, _)| c)
}

/// The options every rank must share, for the rendezvous to compare (a rank started with
/// others is refused there, naming the option and both values): the collective, the sweep
/// (`-b`, `-e`, the step `-f` or `-i`), how many collectives per size (`-n`, `-w`, `-c`), the
/// element type, and the operator and root where the collective uses them. A mismatch in any
/// of them makes the ranks call different collectives or sizes, or check against other
/// values; and all-reduce's and all-to-all's algorithm (`--algo`, `VL_ALGO`), which decides who
/// talks to whom.
/// Not here: `--slot-size`/`--slots` (the communicator compares them itself), each
/// rank's own device, port, GID, QP timeout and timeouts, and what only rank 0 or each rank
/// prints or writes (`--json`, `--min-busbw`, `--all-ranks`, `--profile`).
fn terms(args: &Args, coll: Coll, algo: Algo) -> Vec<(String, String)> {
    let step = match args.step_bytes {
        Some(i) => ("-i", i.to_string()),
        None => ("-f", args.step_factor.unwrap_or(2).to_string()),
    };
    let mut t = vec![
        ("the collective", coll.name().to_string()),
        ("-b", args.min_bytes.to_string()),
        ("-e", args.max_bytes.to_string()),
        step,
        ("-n", args.iters.to_string()),
        ("-w", args.warmup.to_string()),
        ("-c", args.check.to_string()),
        ("-d", args.dtypes.spelling(DataType::name).to_string()),
    ];
    if coll.reduces() {
        t.push(("-o", args.ops.spelling(RedOp::name).to_string()));
    }
    if let Some(root) = coll.root() {
        t.push(("-r", root.to_string()));
    }
    if coll.chooses_algorithm() {
        t.push(("--algo", algo.name().to_string()));
    }
    t.into_iter().map(|(o, v)| (o.to_string(), v)).collect()
}

/// Where the header says the ranks came from: the launcher, and how `--np`'s ranks meet.
fn from_note(args: &Args, info: &RankInfo) -> String {
    match (&args.launch.local_queues, info.launcher, &info.master) {
        (Some(base), _, _) => format!("--np, coordinated over the message queues {base}-r*"),
        (None, Launcher::Nodes, Some((host, port))) => format!(
            "--nnodes {} x --np {}, one launcher per node, over TCP to {host}:{port}",
            args.launch.nnodes.unwrap_or(1),
            args.launch.np.unwrap_or(1)
        ),
        _ => info.launcher.to_string(),
    }
}

/// The header's parameter line; `from`: [`from_note`], `channels`: [`channels_note`].
/// All-reduce's ends with its algorithm ([`algo_note`]).
fn params_line(
    args: &Args,
    n: usize,
    from: &str,
    (coll, algo): (Coll, Algo),
    channels: &str,
) -> String {
    let line = format!(
        "nranks {n} (from {from}), minBytes {} maxBytes {} step: {} warmup iters: {} iters: {} \
         validation: {} slots: {} x {} B {channels}",
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
    match coll {
        Coll::AllReduce => format!("{line} algo: {}", algo_note(algo, n)),
        Coll::AllToAll => format!("{line} algo: {}", alltoall_note(algo, n)),
        _ => line,
    }
}

/// The header's channel count: where it came from, and that recursive doubling and the direct
/// all-to-all (when `algo` on `n` ranks takes it) keep one.
fn channels_note(k: usize, from: &str, coll: Coll, (algo, n): (Algo, usize)) -> String {
    let direct = algo.resolve_alltoall(n) == Algo::Direct;
    let rd = match coll {
        Coll::AllReduce if k > 1 => ", rd keeps 1",
        Coll::AllToAll if k > 1 && direct => ", the direct exchange keeps 1 pair per rank",
        _ => "",
    };
    match from {
        "default" => format!("channels: {k} (QPs per ring neighbour{rd})"),
        _ => format!("channels: {k} (QPs per ring neighbour, from {from}{rd})"),
    }
}

/// All-to-all's algorithm as asked, and what `auto` takes on `n` ranks.
fn alltoall_note(algo: Algo, n: usize) -> String {
    match (algo, algo.resolve_alltoall(n)) {
        (Algo::Auto, Algo::Direct) => "auto (direct: a QP pair to each rank)".to_string(),
        (Algo::Auto, _) => format!("auto (ring: {n} rank(s), the ring is the exchange)"),
        (Algo::Direct, _) => "direct (a QP pair to each rank)".to_string(),
        (a, _) => a.name().to_string(),
    }
}

/// The algorithm asked for, and for `auto` where the model switches on `n` ranks.
fn algo_note(algo: Algo, n: usize) -> String {
    match algo {
        Algo::Auto if n > 1 => format!(
            "auto (rd below {} B per rank, ring from there)",
            crate::algo::AlphaBeta::SOFTROCE.crossover(n)
        ),
        Algo::Auto => "auto (one rank: nothing to move)".to_string(),
        a => a.name().to_string(),
    }
}

/// One size out of place (and in place, but for sendrecv); every rank's numbers go to rank 0,
/// which returns the row (`None` on the other ranks, which print their own with --all-ranks).
fn one_size(
    comm: &mut Comm,
    out: &mut Stdout<std::io::Stdout>,
    table: &Table,
    args: &Args,
    size: usize,
) -> Result<Option<Row>, Fail> {
    let (coll, n, rank) = (table.coll, table.n, comm.rank());
    // nccl-tests' rule: what moves is what the row says.
    let size = report::moved_size(coll, n, size, args.dtype);
    let count = size / args.dtype.size();
    let has_algo = coll.chooses_algorithm();
    let algo = comm.algo_for(coll, size);
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
            algo: has_algo.then_some(algo),
        };
        out.line(&format!("[rank {rank}] {}", table.row(&r)))
            .map_err(stdout_failed)?;
    }
    let Some(all) = all else {
        return Ok(None);
    };
    let mut row = assemble(
        &all,
        size,
        report::count_column(coll, n, size, args.dtype),
        ip.is_some(),
    )
    .map_err(Fail::failed)?;
    row.algo = has_algo.then_some(algo);
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
    /// How many hosts the ranks ran on (their host hashes).
    hosts: u32,
    /// All-reduce's or all-to-all's algorithm as asked (`ring`, `rd`, `direct`, `auto`); each
    /// row says which ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    algo: Option<&'static str>,
    /// QPs per ring neighbour (`--channels`); recursive doubling's steps use one.
    channels: usize,
}

impl JsonParams {
    fn new(
        args: &Args,
        launcher: Launcher,
        hosts: u32,
        algo: Option<Algo>,
        channels: usize,
    ) -> JsonParams {
        JsonParams {
            min_bytes: args.min_bytes,
            max_bytes: args.max_bytes,
            iters: args.iters,
            warmup_iters: args.warmup,
            check: args.check,
            slot_bytes: args.slot_bytes,
            slots: args.nslots,
            launcher: launcher.name(),
            hosts,
            algo: algo.map(Algo::name),
            channels,
        }
    }
}

/// Rank 0's end: the footer, `--json` (its path checked before the run), and the exit status
/// (wrong values, then the gate).
fn verdict(
    args: &Args,
    gate: Option<&BusbwGate>,
    out: &mut Stdout<std::io::Stdout>,
    table: &Table,
    records: &[RankRecord],
    rows: &[Row],
    launcher: Launcher,
) -> Result<u8, Fail> {
    let tool = table.tool;
    out.line(&table.footer(rows, gate.map(|g| g.floor)))
        .map_err(stdout_failed)?;
    let hosts = crate::bootstrap::places(records)
        .first()
        .map_or(1, |p| p.hosts);
    if let Some(path) = &args.json {
        // As the run resolved it (checked before the run).
        let algo = table
            .coll
            .chooses_algorithm()
            .then(|| args.algo_for(table.coll, &env_var).ok())
            .flatten();
        let params = JsonParams::new(args, launcher, hosts, algo, table.channels);
        let doc = table.json(records, params, rows);
        std::fs::write(path, vl_perftest::report::pretty_json(&doc))
            .map_err(|e| Fail::failed(format!("cannot write --json {path}: {e}")))?;
    }
    if let Some(path) = &args.csv {
        std::fs::write(path, table.csv(rows))
            .map_err(|e| Fail::failed(format!("cannot write --csv {path}: {e}")))?;
    }
    let wrong = report::total_wrong(rows);
    let avg = table.avg_busbw(rows);
    if let Some(path) = &args.openmetrics {
        let held = gate.map(|g| (g.source.as_str(), avg >= g.floor));
        std::fs::write(path, openmetrics::render(table, rows, hosts, held))
            .map_err(|e| Fail::failed(format!("cannot write --openmetrics {path}: {e}")))?;
    }
    Ok(if wrong > 0 {
        verbs_lab::eprintln_whole!("{tool}: error: {wrong} wrong values (see #wrong)");
        EXIT_FAILED
    } else if let Some(g) = gate.filter(|g| avg < g.floor) {
        verbs_lab::eprintln_whole!(
            "{tool}: error: gate failed: average bus bandwidth {avg:.6} GB/s < {} ({} GB/s)",
            g.source,
            g.floor
        );
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
        algo: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn terms_of(line: &str, coll: Coll) -> Vec<(String, String)> {
        terms(
            &Args::try_parse_from(line.split(' ')).unwrap(),
            coll,
            Algo::Auto,
        )
    }

    #[test]
    fn the_algorithm_comes_from_the_flag_then_vl_algo_then_nccl_algo() {
        let args = |line: &str| Args::try_parse_from(line.split(' ')).unwrap();
        let env = |vl: Option<&'static str>, nccl: Option<&'static str>| {
            move |name: &str| match name {
                "VL_ALGO" => vl.map(String::from),
                "NCCL_ALGO" => nccl.map(String::from),
                _ => None,
            }
        };
        let ar = Coll::AllReduce;
        let plain = args("vl_all_reduce_perf");
        assert_eq!(plain.algo_for(ar, &env(None, None)), Ok(Algo::Auto));
        assert_eq!(plain.algo_for(ar, &env(None, Some("Tree"))), Ok(Algo::Rd));
        assert_eq!(
            plain.algo_for(ar, &env(Some("ring"), Some("Tree"))),
            Ok(Algo::Ring)
        );
        let flag = args("vl_all_reduce_perf --algo rd");
        assert_eq!(flag.algo_for(ar, &env(Some("ring"), None)), Ok(Algo::Rd));
        let e = plain.algo_for(ar, &env(Some("tree"), None)).unwrap_err();
        assert!(e.starts_with("VL_ALGO=\"tree\": unknown algorithm"), "{e}");
        // The others have only the ring: the variables are ignored, the flag refused.
        let b = Coll::Broadcast { root: 0 };
        assert_eq!(plain.algo_for(b, &env(Some("rd"), None)), Ok(Algo::Ring));
        assert!(flag
            .algo_for(b, &env(None, None))
            .unwrap_err()
            .contains("only the ring"));
        assert!(Args::try_parse_from(["vl_all_reduce_perf", "--algo", "tree"]).is_err());
        // The header says which, and where auto switches.
        let line = params_line(&plain, 4, "flags", (ar, Algo::Auto), "channels: 1");
        assert!(
            line.ends_with(" algo: auto (rd below 71111 B per rank, ring from there)"),
            "{line}"
        );
        assert!(line.contains(" B channels: 1 algo: auto"), "{line}");
        assert!(!params_line(&plain, 4, "flags", (b, Algo::Ring), "").contains("algo"));
        // All-to-all: the flag alone (ring, direct, auto), all-reduce's variables ignored.
        let a2a = Coll::AllToAll;
        assert_eq!(
            plain.algo_for(a2a, &env(Some("rd"), Some("Tree"))),
            Ok(Algo::Auto)
        );
        let direct = args("vl_alltoall_perf --algo direct");
        assert_eq!(direct.algo_for(a2a, &env(None, None)), Ok(Algo::Direct));
        let e = flag.algo_for(a2a, &env(None, None)).unwrap_err();
        assert_eq!(
            e,
            "--algo rd: alltoall does not have it; rd is all_reduce's"
        );
        let e = direct.algo_for(ar, &env(None, None)).unwrap_err();
        assert!(e.contains("direct is alltoall's"), "{e}");
        let e = direct.algo_for(b, &env(None, None)).unwrap_err();
        assert!(e.contains("broadcast has only the ring"), "{e}");
        let e = plain.algo_for(ar, &env(Some("direct"), None)).unwrap_err();
        assert!(e.contains("direct is alltoall's"), "{e}");
        let line = params_line(&plain, 4, "flags", (a2a, Algo::Auto), "channels: 1");
        assert!(
            line.ends_with(" algo: auto (direct: a QP pair to each rank)"),
            "{line}"
        );
        let line = params_line(&plain, 2, "flags", (a2a, Algo::Auto), "channels: 1");
        assert!(line.ends_with(" algo: auto (ring: 2 rank(s), the ring is the exchange)"));
    }

    #[test]
    fn the_terms_are_every_option_the_ranks_must_share_with_its_value() {
        let t = terms_of(
            "vl_all_reduce_perf -b 8 -e 1M -n 5 -w 3 -c 0 -d int32 -o max",
            Coll::AllReduce,
        );
        let want = [
            ("the collective", "all_reduce"),
            ("-b", "8"),
            ("-e", "1048576"),
            ("-f", "2"),
            ("-n", "5"),
            ("-w", "3"),
            ("-c", "0"),
            ("-d", "int32"),
            ("-o", "max"),
            ("--algo", "auto"),
        ];
        let want: Vec<(String, String)> = want
            .iter()
            .map(|(o, v)| (o.to_string(), v.to_string()))
            .collect();
        assert_eq!(t, want);
        // The step as given; the root where the collective has one; no operator where it does
        // not reduce; and nothing of what each rank may choose for itself.
        let t = terms_of(
            "vl_broadcast_perf -i 64 -r 1 -o max --ib-dev rxe1 --timeout 5 --all-ranks",
            Coll::Broadcast { root: 1 },
        );
        let options: Vec<&str> = t.iter().map(|(o, _)| o.as_str()).collect();
        assert_eq!(
            options,
            [
                "the collective",
                "-b",
                "-e",
                "-i",
                "-n",
                "-w",
                "-c",
                "-d",
                "-r"
            ]
        );
        assert_eq!(t[3].1, "64");
        assert_eq!(t[8].1, "1");
        // Two ranks with -d float and -d int32 differ in -d alone, which the rendezvous names.
        let a = terms_of("vl_all_reduce_perf -d float", Coll::AllReduce);
        let b = terms_of("vl_all_reduce_perf -d int32", Coll::AllReduce);
        assert_eq!(
            crate::bootstrap::differing_term(&b, &a).as_deref(),
            Some("runs with -d int32, rank 0 with -d float")
        );
    }

    /// Two launchers on this host as node 0 and node 1 of `--nnodes 2`: what each gives its
    /// children makes them ranks 0, 1 and 2, 3 of 4, local ranks 0 and 1, meeting at the master.
    #[test]
    fn a_node_launchers_children_are_its_share_of_the_world_and_the_header_says_so() {
        for k in 0..2u32 {
            let line = format!(
                "vl_all_reduce_perf --np 2 --nnodes 2 --node-rank {k} --master 127.0.0.1:29555 -e 64"
            );
            let launcher = Args::try_parse_from(line.split(' ')).unwrap();
            let (node, across) = node_plan(2, &launcher).unwrap();
            assert!(across, "over TCP, not this machine's queues");
            for i in 0..2 {
                let child: Vec<String> = line
                    .split(' ')
                    .map(String::from)
                    .chain(node.rank_flags(i))
                    .collect();
                let args = Args::try_parse_from(&child).unwrap();
                let info = rank_info(&args).unwrap();
                assert_eq!(
                    (info.rank, info.world_size, info.local_rank, info.launcher),
                    (2 * k + i, 4, Some(i), Launcher::Nodes)
                );
                assert_eq!(info.master, Some(("127.0.0.1".into(), 29555)));
                assert_eq!(
                    from_note(&args, &info),
                    "--nnodes 2 x --np 2, one launcher per node, over TCP to 127.0.0.1:29555"
                );
            }
        }
        // A child whose world is not --np × --nnodes is refused.
        let args = Args::try_parse_from(
            "vl_all_reduce_perf --np 2 --nnodes 2 --node-rank 0 --master 127.0.0.1:1 --rank 0 \
             --world-size 2 --local-rank 0"
                .split_whitespace(),
        )
        .unwrap();
        let refused = rank_info(&args).unwrap_err();
        assert_eq!(
            (refused.code(), refused.to_string()),
            (
                EXIT_USAGE,
                "--np 2 on 2 node(s) but a world size of 2".to_string()
            )
        );
        // One node and no master is --np alone, over this machine's queues.
        let one =
            Args::try_parse_from(["vl_all_reduce_perf", "--np", "3", "--nnodes", "1"]).unwrap();
        if std::env::var_os("MASTER_ADDR").is_none() && std::env::var_os("MASTER_PORT").is_none() {
            assert_eq!(
                node_plan(3, &one).unwrap(),
                (NodeRanks::this_machine(3), false)
            );
        }
    }

    #[test]
    fn torchruns_and_deepspeeds_spellings_mean_ours() {
        for line in [
            "vl_all_reduce_perf --nproc-per-node 3 --nnodes 2 --node-rank 1",
            "vl_all_reduce_perf --nproc_per_node 3 --nnodes 2 --node_rank 1",
            "vl_all_reduce_perf --np 3 --nnodes=2 --node-rank=1",
        ] {
            let a = Args::try_parse_from(line.split(' ')).unwrap();
            assert_eq!(
                (a.launch.np, a.launch.nnodes, a.launch.node_rank),
                (Some(3), Some(2), Some(1)),
                "{line}"
            );
        }
        // DeepSpeed's launcher adds --local_rank=N after the program unless --no_local_rank.
        let a = Args::try_parse_from(["vl_all_reduce_perf", "--local_rank=1", "-e", "64"]).unwrap();
        assert_eq!(a.launch.local_rank, Some(1));
    }

    #[test]
    fn json_params_are_the_command_lines_numbers_in_order() {
        let line = "vl_all_reduce_perf -b 64 -e 4K -n 7 -w 2 -c 0 --slot-size 1K --slots 3";
        let args = Args::try_parse_from(line.split(' ')).unwrap();
        assert_eq!(
            serde_json::to_string(&JsonParams::new(&args, Launcher::Flags, 2, None, 3)).unwrap(),
            concat!(
                r#"{"min_bytes":64,"max_bytes":4096,"iters":7,"warmup_iters":2,"check":0,"#,
                r#""slot_bytes":1024,"slots":3,"launcher":"flags (--rank/--world-size)","#,
                r#""hosts":2,"channels":3}"#
            )
        );
    }

    #[test]
    fn the_channels_come_from_the_flag_then_nccls_product() {
        let args = |line: &str| Args::try_parse_from(line.split(' ')).unwrap();
        let env = |ch: Option<&'static str>, qps: Option<&'static str>| {
            move |name: &str| match name {
                "NCCL_MIN_NCHANNELS" => ch.map(String::from),
                "NCCL_IB_QPS_PER_CONNECTION" => qps.map(String::from),
                _ => None,
            }
        };
        let plain = args("vl_all_reduce_perf");
        assert_eq!(plain.channels_for(&env(None, None)).unwrap().0, 1);
        assert_eq!(
            plain.channels_for(&env(Some("2"), Some("4"))).unwrap(),
            (
                8,
                "NCCL_MIN_NCHANNELS=2 x NCCL_IB_QPS_PER_CONNECTION=4".into()
            )
        );
        assert_eq!(plain.channels_for(&env(None, Some("3"))).unwrap().0, 3);
        let flag = args("vl_all_gather_perf --channels 4");
        assert_eq!(
            flag.channels_for(&env(Some("8"), Some("8"))).unwrap(),
            (4, "--channels".into())
        );
        let e = plain.channels_for(&env(Some("0"), None)).unwrap_err();
        assert!(
            e.starts_with("NCCL_MIN_NCHANNELS=\"0\": not a whole number"),
            "{e}"
        );
        let e = plain.channels_for(&env(Some("4"), Some("8"))).unwrap_err();
        assert!(
            e.contains("32 QPs per ring neighbour, more than the 16 offered"),
            "{e}"
        );
        for bad in ["0", "17", "x"] {
            assert!(Args::try_parse_from(["vl_all_reduce_perf", "--channels", bad]).is_err());
        }
        let note = channels_note(4, "--channels", Coll::AllReduce, (Algo::Auto, 4));
        assert_eq!(
            note,
            "channels: 4 (QPs per ring neighbour, from --channels, rd keeps 1)"
        );
        assert_eq!(
            channels_note(1, "default", Coll::AllGather, (Algo::Ring, 4)),
            "channels: 1 (QPs per ring neighbour)"
        );
        // All-to-all keeps one pair per rank only where it takes the direct exchange.
        let a2a = |algo, n| channels_note(4, "--channels", Coll::AllToAll, (algo, n));
        assert!(a2a(Algo::Auto, 4).ends_with(", the direct exchange keeps 1 pair per rank)"));
        assert!(a2a(Algo::Ring, 4).ends_with("from --channels)"));
        assert!(a2a(Algo::Auto, 2).ends_with("from --channels)"));
    }
}
