//! vl_jsoncheck — checks a `--json` report where no JSON tool is at hand (the SoftRoCE guest is
//! busybox only). The file must be one valid JSON text (RFC 8259, read by serde_json, and no
//! key given twice in one object) and one of the reports verbs-lab's tools write, read into
//! typed structs that mirror the writers' (`vl_perftest::report::render_json` for the vl_*
//! perftest tools, `vl_perftest::coll::report::CollJson` for the collectives):
//!
//! * a vl_* perftest report (`"results"`): a known `tool` whose `run.test` and `run.metric`
//!   match it, the layout `format` this checker knows, at least one row (only a latency
//!   server may have measured nothing), sizes strictly increasing (a `--run_infinitely`
//!   report of a `-D` run repeats its one size), positive `iterations` and average, every
//!   figure a non-negative number, a peak at least the average (a peak of 0: not measured,
//!   `--no_peak`), latency percentiles in order; with `--procs`, each process's rows and the
//!   aggregate alike;
//! * a collective's report (`"rows"`): a known `tool` naming its `collective`, a `"version"`,
//!   one rank record and one time per rank, at least one row, sizes strictly increasing,
//!   non-negative figures, and the `wrong` total the sum of its rows'.
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

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;
use verbs_lab::coll::Coll;
use vl_perftest::params::Tool;
use vl_perftest::result::{Metric, TestKind};

/// The layout of the vl_* report this checker reads (`report::json`'s `FORMAT_VERSION`; the
/// goldens in `tests/golden` carry it, and the tests below read them).
const FORMAT_VERSION: u32 = 1;

/// Reads one JSON text strictly: no key given twice in one object, at any depth
/// ([`verbs_lab::json::from_str_strict`]).
fn parse(text: &str) -> Result<Value, serde_json::Error> {
    verbs_lab::json::from_str_strict(text)
}

/// `v` read as a `T`; on failure the message names the path of the field at fault: the key
/// whose removal changes the error (a field of the wrong type or value), else `path` itself
/// (a missing field names itself).
fn typed<T: DeserializeOwned>(v: &Value, path: &str) -> Result<T, String> {
    let e = match T::deserialize(v) {
        Ok(t) => return Ok(t),
        Err(e) => e.to_string(),
    };
    let at = |k: &str| match path {
        "" => k.to_string(),
        p => format!("{p}.{k}"),
    };
    if let Some(obj) = v.as_object().filter(|_| !e.starts_with("missing field")) {
        for k in obj.keys() {
            let mut o = obj.clone();
            o.remove(k);
            if T::deserialize(&Value::Object(o))
                .err()
                .map(|x| x.to_string())
                != Some(e.clone())
            {
                return Err(format!("{}: {e}", at(k)));
            }
        }
    }
    Err(match path {
        "" => format!("the report: {e}"),
        p => format!("{p}: {e}"),
    })
}

/// Each element of the array `rows` (at `path`) read as a `T`.
fn typed_rows<T: DeserializeOwned>(rows: &[Value], path: &str) -> Result<Vec<T>, String> {
    rows.iter()
        .enumerate()
        .map(|(i, r)| typed(r, &format!("{path}[{i}]")))
        .collect()
}

/// `x` (at `path`) is a non-negative number (JSON has no infinities: the writers put `null`
/// for them, which the typed read refuses).
fn non_negative(path: &str, x: f64) -> Result<(), String> {
    if x >= 0.0 {
        Ok(())
    } else {
        Err(format!("{path}: {x} is negative"))
    }
}

/// Every figure of a row, by name, is non-negative.
fn all_non_negative(path: &str, figures: &[(&str, f64)]) -> Result<(), String> {
    figures
        .iter()
        .try_for_each(|(k, x)| non_negative(&format!("{path}.{k}"), *x))
}

/// `sizes` (of the rows at `path`, each's size under `key`) increase strictly; with
/// `repeat_ok`, all equal is allowed too (a `--run_infinitely` report's one size).
fn increasing(path: &str, key: &str, sizes: &[u64], repeat_ok: bool) -> Result<(), String> {
    if repeat_ok && sizes.windows(2).all(|w| w[0] == w[1]) {
        return Ok(());
    }
    match sizes.windows(2).position(|w| w[1] <= w[0]) {
        None => Ok(()),
        Some(i) => Err(format!(
            "{path}[{}].{key}: {} after {}: the sizes must increase strictly{}",
            i + 1,
            sizes[i + 1],
            sizes[i],
            if repeat_ok {
                " (or, in a --run_infinitely report, all be the one size)"
            } else {
                ""
            }
        )),
    }
}

