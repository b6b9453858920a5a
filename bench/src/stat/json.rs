//! `benchmarks.json`: the layout `docs/benchmarks.md` describes and `vl_benchchart` reads
//! (`rows[].family`, `bytes`, `kind`, `ours_stats` and `perftest_stats`), as serde structs
//! written field by field in their order.

use serde::Serialize;
use serde_json::{Map, Value};

use super::{command, num, row_settings, row_stats, Kind, Records, Run, Spread, Test, Verdict};

/// The whole document.
#[derive(Debug, Serialize)]
pub struct Report {
    generated_by: &'static str,
    mode: &'static str,
    date_utc: String,
    command: String,
    raw_dir: String,
    environment: Environment,
    method: Method,
    timing: Timing,
    runs_total: usize,
    runs_broken: usize,
    rows_missing_goal: usize,
    /// Of those, the ties (`Verdict::Ties`): inside both tools' spread, the rounds split.
    rows_tied: usize,
    rows: Vec<Row>,
}

#[derive(Debug, Serialize)]
struct Environment {
    verbs_lab_commit: String,
    verbs_lab_uncommitted_changes: i64,
    verbs_lab_version: String,
    perftest_version: String,
    perftest_package: String,
    host_cpu: String,
    host_cpus: Value,
    host_kernel: String,
    host_load_start: String,
    host_load_end: String,
    accelerator: String,
    qemu: String,
    guest_kernel: String,
    guest_cpu: String,
    guest_vcpus: Value,
    guest_clocksource: String,
    rxe_active_mtu: Value,
}

#[derive(Debug, Serialize)]
struct Method {
    sweep: bool,
    rounds_planned: i64,
    rounds_run: u32,
    extra_rounds: i64,
    max_extra_rounds: i64,
    order: &'static str,
    common_parameters: String,
    ratio: &'static str,
    broken: &'static str,
}

#[derive(Debug, Serialize)]
struct Timing {
    total_seconds: Value,
    cargo_build: Option<String>,
    guest_benchmark_seconds: Value,
}

#[derive(Debug, Serialize)]
struct Row {
    name: String,
    family: String,
    bytes: u64,
    kind: &'static str,
    ours: String,
    perftest: String,
    parameters: String,
    cost: Sides<Cost>,
    commands: Commands,
    metric: &'static str,
    unit: &'static str,
    better: &'static str,
    ours_stats: Stats,
    perftest_stats: Stats,
    ratio_median_of_rounds: Value,
    ratio_of_medians: Value,
    rounds_compared: usize,
    rounds_meeting_goal: usize,
    goal_met: bool,
    verdict: &'static str,
    ratios_disagree: bool,
    settings_agree: bool,
    runs: Vec<RunJson>,
}

#[derive(Debug, Serialize)]
struct Sides<T> {
    ours: T,
    perftest: T,
}

/// The medians of a side's cost (peak RSS KiB, CPU seconds) over its valid runs.
#[derive(Debug, Serialize)]
struct Cost {
    client_rss_kib: Value,
    client_cpu_s: Value,
    server_rss_kib: Value,
    server_cpu_s: Value,
}

#[derive(Debug, Serialize)]
struct Commands {
    ours_server: String,
    ours_client: String,
    perftest_server: String,
    perftest_client: String,
}

/// A side's primary metric over its valid runs.
#[derive(Debug, Serialize)]
struct Stats {
    valid: usize,
    median: Value,
    min: Value,
    max: Value,
    /// (max − min) ÷ median in percent: the run-to-run spread of the row.
    spread_pct: Value,
}

#[derive(Debug, Serialize)]
struct RunJson {
    seq: i64,
    round: u32,
    position: i64,
    side: &'static str,
    tool: String,
    port: i64,
    valid: bool,
    problem: Option<String>,
    server_exit: Value,
    client_exit: Value,
    seconds: Value,
    /// The result row's columns by name (bw or lat).
    #[serde(flatten)]
    columns: Map<String, Value>,
    calibration_warning: Option<String>,
    server_command: String,
    client_command: String,
    raw: String,
}

