//! The signals a program takes (SIGINT, SIGTERM, SIGHUP, the workers' parent-death signal): blocked
//! in every thread, read from one `signalfd(2)`, and handed to the code that registered for
//! them — on the thread that waits, not on a thread of their own.
//!
//! A signal mask is the process's business — each thread inherits its creator's — so this is
//! the one process-wide piece: [`install`] blocks the signals in the calling thread and opens
//! the descriptor they arrive on. **Call it first in `main`, before any other thread starts**
//! (a thread started earlier keeps its mask, and a signal delivered to it would end the process
//! without cleanup). Later calls share the descriptor; a signal they name that the first call
//! did not take keeps its default action. No async-signal handler: handlers run as ordinary code
//! (they may lock, format and print), so there is no async-signal-safety to get wrong and no
//! `unsafe`.
//!
//! Who takes the signals: every wait of the program that can last ([`poll_until`],
//! [`wait_readable`], [`sleep`] — the out-of-band socket, the listener, the message queues) has
//! the descriptor among its own and takes what arrives; a loop that never sleeps calls
//! [`take_pending`] as it looks at its peer. So a benchmark's process stays single-threaded:
//! with a second thread, glibc wraps every `write(2)` — each post's doorbell on rxe — in its
//! cancellation switch, and the kernel takes the shared descriptor table's slow path on every
//! system call (docs/benchmarks-deterministic.md measured 0.2-0.4 % of a message). A program
//! that blocks where it cannot look (waiting for its children, several runs on threads of their
//! own) starts the signal thread instead ([`on_thread`]), which takes them as they come.
//!
//! Who wants a signal registers a handler ([`on`]); the one registered last for a signal gets
//! it — a tool's clean stop before the message queues' cleanup it replaces. A handler that
//! returns has dealt with the signal; one that wants the default action ends with [`die_of`].
//! A signal no one handles ends the process as its default action would, after the message
//! queues this process created are removed ([`crate::mq::unlink_all_registered`]).

use std::cell::RefCell;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use std::sync::{Arc, Mutex};

use nix::sys::signal::{raise, SigSet, Signal};

/// What a handler does with a signal, on the signal thread.
type Handler = Arc<dyn Fn(Signal) + Send + Sync>;

/// The signals taken and the handlers, last registered first.
struct Taken {
    set: SigSet,
    handlers: Vec<(Vec<Signal>, Handler)>,
}

static TAKEN: Mutex<Option<Taken>> = Mutex::new(None);

fn taken() -> std::sync::MutexGuard<'static, Option<Taken>> {
    // A handler that panicked leaves a usable list: keep going.
    TAKEN.lock().unwrap_or_else(|p| p.into_inner())
}

/// The descriptor the taken signals arrive on (non-blocking), opened by the first [`install`]
/// and kept for the life of the process.
static ARRIVALS: OnceLock<SignalFd> = OnceLock::new();

/// Whether the signal thread runs ([`on_thread`]).
static THREAD: AtomicBool = AtomicBool::new(false);

/// Takes `signals` from now on: the first call blocks them in the calling thread (and so in
/// every thread it starts later) and opens the descriptor they arrive on; a later call does
/// nothing (see [the module](self)). Returns the signals taken. No thread is started: the
/// program's waits take them, or [`on_thread`].
pub fn install(signals: &[Signal]) -> std::io::Result<Vec<Signal>> {
    let mut t = taken();
    if let Some(t) = &*t {
        return Ok(t.set.iter().collect());
    }
    let mut set = SigSet::empty();
    for &s in signals {
        set.add(s);
    }
    let fd = SignalFd::with_flags(&set, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)
        .map_err(std::io::Error::from)?;
    set.thread_block().map_err(std::io::Error::from)?;
    let _ = ARRIVALS.set(fd);
    *t = Some(Taken {
        set,
        handlers: Vec::new(),
    });
    Ok(signals.to_vec())
}

/// Starts the signal thread (once; after [`install`]): it sleeps until a signal arrives and
/// hands it to its handler as it comes, for programs that block where they cannot look (see
/// [the module](self)). The waits of the other threads still take the signals they see first.
pub fn on_thread() -> std::io::Result<()> {
    if ARRIVALS.get().is_none() || THREAD.swap(true, Ordering::SeqCst) {
        return Ok(());
    }
    let started = std::thread::Builder::new()
        .name("signals".into())
        .spawn(|| loop {
            if let Some(fd) = ARRIVALS.get() {
                let mut p = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
                let _ = crate::fdwait::poll_until(&mut p, None);
            }
            take_pending();
        });
    if let Err(e) = started {
        THREAD.store(false, Ordering::SeqCst);
        return Err(e);
    }
    Ok(())
}

/// Hands every signal that has arrived to its handler, on this thread; returns at once when
/// none has (one `read(2)` of the non-blocking descriptor). Loops that never sleep call it as
/// they look at their peer.
pub fn take_pending() {
    let Some(fd) = ARRIVALS.get() else { return };
    while let Ok(Some(info)) = fd.read_signal() {
        if let Ok(sig) = Signal::try_from(info.ssi_signo as i32) {
            deliver(sig);
        }
    }
}

/// What a thread's waits watch besides their own descriptors (see [`look_while_waiting`]).
pub struct Watch {
    /// Descriptors whose readiness calls for a look. Owned here (a duplicate does: readiness
    /// belongs to the open file, not to the number), so they live as long as the watch.
    pub fds: Vec<OwnedFd>,
    /// Also look this often, for what has no descriptor to wait on (sysfs); `None`: only when
    /// one of `fds` is ready.
    pub every: Option<Duration>,
    /// The look. It must take what made its descriptors ready (or they wake the wait again at
    /// once), and it returns whether to keep watching: `false` once its source failed, so that
    /// a descriptor left ready for good does not wake every wait again.
    pub look: Rc<dyn Fn() -> bool>,
}

