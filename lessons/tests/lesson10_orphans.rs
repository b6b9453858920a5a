//! Lesson 10 removes, at start, the queues an earlier run left when its coordinator was killed
//! outright and its workers died with it (`verbs_lab::mq::QueueFamily::remove_orphans`): those
//! named `/vl10-PID…` of a PID that no longer runs, and only those. A test binary of its own:
//! any other lesson 10 run of this package's tests would remove the queues this one leaves.

use std::time::Duration;

use nix::errno::Errno;
use nix::mqueue::{mq_close, mq_open, mq_unlink, MQ_OFlag, MqAttr};
use nix::sys::stat::Mode;

mod common;
use common::{run_bounded, text};

const L10: &str = env!("CARGO_BIN_EXE_lesson10_mqueue");

/// Creates the queue `name` (and closes it: the name stays until it is removed).
fn create(name: &str) {
    let attr = MqAttr::new(0, 2, 64, 0);
    let flags = MQ_OFlag::O_CREAT | MQ_OFlag::O_EXCL | MQ_OFlag::O_RDWR;
    let q = mq_open(name, flags, Mode::S_IRUSR | Mode::S_IWUSR, Some(&attr))
        .unwrap_or_else(|e| panic!("mq_open({name}, O_CREAT): {e}"));
    mq_close(q).unwrap();
}

fn exists(name: &str) -> bool {
    match mq_open(name, MQ_OFlag::O_RDONLY, Mode::empty(), None) {
        Ok(q) => {
            mq_close(q).unwrap();
            true
        }
        Err(Errno::ENOENT) => false,
        Err(e) => panic!("mq_open({name}): {e}"),
    }
}

/// The pid of a process that has ended (a child that ran `true`, reaped).
fn gone_pid() -> u32 {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
    pid
}

#[test]
fn lesson10_removes_the_queues_a_killed_run_left_and_no_others() {
    if verbs_lab::mq::mount_point().is_none() {
        verbs_lab::eprintln_whole!(
            "skipped: the mqueue file system is not mounted, so queues cannot be listed"
        );
        return;
    }
    let dead = gone_pid();
    let orphans = [format!("/vl10-{dead}"), format!("/vl10-{dead}-w0")];
    // A queue of a run whose coordinator still runs (this test) must stay.
    let live = format!("/vl10-{}-w0", std::process::id());
    for q in orphans.iter().chain([&live]) {
        create(q);
    }

    let (o, _) = run_bounded(
        L10,
        &["--no-tour", "-k", "1", "-n", "10"],
        Duration::from_secs(60),
    );
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    let live_stayed = exists(&live);
    let _ = mq_unlink(live.as_str());
    let left: Vec<&String> = orphans.iter().filter(|q| exists(q)).collect();
    for q in &left {
        let _ = mq_unlink(q.as_str());
    }
    assert!(o.status.success(), "{out}{err}");
    let said = format!(
        "    removed 2 message queues left by a coordinator that is gone (pid {dead}): {} {}\n",
        orphans[0], orphans[1]
    );
    assert!(out.contains(&said), "expected '{said}' in: {out}");
    assert!(left.is_empty(), "still there: {left:?}");
    assert!(
        live_stayed,
        "{live}, a queue of a live owner, was removed: {out}"
    );
}