// ---- The vl_* perftest report (report/json.rs) ---------------------------------------------

/// The document's top level (`Report`); the parts are read one by one, for their paths.
#[derive(Deserialize)]
#[allow(dead_code)] // read for its types (a count is a u64: non-negative)
struct Report {
    tool: String,
    version: String,
    format: u32,
    run: Value,
    results: Vec<Value>,
    counters: Option<BTreeMap<String, u64>>,
    cpu_util: Option<CpuUtil>,
    processes: Option<Vec<Value>>,
    aggregate: Option<Vec<Value>>,
}

/// The run block (`Run`).
#[derive(Deserialize)]
#[allow(dead_code)] // read for its types: the checks use a few of the fields
struct Run {
    test: String,
    metric: String,
    title: String,
    role: String,
    device: String,
    ib_port: u8,
    link_layer: String,
    gid_index: u32,
    gid: String,
    remote_gid: String,
    connection_type: String,
    mtu: u32,
    qps: u32,
    tx_depth: u32,
    rx_depth: u32,
    post_list: u32,
    cq_moderation: u32,
    max_inline: u32,
    outstanding_reads: u32,
    atomic_type: Option<String>,
    bidirectional: bool,
    use_events: bool,
    duration_s: Option<f64>,
    iterations: u64,
    warmup_iterations: u64,
    qp_timeout: u8,
    cpu: Option<Pinned>,
    report_unit: String,
    data_exchange: String,
    local_endpoints: Vec<String>,
    remote_endpoints: Vec<String>,
}

#[derive(Deserialize)]
#[allow(dead_code)] // read for its types
struct Pinned {
    cpu: usize,
    why: String,
}

#[derive(Deserialize)]
struct CpuUtil {
    util_percent: Vec<f64>,
    process_cpu_s: f64,
}

/// A bandwidth row (`BwJson`); a `--procs` process's row adds its interval.
#[derive(Deserialize)]
struct BwRow {
    bytes: u64,
    iterations: u64,
    bw_peak_mib_s: f64,
    bw_avg_mib_s: f64,
    bw_peak_gbit_s: f64,
    bw_avg_gbit_s: f64,
    msg_rate_mpps: f64,
    elapsed_us: f64,
    start_ns: Option<u64>,
    end_ns: Option<u64>,
}

/// A latency row (`LatJson`).
#[derive(Deserialize)]
struct LatRow {
    bytes: u64,
    iterations: u64,
    samples: u64,
    t_min_us: f64,
    t_median_us: f64,
    t_avg_us: f64,
    t_stdev_us: f64,
    t_p99_us: f64,
    t_p99_9_us: f64,
    t_p99_99_us: f64,
    t_max_us: f64,
    tps: Option<f64>,
}

/// One process of a `--procs` run (`Process`).
#[derive(Deserialize)]
#[allow(dead_code)] // read for its types
struct Process {
    process: u32,
    pid: u32,
    cpu: Option<Pinned>,
    results: Vec<Value>,
}

/// One size of a `--procs` run's aggregate (`AggregateRow`).
#[derive(Deserialize)]
#[allow(dead_code)] // read for its types (a count is a u64: non-negative)
struct AggregateRow {
    bytes: u64,
    start_ns: u64,
    end_ns: u64,
    union_us: f64,
    overlap_us: f64,
    overlap_fraction: f64,
    total_bytes: u64,
    total_messages: u64,
    bw_avg_mib_s: f64,
    bw_avg_gbit_s: f64,
    msg_rate_mpps: f64,
    sum_bw_avg_mib_s: f64,
    sum_bw_avg_gbit_s: f64,
    sum_msg_rate_mpps: f64,
}

/// The rows' common ground: a size and a positive count of iterations.
fn row_head(path: &str, bytes: u64, iterations: u64) -> Result<(), String> {
    if bytes == 0 {
        return Err(format!("{path}.bytes: 0: a message has at least 1 byte"));
    }
    if iterations == 0 {
        return Err(format!(
            "{path}.iterations: 0 ({bytes} bytes): the row measured nothing"
        ));
    }
    Ok(())
}

/// A positive average (the measurement itself), named with the row's size.
fn positive_avg(path: &str, key: &str, bytes: u64, x: f64) -> Result<(), String> {
    if x > 0.0 {
        Ok(())
    } else {
        Err(format!("{path}.{key}: {x} ({bytes} bytes): not positive"))
    }
}