/// A number as printed: a whole number stays one, a fraction a float, anything else `null`.
fn jnum(s: &str) -> Value {
    if let Ok(i) = s.parse::<i64>() {
        return i.into();
    }
    num(s).map_or(Value::Null, Value::from)
}

/// `x` rounded to `decimals` places (a whole number written as one), or `null`.
fn round(x: Option<f64>, decimals: usize) -> Value {
    x.map_or(Value::Null, |x| jnum(&format!("{x:.decimals$}")))
}

/// `x` to six significant digits (a whole number written as one), or `null`.
fn sig6(x: Option<f64>) -> Value {
    x.map_or(Value::Null, |x| {
        let r: f64 = format!("{x:.5e}").parse().unwrap_or(x);
        jnum(&r.to_string())
    })
}

impl Stats {
    fn of(s: Option<Spread>) -> Stats {
        Stats {
            valid: s.map_or(0, |s| s.n),
            median: sig6(s.map(|s| s.median)),
            min: sig6(s.map(|s| s.min)),
            max: sig6(s.map(|s| s.max)),
            spread_pct: round(s.and_then(|s| s.spread_pct()), 2),
        }
    }
}

impl Cost {
    fn of(rec: &Records, t: &Test, ours: bool) -> Cost {
        let med = |col: usize, decimals: usize| {
            round(rec.spread(&t.name, ours, col).map(|s| s.median), decimals)
        };
        Cost {
            client_rss_kib: med(10, 0),
            client_cpu_s: med(11, 2),
            server_rss_kib: med(12, 0),
            server_cpu_s: med(13, 2),
        }
    }
}

/// The row columns of a run by name: bw/rate rows and lat rows print different ones.
fn columns(kind: Kind, run: &Run) -> Map<String, Value> {
    let names: &[&str] = match kind {
        Kind::Lat => &[
            "bytes",
            "iterations",
            "t_min",
            "t_max",
            "t_typical",
            "t_avg",
            "t_stdev",
            "p99",
            "p99_9",
        ],
        _ => &[
            "bytes",
            "iterations",
            "bw_peak",
            "bw_average",
            "msg_rate_mpps",
        ],
    };
    names
        .iter()
        .zip(&run.cols)
        .map(|(n, v)| (n.to_string(), jnum(v)))
        .collect()
}

fn int(s: &str) -> i64 {
    num(s).map_or(0, |x| x as i64)
}

impl Row {
    /// The row of test `t`: its statistics, costs, commands and every run.
    fn of(rec: &Records, t: &Test) -> Row {
        let st = row_stats(rec, t);
        let cmd = |tpl: &str, tool: &str| command(tpl, tool, None);
        let out_dir = rec.env("out_dir");
        let runs = rec
            .runs_of(&t.name)
            .map(|k| RunJson {
                seq: int(&k.seq),
                round: k.round,
                position: int(&k.slot),
                side: k.side(),
                tool: k.tool.clone(),
                port: int(&k.port),
                valid: k.ok,
                problem: (!k.ok).then(|| k.reason.clone()),
                server_exit: jnum(&k.server_rc),
                client_exit: jnum(&k.client_rc),
                seconds: jnum(&k.secs),
                columns: columns(t.kind, k),
                calibration_warning: (k.calibration != "-").then(|| k.calibration.clone()),
                server_command: command(&t.server_cmd, &k.tool, Some(&k.port)),
                client_command: command(&t.client_cmd, &k.tool, Some(&k.port)),
                raw: format!("{out_dir}/{}", k.raw),
            })
            .collect();
        Row {
            name: t.name.clone(),
            family: t.family().to_string(),
            bytes: t.bytes(),
            kind: t.kind.name(),
            ours: t.ours.clone(),
            perftest: t.perftest.clone(),
            parameters: t.params.clone(),
            cost: Sides {
                ours: Cost::of(rec, t, true),
                perftest: Cost::of(rec, t, false),
            },
            commands: Commands {
                ours_server: cmd(&t.server_cmd, &t.ours),
                ours_client: cmd(&t.client_cmd, &t.ours),
                perftest_server: cmd(&t.server_cmd, &t.perftest),
                perftest_client: cmd(&t.client_cmd, &t.perftest),
            },
            metric: t.kind.metric(),
            unit: t.kind.unit(),
            better: t.kind.better(),
            ours_stats: Stats::of(st.ours),
            perftest_stats: Stats::of(st.perftest),
            ratio_median_of_rounds: round(st.ratios.map(|s| s.median), 4),
            ratio_of_medians: round(st.of_medians, 4),
            rounds_compared: st.compared(),
            rounds_meeting_goal: st.won,
            goal_met: st.verdict == Verdict::Meets,
            verdict: st.verdict.name(),
            ratios_disagree: st.disagree,
            settings_agree: row_settings(rec, t).diff.is_empty(),
            runs,
        }
    }
}

