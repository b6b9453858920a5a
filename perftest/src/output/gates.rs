//! Pass/fail thresholds for CI: perftest's `-w/--limit_bw N` and `-y/--limit_msgrate N`, and
//! our `--min-bw N` and `--max-lat KEY=USEC`.
//!
//! A gate checks every row of a sweep, and a missed gate says what was expected and what was
//! measured, at which size. The tool then exits with [`EXIT_GATE_FAILED`] — distinct from 1
//! (the run itself failed) and 2 (bad command line) — so a CI job can tell a slow link from a
//! broken one. (perftest's limits print perftest's own error line first, for scripts that grep it;
//! perftest exits 1 there, we exit 3.)
//!
//! This module says what a gate is and parses it; [`crate::output`], which holds the options,
//! checks them against a result ([`crate::output::check_gates`]).

use std::fmt;
use std::process::ExitCode;
use std::str::FromStr;

use crate::measure::stats::LatStats;

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

/// A `NAME=VALUE` gate (`--max-lat`, `--max-counter`) split at its first `=`; without one, an
/// error that says what was expected (`usage`).
pub fn split_gate<'s>(s: &'s str, usage: &str) -> Result<(&'s str, &'s str), String> {
    s.split_once('=')
        .ok_or_else(|| format!("'{s}' has no '=' ({usage})"))
}

/// Parses `p99=50`, `avg=10`, `p99.9=12.5us`, `max=100usec`.
impl FromStr for LatGate {
    type Err = String;

    fn from_str(s: &str) -> Result<LatGate, String> {
        let usage = "expected KEY=USEC, e.g. p99=50";
        let (key, limit) = split_gate(s, usage)?;
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
    positive_bandwidth(s, "in MiB/s, or Gb/s with --report_gbits")
}

/// The clap value parser of the collectives' `--min-busbw`: a positive finite number (GB/s).
pub fn parse_min_busbw(s: &str) -> Result<f64, String> {
    positive_bandwidth(s, "GB/s of bus bandwidth")
}

/// The one check of a bandwidth floor: a gate of 0, a negative, infinite or NaN floor could
/// never fail, so each is refused, naming `unit`.
fn positive_bandwidth(s: &str, unit: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
        _ => Err(format!("'{s}' is not a positive bandwidth ({unit})")),
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
        ExitCode::from(self.code())
    }

    /// 0, or [`EXIT_GATE_FAILED`].
    pub fn code(&self) -> u8 {
        match self {
            GateOutcome::Passed => 0,
            GateOutcome::Failed(_) => EXIT_GATE_FAILED,
        }
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
        for bad in ["nan", "NaN", "0", "inf", "-1", "x"] {
            let e = parse_min_busbw(bad).unwrap_err();
            assert_eq!(
                e,
                format!("'{bad}' is not a positive bandwidth (GB/s of bus bandwidth)")
            );
        }
        assert_eq!(parse_min_busbw("2.5"), Ok(2.5));
    }
}
