//! The regression gate: a run's `benchmarks.json` against a baseline's, row by row, on our
//! tool's median of each row's metric (`vl_benchstat --gate BASELINE RUN`).
//!
//! A row regresses when its median is worse than the baseline's by more than the allowed
//! change: the tolerance of its kind (bandwidth, message rate, latency) or the baseline's own
//! half-range (half of (max − min) ÷ median over its rounds), whichever is larger — a row that
//! moved within its own noise has not regressed. Only runs of one clock are compared: a
//! deterministic run (QEMU's instruction counting) against a wall-clock baseline says nothing.

use std::fmt::Write as _;

use anyhow::{bail, Context as _, Result};
use serde_json::Value;

use super::Kind;

/// Allowed change in percent per kind of row.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tolerances {
    pub bw: f64,
    pub rate: f64,
    pub lat: f64,
}

impl Default for Tolerances {
    /// 2 % on every kind: above the deterministic mode's spread of most rows (±0.2 %), below
    /// any change worth a commit message.
    fn default() -> Self {
        Tolerances {
            bw: 2.0,
            rate: 2.0,
            lat: 2.0,
        }
    }
}

impl Tolerances {
    /// Applies one `--tolerance` value: `PCT` (every kind) or `KIND=PCT` with KIND `bw`, `rate`
    /// or `lat`; PCT a number of percent from 0 to 100.
    pub fn apply(&mut self, spec: &str) -> Result<(), String> {
        let (kind, pct) = match spec.split_once('=') {
            Some((k, p)) => (Some(k), p),
            None => (None, spec),
        };
        let pct: f64 = pct
            .parse()
            .ok()
            .filter(|p: &f64| (0.0..=100.0).contains(p))
            .ok_or_else(|| {
                format!("'{spec}': the tolerance is a percentage from 0 to 100, e.g. 2 or lat=5")
            })?;
        match kind {
            None => {
                *self = Tolerances {
                    bw: pct,
                    rate: pct,
                    lat: pct,
                }
            }
            Some("bw") => self.bw = pct,
            Some("rate") => self.rate = pct,
            Some("lat") => self.lat = pct,
            Some(k) => return Err(format!("'{spec}': no kind '{k}' (bw, rate or lat)")),
        }
        Ok(())
    }

    fn of(&self, kind: Kind) -> f64 {
        match kind {
            Kind::Bw => self.bw,
            Kind::Rate => self.rate,
            Kind::Lat => self.lat,
        }
    }
}

/// What the gate says of one row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Within the allowed change (or better).
    Holds,
    /// Worse than the baseline by more than allowed.
    Regressed,
    /// In the baseline, but the run has no valid median for it (or, in a full run, no row).
    Missing,
    /// In the baseline, not in a partial run (`--only`): not asked for.
    NotRun,
    /// In the run only: nothing to compare with.
    New,
}

/// One row of the comparison.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub name: String,
    pub unit: String,
    pub base: Option<f64>,
    pub now: Option<f64>,
    /// Signed change in percent, positive = better (higher bandwidth, lower latency).
    pub change_pct: Option<f64>,
    pub allowed_pct: f64,
    pub verdict: Verdict,
}

/// The whole comparison.
#[derive(Debug, Clone, PartialEq)]
pub struct Gate {
    pub clock: &'static str,
    pub rows: Vec<Row>,
    /// What differs between the two environments that changes instruction counts: QEMU, the
    /// guest kernel, perftest (not the host CPU: TCG's `-cpu max` is the same on every host);
    /// `(key, baseline, run)`.
    pub differs: Vec<(String, String, String)>,
}

impl Gate {
    /// 3 when a row regressed, 1 when a baseline row is missing from the run, else 0.
    pub fn exit_code(&self) -> u8 {
        if self.rows.iter().any(|r| r.verdict == Verdict::Regressed) {
            3
        } else if self.rows.iter().any(|r| r.verdict == Verdict::Missing) {
            1
        } else {
            0
        }
    }
}

/// Which clock timed a report: `deterministic` when its guest ran under instruction counting.
fn clock(doc: &Value) -> &'static str {
    let acc = doc["environment"]["accelerator"].as_str().unwrap_or("");
    if acc.contains("instruction counting") {
        "deterministic"
    } else {
        "wall"
    }
}

fn rows(doc: &Value, which: &str) -> Result<Vec<Value>> {
    match doc["rows"].as_array() {
        Some(r) => Ok(r.clone()),
        None => bail!("the {which} has no \"rows\" array: is it a benchmarks.json of scripts/bench-vs-perftest?"),
    }
}

/// A row's median of our side, and its half-range in percent (0 when unknown).
fn ours(row: &Value) -> (Option<f64>, f64) {
    let st = &row["ours_stats"];
    let med = st["median"].as_f64().filter(|m| m.is_finite() && *m > 0.0);
    let half = match (med, st["min"].as_f64(), st["max"].as_f64()) {
        (Some(m), Some(lo), Some(hi)) => (hi - lo) / m * 50.0,
        _ => 0.0,
    };
    (med, half)
}

