//! The `--json` document: one valid JSON text holding the run parameters and every row of a
//! sweep. (perftest rewrites its file per size, so after `-a` only the last size survives.)
//!
//! Keys carry their unit (`bw_avg_mib_s`, `t_p99_us`); bandwidth is given in both units, so a
//! reader need not know whether `--report_gbits` was used. Non-finite numbers are `null`.
//!
//! The layout is the structs of [`super::schema`], written by serde_json field by field in
//! their order: the document is [`Report`], its run block [`Run`], its rows [`BwJson`] and
//! [`LatJson`]. This file fills them from a [`RunResult`].

use std::borrow::Cow;
use std::time::Duration;

use serde::Serialize;
use serde_json::{Map, Value};

use super::schema::{
    AggregateRow, BwJson, CpuUtil, LatJson, Pinned, Process, ProcessRow, Report, RowJson, Run,
    SpanJson,
};
use super::{round_to, BwUnit};
use crate::measure::aggregate::SizeTotal;
use crate::measure::result::{
    BwRow, LatRow, Metric, ProcessResult, Rows, RunInfo, RunResult, Span,
};

/// The version of this document's layout; raised only for changes that break readers.
pub const FORMAT_VERSION: u32 = 1;

/// The `--json` document, indented, with a final newline.
pub fn render_json(result: &RunResult, report_gbits: bool) -> String {
    render_json_procs(result, &[], report_gbits)
}

/// The `--json` document of a `--procs N` run: as [`render_json`], with `"results"` holding
/// the totals and `"processes"` beside it: `[{"process", "pid", "cpu", "results"}, ..]`.
/// Without processes, exactly [`render_json`].
pub fn render_json_procs(
    result: &RunResult,
    procs: &[ProcessResult],
    report_gbits: bool,
) -> String {
    render_json_counters(result, procs, report_gbits, None, None)
}

/// [`render_json_procs`] with the run's NIC counter deltas (see `counters.rs`) as
/// `"counters": {"hw_counters/sent_pkts": N, ..}` after `"results"`, and with `--cpu_util`
/// `"cpu_util": {"util_percent": [..], "process_cpu_s": S}`.
pub fn render_json_counters(
    result: &RunResult,
    procs: &[ProcessResult],
    report_gbits: bool,
    counters: Option<&crate::counters::Snapshot>,
    cpu: Option<&crate::cpu_util::CpuReport>,
) -> String {
    let info = &result.info;
    let doc = Report {
        tool: Cow::Borrowed(&info.tool),
        version: Cow::Borrowed(&info.version),
        format: FORMAT_VERSION,
        run: Run::new(info, BwUnit::new(report_gbits)),
        results: match &result.rows {
            Rows::Bw(rows) => rows.iter().map(|r| RowJson::Bw(r.into())).collect(),
            Rows::Lat(rows) => rows.iter().map(|r| RowJson::Lat(r.into())).collect(),
        },
        counters: counters.map(counters_object),
        cpu_util: cpu.map(CpuUtil::new),
        processes: (!procs.is_empty()).then(|| procs.iter().map(Process::new).collect()),
        aggregate: (!procs.is_empty()).then(|| {
            let totals = crate::measure::aggregate::aggregate(procs).unwrap_or_default();
            totals.iter().map(AggregateRow::new).collect()
        }),
    };
    pretty_json(&doc)
}

/// `doc` indented by two spaces per level, with a final newline: the layout of every JSON file
/// perftest writes.
pub fn pretty_json(doc: &impl Serialize) -> String {
    let mut text = serde_json::to_string_pretty(doc).expect("a report always serializes");
    text.push('\n');
    text
}

/// Counter deltas as one object, by name, in the snapshot's order.
pub(crate) fn counters_object(c: &crate::counters::Snapshot) -> Map<String, Value> {
    c.iter()
        .map(|(k, v)| (k.clone(), Value::from(*v)))
        .collect()
}

impl Run<'_> {
    fn new(info: &RunInfo, unit: BwUnit) -> Run<'_> {
        let (metric, report_unit) = match info.metric {
            Metric::Bw => ("bw", unit.name()),
            Metric::Lat => ("lat", "usec"),
        };
        Run {
            test: info.test.perftest_name().into(),
            metric: metric.into(),
            title: super::text::title(info),
            role: info.role.as_str().into(),
            device: info.device.as_str().into(),
            ib_port: info.ib_port,
            link_layer: info.link_layer.as_str().into(),
            gid_index: info.gid_index,
            gid: info.gid.as_str().into(),
            remote_gid: info.remote_gid.as_str().into(),
            connection_type: info.conn_type.as_str().into(),
            qp: info.qp,
            atomic_type: info.atomic_type.as_deref().map(Cow::Borrowed),
            bidirectional: info.bidirectional,
            use_events: info.use_events,
            duration_s: info.duration.map(|d| d.as_secs_f64()),
            iterations: info.iterations,
            warmup_iterations: info.warmup_iterations,
            qp_timeout: info.qp_timeout,
            cpu: Pinned::new(&info.cpu),
            report_unit: report_unit.into(),
            data_exchange: "tcp".into(),
            local_endpoints: Cow::Borrowed(&info.local_endpoints),
            remote_endpoints: Cow::Borrowed(&info.remote_endpoints),
        }
    }
}

/// A rate in bytes/s as `unit`'s figure, rounded to its decimals.
fn in_unit(unit: BwUnit, bps: f64) -> f64 {
    round_to(unit.convert(bps), unit.decimals())
}

