//! vl_benchstat — the statistics of `scripts/bench-vs-perftest`: reads the records a benchmark
//! run left in its directory (`tests.tsv`, `runs.tsv`, `env.txt`, `host.env`, `console.env`)
//! and writes there `benchmarks.json`, `generated.md` (the part of `docs/benchmarks.md`
//! between its GENERATED markers) and `summary.txt` (`vl_bench::stat`): per row the
//! median with min-max of each side's valid runs, the median of the per-round ratios
//! ours/perftest (the verdict: meets; ties, a miss inside both tools' own spread where the
//! rounds split; MISSES; NO DATA) and the ratio of the medians. With `--coll`, the same for
//! `scripts/bench-coll-vs-mpi`'s directory: `table.md` and `profile.md` from its `rows/`
//! (`vl_bench::stat::coll`). With `--gate BASELINE`, the regression gate instead: the
//! run's `benchmarks.json` against a stored baseline's, our median of each row
//! (`vl_bench::stat::gate`).
//!
//! ```text
//! vl_benchstat .vm-out/bench-DATE
//! vl_benchstat --coll .vm-out/coll-vs-mpi-DATE
//! vl_benchstat --gate docs/benchmarks-deterministic.json .vm-out/bench-DATE [--tolerance lat=5]
//! ```
//! Exit status 0 when the files were written (or the gate holds), 1 otherwise (the message says
//! why), 2 for a bad command line (`--help` says so too), 3 when the gate finds a regression.

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, Result};
use clap::Parser;
use vl_bench::stat::{coll, gate, markdown, Records, Report};

/// Writes benchmarks.json, generated.md and summary.txt from a bench-vs-perftest run's records
/// (or, with --coll, table.md and profile.md from a bench-coll-vs-mpi run's).
#[derive(Parser)]
#[command(
    name = "vl_benchstat",
    version,
    after_help = "Exit codes:\n  0  the report's files written; with --gate: no row regressed\n  \
                  1  a record is missing or unreadable, or a file could not be written (the \
                  message says which); with --gate: a baseline row is missing from the run\n  \
                  2  bad command line\n  3  --gate: a row regressed beyond its tolerance"
)]
struct Args {
    /// The run's directory (.vm-out/bench-DATE): reads its tests.tsv, runs.tsv, env.txt,
    /// host.env and console.env, writes the three files there.
    dir: PathBuf,

    /// DIR is scripts/bench-coll-vs-mpi's (.vm-out/coll-vs-mpi-DATE): reads its params and
    /// rows/R-{ours,mpi}.{out,err}, writes table.md and profile.md there.
    #[arg(long, conflicts_with = "gate")]
    coll: bool,

    /// The regression gate: compare DIR's benchmarks.json (DIR may also name the file itself)
    /// with this baseline (e.g. docs/benchmarks-deterministic.json) on our median of each row;
    /// exit 3 when a row is worse by more than its tolerance or the baseline's own half-range.
    #[arg(long, value_name = "BASELINE")]
    gate: Option<PathBuf>,

    /// The gate's allowed change in percent: PCT for every kind, or KIND=PCT with KIND bw,
    /// rate or lat (repeatable; default 2 for each).
    #[arg(long, value_name = "[KIND=]PCT", requires = "gate", value_parser = tolerance_spec)]
    tolerance: Vec<String>,
}

fn tolerance_spec(s: &str) -> Result<String, String> {
    gate::Tolerances::default().apply(s).map(|()| s.to_string())
}

fn read_json(path: &Path) -> Result<serde_json::Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))
}

/// The gate: prints the comparison; its exit code (0, 1 or 3).
fn gate(args: &Args, baseline: &Path) -> Result<u8> {
    let mut tol = gate::Tolerances::default();
    for spec in &args.tolerance {
        tol.apply(spec).map_err(anyhow::Error::msg)?;
    }
    let run = if args.dir.is_dir() {
        args.dir.join("benchmarks.json")
    } else {
        args.dir.clone()
    };
    let g = gate::compare(&read_json(baseline)?, &read_json(&run)?, &tol)?;
    print!("{}", gate::render(&g, &tol));
    Ok(g.exit_code())
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
    if let Some(baseline) = &args.gate {
        return match gate(&args, baseline) {
            Ok(code) => ExitCode::from(code),
            Err(e) => verbs_lab::cli::exit_code("vl_benchstat", Err(e)),
        };
    }
    verbs_lab::cli::exit_code("vl_benchstat", run(&args))
}
