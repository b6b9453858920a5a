//! The latency tests, with perftest's semantics:
//!
//! - **write** and **send** are a ping-pong and report half the round trip. The client posts a
//!   message and waits for the server's answer; the server waits for the message and answers.
//!   RDMA Write latency spins on the last byte of the receive buffer, which changes with every
//!   message — the peer's CPU sees no completion for a write; send latency waits for the
//!   receive completion.
//! - **read** and **atomic** report the full round trip of one operation: post, then poll until
//!   its completion. The server only serves.
//!
//! Samples are taken between consecutive rounds with one read of the monotonic clock
//! (`Instant`) per round trip — the end of one sample starts the next, as perftest samples
//! between consecutive posts — and recorded in nanoseconds into a [`LatRecorder`]. Only the round
//! trip and its own steps (reaping, re-posting the receive, the next poll byte) are inside a
//! sample: when bookkeeping runs between an answer and the next post (a heartbeat, a look at the
//! channel, `--validate`, a full send queue), the next sample starts from a fresh clock read.
//! Both sides of a ping-pong report: the server answers first and reads the clock after; its
//! samples run from one answer to the next. See `docs/measurement.md`.

use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use verbs_lab::verbs::{
    CompChannel, Cq, Mr, Payload, Qp, SendWr, Sge, UdDest, WcOpcode, WorkCompletion,
};

use crate::conn::{Layout, Link, Resources};
use crate::engine::{
    backoff, completed_through, poll_or_sleep, remote_op, send_tally, wc_error, PeerWatch, Session,
    CHANNEL_CHECK, POLL_BATCH, SEQ_MASK,
};
use crate::params::{Config, RunMode};
use crate::pattern;
use crate::proto::{Channel, Phase};
use crate::result::{LatRow, TestKind};
use crate::stats::LatRecorder;
use verbs_lab::diag::{device_report, PortCounters};

/// The send queue of the one latency QP, counted across phases and sizes: a request left
/// unsignaled at the end of one phase is accounted for by a later signaled one.
#[derive(Debug, Default)]
pub struct SendQueue {
    pub posted: u64,
    pub completed: u64,
    /// The post count at which the next signaled request falls (0: not started).
    pub next_signal: u64,
}

/// Measures one size; returns this side's row (none on a read/atomic server, or a ping-pong
/// server that took no sample).
pub fn run_size(s: &mut Session<'_>, size: u64, sq: &mut SendQueue) -> Result<Option<LatRow>> {
    let cfg = s.cfg;
    prepare(s, size)?;
    s.ch.sync(Phase::Ready, size).map_err(anyhow::Error::new)?;
    let mut warm_count = 0;
    if cfg.warmup > 0 {
        let w = one_phase(
            s,
            Phase::WarmUp,
            size,
            RunMode::Iters(cfg.warmup),
            0,
            None,
            sq,
        )
        .with_context(|| format!("warm-up of size {size}"))?;
        warm_count = w.count;
    }
    s.ch.sync(Phase::Measure, size)
        .map_err(anyhow::Error::new)?;
    let mut rec = LatRecorder::new();
    let m = one_phase(
        s,
        Phase::Measure,
        size,
        cfg.mode,
        warm_count,
        Some(&mut rec),
        sq,
    )
    .with_context(|| format!("measurement of size {size}"))?;
    if cfg.validate && cfg.tool.kind == TestKind::Write && m.count > 0 {
        let layout = s.link.res.layout;
        let off = layout.dst(0, 0);
        let last = warm_count + m.count - 1;
        let buf = s.link.res.dst[0].to_vec(off..off + size as usize)?;
        if let Err(e) = pattern::check(&buf, 0, last, true) {
            bail!(
                "--validate: after {} RDMA writes of {size} bytes the buffer should hold \
                 message {last}, but {e}",
                m.count
            );
        }
    }
    s.ch.sync(Phase::Done, size).map_err(anyhow::Error::new)?;
    Ok(rec.stats().map(|stats| LatRow {
        bytes: size,
        iterations: m.count,
        stats,
        tps: match cfg.mode {
            RunMode::Duration(_) => Some(m.count as f64 / m.elapsed.as_secs_f64().max(1e-9)),
            RunMode::Iters(_) => None,
        },
    }))
}

