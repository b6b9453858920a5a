//! A helper thread that lives as long as its guard: the thread sleeps in `poll(2)` with the
//! read end of a socket pair among its descriptors; dropping the [`Background`] guard closes
//! the other end, which makes that descriptor readable (end of file), so the thread wakes at
//! once and returns, and the drop waits for it.
//!
//! Used by the listener that turns away further clients during a run
//! ([`crate::oob::Refuser`]).

use std::io;
use std::os::unix::net::UnixStream;
use std::thread::JoinHandle;

/// A running helper thread; dropping this wakes it (see the module's text) and joins it.
pub struct Background {
    stop: Option<UnixStream>,
    thread: Option<JoinHandle<()>>,
}

impl Background {
    /// Starts `body` on a thread called `name`, handing it the end of the socket pair that
    /// turns readable when this guard is dropped: `body` polls it beside its own descriptors
    /// and returns when it is readable.
    pub fn spawn(
        name: &str,
        body: impl FnOnce(UnixStream) + Send + 'static,
    ) -> io::Result<Background> {
        let (stop, stopped) = UnixStream::pair()?;
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || body(stopped))?;
        Ok(Background {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        // Closing our end makes the thread's end readable (end of file): it wakes and returns.
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    #[test]
    fn dropping_the_guard_wakes_and_joins_the_thread() {
        let ended = Arc::new(AtomicBool::new(false));
        let seen = ended.clone();
        let guard = Background::spawn("test", move |mut stopped| {
            // Blocks until the guard's end is closed: then read returns 0 (end of file).
            let n = stopped.read(&mut [0u8; 1]).unwrap();
            assert_eq!(n, 0);
            seen.store(true, Ordering::SeqCst);
        })
        .unwrap();
        assert!(!ended.load(Ordering::SeqCst));
        drop(guard);
        assert!(
            ended.load(Ordering::SeqCst),
            "drop returned before the thread ended"
        );
    }
}
