//! One run of a tool, after the command line: pin → connect → agree → measure every size.
//!
//! The run is the library function [`run_tool`]: it neither prints nor exits, and hands each
//! header and row to a [`RowSink`] as soon as it is measured — a [`Reporter`] for the tools,
//! something else for a caller that runs several processes and merges their results (a
//! `--procs` worker). [`crate::entry::main`] is what a binary calls.

use std::time::Duration;

use anyhow::{anyhow, bail, Context as _, Result};
use verbs_lab::connect::port_mtu;
use verbs_lab::oob;
use verbs_lab::sysfs::PortCounters;
use verbs_lab::verbs::QpType;

use crate::conn::device::{self, LocalDev};
use crate::conn::listen::Notified;
use crate::conn::{self, Link};
use crate::counters;
use crate::engine::{Pacer, Session};
use crate::measure::result::{
    BwRow, LatRow, Metric, QpSettings, Rows, RunInfo, RunResult, TestKind,
};
use crate::output::Reporter;
use crate::params::{Config, RunMode, Sizes, Timing, Warmup};
use crate::progress::Progress;
use crate::proto::{ChanError, Channel, Hello, Msg, PeerFailed, Phase, ProtoError, VERSION};
use crate::report::endpoint_line;
use crate::signals::Control;
use crate::{bw, lat};

/// Where a run's header and rows go as they are measured.
pub trait RowSink {
    fn header(&mut self, info: &RunInfo);
    fn bw_row(&mut self, info: &RunInfo, row: &BwRow);
    fn lat_row(&mut self, info: &RunInfo, row: &LatRow);
    /// The two directions of a `-b` size, after its row (the sum): this side's and the peer's.
    fn bw_directions(&mut self, _local: &BwRow, _remote: &BwRow) {}
    /// Every sample of a latency size (`-H`, `-U`; ns, in the order taken), before its row.
    fn lat_samples(&mut self, _info: &RunInfo, _samples: &[u64]) {}
    /// The QPs are connected and the run is about to start its barrier with the peer: a worker
    /// of a `--procs` run reports Ready here and waits for Go, sending the peer heartbeats on
    /// `ch` meanwhile (the peer waits at that barrier). An error ends the run.
    fn connected(&mut self, _info: &RunInfo, _ch: &mut Channel) -> Result<()> {
        Ok(())
    }
    /// The port's NIC counter deltas over the run (before the first size to after the last).
    fn counters(&mut self, _deltas: crate::counters::Snapshot) {}
    /// The server listens for its client, its device open: it really waits now (perftest's
    /// "Waiting for client to connect..." banner goes here).
    fn listening(&mut self) {}
    /// Something a person waiting should know before any header (e.g. that the server does not
    /// accept yet); `tool` is the program's name.
    fn note(&mut self, _tool: &str, _text: &str) {}
    /// Nothing needs the rest of the run: what the sink prints has no reader any more and
    /// nothing waits for the end ([`Reporter::unread`]). Only a run without an end of its own
    /// (`--run_infinitely`) asks, at each period's boundary.
    fn unread(&self) -> bool {
        false
    }
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
    fn bw_directions(&mut self, local: &BwRow, remote: &BwRow) {
        Reporter::bw_directions(self, local, remote)
    }
    fn lat_samples(&mut self, info: &RunInfo, samples: &[u64]) {
        Reporter::lat_samples(self, info, samples)
    }
    fn counters(&mut self, deltas: crate::counters::Snapshot) {
        self.set_counters(deltas)
    }
    fn listening(&mut self) {
        self.waiting_banner()
    }
    fn note(&mut self, tool: &str, text: &str) {
        verbs_lab::eprintln_whole!("{tool}: note: {text} (--wait)");
    }
    fn unread(&self) -> bool {
        Reporter::unread(self)
    }
}

/// A sink that keeps nothing: the rows are in the returned [`RunResult`] anyway.
pub struct NoSink;

impl RowSink for NoSink {
    fn header(&mut self, _: &RunInfo) {}
    fn bw_row(&mut self, _: &RunInfo, _: &BwRow) {}
    fn lat_row(&mut self, _: &RunInfo, _: &LatRow) {}
}

