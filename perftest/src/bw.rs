//! The bandwidth tests: RDMA Write, RDMA Read, Send and the atomics, one size at a time, every
//! size of a sweep through the same code.
//!
//! One loop serves every role. A side that sends keeps every QP's send queue full (post lists of
//! `-l`, one signaled request every `-Q`), drains the shared CQ 32 completions at a time and
//! takes a timestamp only when completions arrived; a side that receives re-posts each consumed
//! receive as it goes. Nothing in the loop allocates: the requests are built once per size and
//! only their `wr_id`, signaled flag and (with `--validate`) slot are rewritten before a post.
//! Every so often (every 64 turns of the loop, every 8 when idle, and at least every
//! [`CHANNEL_CHECK`] of the clock read a turn with completions takes anyway) the loop watches
//! the clock (`-D`, stalls) and the peer (its tally, heartbeats, an ERROR): the peer at most
//! every [`BUSY_CHECK`](crate::engine::BUSY_CHECK) while completions flow, every
//! [`CHANNEL_CHECK`] once they stopped for [`YIELD_AFTER`] (a receiver waiting for the tally
//! that ends its phase). The clock bound
//! matters where a turn is slow: on rxe a post runs the requester in the posting thread, and
//! under emulation on a busy host 64 turns of 64 KiB writes took half a minute, too long
//! between heartbeats for the peer waiting for this side's tally.
//!
//! The measurement (see `docs/measurement.md`): bytes of the measured phase over the time from
//! the first post to the last completion; the peak is the best bandwidth over windows of
//! `max(tx depth × QPs, messages / 100)` completions.

use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use verbs_lab::verbs::{
    Ah, Mr, Mtu, Payload, Qp, RemoteBuf, SendList, SendOp, SendWr, Sge, Srq, UdDest, WcOpcode,
    WorkCompletion,
};

use crate::conn::{src_mr, Agreed, Buffers, Layout, Link, RecvQueue, Resources};
use crate::engine::{
    backoff, check_imm, check_tally, completed_through, poll_or_sleep, post_receive_lists,
    remote_op, send_tally, wc_error, wr_id, PeerWatch, Session, CHANNEL_CHECK, LOSSY_GRACE,
    MAX_RECV_PER_CALL, POLL_BATCH, QP_SHIFT, SEQ_MASK, YIELD_AFTER,
};
use crate::measure::result::{BwRow, TestKind};
use crate::params::{Config, RunMode};
use crate::pattern;
use crate::proto::Endpoints;
use crate::proto::{Channel, Msg, Phase, WireRow};
use verbs_lab::diag::{device_report, PortCounters};

mod peak;
mod recv;
mod send;
mod validate;

use peak::measured;
pub use peak::{Measured, PeakLog, PhaseOut};
use recv::Rx;
use send::{post_some, senders, source_sges, tx_cfg, TxCfg, TxQp};
use validate::{check_received, prepare, validate};

/// What one size gives this side to report.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SizeRows {
    /// The row this side prints (with `-b`, the sum of both directions).
    pub row: Option<BwRow>,
    /// With `-b`: this side's direction and the peer's, as `--report-both` shows them.
    pub directions: Option<(BwRow, BwRow)>,
}

impl SizeRows {
    fn one(row: Option<BwRow>) -> SizeRows {
        SizeRows {
            row,
            directions: None,
        }
    }
}

/// Measures one message size; returns the row this side reports.
pub fn run_size(s: &mut Session<'_>, size: u64) -> Result<Option<BwRow>> {
    Ok(run_size_both(s, size)?.row)
}

