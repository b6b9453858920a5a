//! The entry of every `vl_*` tool: parse → pin → connect → run → report → exit code.
//!
//! [`main`] is what a binary calls. The run itself is the library function [`run_tool`]: it
//! neither prints nor exits, and hands each header and row to a [`RowSink`] as soon as it is
//! measured — a [`Reporter`] for the tools, something else for a caller that runs several
//! processes and merges their results.
//!
//! Exit codes: 0 success; 1 the run failed (the error says which step, and the peer's reason
//! when it reported one); 2 a bad command line (nothing was run); 3
//! ([`EXIT_GATE_FAILED`](crate::gates::EXIT_GATE_FAILED)) the run completed but missed a gate.

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context as _, Result};
use nix::sys::signal::{SigSet, Signal};
use verbs_lab::affinity;
use verbs_lab::oob;
use verbs_lab::verbs::{QpType, Sge};

use crate::conn::{self, Link, LocalDev};
use crate::counters;
use crate::engine::Session;
use crate::output::{OutputFormat, Reporter};
use crate::params::{Config, Params, RunMode, Sizes, Tool};
use crate::progress::Progress;
use crate::proto::{
    check_hello, Accept, ChanError, Channel, Hello, Msg, PeerFailed, Phase, ProtoError, VERSION,
};
use crate::report::endpoint_line;
use crate::result::{BwRow, LatRow, Metric, Rows, RunInfo, RunResult, TestKind};
use crate::{bw, lat};

/// Where a run's header and rows go as they are measured.
pub trait RowSink {
    fn header(&mut self, info: &RunInfo);
    fn bw_row(&mut self, info: &RunInfo, row: &BwRow);
    fn lat_row(&mut self, info: &RunInfo, row: &LatRow);
    /// The QPs are connected and the run is about to start its barrier with the peer: a worker
    /// of a `--procs` run reports Ready here and waits for Go. An error ends the run.
    fn connected(&mut self, _info: &RunInfo) -> Result<()> {
        Ok(())
    }
    /// The port's NIC counter deltas over the run (before the first size to after the last).
    fn counters(&mut self, _deltas: crate::counters::Snapshot) {}
}

impl RowSink for Reporter {
    fn header(&mut self, info: &RunInfo) {
        Reporter::header(self, info)
    }
    fn bw_row(&mut self, info: &RunInfo, row: &BwRow) {
        Reporter::bw_row(self, info, row)
    }
    fn lat_row(&mut self, info: &RunInfo, row: &LatRow) {
        Reporter::lat_row(self, info, row)
    }
    fn counters(&mut self, deltas: crate::counters::Snapshot) {
        self.set_counters(deltas)
    }
}

/// A sink that keeps nothing: the rows are in the returned [`RunResult`] anyway.
pub struct NoSink;

impl RowSink for NoSink {
    fn header(&mut self, _: &RunInfo) {}
    fn bw_row(&mut self, _: &RunInfo, _: &BwRow) {}
    fn lat_row(&mut self, _: &RunInfo, _: &LatRow) {}
}