/// Clears the destination (write: so the poll byte starts at 0) and stamps nothing yet.
fn prepare(s: &Session<'_>, size: u64) -> Result<()> {
    let Resources { dst, layout, .. } = &s.link.res;
    if s.cfg.tool.kind == TestKind::Write {
        let d = layout.dst(0, 0);
        dst[0].fill(d..d + size as usize, 0)?;
    }
    Ok(())
}

/// What a phase did.
struct PhaseResult {
    /// Round trips (ping-pong) or operations completed.
    count: u64,
    /// From the first post to the last answer.
    elapsed: Duration,
}

/// Why a wait ended.
enum Waited {
    Ready,
    /// The pinger's tally says it is done.
    PeerDone,
}

/// The context of the waits of a phase: the peer watch and the limits.
struct Waiter<'w> {
    ch: &'w mut crate::proto::Channel,
    watch: PeerWatch,
    cq_timeout: Duration,
    /// Check the clock when `spins & mask == 0`: every poll with events (each may sleep),
    /// else every 256.
    mask: u32,
    /// A ponger in duration mode stops when the pinger's tally equals its count.
    stop_at: Option<u64>,
    /// A software device (rxe, siw): long waits give the CPU away (`engine::backoff`).
    backoff: bool,
    /// Set when a wait looked at the out-of-band channel (bookkeeping inside the wait); the
    /// loop clears it.
    looked: bool,
    what: &'static str,
    /// The QP and the port's counters as the phase started: a wait that expires says what
    /// the device says (`verbs_lab::diag`).
    qp: &'w Qp,
    counters: PortCounters,
}

impl Waiter<'_> {
    /// Spins on `ready` until it says yes; bounded by the completion timeout, watching the peer
    /// after the first [`CHANNEL_CHECK`] of waiting.
    #[inline]
    fn wait(&mut self, mut ready: impl FnMut() -> Result<bool>) -> Result<Waited> {
        if ready()? {
            return Ok(Waited::Ready);
        }
        // The clock is read only every `mask + 1` spins, and not at all when the answer comes
        // within the first of them: a clock read is not free (about 1.3 µs on the HPET of an
        // emulated guest) and every read here would delay noticing the answer.
        let mut start: Option<Instant> = None;
        let mut spins = 0u32;
        loop {
            if ready()? {
                return Ok(Waited::Ready);
            }
            spins = spins.wrapping_add(1);
            if spins & self.mask != 0 {
                continue;
            }
            let now = Instant::now();
            let waited = now.duration_since(*start.get_or_insert(now));
            if self.backoff {
                backoff(waited);
            }
            if waited >= CHANNEL_CHECK {
                self.looked |= self.watch.check(self.ch, now)?;
                if let (Some(count), Some(t)) = (self.stop_at, &self.watch.tally) {
                    if t.per_qp.first() == Some(&count) {
                        return Ok(Waited::PeerDone);
                    }
                }
            }
            if waited > self.cq_timeout {
                bail!(
                    "no answer for {:.1} s while waiting for {}: the peer stopped, or the QP \
                     timeout (-u) is too short for this link; {}",
                    waited.as_secs_f64(),
                    self.what,
                    device_report(Some(self.qp), &self.counters)
                );
            }
        }
    }
}

/// A receive completion: the slot and the bytes received.
type Recv = Option<(usize, u32)>;

