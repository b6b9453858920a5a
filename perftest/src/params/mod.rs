//! The command line of the `vl_*` tools: perftest's flags with perftest's meanings and defaults,
//! and their validation — every refusal happens here, before any verbs call, with a message
//! that names the flag.
//!
//! [`Params`] is what clap parses; [`Config::new`] checks it against the tool ([`Tool`]) and
//! resolves the tool-dependent defaults (message size, iterations, queue depths). The run uses
//! only the [`Config`].

use std::fmt;
use std::time::Duration;

use clap::{CommandFactory, FromArgMatches, Parser};
use verbs_lab::affinity::CpuList;
use verbs_lab::verbs::{Mtu, QpType};

use crate::measure::result::{Metric, TestKind};
use crate::output::Verbosity;

mod checks;
mod cli;
pub mod compat;
mod groups;

pub use checks::INFINITE_PERIOD_SECS;
use checks::*;
pub use cli::{DeviceChoice, OutputArgs, OutputFormat, Params, Qos};
pub use groups::{
    with_origin, Asked, Peer, Pinning, ProcsPlan, QueueOrigins, QueueShape, RdmaCm, Timing, Warmup,
    WorkerOf, MAX_FLOW_LABEL, WARMUP_BYTES, WARMUP_MOST,
};

/// Which tool is running: the operation and what is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Tool {
    pub kind: TestKind,
    pub metric: Metric,
}

impl Tool {
    pub const fn new(kind: TestKind, metric: Metric) -> Tool {
        Tool { kind, metric }
    }

    /// The binary's name: `vl_write_bw`, `vl_read_lat`, ...
    pub fn name(self) -> String {
        self.static_name().to_string()
    }

    fn static_name(self) -> &'static str {
        match (self.kind, self.metric) {
            (TestKind::Write, Metric::Bw) => "vl_write_bw",
            (TestKind::Write, Metric::Lat) => "vl_write_lat",
            (TestKind::Read, Metric::Bw) => "vl_read_bw",
            (TestKind::Read, Metric::Lat) => "vl_read_lat",
            (TestKind::Send, Metric::Bw) => "vl_send_bw",
            (TestKind::Send, Metric::Lat) => "vl_send_lat",
            (TestKind::Atomic, Metric::Bw) => "vl_atomic_bw",
            (TestKind::Atomic, Metric::Lat) => "vl_atomic_lat",
        }
    }

    /// What the tool measures, for `--help`.
    pub fn about(self) -> String {
        let op = match self.kind {
            TestKind::Write => "RDMA Write",
            TestKind::Read => "RDMA Read",
            TestKind::Send => "Send",
            TestKind::Atomic => "Atomic",
        };
        match self.metric {
            Metric::Bw => format!(
                "{op} bandwidth between two hosts, perftest-compatible (ib_{}_bw). Start the \
                 server without a host, then the client with the server's host and the same \
                 options.",
                self.kind.name()
            ),
            Metric::Lat => format!(
                "{op} latency between two hosts, perftest-compatible (ib_{}_lat). Start the \
                 server without a host, then the client with the server's host and the same \
                 options.",
                self.kind.name()
            ),
        }
    }
}

verbs_lab::name_table! {
    /// The two atomic operations (`-A`): perftest's spelling, also the header's; parsed in any
    /// case, and by the short names `FAA` and `CAS`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub enum AtomicType {
        #[default]
        FetchAndAdd => "FETCH_AND_ADD" | "FAA",
        CmpAndSwap => "CMP_AND_SWAP" | "CAS",
    }
    unknown: "'{}' is not an atomic type";
    ignore_case: true;
}

/// The exit codes of every `vl_*` tool, as `--help` prints them.
pub const EXIT_CODES: &str = "Exit codes:
  0    the run completed (and met every gate)
  1    the run failed: the error names the step, and the peer's reason when it sent one
       (a port that went down or a fatal device event ends the run at once, named)
  2    bad command line: nothing was run
  3    the run completed but missed a gate (--min-bw, --max-lat)
  130  stopped by SIGINT (Ctrl-C): torn down cleanly, the peer was told
  143  stopped by SIGTERM: torn down cleanly, the peer was told";

