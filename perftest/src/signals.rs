//! SIGINT and SIGTERM for the `vl_*` tools: a clean stop the peer hears about.
//!
//! [`install`] blocks both signals in the main thread (and so in every thread it starts) and
//! takes them on the process's one signal thread ([`verbs_lab::signals`], `sigwait(2)`) — no
//! async-signal handler, no unsafe.
//! Before a peer is connected there is nothing to tell anyone: the tool exits at once with
//! 128 + the signal (130 for SIGINT, 143 for SIGTERM). Once connected, the signal is recorded,
//! the out-of-band socket's reading side is shut down (which wakes a blocking read at once), and
//! the running loop — which looks at [`check`] every few milliseconds — stops with
//! [`Interrupted`]. The error path then sends the peer an ERROR naming the signal *before* the
//! QPs are torn down, and the tool exits 130 or 143. A second signal, or a stop that takes
//! longer than [`GRACE`], exits at once.
//!
//! A `--procs` coordinator has no peer of its own: while its workers run ([`pass_on_to`]) it
//! passes the signal on to them, and each stops its run and tells its peer as a single run
//! does; the coordinator sees them end and reports the interruption.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Mutex;
use std::thread::ThreadId;
use std::time::Duration;

use nix::sys::signal::Signal;

/// The signal received, 0 while none.
static RECEIVED: AtomicI32 = AtomicI32::new(0);
/// What a signal stops rather than ending the process at once.
enum Target {
    /// Nothing yet: no peer connected.
    Nothing,
    /// The out-of-band sockets of the runs in progress ([`watch_socket`]), each with the
    /// thread that runs it: one, or a `--serve --concurrent` server's several.
    Sockets(Vec<(ThreadId, RawFd)>),
    /// A `--procs` coordinator's worker processes ([`pass_on_to`]).
    Workers(Vec<u32>),
}

static TARGET: Mutex<Target> = Mutex::new(Target::Nothing);
/// The tool's name, for the lines printed on the signal thread.
static TOOL: Mutex<String> = Mutex::new(String::new());

/// How long a connected run may take to stop cleanly after a signal.
pub const GRACE: Duration = Duration::from_secs(10);

/// A run stopped by a signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interrupted(pub Signal);

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "interrupted by {}", self.0.as_str())
    }
}

impl std::error::Error for Interrupted {}

impl Interrupted {
    /// Who usually sends the signal, for the peer's message: a person's Ctrl-C sends SIGINT;
    /// `kill`, `timeout` and service managers send SIGTERM.
    pub fn usual_sender(self) -> &'static str {
        match self.0 {
            Signal::SIGINT => "Ctrl-C",
            Signal::SIGTERM => "kill or timeout",
            _ => "a signal",
        }
    }

    /// What the peer is told: the signal, who usually sends it, and that it ended the run.
    pub fn for_the_peer(self) -> String {
        format!("{self} ({}): it stopped the run", self.usual_sender())
    }

    /// The exit code: 128 + the signal number (130 for SIGINT, 143 for SIGTERM).
    pub fn exit_code(self) -> u8 {
        128u8.saturating_add(self.0 as i32 as u8)
    }
}

/// Takes SIGINT and SIGTERM on the process's signal thread ([`verbs_lab::signals`]) from now on.
/// Call first thing in `main`, before any other thread is started (they inherit the blocked
/// mask).
pub fn install(tool: &str) -> std::io::Result<()> {
    if let Ok(mut t) = TOOL.lock() {
        *t = tool.to_string();
    }
    // The parent-death signal of `--procs` workers (verbs_lab::workers) is taken there too: its
    // handler, registered when the worker follows its coordinator, removes the coordinator's
    // queues.
    verbs_lab::signals::install(&[
        Signal::SIGINT,
        Signal::SIGTERM,
        verbs_lab::workers::PARENT_DEATH_SIGNAL,
    ])?;
    verbs_lab::signals::on(&[Signal::SIGINT, Signal::SIGTERM], on_signal);
    Ok(())
}

/// A `--serve` server's summary so far: a signal while it waits for its next client prints it
/// and ends the process with 0 (stopping is how a serving server ends), rather than 130/143.
static SERVE_SUMMARY: Mutex<Option<String>> = Mutex::new(None);