/// [`run_size`], with each direction of a `-b` run besides the sum.
pub fn run_size_both(s: &mut Session<'_>, size: u64) -> Result<SizeRows> {
    let cfg = s.cfg;
    prepare(s, size)?;
    s.ch.sync(Phase::Ready, size).map_err(anyhow::Error::new)?;

    let warmup = cfg.timing.warmup.iters(size);
    let warm = if warmup > 0 {
        let counters = port_counters(s);
        phase(
            s,
            Phase::WarmUp,
            size,
            RunMode::Iters(warmup),
            counters,
            [&[], &[]],
        )
        .with_context(|| format!("warm-up of size {size}"))?
    } else {
        PhaseOut::default()
    };
    // Before the barrier: reading the counters (sysfs) takes the guest's one vCPU for a while,
    // which a server doing it after the barrier took from its client's measured run.
    let counters = port_counters(s);
    s.enter_measure(size)?;
    let out = phase(
        s,
        Phase::Measure,
        size,
        cfg.timing.mode,
        counters,
        [&warm.sent, &warm.peer_sent],
    )
    .with_context(|| format!("measurement of size {size}"))?;

    if cfg.validate {
        validate(s, size, &warm, &out)?;
    }

    let measured = out.tx.as_ref().or(out.rx.as_ref());
    if let Some(m) = measured {
        s.measured(size, m.start, m.end);
    }
    let mine = measured.map(|m| m.row(size));
    let rows = exchange_rows(s, size, mine)?;
    if let (None, Some(echoed)) = (measured, &rows.row) {
        // A server that only served reports the client's row. Its interval, for a `--procs`
        // aggregate, is the client's length ending as that row arrived (this machine's clock
        // does not know when the client started).
        let end = Instant::now();
        s.measured(size, end.checked_sub(echoed.elapsed).unwrap_or(end), end);
    }
    s.ch.sync(Phase::Done, size).map_err(anyhow::Error::new)?;
    Ok(rows)
}

/// The rows both sides print, as perftest's `xchg_bw_reports`: with `-b` each side sends its
/// own direction and prints the sum of both; in a one-way RDMA Write, Read or atomic test the
/// side that only served (the server; the client with `--reversed`) measured nothing and
/// prints the requester's row. (The send test's receiver measures what it received and prints
/// that.)
fn exchange_rows(s: &mut Session<'_>, size: u64, mine: Option<BwRow>) -> Result<SizeRows> {
    let cfg = s.cfg;
    let one_way_rdma = !cfg.bidirectional && cfg.tool.kind != TestKind::Send;
    let echoes = !cfg.is_requester() && one_way_rdma;
    let reports = cfg.is_requester() && one_way_rdma;
    if cfg.bidirectional || reports {
        let mine = mine.context("this side measured nothing")?;
        s.ch.send(&Msg::Result(WireRow::from(&mine)))
            .map_err(anyhow::Error::new)?;
        if reports {
            return Ok(SizeRows::one(Some(mine)));
        }
    }
    if !(cfg.bidirectional || echoes) {
        return Ok(SizeRows::one(mine));
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
    Ok(match mine {
        Some(m) if cfg.bidirectional => SizeRows {
            row: Some(sum_rows(&m, &theirs)),
            directions: Some((m, theirs)),
        },
        _ => SizeRows::one(Some(theirs)),
    })
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

/// What a phase is: the settings every step of its loop reads.
struct PhaseCtx<'a> {
    cfg: &'a Config,
    mode: RunMode,
    ph: Phase,
    size: u64,
    /// The message size in bytes, and where a received message starts in its slot (past the
    /// GRH of a UD receive).
    n: usize,
    rx_off: usize,
    layout: Layout,
    qps: &'a [Qp],
    /// `--use-srq`: the shared receive queue the receives are posted to.
    srq: Option<&'a Srq>,
    nq: usize,
    sends: bool,
    receives: bool,
    peer_sends: bool,
    lossy: bool,
    cq_timeout: Duration,
    peer_timeout: Duration,
    /// The port's counters as the phase starts, for the stall message.
    counters: PortCounters,
    t_phase: Instant,
    /// The smallest window of the peak.
    win0: u64,
}

impl PhaseCtx<'_> {
    /// The index of the QP numbered `qpn` (a receive from the shared queue names its QP so).
    fn qp_index(&self, qpn: u32) -> Result<usize> {
        self.qps
            .iter()
            .position(|qp| qp.qpn() == qpn)
            .with_context(|| format!("a receive completion on QP number {qpn}, not one of ours"))
    }
}

/// Send-side progress of a phase (each QP's own is in its `TxQp`).
struct Tx {
    /// Requests completed on every QP.
    total: u64,
    log: PeakLog,
    first_post: Option<Instant>,
    last_completion: Instant,
    /// Every request completed (and the TALLY sent), at `done_at`.
    done: bool,
    done_at: Instant,
    posting: bool,
    /// The deadline of a timed run has passed.
    stopped: bool,
}

