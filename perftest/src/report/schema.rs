//! The `--json` document's layout, once: the writer (`report/json.rs`) fills these structs and
//! serde_json writes them field by field in their order; `vl_jsoncheck`
//! (`vl_bench::jsoncheck`) reads a report back into the very same structs. A field added here is
//! written and read alike.
//!
//! Text is a [`Cow`]: the writer borrows it from the run, a reader owns it. A reader that reads
//! the parts one by one, to name the path of a fault (`results[2].bw_avg_mib_s`), holds them
//! as [`Value`]s first: the generic parameters of [`Report`] and [`Process`].

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::measure::result::QpSettings;

/// The JSON documents verbs-lab's readers meet, told apart by their keys, so that a reader
/// given another's file says which it is and which tool reads it (instead of naming a key the
/// file was never meant to have).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Document {
    /// A `vl_*` perftest tool's `--json` (`"results"`): `vl_jsoncheck`, `--plot`.
    Report,
    /// A collective's `--json` (`"rows"` and `"collective"`): `vl_jsoncheck`.
    CollReport,
    /// `scripts/bench-vs-perftest`'s `benchmarks.json` (`"rows"` and `"generated_by"`):
    /// `vl_benchchart`.
    Benchmarks,
    /// perftest's own `--out_json` (`"test_info"`).
    PerftestOutJson,
}

impl Document {
    /// What `doc` is, if it is one of them.
    pub fn of(doc: &Value) -> Option<Document> {
        let has = |k: &str| doc.get(k).is_some();
        if has("test_info") {
            Some(Document::PerftestOutJson)
        } else if has("results") {
            Some(Document::Report)
        } else if has("rows") && has("collective") {
            Some(Document::CollReport)
        } else if has("rows") && has("generated_by") {
            Some(Document::Benchmarks)
        } else {
            None
        }
    }

    /// The document as a person knows it.
    pub fn name(self) -> &'static str {
        match self {
            Document::Report => "a vl_* tool's --json report",
            Document::CollReport => "a collective's --json report",
            Document::Benchmarks => "scripts/bench-vs-perftest's benchmarks.json",
            Document::PerftestOutJson => "perftest's own --out_json layout (\"test_info\")",
        }
    }

    /// [`Document::name`], with the tool of ours that reads it.
    pub fn describe(self) -> String {
        match self {
            Document::Report | Document::CollReport => {
                format!("{} (read by vl_jsoncheck)", self.name())
            }
            Document::Benchmarks => format!("{} (drawn by vl_benchchart)", self.name()),
            Document::PerftestOutJson => self.name().to_string(),
        }
    }

    /// `Ok` if `doc` is a `want` (or none of these: the reader then names what is missing);
    /// otherwise what it is instead, for `reader`'s refusal.
    pub fn expect(doc: &Value, want: Document, reader: &str) -> Result<(), String> {
        match Document::of(doc) {
            Some(d) if d != want => Err(format!(
                "the file is {}; {reader} reads {}",
                d.describe(),
                want.name()
            )),
            _ => Ok(()),
        }
    }
}

/// The whole document: who wrote it, the run, its rows and, as the run asked for them, the
/// counters, the CPU use and a `--procs` run's processes with their aggregate per size.
///
/// `R`, `X`, `P`, `A`: how the run block, a row, a process and an aggregate row are held (the
/// writer's own structs, or [`Value`] for a reader that reads them one by one).
#[derive(Serialize, Deserialize)]
pub struct Report<'a, R = Run<'a>, X = RowJson, P = Process<'a>, A = AggregateRow> {
    /// The binary, e.g. `vl_write_bw`.
    pub tool: Cow<'a, str>,
    /// verbs-lab's version.
    pub version: Cow<'a, str>,
    /// [`super::json::FORMAT_VERSION`].
    pub format: u32,
    pub run: R,
    /// One row per message size (a `--procs` run's totals).
    pub results: Vec<X>,
    /// The NIC counters' deltas, by name, in the order read (each a count).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub counters: Option<Map<String, Value>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_util: Option<CpuUtil>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub processes: Option<Vec<P>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub aggregate: Option<Vec<A>>,
}

/// A report read part by part: each part a [`Value`], to read with its own type and path.
pub type ReportParts = Report<'static, Value, Value, Value, Value>;

/// A row of `"results"`, in the layout of the run's metric.
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
pub enum RowJson {
    Bw(BwJson),
    Lat(LatJson),
}