impl BwRow {
    fn check(&self, path: &str) -> Result<(), String> {
        row_head(path, self.bytes, self.iterations)?;
        all_non_negative(
            path,
            &[
                ("bw_peak_mib_s", self.bw_peak_mib_s),
                ("bw_avg_mib_s", self.bw_avg_mib_s),
                ("bw_peak_gbit_s", self.bw_peak_gbit_s),
                ("bw_avg_gbit_s", self.bw_avg_gbit_s),
                ("msg_rate_mpps", self.msg_rate_mpps),
                ("elapsed_us", self.elapsed_us),
            ],
        )?;
        // Gb/s has the more decimals: a slow row's MiB/s may round to 0.
        positive_avg(path, "bw_avg_gbit_s", self.bytes, self.bw_avg_gbit_s)?;
        for (peak, avg, unit) in [
            (self.bw_peak_mib_s, self.bw_avg_mib_s, "mib_s"),
            (self.bw_peak_gbit_s, self.bw_avg_gbit_s, "gbit_s"),
        ] {
            // A peak of 0 was not measured (--no_peak).
            if peak != 0.0 && peak < avg {
                return Err(format!(
                    "{path}.bw_peak_{unit}: {peak} is below the average {avg} ({} bytes)",
                    self.bytes
                ));
            }
        }
        if let (Some(s), Some(e)) = (self.start_ns, self.end_ns) {
            if e < s {
                return Err(format!("{path}.end_ns: {e} is before start_ns {s}"));
            }
        }
        Ok(())
    }
}

impl LatRow {
    fn check(&self, path: &str) -> Result<(), String> {
        row_head(path, self.bytes, self.iterations)?;
        if self.samples == 0 {
            return Err(format!(
                "{path}.samples: 0 ({} bytes): no sample",
                self.bytes
            ));
        }
        let order = [
            ("t_min_us", self.t_min_us),
            ("t_median_us", self.t_median_us),
            ("t_p99_us", self.t_p99_us),
            ("t_p99_9_us", self.t_p99_9_us),
            ("t_p99_99_us", self.t_p99_99_us),
        ];
        all_non_negative(path, &order)?;
        all_non_negative(
            path,
            &[
                ("t_max_us", self.t_max_us),
                ("t_avg_us", self.t_avg_us),
                ("t_stdev_us", self.t_stdev_us),
            ],
        )?;
        if let Some(t) = self.tps {
            non_negative(&format!("{path}.tps"), t)?;
        }
        positive_avg(path, "t_avg_us", self.bytes, self.t_avg_us)?;
        if let Some(w) = order.windows(2).find(|w| w[1].1 < w[0].1) {
            return Err(format!(
                "{path}.{}: {} is below {} {}: the statistics must be in order",
                w[1].0, w[1].1, w[0].0, w[0].1
            ));
        }
        // The percentiles come from a histogram (3 significant digits, each bucket's highest
        // value): they may pass t_max_us, the exact maximum. The average is exact.
        if !(self.t_min_us..=self.t_max_us).contains(&self.t_avg_us) {
            return Err(format!(
                "{path}.t_avg_us: {} is outside t_min_us..=t_max_us ({}..={})",
                self.t_avg_us, self.t_min_us, self.t_max_us
            ));
        }
        Ok(())
    }
}

impl AggregateRow {
    fn check(&self, path: &str) -> Result<(), String> {
        if self.end_ns < self.start_ns {
            return Err(format!(
                "{path}.end_ns: {} is before start_ns {}",
                self.end_ns, self.start_ns
            ));
        }
        if !(0.0..=1.0).contains(&self.overlap_fraction) {
            return Err(format!(
                "{path}.overlap_fraction: {} is not in 0..=1",
                self.overlap_fraction
            ));
        }
        all_non_negative(
            path,
            &[
                ("union_us", self.union_us),
                ("overlap_us", self.overlap_us),
                ("bw_avg_mib_s", self.bw_avg_mib_s),
                ("bw_avg_gbit_s", self.bw_avg_gbit_s),
                ("msg_rate_mpps", self.msg_rate_mpps),
                ("sum_bw_avg_mib_s", self.sum_bw_avg_mib_s),
                ("sum_bw_avg_gbit_s", self.sum_bw_avg_gbit_s),
                ("sum_msg_rate_mpps", self.sum_msg_rate_mpps),
            ],
        )
    }
}

