//! What the bandwidth and latency loops share: the session (configuration, connected resources,
//! channel, timeouts), the watch on the peer while a loop runs, receive buffers, waiting on the
//! completion queue (busy or with events), and turning failed completions into errors that name
//! the phase.

use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _, Result};
use verbs_lab::verbs::{
    CompChannel, Cq, Mr, RecvWr, RemoteBuf, SendOp, Sge, VerbsError, WorkCompletion,
};

use crate::conn::{Layout, Link, RecvQueue};
use crate::measure::result::TestKind;
use crate::params::{AtomicType, Config, RunMode, UD_GRH};
use crate::proto::{ChanError, Channel, Msg, Phase, QpEndpoint, Tally};

/// Completions taken per `ibv_poll_cq` call.
pub const POLL_BATCH: usize = 32;
/// How often a running loop that waits (a latency round, a bandwidth loop without progress)
/// looks at the out-of-band channel.
pub const CHANNEL_CHECK: Duration = Duration::from_millis(10);
/// How often a bandwidth loop looks while its completions flow. A look is two or three system
/// calls (the signals' descriptor, the socket, the device's queues) that perftest does not
/// make; every 10 ms they kept write and read bandwidth from 4 KiB up a few hundredths of a
/// percent behind perftest in deterministic time (`docs/benchmarks-deterministic.md`,
/// "Looks"). A loop that stops making progress looks every [`CHANNEL_CHECK`] again, so a
/// receiver still hears the tally that ends its phase within 10 ms.
pub const BUSY_CHECK: Duration = Duration::from_millis(100);
/// How often a sending side tells a waiting peer it is alive.
pub const HEARTBEAT: Duration = Duration::from_secs(1);
/// A lossy transport (UC, UD) is done receiving when nothing arrived for this long after the
/// sender's tally.
pub const LOSSY_GRACE: Duration = Duration::from_millis(200);
/// One slice of an event wait (`-e`): the loop wakes up this often to watch the peer.
pub const EVENT_SLICE: Duration = Duration::from_millis(10);

/// On a software device (rxe, siw: `DeviceAttr::software_driver`) a loop that has waited this
/// long without progress yields the CPU (`sched_yield(2)`) each time it looks at the clock: the
/// device *is* kernel work on this machine's CPUs (softirq, ksoftirqd, the rxe tasks), and the
/// peer may share them too (a bandwidth loop that only receives yields only while a message
/// fits in one packet: `bw::idle_yields`). A hardware NIC answers without our CPU, so on one
/// the loops never yield. (Sleeping instead was tried: under emulation a short sleep lasts about
/// a millisecond, and two sides that sleep while waiting for each other lock into millisecond
/// rounds.)
/// 1 ms, not less: a read or atomic round trip on rxe under TCG takes 70-150 µs, and a yield in
/// the middle of one cost it 50-70 µs in the guest (read_lat t_typical 125-160 µs with a 100 µs
/// threshold, 78-83 µs without the yield, perftest 100-121 µs; docs/benchmarks.md).
pub const YIELD_AFTER: Duration = Duration::from_millis(1);

/// `VL_NO_YIELD` set to anything but empty or `0` turns the yield off on software devices too:
/// a switch for measuring what the yield buys (`docs/benchmarks.md`). Read from the environment
/// once per process, never in a loop.
pub fn no_yield() -> bool {
    static NO_YIELD: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *NO_YIELD
        .get_or_init(|| std::env::var_os("VL_NO_YIELD").is_some_and(|v| !v.is_empty() && v != "0"))
}

/// Gives the CPU away when a loop on a software device has waited [`YIELD_AFTER`]; returns
/// whether it did.
#[inline]
pub fn backoff(waited: Duration) -> bool {
    let long = waited >= YIELD_AFTER;
    if long {
        std::thread::yield_now();
    }
    long
}

/// `wr_id` = QP index << 40 | request number.
pub const QP_SHIFT: u32 = 40;
pub const SEQ_MASK: u64 = (1 << QP_SHIFT) - 1;

