//! SIGINT and SIGTERM for the `vl_*` tools: a clean stop the peer hears about.
//!
//! [`install`] blocks both signals in the main thread (and so in every thread it starts); they
//! are taken where the tool waits or looks at its peer ([`verbs_lab::signals`]: a `signalfd(2)`
//! among the descriptors of every wait, and read by [`Control::check`]), so that a run is one
//! thread — no async-signal handler, no unsafe. What the signals change lives in the
//! [`Control`] it returns, one per process: the handler holds a clone and the tool passes it
//! down to the code that cares (each run's channel, a `--serve` loop, a `--procs` coordinator)
//! — no statics.
//! Before a peer is connected there is nothing to tell anyone: the tool exits at once with
//! 128 + the signal (130 for SIGINT, 143 for SIGTERM). Once connected, the signal is recorded,
//! the out-of-band socket's reading side is shut down (which wakes a blocking read at once), and
//! the running loop — which looks at [`Control::check`] every 10 ms (100 ms in a bandwidth loop
//! whose completions flow) — stops with
//! [`Interrupted`]. The error path then sends the peer an ERROR naming the signal *before* the
//! QPs are torn down, and the tool exits 130 or 143. A second signal, or a stop that takes
//! longer than [`GRACE`] (a watchdog thread started by the first signal), exits at once.
//!
//! A `--procs` coordinator has no peer of its own: while its workers run
//! ([`Control::pass_on_to`]) it passes the signal on to them, and each stops its run and tells
//! its peer as a single run does; the coordinator sees them end and reports the interruption.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;
use std::time::Duration;

use nix::sys::signal::Signal;

/// What a signal stops rather than ending the process at once.
enum Target {
    /// Nothing yet: no peer connected.
    Nothing,
    /// The out-of-band sockets of the runs in progress ([`Control::watch_socket`]), each with
    /// the thread that runs it: one, or a `--serve --concurrent` server's several.
    Sockets(Vec<(ThreadId, RawFd)>),
    /// A `--procs` coordinator's worker processes ([`Control::pass_on_to`]).
    Workers(Vec<u32>),
}

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

/// A tool's run control: whether a stop signal came (and which), the soft-stop state of
/// `--run_infinitely`, what a signal stops (the runs' sockets, a coordinator's workers), and a
/// `--serve` server's summary. [`install`] makes the process's one and hands a clone to the
/// signals' handler; the tool passes it down to every run (a run's channel carries it,
/// [`crate::proto::Channel::check_stop`]). Cloning shares the state.
///
/// A control that was not installed ([`Control::default`]) is never signalled: what a library
/// caller that handles signals itself passes (the fabric check's flows).
#[derive(Clone, Default)]
pub struct Control(Arc<State>);

struct State {
    /// The tool's name, for the lines the signals' handler prints.
    tool: String,
    /// The signal received, 0 while none.
    received: AtomicI32,
    target: Mutex<Target>,
    /// A `--serve` server's summary so far: a signal while it waits for its next client prints
    /// it and ends the process with 0 (stopping is how a serving server ends), not 130/143.
    serve_summary: Mutex<Option<String>>,
    /// Set by [`Control::stop_softly`]: the first signal only asks for a clean stop.
    soft: AtomicBool,
    /// The first signal came while `soft` was set.
    soft_received: AtomicBool,
}

impl Default for State {
    fn default() -> State {
        State {
            tool: String::new(),
            received: AtomicI32::new(0),
            target: Mutex::new(Target::Nothing),
            serve_summary: Mutex::new(None),
            soft: AtomicBool::new(false),
            soft_received: AtomicBool::new(false),
        }
    }
}

/// Takes SIGINT and SIGTERM from now on ([`verbs_lab::signals`]), and returns the [`Control`]
/// their handler drives. Call first thing in `main`, before any other thread is started (they
/// inherit the blocked mask), and once. A mode that blocks where it cannot look (a `--procs`
/// coordinator, a `--serve --concurrent` server) starts the signal thread
/// ([`verbs_lab::signals::on_thread`]).
pub fn install(tool: &str) -> std::io::Result<Control> {
    let ctl = Control::new(tool);
    // The parent-death signal of `--procs` workers (verbs_lab::workers) is taken there too: its
    // handler, registered when the worker follows its coordinator, removes the coordinator's
    // queues.
    verbs_lab::signals::install(&[
        Signal::SIGINT,
        Signal::SIGTERM,
        verbs_lab::workers::PARENT_DEATH_SIGNAL,
    ])?;
    let handler = ctl.clone();
    verbs_lab::signals::on(&[Signal::SIGINT, Signal::SIGTERM], move |sig| {
        handler.on_signal(sig)
    });
    Ok(ctl)
}

