//! Pass/fail thresholds for CI: perftest's `-w/--limit_bw N` and `-y/--limit_msgrate N`, and
//! our `--min-bw N` and `--max-lat KEY=USEC`.
//!
//! A gate checks every row of a sweep, and a missed gate says what was expected and what was
//! measured, at which size. The tool then exits with [`EXIT_GATE_FAILED`] — distinct from 1
//! (the run itself failed) and 2 (bad command line) — so a CI job can tell a slow link from a
//! broken one. (perftest's limits print perftest's own error line first, for scripts that grep it;
//! perftest exits 1 there, we exit 3.)

use std::fmt;
use std::process::ExitCode;
use std::str::FromStr;

use crate::output::OutputArgs;
use crate::report::BwUnit;
use crate::result::{Metric, Rows, RunResult};
use crate::stats::LatStats;

/// The exit code of a run that completed but missed a gate.
pub const EXIT_GATE_FAILED: u8 = 3;

/// The latency keys `--max-lat` accepts (aliases of [`LatStats::by_name`] included).
pub const LAT_KEYS: &[&str] = &[
    "min", "max", "avg", "mean", "median", "typical", "p50", "p99", "p99.9", "p999", "p99.99",
    "p9999",
];

/// One `--max-lat KEY=USEC` gate: the statistic `key` of every latency row must be at most
/// `limit_us` microseconds.
#[derive(Debug, Clone, PartialEq)]
pub struct LatGate {
    /// A key [`LatStats::by_name`] knows: `min`, `max`, `avg`, `median`/`p50`/`typical`, `p99`,
    /// `p99.9`, `p99.99`.
    pub key: String,
    pub limit_us: f64,
}

/// Parses `p99=50`, `avg=10`, `p99.9=12.5us`, `max=100usec`.
impl FromStr for LatGate {
    type Err = String;

    fn from_str(s: &str) -> Result<LatGate, String> {
        let usage = "expected KEY=USEC, e.g. p99=50";
        let (key, limit) = s
            .split_once('=')
            .ok_or_else(|| format!("'{s}' has no '=' ({usage})"))?;
        let key = key.trim().to_ascii_lowercase();
        if !LAT_KEYS.contains(&key.as_str()) {
            return Err(format!(
                "unknown latency statistic '{key}' (one of: {})",
                LAT_KEYS.join(", ")
            ));
        }
        let number = limit.trim();
        let number = number
            .strip_suffix("usec")
            .or_else(|| number.strip_suffix("us"))
            .unwrap_or(number)
            .trim();
        let limit_us: f64 = number
            .parse()
            .map_err(|_| format!("'{limit}' is not a number of microseconds ({usage})"))?;
        if !limit_us.is_finite() || limit_us <= 0.0 {
            return Err(format!(
                "the limit must be a positive number of microseconds, not '{limit}'"
            ));
        }
        Ok(LatGate { key, limit_us })
    }
}

impl fmt::Display for LatGate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.key, self.limit_us)
    }
}

impl LatGate {
    /// The measured value of this gate's statistic.
    pub fn measure(&self, stats: &LatStats) -> Option<f64> {
        stats.by_name(&self.key)
    }
}

/// The clap value parser of `--min-bw`: a positive finite number.
pub fn parse_min_bw(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
        _ => Err(format!(
            "'{s}' is not a positive bandwidth (in MiB/s, or Gb/s with --report_gbits)"
        )),
    }
}

/// The clap value parser of `-w/--limit_bw` and `-y/--limit_msgrate`: a finite number, not
/// negative (perftest refuses negative limits too).
pub fn parse_limit(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && x >= 0.0 => Ok(x),
        _ => Err(format!("'{s}' is not a limit (a number, 0 or more)")),
    }
}

/// perftest's message when `-w/--limit_bw` is missed (its exact words, for scripts that grep).
pub const PERFTEST_BW_LIMIT_ERROR: &str = "Error: BW result is below bw limit";
/// perftest's message when `-y/--limit_msgrate` is missed (two spaces, as perftest prints it).
pub const PERFTEST_MSGRATE_LIMIT_ERROR: &str = "Error: Msg rate  is below msg_rate limit";

/// Whether the gates were met.
#[derive(Debug, Clone, PartialEq)]
pub enum GateOutcome {
    /// Every gate held on every row (or there were no gates).
    Passed,
    /// One message per miss: `gate failed: p99 latency 812.40 usec at 2 bytes > limit 50.00 usec`.
    Failed(Vec<String>),
}

impl GateOutcome {
    pub fn passed(&self) -> bool {
        matches!(self, GateOutcome::Passed)
    }

    /// `ExitCode::SUCCESS`, or [`EXIT_GATE_FAILED`].
    pub fn exit_code(&self) -> ExitCode {
        match self {
            GateOutcome::Passed => ExitCode::SUCCESS,
            GateOutcome::Failed(_) => ExitCode::from(EXIT_GATE_FAILED),
        }
    }
}

/// Refuses a gate on a metric this tool does not measure (`--min-bw` on a latency tool,
/// `--max-lat` on a bandwidth tool). Call it before the run, so a wrong flag costs no time;
/// [`Reporter::finish`](crate::output::Reporter::finish) calls it again.
pub fn check_applicable(args: &OutputArgs, metric: Metric) -> Result<(), String> {
    match metric {
        Metric::Lat if args.min_bw.is_some() => Err(
            "--min-bw gates bandwidth, but this tool measures latency (use --max-lat KEY=USEC)"
                .into(),
        ),
        Metric::Lat if args.limit_bw.is_some() || args.limit_msgrate.is_some() => Err(
            "-w/--limit_bw and -y/--limit_msgrate gate bandwidth, but this tool measures latency \
             (use --max-lat KEY=USEC)"
                .into(),
        ),
        Metric::Bw if !args.max_lat.is_empty() => {
            Err("--max-lat gates latency, but this tool measures bandwidth (use --min-bw N)".into())
        }
        _ => Ok(()),
    }
}

