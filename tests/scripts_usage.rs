//! The host scripts refuse a bad command line with exit status 2 and a message that names what
//! was wrong, before they build, install or boot anything (1 and 125 mean other things).

use std::process::Command;

/// Runs `scripts/SCRIPT ARGS…` with `env` and returns its status and stderr.
fn run(script: &str, args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let out = Command::new(format!("{}/scripts/{script}", env!("CARGO_MANIFEST_DIR")))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("the script runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A bad command line: the script, its arguments, its environment, what its error must say.
type Case = (
    &'static str,
    &'static [&'static str],
    &'static [(&'static str, &'static str)],
    &'static str,
);

#[test]
fn bad_command_lines_exit_2_and_say_why() {
    let cases: &[Case] = &[
        ("softroce-vm", &["bogus"], &[], "unknown command 'bogus'"),
        (
            "softroce-vm",
            &["run", "--timeout", "0", "--", "true"],
            &[],
            "at least 1 (got '0')",
        ),
        (
            "softroce-vm",
            &["run", "--timeout=abc", "--", "true"],
            &[],
            "(got 'abc')",
        ),
        (
            "softroce-vm",
            &["run", "--", "true"],
            &[("VL_VM_TIMEOUT", "0")],
            "VL_VM_TIMEOUT",
        ),
        (
            "softroce-vm",
            &["run", "--bogus"],
            &[],
            "the command goes after --",
        ),
        ("softroce-vm", &["run"], &[], "no command given"),
        (
            "softroce-vm",
            &["test", "--filter", "("],
            &[],
            "not an extended regular expression",
        ),
        (
            "softroce-vm",
            &["test", "--timeout", "0"],
            &[],
            "at least 1",
        ),
        ("softroce-vm", &["test", "--load", "17"], &[], "0 to 16"),
        (
            "softroce-vm",
            &["demo", "extra"],
            &[],
            "unknown argument 'extra'",
        ),
        ("test", &["--bogus"], &[], "unknown argument '--bogus'"),
        (
            "test",
            &["--host-only", "--guest-only"],
            &[],
            "exclude each other",
        ),
        ("install", &["--bogus"], &[], "unknown option '--bogus'"),
        ("install", &["a", "b"], &[], "one PREFIX only"),
        (
            "softroce-up",
            &["--bogus"],
            &[],
            "unknown argument '--bogus'",
        ),
        ("check-packages", &["x"], &[], "unknown argument 'x'"),
        (
            "bench-vs-perftest",
            &["--runs", "0"],
            &[],
            "--runs needs a positive number",
        ),
        ("bench-vs-perftest", &["--timeout", "0"], &[], "at least 1"),
        (
            "bench-vs-perftest",
            &["--only", "no_such_row"],
            &[],
            "--only: no row 'no_such_row'",
        ),
        (
            "bench-vs-perftest",
            &["--report-only", "/nonexistent"],
            &[],
            "no directory /nonexistent",
        ),
        (
            "bench-coll-vs-mpi",
            &["-f", "1"],
            &[],
            "-f needs a factor >= 2",
        ),
        (
            "bench-coll-vs-mpi",
            &["bogus"],
            &[],
            "unknown argument 'bogus'",
        ),
    ];
    for (script, args, env, says) in cases {
        let (code, err) = run(script, args, env);
        assert_eq!(
            code,
            Some(2),
            "{script} {args:?}: exit {code:?}, stderr: {err}"
        );
        assert!(
            err.starts_with(&format!("{script}: error: ")) && err.contains(says),
            "{script} {args:?}: {err}"
        );
    }
}