/// Whether this side of the test prints rows: every side of a bandwidth test (a server that
/// measured nothing prints the client's rows, as perftest's), and both sides of the send and
/// write latency ping-pongs; not the passive server of read and atomic latency.
pub fn reports_rows(cfg: &Config) -> bool {
    cfg.tool.metric == Metric::Bw || measures(cfg)
}

/// Whether this side measures its rows itself: the side that posts (the client, the server
/// with `--reversed`) always; the other side when it receives sends (send bandwidth), sends
/// itself (`-b`) or plays ping-pong (send/write latency).
pub fn measures(cfg: &Config) -> bool {
    let kind = cfg.tool.kind;
    match cfg.tool.metric {
        Metric::Bw => cfg.is_requester() || kind == TestKind::Send || cfg.bidirectional,
        Metric::Lat => !cfg.is_server() || matches!(kind, TestKind::Write | TestKind::Send),
    }
}

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
/// connected, the peer is sent the reason (it prints it too). A stop signal that `control`
/// receives ([`crate::signals::install`]) stops the run the same way.
pub fn run_tool(cfg: &Config, control: &Control, sink: &mut dyn RowSink) -> Result<RunResult> {
    run_tool_paced(cfg, control, sink, None)
}

/// [`run_tool`] with a [`Pacer`] hooked into every size (a `--procs` worker's barrier).
pub fn run_tool_paced(
    cfg: &Config,
    control: &Control,
    sink: &mut dyn RowSink,
    pacer: Option<&mut dyn Pacer>,
) -> Result<RunResult> {
    run_met(cfg, control, sink, pacer, None)
}

/// [`run_tool_paced`] for a server whose client is already met: its channel, whose HELLO was
/// checked and accepted (a `--serve --concurrent` server, see [`crate::serve`]).
pub fn run_for_client(
    cfg: &Config,
    control: &Control,
    client: (Channel, Hello),
    sink: &mut dyn RowSink,
    pacer: Option<&mut dyn Pacer>,
) -> Result<RunResult> {
    run_met(cfg, control, sink, pacer, Some(client))
}

fn run_met(
    cfg: &Config,
    control: &Control,
    sink: &mut dyn RowSink,
    pacer: Option<&mut dyn Pacer>,
    met: Option<(Channel, Hello)>,
) -> Result<RunResult> {
    let dev = device::open_device(cfg)?;
    // The device's asynchronous events (a port going down, a fatal QP or device error) end
    // the run within a moment, named (see events.rs); the watch outlives the channel below.
    let events = crate::events::watch(&dev.ctx, cfg.device.ib_port, control)
        .with_context(|| format!("watching {}'s asynchronous events", dev.ctx.name()))?;
    let cpu = crate::pin::pin(cfg, &dev)?;
    let cq_timeout = conn::completion_timeout(cfg);
    let peer_timeout = cq_timeout.max(Duration::from_secs(15));
    // The server's guard turns away other clients until the run ends (it is dropped last).
    let settled: Config;
    let (cfg, mut ch, _refuser) = match (met, &cfg.peer.host) {
        (Some((mut ch, hello)), _) => {
            ch.set_timeout(peer_timeout)?;
            settled = settle_with_client(cfg, &hello);
            (&settled, ch, None)
        }
        (None, None) => {
            let a = crate::conn::listen::accept_client(
                cfg,
                &our_hello(cfg),
                peer_timeout,
                || sink.listening(),
                &events.fault(),
            )?;
            settled = settle_with_client(cfg, &a.hello);
            (&settled, a.ch, Some(a.refuser))
        }
        (None, Some(h)) => {
            let note = |text: String| sink.note(&cfg.tool.name(), &text);
            // A device event while the server does not answer yet ends the wait, named.
            let fault = events.fault();
            let conn = oob::connect_unless(h, cfg.peer.port, cfg.peer.wait, note, || {
                fault.fatal_now().is_some()
            })
            .with_context(|| format!("connecting to the server {h}:{}", cfg.peer.port))?;
            let Some(conn) = conn else {
                fault.check()?;
                bail!("the wait for the server was stopped");
            };
            let mut ch = Channel::new(conn, "server");
            ch.set_timeout(peer_timeout)?;
            (cfg, ch, None)
        }
    };
    ch.set_phase_limit(crate::engine::phase_limit(cfg, cq_timeout));
    ch.watch_device(events.fault());
    // From here a signal stops the run through its error path (and tells the peer); the watch
    // ends before the channel is closed.
    ch.stop_on_signals(control);
    let _watch = control.watch_socket(ch.raw_fd());

    session(
        cfg,
        dev,
        cpu,
        &mut ch,
        (cq_timeout, peer_timeout),
        sink,
        pacer,
    )
    .map_err(|e| tell_peer(&mut ch, e))
}

