//! Lessons 11 and 12 refuse nonsense flags before any verbs call, so these tests need no RDMA
//! device: a usage error (exit 2) that names the flag and the reason.

use std::process::Command;

const L11: &str = env!("CARGO_BIN_EXE_lesson11_ud");
const L12: &str = env!("CARGO_BIN_EXE_lesson12_srq_events");

/// The command must exit 2 with `why` in its stderr, before the first narrated step.
fn assert_refused(bin: &str, args: &[&str], why: &str) {
    let o = Command::new(bin)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{bin} runs: {e}"));
    let err = String::from_utf8_lossy(&o.stderr);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(2), "{bin} {args:?}: stderr: {err}");
    assert!(
        err.contains(why),
        "{bin} {args:?}: expected '{why}' in: {err}"
    );
    assert!(
        !out.contains("[1]"),
        "{bin} {args:?}: a step ran first: {out}"
    );
}

#[test]
fn ud_common_flags_are_checked() {
    assert_refused(
        L11,
        &["-i", "0"],
        "-i 0: give 1 to 255: ports are numbered from 1",
    );
}

#[test]
fn each_lesson_keeps_its_own_range_of_receives() {
    for (bin, r, max) in [
        (L11, "0", 1_000_000),
        (L11, "1", 1_000_000),
        (L11, "1000001", 1_000_000),
        (L12, "0", 16384),
        (L12, "1", 16384),
        (L12, "16385", 16384),
    ] {
        assert_refused(
            bin,
            &["-r", r],
            &format!("-r {r}: give 2 to {max} receives to post"),
        );
    }
}

#[test]
fn srq_needs_a_receive_per_qp_and_a_limit_below_its_size() {
    assert_refused(
        L12,
        &["--num-qp", "32", "-r", "16"],
        "--num-qp 32 with -r 16: the SRQ needs at least one receive per QP",
    );
    assert_refused(
        L12,
        &["-r", "100", "--srq-limit", "100"],
        "--srq-limit 100: must be below -r 100",
    );
    assert_refused(L12, &["--num-qp", "256"], "256");
}
