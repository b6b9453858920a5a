//! Lesson 13 refuses nonsense flags before any rdma_cm call (exit 2, naming the flag), and on a
//! machine without RDMA it says what is missing and how to get it (exit 1), without hanging.

use std::process::Command;
use std::time::{Duration, Instant};

const L13: &str = env!("CARGO_BIN_EXE_lesson13_rdma_cm");

fn run(args: &[&str]) -> (Option<i32>, String, String) {
    let o = Command::new(L13)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{L13} runs: {e}"));
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn depths_and_counts_are_bounded() {
    let (code, _, err) = run(&["--initiator-depth", "17", "192.168.77.1"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--initiator-depth"), "{err}");
    let (code, _, err) = run(&["-C", "0", "192.168.77.1"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--count"), "{err}");
    let (code, _, err) = run(&["-p", "0"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("-p 0: give 1 to 65535"), "{err}");
}

#[test]
fn a_bad_host_name_is_named() {
    let (code, _, err) = run(&["-q", "no.such.host.invalid"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("'no.such.host.invalid' is not an address or a known host name")
            || err.contains("rdma_create_event_channel"),
        "{err}"
    );
}

#[test]
fn without_rdma_the_server_says_what_is_missing_at_once() {
    if std::path::Path::new("/dev/infiniband/rdma_cm").exists() {
        return; // a machine with RDMA: the server would listen; the guest scenarios cover it
    }
    let t0 = Instant::now();
    let (code, _, err) = run(&["-q", "--wait", "5"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("rdma_create_event_channel failed"), "{err}");
    assert!(err.contains("rdma_ucm"), "{err}");
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "took {:?}",
        t0.elapsed()
    );
}
