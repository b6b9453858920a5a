//! Lesson 14 on the host: nonsense flags are refused before any verbs call, with the reason and
//! exit status 2; without an RDMA device the lesson says so and how to get one (exit 1).

use std::process::{Command, Output};

const L14: &str = env!("CARGO_BIN_EXE_lesson14_tuning");

fn run(args: &[&str]) -> Output {
    Command::new(L14)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{L14} starts: {e}"))
}

#[test]
fn nonsense_flags_are_refused_with_the_reason() {
    for (args, reason) in [
        (&["-n", "10"][..], "-n 10: give 64 to 10000000 writes"),
        (&["-r", "0"][..], "-r 0: give 1 to 100 rounds"),
        (
            &["--pp-iters", "0"][..],
            "--pp-iters 0: give 1 to 1000000 round trips",
        ),
        (
            &["-u", "32"][..],
            "-u 32: give 0 to 31: the QP ack timeout is a 5-bit exponent",
        ),
        (
            &["--wait", "0"][..],
            "--wait 0: every wait needs at least 1 s",
        ),
    ] {
        let out = run(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(reason), "{args:?}: {err}");
    }
}

#[test]
fn without_a_device_it_says_how_to_get_one() {
    // The host of the test suite has no RDMA (the guest scenario 65 runs the lesson itself);
    // where a device exists this test has nothing to check.
    if std::path::Path::new("/sys/class/infiniband").exists() {
        return;
    }
    let out = run(&["-q"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("scripts/softroce-vm") || err.contains("softroce"),
        "{err}"
    );
}
