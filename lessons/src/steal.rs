//! Time a busy-polling thread lost while its own kernel believed it was running: in a virtual
//! machine, the vCPU was not executing — the host ran something else on the core behind it, or
//! the emulator held it — *steal time*.
//!
//! A guest scheduler cannot see it. KVM guests are told (the `steal` column of `/proc/stat`);
//! QEMU's TCG emulation, where the SoftRoCE guest of this course runs, tells nothing, so a
//! spinning thread measures it itself: it reads the clock every [`POLLS_PER_LOOK`] turns of its
//! poll loop ([`StealWatch::poll`]) and after each post ([`StealWatch::check`]), and an
//! interval that took [`STALL`] or more is looked at in the thread's
//! `/proc/thread-self/schedstat` (kept open: one `pread(2)` a look). If the thread was not
//! switched out during the turn (the count of times it got a CPU did not move), the guest
//! believes it ran all along: the whole turn is time its vCPU did not execute it. If it was
//! switched out, and did not sleep (`getrusage(2)`'s voluntary switches), the guest's scheduler
//! kept it waiting for `run_delay` of the turn, and only the rest counts. The counters are
//! compared with their values at the previous look, so a switch or a sleep anywhere since then
//! makes a turn count less or not at all; and only the poll loop and the posts are watched
//! (other work between polls may take long for good reasons): what it finds is a lower bound.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use nix::sys::resource::{getrusage, UsageWho};

/// An interval at least this long is looked at. 64 polls of `ibv_poll_cq` on rxe take tens of
/// microseconds, and an interrupt handled meanwhile under emulation well under a millisecond; a
/// stopped vCPU stays stopped for milliseconds (in the SoftRoCE guest, until its next timer
/// interrupt: up to the 4 ms tick).
pub const STALL: Duration = Duration::from_millis(1);

/// Turns of a poll loop between two clock reads. Not every turn: under QEMU's software
/// emulation every guest clock read (`rdtsc`) takes one spinlock that all vCPUs share
/// (`cpu_get_ticks`, QEMU 7.2), so that a vCPU the host stops while it holds it stops the
/// others at their next read; with a read on every poll of both threads, lesson 09's
/// diff-cores rows fell into 8 ms steps in 12 of 18 rounds against 3 of 18 for the lesson
/// without the watch (one A/B on a loaded host). 64 polls take well under a millisecond.
pub const POLLS_PER_LOOK: u32 = 64;

/// One thread's watch: call [`poll`](StealWatch::poll) on every turn of its poll loop,
/// [`check`](StealWatch::check) after a call that should be short (a post),
/// [`skip`](StealWatch::skip) after other work, then read [`stalls`](StealWatch::stalls).
#[derive(Debug)]
pub struct StealWatch {
    last: Instant,
    /// This thread's `/proc/thread-self/schedstat`, and its readings at the last look.
    schedstat: Option<File>,
    seen: Option<Sched>,
    stalls: Vec<(Instant, Instant)>,
    /// Turns since the last clock read.
    turns: u32,
}

/// One reading of a thread's scheduler counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Sched {
    /// Time spent runnable on a run queue, waiting for a CPU (schedstat's second field).
    run_delay: Duration,
    /// Times it was given a CPU (schedstat's third field): moves on every switch-in.
    runs: u64,
    /// Voluntary context switches (it blocked or slept), when read.
    sleeps: Option<i64>,
}

impl Default for StealWatch {
    fn default() -> Self {
        StealWatch::new()
    }
}

impl StealWatch {
    /// Starts watching the calling thread (call it in that thread).
    pub fn new() -> StealWatch {
        let schedstat = File::open("/proc/thread-self/schedstat").ok();
        let seen = schedstat.as_ref().and_then(|f| read_sched(f, true));
        StealWatch {
            last: Instant::now(),
            schedstat,
            seen,
            stalls: Vec::new(),
            turns: 0,
        }
    }

    /// One turn of the poll loop; every [`POLLS_PER_LOOK`]th, a [`check`](StealWatch::check).
    #[inline]
    pub fn poll(&mut self) {
        self.turns += 1;
        if self.turns >= POLLS_PER_LOOK {
            self.check();
        }
    }

    /// Reads the clock: an interval since the last read of [`STALL`] or more in which the thread
    /// neither slept nor waited for its CPU is recorded as a stall.
    #[inline]
    pub fn check(&mut self) {
        let now = Instant::now();
        if now - self.last >= STALL {
            self.look(now);
        }
        self.last = now;
        self.turns = 0;
    }

    /// Work other than polling happened since the last read: do not count it.
    #[inline]
    pub fn skip(&mut self) {
        self.last = Instant::now();
        self.turns = 0;
    }

    fn look(&mut self, now: Instant) {
        let Some(file) = &self.schedstat else {
            // No schedstat (a kernel without CONFIG_SCHED_INFO): nothing can be told apart.
            return;
        };
        let turn = now - self.last;
        let Some(mut s) = read_sched(file, false) else {
            return;
        };
        let lost = match self.seen {
            // Never switched out: the guest believes it ran all along.
            Some(was) if s.runs == was.runs => turn,
            // Switched out: if it did not sleep, all but the guest's wait for its CPU.
            Some(was) => {
                s.sleeps = sleeps();
                match (was.sleeps, s.sleeps) {
                    (Some(a), Some(b)) if a == b => {
                        turn.saturating_sub(s.run_delay.saturating_sub(was.run_delay))
                    }
                    _ => Duration::ZERO,
                }
            }
            None => Duration::ZERO,
        };
        // The sleep count read at an older look is still the baseline if not read now.
        if s.sleeps.is_none() {
            s.sleeps = self.seen.and_then(|w| w.sleeps);
        }
        self.seen = Some(s);
        if lost >= STALL {
            self.stalls.push((self.last, now));
        }
    }

    /// The stretches the vCPU did not execute this thread (start, end).
    pub fn stalls(&self) -> &[(Instant, Instant)] {
        &self.stalls
    }
}

/// Reads the counters of the thread whose schedstat `file` is (and its voluntary switches if
/// `with_sleeps`).
fn read_sched(file: &File, with_sleeps: bool) -> Option<Sched> {
    let mut buf = [0u8; 96];
    let n = file.read_at(&mut buf, 0).ok()?;
    let text = std::str::from_utf8(&buf[..n]).ok()?;
    let mut f = text
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse::<u64>().ok());
    Some(Sched {
        run_delay: Duration::from_nanos(f.next()??),
        runs: f.next()??,
        sleeps: if with_sleeps { sleeps() } else { None },
    })
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
    // Merge overlapping stalls (the two threads of a ping-pong may both see one).
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
        // Two threads saw the same stall (2.5..6 ms and 3..7 ms), and one more at 20 ms.
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