impl From<&BwRow> for BwJson {
    fn from(r: &BwRow) -> BwJson {
        let (m, g) = (BwUnit::MiBps, BwUnit::Gbps);
        BwJson {
            bytes: r.bytes,
            iterations: r.iterations,
            bw_peak_mib_s: in_unit(m, r.peak_bps),
            bw_avg_mib_s: in_unit(m, r.avg_bps),
            bw_peak_gbit_s: in_unit(g, r.peak_bps),
            bw_avg_gbit_s: in_unit(g, r.avg_bps),
            msg_rate_mpps: round_to(r.msg_rate_mpps, 9),
            elapsed_us: micros(r.elapsed),
        }
    }
}

impl From<&LatRow> for LatJson {
    fn from(r: &LatRow) -> LatJson {
        let st = &r.stats;
        let us = |x: f64| round_to(x, 3);
        LatJson {
            bytes: r.bytes,
            iterations: r.iterations,
            samples: st.samples,
            t_min_us: us(st.min_us),
            t_median_us: us(st.median_us),
            t_avg_us: us(st.avg_us),
            t_stdev_us: us(st.stdev_us),
            t_p99_us: us(st.p99_us),
            t_p99_9_us: us(st.p999_us),
            t_p99_99_us: us(st.p9999_us),
            t_max_us: us(st.max_us),
            tps: r.tps.map(|t| round_to(t, 3)),
        }
    }
}

impl CpuUtil {
    fn new(c: &crate::cpu_util::CpuReport) -> CpuUtil {
        CpuUtil {
            util_percent: c.util_percent.iter().map(|u| round_to(*u, 2)).collect(),
            process_cpu_s: round_to(c.process_cpu.as_secs_f64(), 6),
        }
    }
}

impl Pinned<'_> {
    fn new(cpu: &Option<(usize, String)>) -> Option<Pinned<'_>> {
        cpu.as_ref().map(|(cpu, why)| Pinned {
            cpu: *cpu,
            why: why.as_str().into(),
        })
    }
}

impl Process<'_> {
    fn new(p: &ProcessResult) -> Process<'_> {
        let results = p.rows.iter().enumerate().map(|(j, r)| ProcessRow {
            row: r.into(),
            span: p.spans.get(j).map(SpanJson::from),
        });
        Process {
            process: p.process,
            pid: p.pid,
            cpu: Pinned::new(&p.cpu),
            results: results.collect(),
        }
    }
}

impl From<&Span> for SpanJson {
    fn from(s: &Span) -> SpanJson {
        SpanJson {
            start_ns: s.start_ns,
            end_ns: s.end_ns,
        }
    }
}

impl AggregateRow {
    fn new(t: &SizeTotal) -> AggregateRow {
        let (m, g) = (BwUnit::MiBps, BwUnit::Gbps);
        AggregateRow {
            bytes: t.row.bytes,
            start_ns: t.union.start_ns,
            end_ns: t.union.end_ns,
            union_us: micros(t.union.len()),
            overlap_us: micros(t.overlap),
            overlap_fraction: round_to(t.overlap_fraction(), 6),
            total_bytes: t.bytes,
            total_messages: t.messages,
            bw_avg_mib_s: in_unit(m, t.row.avg_bps),
            bw_avg_gbit_s: in_unit(g, t.row.avg_bps),
            msg_rate_mpps: round_to(t.row.msg_rate_mpps, 9),
            sum_bw_avg_mib_s: in_unit(m, t.sum.avg_bps),
            sum_bw_avg_gbit_s: in_unit(g, t.sum.avg_bps),
            sum_msg_rate_mpps: round_to(t.sum.msg_rate_mpps, 9),
        }
    }
}

/// A duration in microseconds, to the nanosecond.
fn micros(d: Duration) -> f64 {
    round_to(d.as_secs_f64() * 1e6, 3)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What serde_json writes for the floats of a report: the shortest text that reads back
    /// as the same number, and `null` for what JSON cannot hold.
    #[test]
    fn floats_are_shortest_and_non_finite_ones_null() {
        let text = |x: f64| serde_json::to_string(&x).unwrap();
        assert_eq!(text(3.0), "3.0");
        assert_eq!(text(1163.05), "1163.05");
        assert_eq!(text(1e-7), "1e-7");
        assert_eq!(text(0.000042), "0.000042");
        assert_eq!(text(f64::NAN), "null");
        assert_eq!(text(f64::INFINITY), "null");
        assert_eq!(text(f64::NEG_INFINITY), "null");
        let row = serde_json::to_value(LatJson::from(&LatRow {
            bytes: 2,
            iterations: 1,
            stats: crate::measure::stats::LatStats {
                samples: 1,
                min_us: 0.0,
                max_us: 0.0,
                median_us: 0.0,
                avg_us: f64::NAN,
                stdev_us: 0.0,
                p99_us: 0.0,
                p999_us: 0.0,
                p9999_us: 0.0,
            },
            tps: Some(f64::INFINITY),
        }))
        .unwrap();
        assert_eq!(row["t_avg_us"], Value::Null);
        assert_eq!(row["tps"], Value::Null);
        assert_eq!(row["t_min_us"], 0.0);
    }

    #[test]
    fn counters_keep_their_order_and_the_last_of_a_name() {
        let snap = vec![
            ("b".to_string(), 2),
            ("a".to_string(), 1),
            ("b".to_string(), 3),
        ];
        let o = counters_object(&snap);
        assert_eq!(serde_json::to_string(&o).unwrap(), r#"{"b":3,"a":1}"#);
    }
}
