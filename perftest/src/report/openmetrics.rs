//! `--openmetrics FILE`: a run in the text exposition format that Prometheus scrapes and
//! node_exporter's textfile collector reads (`--collector.textfile.directory`), so that a
//! fleet's results land in Prometheus without a parser of ours.
//!
//! Every sample carries the labels that say what was measured — `tool`, `role`, `device`,
//! `port`, `transport` and, per row, `bytes` — and metric names carry their unit in base units
//! (bytes per second, seconds), as both formats ask. Families:
//!
//! | family | what |
//! |---|---|
//! | `vl_run_info` | 1, with the version and the run's parameters as labels |
//! | `vl_bandwidth_average_bytes_per_second` | BW average of each size |
//! | `vl_bandwidth_peak_bytes_per_second` | BW peak of each size |
//! | `vl_message_rate_per_second` | MsgRate of each size |
//! | `vl_latency_seconds` | each size's statistics, label `stat` (min, median, avg, max, p99, p99.9, p99.99, stdev) |
//! | `vl_iterations` | iterations of each size |
//! | `vl_nic_counter_delta` | how much each port counter rose during the run, label `counter` |
//! | `vl_gate_passed` | 1 or 0 per gate given (label `gate`, as typed) |
//!
//! The file ends with OpenMetrics' `# EOF`, which the classic text format reads as a comment.
//! All families are gauges: a run is a measurement, not a counter that grows.

use std::fmt::Write as _;

use crate::counters::Snapshot;
use crate::measure::result::{BwRow, LatRow, Rows, RunResult};

/// A label value with `\`, `"` and newlines escaped.
pub fn esc(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// `{k="v",...}` from pairs.
pub fn labels(pairs: &[(&str, String)]) -> String {
    let inner: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", esc(v)))
        .collect();
    format!("{{{}}}", inner.join(","))
}

/// `base`'s labels, then `extra`'s.
pub fn labels_with(base: &[(&str, String)], extra: &[(&str, String)]) -> String {
    let all: Vec<(&str, String)> = base.iter().chain(extra).cloned().collect();
    labels(&all)
}

/// A number as both formats read it (`+Inf`, `-Inf`, `NaN` spelled out).
pub fn value(x: f64) -> String {
    if x.is_nan() {
        "NaN".into()
    } else if x.is_infinite() {
        if x > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else {
        format!("{x}")
    }
}

/// Writes one family's head and samples into `out`.
pub struct Family<'a> {
    pub out: &'a mut String,
}

impl Family<'_> {
    pub fn head(&mut self, name: &str, help: &str, unit: Option<&str>) {
        let _ = writeln!(self.out, "# TYPE {name} gauge");
        if let Some(u) = unit {
            let _ = writeln!(self.out, "# UNIT {name} {u}");
        }
        let _ = writeln!(self.out, "# HELP {name} {help}");
    }
    pub fn sample(&mut self, name: &str, labels: &str, v: f64) {
        let _ = writeln!(self.out, "{name}{labels} {}", value(v));
    }
    /// `vl_gate_passed`: one sample per gate (`base`'s labels and `gate`, as typed), 1 when it
    /// held and 0 when it failed; nothing when no gate was given.
    pub fn gates(&mut self, base: &[(&str, String)], gates: &[(String, bool)]) {
        if gates.is_empty() {
            return;
        }
        let name = "vl_gate_passed";
        self.head(
            name,
            "1 when the gate held on every row, 0 when it failed.",
            None,
        );
        for (g, ok) in gates {
            let l = labels_with(base, &[("gate", g.clone())]);
            self.sample(name, &l, f64::from(u8::from(*ok)));
        }
    }
}

/// Whether each gate given passed: `(gate as typed, passed)`.
pub type GateVerdicts = Vec<(String, bool)>;

