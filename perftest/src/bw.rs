//! The bandwidth tests: RDMA Write, RDMA Read, Send and the atomics, one size at a time, every
//! size of a sweep through the same code.
//!
//! One loop serves every role. A side that sends keeps every QP's send queue full (post lists of
//! `-l`, one signaled request every `-Q`), drains the shared CQ 32 completions at a time and
//! takes a timestamp only when completions arrived; a side that receives re-posts each consumed
//! receive as it goes. Nothing in the loop allocates: the requests are built once per size and
//! only their `wr_id`, signaled flag and (with `--validate`) slot are rewritten before a post.
//! Every so often (a clock read per 64 turns of the loop, or when idle) the loop watches the
//! clock (`-D`, stalls) and the peer (its tally, heartbeats, an ERROR).
//!
//! The measurement (see `docs/measurement.md`): bytes of the measured phase over the time from
//! the first post to the last completion; the peak is the best bandwidth over windows of
//! `max(tx depth × QPs, messages / 100)` completions.

use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use verbs_lab::verbs::{
    Ah, Mr, Payload, Qp, RemoteBuf, SendOp, SendWr, Sge, UdDest, WcOpcode, WorkCompletion,
};

use crate::conn::{Layout, Link, Resources};
use crate::engine::{
    backoff, check_tally, completed_through, poll_or_sleep, remote_op, send_tally, wc_error, wr_id,
    PeerWatch, Session, LOSSY_GRACE, POLL_BATCH, QP_SHIFT, SEQ_MASK,
};
use crate::params::{Config, RunMode};
use crate::pattern;
use crate::proto::Endpoints;
use crate::proto::{Msg, Phase, WireRow};
use crate::result::{BwRow, TestKind};
use verbs_lab::diag::{device_report, PortCounters};

/// Measures one message size; returns the row this side reports (none on a server that only
/// serves a one-way test).
pub fn run_size(s: &mut Session<'_>, size: u64) -> Result<Option<BwRow>> {
    let cfg = s.cfg;
    prepare(s, size)?;
    s.ch.sync(Phase::Ready, size).map_err(anyhow::Error::new)?;

    let warm = if cfg.warmup > 0 {
        phase(s, Phase::WarmUp, size, RunMode::Iters(cfg.warmup), &[], &[])
            .with_context(|| format!("warm-up of size {size}"))?
    } else {
        PhaseOut::default()
    };
    s.enter_measure(size)?;
    let out = phase(
        s,
        Phase::Measure,
        size,
        cfg.mode,
        &warm.sent,
        &warm.peer_sent,
    )
    .with_context(|| format!("measurement of size {size}"))?;

    if cfg.validate {
        validate(s, size, &warm, &out)?;
    }

    let measured = out.tx.as_ref().or(out.rx.as_ref());
    if let Some(m) = measured {
        s.measured(size, m.start, m.end);
    }
    let mine = measured.map(|m| m.row(size, cfg.no_peak));
    let row = exchange_rows(s, size, mine)?;
    s.ch.sync(Phase::Done, size).map_err(anyhow::Error::new)?;
    Ok(row)
}

/// The rows both sides print, as perftest's `xchg_bw_reports`: with `-b` each side sends its
/// own direction and prints the sum of both; in a one-way RDMA Write, Read or atomic test the
/// server measured nothing and prints the client's row. (The send test's server measures what
/// it received and prints that.)
fn exchange_rows(s: &mut Session<'_>, size: u64, mine: Option<BwRow>) -> Result<Option<BwRow>> {
    let cfg = s.cfg;
    let server_echoes = cfg.is_server() && !cfg.bidirectional && cfg.tool.kind != TestKind::Send;
    let client_reports = !cfg.is_server() && !cfg.bidirectional && cfg.tool.kind != TestKind::Send;
    if cfg.bidirectional || client_reports {
        let mine = mine.context("this side measured nothing")?;
        s.ch.send(&Msg::Result(WireRow::from(&mine)))
            .map_err(anyhow::Error::new)?;
        if client_reports {
            return Ok(Some(mine));
        }
    }
    if !(cfg.bidirectional || server_echoes) {
        return Ok(mine);
    }
    let what = format!("the {}'s result of size {size}", s.ch.peer_name());
    let theirs = match s
        .ch
        .recv_skipping_heartbeats(&what)
        .map_err(anyhow::Error::new)?
    {
        Msg::Result(w) if w.bytes == size => BwRow::from(w),
        Msg::Result(w) => bail!(
            "protocol out of step: the peer sent the result of size {}, expected {size}",
            w.bytes
        ),
        other => bail!(
            "protocol out of step: expected the peer's RESULT, got {}",
            other.name()
        ),
    };
    Ok(Some(match mine {
        Some(m) if cfg.bidirectional => sum_rows(&m, &theirs),
        _ => theirs,
    }))
}

