//! [`Params`]: the command line as clap parses it, before any check — every flag a `vl_*` tool
//! implements is declared in this file, with the groups it flattens ([`DeviceChoice`], [`Qos`],
//! [`OutputArgs`]); perftest's options it accepts as no-ops or refuses by name are the table of
//! [`compat`](super::compat).

use std::path::PathBuf;

use super::groups::parse_flow_label;
use super::*;
use crate::output::gates::LatGate;
use verbs_lab::cli::parse_size;

/// The command line (perftest's flags; long forms as perftest spells them).
#[derive(Parser, Debug, Clone)]
#[command(version, disable_help_subcommand = true)]
pub struct Params {
    /// The server to connect to; without it this process is the server.
    #[arg(value_name = "SERVER", value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub host: Option<String>,

    /// `-d`, `-i`, `-x`.
    #[command(flatten)]
    pub device: DeviceChoice,

    /// Message size in bytes (bw tools 65536, lat tools 2, atomics 8); K/M/G suffixes accepted.
    #[arg(short = 's', long = "size", value_name = "BYTES", value_parser = parse_size::<u64>)]
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
    /// (5 by default); both sides must give it (bandwidth tools). A client whose stdout loses
    /// its reader (`| head`) stops by itself, unless a report file or a gate needs the end.
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

    /// CQ moderation: one signaled work request every N (default 100, but 1 for one size over
    /// 8 KiB on RC/UC without -e, and the post list with -l, as perftest; capped by the tx
    /// depth).
    #[arg(short = 'Q', long = "cq-mod", value_name = "N")]
    pub cq_mod: Option<u32>,

    /// Post list: work requests per ibv_post_send call.
    #[arg(short = 'l', long = "post_list", value_name = "N", default_value_t = 1)]
    pub post_list: u32,

    /// perftest's receive post list (bandwidth tools; receives are the send tools', and the
    /// write tools' with --write_with_imm): a consumed receive is posted again once N are, N per
    /// ibv_post_recv call.
    #[arg(long = "recv_post_list", value_name = "N", default_value_t = 1)]
    pub recv_post_list: u32,

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

    /// perftest's --reversed (bandwidth tools, on both sides): the server sends and the client
    /// receives; the client still connects to the server.
    #[arg(long = "reversed")]
    pub reversed: bool,

    /// perftest's --send_with_imm (send tools, on both sides): IBV_WR_SEND_WITH_IMM instead of
    /// IBV_WR_SEND; every receive must carry the immediate data.
    #[arg(long = "send_with_imm")]
    pub send_with_imm: bool,

    /// perftest's --write_with_imm (write tools, on both sides): IBV_WR_RDMA_WRITE_WITH_IMM;
    /// the responder consumes a receive per write and checks its immediate data.
    #[arg(long = "write_with_imm")]
    pub write_with_imm: bool,

    /// perftest's --use-srq (send tools): the receives come from one shared receive queue
    /// (ibv_create_srq) that every QP draws from.
    #[arg(long = "use-srq")]
    pub use_srq: bool,

    /// perftest's --mr_per_qp: every QP gets memory regions (and buffers) of its own, the
    /// source too (the destination is per QP always).
    #[arg(long = "mr_per_qp")]
    pub mr_per_qp: bool,

    /// perftest's --use_hugepages: the registered buffers come from huge pages (mmap with
    /// MAP_HUGETLB); the system must have some reserved (sysctl vm.nr_hugepages=N).
    #[arg(long = "use_hugepages")]
    pub use_hugepages: bool,

