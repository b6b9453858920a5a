//! `--procs N`: a bandwidth test run by N worker processes, kept in step and measured over one
//! interval.
//!
//! The tool's process becomes a *coordinator* ([`coordinator`]): it creates its message queues
//! (`verbs_lab::mq`), re-executes itself N times with the hidden flags `--vl-worker I
//! --vl-queue NAME` (`verbs_lab::workers`), and runs nothing on a device: before it starts a
//! worker it checks `--cpu` against the CPUs it may use (a bad list is a bad command line, exit
//! 2) and opens the device, port and GID once as a single run would (a bad `-d` fails there, with
//! the same words, before a server's "Waiting for client to connect..."). Worker I ([`worker`]) is
//! an ordinary run of the engine with four differences: its TCP port is the base port + I; it
//! pins itself to its own CPU ([`worker_cpu`]: NIC-local first, else one allowed CPU per
//! process); once its QPs are connected to its peer worker it reports `Hello` and `Ready` and
//! waits for the coordinator's `Go`; and before each measurement it waits at a **barrier**
//! across the processes (`Barrier` to the coordinator, `Go` back once all N arrived at the same
//! size), so that every process measures the same size at the same time. The `Go` of a barrier
//! names a common start instant `--procs-start` µs ahead on `CLOCK_MONOTONIC` (the clock every
//! process of a machine shares): each worker meets its peer, then waits for that instant, so
//! the processes start posting within microseconds of each other. Both sides must give the same
//! N: the number of processes is one of the parameters each worker pair compares in its HELLO.
//!
//! Results come back as [`WorkerReport`]s — the worker's pid, its run header, its rows and
//! when each row's measurement ran — cut into chunks that fit a `WorkerMsg::Result`. The
//! coordinator reports each process, the aggregate over one interval (total bytes over latest end minus
//! earliest start, see [`crate::measure::aggregate`]) as the result row the gates check, and beside it
//! the labelled sum of the per-process averages and the intervals' overlap.
//!
//! Faults: a worker that exits before it has sent everything, sends an `Error`, stays silent
//! past a deadline, or does not reach a barrier within the peer timeout (or the time the size
//! took the first worker, if longer) is named (index, pid, CPU, and where it is stuck); the
//! coordinator then stops the others (`Abort`, then SIGKILL) and fails. A worker seen stopped
//! (SIGSTOP) for `--wait` is stalled. A SIGINT or SIGTERM to the coordinator is passed on to
//! its workers ([`crate::signals::Control::pass_on_to`]): each stops its run and tells its
//! peer, as a single run does, and the coordinator exits 130 or 143 once they ended. The queues are
//! removed on every exit path: by their owner's drop; by the signal thread if the workers do
//! not stop within [`crate::signals::GRACE`]; when the coordinator dies otherwise (SIGKILL,
//! SIGHUP), by its workers, which the kernel signals at once
//! (`PR_SET_PDEATHSIG`) and which then exit; and what even they could not remove (all killed
//! together) by the next run, which removes the queues of coordinators that no longer exist and
//! says so.

use std::time::Duration;

use verbs_lab::mq::QueueFamily;

use crate::params::Config;

pub mod coordinator;
pub mod report;
pub mod worker;

pub use crate::measure::aggregate::{aggregate, aggregate_info, totals};
pub use crate::pin::{pick_worker_cpu, worker_cpu};
pub use coordinator::coordinator_main;
pub use report::{
    chunks, Assembler, WorkerReport, CHUNK_DATA, CHUNK_HEADER, REPORT_MAGIC, REPORT_VERSION,
};
pub use verbs_lab::workers::describe;
pub use worker::worker_main;

/// The queues of a run: `/vl-procs-PID` (the coordinator's) and `/vl-procs-PID-wI`.
pub const QUEUES: QueueFamily = QueueFamily {
    prefix: "/vl-procs-",
    tag: "w",
    base_is_queue: true,
};

/// How long past `--wait` a worker may take to connect and set up before it is declared stuck.
pub const SETUP_SLACK: Duration = Duration::from_secs(30);

/// How long a side accepts silence from its peer: as the engine's (`run::run_tool`).
pub fn peer_timeout(cfg: &Config) -> Duration {
    crate::conn::completion_timeout(cfg).max(Duration::from_secs(15))
}