/// Both directions of a bidirectional run: bandwidths and message rates add up; the elapsed
/// time is the longer one. The peak is the sum of each direction's peak, an upper bound when
/// the two peaks did not coincide.
pub fn sum_rows(a: &BwRow, b: &BwRow) -> BwRow {
    BwRow {
        bytes: a.bytes,
        iterations: a.iterations,
        peak_bps: a.peak_bps + b.peak_bps,
        avg_bps: a.avg_bps + b.avg_bps,
        msg_rate_mpps: a.msg_rate_mpps + b.msg_rate_mpps,
        elapsed: a.elapsed.max(b.elapsed),
    }
}

/// Buffers for `--validate`: the RDMA Write target is cleared (so a message that never landed
/// shows); the RDMA Read source holds message 0 of each QP and the read destination is cleared.
fn prepare(s: &Session<'_>, size: u64) -> Result<()> {
    if !s.cfg.validate {
        return Ok(());
    }
    let n = size as usize;
    let Resources {
        src, dst, layout, ..
    } = &s.link.res;
    for (q, rx) in dst.iter().enumerate() {
        match s.cfg.tool.kind {
            TestKind::Write => rx.fill(layout.dst_region(q), 0)?,
            TestKind::Read => {
                let d = layout.dst(q, 0);
                pattern::fill_body_mr(rx, d..d + n, q)?;
                pattern::stamp_mr(rx, d, n, 0, false)?;
                src.fill(layout.src_region(q), 0)?;
            }
            TestKind::Send | TestKind::Atomic => {}
        }
    }
    Ok(())
}

/// What a phase measured on one side.
#[derive(Debug, Clone, Copy)]
pub struct Measured {
    /// Messages over all QPs.
    pub msgs: u64,
    pub start: Instant,
    pub end: Instant,
    /// Bytes per second of the best window.
    pub peak_bps: f64,
}

impl Measured {
    /// perftest's `-f/--margin` of a `-D` run: only the completions between `margin` after the
    /// start and `margin` before the end of the duration `d` count, read from the log of
    /// completion counts the loop kept anyway (to within one log window). A run too short to
    /// hold two log entries inside the margins keeps its whole span.
    pub fn within_margin(self, log: &PeakLog, d: Duration, margin: Duration) -> Measured {
        let from = self.start + margin;
        let to = self.start + d.saturating_sub(margin);
        match log.between(from, to) {
            Some((msgs, start, end)) => Measured {
                msgs,
                start,
                end,
                ..self
            },
            None => self,
        }
    }

    /// The report row for `size` bytes per message.
    pub fn row(&self, size: u64, no_peak: bool) -> BwRow {
        let elapsed = self.end.saturating_duration_since(self.start);
        let secs = elapsed.as_secs_f64().max(1e-9);
        let avg = self.msgs as f64 * size as f64 / secs;
        BwRow {
            bytes: size,
            // perftest's #iterations: the messages of all QPs (-n × -q).
            iterations: self.msgs,
            peak_bps: if no_peak { 0.0 } else { self.peak_bps.max(avg) },
            avg_bps: avg,
            msg_rate_mpps: self.msgs as f64 / secs / 1e6,
            elapsed,
        }
    }
}

/// What a phase did.
#[derive(Debug, Default)]
pub struct PhaseOut {
    /// This side's sending, if it sent.
    pub tx: Option<Measured>,
    /// This side's receiving (send tools), if it received.
    pub rx: Option<Measured>,
    /// Messages this side posted per QP.
    pub sent: Vec<u64>,
    /// The peer's tally (what it posted per QP), if it sent.
    pub peer_sent: Vec<u64>,
}

/// Completion-count boundaries and when they were seen, for the peak. At most [`PeakLog::CAP`]
/// entries are kept: when full, every other one is dropped and the window doubles, so a run of
/// any length is covered without allocating in the loop.
pub struct PeakLog {
    window: u64,
    next: u64,
    counts: Vec<u64>,
    times: Vec<Instant>,
}

