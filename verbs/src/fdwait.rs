//! The one bounded wait on file descriptors: [`poll_until`] sleeps in `poll(2)` until a
//! descriptor is ready or a deadline passes, and [`deadline_after`] ([`deadline_from`]) makes
//! that deadline from a wait of any length without overflowing. The verbs fds of this crate
//! (completion channel, `async_fd`, rdma_cm channel) and, in `verbs_lab`, the message queues and
//! the out-of-band sockets all wait through it; each caller turns "the deadline passed" into its
//! own error.

use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollTimeout};

/// No wait lasts longer than a century: [`deadline_from`] cuts a longer one to this, which
/// keeps `start + wait` inside what an `Instant` can hold.
const LONGEST: Duration = Duration::from_secs(100 * 365 * 86_400);

/// The instant `wait` from now: [`deadline_from`] now.
pub fn deadline_after(wait: Duration) -> Instant {
    deadline_from(Instant::now(), wait)
}

/// The instant `wait` after `start`. Saturates instead of overflowing: a wait longer than a
/// century (say `Duration::MAX`) is a century, where `start + wait` would panic.
pub fn deadline_from(start: Instant, wait: Duration) -> Instant {
    // A century after a clock reading always fits; `unwrap_or` only keeps this free of a panic.
    start.checked_add(wait.min(LONGEST)).unwrap_or(start)
}

/// Sleeps in `poll(2)` until one of `fds` is ready for the events it asks for, or `deadline`
/// passes (`None`: no deadline). Returns whether one is ready — each `PollFd`'s `revents` says
/// which — and `false` only once the deadline has passed.
///
/// It polls at least once, so a descriptor ready now is reported even when the deadline has
/// already passed. The time left is rounded *up* to whole milliseconds (poll(2)'s unit):
/// rounding down would end a wait up to a millisecond early — 0.6 ms left would poll 0 ms and
/// report a timeout at once. A signal (`EINTR`) resumes the wait until the same deadline: it
/// neither ends the wait nor starts it again.
pub fn poll_until(fds: &mut [PollFd<'_>], deadline: Option<Instant>) -> nix::Result<bool> {
    loop {
        let timeout = match deadline {
            None => PollTimeout::NONE,
            Some(d) => timeout_ms(d.saturating_duration_since(Instant::now())),
        };
        match poll(fds, timeout) {
            Ok(0) if deadline.is_some_and(|d| Instant::now() >= d) => return Ok(false),
            // Woken before the deadline with nothing ready: sleep for what is left.
            Ok(0) => {}
            Ok(_) => return Ok(true),
            Err(Errno::EINTR) => {}
            Err(e) => return Err(e),
        }
    }
}

/// `left` in whole milliseconds, rounded up; at most `i32::MAX` ms (poll(2)'s largest), after
/// which [`poll_until`] polls again.
fn timeout_ms(left: Duration) -> PollTimeout {
    PollTimeout::try_from(left.as_nanos().div_ceil(1_000_000)).unwrap_or(PollTimeout::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::poll::PollFlags;
    use std::io::Write;
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;

    #[test]
    fn a_deadline_under_a_millisecond_away_is_waited_for() {
        // Rounded down, 0.6 ms would be a 0 ms poll(2): a timeout before the deadline.
        let (a, _b) = UnixStream::pair().unwrap();
        for _ in 0..20 {
            let deadline = Instant::now() + Duration::from_micros(600);
            let mut fds = [PollFd::new(a.as_fd(), PollFlags::POLLIN)];
            assert!(!poll_until(&mut fds, Some(deadline)).unwrap());
            let now = Instant::now();
            assert!(now >= deadline, "timed out {:?} early", deadline - now);
        }
    }

    #[test]
    fn the_rest_is_rounded_up_to_a_whole_millisecond() {
        let ms = |left: Duration| i32::from(timeout_ms(left));
        assert_eq!(ms(Duration::from_micros(600)), 1);
        assert_eq!(ms(Duration::from_millis(5)), 5);
        assert_eq!(ms(Duration::from_millis(5) + Duration::from_nanos(1)), 6);
        assert_eq!(ms(Duration::ZERO), 0);
        assert_eq!(ms(Duration::from_secs(30 * 86_400)), i32::MAX);
        assert_eq!(ms(Duration::MAX), i32::MAX);
    }

    #[test]
    fn a_ready_descriptor_is_reported_even_past_the_deadline() {
        let (a, mut b) = UnixStream::pair().unwrap();
        b.write_all(b"x").unwrap();
        let past = Instant::now();
        std::thread::sleep(Duration::from_millis(2));
        let mut fds = [
            PollFd::new(b.as_fd(), PollFlags::POLLIN),
            PollFd::new(a.as_fd(), PollFlags::POLLIN),
        ];
        assert!(poll_until(&mut fds, Some(past)).unwrap());
        assert_eq!(fds[0].any(), Some(false), "b has nothing to read");
        assert_eq!(fds[1].any(), Some(true), "a has the byte");
    }

    #[test]
    fn without_a_deadline_it_waits_until_ready() {
        let (a, mut b) = UnixStream::pair().unwrap();
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            b.write_all(b"x").unwrap();
            b
        });
        let t = Instant::now();
        let mut fds = [PollFd::new(a.as_fd(), PollFlags::POLLIN)];
        assert!(poll_until(&mut fds, None).unwrap());
        assert!(
            t.elapsed() >= Duration::from_millis(40),
            "{:?}",
            t.elapsed()
        );
        writer.join().unwrap();
    }

    #[test]
    fn a_wait_of_any_length_has_a_deadline() {
        let before = Instant::now();
        let d = deadline_after(Duration::MAX);
        assert!(d >= before + LONGEST);
        let d = deadline_after(Duration::from_secs(2));
        assert!(
            d >= before + Duration::from_secs(2) && d < Instant::now() + Duration::from_secs(3)
        );
    }
}
