//! The one bounded wait on a verbs file descriptor: the completion channel's fd, a context's
//! `async_fd` and the rdma_cm event channel's fd are all made non-blocking, and every wait on
//! them is a `poll(2)` with a deadline — so that an event taken by another thread, or one that
//! never comes, cannot turn a call into an endless sleep.

use std::os::fd::BorrowedFd;
use std::time::Duration;

use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::poll::{PollFd, PollFlags};

use super::error::{Result, VerbsError};
use crate::fdwait::{deadline_after, poll_until};

/// Adds `O_NONBLOCK` to `fd`'s flags (`fcntl(2)`); `verb` names the call in an error, e.g.
/// `"fcntl(comp_channel, O_NONBLOCK)"`.
pub(crate) fn set_nonblocking(fd: BorrowedFd<'_>, verb: &'static str) -> Result<()> {
    let flags = fcntl(fd, FcntlArg::F_GETFL)
        .map(OFlag::from_bits_truncate)
        .map_err(|e| VerbsError::call(verb, e))?;
    if !flags.contains(OFlag::O_NONBLOCK) {
        fcntl(fd, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK))
            .map_err(|e| VerbsError::call(verb, e))?;
    }
    Ok(())
}

/// Sleeps in `poll(2)` until `fd` is readable or `timeout` has passed ([`poll_until`]: not
/// before, and a signal does not cut the wait short); returns whether it became readable.
/// `verb` names the call in an error, e.g. `"poll(async_fd)"`.
pub(crate) fn wait_readable(
    fd: BorrowedFd<'_>,
    timeout: Duration,
    verb: &'static str,
) -> Result<bool> {
    let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
    poll_until(&mut fds, Some(deadline_after(timeout))).map_err(|e| VerbsError::call(verb, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;
    use std::time::Instant;

    #[test]
    fn waits_until_readable_or_the_deadline() {
        let (a, mut b) = UnixStream::pair().unwrap();
        set_nonblocking(a.as_fd(), "fcntl(test)").unwrap();
        let t = Instant::now();
        assert!(!wait_readable(a.as_fd(), Duration::from_millis(50), "poll(test)").unwrap());
        assert!(
            t.elapsed() >= Duration::from_millis(40),
            "{:?}",
            t.elapsed()
        );
        b.write_all(b"x").unwrap();
        assert!(wait_readable(a.as_fd(), Duration::from_secs(5), "poll(test)").unwrap());
    }

    /// Counts the SIGUSR2s [`a_signal_neither_ends_nor_extends_the_wait`] sends.
    static INTERRUPTS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

    extern "C" fn count_interrupt(_: i32) {
        INTERRUPTS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    // Here and not beside `fdwait::poll_until`, which this tests (through `wait_readable`):
    // catching a signal takes `unsafe`, which stays in this crate.
    #[test]
    fn a_signal_neither_ends_nor_extends_the_wait() {
        use nix::libc;
        use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
        use std::sync::atomic::Ordering;
        let handler = SigAction::new(
            SigHandler::Handler(count_interrupt),
            SaFlags::empty(),
            SigSet::empty(),
        );
        // SAFETY: the handler only adds to an atomic (async-signal-safe); nothing else in this
        // test binary uses SIGUSR2. poll(2) is never restarted after a handler: it fails EINTR.
        unsafe { sigaction(Signal::SIGUSR2, &handler) }.unwrap();
        // SAFETY: pthread_self has no preconditions.
        let me = unsafe { libc::pthread_self() } as usize;
        // A signal every 50 ms for 900 ms, into a 500 ms wait: a wait restarted by each would
        // end after 1.4 s, one ended by the first after 50 ms.
        let signaller = std::thread::spawn(move || {
            for _ in 0..18 {
                std::thread::sleep(Duration::from_millis(50));
                // SAFETY: `me` is the test thread, alive until it has joined this thread.
                assert_eq!(unsafe { libc::pthread_kill(me as _, libc::SIGUSR2) }, 0);
            }
        });
        let (a, _b) = UnixStream::pair().unwrap();
        let wait = Duration::from_millis(500);
        let t = Instant::now();
        let ready = wait_readable(a.as_fd(), wait, "poll(test)");
        let took = t.elapsed();
        let interrupts = INTERRUPTS.load(Ordering::SeqCst);
        // Joined before any assertion can end this thread.
        signaller.join().unwrap();
        assert!(!ready.unwrap());
        assert!(
            interrupts >= 3,
            "only {interrupts} signal(s) came during the wait"
        );
        assert!(took >= wait, "ended early, after {took:?}");
        assert!(
            took < wait + Duration::from_millis(400),
            "took {took:?}: a signal restarted it"
        );
    }
}
