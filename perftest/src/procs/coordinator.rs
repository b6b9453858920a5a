//! The coordinator of a `--procs N` run: starts the workers (`verbs_lab::workers`), releases
//! them together (Go after every Ready, then a barrier before each measurement), collects their
//! reports, and reports each process, their labelled sum and the aggregate over one interval.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, ensure, Context as _, Result};
use verbs_lab::affinity;
use verbs_lab::fail::{self, Fail};
use verbs_lab::mq::{self, Queue, WorkerMsg};
use verbs_lab::workers::{self, describe, GatherError, Roster, Worker};

use super::report::{Assembler, WorkerReport};
use super::{peer_timeout, QUEUES, SETUP_SLACK};
use crate::measure::aggregate::{aggregate_info, totals};
use crate::measure::result::{ProcessResult, Rows, RunInfo, RunResult};
use crate::output::{OutputArgs, Reporter};
use crate::params::{Config, RunMode};
use crate::signals::Control;

/// One worker as the coordinator sees it.
struct Proc {
    w: Worker,
    inbox: Queue,
    cpu: Option<u32>,
    hello: bool,
    ready: bool,
    /// The size whose barrier it waits at.
    at_barrier: Option<u64>,
    chunks: Assembler,
    report: Option<WorkerReport>,
    done: bool,
}

impl Proc {
    fn id(&self) -> u32 {
        self.w.index
    }

    fn pid(&self) -> u32 {
        self.w.pid()
    }

    /// "worker 1 (pid 4242, CPU 1)".
    fn who(&self) -> String {
        let cpu = self
            .cpu
            .map_or_else(|| "CPU not chosen yet".to_string(), |c| format!("CPU {c}"));
        format!("worker {} (pid {}, {cpu})", self.id(), self.pid())
    }

    fn finished(&self, phase: Stage) -> bool {
        match phase {
            Stage::Ready => self.hello && self.ready,
            Stage::Results => self.report.is_some() && self.done,
        }
    }
}

/// What the coordinator waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Hello and Ready from each (connected to its peer).
    Ready,
    /// The barriers of the sizes, then Result and Done from each.
    Results,
}

impl Stage {
    fn awaited(self) -> &'static str {
        match self {
            Stage::Ready => "Ready",
            Stage::Results => "results",
        }
    }
}

/// The workers, their queues, and the run's clocks.
struct Run<'a> {
    /// From here a signal goes to the workers (each tells its peer); the first field, so that
    /// it ends before the workers are reaped.
    _pass_on: crate::signals::Watch,
    cfg: &'a Config,
    /// The tool's run control: whether a signal came.
    control: &'a Control,
    inbox: &'a Queue,
    ps: Vec<Proc>,
    /// When the last barrier (or Go) released the workers.
    released: Instant,
    /// When the first worker arrived at the pending barrier.
    first_at_barrier: Option<Instant>,
    /// When the first worker finished.
    first_done: Option<Instant>,
}

/// The coordinator of `--procs N`: starts the workers, runs the barriers, collects and
/// reports. Exit codes as [`crate::entry::main`].
pub fn coordinator_main(cfg: &Config, control: &Control, out: &OutputArgs) -> ExitCode {
    let name = cfg.tool.name();
    // SIGINT and SIGTERM are the tool's signal thread's (`control`): it passes them on
    // to the workers, and removes the queues only if they do not stop in time.
    if let Err(e) = check_cpus(cfg) {
        return Fail::usage(format!("{e}; nothing was run")).exit(&name);
    }
    // The device, port and GID as a single run opens them, before any worker starts: a bad
    // `-d` fails here with the same words, and a server says it waits only with its device
    // usable (each worker then opens its own).
    if let Err(e) = crate::conn::device::open_device(cfg) {
        return Fail::from(e).exit(&name);
    }
    if cfg.is_server() {
        Reporter::new(out).waiting_banner();
    }
    for note in QUEUES.remove_orphans() {
        verbs_lab::eprintln_whole!("{name}: note: {note}");
    }
    let outcome = coordinate(cfg, control).and_then(|(total, procs)| {
        Reporter::new(out)
            .finish_procs(&total, &procs)
            .map_err(|e| anyhow!("{e:#}"))
    });
    let ended = |e: anyhow::Error| match control.received() {
        // What `coordinate` says of a run interrupted (see there).
        Some(i) => Fail::stopped(i.exit_code(), e),
        None => Fail::from(e),
    };
    fail::exit(&name, outcome.map(|o| o.code()).map_err(ended))
}