/// The run parameters: what the header block says, and more.
#[derive(Serialize, Deserialize)]
pub struct Run<'a> {
    /// perftest's name of the test: `RDMA_Write`, `Send`, ...
    pub test: Cow<'a, str>,
    /// `bw` or `lat`.
    pub metric: Cow<'a, str>,
    /// The header's title, e.g. `RDMA_Write BW Test`.
    pub title: String,
    pub role: Cow<'a, str>,
    pub device: Cow<'a, str>,
    pub ib_port: u8,
    pub link_layer: Cow<'a, str>,
    pub gid_index: u32,
    pub gid: Cow<'a, str>,
    pub remote_gid: Cow<'a, str>,
    pub connection_type: Cow<'a, str>,
    /// `mtu` to `outstanding_reads`: keys of this object, in place (flattened).
    #[serde(flatten)]
    pub qp: QpSettings,
    pub atomic_type: Option<Cow<'a, str>>,
    pub bidirectional: bool,
    pub use_events: bool,
    /// `-D`'s seconds; `null` for a run of iterations.
    pub duration_s: Option<f64>,
    pub iterations: u64,
    pub warmup_iterations: u64,
    pub qp_timeout: u8,
    pub cpu: Option<Pinned<'a>>,
    /// The unit of the text output: `MiB/s`, `Gb/s` or `usec`.
    pub report_unit: Cow<'a, str>,
    /// How the peers exchanged their endpoints: always `tcp`.
    pub data_exchange: Cow<'a, str>,
    /// Each QP's endpoint line, as the header shows it.
    pub local_endpoints: Cow<'a, [String]>,
    pub remote_endpoints: Cow<'a, [String]>,
}

/// A bandwidth row: bandwidth in both units, message rate, and the time the size took.
#[derive(Serialize, Deserialize)]
pub struct BwJson {
    pub bytes: u64,
    pub iterations: u64,
    pub bw_peak_mib_s: f64,
    pub bw_avg_mib_s: f64,
    pub bw_peak_gbit_s: f64,
    pub bw_avg_gbit_s: f64,
    pub msg_rate_mpps: f64,
    pub elapsed_us: f64,
}

/// A latency row: the samples' statistics in µs and, with `-D`, transactions per second.
#[derive(Serialize, Deserialize)]
pub struct LatJson {
    pub bytes: u64,
    pub iterations: u64,
    pub samples: u64,
    #[serde(deserialize_with = "nan_if_null")]
    pub t_min_us: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub t_median_us: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub t_avg_us: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub t_stdev_us: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub t_p99_us: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub t_p99_9_us: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub t_p99_99_us: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub t_max_us: f64,
    pub tps: Option<f64>,
}

/// A time of a row without samples (a server's `-n 1`) is written as `null` (serde_json's
/// form of NaN) and read back as NaN.
fn nan_if_null<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

/// `--cpu_util`: each row's CPU utilisation (%) and this process's CPU time (s).
#[derive(Serialize, Deserialize)]
pub struct CpuUtil {
    pub util_percent: Vec<f64>,
    pub process_cpu_s: f64,
}

/// The CPU a process was pinned to, and why (`null` when it was not pinned).
#[derive(Serialize, Deserialize)]
pub struct Pinned<'a> {
    pub cpu: usize,
    pub why: Cow<'a, str>,
}

/// One process of a `--procs` run: who, where, and its rows (in the layout of `"results"`,
/// each with its interval: `start_ns` and `end_ns` on the machine's monotonic clock); `X`, how
/// a row is held.
#[derive(Serialize, Deserialize)]
pub struct Process<'a, X = ProcessRow> {
    pub process: u32,
    pub pid: u32,
    pub cpu: Option<Pinned<'a>>,
    pub results: Vec<X>,
}

/// A process's row and, where it was measured, its interval.
#[derive(Serialize, Deserialize)]
pub struct ProcessRow {
    #[serde(flatten)]
    pub row: BwJson,
    #[serde(flatten)]
    pub span: Option<SpanJson>,
}

/// When a row's measurement ran, in nanoseconds on `CLOCK_MONOTONIC`.
#[derive(Serialize, Deserialize)]
pub struct SpanJson {
    pub start_ns: u64,
    pub end_ns: u64,
}

/// One size of a `--procs` run (see `crate::measure::aggregate`): the union of the processes'
/// intervals, their overlap, the bytes and messages of all, the aggregate over the union and,
/// labelled `sum_*`, the plain sum of the processes' own figures.
#[derive(Serialize, Deserialize)]
pub struct AggregateRow {
    pub bytes: u64,
    pub start_ns: u64,
    pub end_ns: u64,
    pub union_us: f64,
    pub overlap_us: f64,
    pub overlap_fraction: f64,
    pub total_bytes: u64,
    pub total_messages: u64,
    pub bw_avg_mib_s: f64,
    pub bw_avg_gbit_s: f64,
    pub msg_rate_mpps: f64,
    pub sum_bw_avg_mib_s: f64,
    pub sum_bw_avg_gbit_s: f64,
    pub sum_msg_rate_mpps: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one layout serves both ways: each golden document (bandwidth, latency, `--procs`),
    /// read into [`Report`] and written again, is the same text, byte for byte.
    #[test]
    fn a_golden_report_reads_and_writes_back_byte_identical() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden");
        for name in ["bw_sweep", "bw_gbits", "lat", "procs_bw"] {
            let text = std::fs::read_to_string(format!("{dir}/{name}.json")).unwrap();
            let doc: Report = verbs_lab::json::from_str_strict(&text).unwrap();
            assert_eq!(super::super::pretty_json(&doc), text, "{name}");
        }
    }
}
