//! # Lesson 10 — POSIX message queues: a coordinator and its worker processes
//!
//! A benchmark that runs several processes (`--procs N`) needs them to agree on when to start
//! and to hand their results back. A POSIX message queue (`mq_overview(7)`) is the kernel object
//! made for that: messages arrive whole, in priority order, and a queue has a name any process
//! of the machine can open.
//!
//! Part one is a tour of the calls, raw (through `nix`, one line per libc call), in the order a
//! program meets them:
//!
//! 1. the limits in `/proc/sys/fs/mqueue` and `ulimit -q`;
//! 2. `mq_open(O_CREAT | O_EXCL, attributes)` — and EEXIST when the name is taken;
//! 3. `mq_getattr`;
//! 4. `mq_send` with priorities, `mq_receive` — the highest priority comes first, and a buffer
//!    smaller than `mq_msgsize` is EMSGSIZE;
//! 5. `mq_timedreceive` on an empty queue — a timeout on an absolute `CLOCK_REALTIME` instant;
//! 6. `mq_setattr(O_NONBLOCK)` — EAGAIN instead of waiting, on empty and on full;
//! 7. what the limits refuse: `mq_maxmsg` = `msg_max` + 1, `mq_msgsize` = `msgsize_max` + 1;
//! 8. `mq_close`, `mq_unlink` — and ENOENT afterwards.
//!
//! Part two (`coordinator.rs`, `worker.rs` and `job.rs` beside this file) uses the library built
//! on those calls, `verbs_lab::mq` (typed, versioned messages, bounded waits, removal on drop
//! and on Ctrl-C), and the one supervisor of worker processes, `verbs_lab::workers`, which the
//! tools' `--procs` use too: this program re-executes itself as `-k`
//! worker processes; each says `Hello`, waits for `Go`, sums its share of a range of squares and
//! sends `Result` and `Done`; the coordinator checks every sum against the closed form.
//! `--kill-worker N` makes worker N die (SIGKILL) after `Go`: the coordinator names it within a
//! fraction of a second, aborts the others and fails cleanly. No queue outlives the program on
//! any exit path but SIGKILL of the coordinator itself; and what such a run left, the next one
//! removes at start (the queues of a coordinator that is gone).
//!
//! ```text
//! lesson10_mqueue                      # the tour, then 2 workers
//! lesson10_mqueue -k 4 --pin           # 4 workers, each pinned to a CPU
//! lesson10_mqueue --kill-worker 1      # a worker dies: see it reported
//! ```
//!
//! No RDMA device is needed: this lesson runs on any Linux machine.

#![forbid(unsafe_code)]

use std::fs;
use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context as _, Result};
use clap::Parser;
use nix::errno::Errno;
use nix::mqueue::{
    mq_close, mq_getattr, mq_open, mq_receive, mq_send, mq_setattr, mq_timedreceive, mq_unlink,
    MQ_OFlag, MqAttr,
};
use nix::sys::stat::Mode;
use nix::sys::time::TimeSpec;
use nix::time::{clock_gettime, ClockId};
use verbs_lab::mq::{self, Limits, Queue, PROC_DIR};
use verbs_lab::workers;
use verbs_lab_lessons::{
    check_range, outln, parse_args, report_error, until_stdout_closes, usage_error, Narrator,
};

// Part two lives beside this file: the coordinator (steps 9 to 14), a worker process, and the
// job they agree on. Part one, the tour of the raw calls, is this file.
mod coordinator;
mod job;
mod worker;

const PROGRAM: &str = "lesson10_mqueue";
const MAX_WORKERS: u32 = 8;
const MAX_COUNT: u64 = 1_000_000_000;