impl PeakLog {
    pub const CAP: usize = 1024;

    /// Starts at `t0` with boundaries every `window` completions.
    pub fn new(window: u64, t0: Instant) -> PeakLog {
        let mut counts = Vec::with_capacity(Self::CAP);
        let mut times = Vec::with_capacity(Self::CAP);
        counts.push(0);
        times.push(t0);
        PeakLog {
            window: window.max(1),
            next: window.max(1),
            counts,
            times,
        }
    }

    /// Notes that `total` completions were seen by `now`.
    #[inline]
    pub fn record(&mut self, total: u64, now: Instant) {
        if total < self.next {
            return;
        }
        self.counts.push(total);
        self.times.push(now);
        self.next = total + self.window;
        if self.counts.len() == Self::CAP {
            let mut k = 0;
            for i in (0..Self::CAP).step_by(2) {
                self.counts[k] = self.counts[i];
                self.times[k] = self.times[i];
                k += 1;
            }
            self.counts.truncate(k);
            self.times.truncate(k);
            self.window *= 2;
            self.next = self.counts[k - 1] + self.window;
        }
    }

    /// The completions logged between `from` and `to`: the count between the first entry at or
    /// after `from` and the last at or before `to`, with their times (`None` without two such
    /// entries).
    pub fn between(&self, from: Instant, to: Instant) -> Option<(u64, Instant, Instant)> {
        let i = self.times.iter().position(|t| *t >= from)?;
        let j = self.times.iter().rposition(|t| *t <= to)?;
        (j > i).then(|| {
            (
                self.counts[j] - self.counts[i],
                self.times[i],
                self.times[j],
            )
        })
    }

    /// The best bandwidth over any stretch of at least `min_window` completions, in bytes per
    /// second (0 when the run was too short to hold one such stretch).
    pub fn peak(&self, size: u64, min_window: u64) -> f64 {
        let mut best = 0.0f64;
        let mut j = 0;
        for i in 0..self.counts.len() {
            if j <= i {
                j = i + 1;
            }
            while j < self.counts.len() && self.counts[j] - self.counts[i] < min_window {
                j += 1;
            }
            if j >= self.counts.len() {
                break;
            }
            let dt = self.times[j].saturating_duration_since(self.times[i]);
            if dt > Duration::ZERO {
                let bps = (self.counts[j] - self.counts[i]) as f64 * size as f64 / dt.as_secs_f64();
                best = best.max(bps);
            }
        }
        best
    }
}

/// One QP's sending state within a phase.
struct TxQp<'a> {
    qp: &'a Qp,
    batch: Vec<SendWr<'a>>,
    sges: &'a [Sge<'a>],
    remote: RemoteBuf,
    remote_slots: u64,
    remote_stride: u64,
    posted: u64,
    completed: u64,
    target: u64,
    signaled_upto: u64,
    /// The request count at which the next signaled request falls.
    next_signal: u64,
}

/// A phase's sender settings.
struct TxCfg {
    window: u64,
    cq_mod: u64,
    post_list: u64,
    size: usize,
    /// Messages of the earlier phases of this size (sequence numbers continue).
    seq_base: Vec<u64>,
    /// Stamp each message's sequence number into its slot before posting it (`--validate`).
    stamp: bool,
    /// Choose the slots (local and remote) per message.
    per_post: bool,
    inline: bool,
}

const RUNNING: u64 = u64::MAX / 2;

/// Fills `tx`'s window with post lists (the last list of a run may be shorter). Returns how
/// many requests were posted.
#[inline]
fn post_some(tx: &mut TxQp<'_>, q: usize, c: &TxCfg, mr: &Mr, layout: &Layout) -> Result<u64> {
    let mut total = 0;
    loop {
        let room = c.window - (tx.posted - tx.completed);
        let n = c.post_list.min(tx.target - tx.posted);
        if n == 0 || room < n {
            return Ok(total);
        }
        post_list(tx, q, n, c, mr, layout)?;
        total += n;
    }
}