/// The server's configuration for the client whose HELLO was accepted: without `--warmup` of
/// its own, the client's warm-up (see [`crate::proto::check_hello`]).
fn settle_with_client(cfg: &Config, client: &Hello) -> Config {
    let mut settled = cfg.clone();
    if cfg.timing.warmup == Warmup::Auto {
        if let Some(w) = crate::proto::client_warmup(client) {
            settled.timing.warmup = w;
        }
    }
    settled
}

/// Tells the peer why this side stops, unless it knows already (it sent the reason, we refused
/// its HELLO, or this error was sent before). The peer may have failed first and said why (a
/// refused validation makes our completions fail): its reason is preferred.
fn tell_peer(ch: &mut Channel, e: anyhow::Error) -> anyhow::Error {
    if let Some(i) = ch.control().received() {
        if !ch.error_sent() {
            ch.send_error(&i.for_the_peer());
        }
        return anyhow::Error::new(i);
    }
    // A fatal device event explains whatever the loop met after it (failed completions, the
    // socket woken to stop a blocked read): the event is the error, and the peer hears it.
    if let Some(ev) = ch.device_fault() {
        if !ch.error_sent() {
            ch.send_error(&ev.to_string());
        }
        return anyhow::Error::new(ev);
    }
    if peer_knows(&e) || ch.error_sent() {
        return e;
    }
    let theirs = ch.pending_peer_error(Duration::from_millis(300));
    ch.send_error(&format!("{e:#}"));
    match theirs {
        Some(p) => anyhow!("{p} (and on this side: {e:#})"),
        None => e,
    }
}

/// This side's HELLO: the tool and every parameter that must match.
pub fn our_hello(cfg: &Config) -> Hello {
    Hello {
        version: VERSION,
        tool: cfg.tool.name(),
        test: cfg.tool.kind,
        metric: cfg.tool.metric,
        params: cfg
            .wire_params()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
    }
}

/// The client's HELLO and the server's answer. (The server takes the HELLO while accepting,
/// in [`crate::conn::listen`]: it checks every parameter and refuses a mismatch with an ERROR that
/// names each differing parameter with both values.)
fn client_hello(cfg: &Config, ch: &mut Channel) -> Result<()> {
    ch.send(&Msg::Hello(our_hello(cfg)))?;
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
        // A malformed answer already names what it was ("the server's answer to HELLO").
        Err(e @ ChanError::Proto { .. }) => Err(anyhow::Error::new(e)),
        Err(e) => Err(anyhow::Error::new(e).context("waiting for the server's answer")),
    }
}