/// What a phase has done so far: each sending QP's progress, both directions' totals, and
/// what the peer said.
struct Sides<'a> {
    txs: Vec<TxQp<'a>>,
    tx: Tx,
    rx: Rx,
    watch: PeerWatch,
}

/// The port's counters now, for a phase's stall message: taken before the phase's barrier.
fn port_counters(s: &Session<'_>) -> PortCounters {
    PortCounters::snapshot(s.link.dev.ctx.name(), s.cfg.device.ib_port)
}

/// Runs one phase of one size: posts (if this side sends), receives (if it receives), exchanges
/// tallies. `counters` are the port's as the phase starts. `[sent_before, peer_sent_before]`
/// count the messages of the earlier phases of this size per QP, sent by this side and by the
/// peer: sequence numbers continue across phases.
fn phase(
    s: &mut Session<'_>,
    ph: Phase,
    size: u64,
    mode: RunMode,
    counters: PortCounters,
    [sent_before, peer_sent_before]: [&[u64]; 2],
) -> Result<PhaseOut> {
    let cfg = s.cfg;
    let nq = cfg.qps as usize;
    let base =
        |v: &[u64]| -> Vec<u64> { (0..nq).map(|q| v.get(q).copied().unwrap_or(0)).collect() };
    let (seq_base, rx_seq_base) = (base(sent_before), base(peer_sent_before));
    let (sends, receives, peer_sends) = (s.bw_sends(), s.bw_receives(), s.bw_peer_sends());
    let (lossy, rx_off) = (s.lossy(), s.rx_offset());
    let yields = s.yields() && idle_yields(sends, size, s.link.agreed.path_mtu);
    let (cq_timeout, peer_timeout) = (s.cq_timeout, s.peer_timeout);

    let Session { link, ch, .. } = s;
    let Link {
        res,
        remote,
        ahs,
        agreed: Agreed { inline_limit, .. },
        ..
    } = link;
    let res: &Resources = res;
    let Resources {
        bufs: Buffers { src, dst, layout },
        qps,
        srq,
        ..
    } = res;
    let t_phase = Instant::now();
    let k = PhaseCtx {
        cfg,
        mode,
        ph,
        size,
        n: size as usize,
        rx_off,
        layout: *layout,
        qps,
        srq: srq.as_ref(),
        nq,
        sends,
        receives,
        peer_sends,
        lossy,
        cq_timeout,
        peer_timeout,
        counters,
        t_phase,
        win0: u64::from(cfg.queues.tx_depth.max(cfg.queues.effective_cq_mod())) * nq as u64,
    };

    // Requests, built once per phase (by a side that sends).
    let src_sges = if sends {
        source_sges(cfg, src, &k.layout, k.n)?
    } else {
        Vec::new()
    };
    let c = tx_cfg(cfg, &k.layout, k.n, remote, *inline_limit, seq_base);
    let txs = if sends {
        senders(cfg, qps, remote, ahs, src, &src_sges, &c, mode)?
    } else {
        Vec::new()
    };
    let mut st = Sides {
        txs,
        tx: Tx::new(&k),
        rx: Rx::new(&k, rx_seq_base),
        watch: PeerWatch::new(ph, size),
    };
    // A passive side (the server of a WRITE, READ or atomic test) has no completions to wait
    // for: it goes straight to the peer's tally, asleep on the channel (as perftest's server
    // sleeps in read(2)), and leaves the CPU to the side that is measuring.
    if sends || receives {
        run_to_the_end(&k, &mut st, &c, res, ch, yields)?;
    }
    if k.receives {
        st.rx.flush(&k, dst)?;
    }
    phase_out(&k, &mut st, ch)
}