/// Posts the next `n` requests of `tx` as one list.
#[inline]
fn post_list(
    tx: &mut TxQp<'_>,
    q: usize,
    n: u64,
    c: &TxCfg,
    mr: &Mr,
    layout: &Layout,
) -> Result<()> {
    for k in 0..n {
        let count = tx.posted + k;
        let wr = &mut tx.batch[k as usize];
        wr.wr_id = wr_id(q, count);
        // One signaled request every `cq_mod` (a countdown, not a division per request), and
        // the last one always.
        wr.signaled = count + 1 == tx.next_signal || count + 1 == tx.target;
        if count + 1 == tx.next_signal {
            tx.next_signal += c.cq_mod;
        }
        if c.per_post {
            let seq = c.seq_base[q] + count;
            let slot = (seq % tx.sges.len() as u64) as usize;
            wr.payload = Payload::Sges(&tx.sges[slot..slot + 1]);
            let rslot = seq % tx.remote_slots;
            let remote = RemoteBuf {
                addr: tx.remote.addr + rslot * tx.remote_stride,
                ..tx.remote
            };
            wr.op = match wr.op {
                SendOp::Write(_) => SendOp::Write(remote),
                SendOp::Read(_) => SendOp::Read(remote),
                other => other,
            };
            if c.stamp {
                let off = layout.src(q, slot);
                pattern::stamp_mr(mr, off, c.size, seq, false)?;
            }
        }
    }
    let list = &tx.batch[..n as usize];
    let r = if c.inline {
        tx.qp.post_send_inline(list, mr)
    } else {
        tx.qp.post_send(list)
    };
    r.with_context(|| format!("ibv_post_send on QP {q}"))?;
    tx.posted += n;
    if tx.batch[n as usize - 1].signaled {
        tx.signaled_upto = tx.posted;
    }
    Ok(())
}

/// Receive-side state of a phase.
struct Rx {
    received: Vec<u64>,
    /// Next expected sequence number per QP (validation).
    next_seq: Vec<u64>,
    /// Slots to re-post per QP.
    pending: Vec<Vec<usize>>,
    total: u64,
    last: Option<Instant>,
}

/// The source SGEs of every QP's slots (an atomic reads or writes 8 bytes).
fn source_sges<'m>(
    cfg: &Config,
    mr: &'m Mr,
    layout: &Layout,
    n: usize,
) -> Result<Vec<Vec<Sge<'m>>>> {
    let nq = cfg.qps as usize;
    (0..nq)
        .map(|q| {
            (0..layout.src_slots)
                .map(|slot| {
                    let off = layout.src(q, slot);
                    let len = if cfg.tool.kind == TestKind::Atomic {
                        8
                    } else {
                        n
                    };
                    mr.sge(off..off + len)
                })
                .collect::<std::result::Result<Vec<_>, _>>()
        })
        .collect::<std::result::Result<Vec<_>, _>>()
        .context("building the SGEs")
}

/// A phase's sender settings: the window (with stamping, no more requests in flight than
/// source slots), the post list, the signaling interval and whether requests go inline.
fn tx_cfg(
    cfg: &Config,
    layout: &Layout,
    n: usize,
    remote: &Endpoints,
    inline_limit: u32,
    seq_base: Vec<u64>,
) -> TxCfg {
    let stamp = cfg.validate && matches!(cfg.tool.kind, TestKind::Write | TestKind::Send);
    // Stamping rewrites a source slot before each post: no more requests in flight than slots.
    let window = if stamp {
        u64::from(cfg.tx_depth).min(layout.src_slots as u64)
    } else {
        u64::from(cfg.tx_depth)
    };
    let post_list = u64::from(cfg.post_list).min(window);
    TxCfg {
        window,
        // Every full window must hold a signaled request (see Config::effective_cq_mod).
        cq_mod: u64::from(cfg.effective_cq_mod()).min(window - post_list + 1),
        post_list,
        size: n,
        seq_base,
        stamp,
        per_post: stamp || layout.src_slots > 1 || remote.qps.iter().any(|r| r.slots > 1),
        inline: n as u64 <= u64::from(inline_limit) && inline_limit > 0,
    }
}