    /// Inline size to ask the QP for; messages up to what the QP grants go inline
    /// (default: 64 for send/write latency on a hardware NIC, none on rxe or siw, where inline
    /// is one more copy, and none otherwise; 0 turns inline off).
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
        default_value_t = 14,
        value_parser = verbs_lab::cli::qp_timeout()
    )]
    pub qp_timeout: u8,

    /// Outstanding RDMA reads/atomics per QP (default: the device maximum).
    #[arg(short = 'o', long = "outs", value_name = "N")]
    pub outstanding: Option<u32>,

    /// Atomic operation: FETCH_AND_ADD or CMP_AND_SWAP.
    #[arg(short = 'A', long = "atomic_type", value_name = "TYPE")]
    pub atomic_type: Option<AtomicType>,

    /// TCP port of the out-of-band exchange (1..=65535, the same on both sides).
    #[arg(
        short = 'p',
        long = "port",
        value_name = "PORT",
        default_value_t = 18515,
        value_parser = verbs_lab::cli::tcp_port()
    )]
    pub port: u16,

    /// Server: the local address to listen on, IPv4 or IPv6 (default: every address, IPv6 and
    /// IPv4).
    #[arg(long = "bind", value_name = "ADDR")]
    pub bind: Option<std::net::IpAddr>,

    /// `-S`, `--tclass`, `--flow_label`.
    #[command(flatten)]
    pub qos: Qos,

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

    /// Warm-up iterations per QP and per size, run before the measurement and not counted
    /// (default: 16, fewer above 64 KiB — 1 MiB per QP, at least one; 0 turns warm-up off).
    /// A server without --warmup takes its client's.
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

    /// Server: stay up, serving clients one after another until SIGINT or SIGTERM, then print
    /// a summary of the runs (perftest's server serves one client). Each client is checked
    /// and bounded as always; one that fails or is killed ends its own run only. Ends with 0
    /// when stopped (the summary says how each run ended).
    #[arg(long = "serve")]
    pub serve: bool,

    /// With --serve (bandwidth tools): serve up to N clients at once (incast: many senders, one
    /// receiver), each with its own QPs and its own result row; when no client is left running,
    /// a `#total` row adds those that ran together (total bytes over the time at least one of them
    /// measured). 1 (the default) serves one after another.
    #[arg(long = "concurrent", value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=64))]
    pub concurrent: u32,

    /// Seconds to wait for the peer to connect (server) or to accept (client).
    #[arg(long = "wait", value_name = "SECS", default_value_t = 120,
          value_parser = verbs_lab::cli::WaitSecs)]
    pub wait_secs: u64,

    /// Run N worker processes (bandwidth tools), each pinned to its own CPU with its own QPs and
    /// TCP port (PORT + i); give both sides the same N. The report shows each process and the sum.
    #[arg(long = "procs", value_name = "N")]
    pub procs: Option<u32>,

    /// With --procs: the processes start each measurement together, USEC microseconds after
    /// the last of them is ready (on the machine's monotonic clock); 0 starts each as soon as
    /// it is released.
    #[arg(
        long = "procs-start",
        value_name = "USEC",
        default_value_t = 5000,
        requires = "procs"
    )]
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
        Self::try_parse_for(tool, std::env::args_os())
            .unwrap_or_else(|e| verbs_lab::cli::exit_on_usage_error(&e, &tool.name()))
    }

    /// The clap command of `tool`: its name and description over the shared flags.
    /// perftest's other options are registered hidden (see `compat/`), and long options may be
    /// abbreviated to any unambiguous prefix, as perftest's getopt_long allows.
    pub fn command_for(tool: Tool) -> clap::Command {
        crate::params::compat::register(
            verbs_lab::cli::negative_numbers_are_values(Params::command())
                .name(tool.static_name())
                .about(tool.about())
                .after_help(format!(
                    "{}\n\nperftest's options are accepted with perftest's meaning or refused by \
                     name with the reason; docs/perftest-compat.md lists every one.",
                    super::EXIT_CODES
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
        let matches = cmd
            .try_get_matches_from_mut(args)
            .map_err(|e| verbs_lab::cli::explain_number_error(e, &mut cmd))
            .map_err(|e| explain_ambiguous_prefix(e, &cmd))?;
        if let Some(why) = crate::params::compat::refusal(&matches) {
            return Err(cmd.error(clap::error::ErrorKind::ArgumentConflict, why));
        }
        Params::from_arg_matches(&matches)
    }
}

/// clap's refusal of a long option that abbreviates several (`--out`: `--outs`, `--output`,
/// `--out_json`), which it calls "unexpected" with one guess, rewritten as perftest's
/// getopt_long says it: ambiguous, with every option it could be. Any other error is returned
/// as it is.
fn explain_ambiguous_prefix(e: clap::Error, cmd: &clap::Command) -> clap::Error {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if e.kind() != ErrorKind::UnknownArgument {
        return e;
    }
    let Some(ContextValue::String(arg)) = e.get(ContextKind::InvalidArg) else {
        return e;
    };
    let Some(prefix) = arg
        .strip_prefix("--")
        .map(|a| a.split('=').next().unwrap_or(a))
    else {
        return e;
    };
    let mut candidates: Vec<&str> = cmd
        .get_arguments()
        .flat_map(|a| {
            a.get_long()
                .into_iter()
                .chain(a.get_all_aliases().into_iter().flatten())
        })
        .filter(|l| !prefix.is_empty() && l.starts_with(prefix))
        .collect();
    candidates.sort_unstable();
    candidates.dedup();
    if candidates.len() < 2 {
        return e;
    }
    let list: Vec<String> = candidates.iter().map(|c| format!("--{c}")).collect();
    cmd.clone().error(
        ErrorKind::UnknownArgument,
        format!(
            "option '--{prefix}' is ambiguous; it abbreviates {}: give more of its name",
            verbs_lab::names::one_of(&list.iter().map(String::as_str).collect::<Vec<_>>())
        ),
    )
}

/// Where the QPs live: the device (`-d`), its port (`-i`) and the GID of their address vectors
/// (`-x`). Parsed as given ([`Params`] flattens it) and used as such.
#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct DeviceChoice {
    /// RDMA device (default: the first one).
    #[arg(short = 'd', long = "ib-dev", value_name = "DEV",
          value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub ib_dev: Option<String>,

    /// Port of the device.
    #[arg(
        short = 'i',
        long = "ib-port",
        value_name = "PORT",
        default_value_t = 1,
        value_parser = verbs_lab::cli::ib_port()
    )]
    pub ib_port: u8,

    /// GID index (default: both sides pick the first RoCE v2 GID with an IPv4 address, else the
    /// first populated one).
    #[arg(short = 'x', long = "gid-index", value_name = "IDX")]
    pub gid_index: Option<u32>,
}

