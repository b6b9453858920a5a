//! The command line of the `vl_*` tools: perftest's flags with perftest's meanings and defaults,
//! and their validation — every refusal happens here, before any verbs call, with a message
//! that names the flag.
//!
//! [`Params`] is what clap parses; [`Config::new`] checks it against the tool ([`Tool`]) and
//! resolves the tool-dependent defaults (message size, iterations, queue depths). The run uses
//! only the [`Config`].

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use clap::{CommandFactory, FromArgMatches, Parser};
use verbs_lab::affinity::CpuList;
use verbs_lab::verbs::{Mtu, QpType};

use crate::output::{OutputArgs, Verbosity};
use crate::result::{Metric, TestKind};

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
                self.kind.short()
            ),
            Metric::Lat => format!(
                "{op} latency between two hosts, perftest-compatible (ib_{}_lat). Start the \
                 server without a host, then the client with the server's host and the same \
                 options.",
                self.kind.short()
            ),
        }
    }
}

/// `bw` or `lat`.
pub fn metric_short(m: Metric) -> &'static str {
    match m {
        Metric::Bw => "bw",
        Metric::Lat => "lat",
    }
}

/// The two atomic operations (`-A`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AtomicType {
    #[default]
    FetchAndAdd,
    CmpAndSwap,
}

impl AtomicType {
    /// perftest's spelling, also the header's.
    pub fn name(self) -> &'static str {
        match self {
            AtomicType::FetchAndAdd => "FETCH_AND_ADD",
            AtomicType::CmpAndSwap => "CMP_AND_SWAP",
        }
    }
}

impl fmt::Display for AtomicType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for AtomicType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_uppercase().as_str() {
            "FETCH_AND_ADD" | "FAA" => Ok(AtomicType::FetchAndAdd),
            "CMP_AND_SWAP" | "CAS" => Ok(AtomicType::CmpAndSwap),
            _ => Err(format!(
                "'{s}' is not an atomic type: use FETCH_AND_ADD or CMP_AND_SWAP"
            )),
        }
    }
}

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
/// Receive buffers of UD messages start with the 40-byte Global Routing Header.
pub const UD_GRH: u64 = 40;
/// The default inline size asked for by the latency tools of send and write (read back from the
/// created QP; the bandwidth tools ask for none but still use what the QP grants).
pub const DEFAULT_LAT_INLINE: u32 = 64;
/// Inline sizes above this are refused (no device inlines more than a few hundred bytes).
pub const MAX_INLINE: u32 = 4096;

/// A message size: digits with an optional binary suffix K, M or G (`64K` = 65536).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (digits, mult) = match t.char_indices().last() {
        Some((i, c)) if c.eq_ignore_ascii_case(&'k') => (&t[..i], 1u64 << 10),
        Some((i, c)) if c.eq_ignore_ascii_case(&'m') => (&t[..i], 1u64 << 20),
        Some((i, c)) if c.eq_ignore_ascii_case(&'g') => (&t[..i], 1u64 << 30),
        _ => (t, 1),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("'{s}' is not a size in bytes (e.g. 4096 or 64K)"))?;
    n.checked_mul(mult)
        .ok_or_else(|| format!("'{s}' is too large"))
}

/// The command line (perftest's flags; long forms as perftest spells them).
#[derive(Parser, Debug, Clone)]
#[command(version, disable_help_subcommand = true)]
pub struct Params {
    /// The server to connect to; without it this process is the server.
    #[arg(value_name = "SERVER")]
    pub host: Option<String>,

    /// RDMA device (default: the first one).
    #[arg(short = 'd', long = "ib-dev", value_name = "DEV")]
    pub ib_dev: Option<String>,