/// `--cpu` names at least one CPU this process may use: else every worker would fail to pin
/// itself, a bad command line found only after the workers started. The check is the workers'
/// own choice (`affinity::choose_cpu_in`, which looks at nothing but the list and the allowed
/// CPUs when a list is given).
fn check_cpus(cfg: &Config) -> Result<()> {
    let Some(req) = &cfg.pin.cpu else {
        return Ok(());
    };
    // Affinity that cannot be read is no fault of the command line: the workers say it.
    let Ok(allowed) = affinity::allowed_cpus() else {
        return Ok(());
    };
    let root = verbs_lab::sysfs::root();
    affinity::choose_cpu_in(&root, "", Some(req), &allowed, 0)
        .map(drop)
        .map_err(|e| anyhow!("--cpu {req}: {e}"))
}

fn coordinate(cfg: &Config, control: &Control) -> Result<(RunResult, Vec<ProcessResult>)> {
    let n = cfg.procs.count.context("coordinate() needs --procs")?;
    let base = QUEUES.base(std::process::id());
    // The inbox carries every message, a full Result included; 10 is the default msg_max.
    let inbox = Queue::create(&base, 10, mq::MAX_MSG_LEN)
        .context("creating the coordinator's message queue (--procs)")?;
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    // A Worker dropped on an early return is killed and reaped.
    let mut workers = Vec::new();
    let mut inboxes = Vec::new();
    for i in 0..n {
        // A worker's inbox carries Go and Abort only: 2 small messages.
        let q = Queue::create(&QUEUES.member(&base, i), 2, mq::HEADER_LEN + mq::MAX_TEXT)
            .with_context(|| format!("creating worker {i}'s message queue (--procs)"))?;
        inboxes.push(q);
        let mut a = args.clone();
        a.extend(["--vl-worker", &i.to_string(), "--vl-queue", &base].map(Into::into));
        workers.push(Worker::spawn(i, a, false).map_err(anyhow::Error::msg)?);
    }
    let mut run = Run {
        _pass_on: control.pass_on_to(workers.iter().map(Worker::pid).collect()),
        cfg,
        control,
        inbox: &inbox,
        ps: workers
            .into_iter()
            .zip(inboxes)
            .map(|(w, inbox)| Proc {
                w,
                inbox,
                cpu: None,
                hello: false,
                ready: false,
                at_barrier: None,
                chunks: Assembler::default(),
                report: None,
                done: false,
            })
            .collect(),
        released: Instant::now(),
        first_at_barrier: None,
        first_done: None,
    };
    let outcome = run.conduct();
    if let Err(e) = &outcome {
        run.stop(&format!("{e:#}"));
        if let Some(i) = control.received() {
            // The workers failed because the signal was passed on to them: that is the news.
            let n = run.ps.len();
            if run.ps.iter().any(|p| p.ready) {
                bail!(
                    "{i}: passed on to the {n} workers, which were connected and told their \
                     peers; the run torn down"
                );
            }
            bail!("{i} (no peer connected yet): passed on to the {n} workers");
        }
    }
    let reports = outcome?;
    drop(run);
    drop(inbox);
    results(reports)
}