/// The vl_* perftest tools: name, `run.test`, `run.metric`.
fn perftest_tools() -> Vec<(String, &'static str, &'static str)> {
    let kinds = [
        TestKind::Write,
        TestKind::Read,
        TestKind::Send,
        TestKind::Atomic,
    ];
    let metrics = [(Metric::Bw, "bw"), (Metric::Lat, "lat")];
    kinds
        .iter()
        .flat_map(|&k| {
            metrics
                .iter()
                .map(move |&(m, name)| (Tool::new(k, m).name(), k.perftest_name(), name))
        })
        .collect()
}

/// Bandwidth rows at `path`, checked; their sizes.
fn bw_rows(rows: &[Value], path: &str) -> Result<Vec<u64>, String> {
    let rows: Vec<BwRow> = typed_rows(rows, path)?;
    for (i, r) in rows.iter().enumerate() {
        r.check(&format!("{path}[{i}]"))?;
    }
    Ok(rows.iter().map(|r| r.bytes).collect())
}

/// A vl_* perftest tool's report: its sizes.
fn check_perftest(doc: &Value) -> Result<Vec<u64>, String> {
    let rep: Report = typed(doc, "")?;
    let tools = perftest_tools();
    let Some(&(_, test, metric)) = tools.iter().find(|t| t.0 == rep.tool) else {
        let names: Vec<&str> = tools.iter().map(|t| t.0.as_str()).collect();
        return Err(format!(
            "tool: \"{}\" is not one of verbs-lab's perftest tools ({})",
            rep.tool,
            names.join(", ")
        ));
    };
    if rep.version.is_empty() {
        return Err("version: empty".into());
    }
    if rep.format != FORMAT_VERSION {
        return Err(format!(
            "format: {} is not the layout this checker reads ({FORMAT_VERSION})",
            rep.format
        ));
    }
    let run: Run = typed(&rep.run, "run")?;
    if run.test != test || run.metric != metric {
        return Err(format!(
            "run: test \"{}\", metric \"{}\" is not what {} measures (\"{test}\", \"{metric}\")",
            run.test, run.metric, rep.tool
        ));
    }
    if run.role != "client" && run.role != "server" {
        return Err(format!(
            "run.role: \"{}\" is neither \"client\" nor \"server\"",
            run.role
        ));
    }
    if rep.results.is_empty() && !(run.role == "server" && metric == "lat") {
        return Err(format!(
            "results: empty: the {} measured nothing (only a latency test's server may \
             report no row)",
            run.role
        ));
    }
    let sizes = match metric {
        "bw" => bw_rows(&rep.results, "results")?,
        _ => {
            let rows: Vec<LatRow> = typed_rows(&rep.results, "results")?;
            for (i, r) in rows.iter().enumerate() {
                r.check(&format!("results[{i}]"))?;
            }
            rows.iter().map(|r| r.bytes).collect()
        }
    };
    // --run_infinitely runs one size for -D periods, a row each.
    let infinite = run.duration_s.is_some() && metric == "bw";
    increasing("results", "bytes", &sizes, infinite)?;
    if let Some(d) = run.duration_s {
        non_negative("run.duration_s", d)?;
    }
    if let Some(c) = &rep.cpu_util {
        for (i, u) in c.util_percent.iter().enumerate() {
            non_negative(&format!("cpu_util.util_percent[{i}]"), *u)?;
        }
        non_negative("cpu_util.process_cpu_s", c.process_cpu_s)?;
    }
    for (p, v) in rep.processes.iter().flatten().enumerate() {
        let path = format!("processes[{p}]");
        let proc: Process = typed(v, &path)?;
        let own = bw_rows(&proc.results, &format!("{path}.results"))?;
        increasing(&format!("{path}.results"), "bytes", &own, false)?;
    }
    if let Some(agg) = &rep.aggregate {
        let rows: Vec<AggregateRow> = typed_rows(agg, "aggregate")?;
        for (i, r) in rows.iter().enumerate() {
            r.check(&format!("aggregate[{i}]"))?;
        }
        let own: Vec<u64> = rows.iter().map(|r| r.bytes).collect();
        increasing("aggregate", "bytes", &own, false)?;
    }
    Ok(sizes)
}

// ---- A collective's report (coll/report.rs) -------------------------------------------------

