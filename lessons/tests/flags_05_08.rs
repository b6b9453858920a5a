//! Lessons 05–08 refuse nonsense flags before any verbs call, so these tests need no RDMA
//! device: the refusal is a usage error (exit 2) that names the flag and the reason, and no
//! lesson step has started.

use std::process::{Command, Output};

const L05: &str = env!("CARGO_BIN_EXE_lesson05_rdma_write");
const L06: &str = env!("CARGO_BIN_EXE_lesson06_rdma_read");
const L07: &str = env!("CARGO_BIN_EXE_lesson07_events");
const L08: &str = env!("CARGO_BIN_EXE_lesson08_atomics");

fn run(bin: &str, args: &[&str]) -> Output {
    Command::new(bin)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{bin} runs: {e}"))
}

/// The command must be refused as a usage error (exit 2) whose message contains `why`, before
/// the first narrated step (so before any verbs call).
fn assert_refused(bin: &str, args: &[&str], why: &str) {
    let o = run(bin, args);
    let err = String::from_utf8_lossy(&o.stderr);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(2),
        "{bin} {args:?}: exit status; stderr: {err}"
    );
    assert!(
        err.contains(why),
        "{bin} {args:?}: expected '{why}' in: {err}"
    );
    assert!(
        !out.contains("[1]") && !err.contains("ibv_") && !err.contains("RDMA device"),
        "{bin} {args:?}: a step ran before the refusal: {out}{err}"
    );
}

// Sizes on their own: tests/sizes.rs.

#[test]
fn reads_side_by_side_beyond_the_registered_buffer_are_refused() {
    // Every read of a round has its own slice of the buffer: size x outstanding must fit.
    assert_refused(
        L06,
        &["-s", "64K", "-o", "32", "somehost"],
        "-s 65536 x -o 32 = 2097152 bytes: larger than the 1048576-byte buffer",
    );
}

#[test]
fn counts_of_zero_are_refused() {
    assert_refused(L05, &["-n", "0"], "-n 0: give 1 to");
    assert_refused(
        L06,
        &["-o", "0"],
        "-o 0: between 1 and 255 reads can be outstanding",
    );
    assert_refused(L06, &["-o", "256"], "-o 256: between 1 and 255");
    assert_refused(L06, &["-n", "0"], "-n 0: give 1 to");
    assert_refused(L07, &["-n", "0"], "-n 0: give 1 to");
    assert_refused(L08, &["-n", "0", "somehost"], "-n 0: give 1 to");
    assert_refused(
        L08,
        &["--clients", "0"],
        "--clients 0: give 1 to 16 clients",
    );
}

#[test]
fn unusable_gid_index_and_qp_timeout_are_refused() {
    for bin in [L05, L06, L07, L08] {
        assert_refused(
            bin,
            &["-g", "300"],
            "-g 300: unusable GID index: the source GID index of an address vector is 8 bits",
        );
        assert_refused(
            bin,
            &["-u", "32"],
            "-u 32: give 0 to 31: the QP ack timeout is a 5-bit exponent",
        );
        assert_refused(bin, &["--wait", "0"], "--wait 0");
    }
}

#[test]
fn flags_of_the_other_side_are_refused() {
    assert_refused(
        L05,
        &["--bad-rkey"],
        "--bad-rkey is a client flag: the writer is the one that names the rkey",
    );
    assert_refused(
        L05,
        &["--no-write-access=qp", "somehost"],
        "--no-write-access is a server flag: the target decides what it allows",
    );
    assert_refused(L05, &["--no-write-access=rkey"], "--no-write-access");
    assert_refused(
        L06,
        &["--bad-rkey"],
        "--bad-rkey is a client flag: the reader is the one that names the rkey",
    );
    assert_refused(L07, &["--show-race"], "--show-race is a client flag");
    assert_refused(
        L07,
        &["--think", "1000001", "somehost"],
        "--think 1000001: give 0 to 1000000 µs",
    );
    assert_refused(L08, &["--show-errors"], "--show-errors is a client flag");
    assert_refused(L08, &["-n", "5"], "-n is a client flag");
    assert_refused(
        L08,
        &["--clients", "2", "somehost"],
        "--clients, --initial and --no-atomic-access are server flags",
    );
    assert_refused(L08, &["--no-atomic-access", "somehost"], "are server flags");
}

#[test]
fn notification_modes_are_named_in_the_refusal() {
    let o = run(L05, &["--notify", "pigeon"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("[possible values: imm, flag]"), "{err}");
}

#[test]
fn good_flags_get_as_far_as_the_device() {
    // Valid flags pass the checks: the lesson then fails at a later step — on a machine without
    // RDMA at the device, elsewhere after waiting 1 s for a client — with exit 1, not 2.
    let o = run(
        L05,
        &[
            "-s", "4096", "-n", "2", "--notify", "flag", "-q", "-p", "47123", "--wait", "1",
        ],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("lesson05_rdma_write: error: "), "{err}");
}
