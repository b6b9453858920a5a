//! `verbs_lab::workers` with real processes: this test program re-executes itself as the
//! workers (as a tool does), each running one of the `child_*` tests below, which act only when
//! started by a coordinator ([`COORDINATOR_ENV`] set) and are no-ops in an ordinary test run.

use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

use verbs_lab::workers::{self, describe, Fate, Worker, COORDINATOR_ENV};

fn as_worker() -> bool {
    std::env::var_os(COORDINATOR_ENV).is_some()
}

#[test]
fn child_exits_0() {
    if as_worker() {
        std::process::exit(0);
    }
}

#[test]
fn child_exits_3() {
    if as_worker() {
        std::thread::sleep(Duration::from_millis(100));
        std::process::exit(3);
    }
}

#[test]
fn child_sleeps() {
    if as_worker() {
        std::thread::sleep(Duration::from_secs(60));
    }
}

#[test]
fn child_follows_and_sleeps() {
    if as_worker() {
        workers::follow_coordinator(&[]).unwrap();
        std::thread::sleep(Duration::from_secs(60));
    }
}

/// Worker `index` running the test `child`.
fn spawn(index: u32, child: &str) -> Worker {
    Worker::spawn(index, ["--exact", child, "--test-threads=1"], false).unwrap()
}

fn gone(pid: u32) -> bool {
    !std::path::Path::new(&format!("/proc/{pid}")).exists()
}

#[test]
fn watch_all_names_the_first_failure_and_kills_what_outlives_the_grace() {
    let mut crew = vec![
        spawn(0, "child_exits_0"),
        spawn(1, "child_exits_3"),
        spawn(2, "child_sleeps"),
    ];
    let pids: Vec<u32> = crew.iter().map(Worker::pid).collect();
    let mut heard = Vec::new();
    let t0 = Instant::now();
    let failures = workers::watch_all(&mut crew, Duration::from_millis(300), true, |w, st| {
        heard.push((w.index, st.code()));
    });
    assert!(t0.elapsed() < Duration::from_secs(30), "{:?}", t0.elapsed());
    assert_eq!(heard, [(1, Some(3))], "the first failure, heard once");
    assert_eq!(failures.len(), 2, "{failures:?}");
    assert_eq!((failures[0].index, failures[0].pid), (1, pids[1]));
    assert!(matches!(failures[0].fate, Fate::Failed(st) if st.code() == Some(3)));
    assert_eq!((failures[1].index, failures[1].fate), (2, Fate::Killed));
    // Every one reaped: no zombie left under /proc.
    assert_eq!(crew[0].exit().and_then(|s| s.code()), Some(0));
    assert_eq!(crew[2].exit().and_then(|s| s.signal()), Some(9));
    assert!(pids.iter().all(|&p| gone(p)), "{pids:?}");
}

#[test]
fn watch_all_of_a_crew_that_ends_well_reports_nothing() {
    let mut crew = vec![spawn(0, "child_exits_0"), spawn(1, "child_exits_0")];
    let failures = workers::watch_all(&mut crew, Duration::from_secs(1), true, |w, st| {
        panic!("worker {} {}", w.index, describe(st))
    });
    assert!(failures.is_empty(), "{failures:?}");
}

#[test]
fn a_worker_dropped_while_it_runs_is_killed_and_reaped() {
    let w = spawn(0, "child_sleeps");
    let pid = w.pid();
    assert!(!gone(pid));
    drop(w);
    assert!(gone(pid), "pid {pid} still in /proc after the drop");
}

#[test]
fn a_worker_that_follows_its_coordinator_carries_the_tools_name_not_exe() {
    let mut w = spawn(0, "child_follows_and_sleeps");
    let comm = format!("/proc/{}/comm", w.pid());
    // The kernel names a process after the file it executes (`exe`) or, once it is set, the
    // name we gave: this program's, cut to 15 bytes.
    let ours = std::env::args().next().unwrap();
    let ours = std::path::Path::new(&ours)
        .file_name()
        .unwrap()
        .to_string_lossy();
    let want: String = ours.chars().take(15).collect();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut seen = String::new();
    while Instant::now() < deadline {
        seen = std::fs::read_to_string(&comm).unwrap_or_default();
        if seen.trim_end() == want {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = w.kill();
    assert_eq!(seen.trim_end(), want, "the worker's comm");
}

#[test]
fn describe_says_how_a_process_ended() {
    let mut w = spawn(0, "child_exits_3");
    let st = w.wait_exit(Duration::from_secs(30)).unwrap();
    assert_eq!(describe(st), "exited with status 3");
    let mut w = spawn(1, "child_sleeps");
    let st = w.kill().unwrap();
    assert_eq!(describe(st), "was killed by SIGKILL");
}