#[derive(Parser, Debug)]
#[command(
    about = "Lesson 10: POSIX message queues — the calls, the limits, and a coordinator with worker processes",
    after_help = "Examples:\n  lesson10_mqueue\n  lesson10_mqueue -k 4 --pin\n  lesson10_mqueue --kill-worker 1\n\
                  Needs no RDMA device. Queues are named /vl10-PID...; all are removed on exit and on Ctrl-C."
)]
struct Args {
    /// Worker processes to start (1 to 8)
    #[arg(short = 'k', long = "workers", default_value_t = 2)]
    workers: u32,
    /// How many numbers each worker sums (its share of the range)
    #[arg(short = 'n', long = "count", default_value_t = 1_000_000)]
    count: u64,
    /// Pin worker N to the N-th CPU this process may use (wrapping around)
    #[arg(long = "pin")]
    pin: bool,
    /// Make worker N die (SIGKILL itself) after Go, to see the coordinator notice and fail cleanly
    #[arg(long = "kill-worker", value_name = "N")]
    kill_worker: Option<u32>,
    /// Make worker N stop answering after Go: the coordinator's wait runs out (or try Ctrl-C)
    #[arg(long = "stall-worker", value_name = "N")]
    stall_worker: Option<u32>,
    /// Skip the tour of the raw calls (part one); run only the coordinator and workers
    #[arg(long = "no-tour")]
    no_tour: bool,
    /// Seconds any one wait may last
    #[arg(long = "wait", default_value_t = 10, value_parser = verbs_lab::cli::WaitSecs)]
    wait_secs: u64,
    /// No narration: print only results
    #[arg(short = 'q', long = "quiet")]
    quiet: bool,
    /// (internal) drop root and probe the queue limits (step 7)
    #[arg(long = "limit-probe", hide = true, requires = "queue")]
    limit_probe: bool,
    /// (internal) run as worker N
    #[arg(long = "worker", hide = true, requires = "queue")]
    worker: Option<u32>,
    /// (internal) the coordinator's queue name
    #[arg(long = "queue", hide = true)]
    queue: Option<String>,
}

fn check_flags(a: &Args) -> Result<()> {
    check_range(
        "-k",
        a.workers,
        1..=MAX_WORKERS,
        "workers (each costs a queue against `ulimit -q`)",
    )?;
    check_range(
        "-n",
        a.count,
        1..=MAX_COUNT,
        "numbers for each worker to sum",
    )?;
    for (flag, w) in [
        ("--kill-worker", a.kill_worker),
        ("--stall-worker", a.stall_worker),
    ] {
        if let Some(w) = w {
            ensure!(
                w < a.workers,
                "{flag} {w}: workers are numbered 0 to {} (-k {})",
                a.workers - 1,
                a.workers
            );
        }
    }
    if let Some(q) = &a.queue {
        mq::check_name(q)?;
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Args = parse_args(PROGRAM);
    check_flags(&args).unwrap_or_else(|e| usage_error::<Args>(PROGRAM, &e));
    until_stdout_closes(|| run(&args))
}

/// The lesson after its flags were checked: a limit probe, a worker, or the coordinator.
fn run(args: &Args) -> ExitCode {
    if args.limit_probe {
        return match limit_probe_child(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => report_error(&format!("{PROGRAM} limit probe"), &e),
        };
    }
    if let Some(w) = args.worker {
        // A worker creates no queue: nothing to clean up on a signal.
        return match worker::run(args, w) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => report_error(&format!("{PROGRAM} worker {w}"), &e),
        };
    }
    // First, before any thread exists: Ctrl-C, SIGTERM and SIGHUP remove our queues (see
    // `verbs_lab::mq::install_cleanup_on_signals` for how, without a signal handler).
    if let Err(e) = mq::install_cleanup_on_signals() {
        return report_error(PROGRAM, &e.into());
    }
    let n = Narrator { quiet: args.quiet };
    // Then the queues of an earlier run whose coordinator was killed outright (SIGKILL) and
    // whose workers died before they could remove them: /vl10-PID… of a PID that is gone.
    for removed in job::QUEUES.remove_orphans() {
        n.say(removed);
    }
    let result = (|| {
        if !args.no_tour {
            tour(&n)?;
        }
        coordinator::run(args, &n)
    })();
    // Every queue this process created is gone by now (RAII); this catches a bug that left one.
    let left = mq::registered_names();
    if !left.is_empty() {
        verbs_lab::eprintln_whole!(
            "{PROGRAM}: removing queues left registered: {}",
            left.join(" ")
        );
        mq::unlink_all_registered();
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => report_error(PROGRAM, &e),
    }
}

// =============================================================================================
// Part one: the calls, one by one