/// Sets what a signal prints, and ends with 0, while no client is connected (`--serve`).
pub fn set_serve_summary(summary: String) {
    if let Ok(mut s) = SERVE_SUMMARY.lock() {
        *s = Some(summary);
    }
}

/// Set by [`stop_softly`]: the first signal only asks for a clean stop.
static SOFT: AtomicBool = AtomicBool::new(false);
/// The first signal came while [`SOFT`] was set.
static SOFT_RECEIVED: AtomicBool = AtomicBool::new(false);

/// From now on the first SIGINT or SIGTERM only asks the run to stop at its next boundary
/// ([`soft_stop_requested`]; `--run_infinitely` finishes its period and ends both sides
/// cleanly); a second one takes the usual path.
pub fn stop_softly() {
    SOFT.store(true, Ordering::SeqCst);
}

/// Whether a signal asked for a clean stop (see [`stop_softly`]).
pub fn soft_stop_requested() -> bool {
    SOFT_RECEIVED.load(Ordering::SeqCst)
}

fn on_signal(sig: Signal) {
    let tool = TOOL.lock().map(|t| t.clone()).unwrap_or_default();
    if SOFT.load(Ordering::SeqCst) && !SOFT_RECEIVED.swap(true, Ordering::SeqCst) {
        verbs_lab::eprintln_whole!(
            "{tool}: {}: stopping after the current period",
            sig.as_str()
        );
        return;
    }
    let code = Interrupted(sig).exit_code();
    if RECEIVED.swap(sig as i32, Ordering::SeqCst) != 0 {
        verbs_lab::eprintln_whole!("{tool}: {} again: exiting now", sig.as_str());
        exit_now(sig, code);
    }
    if !wake_reader() && !pass_on(sig) {
        if let Some(summary) = SERVE_SUMMARY.lock().ok().and_then(|s| s.clone()) {
            verbs_lab::eprintln_whole!(
                "{tool}: {} while waiting for a client: {summary}",
                sig.as_str()
            );
            exit_now(sig, 0);
        }
        verbs_lab::eprintln_whole!(
            "{tool}: interrupted by {} (no peer connected yet)",
            sig.as_str()
        );
        exit_now(sig, code);
    }
    std::thread::sleep(GRACE);
    let why = format!(
        "interrupted by {}: the run did not stop within {} s; exiting",
        sig.as_str(),
        GRACE.as_secs()
    );
    verbs_lab::eprintln_whole!("{tool}: {why}");
    tell_peer(&why);
    exit_now(sig, code);
}

/// Sends `sig` to the workers of [`pass_on_to`]; returns whether there were any.
fn pass_on(sig: Signal) -> bool {
    match TARGET.lock().as_deref() {
        Ok(Target::Workers(pids)) if !pids.is_empty() => {
            for &pid in pids {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), sig);
            }
            true
        }
        _ => false,
    }
}

/// While the returned guard lives, a signal is passed on to `pids` (a `--procs` coordinator's
/// workers, its children) instead of ending this process: each worker stops its run and tells
/// its peer, and the coordinator, seeing them end, finds [`received`] set. A Ctrl-C reaches the
/// workers anyway (they are in the terminal's process group); the copy passed on is then
/// merged with it, as a worker takes no second signal while it stops. Drop the guard before
/// the workers are reaped (their pids may then be reused).
pub fn pass_on_to(pids: Vec<u32>) -> Watch {
    Watch::of(Target::Workers(pids))
}

/// The last resort of a run that did not stop in time: one ERROR frame written straight to the
/// out-of-band socket, without waiting (the peer then names the interruption instead of a
/// closed connection). The run's own thread is stuck somewhere, so it is not writing.
fn tell_peer(why: &str) {
    use nix::sys::socket::{send, MsgFlags};
    let rec = crate::proto::encode(&crate::proto::Msg::Error(why.to_string()));
    let Ok(frame) = verbs_lab::oob::frame(&rec, "the ERROR message") else {
        return;
    };
    if let Ok(Target::Sockets(socks)) = TARGET.lock().as_deref() {
        for (_, fd) in socks {
            let _ = send(*fd, &frame, MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL);
        }
    }
}

