//! What the bandwidth and latency loops share: the session (configuration, connected resources,
//! channel, timeouts), the watch on the peer while a loop runs, receive buffers, waiting on the
//! completion queue (busy or with events), and turning failed completions into errors that name
//! the phase.

use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _, Result};
use verbs_lab::verbs::{CompChannel, Cq, RecvWr, Sge, VerbsError, WorkCompletion};

use crate::conn::Link;
use crate::params::{Config, UD_GRH};
use crate::proto::{ChanError, Channel, Msg, Phase, Tally};
use crate::result::TestKind;

/// Completions taken per `ibv_poll_cq` call.
pub const POLL_BATCH: usize = 32;
/// How often a running loop looks at the out-of-band channel.
pub const CHANNEL_CHECK: Duration = Duration::from_millis(10);
/// How often a sending side tells a waiting peer it is alive.
pub const HEARTBEAT: Duration = Duration::from_secs(1);
/// A lossy transport (UC, UD) is done receiving when nothing arrived for this long after the
/// sender's tally.
pub const LOSSY_GRACE: Duration = Duration::from_millis(200);
/// One slice of an event wait (`-e`): the loop wakes up this often to watch the peer.
pub const EVENT_SLICE: Duration = Duration::from_millis(10);

/// When both sides share this machine's CPUs (a loopback test, the SoftRoCE guest), a loop that
/// has waited this long without progress yields the CPU (`sched_yield(2)`) each time it looks at
/// the clock: its peer, or SoftRoCE's kernel work (softirq, ksoftirqd), may need that CPU. A
/// hardware NIC answers within microseconds, and between separate hosts the loops never yield.
/// (Sleeping instead was tried: under emulation a short sleep lasts about a millisecond, and two
/// sides that sleep while waiting for each other lock into millisecond rounds.)
pub const YIELD_AFTER: Duration = Duration::from_micros(100);

/// Gives the CPU away when a co-located loop has waited [`YIELD_AFTER`].
#[inline]
pub fn backoff(waited: Duration) {
    if waited >= YIELD_AFTER {
        std::thread::yield_now();
    }
}

/// `wr_id` = QP index << 40 | request number.
pub const QP_SHIFT: u32 = 40;
pub const SEQ_MASK: u64 = (1 << QP_SHIFT) - 1;

/// A connected run.
pub struct Session<'c> {
    pub cfg: &'c Config,
    pub link: Link,
    pub ch: &'c mut Channel,
    /// Receive buffers (send tools): one SGE per destination slot, `stride` bytes long so that
    /// one posted receive fits every size of a sweep.
    pub rx_sges: Vec<Vec<Sge>>,
    /// How long one completion may take before the run is declared stalled.
    pub cq_timeout: Duration,
    /// How long a waiting side accepts silence from a peer that is supposed to be running.
    pub peer_timeout: Duration,
}

impl Session<'_> {
    /// Whether this side posts requests in the timed loop of a bandwidth test.
    pub fn bw_sends(&self) -> bool {
        !self.cfg.is_server() || self.cfg.bidirectional
    }
    /// Whether the peer does.
    pub fn bw_peer_sends(&self) -> bool {
        self.cfg.is_server() || self.cfg.bidirectional
    }
    /// Whether this side consumes receives in a bandwidth test (send tools, peer sending).
    pub fn bw_receives(&self) -> bool {
        self.cfg.tool.kind == TestKind::Send && self.bw_peer_sends()
    }
    /// Bytes in front of a received message (the GRH on UD).
    pub fn rx_offset(&self) -> usize {
        if self.cfg.conn == verbs_lab::verbs::QpType::Ud {
            UD_GRH as usize
        } else {
            0
        }
    }
    /// Whether the peer runs on this machine (its address is one of ours): then both sides
    /// compete for the same CPUs and waiting loops back off (see [`YIELD_AFTER`]).
    pub fn peer_shares_cpus(&self) -> bool {
        let ip = self.ch.peer_addr().ip();
        ip.is_loopback() || std::net::UdpSocket::bind((ip, 0)).is_ok()
    }

    /// Whether the transport may drop messages (no retransmission).
    pub fn lossy(&self) -> bool {
        self.cfg.conn != verbs_lab::verbs::QpType::Rc
    }

    /// Posts `wr_ids` (slot numbers) as receives on QP `q`, in chunks, without allocating.
    pub fn post_receives(&self, q: usize, slots: impl Iterator<Item = usize>) -> Result<()> {
        post_receives(&self.link.res.qps[q], &self.rx_sges[q], q, slots)
    }
}