    /// Port of the device.
    #[arg(
        short = 'i',
        long = "ib-port",
        value_name = "PORT",
        default_value_t = 1
    )]
    pub ib_port: u8,

    /// GID index (default: both sides pick the first RoCE v2 GID with an IPv4 address, else the
    /// first populated one).
    #[arg(short = 'x', long = "gid-index", value_name = "IDX")]
    pub gid_index: Option<u32>,

    /// Message size in bytes (bw tools 65536, lat tools 2, atomics 8); K/M/G suffixes accepted.
    #[arg(short = 's', long = "size", value_name = "BYTES", value_parser = parse_size)]
    pub size: Option<u64>,

    /// Sweep every power-of-two size from 2 to 2^23 bytes (capped by the port's max_msg_sz).
    #[arg(short = 'a', long = "all")]
    pub all: bool,

    /// Iterations per QP (1000; vl_write_bw 5000).
    #[arg(short = 'n', long = "iters", value_name = "N")]
    pub iters: Option<u64>,

    /// Run for SECS seconds instead of a number of iterations.
    #[arg(short = 'D', long = "duration", value_name = "SECS")]
    pub duration: Option<u64>,

    /// Run until stopped (SIGINT or SIGTERM on the client), printing a row every -D seconds
    /// (5 by default); both sides must give it (bandwidth tools).
    #[arg(long = "run_infinitely")]
    pub run_infinitely: bool,

    /// Margins of a -D run (bandwidth tools): the first and last SECS seconds are not measured
    /// (perftest's default: a quarter of the duration).
    #[arg(short = 'f', long = "margin", value_name = "SECS")]
    pub margin: Option<u64>,

    /// Number of QPs (bandwidth tools).
    #[arg(short = 'q', long = "qp", value_name = "N", default_value_t = 1)]
    pub qps: u32,

    /// Send queue depth: work requests in flight per QP (bw 128, lat 1).
    #[arg(short = 't', long = "tx-depth", value_name = "N")]
    pub tx_depth: Option<u32>,

    /// Receive queue depth of the send tools (512).
    #[arg(short = 'r', long = "rx-depth", value_name = "N")]
    pub rx_depth: Option<u32>,

    /// CQ moderation: one signaled work request every N (100; capped by the tx depth).
    #[arg(short = 'Q', long = "cq-mod", value_name = "N", default_value_t = 100)]
    pub cq_mod: u32,

    /// Post list: work requests per ibv_post_send call.
    #[arg(short = 'l', long = "post_list", value_name = "N", default_value_t = 1)]
    pub post_list: u32,

    /// Connection type: RC, UC or UD (UD for the send tools only).
    #[arg(
        short = 'c',
        long = "connection",
        value_name = "TYPE",
        default_value = "RC"
    )]
    pub conn: QpType,

    /// Bidirectional: both sides send at once (bandwidth tools).
    #[arg(short = 'b', long = "bidirectional")]
    pub bidirectional: bool,

    /// Inline size to ask the QP for; messages up to what the QP grants go inline
    /// (default: 64 for send/write latency, none asked for otherwise; 0 turns inline off).
    #[arg(short = 'I', long = "inline_size", value_name = "BYTES")]
    pub inline_size: Option<u32>,

    /// Sleep on a completion channel instead of busy polling.
    #[arg(short = 'e', long = "events")]
    pub events: bool,

    /// Path MTU: 256, 512, 1024, 2048 or 4096 (default: the smaller active MTU of both ports).
    #[arg(short = 'm', long = "mtu", value_name = "MTU")]
    pub mtu: Option<Mtu>,

    /// QP ack timeout exponent: 4.096 us x 2^N before a retransmit (under QEMU TCG use 20).
    #[arg(
        short = 'u',
        long = "qp-timeout",
        value_name = "N",
        default_value_t = 14
    )]
    pub qp_timeout: u8,

    /// Outstanding RDMA reads/atomics per QP (default: the device maximum).
    #[arg(short = 'o', long = "outs", value_name = "N")]
    pub outstanding: Option<u32>,

    /// Atomic operation: FETCH_AND_ADD or CMP_AND_SWAP.
    #[arg(short = 'A', long = "atomic_type", value_name = "TYPE")]
    pub atomic_type: Option<AtomicType>,

    /// TCP port of the out-of-band exchange.
    #[arg(
        short = 'p',
        long = "port",
        value_name = "PORT",
        default_value_t = 18515
    )]
    pub port: u16,

    /// Server: the local address to listen on, IPv4 or IPv6 (default: every address, IPv6 and
    /// IPv4).
    #[arg(long = "bind", value_name = "ADDR")]
    pub bind: Option<std::net::IpAddr>,

    /// Service level of the QPs' address vectors (0..=15; RoCE maps it to a priority).
    #[arg(short = 'S', long = "sl", value_name = "SL", default_value_t = 0)]
    pub sl: u8,

    /// Traffic class of the GRH (0..=255; on RoCE v2 the IP header's DSCP and ECN bits).
    #[arg(long = "tclass", value_name = "N")]
    pub tclass: Option<u8>,

    /// Flow label of the GRH, per QP in turn from a comma list (each 0..=0xFFFFF; decimal or
    /// 0x hex).
    #[arg(long = "flow_label", value_name = "FL[,FL...]", value_delimiter = ',', value_parser = parse_flow_label)]
    pub flow_label: Vec<u32>,

    /// Connect the QPs through the RDMA connection manager (librdmacm): the server listens on
    /// rdma_cm port PORT+1, the client resolves the server's address and route and connects;
    /// results still travel over the TCP exchange on PORT.
    #[arg(short = 'R', long = "rdma_cm")]
    pub rdma_cm: bool,

    /// With -R: the type of service of the connection (0..=255; rdma_set_option TOS).
    #[arg(short = 'T', long = "tos", value_name = "TOS", requires = "rdma_cm")]
    pub tos: Option<u8>,

    /// With -R, client: the local address to connect from (chooses the device and port).
    #[arg(long = "bind_source_ip", value_name = "ADDR", requires = "rdma_cm")]
    pub bind_source_ip: Option<std::net::IpAddr>,

    /// With -R: transport retries after an ack timeout (0..=7; default 6, as every QP of ours).
    #[arg(long = "retry_count", value_name = "N", requires = "rdma_cm")]
    pub retry_count: Option<u8>,

    /// Do not measure peak bandwidth (the peak column prints 0, as perftest's).
    #[arg(short = 'N', long = "noPeak")]
    pub no_peak: bool,

    /// Accepted for perftest compatibility; has no effect (the clock is the kernel's monotonic
    /// clock, not a cycle counter, so there are no CPU frequency warnings to silence).
    #[arg(short = 'F', long = "CPU-freq")]
    pub cpu_freq: bool,

    /// Pin to a CPU of this list (e.g. 0-3,8); default: a CPU local to the NIC when sysfs tells.
    #[arg(long = "cpu", visible_alias = "pin_cores", value_name = "LIST")]
    pub cpu: Option<CpuList>,

    /// Do not pin to a CPU local to the NIC by default (perftest's --disable_numa).
    #[arg(long = "disable_numa", conflicts_with = "cpu")]
    pub disable_numa: bool,

    /// Warm-up iterations per QP and per size, run before the measurement and not counted (16;
    /// 0 turns warm-up off).
    #[arg(long = "warmup", value_name = "N")]
    pub warmup: Option<u64>,

    /// perftest's warm-up switch: warm-up is on by default here, so this only refuses
    /// `--warmup 0` beside it.
    #[arg(long = "perform_warm_up")]
    pub perform_warm_up: bool,

    /// Check the payload: a pattern per message, verified by the receiver or reader.
    #[arg(long = "validate", visible_alias = "data_validation")]
    pub validate: bool,

    /// perftest's switch to ibv_post_send: what the tools always use.
    #[arg(long = "use_old_post_send", hide = true)]
    pub use_old_post_send: bool,

    /// Seconds to wait before destroying the QPs, CQs and memory at the end (bandwidth tools).
    #[arg(long = "wait_destroy", value_name = "SECS")]
    pub wait_destroy: Option<u64>,

    /// Seconds to wait for the peer to connect (server) or to accept (client).
    #[arg(long = "wait", value_name = "SECS", default_value_t = 120)]
    pub wait_secs: u64,

    /// Run N worker processes (bandwidth tools), each pinned to its own CPU with its own QPs and
    /// TCP port (PORT + i); give both sides the same N. The report shows each process and the sum.
    #[arg(long = "procs", value_name = "N")]
    pub procs: Option<u32>,

    /// With --procs: the processes start each measurement together, USEC microseconds after
    /// the last of them is ready (on the machine's monotonic clock); 0 starts each as soon as
    /// it is released.
    #[arg(long = "procs-start", value_name = "USEC", default_value_t = 5000)]
    pub procs_start_us: u64,

    /// Internal (set by the coordinator of a --procs run): this process is worker I.
    #[arg(
        long = "vl-worker",
        value_name = "I",
        hide = true,
        requires = "worker_queue"
    )]
    pub worker: Option<u32>,

    /// Internal: the coordinator's message queue, for --vl-worker.
    #[arg(
        long = "vl-queue",
        value_name = "NAME",
        hide = true,
        requires = "worker"
    )]
    pub worker_queue: Option<String>,

    #[command(flatten)]
    pub output: OutputArgs,
}