/// Takes completions: send completions advance the send queue, a receive is kept in `recv`.
#[inline]
fn take(wcs: &[WorkCompletion], sq: &mut SendQueue, recv: &mut Recv, size: u64) -> Result<()> {
    for wc in wcs {
        if !wc.is_success() {
            return Err(wc_error(wc));
        }
        if matches!(wc.opcode(), WcOpcode::RECV | WcOpcode::RECV_RDMA_WITH_IMM) {
            if recv.is_some() {
                bail!("two messages arrived for one ping-pong round (size {size})");
            }
            *recv = Some(((wc.wr_id() & SEQ_MASK) as usize, wc.byte_len()));
        } else {
            sq.completed = completed_through(sq.completed, wc.wr_id());
        }
    }
    Ok(())
}

/// Polls without waiting, taking send completions (and remembering a receive).
#[inline]
fn reap(
    cq: &Cq,
    wcs: &mut [WorkCompletion],
    sq: &mut SendQueue,
    recv: &mut Recv,
    size: u64,
) -> Result<usize> {
    let n = cq.poll(wcs).context("ibv_poll_cq")?;
    take(&wcs[..n], sq, recv, size)?;
    Ok(n)
}

/// The requests of the one QP, built once per phase.
struct Post<'a> {
    qp: &'a Qp,
    cq: &'a Cq,
    channel: Option<&'a CompChannel>,
    /// The message size (for errors).
    size: u64,
    wr: SendWr<'a>,
    inline: bool,
    cq_mod: u64,
    depth: u64,
    /// Every request signaled (reads and atomics: we wait for each).
    all_signaled: bool,
}

impl Post<'_> {
    /// Waits (polling) until the send queue has room for one more request; returns whether it
    /// had to wait.
    #[inline]
    fn make_room(
        &mut self,
        sq: &mut SendQueue,
        waiter: &mut Waiter<'_>,
        wcs: &mut [WorkCompletion],
        recv: &mut Recv,
    ) -> Result<bool> {
        let size = self.size;
        let (cq, ch) = (self.cq, self.channel);
        if sq.posted - sq.completed >= self.depth {
            waiter.what = "a send completion (send queue full)";
            let r = waiter.wait(|| {
                let n = poll_or_sleep(cq, ch, wcs, true)?;
                take(&wcs[..n], sq, recv, size)?;
                Ok(sq.posted - sq.completed < self.depth)
            })?;
            if let Waited::PeerDone = r {
                bail!("the peer finished while this side still had requests to post");
            }
            return Ok(true);
        }
        Ok(false)
    }

    /// Posts one request (the caller made room).
    #[inline]
    fn post(&mut self, mr: &Mr, sq: &mut SendQueue) -> Result<()> {
        self.wr.wr_id = sq.posted & SEQ_MASK;
        // One signaled request every `cq_mod` (a countdown, no division per post).
        if sq.next_signal == 0 {
            sq.next_signal = self.cq_mod;
        }
        let every = sq.posted + 1 == sq.next_signal;
        if every {
            sq.next_signal += self.cq_mod;
        }
        self.wr.signaled = self.all_signaled || every;
        let r = if self.inline {
            self.qp.post_send_inline(std::slice::from_ref(&self.wr), mr)
        } else {
            self.qp.post_send(std::slice::from_ref(&self.wr))
        };
        r.context("ibv_post_send")?;
        sq.posted += 1;
        Ok(())
    }
}

/// The end of a phase: the pinger tells the server how many round trips it made; the server
/// checks that it answered as many.
fn settle_count(
    ch: &mut Channel,
    mut watch: PeerWatch,
    pinger: bool,
    ph: Phase,
    size: u64,
    count: u64,
) -> Result<()> {
    if pinger {
        send_tally(ch, ph, size, vec![count])?;
    } else {
        let t = match watch.tally.take() {
            Some(t) => t,
            None => watch.wait_tally(ch)?,
        };
        let theirs = t.per_qp.first().copied().unwrap_or(0);
        if theirs != count {
            bail!(
                "the client counts {theirs} round trips of size {size}, this server {count} \
                 (protocol error)"
            );
        }
    }
    Ok(())
}

