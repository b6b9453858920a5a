//! A `--procs` worker started with the queues of another run (`--vl-queue`): it must refuse
//! them before it ties itself to them — otherwise it writes into that run's coordinator queue,
//! and removes all of that run's queues when its own coordinator dies.

use std::process::Command;

use verbs_lab::mq::{MqError, Queue, MAX_MSG_LEN};
use verbs_lab::workers::COORDINATOR_ENV;
use vl_perftest::procs::QUEUES;

#[test]
fn a_worker_refuses_the_queues_of_another_run() {
    // The other run: its coordinator is a live process (a sleeping child), its queues exist.
    let mut other = Command::new("sleep").arg("30").spawn().unwrap();
    let base = QUEUES.base(other.id());
    let queues: Vec<Queue> = QUEUES
        .all(&base, 2)
        .iter()
        .map(|n| Queue::create(n, 2, MAX_MSG_LEN).unwrap())
        .collect();
    // This test process plays the worker's coordinator (its parent, named in the variable).
    let out = Command::new(env!("CARGO_BIN_EXE_vl_write_bw"))
        .args(["--procs", "2", "--vl-worker", "0", "--vl-queue", &base])
        .env(COORDINATOR_ENV, std::process::id().to_string())
        .output()
        .unwrap();
    let other_pid = other.id();
    let _ = other.kill();
    let _ = other.wait();

    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    // Nothing reached the other run's coordinator, and none of its queues was removed.
    assert!(
        matches!(queues[0].try_recv(), Err(MqError::WouldBlock { .. })),
        "the worker wrote to the other run's coordinator: {err}"
    );
    for q in &queues {
        assert!(Queue::open(q.name()).is_ok(), "{} was removed", q.name());
    }
    let refusal = format!(
        "--vl-queue \"{base}\" names the queues of pid {other_pid}, but this process's \
         coordinator is pid {}",
        std::process::id()
    );
    assert!(err.contains(&refusal), "{err}");
}