/// One sender per QP: its post list of requests aimed at the peer's buffer, built once per phase
/// (only `wr_id`, the signaled flag and the slots change before a post).
fn senders<'a>(
    cfg: &Config,
    qps: &'a [Qp],
    remote: &Endpoints,
    ahs: &'a [Ah],
    src_sges: &'a [Vec<Sge<'a>>],
    c: &TxCfg,
    mode: RunMode,
) -> Vec<TxQp<'a>> {
    let (nq, n) = (cfg.qps as usize, c.size);
    let mut txs: Vec<TxQp<'a>> = Vec::with_capacity(nq);
    for q in 0..nq {
        let r = &remote.qps[q];
        let (rb, op) = remote_op(cfg, r, n);
        let sges = &src_sges[q][..];
        let mut wr = SendWr::new(0, op, Payload::Sges(&sges[..1]));
        if let Some(ah) = ahs.get(q) {
            wr = wr.to(UdDest {
                ah,
                remote_qpn: r.qpn,
                remote_qkey: remote.qkey,
            });
        }
        txs.push(TxQp {
            qp: &qps[q],
            batch: vec![wr; cfg.post_list as usize],
            sges,
            remote: rb,
            remote_slots: u64::from(r.slots),
            remote_stride: u64::from(r.slot_stride),
            posted: 0,
            completed: 0,
            target: match mode {
                RunMode::Iters(k) => k,
                RunMode::Duration(_) => RUNNING,
            },
            signaled_upto: 0,
            next_signal: c.cq_mod,
        });
    }
    txs
}

/// One side's measurement of a phase: `msgs` over `span`, the peak over windows of at least
/// `win0` completions (or a hundredth of the messages), cut to the margin of a `-D` run.
fn measured(
    cfg: &Config,
    mode: RunMode,
    size: u64,
    msgs: u64,
    span: (Instant, Instant),
    win0: u64,
    log: &PeakLog,
) -> Measured {
    let min_win = win0.max(msgs / 100);
    let m = Measured {
        msgs,
        start: span.0,
        end: span.1,
        peak_bps: if cfg.no_peak {
            0.0
        } else {
            log.peak(size, min_win)
        },
    };
    match (mode, cfg.margin) {
        (RunMode::Duration(d), Some(margin)) => m.within_margin(log, d, margin),
        _ => m,
    }
}

