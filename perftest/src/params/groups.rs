//! The option groups a [`Config`](super::Config) holds: the options that travel together
//! through the run — where the peer is, where the QPs live, how long each size runs, the shape
//! of their queues, the QoS of their address vectors, what the QPs ask for, `-R`, CPU pinning and the `--procs` plan.

use std::net::IpAddr;
use std::time::Duration;

use verbs_lab::affinity::CpuList;
use verbs_lab::verbs::Mtu;

use super::{Qos, RunMode};
use crate::measure::result::{Metric, TestKind};

/// Where the peer is and how long to wait for it: the exchange's TCP connection (`conn/listen.rs`,
/// `run.rs`) and `-R`'s rdma_cm addresses start from here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// The server's host (client side), `None` on the server.
    pub host: Option<String>,
    /// `-p`: the exchange's TCP port (a `--procs` worker's: `-p` + its index).
    pub port: u16,
    /// The server's listening address (`--bind`, else every address).
    pub bind: IpAddr,
    /// `--wait`: how long to wait for the peer to connect or accept.
    pub wait: Duration,
}

/// How long each size runs (`-n`, `-D`, `-f`, `--run_infinitely`) and the warm-up before it:
/// what the measuring loops and the progress estimate read, and what both sides must agree on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    pub mode: RunMode,
    /// `-f/--margin` of a `-D` bandwidth run: not measured at either end (`None`: 0).
    pub margin: Option<Duration>,
    /// `--run_infinitely`: periods of `mode`'s duration until the client is stopped.
    pub run_infinitely: bool,
    /// `--warmup`: warm-up iterations per QP and size.
    pub warmup: Warmup,
}

/// Messages per QP a default warm-up sends at most, for small messages.
pub const WARMUP_MOST: u64 = 16;
/// Bytes per QP a default warm-up sends at a size where [`WARMUP_MOST`] messages would send more
/// (above 64 KiB): 8 at 128 KiB, 1 from 1 MiB up.
pub const WARMUP_BYTES: u64 = 1 << 20;

/// The warm-up before each size's measurement: the same traffic, not measured (see
/// docs/measurement.md). perftest warms up only when asked (`--perform_warm_up`); ours does by
/// default, scaled by the message size so that a large size costs about as much as a small one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Warmup {
    /// No `--warmup` given: [`WARMUP_MOST`] messages per QP, fewer above 64 KiB
    /// ([`WARMUP_BYTES`] per QP), at least one.
    Auto,
    /// `--warmup N`: N messages per QP at every size (0: none).
    Iters(u64),
}

impl Warmup {
    /// Warm-up messages per QP before a size of `size` bytes.
    pub fn iters(self, size: u64) -> u64 {
        match self {
            Warmup::Auto => (WARMUP_BYTES / size.max(1)).clamp(1, WARMUP_MOST),
            Warmup::Iters(n) => n,
        }
    }

    /// The most warm-up messages per QP at any size (for the bound of a phase).
    pub fn most(self) -> u64 {
        match self {
            Warmup::Auto => WARMUP_MOST,
            Warmup::Iters(n) => n,
        }
    }

    /// As the HELLO carries it: `auto` or the number.
    pub fn wire(self) -> String {
        match self {
            Warmup::Auto => "auto".into(),
            Warmup::Iters(n) => n.to_string(),
        }
    }

    /// The HELLO's value read back ([`Warmup::wire`]); `None` for anything else.
    pub fn from_wire(value: &str) -> Option<Warmup> {
        match value {
            "auto" => Some(Warmup::Auto),
            v => v.parse().ok().map(Warmup::Iters),
        }
    }
}

/// The shape of every QP's queues: their depths and how the send queue is posted and signaled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueShape {
    /// `-t`: send requests in flight per QP.
    pub tx_depth: u32,
    /// `-r`: receives posted per QP (send tools).
    pub rx_depth: u32,
    /// `-Q` as given (the run caps it by the tx depth and post list).
    pub cq_mod: u32,
    /// `-l`: send requests per `ibv_post_send` call.
    pub post_list: u32,
    /// `--recv_post_list`: receives per `ibv_post_recv` call when they are posted again.
    pub recv_post_list: u32,
}

/// Where a queue value came from when it is not what was typed: `None` for a value typed and
/// used as such, else e.g. `default`, `-t 64 capped to -n`, `follows from -s`. The HELLO
/// carries it after the value, in parentheses (see [`with_origin`]), so that a mismatch message
/// names it; the comparison ignores it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueOrigins {
    pub tx_depth: Option<String>,
    pub rx_depth: Option<String>,
    pub cq_mod: Option<String>,
}

/// A wire value with its origin: `50 (-t 64 capped to -n)`, or `50` for a value as typed.
/// [`crate::proto::check_hello`] compares the part before ` (`.
pub fn with_origin(value: u32, origin: &Option<String>) -> String {
    match origin {
        Some(o) => format!("{value} ({o})"),
        None => value.to_string(),
    }
}

