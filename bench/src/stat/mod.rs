//! The statistics of `scripts/bench-vs-perftest` (`vl_benchstat`): from the records the guest
//! wrote (`tests.tsv`, one line per row; `runs.tsv`, one line per run; `env.txt`, `host.env`,
//! `console.env`, `key=value`), per row the median with min-max of each side's valid runs, the
//! ratio ours/perftest of every round in which both runs were valid, their median (the
//! verdict) and the ratio of the medians; written as `benchmarks.json` (serde, [`Report`]),
//! the generated part of `docs/benchmarks.md` and a console summary ([`markdown`]).
//! [`coll`] does the same for `scripts/bench-coll-vs-mpi`.
//!
//! [`median`] is the one median of the benchmark scripts.

use std::collections::HashMap;
use std::path::Path;

use anyhow::{bail, Context as _, Result};

pub mod coll;
pub mod gate;
mod json;
pub mod markdown;

pub use json::Report;

/// The median of the finite values of `values` (NaN and infinities are not measurements),
/// the mean of the middle two for an even count; `None` when none is finite.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// The median of some runs and their range.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    /// How many finite values there were.
    pub n: usize,
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    /// The spread of the finite values of `values`; `None` when none is finite.
    pub fn of(values: &[f64]) -> Option<Spread> {
        let finite: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        Some(Spread {
            n: finite.len(),
            median: median(&finite)?,
            min: finite.iter().copied().fold(f64::INFINITY, f64::min),
            max: finite.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        })
    }

    /// The run-to-run spread: (max − min) ÷ median, in percent (0 for one value; `None` for a
    /// median of 0, where a relative spread means nothing).
    pub fn spread_pct(&self) -> Option<f64> {
        (self.median != 0.0).then(|| (self.max - self.min) / self.median.abs() * 100.0)
    }
}

/// A number as the guest printed it: digits with an optional fraction and exponent (never
/// `inf`, `nan` or `-`, which perftest prints when its clock calibration fails).
pub fn num(s: &str) -> Option<f64> {
    let plain = !s.is_empty()
        && s.bytes().any(|b| b.is_ascii_digit())
        && s.bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'-' | b'+' | b'e' | b'E'));
    plain.then(|| s.parse::<f64>().ok()).flatten()
}

/// The largest metric taken as measured: 1e12 of its unit (MiB/s, Mpps or usec), far above
/// any link or wait, far below what a garbled row or an overflow prints.
const METRIC_MAX: f64 = 1e12;

/// Why `s`, as the primary metric of a `kind` row, is no measurement; `None` when it is a
/// positive finite number no larger than [`METRIC_MAX`]. Zero is no measurement either:
/// perftest prints 0.00 when its clock calibration fails, and a ratio needs both sides
/// positive.
fn metric_problem(kind: Kind, s: &str) -> Option<String> {
    let m = kind.metric();
    let Some(x) = num(s) else {
        return Some(format!("the metric {m} {s:?} is not a number"));
    };
    let why = if !x.is_finite() {
        "is not a finite number".to_string()
    } else if x < 0.0 {
        "is negative".to_string()
    } else if x == 0.0 {
        "is zero, not a measurement".to_string()
    } else if x > METRIC_MAX {
        format!("is above {METRIC_MAX:e} {}, not a measurement", kind.unit())
    } else {
        return None;
    };
    Some(format!("the metric {m} {s} {why}"))
}

/// What a row compares: BW average (MiB/s), MsgRate (Mpps; the atomics and the small sizes,
/// whose two-decimal MiB/s would make a ratio of rounding steps) or t_typical (usec).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Bw,
    Rate,
    Lat,
}

