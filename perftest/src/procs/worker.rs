//! A worker process of a `--procs N` run (`--vl-worker I --vl-queue NAME`): an ordinary run of
//! the engine, tied to its coordinator, that reports Ready once connected, waits at a barrier
//! across the processes before each measurement, and sends its report at the end.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use verbs_lab::mq::{Queue, WorkerMsg};
use verbs_lab::workers::{follow_queues, monotonic_ns_of};

use super::report::{chunks, WorkerReport};
use super::{peer_timeout, QUEUES, SETUP_SLACK};
use crate::engine::{heartbeats, Pacer};
use crate::measure::result::{BwRow, LatRow, Rows, RunInfo, Span};
use crate::params::{Config, WorkerOf};
use crate::proto::Channel;
use crate::run::{run_tool_paced, RowSink};
use crate::signals::Control;

/// The worker's `main`: ties itself to the coordinator (it dies, and removes the
/// coordinator's queues, when the coordinator dies), runs, and sends its report and Done. A
/// failure is sent to the coordinator as an `Error` (printed there); the exit status is 1.
pub fn worker_main(cfg: &Config, control: &Control) -> ExitCode {
    let w = cfg
        .procs
        .worker
        .as_ref()
        .expect("worker_main runs with --vl-worker");
    let name = cfg.tool.name();
    let fail = |e: &dyn std::fmt::Display| {
        verbs_lab::eprintln_whole!("{name} worker {}: error: {e}", w.index);
        ExitCode::FAILURE
    };
    // First, before any thread starts: the kernel tells us when the coordinator dies (once
    // we know that --vl-queue names our coordinator's queues, not another run's).
    let n = cfg.procs.count.unwrap_or(0);
    if let Err(e) = follow_queues(&QUEUES, &w.queue, n, "--vl-queue") {
        return fail(&e);
    }
    let coord = match Queue::open(&w.queue) {
        Ok(q) => q,
        Err(e) => return fail(&format!("the coordinator's queue: {e}")),
    };
    match worker(cfg, control, w, &coord) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if let Err(qe) = coord.send(&WorkerMsg::error(w.index, format!("{e:#}")), 1) {
                return fail(&format!(
                    "{e:#} (and the coordinator could not be told: {qe})"
                ));
            }
            ExitCode::FAILURE
        }
    }
}

fn worker(cfg: &Config, control: &Control, w: &WorkerOf, coord: &Queue) -> Result<()> {
    let inbox = Queue::open(&QUEUES.member(&w.queue, w.index)).context("opening our queue")?;
    let link = CoordLink {
        index: w.index,
        coord,
        inbox: &inbox,
    };
    let mut sink = WorkerSink {
        link: &link,
        wait: cfg.peer.wait + SETUP_SLACK,
    };
    let mut pacer = WorkerPacer {
        link: &link,
        wait: (cfg.peer.wait + SETUP_SLACK).max(2 * peer_timeout(cfg)),
        released: Instant::now(),
        spans: Vec::new(),
    };
    let result = run_tool_paced(cfg, control, &mut sink, Some(&mut pacer))?;
    let rows = match result.rows {
        Rows::Bw(rows) => rows,
        Rows::Lat(_) => bail!("a latency run in a --procs worker"),
    };
    let spans = rows
        .iter()
        .map(|r| {
            pacer
                .spans
                .iter()
                .find(|(size, _)| *size == r.bytes)
                .map(|(_, s)| *s)
                .with_context(|| format!("no measured interval for size {}", r.bytes))
        })
        .collect::<Result<Vec<Span>>>()?;
    let report = WorkerReport {
        pid: std::process::id(),
        info: result.info,
        rows,
        spans,
    };
    let blob = report.encode().context("encoding the report")?;
    for payload in chunks(&blob).map_err(anyhow::Error::msg)? {
        let m = WorkerMsg::Result {
            worker: w.index,
            payload,
        };
        coord.send(&m, 0).context("sending the results")?;
    }
    coord
        .send(&WorkerMsg::Done { worker: w.index }, 0)
        .context("sending Done")?;
    Ok(())
}

