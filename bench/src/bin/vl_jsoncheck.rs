//! vl_jsoncheck — checks a `--json` report where no JSON tool is at hand (the SoftRoCE guest is
//! busybox only). The file must be one valid JSON text (RFC 8259, read by serde_json, and no
//! key given twice in one object: [`verbs_lab::json::from_str_strict`]) and one of the reports
//! verbs-lab's tools write, read into the writers' own structs and checked by
//! [`vl_bench::jsoncheck::check_report`] (a vl_* perftest report, `"results"`, or a
//! collective's, `"rows"`; the module says what each must hold).
//!
//! With `--sizes` the rows must hold exactly those message sizes, in order; with
//! `--plot FILE.svg`, the run's chart must plot exactly the report's numbers
//! (`vl_perftest::report::plot::check_svg`). Each refusal names the JSON path
//! (`results[2].bw_avg_mib_s`) and says what is wrong.
//!
//! ```text
//! vl_jsoncheck sweep.json --sizes 2,4,8,16 --plot sweep.svg
//! ```
//! Exit status 0 when every check holds, 1 otherwise (the message says which), 2 for a bad
//! command line (`--help` says so too).

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use vl_bench::jsoncheck::check_report;

/// Check a vl_* `--json` report (and its `--plot` SVG) where no JSON tool is at hand.
#[derive(Parser, Debug)]
#[command(
    name = "vl_jsoncheck",
    version,
    after_help = "Exit codes:\n  0  every check holds\n  1  a check failed: the file is unreadable, \
                  not strict JSON (a syntax error, or a key given twice in one object, named \
                  with its object and line), or not the report expected (the message says \
                  which)\n  2  bad command line"
)]
struct Args {
    /// The `--json` file of a vl_* run
    file: PathBuf,

    /// The message sizes the results must hold, in order (e.g. 2,4,8,16)
    #[arg(long, value_name = "N,N,...", value_delimiter = ',',
          value_parser = verbs_lab::cli::parse_size::<u64>)]
    sizes: Option<Vec<u64>>,

    /// The `--plot` SVG of the same run: its points must be the report's numbers
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
}
fn run(args: &Args) -> Result<String, String> {
    let file = args.file.display();
    let text = vl_perftest::input::read_text(&args.file)?;
    let doc = verbs_lab::json::from_str_strict::<serde_json::Value>(&text)
        .map_err(|e| format!("{file}: invalid JSON: {e}"))?;
    let got = check_report(&doc, args.sizes.as_deref()).map_err(|e| format!("{file}: {e}"))?;
    let mut msg = format!(
        "{file}: valid JSON, {} result row(s), sizes {got:?}",
        got.len()
    );
    if let Some(svg) = &args.plot {
        let text = vl_perftest::input::read_text(svg)?;
        let checked = vl_perftest::report::plot::check_svg(&text, &doc)
            .map_err(|e| format!("{}: {e}", svg.display()))?;
        msg.push_str(&format!("; {}: {checked}", svg.display()));
    }
    Ok(msg)
}

fn main() -> ExitCode {
    let args: Args = verbs_lab::cli::parse();
    verbs_lab::stdout::until_stdout_closes(|| match run(&args) {
        Ok(msg) => {
            verbs_lab::outln!("ok: {msg}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            verbs_lab::eprintln_whole!("vl_jsoncheck: {e}");
            ExitCode::FAILURE
        }
    })
}
