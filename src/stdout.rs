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
//! [`StdoutFailed`], which carries the error, and the program ends with status 1 and
//! "NAME: error: cannot write to stdout: ...".
//!
//! A thread that prints is started in a [`scope`] (this module's `std::thread::scope`): the
//! thread's end of stdout stops the thread, and the scope hands it on to the thread that
//! opened it, typed, so the program ends as quietly as if that thread had printed the line.
//! Any other panic of a scoped thread stays the bug it is (status 101).
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
use std::sync::{Arc, OnceLock};

/// Prints one line on stdout, as `println!` does (the [`outln!`](crate::outln) macro); on a
/// closed stdout, unwinds with [`StdoutClosed`], on any other failed write with
/// [`StdoutFailed`] (see [the module](self)).
pub fn print_line(line: fmt::Arguments<'_>) {
    let mut out = io::stdout().lock();
    if let Err(e) = writeln!(out, "{line}") {
        if std::thread::panicking() {
            // A destructor's line while this thread unwinds: no one reads it any more, and a
            // second unwind would abort.
            return;
        }
        drop(out);
        if e.kind() == io::ErrorKind::BrokenPipe {
            panic::resume_unwind(Box::new(StdoutClosed));
        }
        // A full disk, an I/O error: the program cannot say what it set out to say.
        panic::resume_unwind(Box::new(StdoutFailed {
            error: e.to_string(),
        }));
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
#[derive(Clone, Copy, Debug)]
pub struct StdoutClosed;

/// What a program unwinds with when a line cannot be written to stdout for another reason
/// than a closed pipe (`ENOSPC` on `> /dev/full`, `EIO`): [`until_stdout_closes`] says so and
/// ends with status 1, instead of a panic's status 101.
#[derive(Clone, Debug)]
pub struct StdoutFailed {
    /// The write's error, as the user reads it ("No space left on device (os error 28)").
    pub error: String,
}

/// Runs a program's `main`: what it returns, or exit status 0 without a word if it stopped
/// because its stdout was closed ([`StdoutClosed`]), or status 1 with "NAME: error: cannot
/// write to stdout: ..." if a write failed otherwise ([`StdoutFailed`]). Any other panic goes
/// on as before, with its message and exit status 101. The threads that print reach here
/// through [`scope`].
pub fn until_stdout_closes(main: impl FnOnce() -> ExitCode) -> ExitCode {
    let payload = match panic::catch_unwind(AssertUnwindSafe(main)) {
        Ok(code) => return code,
        Err(payload) if payload.is::<StdoutClosed>() => return ExitCode::SUCCESS,
        Err(payload) => payload,
    };
    match payload.downcast::<StdoutFailed>() {
        Ok(failed) => {
            crate::eprintln_whole!(
                "{}: error: cannot write to stdout: {}",
                crate::stderr::program_name(),
                failed.error
            );
            ExitCode::FAILURE
        }
        Err(bug) => panic::resume_unwind(bug),
    }
}

/// How a thread's stdout ended: the payload it unwound with, kept to be raised again.
#[derive(Clone, Debug)]
enum Ended {
    Closed(StdoutClosed),
    Failed(StdoutFailed),
}

impl Ended {
    /// The end of stdout a panic's payload is, or the payload back: any other panic.
    fn of(payload: Box<dyn Any + Send>) -> Result<Ended, Box<dyn Any + Send>> {
        match payload.downcast::<StdoutClosed>() {
            Ok(closed) => Ok(Ended::Closed(*closed)),
            Err(other) => other.downcast::<StdoutFailed>().map(|f| Ended::Failed(*f)),
        }
    }

    /// Unwinds this thread with it, as [`print_line`] did in the thread that met it.
    fn resume(self) -> ! {
        match self {
            Ended::Closed(closed) => panic::resume_unwind(Box::new(closed)),
            Ended::Failed(failed) => panic::resume_unwind(Box::new(failed)),
        }
    }
}

/// The first end of stdout that one of a [`scope`]'s threads (or its own closure) met.
type FirstEnd = Arc<OnceLock<Ended>>;

/// Runs `f` with a [`Scope`] whose threads may print: `std::thread::scope`, but a thread
/// stopped by the end of stdout ([`StdoutClosed`], [`StdoutFailed`]) is not a panic of the
/// scope. Once every thread has been joined, the first such end that a thread (or `f`) met is
/// raised again here, so [`until_stdout_closes`] ends the program as that thread would have; a
/// thread's other panic stays a panic, as with `std::thread::scope`. Unlike std's, the scope is
/// lent to `f` alone: a thread of it cannot start another (none of ours needs to).
pub fn scope<'env, F, T>(f: F) -> T
where
    F: for<'scope> FnOnce(&Scope<'scope, 'env>) -> T,
{
    let first: FirstEnd = Arc::default();
    let outcome = std::thread::scope(|s| {
        let scope = Scope {
            inner: s,
            first: Arc::clone(&first),
        };
        panic::catch_unwind(AssertUnwindSafe(|| f(&scope)))
            .map_err(|payload| stopped(&scope.first, payload))
    });
    // Every thread has ended: a bug first, then the first end of stdout, then f's value.
    match outcome {
        Err(Err(bug)) => panic::resume_unwind(bug),
        Ok(value) if first.get().is_none() => value,
        _ => first
            .get()
            .cloned()
            .expect("an end of stdout was kept")
            .resume(),
    }
}

/// Keeps `payload` as the scope's first end of stdout if it is one (a later one is the same
/// news); any other payload comes back.
fn stopped(
    first: &OnceLock<Ended>,
    payload: Box<dyn Any + Send>,
) -> Result<(), Box<dyn Any + Send>> {
    let ended = Ended::of(payload)?;
    let _ = first.set(ended);
    Ok(())
}

/// A [`scope`] that spawns threads (`std::thread::Scope`'s `spawn`).
pub struct Scope<'scope, 'env: 'scope> {
    inner: &'scope std::thread::Scope<'scope, 'env>,
    first: FirstEnd,
}

impl<'scope> Scope<'scope, '_> {
    /// Starts `f` on a thread of this scope. If the end of stdout stops it, the scope keeps that
    /// end ([`scope`]) and the thread's [`join`](ScopedJoinHandle::join) raises it again in the
    /// joining thread; any other panic is the thread's, as with `std::thread::Scope::spawn`.
    pub fn spawn<F, T>(&self, f: F) -> ScopedJoinHandle<'scope, T>
    where
        F: FnOnce() -> T + Send + 'scope,
        T: Send + 'scope,
    {
        let first = Arc::clone(&self.first);
        ScopedJoinHandle(self.inner.spawn(move || {
            panic::catch_unwind(AssertUnwindSafe(f)).map_err(|payload| match Ended::of(payload) {
                Ok(ended) => {
                    let _ = first.set(ended.clone());
                    ended
                }
                Err(bug) => panic::resume_unwind(bug),
            })
        }))
    }
}