/// Whether an idle bandwidth loop on a software device (`Session::yields`) gives the CPU away
/// ([`backoff`]): a side that sends always; a side that only receives (send_bw's server) only
/// while a message fits in one packet. Measured in deterministic time on rxe with one vCPU
/// (docs/benchmarks-deterministic.md, "send_bw's regimes"): the receiver's yield keeps send_bw
/// at 2 B-4 KiB a few tenths of a percent faster, but with messages of many packets it tips
/// runs into rxe's batched regime (64 KiB at 39-44 MiB/s instead of 65); the sender's yield is
/// what keeps 1 MiB sends fast once in that regime.
fn idle_yields(sends: bool, size: u64, path_mtu: Mtu) -> bool {
    sends || size <= u64::from(path_mtu.bytes())
}

/// The phase's loop: tops up the send windows, polls (or, with `-e` and nothing to do, sleeps
/// on the channel), accounts what completed; now and then settles the tallies with the peer and
/// watches for stalls; until both directions are done.
fn run_to_the_end(
    k: &PhaseCtx<'_>,
    st: &mut Sides<'_>,
    c: &TxCfg,
    res: &Resources,
    ch: &mut Channel,
    yields: bool,
) -> Result<()> {
    let Resources {
        bufs: Buffers { src, dst, layout },
        cq,
        channel,
        ..
    } = res;
    let mut wcs = WorkCompletion::array::<POLL_BATCH>();
    let mut last_progress = k.t_phase;
    let mut last_housekeeping = k.t_phase;
    let mut turns = 0u32;
    let mut sleep = false;
    // Polls with completions since the clock was last read for them, and whether there were
    // any (dated at the next housekeeping, which reads the clock anyway).
    let mut unstamped = 0u32;
    let mut progressed_unstamped = false;

    loop {
        let posted_now = st.post_window(c, src, layout)?;
        // With -e, a loop that found nothing to do last time sleeps on the channel.
        let got = poll_or_sleep(cq, channel.as_ref(), &mut wcs, sleep && posted_now == 0)?;
        sleep = false;
        turns = turns.wrapping_add(1);
        let mut overdue = false;
        if got > 0 {
            unstamped += 1;
            if st.account(&wcs[..got], k, dst)? || unstamped >= STAMP_EVERY {
                let now = Instant::now();
                overdue = now.duration_since(last_housekeeping) >= CHANNEL_CHECK;
                st.stamp(k, now);
                last_progress = now;
                unstamped = 0;
                progressed_unstamped = false;
            } else {
                progressed_unstamped = true;
            }
        }

        let idle = got == 0 && posted_now == 0;
        if !overdue && !housekeeping_due(idle, channel.is_some(), turns) {
            continue;
        }
        let now = Instant::now();
        last_housekeeping = now;
        if progressed_unstamped {
            // Completions came since the last clock read, none of them the last: they are
            // dated now, a little late (a timed run that stops between two stamps ends here).
            st.stamp(k, now);
            last_progress = now;
            unstamped = 0;
            progressed_unstamped = false;
        }
        settle(k, st, ch, now)?;
        if st.tx.done && st.rx.done {
            return Ok(());
        }
        let stalled_for = now.duration_since(last_progress);
        keep_watch(k, st, ch, (now, stalled_for))?;
        if idle && yields && channel.is_none() {
            let _ = backoff(stalled_for);
        }
        sleep = idle;
    }
}

impl Sides<'_> {
    /// Tops up every sending QP's window (nothing once the sending is done). Returns how many
    /// requests were posted.
    #[inline]
    fn post_window(&mut self, c: &TxCfg, src: &[Mr], layout: &Layout) -> Result<u64> {
        let mut posted = 0;
        if self.tx.posting {
            self.tx.first_post.get_or_insert_with(Instant::now);
            for (q, t) in self.txs.iter_mut().enumerate() {
                posted += post_some(t, q, c, src_mr(src, q), layout)?;
            }
        }
        Ok(posted)
    }

    /// Accounts one poll's completions: each is checked and counted and the consumed receives
    /// are posted again. Returns whether their time matters ([`Sides::stamp`] then takes it): a
    /// receiver's always; a sender's when they end the sending or cross a boundary of its peak
    /// log. A clock read costs more than the rest of a completion's accounting (about 60
    /// instructions through the vDSO, against perftest's one `rdtsc`): with a completion per
    /// message (`-Q 1`), reading it for every one cost 0.01 % of write_bw at 64 KiB in
    /// deterministic time.
    #[inline]
    fn account(&mut self, wcs: &[WorkCompletion], k: &PhaseCtx<'_>, dst: &[Mr]) -> Result<bool> {
        reap(wcs, k, dst, self)?;
        if k.receives {
            self.rx.repost(k, dst)?;
            return Ok(true);
        }
        Ok(k.sends
            && (self.tx.log.due(self.tx.total) || self.txs.iter().all(|t| t.completed >= t.target)))
    }

    /// The time of the completions just accounted: both directions' progress and peak logs.
    #[inline]
    fn stamp(&mut self, k: &PhaseCtx<'_>, now: Instant) {
        if k.receives {
            self.rx.progressed(now, &mut self.watch);
        }
        if k.sends {
            self.tx.last_completion = now;
            self.tx.log.record(self.tx.total, now);
        }
    }
}