/// The slowest rate a phase is allowed: 50 ms per message (a round trip under loaded QEMU
/// emulation takes up to ~30 ms) plus 1 MB/s per byte (far below any NIC). Only the bound on
/// an alive but stuck peer uses them; a real run never comes near.
const SLOWEST_PER_MSG: Duration = Duration::from_millis(50);
const SLOWEST_BYTES_PER_SEC: u64 = 1 << 20;

/// The longest one phase of a size may take — the wait for a tally, a barrier, the endpoints —
/// while the peer sends nothing but heartbeats: the run's own length (`-D`, or `-n` plus the
/// warm-up messages at the slowest allowed rate for the largest size on every QP), plus two
/// completion timeouts (the QPs' retries) and 30 s of slack. A peer that is alive but stuck
/// ends the run after this, with a message that names what was awaited.
pub fn phase_limit(cfg: &Config, cq_timeout: Duration) -> Duration {
    let slack = cq_timeout.saturating_mul(2) + Duration::from_secs(30);
    let size = cfg.sizes.max();
    let per_msg =
        SLOWEST_PER_MSG + Duration::from_secs_f64(size as f64 / SLOWEST_BYTES_PER_SEC as f64);
    let warm = per_msg.saturating_mul(cfg.timing.warmup.most().min(u64::from(u32::MAX)) as u32);
    let run = match cfg.timing.mode {
        RunMode::Duration(d) => d,
        RunMode::Iters(n) => {
            let msgs = n
                .saturating_mul(u64::from(cfg.qps))
                .min(u64::from(u32::MAX));
            per_msg.saturating_mul(msgs as u32)
        }
    };
    run.saturating_add(warm.saturating_mul(cfg.qps))
        .saturating_add(slack)
}

/// A connected run.
pub struct Session<'c> {
    pub cfg: &'c Config,
    pub link: Link,
    pub ch: &'c mut Channel,
    /// How long one completion may take before the run is declared stalled.
    pub cq_timeout: Duration,
    /// How long a waiting side accepts silence from a peer that is supposed to be running.
    pub peer_timeout: Duration,
    /// The caller's hook into each size (a `--procs` worker), if any.
    pub pacer: Option<&'c mut dyn Pacer>,
}

/// A caller's hook into each size of a bandwidth run: a `--procs` worker keeps its processes
/// in step (a barrier across them before each measurement, a common start time) and records
/// when each measurement ran. See `procs::worker`.
pub trait Pacer {
    /// Before the measurement of `size` and this side's barrier with its peer: returns once
    /// every process may go on, with an optional start time (ns on `CLOCK_MONOTONIC`). Calls
    /// `beat` while it waits, so that the peer does not take the wait for a stall.
    fn before_measure(
        &mut self,
        size: u64,
        beat: &mut dyn FnMut() -> Result<()>,
    ) -> Result<Option<u64>>;
    /// The measurement of `size` ran from `start` (first post) to `end` (last completion).
    fn measured(&mut self, size: u64, start: Instant, end: Instant);
}