/// Removes the tour's queue however the tour ends (error included), and keeps its name
/// registered for the signal cleanup while it exists.
struct TourQueue {
    name: String,
}

impl TourQueue {
    fn register(name: &str) -> TourQueue {
        mq::register_for_cleanup(name);
        TourQueue { name: name.into() }
    }
}

impl Drop for TourQueue {
    fn drop(&mut self) {
        let _ = mq_unlink(self.name.as_str());
        mq::forget_registered(&self.name);
    }
}

fn tour(n: &Narrator) -> Result<()> {
    let pid = std::process::id();
    let name = format!("{}-tour", job::QUEUES.base(pid));

    // 1. The limits. The kernel refuses queues beyond them; root is bound too unless it holds
    //    CAP_SYS_RESOURCE (containers usually drop it).
    n.step(1, "The limits: /proc/sys/fs/mqueue and ulimit -q");
    let l = Limits::read();
    let show = |v: Option<u64>| v.map_or("unreadable".to_string(), |v| v.to_string());
    n.say(format!(
        "{PROC_DIR}/msg_max         = {:>6}   most messages per queue (mq_maxmsg)",
        show(l.msg_max)
    ));
    n.say(format!(
        "{PROC_DIR}/msgsize_max     = {:>6}   largest message (mq_msgsize)",
        show(l.msgsize_max)
    ));
    n.say(format!(
        "{PROC_DIR}/queues_max      = {:>6}   queues in this IPC namespace",
        show(l.queues_max)
    ));
    n.say(format!(
        "{PROC_DIR}/msg_default     = {:>6}   mq_maxmsg when mq_open gets no attributes",
        show(l.msg_default)
    ));
    n.say(format!(
        "{PROC_DIR}/msgsize_default = {:>6}   mq_msgsize likewise",
        show(l.msgsize_default)
    ));
    n.say(format!(
        "getrlimit(RLIMIT_MSGQUEUE) = {} bytes (ulimit -q): all queues of this user together; \
         a 10 x 8192 queue counts {} of them",
        show(l.rlimit_bytes),
        mq::queue_bytes(10, 8192)
    ));
    match mqueue_mount() {
        Some(dir) => n.say(format!(
            "the mqueue file system is mounted at {}: queues show there as files",
            dir.display()
        )),
        None => n.say(
            "the mqueue file system is not mounted: mq_open works anyway; to see queues as \
             files: mkdir -p /dev/mqueue; mount -t mqueue none /dev/mqueue",
        ),
    }

    // 2. mq_open with O_CREAT | O_EXCL: create, and fail if the name exists — so we never
    //    share a queue with a stale one by accident. The attributes fix capacity and message
    //    size for the queue's life; mode 0600 keeps other users out.
    n.step(
        2,
        "mq_open(O_CREAT | O_EXCL | O_RDWR, 0600, {maxmsg 4, msgsize 128})",
    );
    let create = MQ_OFlag::O_CREAT | MQ_OFlag::O_EXCL | MQ_OFlag::O_RDWR;
    let mode = Mode::S_IRUSR | Mode::S_IWUSR;
    let attr = MqAttr::new(0, 4, 128, 0);
    let mqd = mq_open(name.as_str(), create, mode, Some(&attr))
        .map_err(|e| anyhow::anyhow!("mq_open({name}, O_CREAT|O_EXCL): {}", e.desc()))?;
    let _cleanup = TourQueue::register(&name);
    let fd = std::os::fd::AsRawFd::as_raw_fd(&mqd);
    n.say(format!(
        "mq_open(\"{name}\") = descriptor {fd}: on Linux a queue descriptor is a file \
         descriptor{}",
        fd_flags(fd).map_or(String::new(), |f| format!(" (/proc/self/fdinfo/{fd}: {f})"))
    ));
    match mq_open(name.as_str(), create, mode, Some(&attr)) {
        Err(Errno::EEXIST) => n.say(format!(
            "mq_open(\"{name}\") again with O_EXCL: EEXIST ({}) — the name is taken",
            Errno::EEXIST.desc()
        )),
        Ok(second) => {
            let _ = mq_close(second);
            bail!("a second mq_open(O_CREAT|O_EXCL) of {name} succeeded: O_EXCL was ignored?");
        }
        Err(e) => bail!("the second mq_open of {name} failed with {e}, expected EEXIST"),
    }

    // 3. mq_getattr: capacity, message size, flags, and how many messages wait.
    n.step(3, "mq_getattr");
    let a = mq_getattr(&mqd).context("mq_getattr")?;
    n.say(format!(
        "mq_flags {} (0: blocking), mq_maxmsg {}, mq_msgsize {}, mq_curmsgs {}",
        a.flags(),
        a.maxmsg(),
        a.msgsize(),
        a.curmsgs()
    ));

    // 4. mq_send with priorities: the queue is ordered by priority (higher first), and FIFO
    //    within one priority. mq_receive's buffer must hold mq_msgsize bytes, whatever the
    //    size of the message actually waiting.
    n.step(4, "mq_send with priorities, mq_receive in priority order");
    let sent: [(&str, u32); 4] = [("low", 1), ("high", 9), ("mid", 5), ("high again", 9)];
    for (text, prio) in sent {
        mq_send(&mqd, text.as_bytes(), prio).with_context(|| format!("mq_send({text})"))?;
        n.say(format!("mq_send(\"{text}\", priority {prio})"));
    }
    let a = mq_getattr(&mqd).context("mq_getattr")?;
    n.say(format!(
        "mq_getattr: mq_curmsgs {} of mq_maxmsg {} — the queue is full; a fifth blocking \
         mq_send would wait for room",
        a.curmsgs(),
        a.maxmsg()
    ));
    show_queue_file(&name, n);
    let mut small = [0u8; 64];
    let mut prio = 0u32;
    match mq_receive(&mqd, &mut small, &mut prio) {
        Err(Errno::EMSGSIZE) => n.say(format!(
            "mq_receive with a 64-byte buffer: EMSGSIZE ({}) — the buffer must hold mq_msgsize \
             (128) bytes, even for a 3-byte message",
            Errno::EMSGSIZE.desc()
        )),
        other => bail!("mq_receive with a 64-byte buffer: expected EMSGSIZE, got {other:?}"),
    }
    let mut buf = [0u8; 128];
    let mut order = Vec::new();
    for _ in 0..sent.len() {
        let len = mq_receive(&mqd, &mut buf, &mut prio).context("mq_receive")?;
        let text = String::from_utf8_lossy(&buf[..len]).into_owned();
        n.say(format!(
            "mq_receive = {len} bytes \"{text}\", priority {prio}"
        ));
        order.push(format!("{text}({prio})"));
    }
    outln!("received in priority order: {}", order.join(" "));
    ensure!(
        order == ["high(9)", "high again(9)", "mid(5)", "low(1)"],
        "unexpected receive order {order:?}"
    );

    // 5. mq_timedreceive: a bounded wait. The deadline is an absolute CLOCK_REALTIME instant,
    //    not a duration: read the clock, add the timeout. (A wall-clock step during the wait
    //    moves the deadline; verbs_lab::mq waits with poll(2) on CLOCK_MONOTONIC instead.)
    n.step(5, "mq_timedreceive on the empty queue: a timeout");
    let timeout = Duration::from_millis(300);
    let now = clock_gettime(ClockId::CLOCK_REALTIME).context("clock_gettime")?;
    let deadline = now + TimeSpec::from(timeout);
    let t0 = Instant::now();
    let r = mq_timedreceive(&mqd, &mut buf, &mut prio, &deadline);
    let waited = t0.elapsed();
    match r {
        Err(Errno::ETIMEDOUT) => {
            n.say(format!(
                "mq_timedreceive(abs_timeout = CLOCK_REALTIME now + {} ms): ETIMEDOUT ({})",
                timeout.as_millis(),
                Errno::ETIMEDOUT.desc()
            ));
            outln!(
                "mq_timedreceive timed out after {:.0} ms (deadline {} ms)",
                waited.as_secs_f64() * 1e3,
                timeout.as_millis()
            );
        }
        other => bail!("mq_timedreceive on an empty queue: expected ETIMEDOUT, got {other:?}"),
    }

    // 6. mq_setattr can change one thing: O_NONBLOCK. Then an empty queue answers EAGAIN at
    //    once instead of waiting, and so does a full one to mq_send.
    n.step(6, "mq_setattr(O_NONBLOCK): EAGAIN instead of waiting");
    let nonblock = MqAttr::new(MQ_OFlag::O_NONBLOCK.bits().into(), 0, 0, 0);
    let old = mq_setattr(&mqd, &nonblock).context("mq_setattr")?;
    let a = mq_getattr(&mqd).context("mq_getattr")?;
    n.say(format!(
        "mq_setattr: flags {} -> {} (O_NONBLOCK = {:#o}); maxmsg and msgsize are ignored by it",
        old.flags(),
        a.flags(),
        MQ_OFlag::O_NONBLOCK.bits()
    ));
    let t0 = Instant::now();
    match mq_receive(&mqd, &mut buf, &mut prio) {
        Err(Errno::EAGAIN) => {
            let us = t0.elapsed().as_secs_f64() * 1e6;
            n.say(format!(
                "mq_receive on the empty queue: EAGAIN ({}), returned after {us:.0} µs without \
                 waiting",
                Errno::EAGAIN.desc()
            ));
            outln!("nonblocking mq_receive on an empty queue: EAGAIN at once");
        }
        other => bail!("nonblocking mq_receive on an empty queue: expected EAGAIN, got {other:?}"),
    }
    for i in 0..4 {
        mq_send(&mqd, format!("filler {i}").as_bytes(), 0).context("mq_send")?;
    }
    match mq_send(&mqd, b"one too many", 0) {
        Err(Errno::EAGAIN) => n.say("4 messages sent; the fifth mq_send on the full queue: EAGAIN"),
        other => bail!("nonblocking mq_send on a full queue: expected EAGAIN, got {other:?}"),
    }
    while mq_receive(&mqd, &mut buf, &mut prio).is_ok() {}

    // 7. The limits at work: one message more than msg_max, one byte more than msgsize_max.
    //    Both are EINVAL — the same errno as a malformed attribute, so the errno alone does not
    //    say which limit refused; verbs_lab::mq reads the limits and says it. A process holding
    //    CAP_SYS_RESOURCE (root on a VM or a bare machine, rarely in a container) is bound only
    //    by the kernel's hard ceilings; to show the refusal there, a child gives up root.
    n.step(7, "What the limits refuse");
    let probe = format!("{}-limit", job::QUEUES.base(pid));
    if mq::has_cap_sys_resource() {
        n.say(
            "this process holds CAP_SYS_RESOURCE (bit 24 of CapEff in /proc/self/status): \
             msg_max and msgsize_max do not bind it",
        );
        limit_probes(&l, &probe, false, n)?;
        n.say(
            "a child process shows what everyone else gets: it calls setuid(65534) first, \
             which clears all its capabilities",
        );
        let exe = std::env::current_exe().context("finding this program's path")?;
        let mut child = Command::new(exe);
        child.args(["--limit-probe", "--queue", &probe]);
        if n.quiet {
            child.arg("--quiet");
        }
        let st = child.status().context("starting the limit-probe child")?;
        ensure!(
            st.success(),
            "the limit-probe child {}",
            workers::describe(st)
        );
    } else {
        limit_probes(&l, &probe, true, n)?;
    }
    // 8. mq_close releases our descriptor; the queue lives on until mq_unlink removes its
    //    name (and the last descriptor closes). Forgetting mq_unlink leaks the queue — and its
    //    bytes against ulimit -q — until reboot.
    n.step(8, "mq_close, mq_unlink");
    mq_close(mqd).context("mq_close")?;
    n.say(format!("mq_close(descriptor {fd})"));
    mq_unlink(name.as_str()).with_context(|| format!("mq_unlink({name})"))?;
    mq::forget_registered(&name);
    n.say(format!("mq_unlink(\"{name}\")"));
    match mq_open(name.as_str(), MQ_OFlag::O_RDONLY, Mode::empty(), None) {
        Err(Errno::ENOENT) => {
            n.say(format!(
                "mq_open(\"{name}\", O_RDONLY): ENOENT ({}) — gone",
                Errno::ENOENT.desc()
            ));
            outln!("after mq_unlink: mq_open gives ENOENT");
        }
        other => bail!("mq_open after mq_unlink: expected ENOENT, got {other:?}"),
    }
    Ok(())
}