/// The quality of service every QP's address vector asks for: `-S`, `--tclass` (`None`: 0, or
/// the CM's from `-T`) and `--flow_label` (see [`Qos::flow_label`]). Parsed as given
/// ([`Params`] flattens it; `check_qos` checks it) and used as such.
#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct Qos {
    /// Service level of the QPs' address vectors (0..=15; RoCE maps it to a priority).
    #[arg(short = 'S', long = "sl", value_name = "SL", default_value_t = 0)]
    pub sl: u8,

    /// Traffic class of the GRH (0..=255; on RoCE v2 the IP header's DSCP and ECN bits).
    #[arg(long = "tclass", value_name = "N")]
    pub tclass: Option<u8>,

    /// Flow label of the GRH, per QP in turn from a comma list (each 0..=0xFFFFF; decimal or
    /// 0x hex).
    #[arg(long = "flow_label", value_name = "FL[,FL...]", value_delimiter = ',', value_parser = parse_flow_label)]
    pub flow_labels: Vec<u32>,
}

/// How the run is shown on stdout.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutputFormat {
    /// perftest's layout, streamed row by row (existing parsers keep working).
    #[default]
    Text,
    /// a parameter table and a results table with every percentile, at the end.
    Table,
}

/// Output, file and gate options (flatten into a tool's parser with `#[command(flatten)]`).
#[derive(clap::Args, Debug, Clone, Default)]
#[command(next_help_heading = "Output and gates")]
pub struct OutputArgs {
    /// Report bandwidth in Gb/s (10^9 bits) instead of MiB/s (2^20 bytes).
    #[arg(long = "report_gbits", visible_alias = "report-gbits")]
    pub report_gbits: bool,

    /// perftest's --report-both (bandwidth tools): with -b, after the rows (the sum of both
    /// directions), each direction on its own: "Local results" (this side's sends) and "Remote
    /// results" (the peer's).
    #[arg(long = "report-both")]
    pub report_both: bool,

    /// perftest's -H (latency tools, not with -D): after each size's measurement, every sample
    /// sorted ("#, usec", then "N, value" lines), then the column header and the row again.
    #[arg(short = 'H', long = "report-histogram", alias = "report-histogrm")]
    pub report_histogram: bool,

    /// perftest's -U (latency tools, not with -D): every sample in the order taken, then the
    /// column header and the row again.
    #[arg(short = 'U', long = "report-unsorted")]
    pub report_unsorted: bool,