impl Session<'_> {
    /// Whether this side posts requests in the timed loop of a bandwidth test.
    pub fn bw_sends(&self) -> bool {
        self.cfg.is_requester() || self.cfg.bidirectional
    }
    /// Whether the peer does.
    pub fn bw_peer_sends(&self) -> bool {
        !self.cfg.is_requester() || self.cfg.bidirectional
    }
    /// Whether this side consumes receives in a bandwidth test (send tools, write tools with
    /// `--write_with_imm`; the peer sending).
    pub fn bw_receives(&self) -> bool {
        self.cfg.posts_receives() && self.bw_peer_sends()
    }
    /// Bytes in front of a received message (the GRH on UD).
    pub fn rx_offset(&self) -> usize {
        if self.cfg.conn == verbs_lab::verbs::QpType::Ud {
            UD_GRH as usize
        } else {
            0
        }
    }
    /// Whether waiting loops back off (see [`YIELD_AFTER`]): on a software device (rxe, siw,
    /// from the attributes queried at open), unless `VL_NO_YIELD` is set (see [`no_yield`]).
    pub fn yields(&self) -> bool {
        self.link.dev.attr.software_driver().is_some() && !no_yield()
    }

    /// Whether the transport may drop messages (no retransmission).
    pub fn lossy(&self) -> bool {
        self.cfg.conn != verbs_lab::verbs::QpType::Rc
    }

    /// Into the measurement of `size`: the pacer's barrier across processes (if any), the
    /// barrier with the peer, then the pacer's common start time (if it named one).
    pub fn enter_measure(&mut self, size: u64) -> Result<()> {
        let start_at = match self.pacer.as_deref_mut() {
            Some(p) => p.before_measure(size, &mut heartbeats(&mut *self.ch))?,
            None => None,
        };
        self.ch
            .sync(Phase::Measure, size)
            .map_err(anyhow::Error::new)?;
        if let Some(at) = start_at {
            verbs_lab::workers::sleep_until_monotonic(at);
        }
        Ok(())
    }

    /// Tells the pacer (if any) when the measurement of `size` ran.
    pub fn measured(&mut self, size: u64, start: Instant, end: Instant) {
        if let Some(p) = self.pacer.as_deref_mut() {
            p.measured(size, start, end);
        }
    }

    /// Posts `wr_ids` (slot numbers) as receives on QP `q`, in chunks, without allocating.
    pub fn post_receives(&self, q: usize, slots: impl Iterator<Item = usize>) -> Result<()> {
        let res = &self.link.res;
        post_receives(
            res.recv_queue(q),
            &res.bufs.dst[q],
            &res.bufs.layout,
            q,
            slots,
        )
    }
}

/// The tick of a wait that is not on the channel (a `--procs` barrier, the wait for Go): sends
/// the peer a HEARTBEAT every [`HEARTBEAT`], so that the peer, waiting meanwhile, hears this side
/// is alive; and ends the wait once a signal came (a worker's coordinator passes its SIGINT on),
/// so that the run stops and tells the peer at once.
pub fn heartbeats(ch: &mut Channel) -> impl FnMut() -> Result<()> + '_ {
    let mut last = Instant::now();
    move || {
        ch.check_stop()?;
        if last.elapsed() >= HEARTBEAT {
            last = Instant::now();
            ch.send(&Msg::Heartbeat).map_err(anyhow::Error::new)?;
        }
        Ok(())
    }
}

/// The most receives one `ibv_post_recv` call of [`post_receive_lists`] carries.
pub const MAX_RECV_PER_CALL: usize = 256;

/// Posts receives for `slots` of QP `q`, 32 per call: one SGE each, a whole destination slot
/// (`stride` bytes, so that one posted receive fits every size of a sweep).
pub fn post_receives<'q>(
    qp: impl Into<RecvQueue<'q>>,
    mr: &Mr,
    layout: &Layout,
    q: usize,
    slots: impl Iterator<Item = usize>,
) -> Result<()> {
    post_receive_lists(qp, mr, layout, q, slots, 32)
}

/// [`post_receives`], `per_call` (at most [`MAX_RECV_PER_CALL`]) per `ibv_post_recv` call:
/// perftest's `--recv_post_list`. `qp` is a QP's receive queue or the shared one
/// (`--use-srq`); the `wr_id` names QP `q` and the slot either way (the slot is QP `q`'s).
///
/// The requests are built on the stack in arrays as long as one list (1, 32 or
/// [`MAX_RECV_PER_CALL`]): re-posting the one receive of a latency round or of a bandwidth
/// poll then writes one request, not room for 256 (which cost ~1,700 instructions a call).
pub fn post_receive_lists<'q>(
    qp: impl Into<RecvQueue<'q>>,
    mr: &Mr,
    layout: &Layout,
    q: usize,
    slots: impl Iterator<Item = usize>,
    per_call: usize,
) -> Result<()> {
    let qp = qp.into();
    match per_call {
        0 | 1 => post_lists::<1>(qp, mr, layout, q, slots, 1),
        2..=32 => post_lists::<32>(qp, mr, layout, q, slots, per_call),
        _ => post_lists::<MAX_RECV_PER_CALL>(qp, mr, layout, q, slots, per_call),
    }
}

