//! The waits of a latency round: a bounded spin on a condition (a poll byte, the CQ) that
//! watches the peer while it waits.

use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use verbs_lab::diag::{device_report, PortCounters};
use verbs_lab::verbs::Qp;

use crate::engine::{backoff, PeerWatch, CHANNEL_CHECK};

/// Why a wait ended.
pub(super) enum Waited {
    Ready,
    /// The pinger's tally says it is done.
    PeerDone,
}

/// The context of the waits of a phase: the peer watch and the limits.
pub(super) struct Waiter<'w> {
    pub(super) ch: &'w mut crate::proto::Channel,
    pub(super) watch: PeerWatch,
    pub(super) cq_timeout: Duration,
    /// Check the clock when `spins & mask == 0`: every poll with events (each may sleep),
    /// else every 256.
    pub(super) mask: u32,
    /// A ponger in duration mode stops when the pinger's tally equals its count.
    pub(super) stop_at: Option<u64>,
    /// A software device (rxe, siw): long waits give the CPU away (`engine::backoff`).
    pub(super) backoff: bool,
    /// Set when a wait looked at the out-of-band channel (bookkeeping inside the wait); the
    /// loop clears it.
    pub(super) looked: bool,
    pub(super) what: &'static str,
    /// The QP and the port's counters as the phase started: a wait that expires says what
    /// the device says (`verbs_lab::diag`).
    pub(super) qp: &'w Qp,
    pub(super) counters: PortCounters,
}

impl Waiter<'_> {
    /// Spins on `ready` until it says yes; bounded by the completion timeout, watching the peer
    /// after the first [`CHANNEL_CHECK`] of waiting.
    #[inline]
    pub(super) fn wait(&mut self, mut ready: impl FnMut() -> Result<bool>) -> Result<Waited> {
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
