//! The rounds of a latency phase: what the phase knows ([`Facts`]), and each round's steps
//! for the side that starts it ([`Rounds::ping`]) and the side that answers
//! ([`Rounds::pong`]).

use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use verbs_lab::diag::PortCounters;
use verbs_lab::verbs::{
    CompChannel, Cq, Mr, Payload, Qp, RecvWr, SendWr, Sge, Srq, UdDest, WorkCompletion,
};

use super::post::{reap, take, Post, Recv};
use super::wait::{WaitLimits, Waited, Waiter};
use super::Record;
use super::SendQueue;
use crate::conn::{src_mr, Layout, Link, RecvQueue};
use crate::engine::{check_imm, poll_or_sleep, remote_op, PeerWatch, Session, POLL_BATCH};
use crate::measure::result::TestKind;
use crate::params::Config;
use crate::pattern;
use crate::proto::Channel;

/// The pinger looks at the channel (one `recvfrom(2)`) at most once in this many rounds, and
/// not more often than every `CHANNEL_CHECK`: a running peer sends nothing during a phase but an
/// ERROR, and a peer that stops answering is looked for by the wait itself after
/// `CHANNEL_CHECK` of waiting. What a look between rounds still catches is this process's own
/// news — a signal, a device event — within 64 rounds.
const LOOK_ROUNDS: u64 = 64;

/// What a phase knows before its first round: the test, the sizes and the offsets.
#[derive(Clone, Copy)]
pub(super) struct Facts {
    kind: TestKind,
    /// Write and send latency: a ping-pong (both sides post).
    pub(super) pingpong: bool,
    /// The side that starts each round (the client).
    pub(super) pinger: bool,
    /// Not RC: a lost message is possible, `--validate` checks the body only.
    lossy: bool,
    /// Where a received message starts in its slot (the GRH on UD).
    rx_off: usize,
    /// The message size.
    n: usize,
    size: u64,
    /// `--validate`: every message stamped and checked.
    stamp_all: bool,
    /// `--send_with_imm`, `--write_with_imm`: every receive carries the immediate data.
    imm: bool,
    /// A message is announced by a receive completion: send latency, and write latency with
    /// `--write_with_imm` (otherwise the write's last byte is polled in memory).
    by_recv: bool,
    /// The source slot's offset, and how many of its bytes a request names.
    pub(super) src: usize,
    pub(super) local_len: usize,
    /// Write latency: the byte of the destination slot that changes with each message.
    poll_off: usize,
    /// How the round's waits may wait.
    limits: WaitLimits,
}

impl Facts {
    pub(super) fn of(s: &Session<'_>, size: u64) -> Facts {
        let cfg = s.cfg;
        let kind = cfg.tool.kind;
        let layout = s.link.res.bufs.layout;
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
            imm: cfg.send_with_imm || cfg.write_with_imm,
            by_recv: cfg.posts_receives(),
            src: layout.src(0, 0),
            local_len: if kind == TestKind::Atomic { 8 } else { n },
            poll_off: layout.dst(0, 0) + n.saturating_sub(1),
            limits: WaitLimits {
                cq_timeout: s.cq_timeout,
                events: cfg.events,
                backoff: s.yields(),
            },
        }
    }
}

/// The rounds of one phase: the one QP, its buffers and CQ, the request it posts, the waits, and
/// the clock reads that make the samples.
pub(super) struct Rounds<'a> {
    pub(super) f: Facts,
    /// The source slots (what we send, where reads land).
    mr: &'a Mr,
    /// QP 0's destination slots (where the peer's writes and sends land).
    rx: &'a Mr,
    qp: &'a Qp,
    /// `--use-srq`: where the receives are posted instead of the QP.
    srq: Option<&'a Srq>,
    cq: &'a Cq,
    channel: Option<&'a CompChannel>,
    layout: Layout,
    /// The receive SGE of each of QP 0's destination slots, made once: re-posting a receive
    /// then converts one request, nothing more.
    recv_sges: Vec<Sge<'a>>,
    post: Post<'a>,
    pub(super) waiter: Waiter<'a>,
    wcs: [WorkCompletion; POLL_BATCH],
    recv: Recv,
    /// The first post (pinger) or answer (ponger) of the phase, and the last answer.
    pub(super) first: Option<Instant>,
    pub(super) last: Instant,
    /// Where the pinger's previous sample ended, when nothing but the loop's own round-trip
    /// work (stamping the poll byte, reaping send completions, re-posting the receive) ran
    /// since: the next sample starts there. `None` after bookkeeping: the next sample reads the
    /// clock anew.
    prev_end: Option<Instant>,
    /// The ponger's answers, whose spacing makes its samples.
    answers: Answers,
    /// The pinger's rounds since it last looked at the channel.
    unlooked: u64,
}

