//! Lesson 10, part two, the coordinator (steps 9 to 14): creates the queues, starts the workers
//! through `verbs_lab::workers` (the one supervisor of worker processes, also behind the tools'
//! `--procs`), waits for every Hello, sends Go, collects and checks the Results, and removes
//! the queues — watching the processes all along, so that a worker that dies or goes silent is
//! named within a bounded wait.

use std::fs;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context as _, Result};
use verbs_lab::mq::{self, Queue, WorkerMsg, MAX_MSG_LEN, MAX_TEXT};
use verbs_lab::workers::{self, describe, GatherError, Roster};
use verbs_lab_lessons::{outln, Narrator};

use crate::job::{share, sum_squares_below, WorkResult, QUEUES};
use crate::{mqueue_mount, Args};

/// One worker process as the coordinator sees it.
struct Worker {
    id: u32,
    /// The process, as `verbs_lab::workers` supervises it.
    proc: workers::Worker,
    inbox: Queue,
    pinned: Option<u32>,
    hello: bool,
    result: Option<WorkResult>,
    done: bool,
}

impl Worker {
    fn pid(&self) -> u32 {
        self.proc.pid()
    }
    fn finished(&self, phase: Stage) -> bool {
        match phase {
            Stage::Hello => self.hello,
            Stage::Results => self.result.is_some() && self.done,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Hello,
    Results,
}

impl Stage {
    fn awaited(self) -> &'static str {
        match self {
            Stage::Hello => "Hello",
            Stage::Results => "Result and Done",
        }
    }
}

pub fn run(args: &Args, n: &Narrator) -> Result<()> {
    let base = QUEUES.base(std::process::id());
    let wait = Duration::from_secs(args.wait_secs);
    let k = args.workers;

    // 9. Queues: one inbox for the coordinator, large enough for a full Result (8 messages
    //    of up to 8192 bytes), and a small one per worker for Go and Abort.
    n.step(
        9,
        "Create the queues (verbs_lab::mq::Queue::create: mq_open O_CREAT|O_EXCL)",
    );
    let inbox = Queue::create(&base, 8, 8192).context("the coordinator's queue")?;
    n.say(format!(
        "{base}: the coordinator's inbox, 8 messages of up to 8192 bytes (a message is at \
         most {MAX_MSG_LEN})"
    ));
    let mut inboxes = Vec::new();
    for w in 0..k {
        let name = QUEUES.member(&base, w);
        let q = Queue::create(&name, 2, MAX_TEXT + mq::HEADER_LEN)
            .with_context(|| format!("worker {w}'s queue"))?;
        inboxes.push(q);
    }
    n.say(format!(
        "{}-w0 .. -w{}: one inbox per worker, 2 messages of up to {} bytes (Go, Abort)",
        base,
        k - 1,
        MAX_TEXT + mq::HEADER_LEN
    ));
    if let Some(dir) = mqueue_mount() {
        let mut ours: Vec<String> = fs::read_dir(&dir)
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|f| f.starts_with(&base[1..]))
                    .collect()
            })
            .unwrap_or_default();
        ours.sort();
        n.say(format!("{}: {}", dir.display(), ours.join(" ")));
    }
    let names: Vec<String> = std::iter::once(base.clone())
        .chain(inboxes.iter().map(|q| q.name().to_string()))
        .collect();

    // 10. Workers: this same program (/proc/self/exe), re-executed with the hidden --worker
    //     flag by verbs_lab::workers, which also passes our pid so that each worker dies
    //     with us (PR_SET_PDEATHSIG) even if we are killed outright.
    n.step(
        10,
        "Start the workers: /proc/self/exe --worker N --queue NAME (verbs_lab::workers)",
    );
    let mut ws = Vec::new();
    let mut started = Ok(());
    for (w, q) in (0..k).zip(inboxes) {
        match spawn_worker(args, &base, w) {
            Ok(proc) => {
                n.say(format!("worker {w}: pid {}", proc.pid()));
                ws.push(Worker {
                    id: w,
                    proc,
                    inbox: q,
                    pinned: None,
                    hello: false,
                    result: None,
                    done: false,
                });
            }
            Err(e) => {
                started = Err(e);
                break;
            }
        }
    }
    let outcome = started.and_then(|()| conduct(args, n, &inbox, &mut ws, wait));
    if let Err(e) = &outcome {
        n.say(format!("failure: {e:#}"));
        abort(&mut ws, &format!("{e:#}"), n);
    }

    // 14. The queues go when their Queue values are dropped (the owner calls mq_unlink);
    //     check from the outside, by name, that none is left.
    n.step(
        14,
        "Remove the queues (drop: mq_close, mq_unlink) and check by name",
    );
    drop(ws);
    drop(inbox);
    let left: Vec<&String> = names
        .iter()
        .filter(|q| Queue::exists(q).unwrap_or(true))
        .collect();
    ensure!(left.is_empty(), "queues left behind: {left:?}");
    outln!(
        "queues removed: {} (mq_open of each name: ENOENT)",
        names.join(" ")
    );
    outcome
}