impl Params {
    /// Parses the process's arguments for `tool` (`--help` names the tool); exits on a usage
    /// error as clap does (status 2).
    pub fn parse_for(tool: Tool) -> Params {
        Self::try_parse_for(tool, std::env::args_os()).unwrap_or_else(|e| e.exit())
    }

    /// The clap command of `tool`: its name and description over the shared flags.
    /// perftest's other options are registered hidden (see `compat.rs`), and long options may be
    /// abbreviated to any unambiguous prefix, as perftest's getopt_long allows.
    pub fn command_for(tool: Tool) -> clap::Command {
        crate::compat::register(
            Params::command()
                .name(tool.static_name())
                .about(tool.about())
                .after_help(format!(
                    "{}\n\nperftest's options are accepted with perftest's meaning or refused by \
                     name with the reason; docs/perftest-compat.md lists every one.",
                    crate::run::EXIT_CODES
                ))
                .infer_long_args(true),
        )
    }

    /// Parses `args` (the first is the program name) for `tool`.
    pub fn try_parse_for<I, T>(tool: Tool, args: I) -> Result<Params, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let mut cmd = Params::command_for(tool);
        let matches = cmd.try_get_matches_from_mut(args)?;
        if let Some(why) = crate::compat::refusal(&matches) {
            return Err(cmd.error(clap::error::ErrorKind::ArgumentConflict, why));
        }
        Params::from_arg_matches(&matches)
    }
}

