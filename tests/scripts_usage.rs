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

/// A directory that is no bench script's run directory (cargo's scratch directory for tests).
const NOT_A_RUN: &str = env!("CARGO_TARGET_TMPDIR");

#[test]
fn bad_command_lines_exit_2_and_say_why() {
    let cases: &[Case] = &[
        ("softroce-vm", &["bogus"], &[], "unknown command 'bogus'"),
        ("softroce-vm", &["cluster", "run"], &[], "no command given"),
        (
            "softroce-vm",
            &["cluster", "run", "--nodes", "9", "--", "true"],
            &[],
            "--nodes must be 2 to 8 (got '9')",
        ),
        (
            "softroce-vm",
            &["cluster", "run", "--topology", "ring", "--", "true"],
            &[],
            "--topology must be flat or leaf-spine (got 'ring')",
        ),
        (
            "softroce-vm",
            &["cluster", "shell", "--nodes", "2", "node3"],
            &[],
            "no node 'node3' in a cluster of 2",
        ),
        (
            "softroce-vm",
            &["cluster", "test", "--filter", "no-such-scenario"],
            &[],
            "no scenario matches",
        ),
        (
            "softroce-vm",
            &["cluster", "bogus"],
            &[],
            "unknown command 'bogus'",
        ),
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
        // A flag whose value is missing at the end of the line.
        ("softroce-vm", &["test", "--load"], &[], "--load needs"),
        ("softroce-vm", &["test", "--timeout"], &[], "at least 1"),
        (
            "softroce-vm",
            &["demo", "--timeout"],
            &[],
            "--timeout needs",
        ),
        (
            "softroce-vm",
            &["test", "--filter", "^no-such-scenario$"],
            &[],
            "no scenario matches",
        ),
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
        (
            "bench-coll-vs-mpi",
            &["--per-node", "2"],
            &[],
            "--per-node is for --cluster",
        ),
        (
            "bench-coll-vs-mpi",
            &["--cluster", "--per-node", "9"],
            &[],
            "--per-node needs 1 to 4 ranks",
        ),
        (
            "bench-vs-perftest",
            &["--deterministic", "--cluster"],
            &[],
            "--cluster and --deterministic exclude each other",
        ),
        (
            "bench-vs-perftest",
            &["--deterministic", "--only", "write_lat"],
            &[],
            "--deterministic: row 'write_lat' is not a bandwidth, message-rate or event-mode latency row",
        ),
        (
            "bench-vs-perftest",
            &["--tolerance", "3"],
            &[],
            "--tolerance is the gate's: give --gate BASELINE too",
        ),
        (
            "bench-vs-perftest",
            &["--gate", "/nonexistent.json"],
            &[],
            "--gate needs a baseline file",
        ),
        (
            "bench-vs-perftest",
            &["--docs", "--no-docs"],
            &[],
            "--docs and --no-docs exclude each other",
        ),
        (
            "bench-vs-perftest",
            &["--no-docs", "--quick", "--docs"],
            &[],
            "--docs and --no-docs exclude each other",
        ),
        (
            "bench-vs-perftest",
            &["--report-only", NOT_A_RUN, "--sweep"],
            &[],
            "--report-only rebuilds the report of an earlier run: --sweep does not apply",
        ),
        (
            "bench-vs-perftest",
            &["--report-only", NOT_A_RUN],
            &[],
            "is not a bench-vs-perftest run directory (no host.env file)",
        ),
        (
            "bench-coll-vs-mpi",
            &["--report-only", NOT_A_RUN],
            &[],
            "is not a bench-coll-vs-mpi run directory (no params file)",
        ),
        (
            "bench-coll-vs-mpi",
            &["-e", "4M", "--report-only", NOT_A_RUN],
            &[],
            "--report-only rebuilds the report of an earlier run: -e does not apply",
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

/// `--report-only` on a directory that is not a run directory writes nothing into it (it used
/// to create DIR/rows and print raw sed and awk errors).
#[test]
fn report_only_leaves_a_directory_that_is_no_run_alone() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("not-a-bench-run");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.to_str().unwrap();
    for script in ["bench-vs-perftest", "bench-coll-vs-mpi"] {
        let (code, err) = run(script, &["--report-only", d], &[]);
        assert_eq!(code, Some(2), "{script}: {err}");
        assert_eq!(err.lines().count(), 1, "{script}: {err}");
    }
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
}

/// Runs `splice_results GENERATED PAGE` (scripts/lib/splice-results.sh, as bench-vs-perftest
/// sources it) and returns its status and stderr.
fn splice(gen: &std::path::Path, page: &std::path::Path) -> (Option<i32>, String) {
    let out = Command::new("bash")
        .args([
            "-c",
            r#"PROG=bench-vs-perftest; source "$1/scripts/lib/log.sh"
               source "$1/scripts/lib/splice-results.sh"; splice_results "$2" "$3""#,
            "splice",
            env!("CARGO_MANIFEST_DIR"),
        ])
        .arg(gen)
        .arg(page)
        .output()
        .expect("bash runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The two markers of docs/benchmarks.md, as the library defines them.
fn markers() -> (String, String) {
    let out = Command::new("bash")
        .args([
            "-c",
            r#"source "$1/scripts/lib/splice-results.sh"; printf '%s\n%s' "$DET_BEGIN" "$DET_END""#,
            "markers",
            env!("CARGO_MANIFEST_DIR"),
        ])
        .output()
        .expect("bash runs");
    let text = String::from_utf8(out.stdout).unwrap();
    let (b, e) = text.split_once('\n').expect("two markers");
    (b.to_owned(), e.to_owned())
}

/// A deterministic sweep's results land between the markers of the page and nowhere else: the
/// page's own text before and after them is kept byte for byte, a second splice changes
/// nothing, and a page without both markers (or a report without results) is refused with
/// exit 1 and left as it was.
#[test]
fn splice_results_rewrites_only_between_the_markers() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("splice-results");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (begin, end) = markers();
    let (gen, page) = (dir.join("generated.md"), dir.join("benchmarks.md"));
    std::fs::write(
        &gen,
        "# Benchmarks\n\nintro of the report\n\n## Results\n\nfull run, 5 rounds.\n\n\
         | row | ratio |\n|---|---|\n| write_bw_2 | 1.005 |\n\n### Rows that miss the goal\n\n\
         - none\n\n### Other columns\n\n| not | this |\n",
    )
    .unwrap();
    let before = "# Benchmarks: the vl_* tools against perftest\n\nhand-written text\n\n";
    let after = "\n## In wall-clock time\n\nmore hand-written text\n";
    std::fs::write(
        &page,
        format!("{before}{begin}\n\nthe old results\n| old | 0.9 |\n{end}\n{after}"),
    )
    .unwrap();
    let want = format!(
        "{before}{begin}\n\n### Results in deterministic time\n\nfull run, 5 rounds.\n\n\
         | row | ratio |\n|---|---|\n| write_bw_2 | 1.005 |\n\n#### Rows that miss the goal\n\n\
         - none\n\n{end}\n{after}"
    );
    for pass in 1..=2 {
        let (code, err) = splice(&gen, &page);
        assert_eq!(code, Some(0), "pass {pass}: {err}");
        assert_eq!(std::fs::read_to_string(&page).unwrap(), want, "pass {pass}");
    }

    // Refused, the page untouched: an end marker missing, the markers the wrong way round, a
    // marker that is not a line of its own, a report without results.
    let bad_pages = [
        format!("{before}{begin}\nold\n{after}"),
        format!("{before}{end}\nold\n{begin}\n{after}"),
        format!("{before}see {begin}\nold\n{end}\n{after}"),
    ];
    for bad in &bad_pages {
        std::fs::write(&page, bad).unwrap();
        let (code, err) = splice(&gen, &page);
        assert_eq!(code, Some(1), "{err}");
        assert!(err.contains("no DETERMINISTIC RESULTS markers"), "{err}");
        assert_eq!(&std::fs::read_to_string(&page).unwrap(), bad);
    }
    let good = format!("{before}{begin}\nold\n{end}\n{after}");
    std::fs::write(&page, &good).unwrap();
    std::fs::write(&gen, "# Benchmarks\n\nno results here\n").unwrap();
    let (code, err) = splice(&gen, &page);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("no '## Results' section"), "{err}");
    assert_eq!(std::fs::read_to_string(&page).unwrap(), good);
    assert!(
        !dir.join("benchmarks.md.tmp").exists(),
        "a temporary file left behind"
    );
}
