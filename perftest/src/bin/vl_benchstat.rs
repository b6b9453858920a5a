//! vl_benchstat — the statistics of `scripts/bench-vs-perftest`: reads the records a benchmark
//! run left in its directory (`tests.tsv`, `runs.tsv`, `env.txt`, `host.env`, `console.env`)
//! and writes there `benchmarks.json`, `generated.md` (the part of `docs/benchmarks.md`
//! between its GENERATED markers) and `summary.txt` (`vl_perftest::benchstat`): per row the
//! median with min-max of each side's valid runs, the median of the per-round ratios
//! ours/perftest (the verdict) and the ratio of the medians. With `--coll`, the same for
//! `scripts/bench-coll-vs-mpi`'s directory: `table.md` and `profile.md` from its `rows/`
//! (`vl_perftest::benchstat::coll`).
//!
//! ```text
//! vl_benchstat .vm-out/bench-DATE
//! vl_benchstat --coll .vm-out/coll-vs-mpi-DATE
//! ```
//! Exit status 0 when the files were written, 1 otherwise (the message says why), 2 for a bad
//! command line (`--help` says so too).

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, Result};
use clap::Parser;
use vl_perftest::benchstat::{coll, markdown, Records, Report};

/// Writes benchmarks.json, generated.md and summary.txt from a bench-vs-perftest run's records
/// (or, with --coll, table.md and profile.md from a bench-coll-vs-mpi run's).
#[derive(Parser)]
#[command(
    name = "vl_benchstat",
    version,
    after_help = "Exit codes:\n  0  the report's files written\n  1  a record is missing or \
                  unreadable, or a file could not be written (the message says which)\n  2  bad \
                  command line"
)]
struct Args {
    /// The run's directory (.vm-out/bench-DATE): reads its tests.tsv, runs.tsv, env.txt,
    /// host.env and console.env, writes the three files there.
    dir: PathBuf,

    /// DIR is scripts/bench-coll-vs-mpi's (.vm-out/coll-vs-mpi-DATE): reads its params and
    /// rows/R-{ours,mpi}.{out,err}, writes table.md and profile.md there.
    #[arg(long)]
    coll: bool,
}

fn run(args: &Args) -> Result<()> {
    if args.coll {
        return coll::write(&args.dir);
    }
    let rec = Records::read(&args.dir)?;
    let (md, summary) = markdown::render(&rec);
    for (name, text) in [
        ("benchmarks.json", Report::build(&rec).to_json()),
        ("generated.md", md),
        ("summary.txt", summary),
    ] {
        let path = args.dir.join(name);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Args = verbs_lab::cli::parse();
    verbs_lab::cli::exit_code("vl_benchstat", run(&args))
}