/// The largest message `-s` accepts: an SGE length is 32 bits; the port's `max_msg_sz` caps it
/// further once the device is open.
pub const MAX_SIZE: u64 = 1 << 31;
/// The top of the `-a` sweep, as perftest: 2^23 bytes.
pub const SWEEP_MAX: u64 = 1 << 23;
/// `-q` above this is refused (each QP costs a CQ share, buffers and an endpoint record).
pub const MAX_QPS: u32 = 1024;
/// Queue depths above this are refused before asking the device (rxe grants 1 Mi WRs, but a CQ
/// holds at most `max_cqe`, 32767 on rxe).
pub const MAX_DEPTH: u32 = 32768;
/// `-D` above one day is refused.
pub const MAX_DURATION_SECS: u64 = 86_400;
/// The largest UD message: one packet of the largest MTU (4096 bytes).
pub const UD_MAX_MSG: u64 = 4096;
/// Receive buffers of UD messages start with the 40-byte Global Routing Header.
pub const UD_GRH: u64 = 40;
/// The default inline size asked for by the latency tools of send and write on a hardware NIC
/// (read back from the created QP; the bandwidth tools ask for none but still use what the QP
/// grants). On a software device the default is none: see [`Config::inline_request`].
pub const DEFAULT_LAT_INLINE: u32 = 64;
/// Inline sizes above this are refused (no device inlines more than a few hundred bytes).
pub const MAX_INLINE: u32 = 4096;

/// Message sizes of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sizes {
    /// One size (`-s`, or the tool's default).
    Single(u64),
    /// `-a`: powers of two from 2 up to this cap (2^23; 8 for atomics), further capped by both
    /// ports' `max_msg_sz` (and the MTU on UD) once they are known.
    Sweep { max: u64 },
    /// One size, the path MTU: a UD bandwidth run without `-s`, whose default (64 KiB) cannot
    /// fit one packet (perftest's "Max msg size in UD is MTU ... Changing to this MTU"). Known
    /// once both ports' MTUs are; at most [`UD_MAX_MSG`].
    PathMtu,
}

impl Sizes {
    /// The largest size the run may use (buffers are sized for it).
    pub fn max(self) -> u64 {
        match self {
            Sizes::Single(s) => s,
            Sizes::Sweep { max } => max,
            Sizes::PathMtu => UD_MAX_MSG,
        }
    }

    /// The sizes to run, given the largest message both sides can handle.
    pub fn list(self, cap: u64) -> Vec<u64> {
        match self {
            Sizes::Single(s) => vec![s],
            Sizes::PathMtu => vec![cap.min(UD_MAX_MSG)],
            Sizes::Sweep { max } if max < 2 => vec![max],
            Sizes::Sweep { max } => (1..64)
                .map(|e| 1u64 << e)
                .take_while(|s| *s <= max.min(cap))
                .collect(),
        }
    }
}

impl fmt::Display for Sizes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Sizes::Single(s) => write!(f, "{s}"),
            Sizes::Sweep { max } => write!(f, "sweep 2..{max}"),
            Sizes::PathMtu => write!(f, "path MTU"),
        }
    }
}

/// How long each size runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunMode {
    /// `-n`: this many iterations per QP.
    Iters(u64),
    /// `-D`: this long.
    Duration(Duration),
}