/// Tries `mq_open` with `msg_max + 1` messages, then with `msgsize_max + 1` bytes. With
/// `expect_refusal`, each must fail with EINVAL (printed as "limit refused: ..."), and the
/// library's error for the first is shown too.
fn limit_probes(l: &Limits, probe: &str, expect_refusal: bool, n: &Narrator) -> Result<()> {
    let (Some(msg_max), Some(msgsize_max)) = (l.msg_max, l.msgsize_max) else {
        n.say(format!(
            "{PROC_DIR} is unreadable: skipping the limit demonstration"
        ));
        return Ok(());
    };
    let create = MQ_OFlag::O_CREAT | MQ_OFlag::O_EXCL | MQ_OFlag::O_RDWR;
    let mode = Mode::S_IRUSR | Mode::S_IWUSR;
    for (maxmsg, msgsize, what) in [
        (
            msg_max + 1,
            128,
            format!("mq_maxmsg {} = msg_max + 1", msg_max + 1),
        ),
        (
            1,
            msgsize_max + 1,
            format!("mq_msgsize {} = msgsize_max + 1", msgsize_max + 1),
        ),
    ] {
        let attr = MqAttr::new(0, maxmsg as _, msgsize as _, 0);
        match mq_open(probe, create, mode, Some(&attr)) {
            Err(e) => {
                n.say(format!("mq_open with {what}: {e:?} ({})", e.desc()));
                outln!("limit refused: {what}: {e:?}");
                ensure!(
                    e == Errno::EINVAL,
                    "mq_open with {what}: expected EINVAL, got {e:?}"
                );
            }
            Ok(q) => {
                let _ = mq_close(q);
                let _ = mq_unlink(probe);
                n.say(format!("mq_open with {what}: allowed (and removed again)"));
                ensure!(
                    !expect_refusal,
                    "mq_open with {what} succeeded without CAP_SYS_RESOURCE"
                );
            }
        }
    }
    if expect_refusal {
        let e = match Queue::create(probe, msg_max as usize + 1, 128) {
            Err(e) => e,
            Ok(_) => bail!("Queue::create with msg_max + 1 messages succeeded"),
        };
        n.say("the same through verbs_lab::mq::Queue::create, whose error names the limit:");
        outln!("  {e}");
    }
    Ok(())
}

