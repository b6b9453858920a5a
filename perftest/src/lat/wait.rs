//! The waits of a latency round: a bounded spin on a condition (a poll byte, the CQ) that
//! watches the peer while it waits.
//!
//! A wait that ends as usual reads no clock: the round's own clock read (the end of its sample)
//! tells how long it took. A wait spins [`Waiter::quiet`] times before it first looks at the
//! clock — about twice as many spins as recent rounds needed, learnt from each round
//! ([`Waiter::learn`]), and never more than fit in [`YIELD_AFTER`] at that pace — and from
//! then on about every quarter of that, to yield (software devices), look at the peer and bound
//! the wait. Once it yields (past [`YIELD_AFTER`]), it yields every 256 spins and reads the
//! clock at one yield in [`YIELDS_PER_READ`].

use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use verbs_lab::diag::{device_report, PortCounters};
use verbs_lab::verbs::Qp;

use crate::engine::{backoff, PeerWatch, CHANNEL_CHECK, YIELD_AFTER};

/// The fewest spins before a wait's first clock read (and the spins between later reads).
const QUIET_MIN: u64 = 256;
/// The most: a bound on how long a wait may go without a clock read whatever it learnt.
const QUIET_MAX: u64 = 1 << 24;
/// A wait past [`YIELD_AFTER`] on a software device yields every [`QUIET_MIN`] spins and reads
/// the clock at one yield in this many: the bounds it checks are 10 ms and more, and under
/// emulation a clock read costs as much as the yield.
const YIELDS_PER_READ: u32 = 8;

/// Why a wait ended.
pub(super) enum Waited {
    Ready,
    /// The pinger's tally says it is done.
    PeerDone,
}

/// How every wait of a phase may wait: its bound, whether a poll may sleep, whether it yields.
#[derive(Clone, Copy)]
pub(super) struct WaitLimits {
    /// How long one completion may take.
    pub(super) cq_timeout: Duration,
    /// `-e`: every poll may sleep, so the clock is read after each.
    pub(super) events: bool,
    /// A software device (rxe, siw): long waits give the CPU away (`engine::backoff`).
    pub(super) backoff: bool,
}

/// The context of the waits of a phase: the peer watch and the limits.
pub(super) struct Waiter<'w> {
    pub(super) ch: &'w mut crate::proto::Channel,
    pub(super) watch: PeerWatch,
    limits: WaitLimits,
    /// Once past the quiet spins, the spins between clock reads: 1 with events (each poll may
    /// sleep), else [`QUIET_MIN`].
    step: u64,
    /// Spins before a wait's first clock read (1 with events: every poll may sleep).
    quiet: u64,
    /// How many times the last wait tested its condition.
    spun: u64,
    /// How many spins fit in [`YIELD_AFTER`], as the last round with enough spins to tell
    /// showed: the most `quiet` may be.
    cap: u64,
    /// A ponger in duration mode stops when the pinger's tally equals its count.
    pub(super) stop_at: Option<u64>,
    pub(super) what: &'static str,
    /// The QP and the port's counters as the phase started: a wait that expires says what
    /// the device says (`verbs_lab::diag`).
    pub(super) qp: &'w Qp,
    pub(super) counters: PortCounters,
}

impl<'w> Waiter<'w> {
    /// The waits of a phase within `limits` (with events the clock is read after each poll).
    pub(super) fn new(
        ch: &'w mut crate::proto::Channel,
        watch: PeerWatch,
        limits: WaitLimits,
        qp: &'w Qp,
        counters: PortCounters,
    ) -> Waiter<'w> {
        let step = if limits.events { 1 } else { QUIET_MIN };
        Waiter {
            ch,
            watch,
            limits,
            step,
            quiet: step,
            spun: 0,
            cap: QUIET_MAX,
            stop_at: None,
            what: "",
            qp,
            counters,
        }
    }

    /// Spins on `ready` until it says yes; `since` is when the wait began (the round's start,
    /// a clock read the caller already has). Reads the clock only after the quiet spins; then
    /// bounded by the completion timeout, watching the peer after [`CHANNEL_CHECK`] of waiting.
    #[inline]
    pub(super) fn wait(
        &mut self,
        since: Instant,
        mut ready: impl FnMut() -> Result<bool>,
    ) -> Result<Waited> {
        let mut spins = 0u64;
        // Past the quiet spins and not yielding, the clock is read about four times in as many
        // polls as a quiet stretch (never under `step`): the bounds it checks are 10 ms and more.
        let slow = (self.quiet / 4).max(self.step);
        // The spins at which the wait next looks at the clock, and the yields still to make
        // before it does (once yielding: every `step` polls, one read in [`YIELDS_PER_READ`]).
        let mut next = self.quiet;
        let mut blind = 0u32;
        loop {
            if ready()? {
                self.spun = spins;
                return Ok(Waited::Ready);
            }
            spins += 1;
            if spins < next {
                continue;
            }
            if blind > 0 {
                blind -= 1;
                next = spins + self.step;
                std::thread::yield_now();
                continue;
            }
            next = spins + slow;
            let now = Instant::now();
            let waited = now.saturating_duration_since(since);
            if self.limits.backoff && backoff(waited) {
                blind = YIELDS_PER_READ - 1;
                next = spins + self.step;
            }
            if waited >= CHANNEL_CHECK {
                // A look inside the wait stays in the round's sample (the pinger's and the
                // ponger's alike): a few system calls in a wait already over 10 ms.
                self.watch.check(self.ch, now)?;
                if let (Some(count), Some(t)) = (self.stop_at, &self.watch.tally) {
                    if t.per_qp.first() == Some(&count) {
                        self.spun = spins;
                        return Ok(Waited::PeerDone);
                    }
                }
            }
            if waited > self.limits.cq_timeout {
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

    /// Learns from a round that took `round` (by the caller's own clock reads) and whose wait
    /// spun as the last one did: the next waits stay quiet for twice those spins (decaying
    /// slowly after a long round), but no longer than [`YIELD_AFTER`] takes at that pace.
    #[inline]
    pub(super) fn learn(&mut self, round: Duration) {
        if self.step == 1 {
            return;
        }
        let spun = self.spun;
        if spun >= QUIET_MIN {
            // The round is more than its spins (the post, the clock read): this pace is a
            // little slower than the spins' own, so `cap` errs towards reading the clock early.
            let ns = (round.as_nanos() as u64).max(1);
            self.cap = spun.saturating_mul(YIELD_AFTER.as_nanos() as u64) / ns;
        }
        let want = spun
            .saturating_mul(2)
            .max(self.quiet - self.quiet / 8)
            .min(self.cap);
        self.quiet = want.clamp(QUIET_MIN, QUIET_MAX);
    }
}