/// [`post_receive_lists`] with lists of at most `per_call` (≤ `C`) requests in arrays of `C`.
#[inline]
fn post_lists<const C: usize>(
    qp: RecvQueue<'_>,
    mr: &Mr,
    layout: &Layout,
    q: usize,
    mut slots: impl Iterator<Item = usize>,
    per_call: usize,
) -> Result<()> {
    let per_call = per_call.clamp(1, C);
    let slot_sge = |slot: usize| -> Result<Sge<'_>> {
        let off = layout.dst(q, slot);
        mr.sge(off..off + layout.stride)
            .with_context(|| format!("the receive SGE of QP {q}'s slot {slot}"))
    };
    let wrap = |slot: usize| slot % layout.dst_slots.max(1);
    loop {
        // The list's first request fills the arrays (no placeholder SGE to build).
        let Some(slot) = slots.next().map(wrap) else {
            return Ok(());
        };
        let mut sges = [slot_sge(slot)?; C];
        let mut ids = [wr_id(q, slot as u64); C];
        let mut n = 1;
        for slot in slots.by_ref().take(per_call - 1).map(wrap) {
            sges[n] = slot_sge(slot)?;
            ids[n] = wr_id(q, slot as u64);
            n += 1;
        }
        let mut wrs = [RecvWr {
            wr_id: ids[0],
            sges: std::slice::from_ref(&sges[0]),
        }; C];
        for (k, wr) in wrs[..n].iter_mut().enumerate().skip(1) {
            *wr = RecvWr {
                wr_id: ids[k],
                sges: std::slice::from_ref(&sges[k]),
            };
        }
        qp.post(&wrs[..n])
            .with_context(|| format!("re-posting {n} receive(s) on QP {q}"))?;
    }
}

/// The `wr_id` of request `seq` of QP `q`: the QP index above [`QP_SHIFT`], the request number
/// (masked to [`SEQ_MASK`], so a long `-D` run wraps the number instead of corrupting the QP
/// index) below it.
#[inline]
pub fn wr_id(q: usize, seq: u64) -> u64 {
    ((q as u64) << QP_SHIFT) | (seq & SEQ_MASK)
}

/// How many requests are complete once the completion of `wr_id` (request number masked to
/// [`SEQ_MASK`]) arrives, given `completed` before it: completions arrive in order, fewer than
/// 2^39 apart, so the masked number is unwrapped against the count so far. A stale or repeated
/// completion leaves the count as it was.
#[inline]
pub fn completed_through(completed: u64, wr_id: u64) -> u64 {
    let ahead = ((wr_id & SEQ_MASK) + 1).wrapping_sub(completed) & SEQ_MASK;
    if ahead != 0 && ahead < 1 << (QP_SHIFT - 1) {
        completed + ahead
    } else {
        completed
    }
}

/// A failed completion as an error naming its status (the caller adds the phase and size).
pub fn wc_error(wc: &WorkCompletion) -> anyhow::Error {
    let e = wc.ok().err().unwrap_or(VerbsError::InvalidArgument(
        "a completion reported as failed".into(),
    ));
    anyhow!(e)
}