/// The whole tool: parses the command line for `tool`, runs, reports, and returns the exit
/// code. Errors are printed as `vl_write_bw: error: ...` on stderr.
pub fn main(tool: Tool) -> ExitCode {
    let name = tool.name();
    verbs_lab::cli::generate_if_asked(|| Params::command_for(tool));
    let params = Params::parse_for(tool);
    let cfg = match Config::new(tool, &params) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{name}: error: {e}");
            return ExitCode::from(2);
        }
    };
    if cfg.worker.is_some() {
        return crate::procs::worker_main(&cfg);
    }
    if let Err(e) = crate::gates::check_applicable(&params.output, tool.metric) {
        eprintln!("{name}: error: {e}");
        return ExitCode::from(2);
    }
    let mut out = params.output.clone();
    if !measures(&cfg) && out.has_gates() {
        // Symmetric command lines are the habit: the gates are the measuring side's business
        // (perftest's server, too, prints the client's row without checking -w/-y).
        eprintln!(
            "{name}: note: the server measures nothing in this test; the gates are checked by \
             the client"
        );
        out.clear_gates();
    }
    if cfg.is_server() && out.verbosity.is_none() && out.format == OutputFormat::Text {
        // perftest's server says so before it blocks in accept.
        print!("{}", crate::report::text::WAITING_BANNER);
    }
    if cfg.procs.is_some() {
        return crate::procs::coordinator_main(&cfg, &out);
    }
    let mut reporter = Reporter::new(&out);
    match run_tool(&cfg, &mut reporter) {
        Ok(result) => match reporter.finish(&result) {
            Ok(outcome) => outcome.exit_code(),
            Err(e) => {
                eprintln!("{name}: error: {e:#}");
                ExitCode::FAILURE
            }
        },
        Err(e) => {
            eprintln!("{name}: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Whether this side of the test prints rows: every side of a bandwidth test (a server that
/// measured nothing prints the client's rows, as perftest's), and both sides of the send and
/// write latency ping-pongs; not the passive server of read and atomic latency.
pub fn reports_rows(cfg: &Config) -> bool {
    cfg.tool.metric == Metric::Bw || measures(cfg)
}

/// Whether this side measures its rows itself: the client always; the server when it receives
/// sends (send bandwidth), sends itself (`-b`) or plays ping-pong (send/write latency).
pub fn measures(cfg: &Config) -> bool {
    if !cfg.is_server() {
        return true;
    }
    let kind = cfg.tool.kind;
    match cfg.tool.metric {
        Metric::Bw => kind == TestKind::Send || cfg.bidirectional,
        Metric::Lat => matches!(kind, TestKind::Write | TestKind::Send),
    }
}

/// An error this side already sent to the peer (a refused HELLO): not to be sent again.
#[derive(Debug)]
struct Notified(String);

impl std::fmt::Display for Notified {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Notified {}

/// Whether the peer already knows about this error (it sent it, or we told it).
fn peer_knows(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<Notified>().is_some()
            || c.downcast_ref::<PeerFailed>().is_some()
            || matches!(c.downcast_ref::<ChanError>(), Some(ChanError::Peer(_)))
    })
}

/// Runs `cfg` to the end: opens the device, pins the thread, connects to the peer, agrees on
/// the parameters, measures every size and returns the result. Hands the header and each row to
/// `sink` as they come; prints nothing itself and never exits. On a failure after the peer is
/// connected, the peer is sent the reason (it prints it too).
pub fn run_tool(cfg: &Config, sink: &mut dyn RowSink) -> Result<RunResult> {
    let dev = conn::open_device(cfg)?;
    let cpu = pin(cfg, &dev)?;
    let cq_timeout = conn::completion_timeout(cfg);
    let peer_timeout = cq_timeout.max(Duration::from_secs(15));
    let conn = match &cfg.host {
        None => oob::accept(cfg.port, cfg.wait)
            .with_context(|| format!("waiting for a client on TCP port {}", cfg.port))?,
        Some(h) => oob::connect(h, cfg.port, cfg.wait)
            .with_context(|| format!("connecting to the server {h}:{}", cfg.port))?,
    };
    let mut ch = Channel::new(conn, if cfg.is_server() { "client" } else { "server" });
    ch.set_timeout(peer_timeout)?;

    match session(cfg, dev, cpu, &mut ch, (cq_timeout, peer_timeout), sink) {
        Ok(r) => Ok(r),
        Err(e) if peer_knows(&e) => Err(e),
        Err(e) => {
            // The peer may have failed first and said why (a refused validation makes our
            // completions fail): prefer its reason, and tell it ours.
            let theirs = ch.pending_peer_error(Duration::from_millis(300));
            ch.send_error(&format!("{e:#}"));
            match theirs {
                Some(p) => Err(anyhow!("{p} (and on this side: {e:#})")),
                None => Err(e),
            }
        }
    }
}

/// Pins the thread: `--cpu`, else a CPU local to the NIC when sysfs tells.
fn pin(cfg: &Config, dev: &LocalDev) -> Result<Option<(usize, String)>> {
    let choice = match &cfg.worker {
        Some(w) => crate::procs::worker_cpu(dev.ctx.name(), cfg.cpu.as_ref(), w.index),
        None if cfg.cpu.is_none() && !cfg.auto_pin => Ok(None),
        None => affinity::choose_cpu(dev.ctx.name(), cfg.cpu.as_ref(), 0),
    }
    .map_err(anyhow::Error::msg)
    .context("choosing a CPU (--cpu)")?;
    if let Some((cpu, _)) = &choice {
        affinity::pin_current_thread(*cpu)
            .map_err(anyhow::Error::msg)
            .context("pinning the thread (--cpu)")?;
    }
    Ok(choice)
}

/// HELLO and its answer. The server checks every parameter and refuses a mismatch with an ERROR
/// that names each differing parameter with both values.
fn handshake(cfg: &Config, ch: &mut Channel) -> Result<()> {
    let ours = Hello {
        version: VERSION,
        tool: cfg.tool.name(),
        test: cfg.tool.kind,
        metric: cfg.tool.metric,
        params: cfg
            .wire_params()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
    };
    if cfg.is_server() {
        let client = ch.peer_addr();
        let refuse = |ch: &mut Channel, why: String| -> anyhow::Error {
            ch.send_error(&why);
            anyhow::Error::new(Notified(format!("refused the client {client}: {why}")))
        };
        match ch.recv("the client's HELLO") {
            Ok(Msg::Hello(h)) => {
                if let Err(why) = check_hello(&ours, &h) {
                    return Err(refuse(ch, why));
                }
                ch.send(&Msg::Accept(Accept {
                    version: VERSION,
                    tool: ours.tool.clone(),
                }))?;
                Ok(())
            }
            Ok(other) => Err(refuse(
                ch,
                format!("protocol error: expected HELLO, got {}", other.name()),
            )),
            Err(ChanError::Proto {
                err: ProtoError::Version { peer },
                ..
            }) => Err(refuse(
                ch,
                format!(
                    "protocol version mismatch: the client speaks version {peer}, the server \
                     version {VERSION}; run the same verbs-lab release on both sides"
                ),
            )),
            Err(ChanError::Proto { err, .. }) => Err(refuse(ch, format!("bad HELLO: {err}"))),
            Err(e) => Err(anyhow::Error::new(e).context("waiting for the client's HELLO")),
        }
    } else {
        ch.send(&Msg::Hello(ours))?;
        match ch.recv("the server's answer to HELLO") {
            Ok(Msg::Accept(_)) => Ok(()),
            Ok(other) => bail!(
                "protocol error: the server answered HELLO with {}",
                other.name()
            ),
            Err(ChanError::Peer(p)) => Err(anyhow::Error::new(Notified(format!(
                "the server refused the run: {}",
                p.text
            )))),
            Err(ChanError::Proto {
                err: ProtoError::Version { peer },
                ..
            }) => bail!(
                "protocol version mismatch: the server speaks version {peer}, the client \
                 version {VERSION}; run the same verbs-lab release on both sides"
            ),
            Err(e) => Err(anyhow::Error::new(e).context("waiting for the server's answer")),
        }
    }
}

fn session(
    cfg: &Config,
    dev: LocalDev,
    cpu: Option<(usize, String)>,
    ch: &mut Channel,
    (cq_timeout, peer_timeout): (Duration, Duration),
    sink: &mut dyn RowSink,
) -> Result<RunResult> {
    handshake(cfg, ch)?;

    // Buffers sized for the largest message this side can carry; the sweep is capped by both
    // sides once the endpoints are exchanged.
    let max = match cfg.sizes {
        Sizes::Single(s) => s,
        Sizes::Sweep { max } => {
            let mut m = max.min(u64::from(dev.port.max_msg_sz));
            if cfg.conn == QpType::Ud {
                m = m.min(u64::from(dev.port.active_mtu.map_or(1024, |m| m.bytes())));
            }
            m
        }
    };
    let res = conn::create_resources(cfg, &dev, max)?;
    let local = conn::local_endpoints(&dev, &res);
    let remote = conn::exchange_endpoints(cfg, ch, &local)?;
    let link = conn::connect(cfg, dev, res, local, remote)?;

    // Receive buffers: posted now, before the peer can send, and kept posted for the run.
    let rx_sges = receive_sges(&link)?;
    // --run_infinitely warms up before the first period only.
    let later_periods = Config {
        warmup: 0,
        ..cfg.clone()
    };
    let mut s = Session {
        cfg,
        link,
        ch,
        rx_sges,
        cq_timeout,
        peer_timeout,
    };
    if cfg.tool.kind == TestKind::Send {
        let posted = s.link.res.rx_posted as usize;
        for q in 0..cfg.qps as usize {
            s.post_receives(q, 0..posted)
                .with_context(|| format!("posting {posted} receives on QP {q}"))?;
        }
    }
    let info = run_info(cfg, &s.link, cpu);
    sink.connected(&info)?;
    s.ch.sync(Phase::Connected, 0)?;

    sink.header(&info);
    let dev_name = s.link.dev.ctx.name().to_string();
    let before = counters::read(&dev_name, cfg.ib_port);
    let sizes = s.link.sizes.clone();
    let progress = Progress::start(cfg, &sizes);
    let rows = match cfg.tool.metric {
        Metric::Bw if cfg.run_infinitely => {
            let rows = run_infinitely(&mut s, &later_periods, &info, sink)?;
            sink.counters(counters::deltas(
                &before,
                &counters::read(&dev_name, cfg.ib_port),
            ));
            // The periods ended with SYNC(finish) already.
            return Ok(RunResult {
                info,
                rows: Rows::Bw(rows),
            });
        }
        Metric::Bw => {
            let mut rows = Vec::with_capacity(sizes.len());
            for size in sizes {
                progress.size(size);
                if let Some(r) = bw::run_size(&mut s, size)? {
                    progress.row(|| sink.bw_row(&info, &r));
                    rows.push(r);
                }
            }
            Rows::Bw(rows)
        }
        Metric::Lat => {
            let mut sq = lat::SendQueue::default();
            let mut rows = Vec::with_capacity(sizes.len());
            for size in sizes {
                progress.size(size);
                if let Some(r) = lat::run_size(&mut s, size, &mut sq)? {
                    progress.row(|| sink.lat_row(&info, &r));
                    rows.push(r);
                }
            }
            Rows::Lat(rows)
        }
    };
    sink.counters(counters::deltas(
        &before,
        &counters::read(&dev_name, cfg.ib_port),
    ));
    drop(progress);
    s.ch.sync(Phase::Finish, 0)?;
    if let Some(d) = cfg.wait_destroy {
        // perftest's --wait_destroy: keep the QPs, CQs and memory a while (for a look with
        // rdma-tool or the counters) before they are destroyed.
        std::thread::sleep(d);
    }
    Ok(RunResult { info, rows })
}

/// perftest's `--run_infinitely`: the size runs for a `-D` period, its row is printed, and
/// again, until the client is stopped by SIGINT or SIGTERM; it then finishes the period under
/// way, tells the server with SYNC(finish) instead of SYNC(period) and both sides end cleanly.
/// (perftest's client dies of the signal and its server fails.) Each period is a run of its own:
/// between two, the sides exchange their rows and resynchronise over TCP.
fn run_infinitely<'c>(
    s: &mut Session<'c>,
    later: &'c Config,
    info: &RunInfo,
    sink: &mut dyn RowSink,
) -> Result<Vec<BwRow>> {
    let size = s
        .link
        .sizes
        .first()
        .copied()
        .context("no message size to run")?;
    let stop = if s.cfg.is_server() {
        None
    } else {
        Some(stop_on_signals(&s.cfg.tool.name())?)
    };
    let mut rows = Vec::new();
    for period in 0u64.. {
        let go = match &stop {
            Some(flag) => {
                let go = !flag.load(Ordering::SeqCst);
                let ph = if go { Phase::Period } else { Phase::Finish };
                s.ch.sync(ph, if go { period } else { 0 })?;
                go
            }
            None => {
                let what = "the client's next period or its finish";
                let go = match s.ch.recv_skipping_heartbeats(what)? {
                    Msg::Sync(y) if y.phase == Phase::Period && y.size == period => true,
                    Msg::Sync(y) if y.phase == Phase::Finish => false,
                    other => bail!(
                        "protocol out of step: expected SYNC(period, {period}) or \
                         SYNC(finish), got {}",
                        other.name()
                    ),
                };
                let (ph, n) = if go {
                    (Phase::Period, period)
                } else {
                    (Phase::Finish, 0)
                };
                s.ch.send(&Msg::Sync(crate::proto::Sync { phase: ph, size: n }))?;
                go
            }
        };
        if !go {
            break;
        }
        if let Some(r) = bw::run_size(s, size)? {
            sink.bw_row(info, &r);
            rows.push(r);
        }
        s.cfg = later;
    }
    Ok(rows)
}

/// A flag set by SIGINT or SIGTERM, taken with `sigwait(3)` by a thread of its own (no signal
/// handler, no `unsafe`): the signals are blocked in this thread, which every later thread
/// inherits. A second signal ends the process at once (exit 130).
fn stop_on_signals(name: &str) -> Result<Arc<AtomicBool>> {
    let flag = Arc::new(AtomicBool::new(false));
    let mut set = SigSet::empty();
    set.add(Signal::SIGINT);
    set.add(Signal::SIGTERM);
    set.thread_block()
        .context("blocking SIGINT and SIGTERM for --run_infinitely")?;
    let (f, name) = (flag.clone(), name.to_string());
    std::thread::Builder::new()
        .name("vl-stop".into())
        .spawn(move || loop {
            let Ok(sig) = set.wait() else { continue };
            if f.swap(true, Ordering::SeqCst) {
                eprintln!("{name}: {sig} again: stopping now");
                std::process::exit(130);
            }
            eprintln!("{name}: {sig}: stopping after the current period");
        })
        .context("starting the thread that waits for SIGINT")?;
    Ok(flag)
}

/// One SGE per destination slot of each QP, `stride` bytes: where receives land.
fn receive_sges(link: &Link) -> Result<Vec<Vec<Sge>>> {
    let l = link.res.layout;
    (0..link.res.qps.len())
        .map(|q| {
            (0..l.dst_slots)
                .map(|k| {
                    let off = l.dst(q, k);
                    link.res
                        .mr
                        .sge(off..off + l.stride)
                        .context("building receive SGEs")
                })
                .collect()
        })
        .collect()
}

/// The header's facts.
fn run_info(cfg: &Config, link: &Link, cpu: Option<(usize, String)>) -> RunInfo {
    let kind = cfg.tool.kind;
    // perftest's address lines: OUT for reads, RKey and VAddr for writes and reads (its atomic
    // and send tests print neither).
    let rdma = matches!(kind, TestKind::Write | TestKind::Read);
    let reads = kind == TestKind::Read;
    let lines = |eps: &crate::proto::Endpoints| -> Vec<String> {
        eps.qps
            .iter()
            .map(|e| {
                endpoint_line(
                    e.lid,
                    e.qpn,
                    e.psn,
                    reads.then_some(link.outstanding),
                    rdma.then_some((e.rkey, e.addr)),
                )
            })
            .collect()
    };
    let (iterations, duration) = match cfg.mode {
        RunMode::Iters(n) => (n, None),
        RunMode::Duration(d) => (0, Some(d)),
    };
    RunInfo {
        tool: cfg.tool.name(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        test: kind,
        metric: cfg.tool.metric,
        role: if cfg.is_server() { "server" } else { "client" }.to_string(),
        conn_type: cfg.conn.to_string(),
        device: link.dev.ctx.name().to_string(),
        ib_port: cfg.ib_port,
        link_layer: link.dev.port.link_layer.to_string(),
        gid_index: link.dev.gid.entry.index,
        gid: gid_text(&link.dev.gid.entry.gid),
        remote_gid: link
            .remote
            .qps
            .first()
            .map(|e| gid_text(&e.gid))
            .unwrap_or_default(),
        mtu: link.path_mtu.bytes(),
        qps: cfg.qps,
        tx_depth: cfg.tx_depth,
        rx_depth: if kind == TestKind::Send {
            link.res.rx_posted
        } else {
            cfg.rx_depth
        },
        post_list: cfg.post_list,
        cq_moderation: cfg.effective_cq_mod(),
        max_inline: link.inline_limit,
        outstanding_reads: link.outstanding,
        atomic_type: cfg.atomic.map(|a| a.name().to_string()),
        bidirectional: cfg.bidirectional,
        use_events: cfg.events,
        duration,
        iterations,
        warmup_iterations: cfg.warmup,
        cpu,
        report_gbits: cfg.report_gbits,
        qp_timeout: cfg.qp_timeout,
        local_endpoints: lines(&link.local),
        remote_endpoints: lines(&link.remote),
    }
}

/// A GID as IPv6 text (`::ffff:192.168.77.1`, `fe80::...`): what RoCE users recognise.
fn gid_text(g: &verbs_lab::verbs::Gid) -> String {
    std::net::Ipv6Addr::from(g.0).to_string()
}
