//! The one supervisor of worker processes: a coordinator re-executes its own program as
//! workers, watches them, stops them and reaps them; a worker ties its life to its coordinator.
//! Lesson 10, the benchmarks' `--procs N` and the collectives' launcher (`--np N`, lesson 15)
//! use it.
//!
//! **Coordinator side.** [`Worker::spawn`] starts `/proc/self/exe` — the very image this
//! process runs, even if a rebuild has replaced the file at its path meanwhile — with the
//! caller's arguments, the coordinator's own name as `argv[0]` (so `ps` shows the tool, not
//! `/proc/self/exe`), stdin from `/dev/null`, and the coordinator's pid in the environment
//! ([`COORDINATOR_ENV`]). [`Worker::try_exit`], [`Worker::wait_exit`], [`Worker::is_stopped`]
//! and [`Worker::stopped_for`] watch it; [`Worker::kill`] stops it (SIGKILL) and reaps it;
//! [`describe`] says how a process ended. A [`Worker`] still running when it is dropped is
//! killed and reaped, so no exit path of a coordinator leaves a worker behind. Two loops watch
//! a crew: [`gather`] receives the workers' messages while it watches their processes (a
//! [`Roster`] knows the protocol), and [`stop`] ends them after a failure (Abort, a grace
//! period, SIGKILL); [`watch_all`] is the loop of a launcher that only waits for its workers to
//! end (the collectives' `--np`): the first that ends badly gives the others a grace period to
//! fail by themselves, then what is left is killed.
//!
//! **Worker side.** [`follow_coordinator`] gives the worker its tool's name in `ps` (rather
//! than `exe`), makes the kernel signal the worker when its
//! coordinator dies (`prctl(PR_SET_PDEATHSIG)`), removes the coordinator's queues then (a
//! coordinator killed by SIGKILL cannot), and checks that the coordinator is still its parent
//! (it may have died before the request was made). So a worker outlives its coordinator by
//! milliseconds, not by a timeout.
//!
//! `PR_SET_PDEATHSIG` fires when the *thread* that started the worker ends: start workers from
//! a thread that lives as long as they do (the main thread).

use std::ffi::{OsStr, OsString};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use nix::unistd::getppid;

use crate::mq::{self, Queue, WorkerMsg};

/// The environment variable that carries the coordinator's pid to its workers.
pub const COORDINATOR_ENV: &str = "VL_COORDINATOR_PID";
/// The environment variable that gives a worker its index (0..N-1), which names it in its
/// messages ("vl_write_bw worker 1: ...").
pub const WORKER_INDEX_ENV: &str = "VL_WORKER_INDEX";

/// The signal a worker gets when its coordinator dies (it removes the coordinator's queues,
/// then dies of it).
pub const PARENT_DEATH_SIGNAL: Signal = Signal::SIGUSR1;

/// This program's image: `/proc/self/exe` where procfs is mounted, else the path it was
/// started from.
pub fn self_exe() -> std::io::Result<PathBuf> {
    let p = PathBuf::from("/proc/self/exe");
    if p.exists() {
        Ok(p)
    } else {
        std::env::current_exe()
    }
}

/// One worker process as its coordinator sees it.
#[derive(Debug)]
pub struct Worker {
    /// The coordinator's number for it (0..N-1).
    pub index: u32,
    child: Child,
    exit: Option<ExitStatus>,
    stopped_since: Option<Instant>,
}

