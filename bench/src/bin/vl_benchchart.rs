//! vl_benchchart — draws the charts of `docs/benchmarks.md` from `scripts/bench-vs-perftest`'s
//! JSON report: one SVG per tool (`write_bw.svg`, `read_lat.svg`, ...), ours against perftest
//! per message size, each the median of the rounds with a band from the fastest to the slowest
//! (`vl_perftest::report::plot::comparisons`).
//!
//! ```text
//! vl_benchchart .vm-out/bench-DATE/benchmarks.json .vm-out/bench-DATE/charts
//! ```
//! Exit status 0 when every chart was written, 1 otherwise (the message says why), 2 for a bad
//! command line (`--help` says so too). A report without rows, or one whose family (the chart's
//! file name) is not a plain file name (`../x`, `a/b`, `""`), draws nothing and fails. The report is read strictly
//! ([`verbs_lab::json::from_str_strict`]): a key given twice in one object is refused, and so is
//! a number no chart can show, named by its JSON path (`rows[0].ours_stats.median: -5 is
//! negative`): a size below 1 byte or not whole, a size twice in one family, a negative
//! statistic, one too large for the axis over perftest's median.

#![forbid(unsafe_code)]

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, Result};
use clap::Parser;
use vl_perftest::report::plot::{comparisons, render_comparison_svg};

/// Draws one SVG chart per tool from scripts/bench-vs-perftest's benchmarks.json.
#[derive(Parser)]
#[command(
    name = "vl_benchchart",
    version,
    after_help = "Exit codes:\n  0  every chart written\n  1  the report is unreadable, not strict \
                  JSON (a syntax error, or a key given twice in one object, named with its \
                  object and line) or not bench-vs-perftest's, a number no chart can show (a \
                  size below 1 byte or given twice in a family, a negative statistic, one too \
                  large for the axis; named by its JSON path), or a chart or stdout could not \
                  be written (the message says which)\n  2  bad command line"
)]
struct Args {
    /// The report (benchmarks.json of a bench-vs-perftest run).
    json: PathBuf,
    /// The directory to write FAMILY.svg into (created).
    out_dir: PathBuf,
}

/// A family names its chart's file, FAMILY.svg in OUT_DIR: it must be a plain file name —
/// letters, digits, `_`, `-` and `.`, not starting with `.` — so that no row of the report can
/// write outside OUT_DIR (`../x`), into a subdirectory (`a/b`) or a hidden file (`""` → `.svg`).
/// Such a family is refused, not rewritten: two families must not become one file.
fn plain_name(family: &str) -> Result<()> {
    let plain = family
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if family.is_empty() || family.starts_with('.') || !plain {
        anyhow::bail!(
            "the family {family:?} is not a plain file name (letters, digits, '_', '-' and '.', \
             not first): no chart of it is written"
        );
    }
    Ok(())
}

fn run(args: &Args) -> Result<()> {
    let text = vl_perftest::input::read_text(&args.json).map_err(anyhow::Error::msg)?;
    let doc: serde_json::Value = verbs_lab::json::from_str_strict(&text)
        .map_err(|e| anyhow::anyhow!("{}: not valid JSON: {e}", args.json.display()))?;
    let charts = comparisons(&doc).map_err(anyhow::Error::msg)?;
    if doc["rows"].as_array().is_some_and(Vec::is_empty) {
        anyhow::bail!("{}: no rows: nothing drawn", args.json.display());
    }
    if charts.is_empty() {
        anyhow::bail!(
            "{}: no row has a chart's numbers: nothing drawn",
            args.json.display()
        );
    }
    for c in &charts {
        plain_name(&c.family)?;
    }
    std::fs::create_dir_all(&args.out_dir)
        .with_context(|| format!("creating {}", args.out_dir.display()))?;
    let mut unsaid = None;
    for c in &charts {
        let svg = render_comparison_svg(c).map_err(anyhow::Error::msg)?;
        let path = args.out_dir.join(format!("{}.svg", c.family));
        std::fs::write(&path, svg).with_context(|| format!("writing {}", path.display()))?;
        // The charts are the product: a closed stdout (`| head`) stops none of them, nor does
        // a stdout that fails otherwise (a full disk), which is reported once they are drawn.
        let said = writeln!(
            std::io::stdout(),
            "{}: {} size(s) of ours, {} of perftest",
            path.display(),
            c.ours.len(),
            c.perftest.len()
        );
        if let Err(e) = said.and_then(|()| std::io::stdout().flush()) {
            if e.kind() != std::io::ErrorKind::BrokenPipe {
                unsaid.get_or_insert(e);
            }
        }
    }
    match unsaid {
        Some(e) => Err(anyhow::anyhow!(
            "cannot write to stdout: {e} (the charts were written)"
        )),
        None => Ok(()),
    }
}

fn main() -> ExitCode {
    let args: Args = verbs_lab::cli::parse();
    verbs_lab::cli::exit_code("vl_benchchart", run(&args))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_family_is_a_plain_file_name() {
        for ok in ["write_bw", "read_lat", "send-bw.2"] {
            plain_name(ok).unwrap();
        }
        for bad in [
            "", ".", "..", "../../x", "a/b", ".hidden", "/abs", "a\\b", "x y",
        ] {
            let e = plain_name(bad).unwrap_err().to_string();
            assert_eq!(
                e,
                format!(
                    "the family {bad:?} is not a plain file name (letters, digits, '_', '-' and \
                     '.', not first): no chart of it is written"
                )
            );
        }
    }
}
