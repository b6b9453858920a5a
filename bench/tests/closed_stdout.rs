//! A reader that goes away (`vl_jsoncheck report.json | head -0`): the tool ends quietly with
//! status 0, as the lessons and the collectives do, instead of panicking on `EPIPE`; a stdout
//! that cannot be written otherwise (`> /dev/full`) is an error with status 1, not a panic.

use std::os::fd::OwnedFd;
use std::process::{Command, Stdio};

/// Runs `bin args` with `stdout` and returns what it did.
fn run_with(bin: &str, args: &[&str], stdout: Stdio) -> std::process::Output {
    Command::new(bin)
        .args(args)
        .stdout(stdout)
        .stderr(Stdio::piped())
        .output()
        .unwrap()
}

/// Runs `bin args` with a stdout whose reader is already gone: every write fails with `EPIPE`.
fn with_closed_stdout(bin: &str, args: &[&str]) -> std::process::Output {
    let (read, write): (OwnedFd, OwnedFd) = nix::unistd::pipe().unwrap();
    drop(read);
    run_with(bin, args, Stdio::from(write))
}

#[test]
fn vl_jsoncheck_ends_quietly_when_its_reader_is_gone() {
    let report = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../perftest/tests/golden/bw_sweep.json"
    );
    let o = with_closed_stdout(env!("CARGO_BIN_EXE_vl_jsoncheck"), &[report]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(err.is_empty(), "stderr: {err}");
}

/// Runs `bin args` with stdout on `/dev/full`: every write fails with `ENOSPC`.
fn with_full_stdout(bin: &str, args: &[&str]) -> std::process::Output {
    let full = std::fs::OpenOptions::new().write(true).open("/dev/full");
    run_with(bin, args, Stdio::from(full.unwrap()))
}

#[test]
fn a_stdout_that_cannot_be_written_is_an_error_not_a_panic() {
    let report = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../perftest/tests/golden/bw_sweep.json"
    );
    let o = with_full_stdout(env!("CARGO_BIN_EXE_vl_jsoncheck"), &[report]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.starts_with("vl_jsoncheck: error: cannot write to stdout: No space left on device"),
        "stderr: {err}"
    );
    assert!(!err.contains("panicked"), "stderr: {err}");
}