/// A sender's polls with completions between clock reads at most (see [`Sides::account`]):
/// the housekeeping that is due [`CHANNEL_CHECK`] after the last is found late by at most
/// this many completions.
const STAMP_EVERY: u32 = 8;

/// Housekeeping (clock, peer, deadline, stall) is due every 64 turns, every 8 when idle, every
/// idle turn with -e (`events`, which may then sleep), and besides (in the loop) whenever a turn
/// with completions finds the last one [`CHANNEL_CHECK`] old. A clock read is not free everywhere
/// (over a microsecond on the HPET of an emulated guest): an idle spin should mostly poll.
#[inline]
fn housekeeping_due(idle: bool, events: bool, turns: u32) -> bool {
    if idle {
        events || turns & 7 == 0
    } else {
        turns & 63 == 0
    }
}

impl Tx {
    fn new(k: &PhaseCtx<'_>) -> Tx {
        Tx {
            total: 0,
            log: PeakLog::new(k.win0, k.t_phase),
            first_post: None,
            last_completion: k.t_phase,
            done: !k.sends,
            done_at: k.t_phase,
            posting: k.sends,
            stopped: false,
        }
    }
}

/// One poll's completions, each checked and accounted to its QP.
#[inline]
fn reap(wcs: &[WorkCompletion], k: &PhaseCtx<'_>, dst: &[Mr], st: &mut Sides<'_>) -> Result<()> {
    let Sides { txs, tx, rx, .. } = st;
    for wc in wcs {
        if !wc.is_success() {
            return Err(wc_error(wc));
        }
        let q = (wc.wr_id() >> QP_SHIFT) as usize;
        if q >= k.nq {
            bail!("a completion with an unknown wr_id {:#x}", wc.wr_id());
        }
        if matches!(wc.opcode(), WcOpcode::RECV | WcOpcode::RECV_RDMA_WITH_IMM) {
            rx.on_receive(wc, q, k, dst)?;
        } else {
            let Some(t) = txs.get_mut(q) else {
                bail!(
                    "a send completion ({}) on a side that sends nothing",
                    wc.opcode()
                );
            };
            // Signaled requests complete everything before them on their QP.
            let done = completed_through(t.completed, wc.wr_id());
            if done > t.completed {
                tx.total += done - t.completed;
                t.completed = done;
            }
        }
    }
    Ok(())
}

/// Decides what is finished: a timed run's senders stop at the deadline (every QP ends on a
/// signaled request, so its last completion is seen); the sending is done when every request
/// completed (the TALLY then goes to the peer); the receiving when the peer's tally is met, or,
/// on a lossy transport that may never deliver them all, when the line was quiet for a while.
fn settle(k: &PhaseCtx<'_>, st: &mut Sides<'_>, ch: &mut Channel, now: Instant) -> Result<()> {
    let Sides { txs, tx, rx, watch } = st;
    if let RunMode::Duration(d) = k.mode {
        if k.sends && !tx.stopped && now >= k.t_phase + d {
            tx.stopped = true;
            for t in txs.iter_mut() {
                t.target = if t.posted > t.signaled_upto {
                    t.posted + 1
                } else {
                    t.posted
                };
            }
        }
    }
    if k.sends && !tx.done && txs.iter().all(|t| t.completed >= t.target) {
        tx.done = true;
        tx.posting = false;
        tx.done_at = tx.last_completion;
        let per_qp = txs.iter().map(|t| t.posted).collect();
        send_tally(ch, k.ph, k.size, per_qp)?;
    }
    if k.receives && !rx.done {
        if let Some(t) = &watch.tally {
            check_tally(t, k.nq)?;
            let all = rx.received.iter().zip(&t.per_qp).all(|(r, w)| r >= w);
            let quiet = now.duration_since(rx.last.unwrap_or(k.t_phase).max(watch.last_sign));
            rx.done = all || (k.lossy && quiet > LOSSY_GRACE);
        }
    }
    Ok(())
}

