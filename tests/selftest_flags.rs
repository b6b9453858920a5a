//! `vl_selftest -s` reads a size the one way every lesson does (`verbs_lab::cli::SizeRange`):
//! digits with an optional K, M or G, 1 to 8K (half its buffer). Outside that, or not a size,
//! it is a usage error (exit 2) naming the flag, what is wrong and the range; within it the
//! size gets past the flags, to the device (which this test names wrongly on purpose: exit 1).

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_vl_selftest");

fn run(args: &[&str]) -> (Option<i32>, String) {
    let o = Command::new(BIN)
        .args(args)
        .output()
        .expect("vl_selftest runs");
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn sizes_are_taken_with_suffixes_within_half_the_buffer() {
    let (code, help) = {
        let o = Command::new(BIN).arg("--help").output().unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
        )
    };
    assert_eq!(code, Some(0));
    assert!(help.contains("1 to 8K (suffixes K, M, G)"), "{help}");
    for (size, why) in [
        ("0", "too small"),
        ("8193", "too large"),
        ("16K", "too large"),
        ("1.5K", "expected a whole number"),
    ] {
        let (code, err) = run(&["-s", size]);
        assert_eq!(code, Some(2), "-s {size}: {err}");
        let want =
            format!("vl_selftest: error: -s {size}: {why}; give 1 to 8K bytes (digits, optionally");
        assert!(err.starts_with(&want), "expected '{want}' in: {err}");
    }
    for size in ["4000", "4K", "8k", "8192"] {
        let (code, err) = run(&["-s", size, "--dev-a", "nosuchdev0"]);
        assert_eq!(code, Some(1), "-s {size}: {err}");
        assert!(!err.contains("-s "), "-s {size} was refused: {err}");
    }
}

#[test]
fn the_qp_timeout_and_the_port_are_checked_as_every_tool_checks_them() {
    for (args, want) in [
        (
            ["-u", "99"],
            "vl_selftest: error: -u 99: give 0 to 31: the QP ack timeout is a 5-bit exponent",
        ),
        (
            ["-i", "0"],
            "vl_selftest: error: -i 0: give 1 to 255: ports are numbered from 1",
        ),
        (
            ["--dev-a", ""],
            "vl_selftest: error: a value is required for '--dev-a",
        ),
    ] {
        let (code, err) = run(&args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(
            err.starts_with(want),
            "{args:?}: expected '{want}' in: {err}"
        );
    }
}

/// `-V` and `--help` name the binary, as every tool's do (not the package, `verbs-lab`).
#[test]
fn version_and_usage_name_the_tool() {
    let o = Command::new(BIN).arg("-V").output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        format!("vl_selftest {}\n", env!("CARGO_PKG_VERSION"))
    );
    let help = Command::new(BIN).arg("--help").output().unwrap();
    assert!(String::from_utf8_lossy(&help.stdout).contains("Usage: vl_selftest "));
}