/// The document (`CollJson`), with the `"version"` the collectives write.
#[derive(Deserialize)]
#[allow(dead_code)] // read for its types (a count is a u64: non-negative)
struct CollReport {
    tool: String,
    version: Option<String>,
    collective: String,
    nranks: usize,
    #[serde(rename = "type")]
    dtype: String,
    redop: Option<String>,
    busbw_factor: f64,
    params: BTreeMap<String, Value>,
    ranks: Vec<Value>,
    rows: Vec<Value>,
    wrong: u64,
    avg_busbw_gbs: f64,
}

/// Where one rank ran (`RankJson`).
#[derive(Deserialize)]
#[allow(dead_code)] // read for its types
struct CollRank {
    rank: u32,
    host: String,
    pid: u32,
    device: String,
    cpu: Option<u32>,
}

/// One size (`RowJson`).
#[derive(Deserialize)]
#[allow(dead_code)] // read for its types (a count is a u64: non-negative)
struct CollRow {
    size: u64,
    count: u64,
    out_of_place: Value,
    in_place: Option<Value>,
}

/// One placement of one size (`MeasureJson`).
#[derive(Deserialize)]
struct CollMeasure {
    time_us: f64,
    algbw_gbs: f64,
    busbw_gbs: f64,
    wrong: Option<u64>,
    per_rank_time_us: Vec<f64>,
    per_rank_wrong: Option<Vec<u64>>,
}

impl CollMeasure {
    /// Its figures, each rank's time, and its wrong count (the sum of the ranks').
    fn check(&self, path: &str, nranks: usize) -> Result<u64, String> {
        all_non_negative(
            path,
            &[
                ("time_us", self.time_us),
                ("algbw_gbs", self.algbw_gbs),
                ("busbw_gbs", self.busbw_gbs),
            ],
        )?;
        if self.per_rank_time_us.len() != nranks {
            return Err(format!(
                "{path}.per_rank_time_us: {} time(s) for {nranks} rank(s)",
                self.per_rank_time_us.len()
            ));
        }
        for (i, t) in self.per_rank_time_us.iter().enumerate() {
            non_negative(&format!("{path}.per_rank_time_us[{i}]"), *t)?;
        }
        let sum = self.per_rank_wrong.as_ref().map(|w| w.iter().sum::<u64>());
        if sum != self.wrong {
            return Err(format!(
                "{path}.wrong: {:?} is not the sum of per_rank_wrong ({sum:?})",
                self.wrong
            ));
        }
        Ok(self.wrong.unwrap_or(0))
    }
}

/// A collective's report: its sizes.
fn check_coll(doc: &Value) -> Result<Vec<u64>, String> {
    if doc.get("version").is_none() {
        return Err(
            "version: missing: a collective's report names the verbs-lab version \
                    that wrote it (an older vl_*_perf wrote none: rerun it)"
                .into(),
        );
    }
    let rep: CollReport = typed(doc, "")?;
    let colls = [
        Coll::AllReduce,
        Coll::ReduceScatter,
        Coll::AllGather,
        Coll::Broadcast { root: 0 },
        Coll::SendRecv,
    ];
    let tools: Vec<(String, &str)> = colls
        .iter()
        .map(|c| (format!("vl_{}_perf", c.name()), c.name()))
        .collect();
    let Some((_, coll)) = tools.iter().find(|t| t.0 == rep.tool) else {
        let names: Vec<&str> = tools.iter().map(|t| t.0.as_str()).collect();
        return Err(format!(
            "tool: \"{}\" is not one of verbs-lab's collectives ({})",
            rep.tool,
            names.join(", ")
        ));
    };
    if rep.version.as_deref().is_some_and(str::is_empty) {
        return Err("version: empty".into());
    }
    if rep.collective != *coll {
        return Err(format!(
            "collective: \"{}\" is not what {} runs (\"{coll}\")",
            rep.collective, rep.tool
        ));
    }
    if rep.nranks == 0 {
        return Err("nranks: 0".into());
    }
    non_negative("busbw_factor", rep.busbw_factor)?;
    non_negative("avg_busbw_gbs", rep.avg_busbw_gbs)?;
    let ranks: Vec<CollRank> = typed_rows(&rep.ranks, "ranks")?;
    if ranks.len() != rep.nranks {
        return Err(format!(
            "ranks: {} record(s) for nranks {}",
            ranks.len(),
            rep.nranks
        ));
    }
    if rep.rows.is_empty() {
        return Err("rows: empty: the run measured nothing".into());
    }
    let rows: Vec<CollRow> = typed_rows(&rep.rows, "rows")?;
    let mut wrong = 0;
    for (i, r) in rows.iter().enumerate() {
        let path = format!("rows[{i}]");
        if r.size == 0 {
            return Err(format!("{path}.size: 0"));
        }
        for (key, m) in [
            ("out_of_place", Some(&r.out_of_place)),
            ("in_place", r.in_place.as_ref()),
        ] {
            if let Some(m) = m {
                let p = format!("{path}.{key}");
                let m: CollMeasure = typed(m, &p)?;
                wrong += m.check(&p, rep.nranks)?;
            }
        }
    }
    if wrong != rep.wrong {
        return Err(format!(
            "wrong: {} is not the sum of the rows' ({wrong})",
            rep.wrong
        ));
    }
    let sizes: Vec<u64> = rows.iter().map(|r| r.size).collect();
    increasing("rows", "size", &sizes, false)?;
    Ok(sizes)
}