fn spawn_worker(args: &Args, base: &str, w: u32) -> Result<workers::Worker> {
    let mut a: Vec<String> = vec!["--worker".into(), w.to_string(), "--queue".into()];
    a.push(base.into());
    a.extend(["-k".into(), args.workers.to_string()]);
    a.extend(["-n".into(), args.count.to_string()]);
    a.extend(["--wait".into(), args.wait_secs.to_string()]);
    if args.pin {
        a.push("--pin".into());
    }
    if let Some(kw) = args.kill_worker {
        a.extend(["--kill-worker".into(), kw.to_string()]);
    }
    if let Some(sw) = args.stall_worker {
        a.extend(["--stall-worker".into(), sw.to_string()]);
    }
    workers::Worker::spawn(w, a, false).map_err(anyhow::Error::msg)
}

/// Steps 11 to 13: Hello from everyone, Go to everyone, Results from everyone.
fn conduct(
    args: &Args,
    n: &Narrator,
    inbox: &Queue,
    ws: &mut [Worker],
    wait: Duration,
) -> Result<()> {
    n.step(
        11,
        "Wait for every worker's Hello (recv_timeout, watching the processes)",
    );
    collect(inbox, ws, Stage::Hello, wait, n)?;

    // 12. Go, with a common start instant 20 ms ahead on CLOCK_MONOTONIC (one clock for
    //     every process of the machine), so the workers start together.
    n.step(12, "Send Go to every worker's queue");
    let start_at_ns = mq::monotonic_ns() + 20_000_000;
    for w in ws.iter() {
        w.inbox
            .send(&WorkerMsg::Go { start_at_ns }, 0)
            .with_context(|| format!("sending Go to worker {}", w.id))?;
    }
    n.say(format!(
        "Go {{ start_at_ns: {start_at_ns} }} sent to {} workers, priority 0",
        ws.len()
    ));

    n.step(13, "Collect Result and Done; check each sum");
    collect(inbox, ws, Stage::Results, wait, n)?;
    for w in ws.iter_mut() {
        let st = w
            .proc
            .wait_exit(wait)
            .map_err(|e| anyhow::anyhow!("worker {} (pid {}): {e}", w.id, w.pid()))?;
        ensure!(
            st.success(),
            "worker {} (pid {}) sent Done but then {}",
            w.id,
            w.pid(),
            describe(st)
        );
    }
    print_table(args, ws)
}

/// Receives until every worker finished `phase`, through `verbs_lab::workers::gather` (the
/// loop the tools' `--procs` coordinator runs too): between messages — whenever the queue has
/// been empty for 100 ms — it looks at the processes, and one that exited without finishing is
/// reported by number and pid. Everything is bounded by `wait`.
fn collect(
    inbox: &Queue,
    ws: &mut [Worker],
    phase: Stage,
    wait: Duration,
    n: &Narrator,
) -> Result<()> {
    let deadline = Instant::now() + wait;
    let mut crew = Crew { ws, phase, n };
    let Err(e) = workers::gather(&mut crew, inbox, None, |_| deadline) else {
        return Ok(());
    };
    let who = |i: usize| format!("worker {} (pid {})", crew.ws[i].id, crew.ws[i].pid());
    match e {
        GatherError::Refused(e) => Err(e),
        GatherError::Ended { index, status } => bail!(
            "{} {} before sending its {}",
            who(index),
            describe(status),
            phase.awaited()
        ),
        GatherError::Late { late } => bail!(
            "{} sent no {} within {} s (--wait); still running but silent",
            late.into_iter().map(who).collect::<Vec<_>>().join(", "),
            phase.awaited(),
            wait.as_secs()
        ),
        GatherError::Stopped { index, .. } => bail!("{} is stopped", who(index)),
        GatherError::Io(e) => bail!(e),
    }
}

/// The workers during one phase, as `workers::gather` asks about them.
struct Crew<'a> {
    ws: &'a mut [Worker],
    phase: Stage,
    n: &'a Narrator,
}