impl Kind {
    fn parse(s: &str) -> Option<Kind> {
        Some(match s {
            "bw" => Kind::Bw,
            "rate" => Kind::Rate,
            "lat" => Kind::Lat,
            _ => return None,
        })
    }
    pub fn name(self) -> &'static str {
        match self {
            Kind::Bw => "bw",
            Kind::Rate => "rate",
            Kind::Lat => "lat",
        }
    }
    /// The column of the result row (1-based: `c1`..`c9` of `runs.tsv`) the verdict is on.
    pub fn column(self) -> usize {
        match self {
            Kind::Bw => 4,
            Kind::Rate | Kind::Lat => 5,
        }
    }
    pub fn metric(self) -> &'static str {
        match self {
            Kind::Bw => "bw_average",
            Kind::Rate => "msg_rate",
            Kind::Lat => "t_typical",
        }
    }
    pub fn unit(self) -> &'static str {
        match self {
            Kind::Bw => "MiB/s",
            Kind::Rate => "Mpps",
            Kind::Lat => "usec",
        }
    }
    pub fn better(self) -> &'static str {
        match self {
            Kind::Lat => "lower",
            _ => "higher",
        }
    }
    /// Whether a ratio ours/perftest meets the goal: ≥ 1 for throughput, ≤ 1 for latency.
    pub fn meets(self, ratio: f64) -> bool {
        match self {
            Kind::Lat => ratio <= 1.0,
            _ => ratio >= 1.0,
        }
    }
}

/// A line of `tests.tsv`: a row of the benchmark.
#[derive(Debug, Clone)]
pub struct Test {
    pub name: String,
    pub kind: Kind,
    pub ours: String,
    pub perftest: String,
    pub params: String,
    /// The server's and the client's command, `TOOL ... -p PORT ...`.
    pub server_cmd: String,
    pub client_cmd: String,
}

impl Test {
    /// The row's message size: its `-s`, or 8 (atomics).
    pub fn bytes(&self) -> u64 {
        let words: Vec<&str> = self.params.split_whitespace().collect();
        words
            .windows(2)
            .find(|w| w[0] == "-s")
            .and_then(|w| w[1].parse().ok())
            .unwrap_or(8)
    }
    /// The row's tool family: its name without a trailing `_BYTES`.
    pub fn family(&self) -> &str {
        match self.name.rsplit_once('_') {
            Some((f, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => f,
            _ => &self.name,
        }
    }
}

/// `TEMPLATE` with its `TOOL` replaced by `tool` and, when given, `PORT` by `port`.
pub fn command(template: &str, tool: &str, port: Option<&str>) -> String {
    let s = match template.strip_prefix("TOOL") {
        Some(rest) => format!("{tool}{rest}"),
        None => template.to_string(),
    };
    match port {
        Some(p) => s.replacen(" -p PORT ", &format!(" -p {p} "), 1),
        None => s,
    }
}

/// A line of `runs.tsv`: one run of one side.
#[derive(Debug, Clone)]
pub struct Run {
    pub seq: String,
    pub test: String,
    pub round: u32,
    /// 1 when this side ran first in its round.
    pub slot: String,
    pub ours: bool,
    pub tool: String,
    pub port: String,
    pub server_rc: String,
    pub client_rc: String,
    pub secs: String,
    pub ok: bool,
    pub reason: String,
    /// `c1`..`c9` (the result row's columns), then the cost: client RSS KiB, client CPU s,
    /// server RSS KiB, server CPU s (`-` when absent).
    pub cols: [String; 13],
    pub calibration: String,
    pub client_settings: String,
    pub server_settings: String,
    pub raw: String,
}

impl Run {
    /// Column `col` (1-based, as [`Run::cols`]) when it is a number.
    pub fn value(&self, col: usize) -> Option<f64> {
        num(&self.cols[col - 1])
    }
    pub fn side(&self) -> &'static str {
        if self.ours {
            "ours"
        } else {
            "perftest"
        }
    }
}

/// Cost columns of [`Run::cols`]: client RSS, client CPU, server RSS, server CPU.
pub const COST_COLUMNS: [usize; 4] = [10, 11, 12, 13];

/// Everything the guest and the host recorded about one benchmark.
#[derive(Debug, Clone)]
pub struct Records {
    pub env: HashMap<String, String>,
    pub tests: Vec<Test>,
    pub runs: Vec<Run>,
}

impl Records {
    /// Reads `dir`'s `tests.tsv`, `runs.tsv` and `env.txt`, `host.env` (both required) and
    /// `console.env` (if there).
    pub fn read(dir: &Path) -> Result<Records> {
        let read = |name: &str| {
            let p = dir.join(name);
            vl_perftest::input::read_text(&p).map_err(anyhow::Error::msg)
        };
        let mut env = HashMap::new();
        for name in ["env.txt", "host.env", "console.env"] {
            if name == "console.env" && !dir.join(name).exists() {
                continue; // no console log to read the cargo build's time from
            }
            for line in read(name)?.lines() {
                let (k, v) = line.split_once('=').unwrap_or((line, ""));
                env.insert(k.to_string(), v.to_string());
            }
        }
        let tests: Vec<Test> = read("tests.tsv")?
            .lines()
            .enumerate()
            .map(|(i, line)| parse_test(line).with_context(|| format!("tests.tsv line {}", i + 1)))
            .collect::<Result<_>>()?;
        let runs = read("runs.tsv")?
            .lines()
            .skip(1)
            .filter_map(parse_run)
            .map(|run| check_metric(&tests, run))
            .collect();
        Ok(Records { env, tests, runs })
    }

