//! The one bounded wait on a verbs file descriptor: the completion channel's fd, a context's
//! `async_fd` and the rdma_cm event channel's fd are all made non-blocking, and every wait on
//! them is a `poll(2)` with a deadline — so that an event taken by another thread, or one that
//! never comes, cannot turn a call into an endless sleep.

use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use super::error::{Result, VerbsError};

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

/// Sleeps in `poll(2)` until `fd` is readable or `timeout` has passed (a signal does not cut
/// the wait short); returns whether it became readable. `verb` names the call in an error,
/// e.g. `"poll(async_fd)"`.
pub(crate) fn wait_readable(
    fd: BorrowedFd<'_>,
    timeout: Duration,
    verb: &'static str,
) -> Result<bool> {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let ms = PollTimeout::try_from(left.as_millis().min(i32::MAX as u128) as i32)
            .unwrap_or(PollTimeout::MAX);
        let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
        match poll(&mut fds, ms) {
            Ok(0) => return Ok(false),
            Ok(_) => return Ok(true),
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(VerbsError::call(verb, e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;

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
}