/// Watches the peer and the link while the phase runs: reads what the peer sent, sends
/// heartbeats while sending, and gives up on a sender whose completions stopped (`stalled_for`
/// since the last progress) or a receiver whose peer went silent or overran the phase.
fn keep_watch(
    k: &PhaseCtx<'_>,
    st: &mut Sides<'_>,
    ch: &mut Channel,
    (now, stalled_for): (Instant, Duration),
) -> Result<()> {
    let Sides { txs, tx, rx, watch } = st;
    watch.check_paced(ch, now, stalled_for < YIELD_AFTER)?;
    if k.sends && !tx.done {
        watch.beat(ch, now)?;
        let outstanding = txs.iter().any(|t| t.posted > t.completed);
        if outstanding && stalled_for > k.cq_timeout {
            bail!(
                "no completion for {:.1} s ({} of {} requests completed): the peer stopped \
                 responding, or the QP timeout (-u {}) is too short for this link; {}",
                stalled_for.as_secs_f64(),
                tx.total,
                txs.iter().map(|t| t.posted).sum::<u64>(),
                k.cfg.qp_timeout,
                device_report(k.qps.first(), &k.counters)
            );
        }
    }
    if k.receives && !rx.done {
        watch.alive(now, k.peer_timeout, "the peer's messages")?;
        watch.within_phase(ch, now, "the peer's messages")?;
    }
    Ok(())
}

/// What the phase measured on each side, checked against the peer's tally (waited for if it
/// has not arrived yet).
fn phase_out(k: &PhaseCtx<'_>, st: &mut Sides<'_>, ch: &mut Channel) -> Result<PhaseOut> {
    let Sides { txs, tx, rx, watch } = st;
    let size = k.size;
    let mut out = PhaseOut {
        sent: txs.iter().map(|t| t.posted).collect(),
        ..PhaseOut::default()
    };
    if k.sends {
        let span = (tx.first_post.unwrap_or(k.t_phase), tx.done_at);
        out.tx = Some(measured(k, tx.total, span, &tx.log, true));
    }
    if k.receives {
        let span = (k.t_phase, rx.last.unwrap_or(k.t_phase));
        out.rx = Some(measured(k, rx.total, span, &rx.log, false));
        if !k.lossy {
            if let Some(t) = &watch.tally {
                for (q, (r, w)) in rx.received.iter().zip(&t.per_qp).enumerate() {
                    if r != w {
                        bail!("QP {q} received {r} messages but the peer sent {w} (size {size})");
                    }
                }
            }
        }
    }
    if k.peer_sends {
        let t = match watch.tally.take() {
            Some(t) => t,
            None => watch.wait_tally(ch)?,
        };
        check_tally(&t, k.nq)?;
        out.peer_sent = t.per_qp;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_receiver_yields_only_while_a_message_is_one_packet() {
        let mtu = Mtu::Mtu4096;
        // A side that sends yields at every size.
        for size in [2, 4096, 4097, 1 << 20] {
            assert!(idle_yields(true, size, mtu), "sender, {size} B");
        }
        // A side that only receives: up to the path MTU, not past it.
        assert!(idle_yields(false, 2, mtu));
        assert!(idle_yields(false, 4096, mtu));
        assert!(!idle_yields(false, 4097, mtu));
        assert!(!idle_yields(false, 65536, mtu));
        // The MTU is the path's, not a constant: 1 KiB messages are two packets at 512 B.
        assert!(!idle_yields(false, 1024, Mtu::Mtu512));
        assert!(idle_yields(false, 1024, Mtu::Mtu1024));
    }
}