/// A thread of a [`scope`] ([`Scope::spawn`]).
pub struct ScopedJoinHandle<'scope, T>(std::thread::ScopedJoinHandle<'scope, Result<T, Ended>>);

impl<T> ScopedJoinHandle<'_, T> {
    /// Waits for the thread: its value, or its panic (`std::thread::ScopedJoinHandle::join`).
    /// A thread that the end of stdout stopped has no value: the joining thread unwinds with
    /// that end too, as if it had printed the line itself.
    pub fn join(self) -> std::thread::Result<T> {
        match self.0.join() {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(ended)) => ended.resume(),
            Err(bug) => Err(bug),
        }
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
    use std::io::{BufRead as _, BufReader};
    use std::process::{Child, Command, ExitStatus, Stdio};
    use std::time::{Duration, Instant};

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

    /// Which program [`child_program`] is: a scenario below.
    const SCENARIO: &str = "VL_STDOUT_TEST_SCENARIO";
    /// A file the child puts on its stdout once the test harness has said hello (`/dev/full`).
    const STDOUT_TO: &str = "VL_STDOUT_TEST_STDOUT";

    /// A thread of a scope that prints until stdout ends.
    fn print_forever() {
        for i in 0u64.. {
            crate::outln!("line {i}");
        }
    }

    /// The programs the tests run, each in a process of its own (this test binary again, this
    /// test alone): the program's `main`, by scenario.
    fn program(scenario: &str) -> ExitCode {
        match scenario {
            // A scoped thread meets the closed stdout; nobody joins it.
            "closed" => scope(|s| {
                s.spawn(print_forever);
                ExitCode::from(3)
            }),
            // The same, and the main thread joins it (lesson 12's event thread).
            "joined" => scope(|s| {
                let printer = s.spawn(print_forever);
                printer.join().expect("the printing thread panicked");
                ExitCode::from(3)
            }),
            // A thread's bug after stdout closed is still a bug.
            "bug" => scope(|s| {
                s.spawn(print_forever);
                s.spawn(|| {
                    while !reader_gone() {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    panic!("a bug in a scoped thread");
                });
                ExitCode::from(3)
            }),
            other => panic!("no scenario {other}"),
        }
    }

    /// Not a test of its own: the program the tests below run ([`program`]).
    #[test]
    #[ignore = "a program that the stdout tests run in a process of their own"]
    fn child_program() {
        let Ok(scenario) = std::env::var(SCENARIO) else {
            return;
        };
        if let Ok(path) = std::env::var(STDOUT_TO) {
            let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
            nix::unistd::dup2_stdout(file).unwrap();
        }
        // As the Rust runtime runs `main`: a panic that leaves it is status 101.
        let status = match panic::catch_unwind(|| until_stdout_closes(|| program(&scenario))) {
            Ok(code) if code == ExitCode::SUCCESS => 0,
            Ok(code) if code == ExitCode::FAILURE => 1,
            Ok(_) => 3,
            Err(_) => 101,
        };
        std::process::exit(status);
    }

    /// Starts [`child_program`] as `scenario` with `stdout`; its stderr piped.
    fn start(scenario: &str, stdout: Stdio, stdout_to: Option<&str>) -> Child {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args(["--exact", "stdout::tests::child_program", "--ignored"])
            .args(["--nocapture", "--quiet"])
            .env(SCENARIO, scenario)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(Stdio::piped());
        if let Some(path) = stdout_to {
            cmd.env(STDOUT_TO, path);
        }
        cmd.spawn().unwrap()
    }

    /// Reads the child's stdout until its third "line", then closes it (`| head -n 3`).
    fn head_3(child: &mut Child) {
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut seen = 0;
        while seen < 3 {
            let line = lines.next().expect("a line").unwrap();
            seen += usize::from(line.starts_with("line "));
        }
    }

    /// How the child ended (killed after 30 s), and its stderr.
    fn finish(mut child: Child) -> (ExitStatus, String) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                child.kill().unwrap();
                panic!("the child did not end within 30 s");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let out = child.wait_with_output().unwrap();
        (
            out.status,
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    #[test]
    fn a_scoped_thread_that_meets_a_closed_stdout_ends_the_program_quietly() {
        for scenario in ["closed", "joined"] {
            let mut child = start(scenario, Stdio::piped(), None);
            head_3(&mut child);
            let (status, err) = finish(child);
            assert_eq!(status.code(), Some(0), "{scenario}: {err}");
            assert!(err.is_empty(), "{scenario}: stderr: {err}");
        }
    }

    #[test]
    fn a_scoped_thread_that_cannot_write_ends_the_program_with_status_1() {
        let child = start("closed", Stdio::null(), Some("/dev/full"));
        let (status, err) = finish(child);
        assert_eq!(status.code(), Some(1), "{err}");
        assert!(
            err.contains(": error: cannot write to stdout: No space left on device"),
            "stderr: {err}"
        );
        assert!(!err.contains("panicked"), "stderr: {err}");
    }

    #[test]
    fn a_bug_in_a_scoped_thread_is_still_a_panic() {
        let mut child = start("bug", Stdio::piped(), None);
        head_3(&mut child);
        let (status, err) = finish(child);
        assert_eq!(status.code(), Some(101), "{err}");
        assert!(err.contains("a bug in a scoped thread"), "stderr: {err}");
    }

    #[test]
    fn a_scope_returns_its_value_and_its_threads_values() {
        let v = scope(|s| {
            let a = s.spawn(|| 20);
            let b = s.spawn(|| 22);
            a.join().unwrap() + b.join().unwrap()
        });
        assert_eq!(v, 42);
    }
}
