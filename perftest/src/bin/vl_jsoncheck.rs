//! vl_jsoncheck — checks a `--json` report where no JSON tool is at hand (the SoftRoCE guest is
//! busybox only): the file must be one valid JSON text (RFC 8259, read by serde_json, and no
//! key given twice in one object), a vl_* report with a `results` array whose rows have
//! positive `iterations` and a positive average (`bw_avg_gbit_s` or `t_avg_us`), and — with
//! `--sizes` — exactly those message sizes, in order; with `--plot FILE.svg`, the run's chart
//! must plot exactly the report's numbers (`vl_perftest::report::plot::check_svg`).
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
use serde_json::Value;

/// Reads one JSON text strictly: no key given twice in one object, at any depth
/// ([`verbs_lab::json::from_str_strict`]).
fn parse(text: &str) -> Result<Value, serde_json::Error> {
    verbs_lab::json::from_str_strict(text)
}

/// The report checks: a `results` array whose rows' `bytes` are `sizes` (if given).
fn check_report(doc: &Value, sizes: Option<&[u64]>) -> Result<Vec<u64>, String> {
    for key in ["tool", "version", "run"] {
        doc.get(key)
            .ok_or_else(|| format!("the report has no \"{key}\""))?;
    }
    let Some(rows) = doc.get("results").and_then(Value::as_array) else {
        return Err("the report has no \"results\" array".into());
    };
    let mut got = Vec::new();
    for (i, r) in rows.iter().enumerate() {
        let Some(b) = r.get("bytes").and_then(Value::as_u64) else {
            return Err(format!("results[{i}] has no \"bytes\" count"));
        };
        match r.get("iterations").and_then(Value::as_u64) {
            Some(n) if n > 0 => {}
            _ => {
                return Err(format!(
                    "results[{i}] ({b} bytes) has no positive \"iterations\""
                ))
            }
        }
        // The measurement itself: a bandwidth or a latency row holds a positive average.
        for key in ["bw_avg_gbit_s", "t_avg_us"] {
            match r.get(key) {
                None => {}
                Some(v) if v.as_f64().is_some_and(|x| x > 0.0) => {}
                Some(v) => {
                    return Err(format!(
                        "results[{i}] ({b} bytes): \"{key}\" is {v}, not positive"
                    ))
                }
            }
        }
        got.push(b);
    }
    if let Some(want) = sizes {
        if got != want {
            return Err(format!(
                "the results hold the sizes {got:?}, expected {want:?}"
            ));
        }
    }
    Ok(got)
}

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
    #[arg(long, value_name = "N,N,...", value_delimiter = ',')]
    sizes: Option<Vec<u64>>,

    /// The `--plot` SVG of the same run: its points must be the report's numbers
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
}

fn run(args: &Args) -> Result<String, String> {
    let file = args.file.display();
    let text =
        std::fs::read_to_string(&args.file).map_err(|e| format!("cannot read {file}: {e}"))?;
    let doc = parse(&text).map_err(|e| format!("{file}: invalid JSON: {e}"))?;
    let got = check_report(&doc, args.sizes.as_deref()).map_err(|e| format!("{file}: {e}"))?;
    let mut msg = format!(
        "{file}: valid JSON, {} result row(s), sizes {got:?}",
        got.len()
    );
    if let Some(svg) = &args.plot {
        let text = std::fs::read_to_string(svg)
            .map_err(|e| format!("cannot read {}: {e}", svg.display()))?;
        let checked = vl_perftest::report::plot::check_svg(&text, &doc)
            .map_err(|e| format!("{}: {e}", svg.display()))?;
        msg.push_str(&format!("; {}: {checked}", svg.display()));
    }
    Ok(msg)
}

fn main() -> ExitCode {
    let args: Args = verbs_lab::cli::parse();
    match run(&args) {
        Ok(msg) => {
            println!("ok: {msg}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("vl_jsoncheck: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_report_goldens() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden");
        let mut n = 0;
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "json") {
                let doc = parse(&std::fs::read_to_string(&p).unwrap())
                    .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
                check_report(&doc, None).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
                n += 1;
            }
        }
        assert!(n > 0, "no golden JSON found in {dir}");
    }

    #[test]
    fn accepts_json_and_checks_sizes() {
        let doc = parse(
            r#" {"tool":"vl_write_bw","version":"0.1.0","run":{},"results":[
                {"bytes":2,"iterations":10,"x":-1.5e-3},{"bytes":4,"iterations":10,"s":"\u00e9\ud83d\ude00"}]} "#,
        )
        .unwrap();
        assert_eq!(check_report(&doc, Some(&[2, 4])), Ok(vec![2, 4]));
        assert!(check_report(&doc, Some(&[2, 4, 8]))
            .unwrap_err()
            .contains("expected [2, 4, 8]"));
        let empty =
            parse(r#"{"tool":"t","version":"v","run":{},"results":[{"bytes":2,"iterations":0}]}"#)
                .unwrap();
        assert!(check_report(&empty, None)
            .unwrap_err()
            .contains("iterations"));
        let zero = parse(
            r#"{"tool":"t","version":"v","run":{},"results":[{"bytes":2,"iterations":5,"bw_avg_gbit_s":0.0}]}"#,
        )
        .unwrap();
        assert_eq!(
            check_report(&zero, None).unwrap_err(),
            "results[0] (2 bytes): \"bw_avg_gbit_s\" is 0.0, not positive"
        );
    }
}
