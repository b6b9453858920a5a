//! A reader that goes away (`vl_jsoncheck report.json | head -0`): the tool ends quietly with
//! status 0, as the lessons and the collectives do, instead of panicking on `EPIPE`.

use std::os::fd::OwnedFd;
use std::process::{Command, Stdio};

/// Runs `bin args` with a stdout whose reader is already gone: every write fails with `EPIPE`.
fn with_closed_stdout(bin: &str, args: &[&str]) -> std::process::Output {
    let (read, write): (OwnedFd, OwnedFd) = nix::unistd::pipe().unwrap();
    drop(read);
    Command::new(bin)
        .args(args)
        .stdout(Stdio::from(write))
        .stderr(Stdio::piped())
        .output()
        .unwrap()
}

#[test]
fn vl_jsoncheck_ends_quietly_when_its_reader_is_gone() {
    let report = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/bw_sweep.json");
    let o = with_closed_stdout(env!("CARGO_BIN_EXE_vl_jsoncheck"), &[report]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(err.is_empty(), "stderr: {err}");
}
