//! The `main` of a vl_* tool on this host, which has no RDMA device: what it refuses before the
//! run (report files it could not write at the end, exit 2), and that a server which cannot open
//! its device never prints perftest's "Waiting for client to connect..." banner.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const WRITE_BW: &str = env!("CARGO_BIN_EXE_vl_write_bw");
const BANNER: &str = "Waiting for client to connect";

fn run(args: &[&str]) -> Output {
    Command::new(WRITE_BW).args(args).output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A fresh scratch directory of this test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vl-entry-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn arg(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn a_server_that_cannot_open_its_device_does_not_say_it_waits() {
    let o = run(&[]);
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("RDMA"), "{err}");
    assert!(!out.contains(BANNER), "the banner was printed: {out}");
}

#[test]
fn a_procs_server_that_cannot_open_its_device_fails_as_a_single_one_before_any_worker() {
    let single = run(&[]);
    let o = run(&["--procs", "2"]);
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(!out.contains(BANNER), "the banner was printed: {out}");
    assert_eq!(err, text(&single.stderr), "not the single server's words");
    assert!(!err.contains("worker"), "a worker was started: {err}");
}

#[test]
fn a_cpu_list_the_process_may_not_use_is_refused_before_any_worker() {
    let allowed = verbs_lab::affinity::allowed_cpus().unwrap();
    let outside = allowed.cpus().iter().max().unwrap() + 1;
    let cpu = outside.to_string();
    let o = run(&["--procs", "3", "--cpu", &cpu]);
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.starts_with(&format!(
            "vl_write_bw: error: --cpu {cpu}: none of the requested CPUs {cpu} may be used by \
             this process (allowed: {allowed}); nothing was run"
        )),
        "{err}"
    );
    assert!(!out.contains(BANNER), "the banner was printed: {out}");
    assert!(!err.contains("worker"), "a worker was started: {err}");
}

#[test]
fn a_report_file_that_cannot_be_written_is_refused_before_the_run() {
    let dir = scratch("refused");
    let missing = dir.join("no-such-dir/x.json");
    let cases: Vec<(Vec<&str>, &str, &Path)> = vec![
        (vec!["--json", arg(&missing)], "--json", &missing),
        (vec!["--json", arg(&dir)], "--json", &dir),
        (vec!["--csv", arg(&missing)], "--csv", &missing),
        (
            vec!["--out_json_file", arg(&missing)],
            "--out_json",
            &missing,
        ),
        // A --procs coordinator writes the files: it checks them before it starts a worker.
        (
            vec!["--procs", "2", "--json", arg(&missing)],
            "--json",
            &missing,
        ),
        // The client draws the chart: its --plot is checked.
        (
            vec!["127.0.0.1", "--plot", arg(&missing)],
            "--plot",
            &missing,
        ),
    ];
    for (args, flag, path) in cases {
        let o = run(&args);
        let (out, err) = (text(&o.stdout), text(&o.stderr));
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        let want = format!(
            "vl_write_bw: error: {flag} {}: cannot write this file: ",
            path.display()
        );
        assert!(
            err.starts_with(&want),
            "{args:?}: expected '{want}' in {err}"
        );
        assert!(err.contains("nothing was run"), "{args:?}: {err}");
        assert!(!err.contains("RDMA"), "{args:?}: the run started: {err}");
        assert!(out.is_empty(), "{args:?}: {out}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_check_leaves_the_files_as_they_were() {
    let dir = scratch("kept");
    let (old, new) = (dir.join("old.json"), dir.join("new.csv"));
    std::fs::write(&old, "earlier run").unwrap();
    // A write_bw server measures nothing and draws no chart: its --plot is not checked.
    let missing_svg = dir.join("no-such-dir/x.svg");
    let o = run(&[
        "--json",
        arg(&old),
        "--csv",
        arg(&new),
        "--plot",
        arg(&missing_svg),
    ]);
    // The paths pass the check; the run then fails on this host (no device), writing nothing.
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("RDMA"), "{}", text(&o.stderr));
    assert_eq!(std::fs::read_to_string(&old).unwrap(), "earlier run");
    assert!(!new.exists(), "the check left {} behind", new.display());
    let _ = std::fs::remove_dir_all(&dir);
}