/// The hidden `--limit-probe` child of step 7: drop root, then probe the limits.
fn limit_probe_child(args: &Args) -> Result<()> {
    let n = Narrator { quiet: args.quiet };
    let probe = args
        .queue
        .as_deref()
        .expect("clap: --limit-probe requires --queue");
    nix::unistd::setuid(nix::unistd::Uid::from_raw(65534)).context("setuid(65534)")?;
    n.say(format!(
        "child pid {}: setuid(65534) -> uid {}, CAP_SYS_RESOURCE {}",
        std::process::id(),
        nix::unistd::getuid(),
        if mq::has_cap_sys_resource() {
            "still held"
        } else {
            "gone"
        }
    ));
    limit_probes(&Limits::read(), probe, true, &n)
}

/// Where the mqueue file system is mounted, from `/proc/mounts` (`verbs_lab::mq`).
fn mqueue_mount() -> Option<PathBuf> {
    mq::mount_point()
}

/// The `flags:` line of `/proc/self/fdinfo/FD`, explained.
fn fd_flags(fd: i32) -> Option<String> {
    let info = fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).ok()?;
    let flags = info.lines().find_map(|l| l.strip_prefix("flags:"))?.trim();
    let bits = u32::from_str_radix(flags, 8).ok()?;
    let cloexec = if bits & 0o2000000 != 0 {
        "O_CLOEXEC set by the kernel: child processes do not inherit it"
    } else {
        "no O_CLOEXEC"
    };
    Some(format!("flags {flags}, {cloexec}"))
}

/// Prints `/dev/mqueue/NAME` when the mqueue file system is mounted.
fn show_queue_file(name: &str, n: &Narrator) {
    if let Some(dir) = mqueue_mount() {
        let path = dir.join(name.trim_start_matches('/'));
        if let Ok(text) = fs::read_to_string(&path) {
            n.say(format!("{}: {}", path.display(), text.trim()));
        }
    }
}