/// Message sizes of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sizes {
    /// One size (`-s`, or the tool's default).
    Single(u64),
    /// `-a`: powers of two from 2 up to this cap (2^23; 8 for atomics), further capped by both
    /// ports' `max_msg_sz` (and the MTU on UD) once they are known.
    Sweep { max: u64 },
}

impl Sizes {
    /// The largest size the run may use (buffers are sized for it).
    pub fn max(self) -> u64 {
        match self {
            Sizes::Single(s) => s,
            Sizes::Sweep { max } => max,
        }
    }

    /// The sizes to run, given the largest message both sides can handle.
    pub fn list(self, cap: u64) -> Vec<u64> {
        match self {
            Sizes::Single(s) => vec![s],
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
    /// The server's host (client side), `None` on the server.
    pub host: Option<String>,
    pub port: u16,
    /// The server's listening address (`--bind`, else every address).
    pub bind: std::net::IpAddr,
    pub ib_dev: Option<String>,
    pub ib_port: u8,
    pub gid_index: Option<u32>,
    pub sizes: Sizes,
    pub mode: RunMode,
    /// `-f/--margin` of a `-D` bandwidth run: not measured at either end (`None`: 0).
    pub margin: Option<Duration>,
    /// `--run_infinitely`: periods of `mode`'s duration until the client is stopped.
    pub run_infinitely: bool,
    /// Warm-up iterations per QP and size.
    pub warmup: u64,
    pub qps: u32,
    pub tx_depth: u32,
    pub rx_depth: u32,
    /// `-Q` as given (the run caps it by the tx depth and post list).
    pub cq_mod: u32,
    pub post_list: u32,
    pub conn: QpType,
    pub bidirectional: bool,
    /// `-I` as given.
    pub inline_size: Option<u32>,
    pub events: bool,
    pub mtu: Option<Mtu>,
    pub qp_timeout: u8,
    /// `-o` as given.
    pub outstanding: Option<u32>,
    /// Set for the atomic tools.
    pub atomic: Option<AtomicType>,
    pub no_peak: bool,
    pub cpu: Option<CpuList>,
    /// Pin to a CPU local to the NIC when `--cpu` is not given (off with `--disable_numa`).
    pub auto_pin: bool,
    pub validate: bool,
    /// `-S`: the service level of every QP's address vector.
    pub sl: u8,
    /// `--tclass`: the GRH traffic class (`None`: 0, or the CM's from `-T`).
    pub tclass: Option<u8>,
    /// `--flow_label`: QP `q` gets `flow_labels[q % len]` (empty: 0).
    pub flow_labels: Vec<u32>,
    /// `-R`: the QPs are connected through librdmacm.
    pub rdma_cm: Option<RdmaCm>,
    /// How long to wait for the peer to connect or accept.
    pub wait: Duration,
    /// `--wait_destroy`: how long to keep the resources after the run.
    pub wait_destroy: Option<Duration>,
    /// `--report_gbits` (the header and the units depend on it).
    pub report_gbits: bool,
    /// `--procs N`: this many worker processes (see `procs.rs`).
    pub procs: Option<u32>,
    /// Set in a worker process of a `--procs` run: its index and the coordinator's queue.
    pub worker: Option<WorkerOf>,
    /// `--procs-start`: how far ahead of the release the common start time of each
    /// measurement is (zero: no common start).
    pub procs_start: Duration,
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
fn parse_flow_label(s: &str) -> Result<u32, String> {
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

/// Which worker of a `--procs` run this process is (the hidden `--vl-worker I --vl-queue NAME`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerOf {
    pub index: u32,
    pub queue: String,
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
        let (tx_depth, rx_depth) = resolve_queues(tool, p)?;
        // perftest's force_dependecies: a queue deeper than the iterations of a counted run is
        // never filled, and its header shows the depth used.
        let (tx_depth, rx_depth) = match mode {
            RunMode::Iters(n) => {
                let n = u32::try_from(n).unwrap_or(u32::MAX);
                let rx = if tool.kind == TestKind::Send {
                    rx_depth.min(n)
                } else {
                    rx_depth
                };
                (tx_depth.min(n).max(p.post_list), rx)
            }
            RunMode::Duration(_) => (tx_depth, rx_depth),
        };
        check_tool_options(tool, p)?;
        check_output_options(tool, p)?;
        let warmup = resolve_warmup(p)?;
        if p.ib_port == 0 {
            return Err("-i 0: ports are numbered from 1".into());
        }
        if p.wait_secs == 0 {
            return Err("--wait 0: give the peer at least a second".into());
        }
        if let Some(w) = p.wait_destroy {
            if tool.metric == Metric::Lat {
                return Err("--wait_destroy is an option of perftest's bandwidth tools".into());
            }
            if w > MAX_DURATION_SECS {
                return Err(format!("--wait_destroy {w}: longer than a day"));
            }
        }
        let (port, worker) = crate::procs::check_params(tool, p)?;
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
            host: p.host.clone(),
            port,
            bind: p.bind.unwrap_or(verbs_lab::oob::DEFAULT_BIND),
            ib_dev: p.ib_dev.clone(),
            ib_port: p.ib_port,
            gid_index: p.gid_index,
            sizes,
            mode,
            margin,
            run_infinitely: p.run_infinitely,
            warmup,
            qps: p.qps,
            tx_depth,
            rx_depth,
            cq_mod: p.cq_mod,
            post_list: p.post_list,
            conn: p.conn,
            bidirectional: p.bidirectional,
            inline_size: p.inline_size,
            events: p.events,
            mtu: p.mtu,
            qp_timeout: p.qp_timeout,
            outstanding: p.outstanding,
            atomic: is(TestKind::Atomic).then(|| p.atomic_type.unwrap_or_default()),
            no_peak: p.no_peak,
            cpu: p.cpu.clone(),
            auto_pin: !p.disable_numa,
            validate: p.validate,
            sl: p.sl,
            tclass: p.tclass,
            flow_labels: p.flow_label.clone(),
            rdma_cm,
            wait: Duration::from_secs(p.wait_secs),
            wait_destroy: p.wait_destroy.map(Duration::from_secs),
            report_gbits: p.output.report_gbits,
            procs: p.procs,
            worker,
            procs_start: Duration::from_micros(p.procs_start_us),
        })
    }