impl QueueShape {
    /// perftest's force_dependecies: a queue deeper than the iterations of a counted run is
    /// never filled, so the depths are cut to them (the receive queue's only where the send
    /// tools post receives) and the header shows the depths used.
    pub(super) fn fitted_to(self, mode: super::RunMode, receives: bool) -> QueueShape {
        let super::RunMode::Iters(n) = mode else {
            return self;
        };
        let n = u32::try_from(n).unwrap_or(u32::MAX);
        QueueShape {
            tx_depth: self.tx_depth.min(n).max(self.post_list),
            rx_depth: if receives {
                self.rx_depth.min(n)
            } else {
                self.rx_depth
            },
            ..self
        }
    }

    /// The CQ moderation the run uses: `-Q`, capped so that every full send queue holds a
    /// signaled request (`tx depth − post list + 1`), else the sender could wait forever.
    pub fn effective_cq_mod(&self) -> u32 {
        self.cq_mod.min(self.tx_depth - self.post_list + 1).max(1)
    }

    /// One signaled send request in how many `tool` posts, as perftest's loops signal them:
    /// the bandwidth tools and send latency every [`effective_cq_mod`](Self::effective_cq_mod)
    /// (send latency posts one request at a time, so at its default tx depth of 1 that is every
    /// SEND, as in perftest, which caps `-Q` by the tx depth); write, read and atomic latency
    /// every request, whatever `-Q` and `-t` say (perftest's loops for those signal each
    /// request and wait for its completion). Never more than the tx depth: a send queue of that
    /// depth (the QP's `max_send_wr`, the header's TX depth) always holds a signaled request
    /// when full, so its unsignaled slots are freed by a completion that will come.
    pub fn signal_period(&self, tool: super::Tool) -> u32 {
        match (tool.metric, tool.kind) {
            (Metric::Lat, TestKind::Write | TestKind::Read | TestKind::Atomic) => 1,
            _ => self.effective_cq_mod(),
        }
    }
}

impl Qos {
    /// Whether `--tclass` or `--flow_label` was given: fields of the GRH.
    pub fn grh_given(&self) -> bool {
        self.tclass.is_some() || !self.flow_labels.is_empty()
    }

    /// `--flow_label`: QP `q` takes the list's entry `q mod len`, as perftest (0 without the
    /// flag).
    pub fn flow_label(&self, q: usize) -> u32 {
        match self.flow_labels.len() {
            0 => 0,
            n => self.flow_labels[q % n],
        }
    }
}

/// `-R` and its options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdmaCm {
    /// The rdma_cm port: `-p` + 1 (on iWARP, rdma_cm's ports are TCP ports, so it cannot share
    /// the exchange's).
    pub port: u16,
    /// `-T`: the type of service (`None`: the CM's default).
    pub tos: Option<u8>,
    /// `--bind_source_ip` (client).
    pub source_ip: Option<std::net::IpAddr>,
    /// `--retry_count`: the connection's transport retry count.
    pub retry_count: u8,
}

/// The flow label's width: 20 bits.
pub const MAX_FLOW_LABEL: u32 = 0xF_FFFF;

/// One `--flow_label` value: decimal or `0x` hex (perftest reads it with strtol base 0), 20 bits.
pub(super) fn parse_flow_label(s: &str) -> Result<u32, String> {
    let s = s.trim();
    let v = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u32::from_str_radix(h, 16),
        None => s.parse::<u32>(),
    }
    .map_err(|_| format!("'{s}' is not a number (decimal or 0x hex)"))?;
    if v > MAX_FLOW_LABEL {
        return Err(format!(
            "{v:#x} does not fit the GRH's 20-bit flow label (at most {MAX_FLOW_LABEL:#x})"
        ));
    }
    Ok(v)
}

/// What the QPs ask for, as given (`None`: the default): `connect` checks or caps each against
/// both ports once they are known, into what the link agreed (`conn::Agreed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Asked {
    /// `-m`: the path MTU (refused above the smaller active MTU of the two ports).
    pub mtu: Option<Mtu>,
    /// `-I`: the inline size (at most what the QP grants).
    pub inline_size: Option<u32>,
    /// `-o`: RDMA reads/atomics in flight per QP (at most what both devices allow).
    pub outstanding: Option<u32>,
}

/// Which CPU the run's thread is pinned to (`pin.rs`): `--cpu`, else one local to the NIC
/// unless `--disable_numa` (the two flags conflict).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pinning {
    /// `--cpu`: the CPUs to choose from (a `--procs` worker takes its own of them).
    pub cpu: Option<CpuList>,
    /// Pin to a CPU local to the NIC when `--cpu` is not given (off with `--disable_numa`).
    pub auto: bool,
}

/// The `--procs` plan (see `procs.rs`): how many worker processes, which one this process is,
/// and when they start each measurement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcsPlan {
    /// `--procs N`: this many worker processes (`None`: one process, no coordinator).
    pub count: Option<u32>,
    /// Set in a worker process: its index and the coordinator's queue.
    pub worker: Option<WorkerOf>,
    /// `--procs-start`: how far ahead of the release the common start time of each
    /// measurement is (zero: no common start).
    pub start: Duration,
}

/// Which worker of a `--procs` run this process is (the hidden `--vl-worker I --vl-queue NAME`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerOf {
    pub index: u32,
    pub queue: String,
}
