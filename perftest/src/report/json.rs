//! The `--json` document: one valid JSON text holding the run parameters and every row of a
//! sweep. (perftest rewrites its file per size, so after `-a` only the last size survives.)
//!
//! Keys carry their unit (`bw_avg_mib_s`, `t_p99_us`); bandwidth is given in both units, so a
//! reader need not know whether `--report_gbits` was used. Non-finite numbers are `null`.

use std::time::Duration;

use verbs_lab::json::{Object, Value};

use super::{round_to, BwUnit};
use crate::aggregate::SizeTotal;
use crate::result::{BwRow, LatRow, Metric, ProcessResult, Rows, RunInfo, RunResult};

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
    let results: Vec<Value> = match &result.rows {
        Rows::Bw(rows) => rows.iter().map(|r| bw_row(r).into()).collect(),
        Rows::Lat(rows) => rows.iter().map(|r| lat_row(r).into()).collect(),
    };
    let doc = Object::new()
        .field("tool", &info.tool)
        .field("version", &info.version)
        .field("format", FORMAT_VERSION)
        .field("run", run_object(info, BwUnit::new(report_gbits)))
        .field("results", results);
    let doc = match counters {
        Some(c) => doc.field("counters", counters_object(c)),
        None => doc,
    };
    let doc = match cpu {
        Some(c) => doc.field(
            "cpu_util",
            Object::new()
                .field(
                    "util_percent",
                    Value::array(c.util_percent.iter().map(|u| round_to(*u, 2))),
                )
                .field("process_cpu_s", round_to(c.process_cpu.as_secs_f64(), 6)),
        ),
        None => doc,
    };
    let doc = if procs.is_empty() {
        doc
    } else {
        let list: Vec<Value> = procs.iter().map(|p| process(p).into()).collect();
        let sums: Vec<Value> = crate::aggregate::aggregate(procs)
            .unwrap_or_default()
            .iter()
            .map(|t| aggregate_row(t).into())
            .collect();
        doc.field("processes", list).field("aggregate", sums)
    };
    let mut text = doc.pretty();
    text.push('\n');
    text
}

/// Counter deltas as one object, by name.
pub(crate) fn counters_object(c: &crate::counters::Snapshot) -> Object {
    c.iter()
        .fold(Object::new(), |o, (k, v)| o.field(k.as_str(), *v))
}

/// One process of a `--procs` run: who, where, and its rows (in the layout of `"results"`,
/// each with its interval: `start_ns` and `end_ns` on the machine's monotonic clock).
fn process(p: &ProcessResult) -> Object {
    let cpu = p
        .cpu
        .as_ref()
        .map(|(cpu, why)| Object::new().field("cpu", *cpu).field("why", why));
    let rows: Vec<Value> = p
        .rows
        .iter()
        .enumerate()
        .map(|(j, r)| {
            let row = bw_row(r);
            match p.spans.get(j) {
                Some(s) => row.field("start_ns", s.start_ns).field("end_ns", s.end_ns),
                None => row,
            }
            .into()
        })
        .collect();
    Object::new()
        .field("process", p.process)
        .field("pid", p.pid)
        .field("cpu", cpu)
        .field("results", rows)
}