/// Polls the CQ once; with a completion channel and nothing to take, arms the CQ, polls again
/// (a completion may have slipped in before the arming) and sleeps on the channel for at most
/// [`EVENT_SLICE`].
pub fn poll_or_sleep(
    cq: &Cq,
    channel: Option<&CompChannel>,
    wcs: &mut [WorkCompletion],
    idle: bool,
) -> Result<usize> {
    let n = cq.poll(wcs).context("ibv_poll_cq")?;
    if n > 0 || !idle {
        return Ok(n);
    }
    let Some(ch) = channel else { return Ok(0) };
    cq.req_notify(false).context("ibv_req_notify_cq")?;
    let n = cq.poll(wcs).context("ibv_poll_cq")?;
    if n > 0 {
        return Ok(n);
    }
    match ch.wait(cq, EVENT_SLICE) {
        Ok(()) | Err(VerbsError::Timeout { .. }) => {}
        Err(e) => return Err(anyhow!(e).context("waiting for a completion event (-e)")),
    }
    cq.poll(wcs).context("ibv_poll_cq")
}

/// The peer as a running loop sees it: the channel (looked at every [`CHANNEL_CHECK`], or
/// [`BUSY_CHECK`]),
/// heartbeats, the peer's tally, and when it last showed signs of life.
pub struct PeerWatch {
    /// When the phase began: waits that heartbeats keep alive end at the channel's phase limit.
    started: Instant,
    /// When the next look at the channel is due, for a loop that waits and for one whose
    /// completions flow, and when the next HEARTBEAT is: the loops compare their clock reading
    /// with these (no duration to compute in an ordinary round).
    next_check: Instant,
    next_busy_check: Instant,
    next_beat: Instant,
    /// The last HEARTBEAT, TALLY or data from the peer.
    pub last_sign: Instant,
    pub tally: Option<Tally>,
    phase: Phase,
    size: u64,
}

impl PeerWatch {
    pub fn new(phase: Phase, size: u64) -> PeerWatch {
        let now = Instant::now();
        PeerWatch {
            started: now,
            next_check: now + CHANNEL_CHECK,
            next_busy_check: now + BUSY_CHECK,
            next_beat: now + HEARTBEAT,
            last_sign: now,
            tally: None,
            phase,
            size,
        }
    }

    /// Takes what the peer sent without blocking: HEARTBEATs, the TALLY of this phase. An
    /// ERROR ends the run with the peer's reason; anything else is a protocol error. Returns
    /// whether it looked (at most every [`CHANNEL_CHECK`]): a latency loop then restarts its
    /// clock, so that the look is in no sample.
    pub fn check(&mut self, ch: &mut Channel, now: Instant) -> Result<bool> {
        self.check_paced(ch, now, false)
    }

    /// [`PeerWatch::check`], at most every [`BUSY_CHECK`] when `busy` (a bandwidth loop whose
    /// completions flow).
    pub fn check_paced(&mut self, ch: &mut Channel, now: Instant, busy: bool) -> Result<bool> {
        let due = match busy {
            true => self.next_busy_check,
            false => self.next_check,
        };
        if now < due {
            return Ok(false);
        }
        self.next_check = now + CHANNEL_CHECK;
        self.next_busy_check = now + BUSY_CHECK;
        ch.check_stop()?;
        // Up to this phase's TALLY: what follows it (a RESULT, the next SYNC) belongs to the
        // steps after the loop. Whole messages only: half a frame stays for the next look
        // (bounded by the channel's timeout), the loop never blocks on it.
        // Named without allocating: this runs inside the loops' waits.
        let what = match ch.peer_name() {
            "server" => "the server's messages",
            "client" => "the client's messages",
            _ => "the peer's messages",
        };
        while self.tally.is_none() {
            match ch.try_recv(what).map_err(anyhow::Error::new)? {
                Some(m) => self.take(m)?,
                None => break,
            }
        }
        Ok(true)
    }