    /// `env[key]`, or "" when not recorded.
    pub fn env(&self, key: &str) -> &str {
        self.env.get(key).map_or("", String::as_str)
    }

    /// `env[key]` as a whole number (0 when absent or not one, as awk's `%d` reads it).
    pub fn env_int(&self, key: &str) -> i64 {
        num(self.env(key)).map_or(0, |x| x as i64)
    }

    /// The runs of row `test`.
    pub fn runs_of<'a>(&'a self, test: &'a str) -> impl Iterator<Item = &'a Run> + 'a {
        self.runs.iter().filter(move |r| r.test == test)
    }

    /// The spread of column `col` over the valid runs of row `test` by one side.
    pub fn spread(&self, test: &str, ours: bool, col: usize) -> Option<Spread> {
        let v: Vec<f64> = self
            .runs_of(test)
            .filter(|r| r.ours == ours && r.ok)
            .filter_map(|r| r.value(col))
            .collect();
        Spread::of(&v)
    }

    /// The number of the last round run.
    pub fn rounds(&self) -> u32 {
        self.runs.iter().map(|r| r.round).max().unwrap_or(0)
    }

    /// The settings ("k=v ...") the first run of row `test` by one side printed, for the client
    /// (`client`) or the server; "-" when none printed any.
    pub fn first_settings<'a>(&'a self, test: &'a str, ours: bool, client: bool) -> &'a str {
        self.runs_of(test)
            .filter(|r| r.ours == ours)
            .map(|r| {
                if client {
                    r.client_settings.as_str()
                } else {
                    r.server_settings.as_str()
                }
            })
            .find(|s| !s.is_empty() && *s != "-")
            .unwrap_or("-")
    }
}

fn parse_test(line: &str) -> Result<Test> {
    let f: Vec<&str> = line.split('\t').collect();
    if f.len() < 8 {
        bail!("{} fields, expected 8: {line:?}", f.len());
    }
    Ok(Test {
        name: f[0].into(),
        kind: Kind::parse(f[1]).with_context(|| format!("unknown kind {:?}", f[1]))?,
        ours: f[3].into(),
        perftest: f[4].into(),
        params: f[5].into(),
        server_cmd: f[6].into(),
        client_cmd: f[7].into(),
    })
}

/// A line of `runs.tsv`, or `None` for a line cut short (a guest killed mid-write).
fn parse_run(line: &str) -> Option<Run> {
    let f: Vec<&str> = line.split('\t').collect();
    if f.len() < 25 {
        return None;
    }
    let col = |i: usize| f.get(i).map_or("-", |s| s).to_string();
    Some(Run {
        seq: f[0].into(),
        test: f[1].into(),
        round: f[2].parse().unwrap_or(0),
        slot: f[3].into(),
        ours: f[4] == "ours",
        tool: f[5].into(),
        port: f[6].into(),
        server_rc: f[7].into(),
        client_rc: f[8].into(),
        secs: f[9].into(),
        ok: f[10] == "ok",
        reason: f[11].into(),
        cols: std::array::from_fn(|i| if i < 9 { col(12 + i) } else { col(16 + i) }),
        calibration: f[21].into(),
        client_settings: f[22].into(),
        server_settings: f[23].into(),
        raw: f[24].into(),
    })
}

/// `run`, broken with [`metric_problem`]'s reason when the guest called it ok but its row's
/// primary metric is no measurement: every median, ratio and count then leaves it out alike.
fn check_metric(tests: &[Test], mut run: Run) -> Run {
    let Some(t) = tests.iter().find(|t| t.name == run.test) else {
        return run;
    };
    if run.ok {
        if let Some(why) = metric_problem(t.kind, &run.cols[t.kind.column() - 1]) {
            run.ok = false;
            run.reason = why;
        }
    }
    run
}

