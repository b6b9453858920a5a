//! What the lesson tests that run a binary share: running it with every wait bounded.

use std::io::Read;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Runs a lesson to completion, killing it after `limit`.
pub fn run_bounded(bin: &str, args: &[&str], limit: Duration) -> (Output, Duration) {
    let t0 = Instant::now();
    let mut child = Command::new(bin)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{bin} starts: {e}"));
    let (out, err) = drain(&mut child);
    let status = wait_bounded(&mut child, limit.saturating_sub(t0.elapsed()));
    let output = Output {
        status,
        stdout: out.recv().unwrap(),
        stderr: err.recv().unwrap(),
    };
    (output, t0.elapsed())
}

/// Reads the child's stdout and stderr on threads (so neither pipe fills up).
fn drain(child: &mut Child) -> (mpsc::Receiver<Vec<u8>>, mpsc::Receiver<Vec<u8>>) {
    let spawn = |mut r: Box<dyn Read + Send>| {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = r.read_to_end(&mut v);
            let _ = tx.send(v);
        });
        rx
    };
    (
        spawn(Box::new(child.stdout.take().unwrap())),
        spawn(Box::new(child.stderr.take().unwrap())),
    )
}

/// Waits for `child` at most `limit`; past it, kills and reaps the child and fails the test.
pub fn wait_bounded(child: &mut Child, limit: Duration) -> ExitStatus {
    let t0 = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st;
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("still running after {limit:?}: killed");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