    /// perftest's -C (latency tools): the times of the rows and of -H/-U in CPU cycles, from
    /// the monotonic clock's nanoseconds and the CPU frequency in /proc/cpuinfo.
    #[arg(short = 'C', long = "report-cycles")]
    pub report_cycles: bool,

    /// Output layout: `text` is perftest's; `table` adds the median, p99.99 and the run
    /// parameters.
    #[arg(long, value_enum, value_name = "FORMAT", default_value_t = OutputFormat::Text)]
    pub format: OutputFormat,

    /// perftest's verbosity: print only BW average (`bandwidth`), MsgRate (`message_rate`) or
    /// t_avg (`latency`) of each size, one number a line.
    #[arg(long = "output", value_enum, value_name = "UNITS")]
    pub verbosity: Option<Verbosity>,

    /// Write the run as one JSON document: parameters, device, GID, CPU, version, every row.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,

    /// perftest's JSON file (perftest's keys: "test_info", "results"; every size under
    /// "all_results"), to --out_json_file or perftest_out.json.
    #[arg(long = "out_json")]
    pub out_json: bool,

    /// The file of --out_json (implies --out_json).
    #[arg(long = "out_json_file", value_name = "FILE")]
    pub out_json_file: Option<PathBuf>,

    /// Write the rows as CSV, one line per message size.
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,

    /// Write the run in the OpenMetrics text format (node_exporter's textfile collector reads
    /// it): every row, the port's counter deltas, and each gate's verdict, labelled by tool,
    /// role, device and size.
    #[arg(long, value_name = "FILE")]
    pub openmetrics: Option<PathBuf>,

    /// perftest's bandwidth floor: below N (MiB/s, or Gb/s with --report_gbits) at any size,
    /// print "Error: BW result is below bw limit" and exit 3. Checked on both sides.
    #[arg(short = 'w', long = "limit_bw", value_name = "N", value_parser = crate::output::gates::parse_limit)]
    pub limit_bw: Option<f64>,

    /// perftest's message-rate floor in Mpps: below it at any size, print "Error: Msg rate  is
    /// below msg_rate limit" and exit 3.
    #[arg(short = 'y', long = "limit_msgrate", value_name = "MPPS", value_parser = crate::output::gates::parse_limit)]
    pub limit_msgrate: Option<f64>,

    /// perftest's CPU utilisation column (with -D): the user share of all CPUs during each
    /// size, perftest's formula; the JSON files also get this process's CPU time.
    #[arg(long = "cpu_util")]
    pub cpu_util: bool,

    /// Print the port's NIC counters that changed during the run (counters/ and hw_counters/
    /// deltas: packets, retransmissions, out-of-sequence, RNR NAKs, CNPs, whatever the device
    /// has) after the rows; --json and --out_json always hold every delta.
    #[arg(long = "counters")]
    pub counters: bool,

    /// perftest's counter report: the delta of each listed counter over the run, as
    /// "\tNAME=DELTA" lines after the rows (e.g. hw_counters/sent_pkts,hw_counters/rcvd_pkts).
    #[arg(
        short = 'W',
        long = "report-counters",
        value_name = "LIST",
        value_delimiter = ','
    )]
    pub report_counters: Vec<String>,

    /// Gate: fail (exit code 3) if the NIC counter NAME rose by more than N during the run, e.g.
    /// --max-counter hw_counters/retry_exceeded_err=0. Repeatable.
    #[arg(long = "max-counter", value_name = "NAME=N")]
    pub max_counter: Vec<crate::counters::CounterGate>,

    /// Draw the sweep as an SVG chart: bandwidth and message rate, or latency percentiles, vs
    /// message size.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,

    /// Gate: fail (exit code 3) unless every row's average bandwidth is at least N, in the
    /// report's unit (MiB/s, or Gb/s with --report_gbits).
    #[arg(long = "min-bw", value_name = "N", value_parser = crate::output::gates::parse_min_bw)]
    pub min_bw: Option<f64>,

    /// Gate: fail (exit code 3) if a latency statistic exceeds USEC at any size. KEY is min,
    /// max, avg, median (p50), p99, p99.9 or p99.99. Repeatable: --max-lat p99=50 --max-lat
    /// max=200.
    #[arg(long = "max-lat", value_name = "KEY=USEC")]
    pub max_lat: Vec<LatGate>,
}