/// The verdict on one row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Meets,
    /// The median of rounds misses the goal, but by less than either tool's own spread between
    /// runs, and the rounds split, two or more each way ([`tie`]): the two tools cannot be told
    /// apart at this precision. Not a pass: the goal is not met.
    Ties,
    Misses,
    NoData,
}

impl Verdict {
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Meets => "meets",
            Verdict::Ties => "ties",
            Verdict::Misses => "MISSES",
            Verdict::NoData => "NO DATA",
        }
    }
}

/// Whether a row that misses on the median of rounds (`median`, of `compared` rounds, `won` of
/// them meeting the goal) is a tie: the rounds split, at least two each way, and the miss is
/// smaller than each tool's half-range between its own runs. A miss in every round but one
/// stays a miss however small (a cost of ours: one round the other way is what a tool that
/// falls into a slower regime now and then gives, as perftest's 1 MiB sends), and so does one
/// larger than the noise.
pub fn tie(median: f64, won: usize, compared: usize, ours: &Spread, perftest: &Spread) -> bool {
    let half = |s: &Spread| s.spread_pct().map_or(0.0, |p| p / 2.0);
    let miss_pct = (median - 1.0).abs() * 100.0;
    won >= 2 && compared - won >= 2 && miss_pct < half(ours) && miss_pct < half(perftest)
}

/// The statistics of one row.
#[derive(Debug, Clone)]
pub struct RowStats {
    pub ours: Option<Spread>,
    pub perftest: Option<Spread>,
    /// The ratio ours/perftest of each round in which both runs were valid, by round.
    pub round_ratios: Vec<(u32, f64)>,
    /// Their spread: the median is the verdict.
    pub ratios: Option<Spread>,
    /// The ratio of the two medians.
    pub of_medians: Option<f64>,
    /// Rounds whose ratio meets the goal.
    pub won: usize,
    pub verdict: Verdict,
    /// The median of rounds and the ratio of medians fall on different sides of the goal.
    pub disagree: bool,
}

impl RowStats {
    /// How many rounds were compared.
    pub fn compared(&self) -> usize {
        self.round_ratios.len()
    }
}

/// The statistics of row `t`: the primary column of each side, and per round the ratio.
pub fn row_stats(rec: &Records, t: &Test) -> RowStats {
    let col = t.kind.column();
    let ours = rec.spread(&t.name, true, col);
    let perftest = rec.spread(&t.name, false, col);
    let mut round_ratios = Vec::new();
    for r in 1..=rec.rounds() {
        let (mut ov, mut pv) = (None, None);
        for k in rec.runs_of(&t.name).filter(|k| k.round == r && k.ok) {
            let v = k.value(col);
            if k.ours {
                ov = v;
            } else {
                pv = v;
            }
        }
        if let (Some(o), Some(p)) = (ov, pv) {
            round_ratios.push((r, o / p));
        }
    }
    let all: Vec<f64> = round_ratios.iter().map(|x| x.1).collect();
    let ratios = Spread::of(&all);
    let won = all.iter().filter(|x| t.kind.meets(**x)).count();
    let of_medians = match (ours, perftest) {
        (Some(o), Some(p)) if o.median > 0.0 && p.median > 0.0 => Some(o.median / p.median),
        _ => None,
    };
    let verdict = match (ratios, ours, perftest) {
        (None, ..) => Verdict::NoData,
        (Some(s), ..) if t.kind.meets(s.median) => Verdict::Meets,
        (Some(s), Some(o), Some(p)) if tie(s.median, won, all.len(), &o, &p) => Verdict::Ties,
        _ => Verdict::Misses,
    };
    let disagree = match (ratios, of_medians) {
        (Some(s), Some(m)) => t.kind.meets(s.median) != t.kind.meets(m),
        _ => false,
    };
    RowStats {
        ours,
        perftest,
        round_ratios,
        ratios,
        of_medians,
        won,
        verdict,
        disagree,
    }
}