/// Shuts down the reading side of every run's out-of-band socket, if one is connected (see
/// [`watch_socket`]): a read blocked on the peer returns at once, while writing (our ERROR)
/// still works. Used on a signal. Returns whether a socket was connected.
pub fn wake_reader() -> bool {
    wake_readers(|_| true)
}

/// [`wake_reader`] for the run on thread `run` only (a fatal event of its device, see
/// [`crate::events`]): the other runs of a `--serve --concurrent` server go on.
pub fn wake_reader_of(run: ThreadId) -> bool {
    wake_readers(|t| t == run)
}

fn wake_readers(which: impl Fn(ThreadId) -> bool) -> bool {
    // Under the lock, so that a socket cannot be closed (and its number reused) meanwhile.
    match TARGET.lock().as_deref() {
        Ok(Target::Sockets(socks)) => {
            let mut woke = false;
            for (_, fd) in socks.iter().filter(|(t, _)| which(*t)) {
                let _ = nix::sys::socket::shutdown(*fd, nix::sys::socket::Shutdown::Read);
                woke = true;
            }
            woke
        }
        _ => false,
    }
}

/// Ends the process with `code`, first removing the POSIX message queues it created (a `--procs`
/// coordinator's): this thread takes SIGINT/SIGTERM before the queues' own signal cleanup can.
fn exit_now(sig: Signal, code: u8) -> ! {
    let n = verbs_lab::mq::unlink_all_registered();
    if n > 0 {
        verbs_lab::eprintln_whole!("{}", verbs_lab::mq::removed_on_signal(sig, n));
    }
    std::process::exit(code.into())
}

/// The signal that stopped the run, if one came.
pub fn received() -> Option<Interrupted> {
    match RECEIVED.load(Ordering::SeqCst) {
        0 => None,
        n => Signal::try_from(n).ok().map(Interrupted),
    }
}

/// Fails with [`Interrupted`] once a signal has come: loops call it as they look at the peer.
pub fn check() -> Result<(), Interrupted> {
    match received() {
        Some(i) => Err(i),
        None => Ok(()),
    }
}

/// While the returned guard lives, a signal shuts down the reading side of `fd` (the run's
/// out-of-band socket, run by this thread) instead of exiting: the run stops through its error
/// path and tells the peer. Drop the guard before the socket is closed. Several runs (threads)
/// may each watch a socket of their own at once.
pub fn watch_socket(fd: RawFd) -> Watch {
    let me = (std::thread::current().id(), fd);
    if let Ok(mut t) = TARGET.lock() {
        match &mut *t {
            Target::Sockets(socks) => socks.push(me),
            other => *other = Target::Sockets(vec![me]),
        }
    }
    Watch(Some(me))
}

/// What a signal stops while it lives: see [`watch_socket`] and [`pass_on_to`].
pub struct Watch(Option<(ThreadId, RawFd)>);

impl Watch {
    fn of(target: Target) -> Watch {
        if let Ok(mut t) = TARGET.lock() {
            *t = target;
        }
        Watch(None)
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        if let Ok(mut t) = TARGET.lock() {
            match (&mut *t, self.0) {
                (Target::Sockets(socks), Some(me)) => {
                    socks.retain(|s| *s != me);
                    if socks.is_empty() {
                        *t = Target::Nothing;
                    }
                }
                _ => *t = Target::Nothing,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_are_128_plus_the_signal() {
        assert_eq!(Interrupted(Signal::SIGINT).exit_code(), 130);
        assert_eq!(Interrupted(Signal::SIGTERM).exit_code(), 143);
        assert_eq!(
            Interrupted(Signal::SIGTERM).to_string(),
            "interrupted by SIGTERM"
        );
    }

    #[test]
    fn the_peer_hears_who_usually_sends_the_signal() {
        assert_eq!(
            Interrupted(Signal::SIGINT).for_the_peer(),
            "interrupted by SIGINT (Ctrl-C): it stopped the run"
        );
        assert_eq!(
            Interrupted(Signal::SIGTERM).for_the_peer(),
            "interrupted by SIGTERM (kill or timeout): it stopped the run"
        );
    }
}