/// A validated run configuration: every default resolved for the tool.
#[derive(Debug, Clone)]
pub struct Config {
    pub tool: Tool,
    /// `host`, `-p`, `--bind`, `--wait`: where the peer is and how long to wait for it.
    pub peer: Peer,
    /// `-d`, `-i`, `-x`: the device, port and GID the QPs use.
    pub device: DeviceChoice,
    pub sizes: Sizes,
    /// `-n`, `-D`, `-f`, `--run_infinitely`, `--warmup`: how long each size runs.
    pub timing: Timing,
    pub qps: u32,
    /// `-t`, `-r`, `-Q`, `-l`: how every QP's queues are filled.
    pub queues: QueueShape,
    /// Where `queues`' values came from when not as typed (mismatch messages name it).
    pub queue_origins: QueueOrigins,
    pub conn: QpType,
    pub bidirectional: bool,
    /// `--send_with_imm`: Sends carry immediate data ([`IMM_DATA`]), which every receive checks.
    pub send_with_imm: bool,
    /// `--write_with_imm`: RDMA Writes carry immediate data ([`IMM_DATA`]); the responder
    /// consumes a receive per write and checks it.
    pub write_with_imm: bool,
    /// `--use-srq`: the receives of every QP come from one shared receive queue.
    pub use_srq: bool,
    /// `--mr_per_qp`: each QP's source slots are a memory region of their own.
    pub mr_per_qp: bool,
    /// `--use_hugepages`: the registered buffers are mapped from huge pages.
    pub use_hugepages: bool,
    /// `-H`/`-U` in a latency test with `-n`: every sample is kept for the report (perftest
    /// prints none with `-D`).
    pub keep_samples: bool,
    /// `--reversed`: in a bandwidth test the server sends and the client receives (see
    /// [`Config::is_requester`]).
    pub reversed: bool,
    /// `-m`, `-I`, `-o` as given: the QPs' path MTU, inline size and reads in flight.
    pub asked: Asked,
    pub events: bool,
    pub qp_timeout: u8,
    /// Set for the atomic tools.
    pub atomic: Option<AtomicType>,
    pub no_peak: bool,
    /// `--cpu`, `--disable_numa`: which CPU the run's thread is pinned to.
    pub pin: Pinning,
    pub validate: bool,
    /// `-S`, `--tclass`, `--flow_label`: what every QP's address vector carries.
    pub qos: Qos,
    /// `-R`: the QPs are connected through librdmacm.
    pub rdma_cm: Option<RdmaCm>,
    /// `--wait_destroy`: how long to keep the resources after the run.
    pub wait_destroy: Option<Duration>,
    /// `--report_gbits` (the header and the units depend on it).
    pub report_gbits: bool,
    /// `--procs`, `--procs-start`: the worker processes of the run, and which one this is.
    pub procs: ProcsPlan,
    /// `--serve`: the server serves one client after another until stopped.
    pub serve: bool,
    /// `--concurrent N` (with `--serve`): clients served at once (1: one after another).
    pub concurrent: u32,
    /// What the options resolved to that a person should hear about (perftest prints these
    /// too): the tool prints each as a note on stderr before it starts.
    pub notes: Vec<String>,
}

/// The immediate data of `--send_with_imm` ("VLPT"): a receive must carry exactly this.
pub const IMM_DATA: u32 = u32::from_be_bytes(*b"VLPT");

impl Config {
    /// Whether this side's QPs consume receives: the send tools', and the write tools' with
    /// `--write_with_imm` (a receive per write).
    pub fn posts_receives(&self) -> bool {
        self.tool.kind == TestKind::Send
            || (self.tool.kind == TestKind::Write && self.write_with_imm)
    }
}

/// `--procs` above this is refused (each worker costs a core, a queue and a TCP port).
pub const MAX_PROCS: u32 = 64;