impl Worker {
    /// Starts worker `index`: this program ([`self_exe`]) with `args` and this process's
    /// `argv[0]`, stdin from /dev/null, stdout to /dev/null unless `keep_stdout`, stderr
    /// inherited, and [`COORDINATOR_ENV`] set to this process's pid. The error says which
    /// worker and which program.
    pub fn spawn<I, S>(index: u32, args: I, keep_stdout: bool) -> Result<Worker, String>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let exe = self_exe().map_err(|e| format!("finding this program's path: {e}"))?;
        let arg0 = std::env::args_os()
            .next()
            .unwrap_or_else(|| OsString::from(&exe));
        let child = Command::new(&exe)
            .arg0(arg0)
            .args(args)
            .env(COORDINATOR_ENV, std::process::id().to_string())
            .env(WORKER_INDEX_ENV, index.to_string())
            .stdin(Stdio::null())
            .stdout(if keep_stdout {
                Stdio::inherit()
            } else {
                Stdio::null()
            })
            .spawn()
            .map_err(|e| format!("starting worker {index} ({}): {e}", exe.display()))?;
        Ok(Worker {
            index,
            child,
            exit: None,
            stopped_since: None,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// How it ended, once seen.
    pub fn exit(&self) -> Option<ExitStatus> {
        self.exit
    }

    /// Looks without waiting (`waitpid(WNOHANG)`): `Some` once it has ended (and is reaped).
    pub fn try_exit(&mut self) -> std::io::Result<Option<ExitStatus>> {
        if self.exit.is_none() {
            self.exit = self.child.try_wait()?;
        }
        Ok(self.exit)
    }

    /// True while it runs (an error of `waitpid` counts as ended).
    pub fn running(&mut self) -> bool {
        matches!(self.try_exit(), Ok(None))
    }

    /// Waits up to `wait` for it to end; the error says how long it ran on.
    pub fn wait_exit(&mut self, wait: Duration) -> Result<ExitStatus, String> {
        let deadline = crate::fdwait::deadline_after(wait);
        loop {
            match self.try_exit() {
                Ok(Some(st)) => return Ok(st),
                Ok(None) => {}
                Err(e) => return Err(format!("waitpid: {e}")),
            }
            if Instant::now() >= deadline {
                return Err(format!("still running {:.1} s later", wait.as_secs_f64()));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL and reap, if it still runs; how it ended.
    pub fn kill(&mut self) -> Result<ExitStatus, String> {
        if let Ok(Some(st)) = self.try_exit() {
            return Ok(st);
        }
        let _ = self.child.kill();
        let st = self
            .child
            .wait()
            .map_err(|e| format!("could not be reaped: {e}"))?;
        self.exit = Some(st);
        Ok(st)
    }

    /// True if it is stopped (SIGSTOP, a debugger): state `T` or `t` in `/proc/PID/stat`.
    pub fn is_stopped(&self) -> bool {
        is_stopped(self.pid())
    }

    /// How long it has been seen stopped, counting from the first call that saw it stopped;
    /// `None` (and the count reset) while it runs.
    pub fn stopped_for(&mut self) -> Option<Duration> {
        if self.is_stopped() {
            Some(
                self.stopped_since
                    .get_or_insert_with(Instant::now)
                    .elapsed(),
            )
        } else {
            self.stopped_since = None;
            None
        }
    }
}

impl Drop for Worker {
    /// Whatever still runs is killed and reaped: no exit path of a coordinator leaves a worker
    /// behind.
    fn drop(&mut self) {
        let _ = self.kill();
    }
}

/// True if process `pid` is stopped (state `T` or `t` in `/proc/PID/stat`).
pub fn is_stopped(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let (_, rest) = s.rsplit_once(") ")?;
            rest.chars().next()
        })
        .is_some_and(|state| state == 'T' || state == 't')
}

/// "exited with status 3", "was killed by SIGKILL".
pub fn describe(st: ExitStatus) -> String {
    match (st.code(), st.signal()) {
        (Some(c), _) => format!("exited with status {c}"),
        (None, Some(s)) => match Signal::try_from(s) {
            Ok(sig) => format!("was killed by {sig}"),
            Err(_) => format!("was killed by signal {s}"),
        },
        _ => format!("ended ({st})"),
    }
}

/// In a worker, first thing in `main` (before any thread starts): ties this process to its
/// coordinator, whose pid [`Worker::spawn`] put in [`COORDINATOR_ENV`]. When the coordinator
/// dies — even by SIGKILL — the kernel sends [`PARENT_DEATH_SIGNAL`]; this process then removes
/// the coordinator's queues `queues` (see [`mq::remove_on_signal`]) and dies. Returns the
/// coordinator's pid; fails when the variable is missing (not started by a coordinator), or
/// the coordinator is already gone.
pub fn follow_coordinator(queues: &[String]) -> Result<u32, String> {
    let pid = coordinator_pid()?;
    take_program_name();
    mq::remove_on_signal(PARENT_DEATH_SIGNAL, worker_name(), pid, queues.to_vec())
        .map_err(|e| e.to_string())?;
    nix::sys::prctl::set_pdeathsig(PARENT_DEATH_SIGNAL)
        .map_err(|e| format!("prctl(PR_SET_PDEATHSIG): {e}"))?;
    // The coordinator may have died before the request above: then nobody will signal us.
    if getppid().as_raw() as u32 != pid {
        let _ = nix::sys::signal::raise(PARENT_DEATH_SIGNAL);
        return Err(format!(
            "the coordinator (pid {pid}) is already gone (our parent is now pid {})",
            getppid()
        ));
    }
    Ok(pid)
}

/// [`follow_coordinator`] for a worker given the queues of its run as `base` (by `flag`) in
/// `family`, with `n` members: first checks that `base` names this worker's own coordinator
/// ([`mq::QueueFamily::check_owner`]), so that a wrong name cannot tie the worker to another
/// run's queues and have it remove them when its coordinator dies.
pub fn follow_queues(
    family: &mq::QueueFamily,
    base: &str,
    n: u32,
    flag: &str,
) -> Result<u32, String> {
    family.check_owner(base, flag, coordinator_pid()?)?;
    follow_coordinator(&family.all(base, n))
}

/// Gives this process the tool's name in `ps`, `top` and `pgrep` (the kernel's `comm`, at most
/// 15 bytes), which the re-execution through `/proc/self/exe` set to `exe`. Written through
/// `/proc/self/comm`, which names the process (its main thread) from any thread; a failure
/// only leaves the name as it was.
fn take_program_name() {
    let _ = std::fs::write("/proc/self/comm", crate::stderr::program_name());
}

/// How this worker names itself: the program's name and its index ([`WORKER_INDEX_ENV`]), or
/// its pid when the index is not set.
fn worker_name() -> String {
    let prog = crate::stderr::program_name();
    match std::env::var(WORKER_INDEX_ENV) {
        Ok(i) => format!("{prog} worker {i}"),
        Err(_) => format!("{prog} worker (pid {})", std::process::id()),
    }
}

/// The coordinator's pid, from [`COORDINATOR_ENV`].
fn coordinator_pid() -> Result<u32, String> {
    let var = std::env::var(COORDINATOR_ENV).map_err(|_| {
        format!("{COORDINATOR_ENV} is not set: worker processes are started by their coordinator")
    })?;
    var.parse()
        .map_err(|_| format!("{COORDINATOR_ENV}={var:?} is not a pid"))
}

/// Nanoseconds on `CLOCK_MONOTONIC` (see [`mq::monotonic_ns`]) of an `Instant` of this process:
/// the clock every process of the machine shares, so that processes can compare intervals.
pub fn monotonic_ns_of(t: Instant) -> u64 {
    static ANCHOR: std::sync::OnceLock<(Instant, u64)> = std::sync::OnceLock::new();
    let (at, ns) = *ANCHOR.get_or_init(|| (Instant::now(), mq::monotonic_ns()));
    match t.checked_duration_since(at) {
        Some(d) => ns.saturating_add(d.as_nanos() as u64),
        None => ns.saturating_sub(at.duration_since(t).as_nanos() as u64),
    }
}

/// Sleeps until `at_ns` on `CLOCK_MONOTONIC` (at most 10 s; at once if it has passed): a
/// coarse sleep, then a spin for the last 2 ms — a CPU woken from idle may take longer than
/// that to run us (measured under emulation) — so that processes released together start
/// within microseconds of each other.
pub fn sleep_until_monotonic(at_ns: u64) {
    const SPIN: u64 = 2_000_000;
    let now = mq::monotonic_ns();
    if at_ns <= now {
        return;
    }
    let left = (at_ns - now).min(10_000_000_000);
    if left > SPIN {
        std::thread::sleep(Duration::from_nanos(left - SPIN));
    }
    let end = at_ns.min(now + left);
    while mq::monotonic_ns() < end {
        std::hint::spin_loop();
    }
}

/// What [`gather`] needs from a coordinator: its workers' processes, whether each has sent what
/// is awaited, and what to do with a message. The protocol stays the coordinator's.
pub trait Roster {
    /// Why [`Roster::handle`] refused a message (the coordinator's own error).
    type Error;
    /// How many workers there are.
    fn count(&self) -> usize;
    /// Worker `i`'s process.
    fn process(&mut self, i: usize) -> &mut Worker;
    /// True once worker `i` has sent everything awaited.
    fn finished(&self, i: usize) -> bool;
    /// Takes one message from the coordinator's inbox.
    fn handle(&mut self, msg: WorkerMsg) -> Result<(), Self::Error>;
}

/// Why [`gather`] ended before every worker had finished.
#[derive(Debug)]
pub enum GatherError<E> {
    /// [`Roster::handle`] refused a message.
    Refused(E),
    /// Worker `index` ended (`status`, see [`describe`]) without finishing; what it sent before
    /// was handled first.
    Ended { index: usize, status: ExitStatus },
    /// Worker `index` has been stopped (SIGSTOP, a debugger) for `stopped`.
    Stopped { index: usize, stopped: Duration },
    /// The deadline passed; `late` had not finished (and were still running).
    Late { late: Vec<usize> },
    /// Receiving from the inbox, or `waitpid`, failed.
    Io(String),
}

/// How long the inbox is quiet before [`gather`] looks at the processes.
pub const WATCH_EVERY: Duration = Duration::from_millis(100);

/// Receives from `inbox`, handing each message to the roster, until every worker has finished.
/// Whenever the inbox has been quiet for [`WATCH_EVERY`] it looks at the processes: one that
/// ended without finishing (once its last messages are handled), or has been stopped for
/// `stopped_limit`, ends the wait at once. `deadline` is asked again on every turn, so it may
/// move as messages arrive; past it, the workers not finished are late. Every wait is bounded.
pub fn gather<R: Roster>(
    roster: &mut R,
    inbox: &Queue,
    stopped_limit: Option<Duration>,
    mut deadline: impl FnMut(&R) -> Instant,
) -> Result<(), GatherError<R::Error>> {
    let unfinished = |r: &R| {
        (0..r.count())
            .filter(|&i| !r.finished(i))
            .collect::<Vec<_>>()
    };
    while !unfinished(roster).is_empty() {
        match inbox.recv_timeout(WATCH_EVERY) {
            Ok(msg) => roster.handle(msg).map_err(GatherError::Refused)?,
            Err(e) if e.is_timeout() => watch(roster, inbox, stopped_limit)?,
            Err(e) => return Err(GatherError::Io(format!("receiving from the workers: {e}"))),
        }
        if Instant::now() >= deadline(roster) {
            let late = unfinished(roster);
            if !late.is_empty() {
                return Err(GatherError::Late { late });
            }
        }
    }
    Ok(())
}

/// One look at the unfinished workers' processes (see [`gather`]).
fn watch<R: Roster>(
    roster: &mut R,
    inbox: &Queue,
    stopped_limit: Option<Duration>,
) -> Result<(), GatherError<R::Error>> {
    for i in 0..roster.count() {
        if roster.finished(i) {
            continue;
        }
        let ended = roster
            .process(i)
            .try_exit()
            .map_err(|e| GatherError::Io(format!("waitpid: {e}")))?;
        if let Some(status) = ended {
            // What it sent before it ended is in the inbox now: take it first.
            while let Ok((msg, _)) = inbox.try_recv() {
                roster.handle(msg).map_err(GatherError::Refused)?;
            }
            if !roster.finished(i) {
                return Err(GatherError::Ended { index: i, status });
            }
        } else if let (Some(limit), Some(stopped)) =
            (stopped_limit, roster.process(i).stopped_for())
        {
            if stopped >= limit {
                return Err(GatherError::Stopped { index: i, stopped });
            }
        }
    }
    Ok(())
}

/// How a worker that [`watch_all`] reports did not end well.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// It ended by itself, not with status 0 (see [`describe`]).
    Failed(ExitStatus),
    /// It still ran the grace period after the first failure, and was killed (and reaped).
    Killed,
}

/// One worker that did not end well, as [`watch_all`] saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failure {
    pub index: u32,
    pub pid: u32,
    pub fate: Fate,
}

/// How often [`watch_all`] looks at the processes.
pub const POLL_EVERY: Duration = Duration::from_millis(20);

/// Waits for every worker of `crew` to end: the loop of a launcher whose workers coordinate
/// among themselves and send it nothing. When the first one ends badly (not status 0),
/// `first_failure` hears of it at once (to tell the others, say) and the others get `grace` to
/// end by themselves; those still running then are killed. Every worker is reaped. Returns each
/// worker that did not end well, in the order seen (a `waitpid` that fails counts as running).
///
/// When this launcher's stdout, which its workers share, has no reader any more (`| head` has
/// read enough: [`crate::stdout::reader_gone`]) and `stop_when_unread`, the run is over as far
/// as anyone can see: the workers still running are killed and reaped and nothing is returned,
/// so the launcher ends quietly with status 0, as any program does whose stdout is closed —
/// instead of waiting out the peer timeout of ranks that wait for a rank that left at its first
/// unread line. A run that still owes more than its output (a report file, a gate's verdict)
/// passes false: its workers go on to the end.
pub fn watch_all(
    crew: &mut [Worker],
    grace: Duration,
    stop_when_unread: bool,
    mut first_failure: impl FnMut(&Worker, ExitStatus),
) -> Vec<Failure> {
    let mut seen = vec![false; crew.len()];
    let mut failures = Vec::new();
    let mut deadline: Option<Instant> = None;
    loop {
        if stop_when_unread && crate::stdout::reader_gone() {
            crew.iter_mut().for_each(|w| drop(w.kill()));
            return Vec::new();
        }
        for (w, seen) in crew.iter_mut().zip(&mut seen) {
            let Ok(Some(st)) = w.try_exit() else { continue };
            if std::mem::replace(seen, true) || st.success() {
                continue;
            }
            failures.push(Failure {
                index: w.index,
                pid: w.pid(),
                fate: Fate::Failed(st),
            });
            if deadline.is_none() {
                first_failure(w, st);
                deadline = Some(crate::fdwait::deadline_after(grace));
            }
        }
        if seen.iter().all(|&s| s) {
            return failures;
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            for (w, _) in crew.iter_mut().zip(&seen).filter(|(_, &s)| !s) {
                let _ = w.kill();
                failures.push(Failure {
                    index: w.index,
                    pid: w.pid(),
                    fate: Fate::Killed,
                });
            }
            return failures;
        }
        std::thread::sleep(POLL_EVERY);
    }
}

/// How [`stop`] ended one worker.
#[derive(Debug)]
pub struct Stopped {
    pub index: u32,
    pub pid: u32,
    /// Why the Abort could not be queued (a full or gone queue), if it could not.
    pub abort_failed: Option<String>,
    /// "exited with status 1", or "killed (still running after the grace period)".
    pub how: String,
}

/// Stops the workers still running after a failure: an `Abort` carrying `reason` (priority 10,
/// ahead of anything queued) to each one's inbox, `grace` for them to exit, then SIGKILL. Every
/// one is reaped; returns what happened to each worker that was still running.
pub fn stop<'a>(
    crew: impl IntoIterator<Item = (&'a mut Worker, &'a Queue)>,
    reason: &str,
    grace: Duration,
) -> Vec<Stopped> {
    let abort = WorkerMsg::Abort {
        reason: reason.chars().take(500).collect(),
    };
    let mut live: Vec<(&mut Worker, Option<String>)> = crew
        .into_iter()
        .filter_map(|(w, q)| {
            w.running()
                .then(|| (w, q.try_send(&abort, 10).err().map(|e| e.to_string())))
        })
        .collect();
    let deadline = crate::fdwait::deadline_after(grace);
    live.iter_mut()
        .map(|(w, abort_failed)| {
            let left = deadline.saturating_duration_since(Instant::now());
            let how = match w.wait_exit(left) {
                Ok(st) => describe(st),
                Err(_) => match w.kill() {
                    Ok(_) => "killed (still running after the grace period)".to_string(),
                    Err(e) => e,
                },
            };
            Stopped {
                index: w.index,
                pid: w.pid(),
                abort_failed: abort_failed.take(),
                how,
            }
        })
        .collect()
}
