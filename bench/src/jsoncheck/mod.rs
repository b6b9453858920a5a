//! What a valid `--json` report is: the checks of `vl_jsoncheck`, which reads a report into
//! the writers' own structs ([`vl_perftest::report::schema`] for the vl_* perftest tools,
//! [`vl_coll::perf::report::CollJson`] for the collectives) and then checks what the types
//! cannot say. No number anywhere in either layout is negative; and
//!
//! * a vl_* perftest report (`"results"`): a known `tool` whose `run.test` and `run.metric`
//!   match it, the layout `format` this checker knows, at least one row (only a latency
//!   server may have measured nothing), sizes strictly increasing (a `--run_infinitely`
//!   report of a `-D` run repeats its one size), positive `iterations` and average, a peak
//!   at least the average (a peak of 0: not measured, `--no_peak`), latency percentiles in
//!   order; with `--procs`, each process's rows and the aggregate alike;
//! * a collective's report (`"rows"`): see `jsoncheck/coll.rs`.
//!
//! Each refusal names the JSON path (`results[2].bw_avg_mib_s`) and says what is wrong.

use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;

use vl_perftest::measure::result::{Metric, QpSettings, TestKind};
use vl_perftest::params::Tool;
use vl_perftest::report::schema::{
    AggregateRow, BwJson, Document, LatJson, Process, ReportParts, Run, SpanJson,
};
use vl_perftest::report::FORMAT_VERSION;

/// `v` read as a `T`; on failure the message names the path of the field at fault: the key
/// whose removal changes the error (a field of the wrong type or value), else `path` itself
/// (a missing field names itself).
pub(crate) fn typed<T: DeserializeOwned>(v: &Value, path: &str) -> Result<T, String> {
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
pub(crate) fn typed_rows<T: DeserializeOwned>(
    rows: &[Value],
    path: &str,
) -> Result<Vec<T>, String> {
    rows.iter()
        .enumerate()
        .map(|(i, r)| typed(r, &format!("{path}[{i}]")))
        .collect()
}

/// No number anywhere in `v` (at `path`) is negative: no figure of either layout can be
/// (times, rates, counts, sizes, CPU shares), so one walk checks them all, whatever fields a
/// later layout adds. (JSON has no infinities: the writers put `null` for them, which the typed
/// read refuses.)
fn no_negative_number(v: &Value, path: &str) -> Result<(), String> {
    match v {
        Value::Number(n) if n.as_f64().is_some_and(|x| x < 0.0) => Err(format!(
            "{path}: {} is negative",
            n.as_f64().unwrap_or(f64::NAN)
        )),
        Value::Array(a) => a
            .iter()
            .enumerate()
            .try_for_each(|(i, x)| no_negative_number(x, &format!("{path}[{i}]"))),
        Value::Object(o) => o.iter().try_for_each(|(k, x)| match path {
            "" => no_negative_number(x, k),
            p => no_negative_number(x, &format!("{p}.{k}")),
        }),
        _ => Ok(()),
    }
}

/// `sizes` (of the rows at `path`, each's size under `key`) increase strictly; with
/// `repeat_ok`, all equal is allowed too (a `--run_infinitely` report's one size).
pub(crate) fn increasing(
    path: &str,
    key: &str,
    sizes: &[u64],
    repeat_ok: bool,
) -> Result<(), String> {
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

/// What a row of a report must satisfy beyond its type: the checks the types cannot say.
trait Check {
    /// `Err` names the JSON `path` of the row and what is wrong with it.
    fn check(&self, path: &str) -> Result<(), String>;
}

impl Check for BwJson {
    fn check(&self, path: &str) -> Result<(), String> {
        row_head(path, self.bytes, self.iterations)?;
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
        Ok(())
    }
}

impl Check for SpanJson {
    fn check(&self, path: &str) -> Result<(), String> {
        let (s, e) = (self.start_ns, self.end_ns);
        if e < s {
            return Err(format!("{path}.end_ns: {e} is before start_ns {s}"));
        }
        Ok(())
    }
}

impl Check for LatJson {
    fn check(&self, path: &str) -> Result<(), String> {
        row_head(path, self.bytes, self.iterations)?;
        let times = [
            self.t_min_us,
            self.t_median_us,
            self.t_avg_us,
            self.t_stdev_us,
            self.t_p99_us,
            self.t_p99_9_us,
            self.t_p99_99_us,
            self.t_max_us,
        ];
        if self.samples == 0 {
            // A server's `-n 1`: its one answer starts a sample that no later answer ends.
            if times.iter().all(|t| t.is_nan()) {
                return Ok(());
            }
            return Err(format!(
                "{path}.samples: 0 ({} bytes), yet the row has times: a row without samples has \
                 null times",
                self.bytes
            ));
        }
        if times.iter().any(|t| t.is_nan()) {
            return Err(format!(
                "{path}: a time is null in a row of {} samples",
                self.samples
            ));
        }
        let order = [
            ("t_min_us", self.t_min_us),
            ("t_median_us", self.t_median_us),
            ("t_p99_us", self.t_p99_us),
            ("t_p99_9_us", self.t_p99_9_us),
            ("t_p99_99_us", self.t_p99_99_us),
        ];
        positive_avg(path, "t_avg_us", self.bytes, self.t_avg_us)?;
        if let Some(w) = order.windows(2).find(|w| w[1].1 < w[0].1) {
            return Err(format!(
                "{path}.{}: {} is below {} {}: the statistics must be in order",
                w[1].0, w[1].1, w[0].0, w[0].1
            ));
        }
        // The percentiles come from a histogram (3 significant digits, each bucket's highest
        // value); they are clamped to t_max_us now (stats.rs), but the reports of earlier
        // versions have percentiles above it, and those stay readable. The average is exact.
        if !(self.t_min_us..=self.t_max_us).contains(&self.t_avg_us) {
            return Err(format!(
                "{path}.t_avg_us: {} is outside t_min_us..=t_max_us ({}..={})",
                self.t_avg_us, self.t_min_us, self.t_max_us
            ));
        }
        Ok(())
    }
}

impl Check for AggregateRow {
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
        Ok(())
    }
}

/// The vl_* perftest tools: name, `run.test`, `run.metric`.
fn perftest_tools() -> Vec<(String, (&'static str, &'static str))> {
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
                .map(move |&(m, name)| (Tool::new(k, m).name(), (k.perftest_name(), name)))
        })
        .collect()
}