/// The worker's two queues.
struct CoordLink<'a> {
    index: u32,
    coord: &'a Queue,
    inbox: &'a Queue,
}

impl CoordLink<'_> {
    /// Waits up to `wait` for Go (returns its start time) or Abort (an error), calling `tick`
    /// every 100 ms; `what` names the wait in the error.
    fn wait_go(
        &self,
        wait: Duration,
        what: &str,
        tick: &mut dyn FnMut() -> Result<()>,
    ) -> Result<u64> {
        let deadline = Instant::now() + wait;
        loop {
            match self.inbox.recv_timeout(Duration::from_millis(100)) {
                Ok(WorkerMsg::Go { start_at_ns }) => return Ok(start_at_ns),
                Ok(WorkerMsg::Abort { reason }) => bail!("aborted by the coordinator: {reason}"),
                Ok(other) => bail!("expected Go from the coordinator {what}, got {other}"),
                Err(e) if e.is_timeout() => {}
                Err(e) => return Err(e).with_context(|| format!("waiting for Go {what}")),
            }
            tick()?;
            if Instant::now() >= deadline {
                bail!(
                    "no Go from the coordinator {what} within {} s",
                    wait.as_secs()
                );
            }
        }
    }
}

/// The worker's hook into the run: Hello and Ready once connected, then wait for Go.
struct WorkerSink<'a> {
    link: &'a CoordLink<'a>,
    wait: Duration,
}

impl RowSink for WorkerSink<'_> {
    fn header(&mut self, _: &RunInfo) {}
    fn bw_row(&mut self, _: &RunInfo, _: &BwRow) {}
    fn lat_row(&mut self, _: &RunInfo, _: &LatRow) {}

    fn connected(&mut self, info: &RunInfo, ch: &mut Channel) -> Result<()> {
        let l = self.link;
        let hello = WorkerMsg::Hello {
            worker: l.index,
            pid: std::process::id(),
            cpu: info.cpu.as_ref().map(|(c, _)| *c as u32),
        };
        l.coord.send(&hello, 0).context("sending Hello")?;
        l.coord
            .send(&WorkerMsg::Ready { worker: l.index }, 0)
            .context("sending Ready")?;
        // The other workers may take seconds more to connect: the peer, waiting at its first
        // barrier, hears from this side meanwhile.
        l.wait_go(self.wait, "after Ready", &mut heartbeats(ch))?;
        Ok(())
    }
}

/// The worker's hook into each size: the barrier across the processes, and the intervals.
struct WorkerPacer<'a> {
    link: &'a CoordLink<'a>,
    /// The least this worker waits at a barrier (the coordinator names stragglers sooner).
    wait: Duration,
    /// When the last barrier released this worker.
    released: Instant,
    /// (size, when it was measured), in the order measured.
    spans: Vec<(u64, Span)>,
}

impl Pacer for WorkerPacer<'_> {
    fn before_measure(
        &mut self,
        size: u64,
        beat: &mut dyn FnMut() -> Result<()>,
    ) -> Result<Option<u64>> {
        let l = self.link;
        l.coord
            .send(
                &WorkerMsg::Barrier {
                    worker: l.index,
                    step: size,
                },
                0,
            )
            .context("sending Barrier")?;
        let wait = self.wait.max(2 * self.released.elapsed());
        let what = format!("at the barrier before measuring {size} bytes");
        let start_at = l.wait_go(wait, &what, beat)?;
        self.released = Instant::now();
        Ok((start_at != 0).then_some(start_at))
    }

    fn measured(&mut self, size: u64, start: Instant, end: Instant) {
        let span = Span {
            start_ns: monotonic_ns_of(start),
            end_ns: monotonic_ns_of(end),
        };
        self.spans.push((size, span));
    }
}