    fn take(&mut self, m: Msg) -> Result<()> {
        self.last_sign = Instant::now();
        match m {
            Msg::Heartbeat => Ok(()),
            Msg::Tally(t) if t.phase == self.phase && t.size == self.size => {
                if self.tally.is_some() {
                    bail!(
                        "protocol out of step: a second TALLY for the {} of size {}",
                        t.phase,
                        t.size
                    );
                }
                if let Some(n) = t.per_qp.iter().find(|n| **n > MAX_TALLY) {
                    bail!(
                        "the peer's tally of the {} of size {} claims {n} messages, more than \
                         any run can send (protocol error)",
                        t.phase,
                        t.size
                    );
                }
                self.tally = Some(t);
                Ok(())
            }
            Msg::Tally(t) => Err(anyhow::Error::new(ChanError::Unexpected {
                what: format!("the TALLY of the {} of size {}", self.phase, self.size),
                got: format!("the TALLY of the {} of size {}", t.phase, t.size),
            })),
            other => Err(anyhow::Error::new(ChanError::Unexpected {
                what: format!("HEARTBEAT or TALLY during the {}", self.phase),
                got: other.name().into(),
            })),
        }
    }

    /// Sends a HEARTBEAT when the last one is [`HEARTBEAT`] old; returns whether it sent one.
    pub fn beat(&mut self, ch: &mut Channel, now: Instant) -> Result<bool> {
        if now < self.next_beat {
            return Ok(false);
        }
        self.next_beat = now + HEARTBEAT;
        ch.send(&Msg::Heartbeat).map_err(anyhow::Error::new)?;
        Ok(true)
    }

    /// Fails when the peer has been silent longer than `limit`.
    pub fn alive(&self, now: Instant, limit: Duration, waiting_for: &str) -> Result<()> {
        let quiet = now.duration_since(self.last_sign);
        if quiet > limit {
            bail!(
                "the peer gave no sign of life for {:.1} s while this side waited for \
                 {waiting_for}: is it stopped or stuck?",
                quiet.as_secs_f64()
            );
        }
        Ok(())
    }

    /// Fails when this phase has lasted longer than the channel's phase limit while this side
    /// waited for `waiting_for` (the peer's heartbeats keep [`PeerWatch::alive`] content, but
    /// an alive peer that never delivers must not hold the run forever).
    pub fn within_phase(&self, ch: &Channel, now: Instant, waiting_for: &str) -> Result<()> {
        if now.duration_since(self.started) > ch.phase_limit() {
            return Err(anyhow::Error::new(ChanError::Stalled {
                what: format!("{waiting_for} (the {} of size {})", self.phase, self.size),
                after: now.duration_since(self.started),
            }));
        }
        Ok(())
    }

    /// Blocks until the peer's TALLY of this phase arrives. Each message must come within the
    /// channel's timeout, and HEARTBEATs keep the wait going only up to the channel's phase
    /// limit: a peer that is alive but never finishes ends the run, named.
    pub fn wait_tally(&mut self, ch: &mut Channel) -> Result<Tally> {
        let start = Instant::now();
        let what = format!(
            "the {}'s tally of the {} of size {}",
            ch.peer_name(),
            self.phase,
            self.size
        );
        while self.tally.is_none() {
            let m = ch.recv(&what).map_err(anyhow::Error::new)?;
            self.take(m)?;
            if self.tally.is_none() {
                ch.check_stalled(start, &what).map_err(anyhow::Error::new)?;
            }
        }
        Ok(self.tally.clone().expect("set above"))
    }
}

/// Sends this side's tally of a phase.
pub fn send_tally(ch: &mut Channel, phase: Phase, size: u64, per_qp: Vec<u64>) -> Result<()> {
    ch.send(&Msg::Tally(Tally {
        phase,
        size,
        per_qp,
    }))
    .map_err(anyhow::Error::new)
}

/// The largest message count a tally may carry: far beyond any run (2^62 messages would take
/// a century at 1.5 billion messages a second), yet any two of them add up without overflow.
pub const MAX_TALLY: u64 = 1 << 62;

/// Checks that a tally holds one count per QP, each a count a real run could reach.
pub fn check_tally(t: &Tally, qps: usize) -> Result<()> {
    if t.per_qp.len() != qps {
        bail!(
            "the peer's tally lists {} QPs, this run has {qps} (protocol error)",
            t.per_qp.len()
        );
    }
    if let Some((q, n)) = t.per_qp.iter().enumerate().find(|(_, n)| **n > MAX_TALLY) {
        bail!(
            "the peer's tally claims {n} messages on QP {q}, more than any run can send \
             (protocol error)"
        );
    }
    Ok(())
}

