//! Lines on stdout for programs whose reader may go away (`| head`).
//!
//! `println!` panics when stdout's reader is gone (`EPIPE`; Rust ignores SIGPIPE), which ends
//! a program with status 101 and a "failed printing to stdout" message — for a reader who
//! simply had enough. [`outln!`](crate::outln) prints as `println!` does, but on `EPIPE` it
//! unwinds with [`StdoutClosed`], which [`until_stdout_closes`] turns into a quiet exit 0.
//! Unwinding, rather than exiting on the spot, runs every destructor on the way out: queues are
//! removed, scoped threads are woken and joined, the device is closed. A line printed while
//! this thread already unwinds (a destructor's farewell) is dropped instead: a second unwind
//! there would abort the process.
//!
//! The lessons, `vl_devinfo`, `vl_selftest` and the small tools print this way.
//!
//! Any other failed write (a full disk: `> /dev/full`) unwinds the same way with
//! [`StdoutFailed`], and the program ends with status 1 and "NAME: error: cannot write to
//! stdout: ...".
//!
//! A process that writes nothing can still ask whether anyone reads: [`reader_gone`] tells a
//! launcher (`--np`) that its ranks' shared stdout has no reader any more, so it ends the run
//! quietly instead of waiting for ranks that wait for a rank that already left.

use std::any::Any;
use std::fmt;
use std::io::{self, Write as _};
use std::os::fd::{AsFd, BorrowedFd};
use std::panic::{self, AssertUnwindSafe};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

/// Prints one line on stdout, as `println!` does (the [`outln!`](crate::outln) macro); on a
/// closed stdout, unwinds with [`StdoutClosed`] (see [the module](self)).
pub fn print_line(line: fmt::Arguments<'_>) {
    let mut out = io::stdout().lock();
    if let Err(e) = writeln!(out, "{line}") {
        if e.kind() == io::ErrorKind::BrokenPipe {
            STDOUT_CLOSED.store(true, Ordering::Release);
            if std::thread::panicking() {
                // A destructor's line while this thread unwinds: no one reads it any more.
                return;
            }
            panic::resume_unwind(Box::new(StdoutClosed));
        }
        if !std::thread::panicking() {
            // A full disk, an I/O error: the program cannot say what it set out to say.
            let _ = FAILED.set(e.to_string());
            panic::resume_unwind(Box::new(StdoutFailed));
        }
    }
}

/// `println!` that ends the program quietly when stdout is closed: the same arguments,
/// printed by [`print_line`](crate::stdout::print_line).
#[macro_export]
macro_rules! outln {
    () => {
        $crate::stdout::print_line(::std::format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::stdout::print_line(::std::format_args!($($arg)*))
    };
}

/// What a program unwinds with when its stdout is closed ([`print_line`]).
#[derive(Debug)]
pub struct StdoutClosed;

/// What a program unwinds with when a line cannot be written to stdout for another reason
/// than a closed pipe (`ENOSPC` on `> /dev/full`, `EIO`): [`until_stdout_closes`] says so and
/// ends with status 1, instead of a panic's status 101.
#[derive(Debug)]
pub struct StdoutFailed;

/// Why the first write to stdout failed, other than `EPIPE` ([`StdoutFailed`]).
static FAILED: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Set once a write to stdout has failed with `EPIPE`: from then on the panic of a
/// `thread::scope` whose thread unwound with [`StdoutClosed`] is the same quiet end.
static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);

/// What `std::thread::scope` panics with when one of its threads panicked (or unwound).
const SCOPE_PANIC: &str = "a scoped thread panicked";

/// Whether a panic's payload is the quiet end of a closed stdout: [`StdoutClosed`] itself, or
/// the panic of a scope one of whose threads unwound with it. Any other panic, before or after
/// stdout closed, is a bug and is reported as one.
fn is_stdout_closed(payload: &(dyn Any + Send)) -> bool {
    payload.is::<StdoutClosed>()
        || (STDOUT_CLOSED.load(Ordering::Acquire)
            && payload.downcast_ref::<&str>() == Some(&SCOPE_PANIC))
}

