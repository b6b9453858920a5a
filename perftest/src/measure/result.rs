//! The results of a run, as the report sees them: what was run (the header) and one row per
//! message size. The run loop fills these; the report only prints them.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::measure::stats::LatStats;

verbs_lab::wire_codes! {
    /// Which operation a tool measures. Its code travels in the HELLO and in a `--procs`
    /// worker's report; its name is the short one of the tools' names (`vl_write_bw`).
    #[derive(Hash)]
    pub enum TestKind {
        Write = 1 => "write",
        Read = 2 => "read",
        Send = 3 => "send",
        Atomic = 4 => "atomic",
    }
}

impl TestKind {
    /// perftest's name: "RDMA_Write", "RDMA_Read", "Send", "Atomic".
    pub fn perftest_name(self) -> &'static str {
        match self {
            TestKind::Write => "RDMA_Write",
            TestKind::Read => "RDMA_Read",
            TestKind::Send => "Send",
            TestKind::Atomic => "Atomic",
        }
    }
}

verbs_lab::wire_codes! {
    /// Bandwidth or latency; its code travels beside the [`TestKind`]'s.
    #[derive(Hash)]
    pub enum Metric {
        Bw = 1 => "bw",
        Lat = 2 => "lat",
    }
}

/// Everything the header block and the JSON "run" object say about a run.
#[derive(Debug, Clone, PartialEq)]
pub struct RunInfo {
    /// The binary, e.g. `vl_write_bw`.
    pub tool: String,
    /// verbs-lab's version.
    pub version: String,
    pub test: TestKind,
    pub metric: Metric,
    /// `server` or `client`.
    pub role: String,
    /// "RC", "UC" or "UD".
    pub conn_type: String,
    pub device: String,
    pub ib_port: u8,
    pub link_layer: String,
    pub gid_index: u32,
    pub gid: String,
    pub remote_gid: String,
    pub qp: QpSettings,
    /// "FETCH_AND_ADD" / "CMP_AND_SWAP" for atomics.
    pub atomic_type: Option<String>,
    pub bidirectional: bool,
    /// `--reversed`: the server posts the requests of the one-way test, the client receives.
    pub reversed: bool,
    /// `--send_with_imm`, `--write_with_imm`: the Sends or RDMA Writes carry immediate data
    /// (perftest's `Send_imm` and `RDMA_Write_imm` tests).
    pub with_imm: bool,
    pub use_events: bool,
    pub duration: Option<Duration>,
    pub iterations: u64,
    pub warmup_iterations: u64,
    /// The CPU this process was pinned to, and why (e.g. "NIC-local, NUMA node 0").
    pub cpu: Option<(usize, String)>,
    pub report_gbits: bool,
    pub qp_timeout: u8,
    /// `-R`: the QPs were connected through rdma_cm (perftest's `rdma_cm QPs : ON`).
    pub rdma_cm: bool,
    pub local_endpoints: Vec<String>,
    pub remote_endpoints: Vec<String>,
}

/// How the run's QPs were set up, as the run used them: the header's lines and, under these
/// very names, keys of the JSON "run" object. Not the queues as asked
/// ([`QueueShape`](crate::params::QueueShape)): here `-t` is cut to the iterations, `-Q` is
/// the signaling the loops use and the inline limit is the one the QP took.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct QpSettings {
    /// The path MTU both sides agreed on, in bytes.
    pub mtu: u32,
    /// How many QPs (of all processes, in a `--procs` run's totals).
    pub qps: u32,
    /// Send requests in flight per QP.
    pub tx_depth: u32,
    /// Receives per QP: those posted (the send tools), else `-r`.
    pub rx_depth: u32,
    /// Send requests per `ibv_post_send` call.
    pub post_list: u32,
    /// Receives per `ibv_post_recv` call as they are posted again (`--recv_post_list`); in
    /// JSON only when not 1.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub recv_post_list: u32,
    /// One signaled send request in how many, as the run's loop signals them.
    pub cq_moderation: u32,
    /// The inline limit actually used (read back from the created QP).
    pub max_inline: u32,
    /// RDMA reads and atomics in flight per QP (`-o`, capped by both devices).
    pub outstanding_reads: u32,
}

