//! Lessons 02–04 refuse nonsense flags before touching the verbs layer, so these tests need no
//! RDMA device: the refusal names the flag and the reason, and no lesson step has started.

use std::process::{Command, Output};

const L02: &str = env!("CARGO_BIN_EXE_lesson02_resources");
const L03: &str = env!("CARGO_BIN_EXE_lesson03_connect");
const L04: &str = env!("CARGO_BIN_EXE_lesson04_send_recv");

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
        "{args:?}: exit status; stderr: {err}"
    );
    assert!(err.contains(why), "{args:?}: expected '{why}' in: {err}");
    assert!(
        !out.contains("[1]") && !err.contains("ibv_"),
        "{args:?}: a step ran before the refusal: {out}{err}"
    );
}

#[test]
fn lesson04_refuses_zero_iterations_and_zero_rx_depth() {
    assert_refused(L04, &["-n", "0"], "--iters 0: give 1 to 100000000");
    for r in ["0", "1000001"] {
        assert_refused(
            L04,
            &["-r", r],
            &format!("-r {r}: give 1 to 1000000 receives to post"),
        );
    }
}

#[test]
fn lesson04_checks_the_common_flags_before_the_device() {
    assert_refused(
        L04,
        &["-u", "32"],
        "-u 32: give 0 to 31: the QP ack timeout is a 5-bit exponent",
    );
    assert_refused(
        L04,
        &["-i", "0"],
        "-i 0: give 1 to 255: ports are numbered from 1",
    );
    for l in [L03, L04] {
        assert_refused(
            l,
            &["-p", "0"],
            "-p 0: give 1 to 65535: the same port on both sides (0 would listen on a port the \
             kernel picks",
        );
    }
    assert_refused(
        L04,
        &["--wait", "0"],
        "--wait 0: every wait needs at least 1 s",
    );
}

#[test]
fn bad_mtus_are_refused_with_the_valid_ones() {
    for bin in [L03, L04] {
        for bad in ["1500", "0", "big"] {
            assert_refused(
                bin,
                &["-m", bad],
                "is not an MTU: use 256, 512, 1024, 2048 or 4096",
            );
        }
    }
}

#[test]
fn lesson02_refuses_empty_buffers_and_queues() {
    assert_refused(L02, &["--cqe", "0"], "--cqe 0: give 1 to 4294967295");
}

#[test]
fn lesson02_takes_no_host() {
    assert_refused(L02, &["192.168.77.1"], "unexpected argument '192.168.77.1'");
}

#[test]
fn unknown_flags_are_refused() {
    for bin in [L02, L03, L04] {
        assert_refused(bin, &["--frobnicate"], "unexpected argument '--frobnicate'");
    }
}

#[test]
fn help_lists_the_rc_pingpong_flags() {
    let o = run(L04, &["--help"]);
    assert!(o.status.success());
    let help = String::from_utf8_lossy(&o.stdout);
    for flag in [
        "-p, --port",
        "-d, --ib-dev",
        "-i, --ib-port",
        "-s, --size",
        "-n, --iters",
        "-g, --gid-idx",
        "-m, --mtu",
        "-r, --rx-depth",
        "--show-rnr",
        "-q, --quiet",
    ] {
        assert!(help.contains(flag), "--help lacks {flag}: {help}");
    }
    for default in [
        "[default: 18515]",
        "[default: 4096]",
        "[default: 1000]",
        "[default: 500]",
        "[default: 1024]",
    ] {
        assert!(help.contains(default), "--help lacks {default}");
    }
}

#[test]
fn lesson03_checks_the_common_flags_before_the_device() {
    // Lesson 03 used to take any -u (a 5-bit field) and -g without a word.
    for u in ["32", "99"] {
        assert_refused(
            L03,
            &["-u", u],
            &format!("-u {u}: give 0 to 31: the QP ack timeout is a 5-bit exponent"),
        );
    }
    assert_refused(L03, &["-g", "300"], "-g 300: unusable GID index");
    assert_refused(L03, &["-i", "300"], "-i 300: give 1 to 255");
    assert_refused(
        L03,
        &["-p", "x"],
        "-p x: give 1 to 65535: the same port on both sides",
    );
    assert_refused(L03, &[""], "a value is required");
}