/// The report checks: a vl_* perftest report or a collective's, whose rows' sizes are `sizes`
/// (if given).
fn check_report(doc: &Value, sizes: Option<&[u64]>) -> Result<Vec<u64>, String> {
    if !doc.is_object() {
        return Err("the report is not a JSON object".into());
    }
    let got = if doc.get("test_info").is_some() {
        return Err(
            "the report is in perftest's own --out_json layout (\"test_info\"), not a \
                    vl_* tool's --json"
                .into(),
        );
    } else if doc.get("results").is_some() {
        check_perftest(doc)?
    } else if doc.get("rows").is_some() {
        check_coll(doc)?
    } else {
        return Err(
            "the report has neither \"results\" (a vl_* perftest tool's --json) nor \
                    \"rows\" (a collective's --json)"
                .into(),
        );
    };
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
    #[arg(long, value_name = "N,N,...", value_delimiter = ',',
          value_parser = verbs_lab::cli::parse_size::<u64>)]
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

    const DIR: &str = env!("CARGO_MANIFEST_DIR");

    fn read(path: &str) -> Value {
        let p = format!("{DIR}/{path}");
        parse(&std::fs::read_to_string(&p).unwrap()).unwrap_or_else(|e| panic!("{p}: {e}"))
    }

    /// Every report our tools write passes: the goldens (client, bandwidth and latency,
    /// --report_gbits, --procs) and documents of real guest runs (a server, a UD latency sweep,
    /// a --procs sweep), and a collective's.
    #[test]
    fn accepts_the_goldens_and_real_reports() {
        let mut n = 0;
        for dir in ["tests/golden", "tests/jsoncheck"] {
            for e in std::fs::read_dir(format!("{DIR}/{dir}")).unwrap() {
                let p = e.unwrap().path();
                if p.extension().is_some_and(|x| x == "json") {
                    let doc = parse(&std::fs::read_to_string(&p).unwrap()).unwrap();
                    check_report(&doc, None).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
                    n += 1;
                }
            }
        }
        assert!(n >= 8, "{n} reports");
        let server = read("tests/jsoncheck/80-server.json");
        assert_eq!(server["run"]["role"], "server");
        let coll = read("tests/jsoncheck/coll_all_reduce.json");
        assert_eq!(check_report(&coll, Some(&[8, 16])), Ok(vec![8, 16]));
    }

    /// `doc` with the value at `pointer` replaced by `v` (or removed, for `None`).
    fn with(doc: &Value, pointer: &str, v: Option<Value>) -> Value {
        let mut d = doc.clone();
        let (parent, key) = pointer.rsplit_once('/').unwrap();
        let p = d.pointer_mut(parent).unwrap();
        match (p, v) {
            (Value::Object(o), Some(v)) => drop(o.insert(key.to_string(), v)),
            (Value::Object(o), None) => drop(o.remove(key)),
            (Value::Array(a), Some(v)) => a[key.parse::<usize>().unwrap()] = v,
            (Value::Array(a), None) => drop(a.remove(key.parse::<usize>().unwrap())),
            _ => panic!("{pointer}"),
        }
        d
    }

    fn refused(doc: &Value, want: &str) {
        match check_report(doc, None) {
            Ok(s) => panic!("accepted ({s:?}), expected \"{want}\""),
            Err(e) => assert_eq!(e, want),
        }
    }

    #[test]
    fn refuses_a_broken_bandwidth_report() {
        let doc = read("tests/golden/bw_sweep.json");
        let row2 = doc["results"][2].clone();
        let b = |k: &str| doc["results"][2][k].clone();
        refused(
            &with(&doc, "/results", Some(Value::Array(vec![]))),
            "results: empty: the client measured nothing (only a latency test's server may \
             report no row)",
        );
        refused(
            &with(&doc, "/results/2/bw_avg_mib_s", Some("fast".into())),
            "results[2].bw_avg_mib_s: invalid type: string \"fast\", expected f64",
        );
        refused(
            &with(&doc, "/results/2/bw_avg_mib_s", Some((-5.0).into())),
            "results[2].bw_avg_mib_s: -5 is negative",
        );
        refused(
            &with(&doc, "/results/2/bw_avg_mib_s", Some(Value::Null)),
            "results[2].bw_avg_mib_s: invalid type: null, expected f64",
        );
        refused(
            &with(&doc, "/results/2/bytes", Some((-8).into())),
            "results[2].bytes: invalid value: integer `-8`, expected u64",
        );
        refused(
            &with(&doc, "/results/2/bytes", None),
            "results[2]: missing field `bytes`",
        );
        let swapped = with(&doc, "/results/1", Some(row2.clone()));
        let swapped = with(&swapped, "/results/2", Some(doc["results"][1].clone()));
        let (s1, s2) = (doc["results"][1]["bytes"].clone(), b("bytes"));
        refused(
            &swapped,
            &format!("results[2].bytes: {s1} after {s2}: the sizes must increase strictly"),
        );
        let mut dup = doc.clone();
        dup["results"].as_array_mut().unwrap().push(row2);
        refused(
            &dup,
            &format!("results[3].bytes: {s2} after {s2}: the sizes must increase strictly"),
        );
        refused(
            &with(&doc, "/format", Some(99.into())),
            "format: 99 is not the layout this checker reads (1)",
        );
        let e = check_report(&with(&doc, "/tool", Some("ib_write_bw".into())), None).unwrap_err();
        assert!(
            e.starts_with("tool: \"ib_write_bw\" is not one of verbs-lab's perftest tools (vl_write_bw, vl_write_lat, vl_read_bw"),
            "{e}"
        );
        refused(
            &with(&doc, "/tool", Some("vl_read_bw".into())),
            "run: test \"RDMA_Write\", metric \"bw\" is not what vl_read_bw measures \
             (\"RDMA_Read\", \"bw\")",
        );
        let avg = b("bw_avg_mib_s").as_f64().unwrap();
        refused(
            &with(&doc, "/results/2/bw_peak_mib_s", Some((avg / 2.0).into())),
            &format!(
                "results[2].bw_peak_mib_s: {} is below the average {avg} ({} bytes)",
                avg / 2.0,
                b("bytes")
            ),
        );
        // --no_peak writes a peak of 0: not measured.
        let no_peak = with(&doc, "/results/2/bw_peak_mib_s", Some(0.0.into()));
        assert!(check_report(&no_peak, None).is_ok());
        refused(
            &with(&doc, "/results/2/iterations", Some(0.into())),
            &format!(
                "results[2].iterations: 0 ({} bytes): the row measured nothing",
                b("bytes")
            ),
        );
        refused(
            &with(&doc, "/run/role", Some("peer".into())),
            "run.role: \"peer\" is neither \"client\" nor \"server\"",
        );
        refused(
            &with(&doc, "/run/mtu", Some("4096".into())),
            "run.mtu: invalid type: string \"4096\", expected u32",
        );
        refused(
            &with(&doc, "/version", None),
            "the report: missing field `version`",
        );
        refused(&Value::Array(vec![]), "the report is not a JSON object");
        refused(
            &read("tests/golden/bw.out_json"),
            "the report is in perftest's own --out_json layout (\"test_info\"), not a vl_* \
             tool's --json",
        );
        refused(
            &with(&doc, "/results", None),
            "the report has neither \"results\" (a vl_* perftest tool's --json) nor \
             \"rows\" (a collective's --json)",
        );
    }

    /// A --run_infinitely report repeats its one size, one row per -D period.
    #[test]
    fn a_run_infinitely_report_repeats_its_size() {
        let doc = read("tests/golden/bw_sweep.json");
        let row = doc["results"][0].clone();
        let mut inf = with(
            &doc,
            "/results",
            Some(Value::Array(vec![row.clone(), row.clone()])),
        );
        refused(
            &inf,
            &format!(
                "results[1].bytes: {0} after {0}: the sizes must increase strictly",
                row["bytes"]
            ),
        );
        inf["run"]["duration_s"] = 2.0.into();
        assert_eq!(check_report(&inf, None).map(|s| s.len()), Ok(2));
    }

    #[test]
    fn refuses_a_broken_latency_report() {
        let doc = read("tests/golden/lat.json");
        let r = &doc["results"][0];
        let p999 = r["t_p99_9_us"].as_f64().unwrap();
        let high = r["t_max_us"].as_f64().unwrap() + 1.0;
        refused(
            &with(&doc, "/results/0/t_p99_us", Some(high.into())),
            &format!(
                "results[0].t_p99_9_us: {p999} is below t_p99_us {high}: the statistics must be \
                 in order"
            ),
        );
        refused(
            &with(&doc, "/results/0/t_avg_us", Some(0.into())),
            &format!(
                "results[0].t_avg_us: 0 ({} bytes): not positive",
                r["bytes"]
            ),
        );
        refused(
            &with(&doc, "/results/0/samples", Some(0.into())),
            &format!("results[0].samples: 0 ({} bytes): no sample", r["bytes"]),
        );
    }

    /// A latency server of a read test measured nothing: its report has no row, and passes.
    #[test]
    fn a_latency_server_may_have_no_row() {
        let doc = read("tests/golden/lat.json");
        let mut server = with(&doc, "/results", Some(Value::Array(vec![])));
        server["run"]["role"] = "server".into();
        assert_eq!(check_report(&server, None), Ok(vec![]));
    }

    #[test]
    fn refuses_a_broken_procs_report() {
        let doc = read("tests/jsoncheck/procs2-sweep.json");
        refused(
            &with(
                &doc,
                "/processes/1/results/0/bw_avg_gbit_s",
                Some((-1.0).into()),
            ),
            "processes[1].results[0].bw_avg_gbit_s: -1 is negative",
        );
        refused(
            &with(&doc, "/aggregate/0/overlap_fraction", Some(1.5.into())),
            "aggregate[0].overlap_fraction: 1.5 is not in 0..=1",
        );
        refused(
            &with(&doc, "/processes/0/pid", Some("x".into())),
            "processes[0].pid: invalid type: string \"x\", expected u32",
        );
    }

    #[test]
    fn refuses_a_broken_collective_report() {
        let doc = read("tests/jsoncheck/coll_all_reduce.json");
        refused(
            &with(&doc, "/version", None),
            "version: missing: a collective's report names the verbs-lab version that wrote \
             it (an older vl_*_perf wrote none: rerun it)",
        );
        refused(
            &with(&doc, "/rows", Some(Value::Array(vec![]))),
            "rows: empty: the run measured nothing",
        );
        refused(
            &with(&doc, "/rows/1/size", Some(8.into())),
            "rows[1].size: 8 after 8: the sizes must increase strictly",
        );
        refused(
            &with(&doc, "/rows/0/out_of_place/busbw_gbs", Some((-1.0).into())),
            "rows[0].out_of_place.busbw_gbs: -1 is negative",
        );
        refused(
            &with(
                &doc,
                "/rows/0/in_place/per_rank_time_us",
                Some(vec![1.0].into()),
            ),
            "rows[0].in_place.per_rank_time_us: 1 time(s) for 2 rank(s)",
        );
        refused(
            &with(
                &doc,
                "/rows/0/out_of_place/per_rank_wrong/1",
                Some(3.into()),
            ),
            "rows[0].out_of_place.wrong: Some(0) is not the sum of per_rank_wrong (Some(3))",
        );
        refused(
            &with(&doc, "/wrong", Some(2.into())),
            "wrong: 2 is not the sum of the rows' (0)",
        );
        refused(
            &with(&doc, "/tool", Some("vl_broadcast_perf".into())),
            "collective: \"all_reduce\" is not what vl_broadcast_perf runs (\"broadcast\")",
        );
        refused(
            &with(&doc, "/ranks/1", None),
            "ranks: 1 record(s) for nranks 2",
        );
        let e =
            check_report(&with(&doc, "/tool", Some("all_reduce_perf".into())), None).unwrap_err();
        assert!(e.starts_with("tool: \"all_reduce_perf\" is not one of verbs-lab's collectives (vl_all_reduce_perf,"), "{e}");
    }

    #[test]
    fn checks_the_sizes_given() {
        let doc = read("tests/golden/lat.json");
        let got = check_report(&doc, None).unwrap();
        assert_eq!(check_report(&doc, Some(&got)), Ok(got.clone()));
        let mut more = got.clone();
        more.push(1 << 20);
        assert_eq!(
            check_report(&doc, Some(&more)).unwrap_err(),
            format!("the results hold the sizes {got:?}, expected {more:?}")
        );
    }
}