/// Whether a panic's payload is a failed write to stdout ([`StdoutFailed`]), itself or as the
/// panic of a scope one of whose threads unwound with it.
fn is_stdout_failed(payload: &(dyn Any + Send)) -> bool {
    payload.is::<StdoutFailed>()
        || (FAILED.get().is_some() && payload.downcast_ref::<&str>() == Some(&SCOPE_PANIC))
}

/// Runs a program's `main`: what it returns, or exit status 0 without a word if it stopped
/// because its stdout was closed ([`print_line`]), or status 1 with "NAME: error: cannot write
/// to stdout: ..." if a write failed otherwise ([`StdoutFailed`]). Any other panic goes on as
/// before, with its message and exit status 101.
pub fn until_stdout_closes(main: impl FnOnce() -> ExitCode) -> ExitCode {
    let report = panic::take_hook();
    panic::set_hook(Box::new(move |info| {
        if !is_stdout_closed(info.payload()) && !is_stdout_failed(info.payload()) {
            report(info);
        }
    }));
    match panic::catch_unwind(AssertUnwindSafe(main)) {
        Ok(code) => code,
        Err(payload) if is_stdout_closed(&*payload) => ExitCode::SUCCESS,
        Err(payload) if is_stdout_failed(&*payload) => {
            crate::eprintln_whole!(
                "{}: error: cannot write to stdout: {}",
                crate::stderr::program_name(),
                FAILED.get().map_or("unknown error", String::as_str)
            );
            ExitCode::FAILURE
        }
        Err(payload) => panic::resume_unwind(payload),
    }
}

/// Whether this process's stdout is a pipe (or socket) whose every reader has gone (`| head`
/// has exited): what the next write would fail on with `EPIPE`, found by `poll(2)` without
/// writing. `false` for a terminal, a file, or a pipe still read.
pub fn reader_gone() -> bool {
    reader_gone_of(io::stdout().as_fd())
}

/// [`reader_gone`] of any descriptor: `poll(2)` reports `POLLERR` on the write end of a pipe
/// without readers (and `POLLHUP` on a socket whose peer shut down).
pub fn reader_gone_of(fd: BorrowedFd<'_>) -> bool {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let mut fds = [PollFd::new(fd, PollFlags::empty())];
    matches!(poll(&mut fds, PollTimeout::ZERO), Ok(n) if n > 0)
        && fds[0]
            .revents()
            .is_some_and(|r| r.intersects(PollFlags::POLLERR | PollFlags::POLLHUP))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pipe_without_reader_is_seen_before_any_write() {
        let (read, write) = nix::unistd::pipe().unwrap();
        assert!(!reader_gone_of(write.as_fd()), "the read end is still open");
        drop(read);
        assert!(reader_gone_of(write.as_fd()), "the read end is closed");
        let null = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/null")
            .unwrap();
        assert!(!reader_gone_of(null.as_fd()), "a file is not a pipe");
    }

    #[test]
    fn only_a_closed_stdout_ends_quietly() {
        let scope: Box<dyn Any + Send> = Box::new(SCOPE_PANIC);
        let bug: Box<dyn Any + Send> = Box::new("index out of bounds");
        let closed: Box<dyn Any + Send> = Box::new(StdoutClosed);
        assert!(is_stdout_closed(&*closed));
        // Before stdout closed, a scope's panic is a thread's bug.
        assert!(!is_stdout_closed(&*scope));
        STDOUT_CLOSED.store(true, Ordering::Release);
        assert!(is_stdout_closed(&*scope));
        // After it closed, any other panic is still a bug, with its message and status 101.
        assert!(!is_stdout_closed(&*bug));
        let formatted: Box<dyn Any + Send> = Box::new(String::from("failed printing: x"));
        assert!(!is_stdout_closed(&*formatted));
    }

    #[test]
    fn a_scope_panics_with_the_message_we_recognise() {
        let payload = panic::catch_unwind(|| {
            std::thread::scope(|s| {
                s.spawn(|| panic::resume_unwind(Box::new(StdoutClosed)));
            })
        })
        .unwrap_err();
        assert_eq!(payload.downcast_ref::<&str>(), Some(&SCOPE_PANIC));
    }
}