/// Compares `run` with `base` (both parsed benchmarks.json documents).
pub fn compare(base: &Value, run: &Value, tol: &Tolerances) -> Result<Gate> {
    let (bc, rc) = (clock(base), clock(run));
    if bc != rc {
        bail!(
            "the baseline was timed by the {bc} clock and the run by the {rc} clock: compare \
             runs of one mode (scripts/bench-vs-perftest --deterministic makes both \
             deterministic)"
        );
    }
    let (brows, rrows) = (rows(base, "baseline")?, rows(run, "run")?);
    let partial = matches!(run["mode"].as_str(), Some("partial" | "quick"));
    let name = |r: &Value| r["name"].as_str().unwrap_or("?").to_string();
    let mut out = Vec::new();
    for b in &brows {
        let kind = b["kind"]
            .as_str()
            .and_then(Kind::parse)
            .with_context(|| format!("baseline row {}: no kind bw, rate or lat", name(b)))?;
        let (base_med, base_half) = ours(b);
        let found = rrows.iter().find(|r| name(r) == name(b));
        let now = found.and_then(|r| ours(r).0);
        let allowed = tol.of(kind).max(base_half);
        let change = base_med.zip(now).map(|(b, n)| match kind {
            Kind::Lat => (b - n) / b * 100.0,
            Kind::Bw | Kind::Rate => (n - b) / b * 100.0,
        });
        let verdict = match change {
            None if found.is_none() && partial => Verdict::NotRun,
            None => Verdict::Missing,
            Some(c) if c < -allowed => Verdict::Regressed,
            Some(_) => Verdict::Holds,
        };
        out.push(Row {
            name: name(b),
            unit: b["unit"].as_str().unwrap_or("").to_string(),
            base: base_med,
            now,
            change_pct: change,
            allowed_pct: allowed,
            verdict,
        });
    }
    for r in &rrows {
        if !brows.iter().any(|b| name(b) == name(r)) {
            out.push(Row {
                name: name(r),
                unit: r["unit"].as_str().unwrap_or("").to_string(),
                base: None,
                now: ours(r).0,
                change_pct: None,
                allowed_pct: 0.0,
                verdict: Verdict::New,
            });
        }
    }
    let differs = ["qemu", "guest_kernel", "perftest_version"]
        .iter()
        .filter_map(|k| {
            let (b, r) = (&base["environment"][k], &run["environment"][k]);
            (b != r).then(|| (k.to_string(), b.to_string(), r.to_string()))
        })
        .collect();
    Ok(Gate {
        clock: bc,
        rows: out,
        differs,
    })
}