/// What `tools` (each with its name) says of `tool`, the one that wrote the report; a name
/// not among them is refused, listing them (`kind`: which of verbs-lab's tools they are).
pub(crate) fn known_tool<'t, T>(
    tools: &'t [(String, T)],
    tool: &str,
    kind: &str,
) -> Result<&'t T, String> {
    match tools.iter().find(|t| t.0 == tool) {
        Some((_, what)) => Ok(what),
        None => {
            let names: Vec<&str> = tools.iter().map(|t| t.0.as_str()).collect();
            Err(format!(
                "tool: \"{tool}\" is not one of verbs-lab's {kind} ({})",
                names.join(", ")
            ))
        }
    }
}

/// Bandwidth rows at `path`, checked, with the interval of a `--procs` process's row
/// ([`ProcessRow`]) where one is given; their sizes.
fn bw_rows(rows: &[Value], path: &str) -> Result<Vec<u64>, String> {
    let mut sizes = Vec::with_capacity(rows.len());
    for (i, v) in rows.iter().enumerate() {
        let path = format!("{path}[{i}]");
        let row: BwJson = typed(v, &path)?;
        row.check(&path)?;
        if v.get("start_ns").is_some() || v.get("end_ns").is_some() {
            typed::<SpanJson>(v, &path)?.check(&path)?;
        }
        sizes.push(row.bytes);
    }
    Ok(sizes)
}

/// A vl_* perftest tool's report: its sizes.
fn check_perftest(doc: &Value) -> Result<Vec<u64>, String> {
    let rep: ReportParts = typed(doc, "")?;
    let tools = perftest_tools();
    let &(test, metric) = known_tool(&tools, &rep.tool, "perftest tools")?;
    if rep.version.is_empty() {
        return Err("version: empty".into());
    }
    if rep.format != FORMAT_VERSION {
        return Err(format!(
            "format: {} is not the layout this checker reads ({FORMAT_VERSION})",
            rep.format
        ));
    }
    // The QP settings on their own first: `Run` reads them (flattened) only once its own keys
    // are all found, so `typed` would blame a fault in one of them on the first of those keys
    // it takes away.
    if rep.run.is_object() {
        typed::<QpSettings>(&rep.run, "run")?;
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
            let rows: Vec<LatJson> = typed_rows(&rep.results, "results")?;
            for (i, r) in rows.iter().enumerate() {
                r.check(&format!("results[{i}]"))?;
            }
            rows.iter().map(|r| r.bytes).collect()
        }
    };
    // --run_infinitely runs one size for -D periods, a row each.
    let infinite = run.duration_s.is_some() && metric == "bw";
    increasing("results", "bytes", &sizes, infinite)?;
    for c in rep.counters.iter().flat_map(|c| c.values()) {
        u64::deserialize(c).map_err(|e| format!("counters: {e}"))?;
    }
    for (p, v) in rep.processes.iter().flatten().enumerate() {
        let path = format!("processes[{p}]");
        let proc: Process<Value> = typed(v, &path)?;
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

/// The report checks: a vl_* perftest report or a collective's, whose rows' sizes are `sizes`
/// (if given).
pub fn check_report(doc: &Value, sizes: Option<&[u64]>) -> Result<Vec<u64>, String> {
    if !doc.is_object() {
        return Err("the report is not a JSON object".into());
    }
    if doc.get("tool").and_then(Value::as_str) == Some(vl_coll::fabric::report::TOOL) {
        no_negative_number(doc, "")?;
        return fabric::check_fabric(doc);
    }
    let kind = Document::of(doc);
    let got = match kind {
        Some(Document::Report) => {
            no_negative_number(doc, "")?;
            check_perftest(doc)?
        }
        // A collective's report that lost its "collective" is still read as one, to name it.
        Some(Document::CollReport) | None if doc.get("rows").is_some() => {
            no_negative_number(doc, "")?;
            coll::check_coll(doc)?
        }
        Some(other) => {
            return Err(format!(
                "the file is {}, not a vl_* tool's or a collective's --json report",
                other.describe()
            ))
        }
        None => {
            return Err(
                "the report has neither \"results\" (a vl_* perftest tool's --json) nor \
                 \"rows\" (a collective's --json)"
                    .into(),
            )
        }
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

mod coll;
mod fabric;

#[cfg(test)]
mod tests;