/// `--send_with_imm`, `--write_with_imm`: a receive must carry the immediate data the peer's
/// Sends or RDMA Writes carry.
pub fn check_imm(got: Option<u32>) -> Result<()> {
    let want = crate::params::IMM_DATA;
    match got {
        Some(imm) if imm == want => Ok(()),
        Some(imm) => bail!(
            "a receive carried the immediate data {imm:#010x}, expected {want:#010x} \
             (--send_with_imm / --write_with_imm)"
        ),
        None => bail!(
            "a receive without immediate data (IBV_WC_WITH_IMM not set): the peer sent a plain \
             Send (--send_with_imm / --write_with_imm)"
        ),
    }
}

/// The peer's buffer a test's requests aim at (`n` bytes; an atomic's 8) and the operation
/// that does: an RDMA Write or Read of it, a Send, or the `-A` atomic on its first 8 bytes.
pub fn remote_op(cfg: &Config, r: &QpEndpoint, n: usize) -> (RemoteBuf, SendOp) {
    let rb = RemoteBuf {
        addr: r.addr,
        rkey: r.rkey,
        len: if cfg.tool.kind == TestKind::Atomic {
            8
        } else {
            n as u32
        },
    };
    let op = match cfg.tool.kind {
        TestKind::Write if cfg.write_with_imm => SendOp::WriteWithImm(rb, crate::params::IMM_DATA),
        TestKind::Write => SendOp::Write(rb),
        TestKind::Read => SendOp::Read(rb),
        TestKind::Send if cfg.send_with_imm => SendOp::SendWithImm(crate::params::IMM_DATA),
        TestKind::Send => SendOp::Send,
        TestKind::Atomic => match cfg.atomic.unwrap_or_default() {
            AtomicType::FetchAndAdd => SendOp::FetchAdd { remote: rb, add: 1 },
            AtomicType::CmpAndSwap => SendOp::CompareSwap {
                remote: rb,
                compare: 0,
                swap: 0,
            },
        },
    };
    (rb, op)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn implausible_tallies_are_refused() {
        let t = |per_qp: Vec<u64>| Tally {
            phase: Phase::Measure,
            size: 64,
            per_qp,
        };
        assert!(check_tally(&t(vec![5, 6]), 2).is_ok());
        assert!(check_tally(&t(vec![5]), 2).is_err());
        let e = check_tally(&t(vec![1, u64::MAX]), 2)
            .unwrap_err()
            .to_string();
        assert!(e.contains("QP 1") && e.contains("protocol error"), "{e}");
        assert!(check_tally(&t(vec![MAX_TALLY, MAX_TALLY]), 2).is_ok());
        assert!(MAX_TALLY.checked_add(MAX_TALLY).is_some());
    }

    #[test]
    fn wr_ids_keep_the_qp_index_past_the_mask() {
        let past = SEQ_MASK + 6;
        assert_eq!(wr_id(3, past) >> QP_SHIFT, 3);
        assert_eq!(wr_id(3, past) & SEQ_MASK, 5);
        assert_eq!(wr_id(0, 7), 7);
    }

    #[test]
    fn completion_counts_unwrap_the_masked_number() {
        assert_eq!(completed_through(0, wr_id(1, 0)), 1);
        assert_eq!(completed_through(10, wr_id(1, 19)), 20);
        // Stale or repeated completions change nothing.
        assert_eq!(completed_through(20, wr_id(1, 19)), 20);
        assert_eq!(completed_through(20, wr_id(1, 5)), 20);
        // Across the wrap of the 40-bit request number.
        let before = SEQ_MASK - 1;
        assert_eq!(completed_through(before, wr_id(2, SEQ_MASK)), SEQ_MASK + 1);
        assert_eq!(
            completed_through(SEQ_MASK + 1, wr_id(2, SEQ_MASK + 4)),
            SEQ_MASK + 5
        );
    }
}