impl Control {
    /// A control for `tool` (its name starts the lines the signals' handler prints), not yet
    /// driven by any signal: [`install`] registers it.
    fn new(tool: &str) -> Control {
        Control(Arc::new(State {
            tool: tool.to_string(),
            ..State::default()
        }))
    }

    /// Sets what a signal prints, and ends with 0, while no client is connected (`--serve`).
    pub fn set_serve_summary(&self, summary: String) {
        if let Ok(mut s) = self.0.serve_summary.lock() {
            *s = Some(summary);
        }
    }

    /// From now on the first SIGINT or SIGTERM only asks the run to stop at its next boundary
    /// ([`Control::soft_stop_requested`]; `--run_infinitely` finishes its period and ends both
    /// sides cleanly); a second one takes the usual path.
    pub fn stop_softly(&self) {
        self.0.soft.store(true, Ordering::SeqCst);
    }

    /// Whether a signal asked for a clean stop (see [`Control::stop_softly`]).
    pub fn soft_stop_requested(&self) -> bool {
        self.0.soft_received.load(Ordering::SeqCst)
    }

    /// The signal that stopped the run, if one came.
    pub fn received(&self) -> Option<Interrupted> {
        match self.0.received.load(Ordering::SeqCst) {
            0 => None,
            n => Signal::try_from(n).ok().map(Interrupted),
        }
    }

    /// Fails with [`Interrupted`] once a signal has come: loops call it as they look at the
    /// peer. It first takes the signals that have arrived ([`verbs_lab::signals::take_pending`]),
    /// so a loop that never sleeps hears them here.
    pub fn check(&self) -> Result<(), Interrupted> {
        verbs_lab::signals::take_pending();
        match self.received() {
            Some(i) => Err(i),
            None => Ok(()),
        }
    }

    /// What SIGINT or SIGTERM does, on the thread that took it (see [the module](self)).
    fn on_signal(&self, sig: Signal) {
        let tool = &self.0.tool;
        if self.0.soft.load(Ordering::SeqCst) && !self.0.soft_received.swap(true, Ordering::SeqCst)
        {
            verbs_lab::eprintln_whole!(
                "{tool}: {}: stopping after the current period",
                sig.as_str()
            );
            return;
        }
        let code = Interrupted(sig).exit_code();
        if self.0.received.swap(sig as i32, Ordering::SeqCst) != 0 {
            verbs_lab::eprintln_whole!("{tool}: {} again: exiting now", sig.as_str());
            exit_now(sig, code);
        }
        if !self.wake_reader() && !self.pass_on(sig) {
            if let Some(summary) = self.0.serve_summary.lock().ok().and_then(|s| s.clone()) {
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
        // The run stops on its own thread; a watchdog ends the process should it not.
        let late = self.clone();
        let watchdog = std::thread::Builder::new()
            .name("stop-grace".into())
            .spawn(move || late.too_late(sig, code));
        if watchdog.is_err() {
            verbs_lab::eprintln_whole!("{tool}: {}: exiting now", sig.as_str());
            self.tell_peer(&Interrupted(sig).for_the_peer());
            exit_now(sig, code);
        }
    }

    /// The end of a run that did not stop within [`GRACE`] of `sig`: says so, tells the peer
    /// and exits with `code`.
    fn too_late(&self, sig: Signal, code: u8) -> ! {
        std::thread::sleep(GRACE);
        let why = format!(
            "interrupted by {}: the run did not stop within {} s; exiting",
            sig.as_str(),
            GRACE.as_secs()
        );
        verbs_lab::eprintln_whole!("{}: {why}", self.0.tool);
        self.tell_peer(&why);
        exit_now(sig, code);
    }

    /// Sends `sig` to the workers of [`Control::pass_on_to`]; returns whether there were any.
    fn pass_on(&self, sig: Signal) -> bool {
        match self.0.target.lock().as_deref() {
            Ok(Target::Workers(pids)) if !pids.is_empty() => {
                for &pid in pids {
                    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), sig);
                }
                true
            }
            _ => false,
        }
    }