/// Runs one phase of one size: posts (if this side sends), receives (if it receives), exchanges
/// tallies. `sent_before` / `peer_sent_before` count the messages of the earlier phases of this
/// size per QP, sent by this side and by the peer: sequence numbers continue across phases.
fn phase(
    s: &mut Session<'_>,
    ph: Phase,
    size: u64,
    mode: RunMode,
    sent_before: &[u64],
    peer_sent_before: &[u64],
) -> Result<PhaseOut> {
    let cfg = s.cfg;
    let nq = cfg.qps as usize;
    let sends = s.bw_sends();
    let receives = s.bw_receives();
    let peer_sends = s.bw_peer_sends();
    let lossy = s.lossy();
    let rx_off = s.rx_offset();
    let (cq_timeout, peer_timeout) = (s.cq_timeout, s.peer_timeout);
    let software = s.yields();
    let base =
        |v: &[u64]| -> Vec<u64> { (0..nq).map(|q| v.get(q).copied().unwrap_or(0)).collect() };
    let seq_base = base(sent_before);
    let rx_seq_base = base(peer_sent_before);

    let Session { link, ch, .. } = s;
    let Link {
        res,
        remote,
        ahs,
        inline_limit,
        ..
    } = link;
    let Resources {
        src: mr,
        dst,
        qps,
        cq,
        channel,
        layout,
        ..
    } = res;
    let layout = *layout;
    let n = size as usize;
    // The port's counters as the phase starts, for the stall message (read outside the loop).
    let counters = PortCounters::snapshot(link.dev.ctx.name(), cfg.ib_port);

    // Requests, built once per phase.
    let src_sges = source_sges(cfg, mr, &layout, n)?;
    let c = tx_cfg(cfg, &layout, n, remote, *inline_limit, seq_base);
    let mut txs = if sends {
        senders(cfg, qps, remote, ahs, &src_sges, &c, mode)
    } else {
        Vec::new()
    };
    let mut rx = Rx {
        received: vec![0; nq],
        next_seq: rx_seq_base,
        // Re-posted after every poll, so at most one poll's worth is pending.
        pending: (0..nq).map(|_| Vec::with_capacity(POLL_BATCH)).collect(),
        total: 0,
        last: None,
    };

    let mut wcs = WorkCompletion::array::<POLL_BATCH>();
    let mut watch = PeerWatch::new(ph, size);
    let t_phase = Instant::now();
    let deadline = match mode {
        RunMode::Duration(d) => Some(t_phase + d),
        RunMode::Iters(_) => None,
    };
    let win0 = u64::from(cfg.tx_depth.max(cfg.effective_cq_mod())) * nq as u64;
    let mut tx_log = PeakLog::new(win0, t_phase);
    let mut rx_log = PeakLog::new(win0, t_phase);
    let mut first_post: Option<Instant> = None;
    let mut last_completion = t_phase;
    let mut last_progress = t_phase;
    let mut tx_total = 0u64;
    let mut tx_done = !sends;
    let mut rx_done = !receives;
    let mut posting = sends;
    let mut stopped = false;
    let mut turns = 0u32;
    let mut tx_done_at = t_phase;
    let mut sleep = false;

    loop {
        let mut posted_now = 0;
        if posting {
            if first_post.is_none() {
                first_post = Some(Instant::now());
            }
            for (q, tx) in txs.iter_mut().enumerate() {
                posted_now += post_some(tx, q, &c, mr, &layout)?;
            }
        }
        // With -e, a loop that found nothing to do last time sleeps on the channel.
        let got = poll_or_sleep(cq, channel.as_ref(), &mut wcs, sleep && posted_now == 0)?;
        sleep = false;
        turns = turns.wrapping_add(1);
        if got > 0 {
            let now = Instant::now();
            for wc in &wcs[..got] {
                if !wc.is_success() {
                    return Err(wc_error(wc));
                }
                let q = (wc.wr_id() >> QP_SHIFT) as usize;
                if q >= nq {
                    bail!("a completion with an unknown wr_id {:#x}", wc.wr_id());
                }
                if matches!(wc.opcode(), WcOpcode::RECV | WcOpcode::RECV_RDMA_WITH_IMM) {
                    let slot = (wc.wr_id() & SEQ_MASK) as usize;
                    let want = n + rx_off;
                    if wc.byte_len() as usize != want {
                        bail!(
                            "QP {q} received {} bytes, expected {want}: the peer sent another size",
                            wc.byte_len()
                        );
                    }
                    if cfg.validate {
                        let off = layout.dst(q, slot) + rx_off;
                        let msg = dst[q].to_vec(off..off + n)?;
                        check_received(&msg, q, &mut rx.next_seq[q], lossy, ph, size)?;
                    }
                    rx.received[q] += 1;
                    rx.total += 1;
                    rx.pending[q].push(slot);
                } else {
                    let Some(tx) = txs.get_mut(q) else {
                        bail!(
                            "a send completion ({}) on a side that sends nothing",
                            wc.opcode()
                        );
                    };
                    let done = completed_through(tx.completed, wc.wr_id());
                    if done > tx.completed {
                        tx_total += done - tx.completed;
                        tx.completed = done;
                    }
                }
            }
            if receives {
                for (q, qp) in qps.iter().enumerate().take(nq) {
                    if !rx.pending[q].is_empty() {
                        crate::engine::post_receives(
                            qp,
                            &dst[q],
                            &layout,
                            q,
                            rx.pending[q].drain(..),
                        )?;
                    }
                }
                if rx.total > 0 {
                    rx.last = Some(now);
                    rx_log.record(rx.total, now);
                    watch.last_sign = now;
                }
            }
            if sends {
                last_completion = now;
                tx_log.record(tx_total, now);
            }
            last_progress = now;
        }

        // Housekeeping (clock, peer, deadline, stall): every 64 turns, every 8 when idle, every
        // idle turn with -e (which may then sleep). A clock read is not free everywhere (over a
        // microsecond on the HPET of an emulated guest): an idle spin should mostly poll.
        let idle = got == 0 && posted_now == 0;
        let due = if idle {
            channel.is_some() || turns & 7 == 0
        } else {
            turns & 63 == 0
        };
        if !due {
            continue;
        }
        let now = Instant::now();
        if let Some(dl) = deadline {
            if sends && !stopped && now >= dl {
                // Stop: every QP ends on a signaled request, so its last completion is seen.
                stopped = true;
                for tx in txs.iter_mut() {
                    tx.target = if tx.posted > tx.signaled_upto {
                        tx.posted + 1
                    } else {
                        tx.posted
                    };
                }
            }
        }
        if sends && !tx_done && txs.iter().all(|t| t.completed >= t.target) {
            tx_done = true;
            posting = false;
            tx_done_at = last_completion;
            let per_qp = txs.iter().map(|t| t.posted).collect();
            send_tally(ch, ph, size, per_qp)?;
        }
        if receives && !rx_done {
            if let Some(t) = &watch.tally {
                check_tally(t, nq)?;
                let all = rx.received.iter().zip(&t.per_qp).all(|(r, w)| r >= w);
                // A lossy transport may never deliver them all: done when quiet for a while.
                let quiet = now.duration_since(rx.last.unwrap_or(t_phase).max(watch.last_sign));
                rx_done = all || (lossy && quiet > LOSSY_GRACE);
            }
        }
        if tx_done && rx_done {
            break;
        }
        watch.check(ch, now)?;
        if sends && !tx_done {
            watch.beat(ch, now)?;
            let outstanding = txs.iter().any(|t| t.posted > t.completed);
            if outstanding && now.duration_since(last_progress) > cq_timeout {
                bail!(
                    "no completion for {:.1} s ({} of {} requests completed): the peer stopped \
                     responding, or the QP timeout (-u {}) is too short for this link; {}",
                    now.duration_since(last_progress).as_secs_f64(),
                    tx_total,
                    txs.iter().map(|t| t.posted).sum::<u64>(),
                    cfg.qp_timeout,
                    device_report(qps.first(), &counters)
                );
            }
        }
        if receives && !rx_done {
            watch.alive(now, peer_timeout, "the peer's messages")?;
            watch.within_phase(ch, now, "the peer's messages")?;
        }
        if idle && software && channel.is_none() {
            backoff(now.duration_since(last_progress));
        }
        sleep = idle;
    }

    let mut out = PhaseOut {
        sent: txs.iter().map(|t| t.posted).collect(),
        ..PhaseOut::default()
    };
    if sends {
        let start = first_post.unwrap_or(t_phase);
        let span = (start, tx_done_at);
        out.tx = Some(measured(cfg, mode, size, tx_total, span, win0, &tx_log));
    }
    if receives {
        let span = (t_phase, rx.last.unwrap_or(t_phase));
        out.rx = Some(measured(cfg, mode, size, rx.total, span, win0, &rx_log));
        if !lossy {
            if let Some(t) = &watch.tally {
                for (q, (r, w)) in rx.received.iter().zip(&t.per_qp).enumerate() {
                    if r != w {
                        bail!("QP {q} received {r} messages but the peer sent {w} (size {size})");
                    }
                }
            }
        }
    }
    if peer_sends {
        let t = match watch.tally.take() {
            Some(t) => t,
            None => watch.wait_tally(ch)?,
        };
        check_tally(&t, nq)?;
        out.peer_sent = t.per_qp;
    }
    Ok(out)
}