impl Config {
    /// Checks `p` for `tool` and resolves the defaults. The error is one sentence naming the
    /// flag and what to do. The steps, in order: transport, sizes, run length, queues, the
    /// options that belong to some tools only, the output options, then the rest.
    pub fn new(tool: Tool, p: &Params) -> Result<Config, String> {
        check_transport(tool, p)?;
        let sizes = resolve_sizes(tool, p)?;
        let (mode, margin) = if p.run_infinitely {
            check_run_infinitely(tool, p)?
        } else {
            let mode = resolve_mode(tool, p)?;
            (mode, resolve_margin(tool, p, mode)?)
        };
        let mut notes = Vec::new();
        let (queues, queue_origins) = resolve_queues(tool, p, sizes, mode, &mut notes)?;
        check_tool_options(tool, p)?;
        check_output_options(tool, p)?;
        let warmup = resolve_warmup(p)?;
        check_serve(p)?;
        crate::serve::check_concurrent(tool, p)?;
        if let Some(w) = p.wait_destroy {
            if tool.metric == Metric::Lat {
                return Err("--wait_destroy is an option of perftest's bandwidth tools".into());
            }
            if w > MAX_DURATION_SECS {
                return Err(format!("--wait_destroy {w}: longer than a day"));
            }
        }
        let (port, worker) = check_procs(tool, p)?;
        if p.bind.is_some() && p.host.is_some() {
            return Err(
                "--bind is for the server (the side without a host): the client \
                        connects to the host it is given"
                    .into(),
            );
        }
        let is = |k: TestKind| tool.kind == k;
        let rdma_cm = check_qos(tool, p, port)?;

        Ok(Config {
            tool,
            peer: Peer {
                host: p.host.clone(),
                port,
                bind: p.bind.unwrap_or(verbs_lab::oob::DEFAULT_BIND),
                wait: Duration::from_secs(p.wait_secs),
            },
            device: p.device.clone(),
            sizes,
            timing: Timing {
                mode,
                margin,
                run_infinitely: p.run_infinitely,
                warmup,
            },
            qps: p.qps,
            queues,
            queue_origins,
            conn: p.conn,
            bidirectional: p.bidirectional,
            reversed: p.reversed,
            send_with_imm: p.send_with_imm,
            write_with_imm: p.write_with_imm,
            use_srq: p.use_srq,
            mr_per_qp: p.mr_per_qp,
            use_hugepages: p.use_hugepages,
            keep_samples: tool.metric == Metric::Lat
                && (p.output.report_histogram || p.output.report_unsorted)
                && matches!(mode, RunMode::Iters(_)),
            asked: Asked {
                mtu: p.mtu,
                inline_size: p.inline_size,
                outstanding: p.outstanding,
            },
            events: p.events,
            qp_timeout: p.qp_timeout,
            atomic: is(TestKind::Atomic).then(|| p.atomic_type.unwrap_or_default()),
            no_peak: p.no_peak,
            pin: Pinning {
                cpu: p.cpu.clone(),
                auto: !p.disable_numa,
            },
            validate: p.validate,
            qos: p.qos.clone(),
            rdma_cm,
            wait_destroy: p.wait_destroy.map(Duration::from_secs),
            report_gbits: p.output.report_gbits,
            procs: ProcsPlan {
                count: p.procs,
                worker,
                start: Duration::from_micros(p.procs_start_us),
            },
            serve: p.serve,
            concurrent: p.concurrent,
            notes,
        })
    }

    pub fn is_server(&self) -> bool {
        self.peer.host.is_none()
    }

    /// Whether this side posts the requests of a one-way bandwidth test (perftest's "client
    /// machine"): the client, or the server with `--reversed`. The TCP roles do not change:
    /// the client still connects, says HELLO and drives the phases.
    pub fn is_requester(&self) -> bool {
        self.is_server() == self.reversed
    }

    /// Whether any QoS option was given (`-S`, `--tclass`, `--flow_label`, `-T`): the tools
    /// then print each QP's address vector as the device holds it, on stderr.
    pub fn qos_given(&self) -> bool {
        self.qos.sl != 0
            || self.qos.grh_given()
            || self.rdma_cm.as_ref().is_some_and(|r| r.tos.is_some())
    }

    /// The inline size to ask the QP for, on a device that is `software` (rxe, siw) or not.
    /// Unless `-I` says otherwise: [`DEFAULT_LAT_INLINE`] for the send and write latency tools
    /// on a hardware NIC, where the NIC takes the bytes with the doorbell instead of reading
    /// them back over PCIe; none on a software device, where inline is one more copy (into the
    /// work queue entry) before the kernel copies the bytes again — slower: write_lat 2 B in
    /// the guest, 12-19 % behind perftest with 64 B inline, 13 % ahead with none. perftest
    /// inlines only on NICs it knows, never on rxe.
    pub fn inline_request(&self, software: bool) -> u32 {
        match self.asked.inline_size {
            Some(i) => i,
            None if !software
                && self.tool.metric == Metric::Lat
                && matches!(self.tool.kind, TestKind::Send | TestKind::Write) =>
            {
                DEFAULT_LAT_INLINE
            }
            None => 0,
        }
    }

