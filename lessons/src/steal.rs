//! Time a busy-polling thread lost while its own kernel believed it was running: in a virtual
//! machine, the host ran something else on the core behind this vCPU — *steal time*.
//!
//! A guest scheduler cannot see it. KVM guests are told (the `steal` column of `/proc/stat`);
//! QEMU's TCG emulation, where the SoftRoCE guest of this course runs, tells nothing, so a
//! spinning thread measures it itself: it reads the clock on every turn of its poll loop
//! ([`StealWatch::check`]), and a turn that took [`STALL`] or more is looked at. The thread's
//! `run_delay` (`/proc/thread-self/schedstat`) says how long the guest's scheduler kept it
//! waiting for its CPU meanwhile (a preemption), its voluntary context switches (`getrusage(2)`)
//! whether it slept. A turn in which the thread did not sleep, less the guest's wait, is time
//! the guest counts as this thread running while the poll did not get it: the vCPU was not
//! executing. Both counters are compared with their values at the previous look, so a wait or
//! a sleep anywhere since then makes a turn count less or not at all; and only the poll loop
//! and the posts are watched (other work between polls may take long for good reasons): what
//! it finds is a lower bound.

use std::fs;
use std::time::{Duration, Instant};

use nix::sys::resource::{getrusage, UsageWho};

/// A poll turn at least this long is looked at. One turn of `ibv_poll_cq` on rxe takes
/// microseconds, and an interrupt handled meanwhile under emulation well under a millisecond;
/// a host that takes the vCPU away takes it for one of its own time slices (4 ms at HZ=250).
pub const STALL: Duration = Duration::from_millis(1);

/// One thread's watch: call [`check`](StealWatch::check) on every turn of its poll loop (and
/// after a call that should be short, such as a post), [`skip`](StealWatch::skip) after other
/// work, then read [`stalls`](StealWatch::stalls).
#[derive(Debug)]
pub struct StealWatch {
    last: Instant,
    /// The thread's `run_delay` and voluntary context switches at the last look.
    run_delay: Option<Duration>,
    sleeps: Option<i64>,
    stalls: Vec<(Instant, Instant)>,
}

impl Default for StealWatch {
    fn default() -> Self {
        StealWatch::new()
    }
}

impl StealWatch {
    /// Starts watching the calling thread (call it in that thread).
    pub fn new() -> StealWatch {
        StealWatch {
            last: Instant::now(),
            run_delay: run_delay(),
            sleeps: sleeps(),
            stalls: Vec::new(),
        }
    }

    /// One turn of the poll loop: a turn of [`STALL`] or more in which the thread neither slept
    /// nor waited for its CPU is recorded as a stall.
    #[inline]
    pub fn check(&mut self) {
        let now = Instant::now();
        if now - self.last >= STALL {
            self.look(now);
        }
        self.last = now;
    }

    /// Work other than polling happened since the last turn: do not count it.
    #[inline]
    pub fn skip(&mut self) {
        self.last = Instant::now();
    }

    fn look(&mut self, now: Instant) {
        let (rd, slept) = (run_delay(), sleeps());
        let turn = now - self.last;
        // Without a reading (no schedstat: a kernel without CONFIG_SCHED_INFO), or after a
        // sleep, the turn cannot be told apart: not counted.
        let lost = match (self.run_delay, rd, self.sleeps, slept) {
            (Some(rd0), Some(rd1), Some(s0), Some(s1)) if s1 == s0 => {
                turn.saturating_sub(rd1.saturating_sub(rd0))
            }
            _ => Duration::ZERO,
        };
        self.run_delay = rd;
        self.sleeps = slept;
        if lost >= STALL {
            self.stalls.push((self.last, now));
        }
    }

    /// The stretches the vCPU did not execute this thread (start, end).
    pub fn stalls(&self) -> &[(Instant, Instant)] {
        &self.stalls
    }
}

/// The calling thread's `run_delay`: the time it spent runnable on a run queue, waiting for its
/// CPU (`/proc/thread-self/schedstat`, second field, nanoseconds; up to date once the thread
/// runs again).
fn run_delay() -> Option<Duration> {
    fs::read_to_string("/proc/thread-self/schedstat")
        .ok()?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
        .map(Duration::from_nanos)
}

/// The calling thread's voluntary context switches (it blocked or slept): `getrusage(2)`,
/// `RUSAGE_THREAD`.
fn sleeps() -> Option<i64> {
    getrusage(UsageWho::RUSAGE_THREAD)
        .ok()
        .map(|u| u.voluntary_context_switches())
}

/// What the stalls of some threads did to a run of timed operations.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StallTally {
    /// Operations that overlapped at least one stall.
    pub hit: usize,
    /// The stalls' total length (each counted once, even if two threads saw it).
    pub lost: Duration,
}

/// Marks each operation `(start, length)` that overlaps a stall of any thread in `stalls`;
/// returns the marks (true: hit) and the tally.
pub fn tally(
    ops: &[(Instant, Duration)],
    stalls: &[(Instant, Instant)],
) -> (Vec<bool>, StallTally) {
    let mut s: Vec<(Instant, Instant)> = stalls.to_vec();
    s.sort();
    // Merge overlapping stalls (the two threads of a ping-pong may both see one host slice).
    let mut merged: Vec<(Instant, Instant)> = Vec::with_capacity(s.len());
    for (a, b) in s {
        match merged.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => merged.push((a, b)),
        }
    }
    let lost = merged.iter().map(|(a, b)| *b - *a).sum();
    let marks: Vec<bool> = ops
        .iter()
        .map(|&(t0, len)| {
            let t1 = t0 + len;
            merged.iter().any(|&(a, b)| a < t1 && b > t0)
        })
        .collect();
    let hit = marks.iter().filter(|&&m| m).count();
    (marks, StallTally { hit, lost })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_overlapping_a_stall_are_marked_and_stalls_are_counted_once() {
        let t = Instant::now();
        let ms = Duration::from_millis;
        let ops = [(t, ms(1)), (t + ms(2), ms(1)), (t + ms(10), ms(1))];
        // Two threads saw the same host slice (2.5..6 ms and 3..7 ms), and one more at 20 ms.
        let stalls = [
            (t + ms(3), t + ms(7)),
            (t + Duration::from_micros(2500), t + ms(6)),
            (t + ms(20), t + ms(21)),
        ];
        let (marks, tally) = tally(&ops, &stalls);
        assert_eq!(marks, [false, true, false]);
        assert_eq!(tally.hit, 1);
        assert_eq!(tally.lost, Duration::from_micros(4500) + ms(1));
    }

    #[test]
    fn a_turn_the_thread_slept_through_is_no_stall_and_one_it_ran_through_is() {
        use nix::time::{clock_gettime, ClockId};
        let cpu = || Duration::from(clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID).unwrap());
        let mut w = StealWatch::new();
        w.check();
        let before = w.stalls().len();
        std::thread::sleep(Duration::from_millis(5));
        w.check();
        assert_eq!(
            w.stalls().len(),
            before,
            "a sleep counted as a stall: {:?}",
            w.stalls()
        );
        // A turn that the thread spends running, not polling, is what a vCPU that stops
        // executing looks like from inside: counted (which is why only poll turns are watched).
        // Run 5 ms of CPU time, however long the machine's own scheduler makes that take.
        let c0 = cpu();
        while cpu() - c0 < Duration::from_millis(5) {
            std::hint::spin_loop();
        }
        w.check();
        assert_eq!(w.stalls().len(), before + 1, "{:?}", w.stalls());
        let (a, b) = w.stalls()[before];
        assert!(b - a >= Duration::from_millis(5));
    }
}