/// The totals and the processes, from the reports.
fn results(reports: Vec<(u32, WorkerReport)>) -> Result<(RunResult, Vec<ProcessResult>)> {
    let infos: Vec<&RunInfo> = reports.iter().map(|(_, r)| &r.info).collect();
    let info = aggregate_info(&infos).context("no worker reported")?;
    let procs: Vec<ProcessResult> = reports
        .into_iter()
        .map(|(id, r)| ProcessResult {
            process: id,
            pid: r.pid,
            cpu: r.info.cpu,
            rows: r.rows,
            spans: r.spans,
        })
        .collect();
    let rows = totals(&procs).map_err(anyhow::Error::msg)?;
    let total = RunResult {
        info,
        rows: Rows::Bw(rows),
    };
    Ok((total, procs))
}

impl Run<'_> {
    /// Ready from all, Go to all, the barriers, results from all; then every worker must exit 0.
    fn conduct(&mut self) -> Result<Vec<(u32, WorkerReport)>> {
        let wait = self.cfg.peer.wait;
        let setup = Instant::now() + wait + SETUP_SLACK;
        self.collect(Stage::Ready, |_| setup)?;
        self.release(0)?;
        let go = self.released;
        // In duration mode the run's length is known; otherwise once one worker has finished,
        // the others get the longer of --wait and the time it took.
        let bound = match self.cfg.timing.mode {
            RunMode::Duration(d) => Some(go + d + wait + SETUP_SLACK),
            RunMode::Iters(_) => None,
        };
        self.collect(Stage::Results, move |r: &Run<'_>| {
            let straggle = r.first_done.map(|t| t + wait.max(t - go));
            let barrier = r.barrier_deadline();
            [bound, straggle, barrier]
                .into_iter()
                .flatten()
                .min()
                .unwrap_or_else(|| Instant::now() + Duration::from_secs(3600))
        })?;
        for p in &mut self.ps {
            let st =
                p.w.wait_exit(Duration::from_secs(10))
                    .map_err(|e| anyhow!("{} sent its results but did not exit: {e}", p.who()))?;
            ensure!(
                st.success(),
                "{} sent its results but then {}",
                p.who(),
                describe(st)
            );
        }
        Ok(self
            .ps
            .iter_mut()
            .map(|p| {
                let r = p.report.take().expect("collect() waited for every report");
                (p.id(), r)
            })
            .collect())
    }

    /// The latest moment the stragglers may reach the pending barrier: the first arrival plus
    /// the longer of the peer timeout and the time the size took the first one.
    fn barrier_deadline(&self) -> Option<Instant> {
        let first = self.first_at_barrier?;
        let took = first.saturating_duration_since(self.released);
        Some(first + peer_timeout(self.cfg).max(took))
    }

    /// Go to every worker: now (`lead` zero), or at a common start time `lead` ahead.
    fn release(&mut self, lead_ns: u64) -> Result<()> {
        let start_at_ns = if lead_ns == 0 {
            0
        } else {
            mq::monotonic_ns() + lead_ns
        };
        for p in &mut self.ps {
            p.at_barrier = None;
            p.inbox
                .send(&WorkerMsg::Go { start_at_ns }, 0)
                .with_context(|| format!("sending Go to {}", p.who()))?;
        }
        self.released = Instant::now();
        self.first_at_barrier = None;
        Ok(())
    }

    /// Receives until every worker finished `stage`, through `verbs_lab::workers::gather`:
    /// whenever the queue has been empty for 100 ms it looks at the processes, and a worker that
    /// exited without finishing `stage`, or has been stopped for `--wait`, is named. `deadline`
    /// is asked again on every turn.
    fn collect(
        &mut self,
        stage: Stage,
        mut deadline: impl FnMut(&Run<'_>) -> Instant,
    ) -> Result<()> {
        let started = Instant::now();
        let (inbox, wait) = (self.inbox, self.cfg.peer.wait);
        let mut turn = Turn { run: self, stage };
        let gathered = workers::gather(&mut turn, inbox, Some(wait), |t| deadline(t.run));
        let Err(e) = gathered else { return Ok(()) };
        match e {
            GatherError::Refused(e) => Err(e),
            GatherError::Ended { index, status } => bail!(
                "{} {} before sending its {}",
                self.ps[index].who(),
                describe(status),
                stage.awaited()
            ),
            GatherError::Stopped { index, .. } => bail!(
                "{} has been stopped (SIGSTOP or a debugger) for {} s (--wait) {}: stalled",
                self.ps[index].who(),
                wait.as_secs(),
                self.where_stuck(index, stage)
            ),
            GatherError::Late { .. } => bail!(self.late(stage, started)),
            GatherError::Io(e) => bail!(e),
        }
    }

    /// What worker `i` has not done: "without sending its Ready", "before reaching the
    /// barrier of size 4096 (worker 0 waits there)".
    fn where_stuck(&self, i: usize, stage: Stage) -> String {
        let waiting: Vec<(u32, u64)> = self
            .ps
            .iter()
            .filter_map(|p| p.at_barrier.map(|s| (p.id(), s)))
            .collect();
        match (waiting.first(), self.ps[i].at_barrier) {
            (Some((_, size)), None) => {
                let who: Vec<String> = waiting.iter().map(|(id, _)| id.to_string()).collect();
                format!(
                    "before reaching the barrier of the measurement of {size} bytes (worker{} \
                     {} wait{} there)",
                    if who.len() == 1 { "" } else { "s" },
                    who.join(", "),
                    if who.len() == 1 { "s" } else { "" }
                )
            }
            _ => format!("without sending its {}", stage.awaited()),
        }
    }

    /// The error for a passed deadline: who is late, and for what.
    fn late(&self, stage: Stage, started: Instant) -> String {
        let late: Vec<usize> = (0..self.ps.len())
            .filter(|&i| !self.ps[i].finished(stage) && self.ps[i].at_barrier.is_none())
            .collect();
        let names: Vec<String> = late.iter().map(|&i| self.ps[i].who()).collect();
        let stopped = if late.iter().any(|&i| self.ps[i].w.is_stopped()) {
            " (stopped: SIGSTOP or a debugger)"
        } else {
            ""
        };
        match (self.first_at_barrier, late.first()) {
            (Some(first), Some(&i)) => format!(
                "{}{stopped} did not reach the barrier within {:.0} s of the first worker \
                 (peer timeout {} s) {}: stalled?",
                names.join(", "),
                first.elapsed().as_secs_f64(),
                peer_timeout(self.cfg).as_secs(),
                self.where_stuck(i, stage)
            ),
            _ => format!(
                "{}{stopped} sent no {} within {:.0} s (--wait {} s); still running but \
                 silent: stalled?",
                names.join(", "),
                stage.awaited(),
                started.elapsed().as_secs_f64(),
                self.cfg.peer.wait.as_secs()
            ),
        }
    }

    fn handle(&mut self, msg: WorkerMsg, stage: Stage) -> Result<()> {
        let from = msg.sender();
        let Some(i) = self.ps.iter().position(|p| p.id() == from) else {
            bail!("a message from unknown sender {from}: {msg}");
        };
        let p = &mut self.ps[i];
        match msg {
            WorkerMsg::Error { message, .. } => bail!("{} failed: {message}", p.who()),
            WorkerMsg::Hello { pid, cpu, .. } if stage == Stage::Ready && !p.hello => {
                ensure!(
                    pid == p.pid(),
                    "worker {from} says pid {pid}, but we started pid {}",
                    p.pid()
                );
                p.cpu = cpu;
                p.hello = true;
            }
            WorkerMsg::Ready { .. } if stage == Stage::Ready && p.hello && !p.ready => {
                p.ready = true
            }
            WorkerMsg::Barrier { step, .. }
                if stage == Stage::Results && p.at_barrier.is_none() =>
            {
                p.at_barrier = Some(step);
                self.first_at_barrier.get_or_insert_with(Instant::now);
                self.barrier_arrival(step)?;
            }
            WorkerMsg::Result { payload, .. } if stage == Stage::Results && p.report.is_none() => {
                let who = p.who();
                let blob = p
                    .chunks
                    .push(&payload)
                    .map_err(|e| anyhow!("{who}'s results: {e}"))?;
                if let Some(blob) = blob {
                    let r =
                        WorkerReport::decode(&blob).map_err(|e| anyhow!("{who}'s results: {e}"))?;
                    ensure!(r.pid == p.pid(), "{who}'s results name pid {}", r.pid);
                    p.report = Some(r);
                }
                self.check_in_step()?;
            }
            WorkerMsg::Done { .. } if stage == Stage::Results && p.report.is_some() => {
                p.done = true;
                self.first_done.get_or_insert_with(Instant::now);
            }
            other => bail!("unexpected while waiting for {}: {other}", stage.awaited()),
        }
        Ok(())
    }

    /// A worker reached the barrier of `size`: all must wait at the same size; once all do,
    /// they are released together.
    fn barrier_arrival(&mut self, size: u64) -> Result<()> {
        if let Some(other) = self
            .ps
            .iter()
            .find(|p| p.at_barrier.is_some_and(|s| s != size))
        {
            bail!(
                "the processes are out of step: {} waits to measure {} bytes, another {size} \
                 bytes",
                other.who(),
                other.at_barrier.unwrap_or_default()
            );
        }
        self.check_in_step()?;
        if self.ps.iter().all(|p| p.at_barrier == Some(size)) {
            let lead = u64::try_from(self.cfg.procs.start.as_nanos()).unwrap_or(u64::MAX);
            self.release(lead)?;
        }
        Ok(())
    }

    /// No worker may finish while another waits at a barrier: they measured different sizes.
    fn check_in_step(&self) -> Result<()> {
        let waiting = self.ps.iter().find(|p| p.at_barrier.is_some());
        let finished = self.ps.iter().find(|p| p.report.is_some());
        if let (Some(w), Some(f)) = (waiting, finished) {
            bail!(
                "the processes are out of step: {} finished its sizes while {} waits to measure \
                 {} bytes",
                f.who(),
                w.who(),
                w.at_barrier.unwrap_or_default()
            );
        }
        Ok(())
    }

    /// Stops the workers after a failure (`verbs_lab::workers::stop`: Abort to each one still
    /// running, half a second to exit, then SIGKILL). Says what happened to each on stderr.
    fn stop(&mut self, reason: &str) {
        let name = self.cfg.tool.name();
        // Workers stopped by a signal passed on are telling their peers: give them the time
        // a single run has.
        let grace = if self.control.received().is_some() {
            crate::signals::GRACE
        } else {
            Duration::from_millis(500)
        };
        let stopped = workers::stop(
            self.ps.iter_mut().map(|p| (&mut p.w, &p.inbox)),
            reason,
            grace,
        );
        for s in stopped {
            let who = self.ps[s.index as usize].who();
            let abort = s.abort_failed.map_or(String::new(), |e| {
                format!(" (the Abort could not be sent: {e})")
            });
            verbs_lab::eprintln_whole!("{name}: note: {who} {}{abort}", s.how);
        }
    }
}

/// The run during one stage, as `verbs_lab::workers::gather` asks about it.
struct Turn<'r, 'a> {
    run: &'r mut Run<'a>,
    stage: Stage,
}

impl Roster for Turn<'_, '_> {
    type Error = anyhow::Error;
    fn count(&self) -> usize {
        self.run.ps.len()
    }
    fn process(&mut self, i: usize) -> &mut Worker {
        &mut self.run.ps[i].w
    }
    fn finished(&self, i: usize) -> bool {
        self.run.ps[i].finished(self.stage)
    }
    fn handle(&mut self, msg: WorkerMsg) -> Result<()> {
        self.run.handle(msg, self.stage)
    }
}