/// The comparison as a text table and a closing line.
pub fn render(g: &Gate, tol: &Tolerances) -> String {
    let mut s = format!(
        "regression gate ({} clock): our median of each row against the baseline's; a row \
         regresses when it is worse by more than its tolerance (bw {}%, rate {}%, lat {}%) or \
         the baseline's own half-range, whichever is larger\n\n",
        g.clock, tol.bw, tol.rate, tol.lat
    );
    for (k, b, r) in &g.differs {
        let _ = writeln!(
            s,
            "note: {k} differs (baseline {b}, run {r}): instruction counts, and so \
             deterministic numbers, may move with it; keep one baseline per runner"
        );
    }
    if !g.differs.is_empty() {
        s.push('\n');
    }
    let _ = writeln!(
        s,
        "{:<18} {:>14} {:>14} {:>9} {:>8}  verdict",
        "row", "baseline", "now", "change", "allowed"
    );
    let num = |x: Option<f64>| x.map_or("-".into(), |x| format!("{x:.6}"));
    for r in &g.rows {
        let verdict = match r.verdict {
            Verdict::Holds => "holds",
            Verdict::Regressed => "REGRESSED",
            Verdict::Missing => "MISSING from the run",
            Verdict::NotRun => "not run (partial run)",
            Verdict::New => "new (no baseline)",
        };
        let _ = writeln!(
            s,
            "{:<18} {:>14} {:>14} {:>9} {:>8}  {verdict}",
            r.name,
            num(r.base),
            num(r.now),
            r.change_pct.map_or("-".into(), |c| format!("{c:+.2}%")),
            if matches!(r.verdict, Verdict::New | Verdict::NotRun) {
                "-".into()
            } else {
                format!("{:.2}%", r.allowed_pct)
            },
        );
    }
    let count = |v| g.rows.iter().filter(|r| r.verdict == v).count();
    let _ = writeln!(
        s,
        "\n{} rows hold, {} regressed, {} missing, {} not run, {} new (change: + is better, in \
         the row's unit)",
        count(Verdict::Holds),
        count(Verdict::Regressed),
        count(Verdict::Missing),
        count(Verdict::NotRun),
        count(Verdict::New)
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn doc(acc: &str, rows: &[(&str, &str, f64, f64, f64)]) -> Value {
        let rows: Vec<Value> = rows
            .iter()
            .map(|(name, kind, med, min, max)| {
                json!({"name": name, "kind": kind, "unit": "MiB/s",
                       "ours_stats": {"valid": 5, "median": med, "min": min, "max": max}})
            })
            .collect();
        json!({"environment": {"accelerator": acc}, "rows": rows})
    }
    const DET: &str = "TCG with instruction counting, deterministic time, 1 vCPU";

    #[test]
    fn a_drop_beyond_the_tolerance_regresses_and_within_it_holds() {
        let base = doc(
            DET,
            &[
                ("write_bw", "bw", 100.0, 99.9, 100.1),
                ("write_lat", "lat", 10.0, 10.0, 10.0),
            ],
        );
        let run = doc(
            DET,
            &[
                ("write_bw", "bw", 97.0, 97.0, 97.0),
                ("write_lat", "lat", 10.1, 10.1, 10.1),
            ],
        );
        let g = compare(&base, &run, &Tolerances::default()).unwrap();
        assert_eq!(g.rows[0].verdict, Verdict::Regressed);
        assert!((g.rows[0].change_pct.unwrap() + 3.0).abs() < 1e-9);
        assert_eq!(g.rows[1].verdict, Verdict::Holds); // 1 % slower latency: within 2 %
        assert!((g.rows[1].change_pct.unwrap() + 1.0).abs() < 1e-9);
        assert_eq!(g.exit_code(), 3);
        let mut t = Tolerances::default();
        t.apply("bw=5").unwrap();
        assert_eq!(compare(&base, &run, &t).unwrap().exit_code(), 0);
    }

    #[test]
    fn a_noisy_baseline_widens_its_own_allowance() {
        // The baseline spread 90..110 around 100: ±10 %, so a 5 % drop is noise.
        let base = doc(DET, &[("read_bw_2", "rate", 100.0, 90.0, 110.0)]);
        let run = doc(DET, &[("read_bw_2", "rate", 95.0, 95.0, 95.0)]);
        let g = compare(&base, &run, &Tolerances::default()).unwrap();
        assert_eq!(g.rows[0].verdict, Verdict::Holds);
        assert!((g.rows[0].allowed_pct - 10.0).abs() < 1e-9);
    }

    #[test]
    fn lower_latency_and_higher_bandwidth_are_improvements() {
        let base = doc(
            DET,
            &[
                ("a", "bw", 100.0, 100.0, 100.0),
                ("b", "lat", 10.0, 10.0, 10.0),
            ],
        );
        let run = doc(
            DET,
            &[
                ("a", "bw", 150.0, 150.0, 150.0),
                ("b", "lat", 5.0, 5.0, 5.0),
            ],
        );
        let g = compare(&base, &run, &Tolerances::default()).unwrap();
        assert!(g
            .rows
            .iter()
            .all(|r| r.verdict == Verdict::Holds && r.change_pct.unwrap() >= 50.0));
        assert_eq!(g.exit_code(), 0);
    }

    #[test]
    fn missing_and_new_rows_are_named() {
        let base = doc(DET, &[("a", "bw", 100.0, 100.0, 100.0)]);
        let run = doc(DET, &[("b", "bw", 100.0, 100.0, 100.0)]);
        let g = compare(&base, &run, &Tolerances::default()).unwrap();
        assert_eq!(g.rows[0].verdict, Verdict::Missing);
        assert_eq!(g.rows[1].verdict, Verdict::New);
        assert_eq!(g.exit_code(), 1);
        let text = render(&g, &Tolerances::default());
        assert!(text.contains("MISSING from the run"), "{text}");
        assert!(
            text.contains("0 rows hold, 0 regressed, 1 missing, 0 not run, 1 new"),
            "{text}"
        );
        // A partial run did not ask for the row: not a failure.
        let mut partial = run.clone();
        partial["mode"] = json!("partial");
        let g = compare(&base, &partial, &Tolerances::default()).unwrap();
        assert_eq!(g.rows[0].verdict, Verdict::NotRun);
        assert_eq!(g.exit_code(), 0);
    }

    #[test]
    fn runs_of_different_clocks_are_refused() {
        let base = doc(DET, &[]);
        let run = doc("TCG, software emulation (no /dev/kvm)", &[]);
        let e = compare(&base, &run, &Tolerances::default())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("deterministic clock and the run by the wall clock"),
            "{e}"
        );
        assert!(compare(&json!({}), &json!({}), &Tolerances::default()).is_err());
    }

    #[test]
    fn tolerance_specs() {
        let mut t = Tolerances::default();
        t.apply("5").unwrap();
        assert_eq!(
            t,
            Tolerances {
                bw: 5.0,
                rate: 5.0,
                lat: 5.0
            }
        );
        t.apply("lat=1.5").unwrap();
        assert_eq!(t.lat, 1.5);
        assert!(t.apply("x=1").unwrap_err().contains("no kind 'x'"));
        assert!(t
            .apply("bw=-1")
            .unwrap_err()
            .contains("percentage from 0 to 100"));
        assert!(t.apply("lots").is_err());
    }
}