/// One size of a `--procs` run (see `crate::aggregate`): the union of the processes'
/// intervals, their overlap, the bytes and messages of all, the aggregate over the union and,
/// labelled `sum_*`, the plain sum of the processes' own figures.
fn aggregate_row(t: &SizeTotal) -> Object {
    let (m, g) = (BwUnit::MiBps, BwUnit::Gbps);
    let us = |d: Duration| round_to(secs(d) * 1e6, 3);
    Object::new()
        .field("bytes", t.row.bytes)
        .field("start_ns", t.union.start_ns)
        .field("end_ns", t.union.end_ns)
        .field("union_us", us(t.union.len()))
        .field("overlap_us", us(t.overlap))
        .field("overlap_fraction", round_to(t.overlap_fraction(), 6))
        .field("total_bytes", t.bytes)
        .field("total_messages", t.messages)
        .field("bw_avg_mib_s", in_unit(m, t.row.avg_bps))
        .field("bw_avg_gbit_s", in_unit(g, t.row.avg_bps))
        .field("msg_rate_mpps", round_to(t.row.msg_rate_mpps, 9))
        .field("sum_bw_avg_mib_s", in_unit(m, t.sum.avg_bps))
        .field("sum_bw_avg_gbit_s", in_unit(g, t.sum.avg_bps))
        .field("sum_msg_rate_mpps", round_to(t.sum.msg_rate_mpps, 9))
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// The run parameters: what the header block says, and more.
pub(crate) fn run_object(info: &RunInfo, unit: BwUnit) -> Object {
    let metric = match info.metric {
        Metric::Bw => "bw",
        Metric::Lat => "lat",
    };
    let cpu = info
        .cpu
        .as_ref()
        .map(|(cpu, why)| Object::new().field("cpu", *cpu).field("why", why));
    let unit_name = match info.metric {
        Metric::Bw => match unit {
            BwUnit::MiBps => "MiB/s",
            BwUnit::Gbps => "Gb/s",
        },
        Metric::Lat => "usec",
    };
    Object::new()
        .field("test", info.test.perftest_name())
        .field("metric", metric)
        .field("title", super::text::title(info))
        .field("role", &info.role)
        .field("device", &info.device)
        .field("ib_port", info.ib_port)
        .field("link_layer", &info.link_layer)
        .field("gid_index", info.gid_index)
        .field("gid", &info.gid)
        .field("remote_gid", &info.remote_gid)
        .field("connection_type", &info.conn_type)
        .field("mtu", info.mtu)
        .field("qps", info.qps)
        .field("tx_depth", info.tx_depth)
        .field("rx_depth", info.rx_depth)
        .field("post_list", info.post_list)
        .field("cq_moderation", info.cq_moderation)
        .field("max_inline", info.max_inline)
        .field("outstanding_reads", info.outstanding_reads)
        .field("atomic_type", info.atomic_type.as_deref())
        .field("bidirectional", info.bidirectional)
        .field("use_events", info.use_events)
        .field("duration_s", info.duration.map(secs))
        .field("iterations", info.iterations)
        .field("warmup_iterations", info.warmup_iterations)
        .field("qp_timeout", info.qp_timeout)
        .field("cpu", cpu)
        .field("report_unit", unit_name)
        .field("data_exchange", "tcp")
        .field("local_endpoints", info.local_endpoints.clone())
        .field("remote_endpoints", info.remote_endpoints.clone())
}

/// A rate in bytes/s as `unit`'s figure, rounded to its decimals.
fn in_unit(unit: BwUnit, bps: f64) -> f64 {
    round_to(unit.convert(bps), unit.decimals())
}

fn bw_row(r: &BwRow) -> Object {
    let (m, g) = (BwUnit::MiBps, BwUnit::Gbps);
    Object::new()
        .field("bytes", r.bytes)
        .field("iterations", r.iterations)
        .field("bw_peak_mib_s", in_unit(m, r.peak_bps))
        .field("bw_avg_mib_s", in_unit(m, r.avg_bps))
        .field("bw_peak_gbit_s", in_unit(g, r.peak_bps))
        .field("bw_avg_gbit_s", in_unit(g, r.avg_bps))
        .field("msg_rate_mpps", round_to(r.msg_rate_mpps, 9))
        .field("elapsed_us", round_to(secs(r.elapsed) * 1e6, 3))
}

fn lat_row(r: &LatRow) -> Object {
    let st = &r.stats;
    let us = |x: f64| round_to(x, 3);
    Object::new()
        .field("bytes", r.bytes)
        .field("iterations", r.iterations)
        .field("samples", st.samples)
        .field("t_min_us", us(st.min_us))
        .field("t_median_us", us(st.median_us))
        .field("t_avg_us", us(st.avg_us))
        .field("t_stdev_us", us(st.stdev_us))
        .field("t_p99_us", us(st.p99_us))
        .field("t_p99_9_us", us(st.p999_us))
        .field("t_p99_99_us", us(st.p9999_us))
        .field("t_max_us", us(st.max_us))
        .field("tps", r.tps.map(|t| round_to(t, 3)))
}