/// One phase (warm-up or measurement) of one size: the rounds, then the count settled with the
/// peer. The loop itself is here; each round's steps are [`Rounds::ping`] and [`Rounds::pong`].
#[allow(clippy::too_many_arguments)]
fn one_phase(
    s: &mut Session<'_>,
    ph: Phase,
    size: u64,
    mode: RunMode,
    seq0: u64,
    mut rec: Option<&mut LatRecorder>,
    sq: &mut SendQueue,
) -> Result<PhaseResult> {
    let cfg = s.cfg;
    let f = Facts::of(s, size);
    let mut watch = PeerWatch::new(ph, size);
    if !f.pingpong && !f.pinger {
        // Reads and atomics: the server's NIC answers alone; wait for the client's tally.
        let t = watch.wait_tally(s.ch)?;
        return Ok(PhaseResult {
            count: t.per_qp.first().copied().unwrap_or(0),
            elapsed: Duration::ZERO,
        });
    }

    let Session { link, ch, .. } = s;
    let sges = [link
        .res
        .src
        .sge(f.src..f.src + f.local_len)
        .context("building the SGE")?];
    let mut r = Rounds::new(cfg, f, link, ch, watch, &sges);
    let target = match mode {
        RunMode::Iters(k) => k,
        RunMode::Duration(_) => u64::MAX,
    };
    let deadline = match mode {
        RunMode::Duration(d) => Some(Instant::now() + d),
        RunMode::Iters(_) => None,
    };
    let mut count = 0u64;
    while count < target {
        let seq = seq0 + count;
        let more = if f.pinger {
            r.ping(seq, sq, deadline, rec.as_deref_mut())?
        } else {
            r.pong(seq, sq, deadline.map(|_| count), rec.as_deref_mut())?
        };
        if !more {
            break;
        }
        count += 1;
    }

    let Rounds {
        waiter,
        first,
        last,
        ..
    } = r;
    let Waiter { ch, watch, .. } = waiter;
    settle_count(ch, watch, f.pinger, ph, size, count)?;
    Ok(PhaseResult {
        count,
        elapsed: last.saturating_duration_since(first.unwrap_or(last)),
    })
}

/// What a phase knows before its first round: the test, the sizes and the offsets.
#[derive(Clone, Copy)]
struct Facts {
    kind: TestKind,
    /// Write and send latency: a ping-pong (both sides post).
    pingpong: bool,
    /// The side that starts each round (the client).
    pinger: bool,
    /// Not RC: a lost message is possible, `--validate` checks the body only.
    lossy: bool,
    /// Where a received message starts in its slot (the GRH on UD).
    rx_off: usize,
    /// The message size.
    n: usize,
    size: u64,
    /// `--validate`: every message stamped and checked.
    stamp_all: bool,
    /// The source slot's offset, and how many of its bytes a request names.
    src: usize,
    local_len: usize,
    /// Write latency: the byte of the destination slot that changes with each message.
    poll_off: usize,
    /// How long one completion may take.
    cq_timeout: Duration,
    /// `-e`: every poll may sleep.
    events: bool,
    /// A software device: long waits give the CPU away.
    backoff: bool,
}

impl Facts {
    fn of(s: &Session<'_>, size: u64) -> Facts {
        let cfg = s.cfg;
        let kind = cfg.tool.kind;
        let layout = s.link.res.layout;
        let n = size as usize;
        Facts {
            kind,
            pingpong: matches!(kind, TestKind::Write | TestKind::Send),
            pinger: !cfg.is_server(),
            lossy: s.lossy(),
            rx_off: s.rx_offset(),
            n,
            size,
            stamp_all: cfg.validate,
            src: layout.src(0, 0),
            local_len: if kind == TestKind::Atomic { 8 } else { n },
            poll_off: layout.dst(0, 0) + n.saturating_sub(1),
            cq_timeout: s.cq_timeout,
            events: cfg.events,
            backoff: s.yields(),
        }
    }
}