    /// While the returned guard lives, a signal is passed on to `pids` (a `--procs`
    /// coordinator's workers, its children) instead of ending this process: each worker stops
    /// its run and tells its peer, and the coordinator, seeing them end, finds
    /// [`Control::received`] set. A Ctrl-C reaches the workers anyway (they are in the
    /// terminal's process group); the copy passed on is then merged with it, as a worker takes
    /// no second signal while it stops. Drop the guard before the workers are reaped (their
    /// pids may then be reused).
    pub fn pass_on_to(&self, pids: Vec<u32>) -> Watch {
        if let Ok(mut t) = self.0.target.lock() {
            *t = Target::Workers(pids);
        }
        Watch {
            ctl: self.clone(),
            socket: None,
        }
    }

    /// The last resort of a run that did not stop in time: one ERROR frame written straight to
    /// the out-of-band socket, without waiting (the peer then names the interruption instead
    /// of a closed connection). The run's own thread is stuck somewhere, so it is not writing.
    fn tell_peer(&self, why: &str) {
        use nix::sys::socket::{send, MsgFlags};
        let rec = crate::proto::encode(&crate::proto::Msg::Error(why.to_string()));
        let Ok(frame) = verbs_lab::oob::frame(&rec, "the ERROR message") else {
            return;
        };
        if let Ok(Target::Sockets(socks)) = self.0.target.lock().as_deref() {
            for (_, fd) in socks {
                let _ = send(*fd, &frame, MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL);
            }
        }
    }

    /// Shuts down the reading side of every run's out-of-band socket, if one is connected (see
    /// [`Control::watch_socket`]): a read blocked on the peer returns at once, while writing
    /// (our ERROR) still works. Used on a signal. Returns whether a socket was connected.
    pub fn wake_reader(&self) -> bool {
        self.wake_readers(|_| true)
    }

    /// [`Control::wake_reader`] for the run on thread `run` only (a fatal event of its device,
    /// see [`crate::events`]): the other runs of a `--serve --concurrent` server go on.
    pub fn wake_reader_of(&self, run: ThreadId) -> bool {
        self.wake_readers(|t| t == run)
    }

    fn wake_readers(&self, which: impl Fn(ThreadId) -> bool) -> bool {
        // Under the lock, so that a socket cannot be closed (and its number reused) meanwhile.
        match self.0.target.lock().as_deref() {
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

    /// While the returned guard lives, a signal shuts down the reading side of `fd` (the run's
    /// out-of-band socket, run by this thread) instead of exiting: the run stops through its
    /// error path and tells the peer. Drop the guard before the socket is closed. Several runs
    /// (threads) may each watch a socket of their own at once.
    pub fn watch_socket(&self, fd: RawFd) -> Watch {
        let me = (std::thread::current().id(), fd);
        if let Ok(mut t) = self.0.target.lock() {
            match &mut *t {
                Target::Sockets(socks) => socks.push(me),
                other => *other = Target::Sockets(vec![me]),
            }
        }
        Watch {
            ctl: self.clone(),
            socket: Some(me),
        }
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

/// What a signal stops while it lives: see [`Control::watch_socket`] and
/// [`Control::pass_on_to`].
pub struct Watch {
    ctl: Control,
    socket: Option<(ThreadId, RawFd)>,
}

impl Drop for Watch {
    fn drop(&mut self) {
        if let Ok(mut t) = self.ctl.0.target.lock() {
            match (&mut *t, self.socket) {
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
    fn a_soft_stop_is_asked_once_and_stops_nothing_else() {
        let ctl = Control::new("vl_test");
        ctl.stop_softly();
        ctl.on_signal(Signal::SIGINT);
        assert!(ctl.soft_stop_requested());
        assert_eq!(
            ctl.received(),
            None,
            "the first signal only asks for a clean stop"
        );
        assert!(ctl.check().is_ok());
        // Another process's control (another tool in a test) is untouched: no shared state.
        assert!(!Control::default().soft_stop_requested());
    }

    #[test]
    fn waking_a_run_wakes_its_socket_only_while_watched() {
        use std::io::Read;
        use std::os::fd::AsRawFd;
        use std::os::unix::net::UnixStream;
        let ctl = Control::default();
        let (mut ours, _peer) = UnixStream::pair().unwrap();
        assert!(!ctl.wake_reader(), "nothing is watched yet");
        let watch = ctl.watch_socket(ours.as_raw_fd());
        assert!(!ctl.wake_reader_of(
            std::thread::spawn(|| std::thread::current().id())
                .join()
                .unwrap()
        ));
        assert!(ctl.wake_reader_of(std::thread::current().id()));
        // The reading side is shut down: a read returns at once with nothing, the peer alive.
        assert_eq!(ours.read(&mut [0u8; 8]).unwrap(), 0);
        drop(watch);
        assert!(!ctl.wake_reader(), "the watch ended with its guard");
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
