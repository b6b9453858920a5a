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

use crate::conn::{Link, Resources};
use crate::engine::{
    backoff, completed_through, poll_or_sleep, remote_op, send_tally, wc_error, PeerWatch, Session,
    CHANNEL_CHECK, POLL_BATCH, SEQ_MASK,
};
use crate::params::RunMode;
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

/// One phase (warm-up or measurement) of one size.
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
    let kind = cfg.tool.kind;
    let server = cfg.is_server();
    let lossy = s.lossy();
    let rx_off = s.rx_offset();
    let n = size as usize;
    let pingpong = matches!(kind, TestKind::Write | TestKind::Send);
    let (cq_timeout, events) = (s.cq_timeout, cfg.events);
    let backoff = s.yields();

    let Session { link, ch, .. } = s;
    let Link {
        res,
        remote,
        ahs,
        inline_limit,
        ..
    } = link;
    // `mr`: the source slots (what we send, where reads land); `rx`: QP 0's destination slots.
    let Resources {
        src: mr,
        dst,
        qps,
        cq,
        channel,
        layout,
        ..
    } = res;
    let rx: &Mr = &dst[0];
    let layout = *layout;
    let channel = channel.as_ref();
    let qp = &qps[0];
    let r = &remote.qps[0];

    let mut watch = PeerWatch::new(ph, size);
    if !pingpong && server {
        // Reads and atomics: the server's NIC answers alone; wait for the client's tally.
        let t = watch.wait_tally(ch)?;
        return Ok(PhaseResult {
            count: t.per_qp.first().copied().unwrap_or(0),
            elapsed: Duration::ZERO,
        });
    }

    let src = layout.src(0, 0);
    let local_len = if kind == TestKind::Atomic { 8 } else { n };
    let sge: Sge<'_> = mr.sge(src..src + local_len).context("building the SGE")?;
    let sges = [sge];
    let (_, op) = remote_op(cfg, r, n);
    let mut wr = SendWr::new(0, op, Payload::Sges(&sges));
    if let Some(ah) = ahs.first() {
        wr = wr.to(UdDest {
            ah,
            remote_qpn: r.qpn,
            remote_qkey: remote.qkey,
        });
    }
    let mut post = Post {
        qp,
        cq,
        channel,
        size,
        wr,
        inline: pingpong && *inline_limit > 0 && n as u64 <= u64::from(*inline_limit),
        cq_mod: u64::from(cfg.effective_cq_mod()),
        depth: u64::from(cfg.tx_depth),
        all_signaled: !pingpong,
    };
    let mut waiter = Waiter {
        ch,
        watch,
        cq_timeout,
        mask: if events { 0 } else { 255 },
        stop_at: None,
        backoff,
        looked: false,
        what: "",
        qp,
        counters: PortCounters::snapshot(link.dev.ctx.name(), cfg.ib_port),
    };
    let mut wcs = WorkCompletion::array::<POLL_BATCH>();
    let target = match mode {
        RunMode::Iters(k) => k,
        RunMode::Duration(_) => u64::MAX,
    };
    let deadline = match mode {
        RunMode::Duration(d) => Some(Instant::now() + d),
        RunMode::Iters(_) => None,
    };
    let poll_off = layout.dst(0, 0) + n.saturating_sub(1);
    let stamp_all = cfg.validate;
    let pinger = !server;
    let mut count = 0u64;
    let mut first: Option<Instant> = None;
    let mut last = Instant::now();
    // Where the pinger's previous sample ended, when nothing but the loop's own round-trip work
    // (stamping the poll byte, reaping send completions, re-posting the receive) ran since: the
    // next sample starts there. `None` after bookkeeping: the next sample reads the clock anew.
    let mut prev_end: Option<Instant> = None;
    // The ponger's previous answer, for its samples (`None`: the next answer starts a sample).
    let mut answered: Option<Instant> = None;
    let mut recv: Recv = None;

    while count < target {
        let seq = seq0 + count;
        if pinger {
            stamp(mr, src, n, seq, kind, stamp_all)?;
            // Room in the send queue before the clock starts: the sample is the round trip.
            if post.make_room(sq, &mut waiter, &mut wcs, &mut recv)? {
                prev_end = None;
            }
            // `-D`: its clock read starts the sample (and ends the run at the deadline).
            let t0 = match (deadline, prev_end) {
                (Some(dl), _) => {
                    let now = Instant::now();
                    if now >= dl {
                        break;
                    }
                    now
                }
                // One clock read per round trip, as perftest samples between consecutive posts:
                // the end of the previous sample (taken when its answer arrived) starts this one.
                (None, Some(t)) => t,
                (None, None) => Instant::now(),
            };
            first.get_or_insert(t0);
            post.post(mr, sq)?;
            waiter.looked = false;
            // Wait for the answer.
            let t1 = match kind {
                TestKind::Write => {
                    let want = pattern::poll_byte(seq);
                    waiter.what = "the server's RDMA write (its last byte)";
                    let m: &Mr = rx;
                    waiter.wait(|| Ok(m.read_volatile(poll_off) == want))?;
                    Instant::now()
                }
                TestKind::Send => {
                    waiter.what = "the server's answer (a receive completion)";
                    wait_recv(&mut waiter, cq, channel, &mut wcs, sq, &mut recv, size)?;
                    Instant::now()
                }
                TestKind::Read | TestKind::Atomic => {
                    waiter.what = "the completion of the request";
                    let mine = sq.posted;
                    waiter.wait(|| {
                        let k = poll_or_sleep(cq, channel, &mut wcs, true)?;
                        take(&wcs[..k], sq, &mut recv, size)?;
                        Ok(sq.completed >= mine)
                    })?;
                    Instant::now()
                }
            };
            let rtt = t1.duration_since(t0).as_nanos() as u64;
            if let Some(r) = rec.as_deref_mut() {
                r.record(if pingpong { rtt / 2 } else { rtt });
            }
            last = t1;
            prev_end = Some(t1);
            count += 1;
            // The round trip's own work before the next post (perftest's samples hold the same:
            // the receive re-posted, the send completions taken).
            if let Some(got) = recv.take() {
                after_recv(rx, qp, layout, got, rx_off, n, seq, lossy, stamp_all)?;
            }
            if pingpong {
                reap(cq, &mut wcs, sq, &mut recv, size)?;
            }
            // Bookkeeping: `--validate`'s checks and stamps, a heartbeat, a look at the channel.
            // When any of it runs, the next sample starts from a fresh clock read.
            let beat = waiter.watch.beat(waiter.ch, t1)?;
            let looked = waiter.watch.check(waiter.ch, t1)?;
            if stamp_all || beat || looked {
                prev_end = None;
            }
        } else {
            // The ponger: wait for message `seq`, answer it.
            waiter.stop_at = deadline.map(|_| count);
            let got = match kind {
                TestKind::Write => {
                    let want = pattern::poll_byte(seq);
                    waiter.what = "the client's RDMA write (its last byte)";
                    let m: &Mr = rx;
                    waiter.wait(|| Ok(m.read_volatile(poll_off) == want))?
                }
                _ => {
                    waiter.what = "the client's message (a receive completion)";
                    wait_recv(&mut waiter, cq, channel, &mut wcs, sq, &mut recv, size)?
                }
            };
            waiter.stop_at = None;
            if let Waited::PeerDone = got {
                break;
            }
            // A wait that looked at the channel holds bookkeeping: no sample ends here.
            if std::mem::take(&mut waiter.looked) {
                answered = None;
            }
            // Answer first, read the clock after: nothing stands between the arrival and the
            // answer. The ponger's samples run from one answer to the next (a round trip).
            stamp(mr, src, n, seq, kind, stamp_all)?;
            post.make_room(sq, &mut waiter, &mut wcs, &mut recv)?;
            post.post(mr, sq)?;
            let t1 = Instant::now();
            if let (Some(t0), Some(r)) = (answered, rec.as_deref_mut()) {
                r.record(t1.duration_since(t0).as_nanos() as u64 / 2);
            }
            first.get_or_insert(t1);
            answered = Some(t1);
            last = t1;
            count += 1;
            if let Some(got) = recv.take() {
                after_recv(rx, qp, layout, got, rx_off, n, seq, lossy, stamp_all)?;
            }
            reap(cq, &mut wcs, sq, &mut recv, size)?;
        }
    }

    let Waiter { ch, watch, .. } = waiter;
    settle_count(ch, watch, pinger, ph, size, count)?;
    Ok(PhaseResult {
        count,
        elapsed: last.saturating_duration_since(first.unwrap_or(last)),
    })
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
