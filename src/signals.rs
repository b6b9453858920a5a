//! The process's one signal thread: the signals a program takes (SIGINT, SIGTERM, SIGHUP, the
//! workers' parent-death signal) are received with `sigwait(3)` on one thread, and handed to
//! the code that registered for them.
//!
//! A signal mask is the process's business — each thread inherits its creator's — so this is
//! the one process-wide piece: [`install`] blocks the signals in the calling thread and starts
//! the thread. **Call it first in `main`, before any other thread starts** (a thread started
//! earlier keeps its mask, and a signal delivered to it would end the process without
//! cleanup). Later calls share the thread; a signal they name that the first call did not take
//! keeps its default action. No async-signal handler: handlers run on the thread as ordinary
//! code (they may lock, format and print), so there is no async-signal-safety to get wrong and
//! no `unsafe`.
//!
//! Who wants a signal registers a handler ([`on`]); the one registered last for a signal gets
//! it — a tool's clean stop before the message queues' cleanup it replaces. A handler that
//! returns has dealt with the signal; one that wants the default action ends with [`die_of`].
//! A signal no one handles ends the process as its default action would, after the message
//! queues this process created are removed ([`crate::mq::unlink_all_registered`]).

use std::sync::{Arc, Mutex};

use nix::sys::signal::{raise, SigSet, Signal};

/// What a handler does with a signal, on the signal thread.
type Handler = Arc<dyn Fn(Signal) + Send + Sync>;

/// The signals the thread takes (once started) and the handlers, last registered first.
struct Taken {
    set: SigSet,
    handlers: Vec<(Vec<Signal>, Handler)>,
}

static TAKEN: Mutex<Option<Taken>> = Mutex::new(None);

fn taken() -> std::sync::MutexGuard<'static, Option<Taken>> {
    // A handler that panicked leaves a usable list: keep going.
    TAKEN.lock().unwrap_or_else(|p| p.into_inner())
}

/// Takes `signals` on the process's signal thread from now on: the first call blocks them in
/// the calling thread (and so in every thread it starts later) and starts the thread; a later
/// call does nothing (see [the module](self)). Returns the signals the thread takes.
pub fn install(signals: &[Signal]) -> std::io::Result<Vec<Signal>> {
    let mut t = taken();
    if let Some(t) = &*t {
        return Ok(t.set.iter().collect());
    }
    let mut set = SigSet::empty();
    for &s in signals {
        set.add(s);
    }
    set.thread_block().map_err(std::io::Error::from)?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || loop {
            if let Ok(sig) = set.wait() {
                deliver(sig);
            }
        })?;
    *t = Some(Taken {
        set,
        handlers: Vec::new(),
    });
    Ok(signals.to_vec())
}

/// From now on `handler` gets each of `signals` that the signal thread takes (see [`install`],
/// which must have been called), before any handler registered earlier for it.
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
/// signal thread unblocks it for itself and raises it. Call it on the signal thread only.
pub fn die_of(sig: Signal) -> ! {
    let mut one = SigSet::empty();
    one.add(sig);
    let _ = one.thread_unblock();
    let _ = raise(sig);
    // Reached only if someone installed a handler that returned, or the signal is ignored.
    std::process::exit(128 + sig as i32)
}