    /// The parameters both sides must agree on, as (key, value) text: what the client's HELLO
    /// carries and the server compares with its own. See `docs/oob-protocol.md`.
    pub fn wire_params(&self) -> Vec<(&'static str, String)> {
        let opt = |o: Option<String>| o.unwrap_or_else(|| "default".into());
        let (iters, duration) = match self.timing.mode {
            RunMode::Iters(n) => (n.to_string(), "none".to_string()),
            RunMode::Duration(d) => ("none".to_string(), format!("{}s", d.as_secs())),
        };
        vec![
            ("connection", self.conn.to_string()),
            ("size", self.sizes.to_string()),
            ("iterations", iters),
            ("duration", duration),
            ("warmup", self.timing.warmup.wire()),
            ("qps", self.qps.to_string()),
            (
                "tx_depth",
                with_origin(self.queues.tx_depth, &self.queue_origins.tx_depth),
            ),
            (
                "rx_depth",
                with_origin(self.queues.rx_depth, &self.queue_origins.rx_depth),
            ),
            (
                "cq_mod",
                with_origin(self.queues.cq_mod, &self.queue_origins.cq_mod),
            ),
            ("post_list", self.queues.post_list.to_string()),
            ("bidirectional", on_off(self.bidirectional)),
            ("reversed", on_off(self.reversed)),
            ("send_with_imm", on_off(self.send_with_imm)),
            ("write_with_imm", on_off(self.write_with_imm)),
            ("inline", opt(self.asked.inline_size.map(|i| i.to_string()))),
            ("events", on_off(self.events)),
            ("mtu", opt(self.asked.mtu.map(|m| m.to_string()))),
            (
                "outstanding",
                opt(self.asked.outstanding.map(|o| o.to_string())),
            ),
            ("atomic", opt(self.atomic.map(|a| a.to_string()))),
            ("validate", on_off(self.validate)),
            ("processes", self.procs.count.unwrap_or(1).to_string()),
            ("run_infinitely", on_off(self.timing.run_infinitely)),
            ("rdma_cm", on_off(self.rdma_cm.is_some())),
            (
                "margin",
                self.timing
                    .margin
                    .map_or("none".into(), |m| format!("{}s", m.as_secs())),
            ),
        ]
    }
}

fn on_off(b: bool) -> String {
    if b { "on" } else { "off" }.to_string()
}

/// The flag and a readable name of a wire parameter, for mismatch messages.
pub fn describe_param(key: &str) -> &'static str {
    match key {
        "connection" => "connection type (-c)",
        "size" => "message size (-s / -a)",
        "iterations" => "iterations (-n)",
        "duration" => "duration (-D)",
        "warmup" => "warm-up iterations (--warmup)",
        "qps" => "number of QPs (-q)",
        "tx_depth" => "tx depth (-t)",
        "rx_depth" => "rx depth (-r)",
        "cq_mod" => "CQ moderation (-Q)",
        "post_list" => "post list (-l)",
        "bidirectional" => "bidirectional (-b)",
        "reversed" => "direction (--reversed)",
        "send_with_imm" => "Send with immediate (--send_with_imm)",
        "write_with_imm" => "RDMA Write with immediate (--write_with_imm)",
        "inline" => "inline size (-I)",
        "events" => "events (-e)",
        "mtu" => "MTU (-m)",
        "outstanding" => "outstanding reads/atomics (-o)",
        "atomic" => "atomic type (-A)",
        "validate" => "payload validation (--validate)",
        "processes" => "number of processes (--procs)",
        "run_infinitely" => "--run_infinitely",
        "margin" => "margins (-f)",
        "rdma_cm" => "connection through rdma_cm (-R)",
        _ => "parameter",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweep_lists() {
        assert_eq!(Sizes::Sweep { max: 8 }.list(u64::MAX), vec![2, 4, 8]);
        assert_eq!(Sizes::Sweep { max: 1 }.list(u64::MAX), vec![1]);
        assert_eq!(Sizes::Sweep { max: SWEEP_MAX }.list(u64::MAX).len(), 23);
        assert_eq!(
            Sizes::Sweep { max: SWEEP_MAX }.list(4096).last(),
            Some(&4096)
        );
        assert_eq!(Sizes::Single(7).list(1), vec![7]);
        // UD without -s: one size, the cap (the path MTU there).
        assert_eq!(Sizes::PathMtu.list(1024), vec![1024]);
    }
}