impl<'a> Rounds<'a> {
    /// Builds the phase's request (towards the peer's QP 0, inline when it fits) and its waits.
    pub(super) fn new(
        cfg: &Config,
        f: Facts,
        link: &'a Link,
        ch: &'a mut Channel,
        watch: PeerWatch,
        sges: &'a [Sge<'a>],
    ) -> Result<Rounds<'a>> {
        let (res, remote, inline_limit) = (&link.res, &link.remote, link.agreed.inline_limit);
        let (cq, channel) = (&res.cq, res.channel.as_ref());
        let qp = &res.qps[0];
        let r = &remote.qps[0];
        let (_, op) = remote_op(cfg, r, f.n);
        let mut wr = SendWr::new(0, op, Payload::Sges(sges));
        if let Some(ah) = link.ahs.first() {
            wr = wr.to(UdDest {
                ah,
                remote_qpn: r.qpn,
                remote_qkey: remote.qkey,
            });
        }
        let inline = f.pingpong && inline_limit > 0 && f.n as u64 <= u64::from(inline_limit);
        let mr = src_mr(&res.bufs.src, 0);
        let list = qp
            .send_list(&[wr], inline.then_some(mr))
            .context("building the send request")?;
        let post = Post {
            cq,
            channel,
            size: f.size,
            list,
            cq_mod: u64::from(cfg.queues.signal_period(cfg.tool)),
            depth: u64::from(cfg.queues.tx_depth),
        };
        let waiter = Waiter::new(
            ch,
            watch,
            f.limits,
            qp,
            PortCounters::snapshot(link.dev.ctx.name(), cfg.device.ib_port),
        );
        let layout = res.bufs.layout;
        let rx = &res.bufs.dst[0];
        let recv_sges = (0..layout.dst_slots.max(1))
            .map(|slot| {
                let off = layout.dst(0, slot);
                rx.sge(off..off + layout.stride)
                    .with_context(|| format!("the receive SGE of slot {slot}"))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Rounds {
            f,
            mr,
            rx,
            qp,
            srq: res.srq.as_ref(),
            cq,
            channel,
            layout,
            recv_sges,
            post,
            waiter,
            wcs: WorkCompletion::array::<POLL_BATCH>(),
            recv: None,
            first: None,
            last: Instant::now(),
            prev_end: None,
            answers: Answers::default(),
            unlooked: 0,
        })
    }

    /// The pinger's round `seq`: stamp the message, make room, read the clock (or take the
    /// previous sample's end), post, wait for the answer, record the sample; then the round's
    /// own work and the bookkeeping. Returns false at the `-D` deadline (nothing posted).
    #[inline]
    pub(super) fn ping(
        &mut self,
        seq: u64,
        sq: &mut SendQueue,
        deadline: Option<Instant>,
        rec: Option<&mut Record>,
    ) -> Result<bool> {
        // The message and room for it before the clock starts: the sample is the round trip.
        if self.prepare(seq, sq)? {
            self.prev_end = None;
        }
        // One clock read per round trip, as perftest samples between consecutive posts: the
        // end of the previous sample (taken when its answer arrived) starts this one, unless
        // bookkeeping ran since. `-D` compares that same reading with its deadline.
        let t0 = match self.prev_end {
            Some(t) => t,
            None => Instant::now(),
        };
        if deadline.is_some_and(|dl| t0 >= dl) {
            return Ok(false);
        }
        self.first.get_or_insert(t0);
        self.post.post(sq)?;
        // A look inside the wait (a wait over CHANNEL_CHECK) stays in this sample, an outlier
        // of the wait already.
        let t1 = self.wait_answer(t0, seq, sq)?;
        let round = t1.saturating_duration_since(t0);
        let rtt = round.as_nanos() as u64;
        let folded = rec.is_some_and(|r| r.record(if self.f.pingpong { rtt / 2 } else { rtt }));
        self.waiter.learn(round);
        self.last = t1;
        self.prev_end = Some(t1);
        // The round trip's own work before the next post (perftest's samples hold the same:
        // the receive re-posted, the send completions taken).
        self.finish_round(seq, sq)?;
        // Bookkeeping, decided on the clock read just taken: a heartbeat once a second, a look
        // at the channel at most every [`CHANNEL_CHECK`] and [`LOOK_ROUNDS`] rounds (a stalled
        // peer is seen by the wait itself), `--validate`'s checks and stamps. When any of it
        // runs, the next sample starts from a fresh clock read.
        let beat = self.waiter.watch.beat(self.waiter.ch, t1)?;
        self.unlooked += 1;
        let looked = self.unlooked >= LOOK_ROUNDS && self.waiter.watch.check(self.waiter.ch, t1)?;
        if looked {
            self.unlooked = 0;
        }
        if self.f.stamp_all || beat || looked || folded {
            self.prev_end = None;
        }
        Ok(true)
    }

    /// Both sides' step before a post: stamps message `seq` and makes room for it in the send
    /// queue. True when making room had to wait: bookkeeping the pinger keeps out of its
    /// sample (a fresh clock read follows); the ponger's sample holds it, as the pinger's round
    /// trip does.
    #[inline]
    fn prepare(&mut self, seq: u64, sq: &mut SendQueue) -> Result<bool> {
        let f = &self.f;
        stamp(self.mr, f.src, f.n, seq, f.kind, f.stamp_all)?;
        self.post
            .make_room(sq, &mut self.waiter, &mut self.wcs, &mut self.recv)
    }

    /// The pinger waits for the answer to message `seq`; returns when it came.
    #[inline]
    fn wait_answer(&mut self, since: Instant, seq: u64, sq: &mut SendQueue) -> Result<Instant> {
        let size = self.f.size;
        match self.f.kind {
            TestKind::Write if !self.f.by_recv => {
                let want = pattern::poll_byte(seq);
                self.waiter.what = "the server's RDMA write (its last byte)";
                let (m, off): (&Mr, usize) = (self.rx, self.f.poll_off);
                self.waiter
                    .wait(since, || Ok(m.read_volatile(off) == want))?;
            }
            TestKind::Send | TestKind::Write => {
                self.waiter.what = "the server's answer (a receive completion)";
                let (cq, channel) = (self.cq, self.channel);
                wait_recv(
                    &mut self.waiter,
                    since,
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
                self.waiter.wait(since, || {
                    let k = poll_or_sleep(cq, channel, wcs, true)?;
                    take(&wcs[..k], sq, recv, size)?;
                    Ok(sq.completed >= mine)
                })?;
            }
        }
        Ok(Instant::now())
    }

    /// The ponger's round `seq`: wait for the message, answer it, read the clock after and
    /// record the sample since the previous answer ([`Answers`]); then the round's own work.
    /// Returns false when the pinger's tally says it is done (`-D`: `stop_at` is this side's
    /// count).
    #[inline]
    pub(super) fn pong(
        &mut self,
        seq: u64,
        sq: &mut SendQueue,
        stop_at: Option<u64>,
        rec: Option<&mut Record>,
    ) -> Result<bool> {
        self.waiter.stop_at = stop_at;
        // The wait begins where the previous answer went out (or the phase began).
        let got = self.wait_message(self.last, seq, sq)?;
        self.waiter.stop_at = None;
        if let Waited::PeerDone = got {
            return Ok(false);
        }
        // Answer first, read the clock after: nothing stands between the arrival and the
        // answer but making room for it. Every answer after the first ends a sample, however
        // long its wait: a look at the channel inside it (a wait over CHANNEL_CHECK) and a wait
        // for room (at -t 1, the completion of the previous answer) delay this answer, so they
        // are in the client's round trip as much as in ours.
        let made_room = self.prepare(seq, sq)?;
        self.post.post(sq)?;
        let t1 = Instant::now();
        if let Some(round) = self.answers.answer(t1) {
            if let Some(r) = rec {
                r.record(round.as_nanos() as u64 / 2);
            }
            // The wait for room, if any, spun last: its spins tell nothing of the message's.
            if !made_room {
                self.waiter.learn(round);
            }
        }
        self.first.get_or_insert(t1);
        self.last = t1;
        self.finish_round(seq, sq)?;
        Ok(true)
    }

    /// The ponger waits for the pinger's message `seq`.
    #[inline]
    fn wait_message(&mut self, since: Instant, seq: u64, sq: &mut SendQueue) -> Result<Waited> {
        match self.f.kind {
            TestKind::Write if !self.f.by_recv => {
                let want = pattern::poll_byte(seq);
                self.waiter.what = "the client's RDMA write (its last byte)";
                let (m, off): (&Mr, usize) = (self.rx, self.f.poll_off);
                self.waiter.wait(since, || Ok(m.read_volatile(off) == want))
            }
            _ => {
                self.waiter.what = "the client's message (a receive completion)";
                wait_recv(
                    &mut self.waiter,
                    since,
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
        if let Some((slot, bytes, imm)) = self.recv.take() {
            if f.imm {
                check_imm(imm)?;
            }
            after_recv(
                self.rx,
                RecvQueue::of(self.qp, self.srq),
                self.layout,
                &self.recv_sges,
                (slot, bytes),
                f.rx_off,
                f.n,
                seq,
                f.lossy,
                f.stamp_all.then_some(f.kind == TestKind::Write),
            )?;
        }
        if f.pingpong {
            reap(self.cq, &mut self.wcs, sq, &mut self.recv, f.size)?;
        }
        Ok(())
    }
}

/// The ponger's samples: each answer ends the round trip that the previous answer of the phase
/// started (the first answer only starts one), whatever ran between them.
#[derive(Debug, Default)]
pub(super) struct Answers {
    prev: Option<Instant>,
}

impl Answers {
    /// An answer went out at `t` (the clock read just after its post): the round trip since
    /// the previous answer, `None` for the phase's first.
    #[inline]
    pub(super) fn answer(&mut self, t: Instant) -> Option<Duration> {
        self.prev
            .replace(t)
            .map(|t0| t.saturating_duration_since(t0))
    }
}

/// Writes what message `seq` carries: write latency's poll byte (and with `--validate` the
/// stamps); send latency's stamps with `--validate`.
#[inline]
fn stamp(mr: &Mr, src: usize, n: usize, seq: u64, kind: TestKind, all: bool) -> Result<()> {
    match kind {
        TestKind::Write if all => pattern::stamp_mr(mr, src, n, seq, true)?,
        TestKind::Write => mr.write_byte(src + n - 1, pattern::poll_byte(seq))?,
        TestKind::Send if all => pattern::stamp_mr(mr, src, n, seq, false)?,
        _ => {}
    }
    Ok(())
}

/// After a receive: check its length and (with `--validate`, `Some(write)`: the stamps of an
/// RDMA Write with immediate, which landed in slot 0, or of a Send) its bytes, then post it
/// again.
#[allow(clippy::too_many_arguments)]
fn after_recv(
    mr: &Mr,
    rq: RecvQueue<'_>,
    layout: crate::conn::Layout,
    sges: &[Sge<'_>],
    (slot, bytes): (usize, u32),
    rx_off: usize,
    n: usize,
    seq: u64,
    lossy: bool,
    validate: Option<bool>,
) -> Result<()> {
    if bytes as usize != n + rx_off {
        bail!(
            "received {bytes} bytes, expected {}: the peer sent another size",
            n + rx_off
        );
    }
    if let Some(write) = validate {
        let off = layout.dst(0, slot) + rx_off;
        let msg = mr.to_vec(off..off + n)?;
        let r = if lossy {
            pattern::check_body(&msg, 0).map(|_| ())
        } else {
            pattern::check(&msg, 0, seq, write)
        };
        if let Err(m) = r {
            bail!("--validate: received message {seq} ({n} bytes) is wrong: {m}");
        }
    }
    let sge = sges
        .get(slot)
        .with_context(|| format!("a receive completion for slot {slot}, which does not exist"))?;
    rq.post(&[RecvWr {
        wr_id: crate::engine::wr_id(0, slot as u64),
        sges: std::slice::from_ref(sge),
    }])
    .context("re-posting the receive")
}

/// Waits for one receive completion (taking send completions on the way).
#[allow(clippy::too_many_arguments)]
fn wait_recv(
    waiter: &mut Waiter<'_>,
    since: Instant,
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
    waiter.wait(since, || {
        let k = poll_or_sleep(cq, ch, wcs, true)?;
        take(&wcs[..k], sq, recv, size)?;
        Ok(recv.is_some())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_answer_after_the_first_ends_a_sample_however_long_the_wait() {
        // Answers 5 µs apart, then one after a 40 ms wait (past CHANNEL_CHECK: the wait looked
        // at the channel), then 5 µs again: n answers, n - 1 samples, the slow one among them.
        let t = Instant::now();
        let at = [0, 5, 10, 40_010, 40_015].map(|us| t + Duration::from_micros(us));
        let mut a = Answers::default();
        let samples: Vec<Option<Duration>> = at.iter().map(|&t| a.answer(t)).collect();
        let us = |x: u64| Some(Duration::from_micros(x));
        assert_eq!(samples, [None, us(5), us(5), us(40_000), us(5)]);
        assert!(crate::engine::CHANNEL_CHECK < Duration::from_millis(40));
    }
}
