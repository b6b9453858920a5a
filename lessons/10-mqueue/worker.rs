//! Lesson 10, part two, a worker process (this program re-executed with `--worker N`): ties
//! its life to the coordinator, says Hello, waits for Go, does its share of the work and sends
//! Result and Done — or, for the exercises, dies (`--kill-worker`) or goes silent
//! (`--stall-worker`).

use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context as _, Result};
use nix::sched::{sched_getcpu, sched_setaffinity, CpuSet};
use nix::sys::signal::{kill, Signal};
use nix::unistd::{getpid, Pid};
use verbs_lab::affinity::allowed_cpus;
use verbs_lab::mq::{self, Queue, WorkerMsg};
use verbs_lab::workers;

use crate::job::{share, WorkResult, QUEUES};
use crate::{Args, PROGRAM};

/// A worker: Hello, wait for Go, the work, Result, Done. Any failure is also sent to the
/// coordinator as an Error message (best effort) before the process exits non-zero.
pub fn run(args: &Args, w: u32) -> Result<()> {
    let base = args
        .queue
        .as_deref()
        .expect("clap: --worker requires --queue");
    // First, before any thread starts: when the coordinator dies — even by SIGKILL — the
    // kernel signals us (PR_SET_PDEATHSIG); we then remove its queues and exit. The queue
    // names hold the coordinator's pid: queues of another run are refused, not removed.
    workers::follow_queues(&QUEUES, base, args.workers, "--queue").map_err(anyhow::Error::msg)?;
    let coord = Queue::open(base).context("opening the coordinator's queue")?;
    let r = body(args, w, base, &coord);
    if let Err(e) = &r {
        let _ = coord.try_send(&WorkerMsg::error(w, format!("{e:#}")), 1);
    }
    r
}

fn body(args: &Args, w: u32, base: &str, coord: &Queue) -> Result<()> {
    let wait = Duration::from_secs(args.wait_secs);
    let inbox = Queue::open(&QUEUES.member(base, w)).context("opening our queue")?;
    let cpu = if args.pin { Some(pin(w)?) } else { None };
    coord
        .send(
            &WorkerMsg::Hello {
                worker: w,
                pid: std::process::id(),
                cpu,
            },
            0,
        )
        .context("sending Hello")?;
    let start_at = match next(&inbox, wait)? {
        WorkerMsg::Go { start_at_ns } => start_at_ns,
        WorkerMsg::Abort { reason } => bail!("aborted by the coordinator before Go: {reason}"),
        other => bail!("expected Go, got {other}"),
    };
    // Start together with the others, but never wait longer than --wait for it.
    let now = mq::monotonic_ns();
    if start_at > now {
        std::thread::sleep(Duration::from_nanos(start_at - now).min(wait));
    }
    if args.kill_worker == Some(w) {
        verbs_lab::eprintln_whole!(
            "{PROGRAM} worker {w}: --kill-worker {w}: sending SIGKILL to myself (pid {})",
            std::process::id()
        );
        kill(getpid(), Signal::SIGKILL).context("kill(SIGKILL)")?;
    }
    if args.stall_worker == Some(w) {
        verbs_lab::eprintln_whole!(
            "{PROGRAM} worker {w}: --stall-worker {w}: not answering (pid {})",
            std::process::id()
        );
        // Silent for longer than the coordinator waits: it must notice, not us.
        let why = match next(&inbox, 3 * wait)? {
            WorkerMsg::Abort { reason } => format!("stalled, then aborted: {reason}"),
            other => format!("stalled, then got {other}"),
        };
        bail!(why);
    }
    let (lo, hi) = share(w, args.count);
    let t0 = Instant::now();
    let mut sum = 0u64;
    for i in lo..hi {
        sum = sum.wrapping_add(i.wrapping_mul(i));
    }
    let result = WorkResult {
        sum: std::hint::black_box(sum),
        nanos: t0.elapsed().as_nanos() as u64,
        cpu: sched_getcpu().map_or(u32::MAX, |c| c as u32),
    };
    coord
        .send(
            &WorkerMsg::Result {
                worker: w,
                payload: result.encode(),
            },
            0,
        )
        .context("sending Result")?;
    coord
        .send(&WorkerMsg::Done { worker: w }, 0)
        .context("sending Done")?;
    Ok(())
}

/// The next message on our queue, within `wait`. (Should the coordinator die meanwhile,
/// the kernel ends this process: see `follow_coordinator` above.)
fn next(inbox: &Queue, wait: Duration) -> Result<WorkerMsg> {
    inbox.recv_timeout(wait).map_err(|e| {
        if e.is_timeout() {
            anyhow::anyhow!(
                "nothing from the coordinator within {} s (--wait)",
                wait.as_secs()
            )
        } else {
            anyhow::Error::new(e).context("receiving from the coordinator")
        }
    })
}

/// Pins this process to the w-th allowed CPU (CPU_ZERO, CPU_SET, sched_setaffinity; lesson
/// 09 explains them).
fn pin(w: u32) -> Result<u32> {
    let allowed = allowed_cpus().context("sched_getaffinity")?;
    ensure!(!allowed.is_empty(), "no CPU is allowed");
    let cpu = allowed.cpus()[w as usize % allowed.len()];
    let mut set = CpuSet::new();
    set.set(cpu).context("CPU_SET")?;
    sched_setaffinity(Pid::from_raw(0), &set)
        .with_context(|| format!("sched_setaffinity(CPU {cpu})"))?;
    Ok(cpu as u32)
}