fn session(
    cfg: &Config,
    dev: LocalDev,
    cpu: Option<(usize, String)>,
    ch: &mut Channel,
    (cq_timeout, peer_timeout): (Duration, Duration),
    sink: &mut dyn RowSink,
    pacer: Option<&mut dyn Pacer>,
) -> Result<RunResult> {
    if !cfg.is_server() {
        client_hello(cfg, ch)?;
    }

    // Buffers sized for the largest message this side can carry; the sweep is capped by both
    // sides once the endpoints are exchanged.
    let max = match cfg.sizes {
        Sizes::Single(s) => s,
        // UD without -s: the path MTU, at most ours.
        Sizes::PathMtu => u64::from(port_mtu(dev.port.active_mtu).bytes()),
        Sizes::Sweep { max } => {
            let mut m = max.min(u64::from(dev.port.max_msg_sz));
            if cfg.conn == QpType::Ud {
                m = m.min(u64::from(port_mtu(dev.port.active_mtu).bytes()));
            }
            m
        }
    };
    let res = conn::create_resources(cfg, &dev, max)?;
    let local = conn::local_endpoints(&dev, &res);
    // -R: the server's rdma_cm listener exists before the client learns our endpoints.
    let cm_listen = crate::conn::rdmacm::listen(cfg)?;
    let remote = conn::exchange_endpoints(cfg, ch, &local)?;
    let link = conn::connect(cfg, dev, res, local, remote, cm_listen)?;

    // --run_infinitely warms up before the first period only.
    let later_periods = Config {
        timing: Timing {
            warmup: Warmup::Iters(0),
            ..cfg.timing
        },
        ..cfg.clone()
    };
    // Receive buffers: posted now, before the peer can send, and kept posted for the run.
    let mut s = Session {
        cfg,
        link,
        ch,
        cq_timeout,
        peer_timeout,
        // (Re-borrowed, so that the hook's lifetime may shrink to the session's.)
        pacer: match pacer {
            Some(p) => Some(p),
            None => None,
        },
    };
    // On a failure the peer hears why before this side tears its QPs down: destroyed first,
    // they would make the peer's requests fail (retries exceeded, remote access) and the peer
    // would print that instead of the cause.
    let r = measure(&mut s, &later_periods, cpu, sink);
    r.map_err(|e| tell_peer(s.ch, e))
    // `s`, and with it the QPs, MR and CQ, is torn down here.
}

/// Posts the receives, runs every size and the final barrier.
fn measure<'c>(
    s: &mut Session<'c>,
    later_periods: &'c Config,
    cpu: Option<(usize, String)>,
    sink: &mut dyn RowSink,
) -> Result<RunResult> {
    let cfg = s.cfg;
    if cfg.posts_receives() {
        let posted = s.link.res.rx_posted as usize;
        for q in 0..cfg.qps as usize {
            s.post_receives(q, 0..posted)
                .with_context(|| format!("posting {posted} receives on QP {q}"))?;
        }
    }
    let info = run_info(cfg, &s.link, cpu);
    sink.connected(&info, s.ch)?;
    s.ch.sync(Phase::Connected, 0)?;

    sink.header(&info);
    let before = PortCounters::snapshot(s.link.dev.ctx.name(), cfg.device.ib_port);
    let sizes = s.link.agreed.sizes.clone();
    let progress = Progress::start(cfg, &sizes);
    let rows = match cfg.tool.metric {
        Metric::Bw if cfg.timing.run_infinitely => {
            let rows = run_infinitely(s, later_periods, &info, sink)?;
            sink.counters(counters::deltas(&before));
            // The periods ended with SYNC(finish) already.
            return Ok(RunResult {
                info,
                rows: Rows::Bw(rows),
            });
        }
        Metric::Bw => {
            let mut rows = Vec::with_capacity(sizes.len());
            for size in sizes {
                progress.warmed_size(size, cfg.timing.warmup.iters(size));
                let out = bw::run_size_both(s, size)?;
                if let Some(r) = out.row {
                    progress.row(|| sink.bw_row(&info, &r));
                    rows.push(r);
                }
                if let Some((local, remote)) = out.directions {
                    sink.bw_directions(&local, &remote);
                }
            }
            Rows::Bw(rows)
        }
        Metric::Lat => {
            let mut sq = lat::SendQueue::default();
            let mut rows = Vec::with_capacity(sizes.len());
            for size in sizes {
                progress.warmed_size(size, cfg.timing.warmup.iters(size));
                let out = lat::run_size(s, size, &mut sq)?;
                if let Some(r) = out.row {
                    progress.row(|| {
                        if let Some(samples) = &out.samples {
                            sink.lat_samples(&info, samples);
                        }
                        sink.lat_row(&info, &r)
                    });
                    rows.push(r);
                }
            }
            Rows::Lat(rows)
        }
    };
    sink.counters(counters::deltas(&before));
    drop(progress);
    s.ch.sync(Phase::Finish, 0)?;
    if let Some(d) = cfg.wait_destroy {
        // perftest's --wait_destroy: keep the QPs, CQs and memory a while (for a look with
        // rdma-tool or the counters) before they are destroyed.
        verbs_lab::signals::sleep(d);
    }
    Ok(RunResult { info, rows })
}