fn one() -> u32 {
    1
}

fn is_one(v: &u32) -> bool {
    *v == 1
}

impl RunInfo {
    /// perftest's rule for the header's `TX depth`: shown on the side that sends (the client;
    /// the server with `--reversed`), and on both sides of `-b` (latency tests count as
    /// one-way here).
    pub fn perftest_shows_tx_depth(&self) -> bool {
        self.requester() || self.bidirectional
    }

    /// perftest's rule for the header's `RX depth`: shown by the send tools on the receiving
    /// side (the server; the client with `--reversed`), and on both sides of `-b`.
    pub fn perftest_shows_rx_depth(&self) -> bool {
        self.test == TestKind::Send && (!self.requester() || self.bidirectional)
    }

    /// Whether this side is perftest's "client machine": the one that posts a one-way test.
    fn requester(&self) -> bool {
        (self.role == "server") == self.reversed
    }
}

/// One bandwidth row (one message size).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BwRow {
    pub bytes: u64,
    pub iterations: u64,
    /// Highest bandwidth over any window of the run, in bytes per second.
    pub peak_bps: f64,
    /// Total bytes over the time from the first post to the last completion, bytes per second.
    pub avg_bps: f64,
    /// Millions of messages per second.
    pub msg_rate_mpps: f64,
    /// From the first post to the last completion.
    pub elapsed: Duration,
}

/// One latency row (one message size).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LatRow {
    pub bytes: u64,
    pub iterations: u64,
    pub stats: LatStats,
    /// Duration mode (`-D`): transactions per second.
    pub tps: Option<f64>,
}

/// The rows of a run.
#[derive(Debug, Clone, PartialEq)]
pub enum Rows {
    Bw(Vec<BwRow>),
    Lat(Vec<LatRow>),
}

/// A whole run: header and rows.
#[derive(Debug, Clone, PartialEq)]
pub struct RunResult {
    pub info: RunInfo,
    pub rows: Rows,
}

/// Bytes per second → MiB/s (2^20 bytes), perftest's default unit.
pub fn to_mib_per_sec(bps: f64) -> f64 {
    bps / (1024.0 * 1024.0)
}

/// Bytes per second → Gb/s (10^9 bits), perftest's `--report_gbits` unit.
pub fn to_gbits(bps: f64) -> f64 {
    bps * 8.0 / 1e9
}

/// One worker process of a `--procs N` run, as the report shows it beside the totals: which
/// process, where it ran, and its own rows (the totals are in the run's [`RunResult`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessResult {
    /// 0..N-1.
    pub process: u32,
    pub pid: u32,
    /// The CPU it was pinned to, and why.
    pub cpu: Option<(usize, String)>,
    pub rows: Vec<BwRow>,
    /// When each row's measurement ran, on the machine's shared monotonic clock (one per row,
    /// in the same order; see [`Span`]).
    pub spans: Vec<Span>,
}

/// When one measurement ran: from its first post to its last completion, in nanoseconds on
/// `CLOCK_MONOTONIC` — one clock for every process of a machine, so the spans of the processes
/// of a `--procs` run can be compared and merged (see `crate::measure::aggregate`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Span {
    pub start_ns: u64,
    pub end_ns: u64,
}

impl Span {
    /// `end - start` (zero if the end is not after the start).
    pub fn len(&self) -> Duration {
        Duration::from_nanos(self.end_ns.saturating_sub(self.start_ns))
    }

    /// True when the span has no length.
    pub fn is_empty(&self) -> bool {
        self.end_ns <= self.start_ns
    }
}
