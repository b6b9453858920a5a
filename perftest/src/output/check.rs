//! The gates, checked: refused on a metric the tool does not measure ([`check_applicable`]),
//! then every gate against every row of the result ([`check_gates`]).

use super::OutputArgs;
use crate::measure::result::{Metric, Rows, RunResult};
use crate::output::gates::{GateOutcome, PERFTEST_BW_LIMIT_ERROR, PERFTEST_MSGRATE_LIMIT_ERROR};
use crate::report::BwUnit;

/// The gates of `args` as the user typed them, or `None` without gates.
pub(super) fn gate_summary(args: &OutputArgs) -> Option<String> {
    let mut g: Vec<String> = Vec::new();
    if let Some(w) = args.limit_bw {
        g.push(format!("--limit_bw {w}"));
    }
    if let Some(y) = args.limit_msgrate {
        g.push(format!("--limit_msgrate {y}"));
    }
    if let Some(min) = args.min_bw {
        g.push(format!("--min-bw {min}"));
    }
    g.extend(args.max_lat.iter().map(|l| format!("--max-lat {l}")));
    g.extend(
        args.max_counter
            .iter()
            .map(|c| format!("--max-counter {c}")),
    );
    (!g.is_empty()).then(|| g.join(" "))
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