impl Environment {
    /// What the records say about the machines, the guest and the versions.
    fn of(rec: &Records) -> Environment {
        let env = |k: &str| rec.env(k).to_string();
        Environment {
            verbs_lab_commit: env("git_commit"),
            verbs_lab_uncommitted_changes: rec.env_int("git_dirty"),
            verbs_lab_version: env("verbs_lab_version"),
            perftest_version: env("perftest_version"),
            perftest_package: env("perftest_package"),
            host_cpu: env("host_cpu"),
            host_cpus: jnum(rec.env("host_cpus")),
            host_kernel: env("host_kernel"),
            host_load_start: env("host_load_start"),
            host_load_end: env("host_load_end"),
            accelerator: env("accelerator"),
            qemu: env("qemu"),
            guest_kernel: env("guest_kernel"),
            guest_cpu: env("guest_cpu"),
            guest_vcpus: jnum(rec.env("guest_vcpus")),
            guest_clocksource: env("guest_clocksource"),
            rxe_active_mtu: jnum(rec.env("rxe0_mtu")),
        }
    }
}

impl Report {
    /// The report of `rec`.
    pub fn build(rec: &Records) -> Report {
        let env = |k: &str| rec.env(k).to_string();
        let rows: Vec<Row> = rec.tests.iter().map(|t| Row::of(rec, t)).collect();
        Report {
            generated_by: "scripts/bench-vs-perftest",
            mode: mode(rec).0,
            date_utc: env("date_utc"),
            command: env("command"),
            raw_dir: env("out_dir"),
            environment: Environment::of(rec),
            method: Method {
                sweep: rec.env("sweep") == "1",
                rounds_planned: rec.env_int("runs"),
                rounds_run: rec.rounds(),
                extra_rounds: rec.env_int("extra_rounds"),
                max_extra_rounds: rec.env_int("max_extra"),
                order: "odd rounds: vl_* first; even rounds: ib_* first (A B B A ...); rows \
                        interleaved within each round",
                common_parameters: env("common"),
                ratio: "ours / perftest, per round with both runs valid; bw: >= 1 meets the \
                        goal, lat: <= 1",
                broken: "either side exited non-zero or timed out, or the client row is \
                         missing, for other bytes/iterations, or has a non-positive or \
                         non-finite value in a reported column, or its primary metric is not \
                         a number in (0, 1e12] of its unit",
            },
            timing: Timing {
                total_seconds: jnum(rec.env("total_secs")),
                cargo_build: Some(env("cargo")).filter(|c| !c.is_empty()),
                guest_benchmark_seconds: jnum(rec.env("bench_secs")),
            },
            runs_total: rec.runs.len(),
            runs_broken: rec.runs.iter().filter(|r| !r.ok).count(),
            rows_missing_goal: rows.iter().filter(|r| r.verdict != "meets").count(),
            rows_tied: rows.iter().filter(|r| r.verdict == "ties").count(),
            rows,
        }
    }

    /// The document, indented, with a final newline.
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).expect("plain structs serialize");
        s.push('\n');
        s
    }
}

/// The kind of run: ("quick" | "partial" | "full", how the report says it).
pub fn mode(rec: &Records) -> (&'static str, String) {
    if rec.env("quick") == "1" {
        ("quick", "quick smoke run (not a measurement)".into())
    } else if !rec.env("only").is_empty() {
        (
            "partial",
            format!("partial run (--only {})", rec.env("only")),
        )
    } else {
        ("full", "full run".into())
    }
}