/// Checks every gate of `args` against every row of `result`. A gate with no row to check, or
/// on a metric the result does not hold, fails too: a gate must never pass by not looking.
pub fn check_gates(result: &RunResult, args: &OutputArgs) -> GateOutcome {
    let mut failures = Vec::new();
    if let Err(e) = check_applicable(args, metric_of(&result.rows)) {
        failures.push(format!("gate failed: {e}"));
    }
    match &result.rows {
        Rows::Bw(rows) => {
            let unit = BwUnit::new(args.report_gbits);
            if let Some(limit) = args.limit_bw {
                let below: Vec<String> = rows
                    .iter()
                    .filter(|r| below(unit.convert(r.avg_bps), limit))
                    .map(|r| {
                        format!(
                            "gate failed: -w/--limit_bw {limit} {u}: BW average {} {u} at {} bytes",
                            show(unit.convert(r.avg_bps), unit),
                            r.bytes,
                            u = unit.label()
                        )
                    })
                    .collect();
                if rows.is_empty() || !below.is_empty() {
                    failures.push(PERFTEST_BW_LIMIT_ERROR.to_string());
                    failures.extend(below);
                }
            }
            if let Some(limit) = args.limit_msgrate {
                let below: Vec<String> = rows
                    .iter()
                    .filter(|r| below(r.msg_rate_mpps, limit))
                    .map(|r| {
                        format!(
                            "gate failed: -y/--limit_msgrate {limit} Mpps: MsgRate {:.6} Mpps at {} bytes",
                            r.msg_rate_mpps, r.bytes
                        )
                    })
                    .collect();
                if rows.is_empty() || !below.is_empty() {
                    failures.push(PERFTEST_MSGRATE_LIMIT_ERROR.to_string());
                    failures.extend(below);
                }
            }
            if let Some(min) = args.min_bw {
                let u = unit.label();
                if rows.is_empty() {
                    failures.push(format!(
                        "gate failed: --min-bw {min} {u}, but no bandwidth was measured"
                    ));
                }
                for r in rows {
                    let avg = unit.convert(r.avg_bps);
                    if !(avg.is_finite() && avg >= min) {
                        failures.push(format!(
                            "gate failed: average BW {} {u} at {} bytes < minimum {min:.2} {u}",
                            show(avg, unit),
                            r.bytes
                        ));
                    }
                }
            }
        }
        Rows::Lat(rows) => {
            for g in &args.max_lat {
                if rows.is_empty() {
                    failures.push(format!(
                        "gate failed: --max-lat {g}, but no latency was measured"
                    ));
                }
                for r in rows {
                    let measured = g.measure(&r.stats).unwrap_or(f64::NAN);
                    if !(measured.is_finite() && measured <= g.limit_us) {
                        failures.push(format!(
                            "gate failed: {} latency {measured:.2} usec at {} bytes > limit {:.2} usec",
                            g.key, r.bytes, g.limit_us
                        ));
                    }
                }
            }
        }
    }
    if failures.is_empty() {
        GateOutcome::Passed
    } else {
        GateOutcome::Failed(failures)
    }
}

/// perftest's test `limit > measured`, made strict about NaN: a value that is not a number
/// never passes.
fn below(measured: f64, limit: f64) -> bool {
    measured.is_nan() || measured < limit
}

fn metric_of(rows: &Rows) -> Metric {
    match rows {
        Rows::Bw(_) => Metric::Bw,
        Rows::Lat(_) => Metric::Lat,
    }
}

/// Bandwidth with enough decimals that a slow Gb/s value does not print as 0.00.
fn show(x: f64, unit: BwUnit) -> String {
    if unit == BwUnit::Gbps && x.abs() < 0.1 {
        format!("{x:.6}")
    } else {
        format!("{x:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_gate_specs() {
        let g: LatGate = "p99=50".parse().unwrap();
        assert_eq!((g.key.as_str(), g.limit_us), ("p99", 50.0));
        let g: LatGate = " P99.9 = 12.5us".parse().unwrap();
        assert_eq!((g.key.as_str(), g.limit_us), ("p99.9", 12.5));
        let g: LatGate = "max=100usec".parse().unwrap();
        assert_eq!(g.limit_us, 100.0);
        // Every advertised key is one LatStats knows.
        let st = LatStats {
            samples: 1,
            min_us: 1.0,
            max_us: 1.0,
            median_us: 1.0,
            avg_us: 1.0,
            stdev_us: 0.0,
            p99_us: 1.0,
            p999_us: 1.0,
            p9999_us: 1.0,
        };
        for k in LAT_KEYS {
            assert!(st.by_name(k).is_some(), "{k}");
        }
    }

    #[test]
    fn refuses_bad_gate_specs() {
        let err = |s: &str| s.parse::<LatGate>().expect_err(s);
        assert!(err("p99").contains("no '='"));
        assert!(err("p98=5").contains("unknown latency statistic 'p98'"));
        assert!(err("p99=fast").contains("not a number"));
        assert!(err("p99=-1").contains("positive"));
        assert!(err("p99=0").contains("positive"));
        assert!(err("p99=inf").contains("positive"));
        assert!(err("p99=NaN").contains("positive"));
        assert!(parse_min_bw("0").is_err());
        assert!(parse_min_bw("x").is_err());
        assert_eq!(parse_min_bw("1000.5"), Ok(1000.5));
    }
}