/// Posts receives for `slots` of QP `q` (one SGE each, from `sges`), 32 per call.
pub fn post_receives(
    qp: &verbs_lab::verbs::Qp,
    sges: &[Sge],
    q: usize,
    mut slots: impl Iterator<Item = usize>,
) -> Result<()> {
    const CHUNK: usize = 32;
    let first = match sges.first() {
        Some(s) => s,
        None => return Ok(()),
    };
    let mut wrs = [RecvWr {
        wr_id: 0,
        sges: std::slice::from_ref(first),
    }; CHUNK];
    loop {
        let mut n = 0;
        for slot in slots.by_ref().take(CHUNK) {
            let slot = slot % sges.len();
            wrs[n] = RecvWr {
                wr_id: ((q as u64) << QP_SHIFT) | slot as u64,
                sges: std::slice::from_ref(&sges[slot]),
            };
            n += 1;
        }
        if n == 0 {
            return Ok(());
        }
        qp.post_recv(&wrs[..n])
            .with_context(|| format!("re-posting {n} receive(s) on QP {q}"))?;
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

/// The peer as a running loop sees it: the channel (looked at every [`CHANNEL_CHECK`]),
/// heartbeats, the peer's tally, and when it last showed signs of life.
pub struct PeerWatch {
    last_check: Instant,
    last_beat_sent: Instant,
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
            last_check: now,
            last_beat_sent: now,
            last_sign: now,
            tally: None,
            phase,
            size,
        }
    }

    /// Takes what the peer sent without blocking: HEARTBEATs, the TALLY of this phase. An
    /// ERROR ends the run with the peer's reason; anything else is a protocol error.
    pub fn check(&mut self, ch: &mut Channel, now: Instant) -> Result<()> {
        if now.duration_since(self.last_check) < CHANNEL_CHECK {
            return Ok(());
        }
        self.last_check = now;
        // Up to this phase's TALLY: what follows it (a RESULT, the next SYNC) belongs to the
        // steps after the loop.
        while self.tally.is_none() && ch.readable(Duration::ZERO).map_err(anyhow::Error::new)? {
            let m = ch
                .recv(&format!("the {}'s messages", ch.peer_name()))
                .map_err(anyhow::Error::new)?;
            self.take(m)?;
        }
        Ok(())
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

    /// Sends a HEARTBEAT when the last one is [`HEARTBEAT`] old.
    pub fn beat(&mut self, ch: &mut Channel, now: Instant) -> Result<()> {
        if now.duration_since(self.last_beat_sent) >= HEARTBEAT {
            self.last_beat_sent = now;
            ch.send(&Msg::Heartbeat).map_err(anyhow::Error::new)?;
        }
        Ok(())
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

    /// Blocks until the peer's TALLY of this phase arrives (HEARTBEATs keep it waiting; each
    /// wait for the next message is bounded by the channel's timeout).
    pub fn wait_tally(&mut self, ch: &mut Channel) -> Result<Tally> {
        while self.tally.is_none() {
            let what = format!(
                "the {}'s tally of the {} of size {}",
                ch.peer_name(),
                self.phase,
                self.size
            );
            let m = ch.recv(&what).map_err(anyhow::Error::new)?;
            self.take(m)?;
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

/// Checks that a tally holds one count per QP.
pub fn check_tally(t: &Tally, qps: usize) -> Result<()> {
    if t.per_qp.len() != qps {
        bail!(
            "the peer's tally lists {} QPs, this run has {qps} (protocol error)",
            t.per_qp.len()
        );
    }
    Ok(())
}