/// The rounds of one phase: the one QP, its buffers and CQ, the request it posts, the waits, and
/// the clock reads that make the samples.
struct Rounds<'a> {
    f: Facts,
    /// The source slots (what we send, where reads land).
    mr: &'a Mr,
    /// QP 0's destination slots (where the peer's writes and sends land).
    rx: &'a Mr,
    qp: &'a Qp,
    cq: &'a Cq,
    channel: Option<&'a CompChannel>,
    layout: Layout,
    post: Post<'a>,
    waiter: Waiter<'a>,
    wcs: [WorkCompletion; POLL_BATCH],
    recv: Recv,
    /// The first post (pinger) or answer (ponger) of the phase, and the last answer.
    first: Option<Instant>,
    last: Instant,
    /// Where the pinger's previous sample ended, when nothing but the loop's own round-trip
    /// work (stamping the poll byte, reaping send completions, re-posting the receive) ran
    /// since: the next sample starts there. `None` after bookkeeping: the next sample reads the
    /// clock anew.
    prev_end: Option<Instant>,
    /// The ponger's previous answer, for its samples (`None`: the next answer starts a sample).
    answered: Option<Instant>,
}

impl<'a> Rounds<'a> {
    /// Builds the phase's request (towards the peer's QP 0, inline when it fits) and its waits.
    fn new(
        cfg: &Config,
        f: Facts,
        link: &'a Link,
        ch: &'a mut Channel,
        watch: PeerWatch,
        sges: &'a [Sge<'a>],
    ) -> Rounds<'a> {
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
        let channel = channel.as_ref();
        let qp = &qps[0];
        let r = &remote.qps[0];
        let (_, op) = remote_op(cfg, r, f.n);
        let mut wr = SendWr::new(0, op, Payload::Sges(sges));
        if let Some(ah) = ahs.first() {
            wr = wr.to(UdDest {
                ah,
                remote_qpn: r.qpn,
                remote_qkey: remote.qkey,
            });
        }
        let post = Post {
            qp,
            cq,
            channel,
            size: f.size,
            wr,
            inline: f.pingpong && *inline_limit > 0 && f.n as u64 <= u64::from(*inline_limit),
            cq_mod: u64::from(cfg.effective_cq_mod()),
            depth: u64::from(cfg.tx_depth),
            all_signaled: !f.pingpong,
        };
        let waiter = Waiter {
            ch,
            watch,
            cq_timeout: f.cq_timeout,
            mask: if f.events { 0 } else { 255 },
            stop_at: None,
            backoff: f.backoff,
            looked: false,
            what: "",
            qp,
            counters: PortCounters::snapshot(link.dev.ctx.name(), cfg.ib_port),
        };
        Rounds {
            f,
            mr,
            rx: &dst[0],
            qp,
            cq,
            channel,
            layout: *layout,
            post,
            waiter,
            wcs: WorkCompletion::array::<POLL_BATCH>(),
            recv: None,
            first: None,
            last: Instant::now(),
            prev_end: None,
            answered: None,
        }
    }

    /// The pinger's round `seq`: stamp the message, make room, read the clock (or take the
    /// previous sample's end), post, wait for the answer, record the sample; then the round's
    /// own work and the bookkeeping. Returns false at the `-D` deadline (nothing posted).
    #[inline]
    fn ping(
        &mut self,
        seq: u64,
        sq: &mut SendQueue,
        deadline: Option<Instant>,
        rec: Option<&mut LatRecorder>,
    ) -> Result<bool> {
        let f = &self.f;
        stamp(self.mr, f.src, f.n, seq, f.kind, f.stamp_all)?;
        // Room in the send queue before the clock starts: the sample is the round trip.
        if self
            .post
            .make_room(sq, &mut self.waiter, &mut self.wcs, &mut self.recv)?
        {
            self.prev_end = None;
        }
        // `-D`: its clock read starts the sample (and ends the run at the deadline).
        let t0 = match (deadline, self.prev_end) {
            (Some(dl), _) => {
                let now = Instant::now();
                if now >= dl {
                    return Ok(false);
                }
                now
            }
            // One clock read per round trip, as perftest samples between consecutive posts:
            // the end of the previous sample (taken when its answer arrived) starts this one.
            (None, Some(t)) => t,
            (None, None) => Instant::now(),
        };
        self.first.get_or_insert(t0);
        self.post.post(self.mr, sq)?;
        self.waiter.looked = false;
        let t1 = self.wait_answer(seq, sq)?;
        let rtt = t1.duration_since(t0).as_nanos() as u64;
        if let Some(r) = rec {
            r.record(if self.f.pingpong { rtt / 2 } else { rtt });
        }
        self.last = t1;
        self.prev_end = Some(t1);
        // The round trip's own work before the next post (perftest's samples hold the same:
        // the receive re-posted, the send completions taken).
        self.finish_round(seq, sq)?;
        // Bookkeeping: `--validate`'s checks and stamps, a heartbeat, a look at the channel.
        // When any of it runs, the next sample starts from a fresh clock read.
        let beat = self.waiter.watch.beat(self.waiter.ch, t1)?;
        let looked = self.waiter.watch.check(self.waiter.ch, t1)?;
        if self.f.stamp_all || beat || looked {
            self.prev_end = None;
        }
        Ok(true)
    }

    /// The pinger waits for the answer to message `seq`; returns when it came.
    #[inline]
    fn wait_answer(&mut self, seq: u64, sq: &mut SendQueue) -> Result<Instant> {
        let size = self.f.size;
        match self.f.kind {
            TestKind::Write => {
                let want = pattern::poll_byte(seq);
                self.waiter.what = "the server's RDMA write (its last byte)";
                let (m, off): (&Mr, usize) = (self.rx, self.f.poll_off);
                self.waiter.wait(|| Ok(m.read_volatile(off) == want))?;
            }
            TestKind::Send => {
                self.waiter.what = "the server's answer (a receive completion)";
                let (cq, channel) = (self.cq, self.channel);
                wait_recv(
                    &mut self.waiter,
                    cq,
                    channel,
                    &mut self.wcs,
                    sq,
                    &mut self.recv,
                    size,
                )?;
            }
            TestKind::Read | TestKind::Atomic => {
                self.waiter.what = "the completion of the request";
                let mine = sq.posted;
                let (cq, channel) = (self.cq, self.channel);
                let (wcs, recv) = (&mut self.wcs, &mut self.recv);
                self.waiter.wait(|| {
                    let k = poll_or_sleep(cq, channel, wcs, true)?;
                    take(&wcs[..k], sq, recv, size)?;
                    Ok(sq.completed >= mine)
                })?;
            }
        }
        Ok(Instant::now())
    }

    /// The ponger's round `seq`: wait for the message, answer it, read the clock after and
    /// record the sample since the previous answer; then the round's own work. Returns false
    /// when the pinger's tally says it is done (`-D`: `stop_at` is this side's count).
    #[inline]
    fn pong(
        &mut self,
        seq: u64,
        sq: &mut SendQueue,
        stop_at: Option<u64>,
        rec: Option<&mut LatRecorder>,
    ) -> Result<bool> {
        self.waiter.stop_at = stop_at;
        let got = self.wait_message(seq, sq)?;
        self.waiter.stop_at = None;
        if let Waited::PeerDone = got {
            return Ok(false);
        }
        // A wait that looked at the channel holds bookkeeping: no sample ends here.
        if std::mem::take(&mut self.waiter.looked) {
            self.answered = None;
        }
        // Answer first, read the clock after: nothing stands between the arrival and the
        // answer. The ponger's samples run from one answer to the next (a round trip).
        let f = &self.f;
        stamp(self.mr, f.src, f.n, seq, f.kind, f.stamp_all)?;
        self.post
            .make_room(sq, &mut self.waiter, &mut self.wcs, &mut self.recv)?;
        self.post.post(self.mr, sq)?;
        let t1 = Instant::now();
        if let (Some(t0), Some(r)) = (self.answered, rec) {
            r.record(t1.duration_since(t0).as_nanos() as u64 / 2);
        }
        self.first.get_or_insert(t1);
        self.answered = Some(t1);
        self.last = t1;
        self.finish_round(seq, sq)?;
        Ok(true)
    }

    /// The ponger waits for the pinger's message `seq`.
    #[inline]
    fn wait_message(&mut self, seq: u64, sq: &mut SendQueue) -> Result<Waited> {
        match self.f.kind {
            TestKind::Write => {
                let want = pattern::poll_byte(seq);
                self.waiter.what = "the client's RDMA write (its last byte)";
                let (m, off): (&Mr, usize) = (self.rx, self.f.poll_off);
                self.waiter.wait(|| Ok(m.read_volatile(off) == want))
            }
            _ => {
                self.waiter.what = "the client's message (a receive completion)";
                wait_recv(
                    &mut self.waiter,
                    self.cq,
                    self.channel,
                    &mut self.wcs,
                    sq,
                    &mut self.recv,
                    self.f.size,
                )
            }
        }
    }

    /// A round's own work once the answer is out or in: the receive checked and posted again,
    /// the send completions taken (ping-pong).
    #[inline]
    fn finish_round(&mut self, seq: u64, sq: &mut SendQueue) -> Result<()> {
        let f = &self.f;
        if let Some(got) = self.recv.take() {
            after_recv(
                self.rx,
                self.qp,
                self.layout,
                got,
                f.rx_off,
                f.n,
                seq,
                f.lossy,
                f.stamp_all,
            )?;
        }
        if f.pingpong {
            reap(self.cq, &mut self.wcs, sq, &mut self.recv, f.size)?;
        }
        Ok(())
    }
}

