//! The signals are taken where the program waits (`verbs_lab::signals`): no thread of their own
//! unless asked for. No test harness (Cargo.toml: `harness = false`): the signal mask and the
//! descriptor are the process's, so the steps run in order on the main thread, which blocks the
//! signal before any thread starts — as a program's `main` does.

use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::{raise, Signal};
use verbs_lab::signals;

/// The threads of this process, from /proc.
fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

fn main() {
    let sig = Signal::SIGUSR2;
    signals::install(&[sig]).unwrap();
    let got = Arc::new(AtomicUsize::new(0));
    let (ours, theirs) = UnixStream::pair().unwrap();
    let seen = got.clone();
    let to_wake = theirs.try_clone().unwrap();
    signals::on(&[sig], move |s| {
        assert_eq!(s, Signal::SIGUSR2);
        seen.fetch_add(1, Ordering::SeqCst);
        // What a tool's stop does: wakes the descriptor a wait is on.
        let _ = to_wake.shutdown(std::net::Shutdown::Write);
    });
    let before = threads();

    // Blocked and pending: nothing happens until someone takes it.
    raise(sig).unwrap();
    assert_eq!(got.load(Ordering::SeqCst), 0, "handled before it was taken");
    signals::take_pending();
    assert_eq!(got.load(Ordering::SeqCst), 1);
    signals::take_pending();
    assert_eq!(got.load(Ordering::SeqCst), 1, "taken twice");
    assert_eq!(threads(), before, "a thread was started to take it");

    // A wait takes a signal that arrives during it; the handler's wake ends the wait.
    let (mut ours2, theirs2) = UnixStream::pair().unwrap();
    drop(theirs2);
    let mut sink = [0u8; 8];
    assert_eq!(ours2.read(&mut sink).unwrap(), 0);
    raise(sig).unwrap();
    let start = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(20);
    let ready = signals::wait_readable(ours.as_fd(), Some(deadline)).unwrap();
    assert!(ready, "the wait ended without its descriptor ready");
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "the wait did not take the signal"
    );
    assert_eq!(got.load(Ordering::SeqCst), 2);

    // A wait with nothing to take ends at its deadline. What the thread watches wakes it only
    // when its descriptor is ready (or on its clock, if it has one): the look takes what
    // arrived, and the wait goes on until its own descriptor or deadline.
    let (quiet, _peer) = UnixStream::pair().unwrap();
    let (watched, mut poke) = UnixStream::pair().unwrap();
    watched.set_nonblocking(true).unwrap();
    let looks = Rc::new(std::cell::Cell::new(0u32));
    let counted = looks.clone();
    let reader = watched.try_clone().unwrap();
    let looking = signals::look_while_waiting(signals::Watch {
        fds: vec![watched.as_fd().try_clone_to_owned().unwrap()],
        every: None,
        look: Rc::new(move || {
            counted.set(counted.get() + 1);
            let _ = (&reader).read(&mut [0u8; 16]);
            true
        }),
    });
    let wait = Duration::from_millis(300);
    let start = Instant::now();
    let ready = signals::wait_readable(quiet.as_fd(), Some(start + wait)).unwrap();
    assert!(!ready);
    assert!(
        start.elapsed() >= wait,
        "ended {:?} early",
        wait - start.elapsed()
    );
    assert_eq!(looks.get(), 0, "looked with nothing to look at");
    poke.write_all(b"x").unwrap();
    let ready = signals::wait_readable(quiet.as_fd(), Some(Instant::now() + wait)).unwrap();
    assert!(!ready, "the watch's descriptor ended the wait");
    assert_eq!(looks.get(), 1, "looked {} times at one byte", looks.get());
    drop(looking);
    poke.write_all(b"y").unwrap();
    let _ = signals::wait_readable(quiet.as_fd(), Some(Instant::now() + wait));
    assert_eq!(looks.get(), 1, "looked after the guard was dropped");

    // A watch on the clock looks every `every`; one whose look gives up is not looked at again,
    // though its descriptor stays ready.
    let ticks = Rc::new(std::cell::Cell::new(0u32));
    let counted = ticks.clone();
    let _clock = signals::look_while_waiting(signals::Watch {
        fds: Vec::new(),
        every: Some(Duration::from_millis(50)),
        look: Rc::new(move || {
            counted.set(counted.get() + 1);
            true
        }),
    });
    let gave_up = Rc::new(std::cell::Cell::new(0u32));
    let counted = gave_up.clone();
    let _failed = signals::look_while_waiting(signals::Watch {
        fds: vec![watched.as_fd().try_clone_to_owned().unwrap()],
        every: None,
        look: Rc::new(move || {
            counted.set(counted.get() + 1);
            false
        }),
    });
    let _ = signals::wait_readable(quiet.as_fd(), Some(Instant::now() + wait));
    assert!(
        ticks.get() >= 3,
        "looked {} times in {wait:?} on a 50 ms clock",
        ticks.get()
    );
    assert_eq!(gave_up.get(), 1, "a watch that gave up was looked at again");

    // The signal thread, when asked for, takes them with no one waiting.
    signals::on_thread().unwrap();
    assert_eq!(threads(), before + 1);
    // Sent to the process (raise() would pick this thread, whose own signals the other
    // thread's read does not see); every thread blocks it, so only the descriptor has it.
    nix::sys::signal::kill(nix::unistd::Pid::this(), sig).unwrap();
    let end = Instant::now() + Duration::from_secs(20);
    while got.load(Ordering::SeqCst) < 3 && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(
        got.load(Ordering::SeqCst),
        3,
        "the signal thread did not take it"
    );
    drop(theirs);
    println!("signals_taken: ok (taken by take_pending, by a wait, by the signal thread)");
}