/// perftest's `--run_infinitely`: the size runs for a `-D` period, its row is printed, and
/// again, until the client is stopped by SIGINT or SIGTERM; it then finishes the period under
/// way, tells the server with SYNC(finish) instead of SYNC(period) and both sides end cleanly.
/// (perftest's client dies of the signal and its server fails.) The client ends the same way,
/// without a word, once its rows have no reader and no file or gate waits for the end
/// (`| head`, [`RowSink::unread`]): else it would print into nothing for ever. Each period is a
/// run of its own: between two, the sides exchange their rows and resynchronise over TCP.
fn run_infinitely<'c>(
    s: &mut Session<'c>,
    later: &'c Config,
    info: &RunInfo,
    sink: &mut dyn RowSink,
) -> Result<Vec<BwRow>> {
    let size = s
        .link
        .agreed
        .sizes
        .first()
        .copied()
        .context("no message size to run")?;
    // The client's first SIGINT or SIGTERM asks for a clean stop after the period under way
    // (a second one exits at once, see signals.rs), and so does a stdout no one reads; the
    // server stops when the client says so.
    let client = !s.cfg.is_server();
    if client {
        s.ch.control().stop_softly();
    }
    let mut rows = Vec::new();
    for period in 0u64.. {
        let go = match client {
            true => {
                let go = !s.ch.control().soft_stop_requested() && !sink.unread();
                let ph = if go { Phase::Period } else { Phase::Finish };
                s.ch.sync(ph, if go { period } else { 0 })?;
                go
            }
            false => {
                let what = "the client's next period or its finish";
                let go = match s.ch.recv_skipping_heartbeats(what)? {
                    Msg::Barrier(y) if y.phase == Phase::Period && y.size == period => true,
                    Msg::Barrier(y) if y.phase == Phase::Finish => false,
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
                s.ch.send(&Msg::Barrier(crate::proto::Barrier { phase: ph, size: n }))?;
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
                    reads.then_some(link.agreed.outstanding),
                    rdma.then_some((e.rkey, e.addr)),
                )
            })
            .collect()
    };
    let (iterations, duration) = match cfg.timing.mode {
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
        ib_port: cfg.device.ib_port,
        link_layer: link.dev.port.link_layer.to_string(),
        gid_index: link.dev.gid.entry.index,
        gid: gid_text(&link.dev.gid.entry.gid),
        remote_gid: link
            .remote
            .qps
            .first()
            .map(|e| gid_text(&e.gid))
            .unwrap_or_default(),
        qp: QpSettings {
            mtu: link.agreed.path_mtu.bytes(),
            qps: cfg.qps,
            tx_depth: cfg.queues.tx_depth,
            rx_depth: if cfg.posts_receives() {
                link.res.rx_posted
            } else {
                cfg.queues.rx_depth
            },
            post_list: cfg.queues.post_list,
            recv_post_list: cfg.queues.recv_post_list,
            cq_moderation: cfg.queues.signal_period(cfg.tool),
            max_inline: link.agreed.inline_limit,
            outstanding_reads: link.agreed.outstanding,
        },
        atomic_type: cfg.atomic.map(|a| a.name().to_string()),
        bidirectional: cfg.bidirectional,
        reversed: cfg.reversed,
        with_imm: cfg.send_with_imm || cfg.write_with_imm,
        use_events: cfg.events,
        duration,
        iterations,
        // The most per QP at any size: the first (smallest) size's.
        warmup_iterations: cfg
            .timing
            .warmup
            .iters(link.agreed.sizes.first().copied().unwrap_or(1)),
        cpu,
        report_gbits: cfg.report_gbits,
        qp_timeout: cfg.qp_timeout,
        rdma_cm: cfg.rdma_cm.is_some(),
        local_endpoints: lines(&link.local),
        remote_endpoints: lines(&link.remote),
    }
}

/// A GID as IPv6 text (`::ffff:192.168.77.1`, `fe80::...`): what RoCE users recognise.
fn gid_text(g: &verbs_lab::verbs::Gid) -> String {
    std::net::Ipv6Addr::from(g.0).to_string()
}
