//! `vl_fabric_check`: every pair of hosts tested, the slow ones named. One rank per host,
//! started like the collectives (`--np`, mpirun, srun, torchrun's variables, or
//! `--rank/--world-size/--master`), meeting at the collectives' rendezvous
//! ([`crate::bootstrap`]). Rank 0 plans the rounds ([`plan`]), hands each rank its
//! flows ([`world`]), which run as the vl_* tools' own tests ([`flows`]), judges the numbers by
//! stated rules ([`verdict`]) and reports them ([`report`]). See docs/fabric-check.md.

pub mod args;
pub mod check;
pub mod flows;
pub mod plan;
pub mod report;
pub mod verdict;
pub mod world;

use std::ffi::OsString;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use crate::bootstrap::{self, Via};
use crate::env::RankInfo;
use crate::launch;
use crate::{CommOpts, RankRecord};
use verbs_lab::fail::{self, Fail};

pub use args::Args;
use report::TOOL;

/// Exit codes, as for the other tools ([`Fail`]'s).
pub const EXIT_FAILED: u8 = Fail::FAILED;
pub const EXIT_USAGE: u8 = Fail::USAGE;
pub const EXIT_SUSPECT: u8 = 3;

fn usage(s: impl Into<String>) -> Fail {
    Fail::usage(s.into())
}

/// The binary's `main`.
pub fn main() -> ExitCode {
    // --help, --version, and a bad command line (`vl_fabric_check: error: ...`, status 2).
    let args: Args = verbs_lab::cli::parse();
    let run = match args.launch.np {
        // A rank that --np started: it ends with its launcher.
        Some(_) if args.launch.rank.is_some() && launch::started_by_launcher() => {
            launch::child_setup(None)
                .map_err(usage)
                .and_then(|()| run(&args))
        }
        Some(np) => return launcher(np, &args),
        None => run(&args),
    };
    fail::exit(TOOL, run)
}

/// `--np N`: N ranks on this machine, meeting over TCP on the loopback (each rank's tests
/// connect to 127.0.0.1: the ranks share this host); with `--nnodes M --node-rank K`, this
/// host's N ranks of M × N, meeting at `--master` (torchrun's way, one launcher per host).
fn launcher(np: u32, args: &Args) -> ExitCode {
    let checked = args
        .launch
        .node_plan(np, &|name| std::env::var(name).ok())
        .map_err(usage)
        .and_then(|(node, across)| match node.world_size() {
            0 | 1 => Err(usage(format!(
                "--np {np}: a fabric check needs at least 2 ranks, one per host"
            ))),
            _ => Ok((node, across)),
        })
        .and_then(|plan| check_files(args).map(|()| plan));
    let (node, across) = match checked {
        Ok(plan) => plan,
        Err(fail) => return fail.exit(TOOL),
    };
    let own: Vec<OsString> = std::env::args_os().skip(1).collect();
    let run = launch::LocalRun {
        tool: TOOL,
        grace: Duration::from_secs(args.round_timeout + 60),
        queues: false,
        owes_the_end: true,
    };
    let outcome = if across {
        launch::run_node(&node, &own, &run)
    } else {
        launch::run_local(np, &own, &run)
    };
    launch::Outcome::exit(outcome, TOOL)
}

/// `--json` and `--plot` checked before anything runs: a path that cannot be written is a
/// usage error (exit 2), not a lost report after the check.
fn check_files(args: &Args) -> Result<(), Fail> {
    for (flag, path) in [("--json", &args.json), ("--plot", &args.plot)] {
        if let Some(p) = path {
            vl_perftest::output::can_write(Path::new(p)).map_err(|e| {
                usage(format!(
                    "{flag} {p}: cannot write this file: {e}; nothing was run"
                ))
            })?;
        }
    }
    Ok(())
}

/// One rank: who it is, the rendezvous, then rank 0's check or another rank's part in it.
fn run(args: &Args) -> Result<u8, Fail> {
    let info = args.launch.rank_info().map_err(usage)?;
    if info.world_size < 2 {
        return Err(usage(
            "a fabric check needs at least 2 ranks, one per host: start it with --np N, mpirun, \
             srun or torchrun, or give --rank, --world-size and --master",
        ));
    }
    let Some((host, port)) = info.master.clone() else {
        return Err(usage(
            "no rendezvous address: give --master HOST:PORT (rank 0's host) or set MASTER_ADDR \
             and MASTER_PORT",
        ));
    };
    if info.rank == 0 {
        check_files(args)?;
    }
    let star = bootstrap::rendezvous(
        own_record(&info),
        Via::Tcp((&host, port)),
        Duration::from_secs(args.launch.bootstrap_timeout),
    )
    .map_err(|e| Fail::new(EXIT_FAILED, e))?;
    let (link, table) = star.into_parts();
    // This rank's device: its local rank's of --ib-dev (the launcher's local rank, else counted
    // from the host names in the table, as the collectives count it).
    let local = bootstrap::places(&table)[info.rank as usize].local_rank;
    let args = &Args {
        device: args.launch.device(local).map(String::from),
        ..args.clone()
    };
    if info.rank != 0 {
        return world::follow(args, link, &table, info.rank).map_err(Fail::failed);
    }
    let mut world = world::World::new(link, table);
    let checked = check::run(args, &mut world);
    let hosts: Vec<String> = world.table.iter().map(|r| r.host.clone()).collect();
    let doc = report::document(args, &hosts, &world.gone, &checked);
    let written = write_outputs(args, &doc);
    let code = match &written {
        Ok(()) => doc.exit,
        Err(_) => EXIT_FAILED,
    };
    world.end(code);
    written.map(|()| code)
}

/// The report on stdout, `--json`, `--plot`.
fn write_outputs(args: &Args, doc: &report::FabricJson) -> Result<(), Fail> {
    verbs_lab::outln!("{}", report::text(doc).trim_end());
    if let Some(p) = &args.json {
        std::fs::write(p, vl_perftest::report::pretty_json(doc))
            .map_err(|e| Fail::failed(format!("cannot write --json {p}: {e}")))?;
    }
    if let Some(p) = &args.plot {
        let svg = report::svg(doc).map_err(Fail::failed)?;
        std::fs::write(p, svg)
            .map_err(|e| Fail::failed(format!("cannot write --plot {p}: {e}")))?;
    }
    Ok(())
}

/// This rank's rendezvous record: who and where it is (the communicator's first-round record).
/// It opens no device here: each pair test opens its own, as the tools do.
fn own_record(info: &RankInfo) -> RankRecord {
    let opts = CommOpts {
        terms: vec![("the tool".into(), TOOL.into())],
        ..CommOpts::default()
    };
    crate::comm::own_record(info, &opts)
}