/// The whole file.
pub fn render(result: &RunResult, counters: Option<&Snapshot>, gates: &GateVerdicts) -> String {
    let info = &result.info;
    let base: Vec<(&str, String)> = vec![
        ("tool", info.tool.clone()),
        ("role", info.role.clone()),
        ("device", info.device.clone()),
        ("port", info.ib_port.to_string()),
        ("transport", info.conn_type.clone()),
    ];
    let with = |extra: &[(&str, String)]| labels_with(&base, extra);
    let mut out = String::new();
    let mut f = Family { out: &mut out };

    f.head(
        "vl_run_info",
        "A run of a vl_* tool; its labels say which version ran and with what parameters.",
        None,
    );
    let info_labels = with(&[
        ("version", info.version.clone()),
        ("test", info.test.name().to_string()),
        ("gid_index", info.gid_index.to_string()),
        ("mtu", info.qp.mtu.to_string()),
        ("iterations", info.iterations.to_string()),
        ("warmup_iterations", info.warmup_iterations.to_string()),
        ("bidirectional", info.bidirectional.to_string()),
    ]);
    f.sample("vl_run_info", &info_labels, 1.0);

    match &result.rows {
        Rows::Bw(rows) => bw_families(&mut f, &base, rows),
        Rows::Lat(rows) => lat_families(&mut f, &base, rows),
    }

    if let Some(d) = counters {
        let name = "vl_nic_counter_delta";
        f.head(
            name,
            "How much each of the port's NIC counters rose during the run.",
            None,
        );
        for (k, v) in d {
            f.sample(name, &with(&[("counter", k.clone())]), *v as f64);
        }
    }
    f.gates(&base, gates);
    out.push_str("# EOF\n");
    out
}

/// `base` and the row's size (`bytes`) as labels.
fn size_labels(base: &[(&str, String)], bytes: u64) -> String {
    labels_with(base, &[("bytes", bytes.to_string())])
}

/// The families of a bandwidth run: BW average, BW peak, MsgRate and iterations of each size.
fn bw_families(f: &mut Family<'_>, base: &[(&str, String)], rows: &[BwRow]) {
    let size = |bytes: u64| size_labels(base, bytes);
    let name = "vl_bandwidth_average_bytes_per_second";
    f.head(
        name,
        "BW average: bytes moved from the first post to the last completion.",
        Some("bytes_per_second"),
    );
    rows.iter()
        .for_each(|r| f.sample(name, &size(r.bytes), r.avg_bps));
    let name = "vl_bandwidth_peak_bytes_per_second";
    f.head(
        name,
        "BW peak: the highest bandwidth over any window of the run.",
        Some("bytes_per_second"),
    );
    rows.iter()
        .for_each(|r| f.sample(name, &size(r.bytes), r.peak_bps));
    let name = "vl_message_rate_per_second";
    f.head(name, "MsgRate: messages completed per second.", None);
    rows.iter()
        .for_each(|r| f.sample(name, &size(r.bytes), r.msg_rate_mpps * 1e6));
    let name = "vl_iterations";
    f.head(name, "Iterations measured at each size.", None);
    rows.iter()
        .for_each(|r| f.sample(name, &size(r.bytes), r.iterations as f64));
}

/// The families of a latency run: each size's statistics (label `stat`) and iterations.
fn lat_families(f: &mut Family<'_>, base: &[(&str, String)], rows: &[LatRow]) {
    let name = "vl_latency_seconds";
    f.head(
        name,
        "Latency statistics of each size (median is perftest's t_typical).",
        Some("seconds"),
    );
    for r in rows {
        let s = &r.stats;
        for (stat, us) in [
            ("min", s.min_us),
            ("median", s.median_us),
            ("avg", s.avg_us),
            ("max", s.max_us),
            ("p99", s.p99_us),
            ("p99.9", s.p999_us),
            ("p99.99", s.p9999_us),
            ("stdev", s.stdev_us),
        ] {
            let l = labels_with(
                base,
                &[("bytes", r.bytes.to_string()), ("stat", stat.to_string())],
            );
            f.sample(name, &l, us / 1e6);
        }
    }
    let name = "vl_iterations";
    f.head(name, "Iterations measured at each size.", None);
    rows.iter()
        .for_each(|r| f.sample(name, &size_labels(base, r.bytes), r.iterations as f64));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(
            labels(&[("a", "x\"y\\z\nw".into())]),
            "{a=\"x\\\"y\\\\z\\nw\"}"
        );
        assert_eq!(value(f64::INFINITY), "+Inf");
        assert_eq!(value(f64::NAN), "NaN");
        assert_eq!(value(1.5e9), "1500000000");
    }
}