/// Checks one received message against the next expected sequence number of its QP. On a
/// lossy transport a message may be missing: the body is checked and the stamp must not go
/// backwards.
fn check_received(
    msg: &[u8],
    q: usize,
    next: &mut u64,
    lossy: bool,
    ph: Phase,
    size: u64,
) -> Result<()> {
    if !lossy {
        if let Err(m) = pattern::check(msg, q, *next, false) {
            bail!(
                "--validate: received message {} on QP {q} (size {size}, {ph}) is wrong: {m}",
                *next
            );
        }
        *next += 1;
        return Ok(());
    }
    match pattern::check_body(msg, q) {
        Err(m) => {
            bail!("--validate: a received message on QP {q} (size {size}, {ph}) is wrong: {m}")
        }
        Ok(Some(seq)) if seq < *next => bail!(
            "--validate: QP {q} received message {seq} after message {} (size {size})",
            *next - 1
        ),
        Ok(Some(seq)) => *next = seq + 1,
        Ok(None) => *next += 1,
    }
    Ok(())
}

/// The owner's checks after the measured phase: RDMA Write targets hold the last message
/// written to each slot; RDMA Read destinations hold the peer's message 0.
fn validate(s: &mut Session<'_>, size: u64, warm: &PhaseOut, out: &PhaseOut) -> Result<()> {
    let n = size as usize;
    let layout = s.link.res.layout;
    let (src, dst) = (&s.link.res.src, &s.link.res.dst);
    match s.cfg.tool.kind {
        TestKind::Write if s.bw_peer_sends() => {
            for (q, rx) in dst.iter().enumerate() {
                let total = warm
                    .peer_sent
                    .get(q)
                    .copied()
                    .unwrap_or(0)
                    .checked_add(out.peer_sent.get(q).copied().unwrap_or(0))
                    .context("--validate: the peer's message counts overflow (protocol error)")?;
                let slots = layout.dst_slots as u64;
                for slot in 0..slots {
                    let Some(seq) = pattern::last_seq_in_slot(total, slots, slot) else {
                        continue;
                    };
                    let off = layout.dst(q, slot as usize);
                    if let Err(m) = pattern::check(&rx.to_vec(off..off + n)?, q, seq, false) {
                        bail!(
                            "--validate: after {total} RDMA writes of {size} bytes, QP {q}'s \
                             slot {slot} should hold message {seq}, but {m}"
                        );
                    }
                }
            }
        }
        TestKind::Read if s.bw_sends() => {
            for q in 0..s.cfg.qps as usize {
                let off = layout.src(q, 0);
                if let Err(m) = pattern::check(&src.to_vec(off..off + n)?, q, 0, false) {
                    bail!(
                        "--validate: what QP {q} read ({size} bytes) differs from the peer's \
                         buffer: {m}"
                    );
                }
            }
        }
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peak_over_windows() {
        let t0 = Instant::now();
        let mut log = PeakLog::new(10, t0);
        // 100 completions per ms, except a fast stretch: 100 in 0.5 ms.
        let mut t = t0;
        let mut total = 0;
        for i in 0..50 {
            t += if i == 20 {
                Duration::from_micros(500)
            } else {
                Duration::from_millis(1)
            };
            total += 100;
            log.record(total, t);
        }
        let steady = 100.0 * 8.0 / 1e-3;
        let p = log.peak(8, 100);
        assert!((p - 2.0 * steady).abs() < 1.0, "{p} vs {}", 2.0 * steady);
        // Windows of 1000 completions dilute the fast stretch.
        let p = log.peak(8, 1000);
        assert!(p > steady && p < 1.1 * steady, "{p}");
    }

    #[test]
    fn peak_log_decimates_without_growing() {
        let t0 = Instant::now();
        let mut log = PeakLog::new(1, t0);
        for i in 1..=100_000u64 {
            log.record(i, t0 + Duration::from_micros(i));
        }
        assert!(log.counts.len() <= PeakLog::CAP);
        assert_eq!(log.counts.capacity(), PeakLog::CAP);
        // 1 completion per µs of 8 bytes = 8e6 B/s, whatever the window.
        let p = log.peak(8, 1000);
        assert!((p - 8e6).abs() < 1e3, "{p}");
    }

    #[test]
    fn margins_cut_the_ramp_and_the_drain() {
        let t0 = Instant::now();
        let mut log = PeakLog::new(10, t0);
        // 100 completions a second for 4 s, logged every 10.
        for k in 1..=40u64 {
            log.record(k * 10, t0 + Duration::from_millis(100 * k));
        }
        let whole = Measured {
            msgs: 400,
            start: t0,
            end: t0 + Duration::from_secs(4),
            peak_bps: 0.0,
        };
        let m = whole.within_margin(&log, Duration::from_secs(4), Duration::from_secs(1));
        assert_eq!(m.msgs, 200, "1 s .. 3 s");
        assert_eq!(m.end.duration_since(m.start), Duration::from_secs(2));
        let m = whole.within_margin(&log, Duration::from_secs(4), Duration::from_secs(2));
        assert_eq!(m.msgs, 400, "no room inside the margins: the whole run");
    }

    #[test]
    fn rows_from_measurements() {
        let t0 = Instant::now();
        let m = Measured {
            msgs: 2000,
            start: t0,
            end: t0 + Duration::from_secs(2),
            peak_bps: 0.0,
        };
        let r = m.row(65536, false);
        assert_eq!(
            r.iterations, 2000,
            "perftest's #iterations: every QP's messages"
        );
        assert_eq!(r.avg_bps, 65536.0 * 1000.0);
        assert_eq!(r.peak_bps, r.avg_bps, "the peak is never below the average");
        assert!((r.msg_rate_mpps - 0.001).abs() < 1e-12);
        assert_eq!(m.row(65536, true).peak_bps, 0.0);
        let sum = sum_rows(&r, &r);
        assert_eq!(sum.avg_bps, 2.0 * r.avg_bps);
    }
}