thread_local! {
    /// What this thread's waits watch, each with its guard's number.
    static WATCHES: RefCell<Vec<(u64, Rc<Watch>)>> = const { RefCell::new(Vec::new()) };
}

/// While the returned guard lives, every wait of this thread ([`poll_until`]) also waits on the
/// watch's descriptors and calls its look when one is ready, or every `every` (a run's device
/// events, which end the wait by waking the descriptor it waits on). A wait with nothing to look
/// at sleeps until it is woken: a wait that a clock woke would cost a peer sharing the CPU the
/// time of each wake-up (docs/benchmarks-deterministic.md).
pub fn look_while_waiting(watch: Watch) -> Looking {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    WATCHES.with(|l| l.borrow_mut().push((id, Rc::new(watch))));
    Looking { id }
}

/// See [`look_while_waiting`]: dropping it ends the looks.
pub struct Looking {
    id: u64,
}

impl Drop for Looking {
    fn drop(&mut self) {
        forget_watch(self.id);
    }
}

fn forget_watch(id: u64) {
    WATCHES.with(|l| l.borrow_mut().retain(|(i, _)| *i != id));
}

/// Sleeps in `poll(2)` as [`crate::fdwait::poll_until`] does, until one of `fds` is ready or
/// `deadline` passes; takes the signals that arrive meanwhile ([`take_pending`]; a handler that
/// stops a run wakes the descriptor it waits on) and looks at what the thread watches
/// ([`look_while_waiting`]) when it calls for it. Returns whether one of `fds` is ready.
pub fn poll_until(fds: &mut [PollFd<'_>], deadline: Option<Instant>) -> nix::Result<bool> {
    let ready = |p: &PollFd<'_>| p.revents().is_some_and(|r| !r.is_empty());
    loop {
        let watches: Vec<(u64, Rc<Watch>)> = WATCHES.with(|l| l.borrow().clone());
        let mut all = fds.to_vec();
        let signals_at = all.len();
        if let Some(fd) = ARRIVALS.get() {
            all.push(PollFd::new(fd.as_fd(), PollFlags::POLLIN));
        }
        let watched_at = all.len();
        for (_, w) in &watches {
            all.extend(
                w.fds
                    .iter()
                    .map(|fd| PollFd::new(fd.as_fd(), PollFlags::POLLIN)),
            );
        }
        let slice = watches
            .iter()
            .filter_map(|(_, w)| w.every)
            .min()
            .map(crate::fdwait::deadline_after);
        let until = match (slice, deadline) {
            (Some(s), Some(d)) => Some(s.min(d)),
            (s, d) => s.or(d),
        };
        crate::fdwait::poll_until(&mut all, until)?;
        let due = all[watched_at..].iter().any(ready) || slice.is_some_and(|s| Instant::now() >= s);
        if due {
            for (id, w) in &watches {
                if !(w.look)() {
                    forget_watch(*id);
                }
            }
        }
        if all[signals_at..watched_at].iter().any(ready) {
            take_pending();
        }
        if all[..signals_at].iter().any(ready) {
            drop(all);
            // The caller's own descriptors, for their `revents` (one more poll(2), only when
            // one is ready).
            if crate::fdwait::poll_until(fds, Some(Instant::now()))? {
                return Ok(true);
            }
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(false);
        }
    }
}

/// [`poll_until`] on one descriptor for reading: whether it is readable (or hung up) before
/// `deadline`.
pub fn wait_readable(fd: BorrowedFd<'_>, deadline: Option<Instant>) -> nix::Result<bool> {
    poll_until(&mut [PollFd::new(fd, PollFlags::POLLIN)], deadline)
}

/// Sleeps for `d`, taking the signals that arrive meanwhile ([`poll_until`] on nothing).
pub fn sleep(d: Duration) {
    let deadline = crate::fdwait::deadline_after(d);
    while Instant::now() < deadline {
        if poll_until(&mut [], Some(deadline)).is_err() {
            std::thread::sleep(deadline.saturating_duration_since(Instant::now()));
        }
    }
}

/// From now on `handler` gets each of `signals` that is taken (see [`install`], which must have
/// been called), before any handler registered earlier for it.
pub fn on(signals: &[Signal], handler: impl Fn(Signal) + Send + Sync + 'static) {
    if let Some(t) = &mut *taken() {
        t.handlers.insert(0, (signals.to_vec(), Arc::new(handler)));
    }
}

/// Hands `sig` to its handler, or ends the process as its default action would.
fn deliver(sig: Signal) {
    let handler = taken().as_ref().and_then(|t| {
        t.handlers
            .iter()
            .find(|(s, _)| s.contains(&sig))
            .map(|(_, h)| Arc::clone(h))
    });
    match handler {
        // Not under the lock: the handler may register, or take its time.
        Some(h) => h(sig),
        None => {
            let n = crate::mq::unlink_all_registered();
            if n > 0 {
                crate::eprintln_whole!("{}", crate::mq::removed_on_signal(sig, n));
            }
            die_of(sig)
        }
    }
}

/// Ends the process by `sig`'s default action, so that a parent sees "killed by SIGINT": the
/// calling thread (the one a handler runs on) unblocks it for itself and raises it.
pub fn die_of(sig: Signal) -> ! {
    let mut one = SigSet::empty();
    one.add(sig);
    let _ = one.thread_unblock();
    let _ = raise(sig);
    // Reached only if someone installed a handler that returned, or the signal is ignored.
    std::process::exit(128 + sig as i32)
}