/// Writes what message `seq` carries: write latency's poll byte (and with `--validate` the
/// stamps); send latency's stamps with `--validate`.
#[inline]
fn stamp(mr: &Mr, src: usize, n: usize, seq: u64, kind: TestKind, all: bool) -> Result<()> {
    match kind {
        TestKind::Write if all => pattern::stamp_mr(mr, src, n, seq, true)?,
        TestKind::Write => mr.write(src + n - 1, &[pattern::poll_byte(seq)])?,
        TestKind::Send if all => pattern::stamp_mr(mr, src, n, seq, false)?,
        _ => {}
    }
    Ok(())
}

/// Waits for one receive completion (taking send completions on the way).
#[allow(clippy::too_many_arguments)]
fn wait_recv(
    waiter: &mut Waiter<'_>,
    cq: &Cq,
    ch: Option<&CompChannel>,
    wcs: &mut [WorkCompletion],
    sq: &mut SendQueue,
    recv: &mut Recv,
    size: u64,
) -> Result<Waited> {
    if recv.is_some() {
        return Ok(Waited::Ready);
    }
    waiter.wait(|| {
        let k = poll_or_sleep(cq, ch, wcs, true)?;
        take(&wcs[..k], sq, recv, size)?;
        Ok(recv.is_some())
    })
}

/// After a receive: check its length and (with `--validate`) its bytes, then post it again.
#[allow(clippy::too_many_arguments)]
fn after_recv(
    mr: &Mr,
    qp: &Qp,
    layout: crate::conn::Layout,
    (slot, bytes): (usize, u32),
    rx_off: usize,
    n: usize,
    seq: u64,
    lossy: bool,
    validate: bool,
) -> Result<()> {
    if bytes as usize != n + rx_off {
        bail!(
            "received {bytes} bytes, expected {}: the peer sent another size",
            n + rx_off
        );
    }
    if validate {
        let off = layout.dst(0, slot) + rx_off;
        let msg = mr.to_vec(off..off + n)?;
        let r = if lossy {
            pattern::check_body(&msg, 0).map(|_| ())
        } else {
            pattern::check(&msg, 0, seq, false)
        };
        if let Err(m) = r {
            bail!("--validate: received message {seq} ({n} bytes) is wrong: {m}");
        }
    }
    crate::engine::post_receives(qp, mr, &layout, 0, std::iter::once(slot))
}