    pub fn is_server(&self) -> bool {
        self.host.is_none()
    }

    /// Whether any QoS option was given (`-S`, `--tclass`, `--flow_label`, `-T`): the tools
    /// then print each QP's address vector as the device holds it, on stderr.
    pub fn qos_given(&self) -> bool {
        self.sl != 0
            || self.tclass.is_some()
            || !self.flow_labels.is_empty()
            || self.rdma_cm.as_ref().is_some_and(|r| r.tos.is_some())
    }

    /// The CQ moderation the run uses: `-Q`, capped so that every full send queue holds a
    /// signaled request (`tx depth − post list + 1`), else the sender could wait forever.
    pub fn effective_cq_mod(&self) -> u32 {
        self.cq_mod.min(self.tx_depth - self.post_list + 1).max(1)
    }

    /// The inline size to ask the QP for.
    pub fn inline_request(&self) -> u32 {
        match self.inline_size {
            Some(i) => i,
            None if self.tool.metric == Metric::Lat
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
        let (iters, duration) = match self.mode {
            RunMode::Iters(n) => (n.to_string(), "none".to_string()),
            RunMode::Duration(d) => ("none".to_string(), format!("{}s", d.as_secs())),
        };
        vec![
            ("connection", self.conn.to_string()),
            ("size", self.sizes.to_string()),
            ("iterations", iters),
            ("duration", duration),
            ("warmup", self.warmup.to_string()),
            ("qps", self.qps.to_string()),
            ("tx_depth", self.tx_depth.to_string()),
            ("rx_depth", self.rx_depth.to_string()),
            ("cq_mod", self.cq_mod.to_string()),
            ("post_list", self.post_list.to_string()),
            ("bidirectional", on_off(self.bidirectional)),
            ("inline", opt(self.inline_size.map(|i| i.to_string()))),
            ("events", on_off(self.events)),
            ("mtu", opt(self.mtu.map(|m| m.to_string()))),
            ("outstanding", opt(self.outstanding.map(|o| o.to_string()))),
            ("atomic", opt(self.atomic.map(|a| a.to_string()))),
            ("validate", on_off(self.validate)),
            ("processes", self.procs.unwrap_or(1).to_string()),
            ("run_infinitely", on_off(self.run_infinitely)),
            ("rdma_cm", on_off(self.rdma_cm.is_some())),
            (
                "margin",
                self.margin
                    .map_or("none".into(), |m| format!("{}s", m.as_secs())),
            ),
        ]
    }
}

/// `-c`: which tools run over which transport.
fn check_transport(tool: Tool, p: &Params) -> Result<(), String> {
    let name = tool.name();
    let is = |k: TestKind| tool.kind == k;
    if p.conn == QpType::Ud && !is(TestKind::Send) {
        return Err(format!(
            "-c UD: only the send tools run over UD (unreliable datagrams carry sends \
             only); {name} needs RC{}",
            if is(TestKind::Write) { " or UC" } else { "" }
        ));
    }
    if p.conn == QpType::Uc && (is(TestKind::Read) || is(TestKind::Atomic)) {
        return Err(format!(
            "-c UC: UC carries sends and RDMA writes only; {name} needs RC"
        ));
    }
    Ok(())
}

/// `-s` / `-a`: the message sizes (atomics: always 8 bytes).
fn resolve_sizes(tool: Tool, p: &Params) -> Result<Sizes, String> {
    if tool.kind == TestKind::Atomic {
        return match p.size {
            // Atomics have one size: -a is accepted (scripts pass it to every tool) and runs 8.
            Some(8) | None => Ok(Sizes::Single(8)),
            Some(s) => Err(format!(
                "-s {s}: atomic operations work on 8-byte words; use -s 8 or leave -s out"
            )),
        };
    }
    if p.all {
        if let Some(s) = p.size {
            return Err(format!(
                "-a sweeps the sizes 2..{SWEEP_MAX} itself; leave out -s {s} (or drop -a)"
            ));
        }
        let max = if p.conn == QpType::Ud {
            4096
        } else {
            SWEEP_MAX
        };
        return Ok(Sizes::Sweep { max });
    }
    let s = p
        .size
        .unwrap_or(if tool.metric == Metric::Lat { 2 } else { 65536 });
    if s == 0 {
        return Err("-s 0: a message must hold at least 1 byte (perftest's smallest is 1)".into());
    }
    if s > MAX_SIZE {
        return Err(format!(
            "-s {s}: larger than {MAX_SIZE} bytes, the largest message an SGE describes"
        ));
    }
    if p.conn == QpType::Ud && s > 4096 {
        return Err(format!(
            "-s {s}: a UD message must fit one packet (at most the path MTU, 4096 bytes \
             at most); use -c RC for larger messages"
        ));
    }
    Ok(Sizes::Single(s))
}

/// `-n` / `-D`: how long each size runs.
fn resolve_mode(tool: Tool, p: &Params) -> Result<RunMode, String> {
    let mode = match (p.iters, p.duration) {
        (Some(_), Some(_)) => {
            return Err("-n and -D both given: run either N iterations or SECS seconds".into())
        }
        (Some(0), None) => return Err("-n 0: at least one iteration is needed".into()),
        (Some(n), None) if n >= 1 << 40 => {
            return Err(format!("-n {n}: more than 2^40 iterations per QP"))
        }
        (Some(n), None) => RunMode::Iters(n),
        (None, Some(0)) => return Err("-D 0: the duration must be at least 1 second".into()),
        (None, Some(d)) if d > MAX_DURATION_SECS => {
            return Err(format!(
                "-D {d}: longer than a day ({MAX_DURATION_SECS} s); split the run"
            ))
        }
        (None, Some(d)) => RunMode::Duration(Duration::from_secs(d)),
        (None, None) => RunMode::Iters(if tool == Tool::new(TestKind::Write, Metric::Bw) {
            5000
        } else {
            1000
        }),
    };
    if p.all && matches!(mode, RunMode::Duration(_)) && tool.kind != TestKind::Atomic {
        return Err(
            "-a with -D: a sweep runs a number of iterations per size; use -n with -a".into(),
        );
    }
    Ok(mode)
}

/// The period of perftest's `--run_infinitely` when `-D` is not given (`DEF_DURATION`).
pub const INFINITE_PERIOD_SECS: u64 = 5;

/// `--run_infinitely`: one size, a row every `-D` seconds (5 by default), no margins.
fn check_run_infinitely(tool: Tool, p: &Params) -> Result<(RunMode, Option<Duration>), String> {
    let why = if tool.metric == Metric::Lat {
        Some(format!(
            "it is an option of perftest's bandwidth tools, and {} measures latency",
            tool.name()
        ))
    } else if p.iters.is_some() {
        Some("it runs periods of -D seconds; leave out -n".to_string())
    } else if p.all {
        Some("it runs one size; leave out -a".to_string())
    } else if p.margin.is_some() {
        Some("every period is measured whole; leave out -f".to_string())
    } else if p.procs.is_some() {
        Some("not with --procs".to_string())
    } else {
        None
    };
    if let Some(why) = why {
        return Err(format!("--run_infinitely: {why}"));
    }
    let d = p.duration.unwrap_or(INFINITE_PERIOD_SECS);
    if d == 0 || d > MAX_DURATION_SECS {
        return Err(format!(
            "-D {d}: the period must be 1..={MAX_DURATION_SECS} seconds"
        ));
    }
    Ok((RunMode::Duration(Duration::from_secs(d)), None))
}

/// `-f/--margin`: perftest's margins of a `-D` run, a quarter of the duration by default (in
/// whole seconds); the duration must exceed both margins.
fn resolve_margin(tool: Tool, p: &Params, mode: RunMode) -> Result<Option<Duration>, String> {
    let d = match mode {
        RunMode::Duration(d) => d.as_secs(),
        RunMode::Iters(_) => {
            return match p.margin {
                Some(f) => Err(format!(
                    "-f {f}: margins cut the ends of a -D run; add -D SECS (or leave -f out)"
                )),
                None => Ok(None),
            }
        }
    };
    if tool.metric == Metric::Lat {
        return match p.margin {
            Some(f) => Err(format!(
                "-f {f}: --margin is refused by the latency tools: they measure the whole -D \
                 duration (use a bandwidth tool for margins)"
            )),
            None => Ok(None),
        };
    }
    let f = p.margin.unwrap_or(d / 4);
    if d <= 2 * f {
        return Err(format!(
            "-f {f}: the two margins ({} s) leave nothing of -D {d} to measure; lower -f or \
             raise -D",
            2 * f
        ));
    }
    Ok((f > 0).then(|| Duration::from_secs(f)))
}

/// `-q`, `-t`, `-r`, `-Q`, `-l`: the queues; returns the tx and rx depths.
fn resolve_queues(tool: Tool, p: &Params) -> Result<(u32, u32), String> {
    let lat = tool.metric == Metric::Lat;
    if p.qps == 0 {
        return Err("-q 0: at least one QP is needed".into());
    }
    if p.qps > MAX_QPS {
        return Err(format!("-q {}: at most {MAX_QPS} QPs", p.qps));
    }
    if lat && p.qps > 1 {
        return Err(format!(
            "-q {}: a latency test runs on one QP (ping-pong); use a bandwidth tool for \
             several QPs",
            p.qps
        ));
    }
    let tx_depth = p.tx_depth.unwrap_or(if lat { 1 } else { 128 });
    if tx_depth == 0 || tx_depth > MAX_DEPTH {
        return Err(format!(
            "-t {tx_depth}: the tx depth must be 1..={MAX_DEPTH}"
        ));
    }
    let rx_depth = p
        .rx_depth
        .unwrap_or(if tool.kind == TestKind::Send { 512 } else { 1 });
    if rx_depth == 0 || rx_depth > MAX_DEPTH {
        return Err(format!(
            "-r {rx_depth}: the rx depth must be 1..={MAX_DEPTH}"
        ));
    }
    if p.cq_mod == 0 {
        return Err("-Q 0: CQ moderation must be at least 1 (1 = every request signaled)".into());
    }
    if p.post_list == 0 {
        return Err("-l 0: a post list holds at least 1 work request".into());
    }
    if lat && p.post_list > 1 {
        return Err(format!(
            "-l {}: a latency test posts one request at a time; post lists are for the \
             bandwidth tools",
            p.post_list
        ));
    }
    if p.post_list > tx_depth {
        return Err(format!(
            "-l {} is larger than the tx depth {tx_depth}: a post list must fit the send \
             queue (raise -t)",
            p.post_list
        ));
    }
    if u64::from(p.qps) * u64::from(tx_depth + rx_depth) > u64::from(MAX_DEPTH) {
        return Err(format!(
            "-q {} x (tx depth {tx_depth} + rx depth {rx_depth}) completions exceed the \
             {MAX_DEPTH} a completion queue may hold; lower -q, -t or -r",
            p.qps
        ));
    }
    Ok((tx_depth, rx_depth))
}

/// Options that belong to some tools only: `-b`, `-o`, `-A`, `-I`, `-e`, `-u`, `--validate`.
fn check_tool_options(tool: Tool, p: &Params) -> Result<(), String> {
    let name = tool.name();
    let lat = tool.metric == Metric::Lat;
    let is = |k: TestKind| tool.kind == k;
    if p.bidirectional && lat {
        return Err(
            "-b: bidirectional runs are for the bandwidth tools; a latency test is a \
             ping-pong already"
                .into(),
        );
    }
    if p.outstanding.is_some() && !(is(TestKind::Read) || is(TestKind::Atomic)) {
        return Err(format!(
            "-o limits outstanding RDMA reads and atomics; {name} has none"
        ));
    }
    if let Some(o) = p.outstanding {
        if o == 0 || o > 255 {
            return Err(format!("-o {o}: outstanding reads/atomics must be 1..=255"));
        }
    }
    if p.atomic_type.is_some() && !is(TestKind::Atomic) {
        return Err(format!("-A chooses the atomic operation; {name} runs none"));
    }
    if let Some(i) = p.inline_size {
        if is(TestKind::Read) || is(TestKind::Atomic) {
            return Err(format!(
                "-I: {name} sends no payload from this side (reads and atomics carry none), \
                 so there is nothing to inline"
            ));
        }
        if i > MAX_INLINE {
            return Err(format!("-I {i}: at most {MAX_INLINE} bytes"));
        }
    }
    if p.events && tool == Tool::new(TestKind::Write, Metric::Lat) {
        return Err(
            "-e: vl_write_lat sees the peer's write by polling memory (no completion is \
             generated for it), so there is no event to wait for"
                .into(),
        );
    }
    if p.qp_timeout > 31 {
        return Err(format!(
            "-u {}: the ack timeout exponent is 5 bits (0..=31; 0 = wait forever)",
            p.qp_timeout
        ));
    }
    if p.validate && is(TestKind::Atomic) {
        return Err(
            "--validate checks payloads of write, read and send; atomics carry none".into(),
        );
    }
    Ok(())
}

/// perftest's output options: `-w`/`-y` and `--output=bandwidth|message_rate` belong to the
/// bandwidth tools, `--output=latency` to the latency tools (perftest refuses the others too).
fn check_output_options(tool: Tool, p: &Params) -> Result<(), String> {
    let name = tool.name();
    let o = &p.output;
    if tool.metric == Metric::Lat {
        if let Some(w) = o.limit_bw {
            return Err(format!(
                "-w {w}: --limit_bw is a bandwidth floor, and {name} measures latency \
                 (use --max-lat KEY=USEC)"
            ));
        }
        if let Some(y) = o.limit_msgrate {
            return Err(format!(
                "-y {y}: --limit_msgrate is a message-rate floor, and {name} measures latency \
                 (use --max-lat KEY=USEC)"
            ));
        }
    }
    if o.cpu_util {
        if p.duration.is_none() && !p.run_infinitely {
            return Err(
                "--cpu_util measures the CPUs during a -D run (perftest reports it in duration \
                 mode only); add -D SECS"
                    .into(),
            );
        }
        if p.procs.is_some() {
            return Err("--cpu_util: not with --procs (each worker shares the CPUs)".into());
        }
    }
    if o.verbosity.is_some() && o.format == crate::output::OutputFormat::Table {
        return Err("--output=UNITS prints bare numbers; leave out --format table".into());
    }
    match (o.verbosity, tool.metric) {
        (Some(Verbosity::Latency), Metric::Bw) => Err(format!(
            "--output=latency: {name} measures bandwidth; use --output=bandwidth or \
             --output=message_rate"
        )),
        (Some(v @ (Verbosity::Bandwidth | Verbosity::MessageRate)), Metric::Lat) => Err(format!(
            "--output={}: {name} measures latency; use --output=latency",
            v.name()
        )),
        _ => Ok(()),
    }
}

/// `-S`, `--tclass`, `--flow_label` and `-R` with its options; returns `-R`'s settings.
fn check_qos(tool: Tool, p: &Params, port: u16) -> Result<Option<RdmaCm>, String> {
    if p.sl > 15 {
        return Err(format!("-S {}: the service level is 4 bits (0..=15)", p.sl));
    }
    if !p.rdma_cm {
        return Ok(None);
    }
    let name = tool.name();
    if p.conn != QpType::Rc {
        return Err(format!(
            "-R with -c {}: {name} connects RC QPs through rdma_cm only (perftest refuses UC \
             with rdma_cm; UD through rdma_cm is not supported yet); use -c RC or leave out -R",
            p.conn
        ));
    }
    if p.procs.is_some() {
        return Err(
            "-R with --procs: not supported yet (each worker would need its own rdma_cm port); \
             leave out one of them"
                .into(),
        );
    }
    if port == u16::MAX {
        return Err(format!(
            "-p {port} with -R: the rdma_cm listener uses port -p + 1; choose a lower -p"
        ));
    }
    if p.bind_source_ip.is_some() && p.host.is_none() {
        return Err(
            "--bind_source_ip is for the client (the side with a host); the server listens on \
             --bind"
                .into(),
        );
    }
    // 6 by default, as every QP of ours (rxe never counts 7 down: see README).
    let retry_count = p.retry_count.unwrap_or(verbs_lab::connect::RETRY_CNT);
    if retry_count > 7 {
        return Err(format!(
            "--retry_count {retry_count}: the transport retry count is 3 bits (0..=7)"
        ));
    }
    Ok(Some(RdmaCm {
        port: port + 1,
        tos: p.tos,
        source_ip: p.bind_source_ip,
        retry_count,
    }))
}

/// `--warmup N` (16 by default) and perftest's `--perform_warm_up`.
fn resolve_warmup(p: &Params) -> Result<u64, String> {
    let warmup = p.warmup.unwrap_or(16);
    if warmup >= 1 << 40 {
        return Err(format!(
            "--warmup {warmup}: more than 2^40 warm-up iterations"
        ));
    }
    if p.perform_warm_up && warmup == 0 {
        return Err("--perform_warm_up with --warmup 0: choose one".into());
    }
    Ok(warmup)
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
    }

    #[test]
    fn sizes_with_suffixes() {
        assert_eq!(parse_size("64K"), Ok(65536));
        assert_eq!(parse_size("1m"), Ok(1 << 20));
        assert_eq!(parse_size("12"), Ok(12));
        assert!(parse_size("K").is_err());
        assert!(parse_size("-1").is_err());
        assert!(parse_size("99999999999999999999G").is_err());
    }
}