/// Where two settings strings ("k=v k=v") disagree on a key both print: "" when nowhere, else
/// "key ours vs perftest, ...".
pub fn settings_diff(ours: &str, theirs: &str) -> String {
    let kv = |s: &str| -> Vec<(String, String)> {
        s.split_whitespace()
            .filter_map(|p| p.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let theirs = kv(theirs);
    kv(ours)
        .into_iter()
        .filter_map(|(k, v)| {
            let t = theirs.iter().find(|(tk, _)| *tk == k)?;
            (t.1 != v).then(|| format!("{k} {v} vs {}", t.1))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The effective settings of a row: what the first run of each tool printed ("k=v ...", "-"
/// for nothing), and where a setting both print disagrees ("" when nowhere).
#[derive(Debug, Clone)]
pub struct Settings {
    pub ours_client: String,
    pub ours_server: String,
    pub perftest_client: String,
    pub perftest_server: String,
    pub diff: String,
}

/// The effective settings of row `t`.
pub fn row_settings(rec: &Records, t: &Test) -> Settings {
    let first = |ours, client| rec.first_settings(&t.name, ours, client).to_string();
    let s = Settings {
        ours_client: first(true, true),
        ours_server: first(true, false),
        perftest_client: first(false, true),
        perftest_server: first(false, false),
        diff: String::new(),
    };
    let dc = settings_diff(&s.ours_client, &s.perftest_client);
    let ds = settings_diff(&s.ours_server, &s.perftest_server);
    let diff = [("client", dc), ("server", ds)]
        .into_iter()
        .filter(|(_, d)| !d.is_empty())
        .map(|(side, d)| format!("{side} {d}"))
        .collect::<Vec<_>>()
        .join("; ");
    Settings { diff, ..s }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts_skips_what_is_not_a_number() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[7.0]), Some(7.0));
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[f64::NAN, f64::INFINITY]), None);
        assert_eq!(median(&[f64::NAN, 5.0, 1.0, f64::NEG_INFINITY]), Some(3.0));
        assert_eq!(
            Spread::of(&[2.0, f64::NAN, 8.0, 4.0]),
            Some(Spread {
                n: 3,
                median: 4.0,
                min: 2.0,
                max: 8.0
            })
        );
        assert_eq!(Spread::of(&[f64::NAN]), None);
    }

    #[test]
    fn numbers_are_what_the_guest_printed_not_inf_or_nan() {
        assert_eq!(num("0.007430"), Some(0.00743));
        assert_eq!(num("1e3"), Some(1000.0));
        for bad in ["", "-", "inf", "-nan", "nan", "1.2.3", "0x10"] {
            assert_eq!(num(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_tie_is_a_split_miss_inside_both_tools_noise() {
        // read_bw 64 KiB of 2026-12-06's deterministic sweep: ±0.15 % and ±0.17 % between runs.
        let ours = Spread::of(&[130.16, 130.18, 130.20, 130.20, 130.56]).unwrap();
        let theirs = Spread::of(&[130.16, 130.20, 130.20, 130.21, 130.59]).unwrap();
        assert!(tie(0.9998, 2, 5, &ours, &theirs));
        // Ours behind in every round, or in every round but one: a cost of ours, however small
        // (send_bw 1 MiB of 19:29 that day: behind by 0.2-0.8 % in the four rounds where both
        // ran in rxe's fast regime, ahead in the one where perftest's run fell out of it).
        assert!(!tie(0.9998, 0, 5, &ours, &theirs));
        assert!(!tie(0.9998, 1, 5, &ours, &theirs));
        let regimes = Spread::of(&[50.59, 65.87, 65.88, 65.93, 66.01]).unwrap();
        let theirs_1m = Spread::of(&[44.14, 66.12, 66.12, 66.25, 66.39]).unwrap();
        assert!(!tie(0.996, 1, 5, &regimes, &theirs_1m));
        // A miss larger than either tool's noise: a miss, even where the rounds split.
        assert!(!tie(0.998, 2, 5, &ours, &theirs));
        let quiet = Spread::of(&[130.19, 130.20, 130.21]).unwrap();
        assert!(
            !tie(0.9998, 2, 5, &ours, &quiet),
            "inside ours, outside perftest's ±0.008 %"
        );
        // Three rounds cannot split two each way.
        assert!(!tie(0.9998, 1, 3, &ours, &theirs));
    }

    #[test]
    fn a_metric_is_a_measurement_from_above_zero_up_to_1e12() {
        // The messages of each kind of bad value: tests/benchstat.rs, end to end.
        for ok in ["0.001", "1000.5", "1e12"] {
            assert_eq!(metric_problem(Kind::Lat, ok), None, "{ok:?}");
        }
        for bad in ["0", "1.000001e12"] {
            assert!(metric_problem(Kind::Lat, bad).is_some(), "{bad:?}");
        }
    }
}