impl Roster for Crew<'_> {
    type Error = anyhow::Error;
    fn count(&self) -> usize {
        self.ws.len()
    }
    fn process(&mut self, i: usize) -> &mut workers::Worker {
        &mut self.ws[i].proc
    }
    fn finished(&self, i: usize) -> bool {
        self.ws[i].finished(self.phase)
    }
    fn handle(&mut self, msg: WorkerMsg) -> Result<()> {
        handle(msg, self.ws, self.phase, self.n)
    }
}

fn handle(msg: WorkerMsg, ws: &mut [Worker], phase: Stage, n: &Narrator) -> Result<()> {
    let from = msg.sender();
    let Some(w) = ws.iter_mut().find(|w| w.id == from) else {
        bail!("a message from unknown sender {from}: {msg}");
    };
    match (phase, msg) {
        (Stage::Hello, WorkerMsg::Hello { pid, cpu, .. }) => {
            ensure!(
                pid == w.pid(),
                "worker {from} says pid {pid}, but we started pid {}",
                w.pid()
            );
            n.say(format!(
                "Hello from worker {from}: pid {pid}, {}",
                cpu.map_or("not pinned".into(), |c| format!("pinned to CPU {c}"))
            ));
            w.pinned = cpu;
            w.hello = true;
        }
        (Stage::Results, WorkerMsg::Result { payload, .. }) => {
            let r =
                WorkResult::decode(&payload).with_context(|| format!("worker {from}'s Result"))?;
            n.say(format!(
                "Result from worker {from}: {} bytes, sum {}",
                payload.len(),
                r.sum
            ));
            w.result = Some(r);
        }
        (Stage::Results, WorkerMsg::Done { .. }) => {
            ensure!(
                w.result.is_some(),
                "worker {from} sent Done before its Result"
            );
            n.say(format!("Done from worker {from}"));
            w.done = true;
        }
        (_, WorkerMsg::Error { message, .. }) => {
            bail!("worker {from} (pid {}) failed: {message}", w.pid())
        }
        (phase, other) => bail!("unexpected while waiting for {}: {other}", phase.awaited()),
    }
    Ok(())
}

/// Tells the live workers to stop (`workers::stop`: Abort, priority 10, ahead of anything
/// queued), gives them 2 s, then kills what is left. Every child is reaped.
fn abort(ws: &mut [Worker], reason: &str, n: &Narrator) {
    let stopped = workers::stop(
        ws.iter_mut().map(|w| (&mut w.proc, &w.inbox)),
        reason,
        Duration::from_secs(2),
    );
    for s in &stopped {
        n.say(format!(
            "Abort to worker {} (pid {}){}",
            s.index,
            s.pid,
            s.abort_failed
                .as_ref()
                .map_or(String::new(), |e| format!(": {e}"))
        ));
    }
    for w in ws.iter() {
        let how = match stopped.iter().find(|s| s.index == w.id) {
            Some(s) => s.how.clone(),
            None => w.proc.exit().map_or("ended".into(), describe),
        };
        n.say(format!("worker {} (pid {}) {how}", w.id, w.pid()));
    }
}

fn print_table(args: &Args, ws: &[Worker]) -> Result<()> {
    outln!(
        "{:<7} {:>7} {:>6} {:>6}  {:<23} {:>20} {:>20} {:>3} {:>9}",
        "worker",
        "pid",
        "pinned",
        "ran on",
        "range",
        "sum (mod 2^64)",
        "expected",
        "ok",
        "time ms"
    );
    let mut bad = Vec::new();
    for w in ws {
        let r = w.result.expect("collect() waited for every Result");
        let (lo, hi) = share(w.id, args.count);
        let expected = sum_squares_below(hi).wrapping_sub(sum_squares_below(lo));
        let ok = r.sum == expected;
        if !ok {
            bad.push(w.id);
        }
        outln!(
            "{:<7} {:>7} {:>6} {:>6}  {:<23} {:>20} {:>20} {:>3} {:>9.2}",
            w.id,
            w.pid(),
            w.pinned.map_or("-".into(), |c| c.to_string()),
            r.cpu,
            format!("[{lo},{hi})"),
            r.sum,
            expected,
            if ok { "yes" } else { "NO" },
            r.nanos as f64 / 1e6
        );
    }
    ensure!(
        bad.is_empty(),
        "the sums of workers {bad:?} differ from the closed form n(n-1)(2n-1)/6"
    );
    outln!(
        "all {} results verified against the closed form n(n-1)(2n-1)/6",
        ws.len()
    );
    Ok(())
}
