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
fn ud_messages_are_at_most_one_4096_byte_mtu() {
    assert_refused(L11, &["-s", "4097"], "4097");
    assert_refused(L11, &["-s", "0"], "0");
}

#[test]
fn ud_common_flags_are_checked() {
    assert_refused(L11, &["-i", "0"], "-i 0: ports are numbered from 1");
}

#[test]
fn each_lesson_keeps_its_own_range_of_receives() {
    assert_refused(
        L11,
        &["-r", "1"],
        "-r 1: this lesson keeps 2 to 1000000 receives posted",
    );
    assert_refused(
        L12,
        &["-r", "1"],
        "-r 1: this lesson keeps 2 to 16384 receives posted",
    );
    assert_refused(
        L12,
        &["-r", "16385"],
        "-r 16385: this lesson keeps 2 to 16384 receives posted",
    );
    for bin in [L11, L12] {
        assert_refused(
            bin,
            &["-r", "0"],
            "invalid value '0' for '--rx-depth <RX_DEPTH>'",
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
