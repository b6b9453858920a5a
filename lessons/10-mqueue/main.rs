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
//! Part two uses the library built on those calls, `verbs_lab::mq` (typed, versioned messages,
//! bounded waits, removal on drop and on Ctrl-C): this program re-executes itself as `-k`
//! worker processes; each says `Hello`, waits for `Go`, sums its share of a range of squares and
//! sends `Result` and `Done`; the coordinator checks every sum against the closed form.
//! `--kill-worker N` makes worker N die (SIGKILL) after `Go`: the coordinator names it within a
//! fraction of a second, aborts the others and fails cleanly. No queue outlives the program on
//! any exit path but SIGKILL of the coordinator itself.
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
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context as _, Result};
use clap::Parser;
use nix::errno::Errno;
use nix::mqueue::{
    mq_close, mq_getattr, mq_open, mq_receive, mq_send, mq_setattr, mq_timedreceive, mq_unlink,
    MQ_OFlag, MqAttr,
};
use nix::sched::{sched_getcpu, sched_setaffinity, CpuSet};
use nix::sys::signal::{kill, Signal};
use nix::sys::stat::Mode;
use nix::sys::time::TimeSpec;
use nix::time::{clock_gettime, ClockId};
use nix::unistd::{getpid, getppid, Pid};
use verbs_lab::affinity::allowed_cpus;
use verbs_lab::mq::{self, Limits, Msg, Queue, MAX_MSG_LEN, MAX_TEXT, PROC_DIR};
use verbs_lab_lessons::{report_error, usage_error, Narrator};

const PROGRAM: &str = "lesson10_mqueue";
const MAX_WORKERS: u32 = 8;
const MAX_COUNT: u64 = 1_000_000_000;

#[derive(Parser, Debug)]
#[command(
    name = PROGRAM,
    version,
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
    #[arg(long = "wait", default_value_t = 10)]
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
    ensure!(
        (1..=MAX_WORKERS).contains(&a.workers),
        "-k {}: start 1 to {MAX_WORKERS} workers (each costs a queue against `ulimit -q`)",
        a.workers
    );
    ensure!(
        (1..=MAX_COUNT).contains(&a.count),
        "-n {}: each worker sums 1 to {MAX_COUNT} numbers",
        a.count
    );
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
    ensure!(
        a.wait_secs >= 1,
        "--wait 0: every wait needs at least 1 s, or nothing could ever arrive"
    );
    if let Some(q) = &a.queue {
        mq::check_name(q)?;
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Args = verbs_lab::cli::parse();
    check_flags(&args).unwrap_or_else(|e| usage_error::<Args>(&e));
    if args.limit_probe {
        return match limit_probe_child(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => report_error(&format!("{PROGRAM} limit probe"), &e),
        };
    }
    if let Some(w) = args.worker {
        // A worker creates no queue: nothing to clean up on a signal.
        return match worker::run(&args, w) {
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
    let result = (|| {
        if !args.no_tour {
            tour(&n)?;
        }
        coordinator::run(&args, &n)
    })();
    // Every queue this process created is gone by now (RAII); this catches a bug that left one.
    let left = mq::registered_names();
    if !left.is_empty() {
        eprintln!(
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
    let name = format!("/vl10-{pid}-tour");

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
    println!("received in priority order: {}", order.join(" "));
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
            println!(
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
            println!("nonblocking mq_receive on an empty queue: EAGAIN at once");
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
    let probe = format!("/vl10-{pid}-limit");
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
            coordinator::describe(st)
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
            println!("after mq_unlink: mq_open gives ENOENT");
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
                println!("limit refused: {what}: {e:?}");
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
        println!("  {e}");
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

/// Where the mqueue file system is mounted, from `/proc/self/mounts`.
fn mqueue_mount() -> Option<PathBuf> {
    let mounts = fs::read_to_string("/proc/self/mounts").ok()?;
    mounts.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() > 2 && f[2] == "mqueue").then(|| PathBuf::from(f[1]))
    })
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

// =============================================================================================
// Part two: a coordinator and its workers, over verbs_lab::mq

/// The queue names of a run: the coordinator's inbox, and one inbox per worker.
fn worker_queue(base: &str, w: u32) -> String {
    format!("{base}-w{w}")
}

/// What a worker computes: the sum of i² over its share [w·count, (w+1)·count), mod 2⁶⁴.
fn share(w: u32, count: u64) -> (u64, u64) {
    (u64::from(w) * count, u64::from(w + 1) * count)
}

/// Σ i² for 0 ≤ i < n, mod 2⁶⁴, in closed form: n(n−1)(2n−1)/6 (exact in u128 for n < 2⁴⁰).
fn sum_squares_below(n: u64) -> u64 {
    let n = u128::from(n);
    if n == 0 {
        return 0;
    }
    (n * (n - 1) * (2 * n - 1) / 6) as u64
}

/// The Result payload this lesson defines (20 bytes, big-endian): the sum, the nanoseconds the
/// work took, and the CPU the worker finished on. `verbs_lab::mq` carries it as opaque bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct WorkResult {
    sum: u64,
    nanos: u64,
    cpu: u32,
}

impl WorkResult {
    const LEN: usize = 20;

    fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(Self::LEN);
        v.extend_from_slice(&self.sum.to_be_bytes());
        v.extend_from_slice(&self.nanos.to_be_bytes());
        v.extend_from_slice(&self.cpu.to_be_bytes());
        v
    }

    fn decode(b: &[u8]) -> Result<WorkResult> {
        ensure!(
            b.len() == Self::LEN,
            "a result payload of {} bytes, expected {}",
            b.len(),
            Self::LEN
        );
        let u64_at = |i: usize| u64::from_be_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        Ok(WorkResult {
            sum: u64_at(0),
            nanos: u64_at(8),
            cpu: u32::from_be_bytes(b[16..20].try_into().expect("4 bytes")),
        })
    }
}

mod coordinator {
    use super::*;

    /// One worker process as the coordinator sees it.
    struct Worker {
        id: u32,
        child: Child,
        inbox: Queue,
        pinned: Option<u32>,
        hello: bool,
        result: Option<WorkResult>,
        done: bool,
        exit: Option<ExitStatus>,
    }

    impl Worker {
        fn pid(&self) -> u32 {
            self.child.id()
        }
        fn finished(&self, phase: Phase) -> bool {
            match phase {
                Phase::Hello => self.hello,
                Phase::Results => self.result.is_some() && self.done,
            }
        }
    }

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Phase {
        Hello,
        Results,
    }

    impl Phase {
        fn awaited(self) -> &'static str {
            match self {
                Phase::Hello => "Hello",
                Phase::Results => "Result and Done",
            }
        }
    }

    pub fn run(args: &Args, n: &Narrator) -> Result<()> {
        let base = format!("/vl10-{}", std::process::id());
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
            let name = worker_queue(&base, w);
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

        // 10. Workers: this same program, re-executed with the hidden --worker flag.
        n.step(
            10,
            "Start the workers: std::env::current_exe() --worker N --queue NAME",
        );
        let exe = std::env::current_exe().context("finding this program's path")?;
        let mut ws = Vec::new();
        let mut started = Ok(());
        for (w, q) in (0..k).zip(inboxes) {
            match spawn_worker(&exe, args, &base, w) {
                Ok(child) => {
                    n.say(format!("worker {w}: pid {}", child.id()));
                    ws.push(Worker {
                        id: w,
                        child,
                        inbox: q,
                        pinned: None,
                        hello: false,
                        result: None,
                        done: false,
                        exit: None,
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
        println!(
            "queues removed: {} (mq_open of each name: ENOENT)",
            names.join(" ")
        );
        outcome
    }

    fn spawn_worker(exe: &PathBuf, args: &Args, base: &str, w: u32) -> Result<Child> {
        let mut cmd = Command::new(exe);
        cmd.args(["--worker", &w.to_string(), "--queue", base])
            .args(["-n", &args.count.to_string()])
            .args(["--wait", &args.wait_secs.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        if args.pin {
            cmd.arg("--pin");
        }
        if let Some(kw) = args.kill_worker {
            cmd.args(["--kill-worker", &kw.to_string()]);
        }
        if let Some(sw) = args.stall_worker {
            cmd.args(["--stall-worker", &sw.to_string()]);
        }
        cmd.spawn()
            .with_context(|| format!("starting worker {w} ({})", exe.display()))
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
        collect(inbox, ws, Phase::Hello, wait, n)?;

        // 12. Go, with a common start instant 20 ms ahead on CLOCK_MONOTONIC (one clock for
        //     every process of the machine), so the workers start together.
        n.step(12, "Send Go to every worker's queue");
        let start_at_ns = mq::monotonic_ns() + 20_000_000;
        for w in ws.iter() {
            w.inbox
                .send(&Msg::Go { start_at_ns }, 0)
                .with_context(|| format!("sending Go to worker {}", w.id))?;
        }
        n.say(format!(
            "Go {{ start_at_ns: {start_at_ns} }} sent to {} workers, priority 0",
            ws.len()
        ));

        n.step(13, "Collect Result and Done; check each sum");
        collect(inbox, ws, Phase::Results, wait, n)?;
        for w in ws.iter_mut() {
            let st = wait_exit(&mut w.child, wait)
                .with_context(|| format!("worker {} (pid {})", w.id, w.pid()))?;
            ensure!(
                st.success(),
                "worker {} (pid {}) sent Done but then {}",
                w.id,
                w.pid(),
                describe(st)
            );
            w.exit = Some(st);
        }
        print_table(args, ws)
    }

    /// Receives until every worker finished `phase`. Between messages — whenever the queue
    /// has been empty for 100 ms — looks at the processes: one that exited without finishing
    /// is reported by number and pid. Everything is bounded by `wait`.
    fn collect(
        inbox: &Queue,
        ws: &mut [Worker],
        phase: Phase,
        wait: Duration,
        n: &Narrator,
    ) -> Result<()> {
        let deadline = Instant::now() + wait;
        while !ws.iter().all(|w| w.finished(phase)) {
            match inbox.recv_timeout(Duration::from_millis(100)) {
                Ok(msg) => handle(msg, ws, phase, n)?,
                Err(e) if e.is_timeout() => {
                    for i in 0..ws.len() {
                        if ws[i].finished(phase) {
                            continue;
                        }
                        if let Some(st) = ws[i].child.try_wait().context("waitpid")? {
                            ws[i].exit = Some(st);
                            // What it sent before exiting is in the queue now: take it first.
                            while let Ok((msg, _)) = inbox.try_recv() {
                                handle(msg, ws, phase, n)?;
                            }
                            let w = &ws[i];
                            if !w.finished(phase) {
                                bail!(
                                    "worker {} (pid {}) {} before sending its {}",
                                    w.id,
                                    w.pid(),
                                    describe(st),
                                    phase.awaited()
                                );
                            }
                        }
                    }
                }
                Err(e) => return Err(e).context("receiving from the workers"),
            }
            if Instant::now() >= deadline {
                let late: Vec<String> = ws
                    .iter()
                    .filter(|w| !w.finished(phase))
                    .map(|w| format!("worker {} (pid {})", w.id, w.pid()))
                    .collect();
                bail!(
                    "{} sent no {} within {} s (--wait); still running but silent",
                    late.join(", "),
                    phase.awaited(),
                    wait.as_secs()
                );
            }
        }
        Ok(())
    }

    fn handle(msg: Msg, ws: &mut [Worker], phase: Phase, n: &Narrator) -> Result<()> {
        let from = msg.sender();
        let Some(w) = ws.iter_mut().find(|w| w.id == from) else {
            bail!("a message from unknown sender {from}: {msg}");
        };
        match (phase, msg) {
            (Phase::Hello, Msg::Hello { pid, cpu, .. }) => {
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
            (Phase::Results, Msg::Result { payload, .. }) => {
                let r = WorkResult::decode(&payload)
                    .with_context(|| format!("worker {from}'s Result"))?;
                n.say(format!(
                    "Result from worker {from}: {} bytes, sum {}",
                    payload.len(),
                    r.sum
                ));
                w.result = Some(r);
            }
            (Phase::Results, Msg::Done { .. }) => {
                ensure!(
                    w.result.is_some(),
                    "worker {from} sent Done before its Result"
                );
                n.say(format!("Done from worker {from}"));
                w.done = true;
            }
            (_, Msg::Error { message, .. }) => {
                bail!("worker {from} (pid {}) failed: {message}", w.pid())
            }
            (phase, other) => bail!("unexpected while waiting for {}: {other}", phase.awaited()),
        }
        Ok(())
    }

    /// Tells the live workers to stop (Abort, priority 10: ahead of anything queued), waits
    /// briefly, then kills what is left. Every child is reaped.
    fn abort(ws: &mut [Worker], reason: &str, n: &Narrator) {
        let live: Vec<usize> = (0..ws.len())
            .filter(|&i| ws[i].exit.is_none() && !matches!(ws[i].child.try_wait(), Ok(Some(_))))
            .collect();
        for &i in &live {
            let r = ws[i].inbox.try_send(
                &Msg::Abort {
                    reason: reason.chars().take(500).collect(),
                },
                10,
            );
            n.say(format!(
                "Abort to worker {} (pid {}){}",
                ws[i].id,
                ws[i].pid(),
                r.err().map_or(String::new(), |e| format!(": {e}"))
            ));
        }
        for w in ws.iter_mut() {
            match wait_exit(&mut w.child, Duration::from_secs(2)) {
                Ok(st) => n.say(format!(
                    "worker {} (pid {}) {}",
                    w.id,
                    w.pid(),
                    describe(st)
                )),
                Err(_) => {
                    let _ = w.child.kill();
                    let _ = w.child.wait();
                    n.say(format!("worker {} (pid {}) killed", w.id, w.pid()));
                }
            }
        }
    }

    /// Waits up to `wait` for the child to exit.
    fn wait_exit(child: &mut Child, wait: Duration) -> Result<ExitStatus> {
        let deadline = Instant::now() + wait;
        loop {
            if let Some(st) = child.try_wait().context("waitpid")? {
                return Ok(st);
            }
            if Instant::now() >= deadline {
                bail!(
                    "still running {} s after it should have exited",
                    wait.as_secs()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn print_table(args: &Args, ws: &[Worker]) -> Result<()> {
        println!(
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
            println!(
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
        println!(
            "all {} results verified against the closed form n(n-1)(2n-1)/6",
            ws.len()
        );
        Ok(())
    }

    /// "exited with status 3", "was killed by SIGKILL".
    pub(crate) fn describe(st: ExitStatus) -> String {
        match (st.code(), st.signal()) {
            (Some(c), _) => format!("exited with status {c}"),
            (None, Some(s)) => match Signal::try_from(s) {
                Ok(sig) => format!("was killed by {sig}"),
                Err(_) => format!("was killed by signal {s}"),
            },
            _ => format!("ended ({st})"),
        }
    }
}

mod worker {
    use super::*;

    /// A worker: Hello, wait for Go, the work, Result, Done. Any failure is also sent to the
    /// coordinator as an Error message (best effort) before the process exits non-zero.
    pub fn run(args: &Args, w: u32) -> Result<()> {
        let base = args
            .queue
            .as_deref()
            .expect("clap: --worker requires --queue");
        let coord = Queue::open(base).context("opening the coordinator's queue")?;
        let r = body(args, w, base, &coord);
        if let Err(e) = &r {
            let _ = coord.try_send(&Msg::error(w, format!("{e:#}")), 1);
        }
        r
    }

    fn body(args: &Args, w: u32, base: &str, coord: &Queue) -> Result<()> {
        let parent = getppid();
        let wait = Duration::from_secs(args.wait_secs);
        let inbox = Queue::open(&worker_queue(base, w)).context("opening our queue")?;
        let cpu = if args.pin { Some(pin(w)?) } else { None };
        coord
            .send(
                &Msg::Hello {
                    worker: w,
                    pid: std::process::id(),
                    cpu,
                },
                0,
            )
            .context("sending Hello")?;
        let start_at = match next(&inbox, wait, parent)? {
            Msg::Go { start_at_ns } => start_at_ns,
            Msg::Abort { reason } => bail!("aborted by the coordinator before Go: {reason}"),
            other => bail!("expected Go, got {other}"),
        };
        // Start together with the others, but never wait longer than --wait for it.
        let now = mq::monotonic_ns();
        if start_at > now {
            std::thread::sleep(Duration::from_nanos(start_at - now).min(wait));
        }
        if args.kill_worker == Some(w) {
            eprintln!(
                "{PROGRAM} worker {w}: --kill-worker {w}: sending SIGKILL to myself (pid {})",
                std::process::id()
            );
            kill(getpid(), Signal::SIGKILL).context("kill(SIGKILL)")?;
        }
        if args.stall_worker == Some(w) {
            eprintln!(
                "{PROGRAM} worker {w}: --stall-worker {w}: not answering (pid {})",
                std::process::id()
            );
            // Silent for longer than the coordinator waits: it must notice, not us.
            let why = match next(&inbox, 3 * wait, parent)? {
                Msg::Abort { reason } => format!("stalled, then aborted: {reason}"),
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
                &Msg::Result {
                    worker: w,
                    payload: result.encode(),
                },
                0,
            )
            .context("sending Result")?;
        coord
            .send(&Msg::Done { worker: w }, 0)
            .context("sending Done")?;
        Ok(())
    }

    /// The next message on our queue, within `wait`; gives up early if the coordinator is gone
    /// (we were re-parented: getppid() changed).
    fn next(inbox: &Queue, wait: Duration, parent: Pid) -> Result<Msg> {
        let deadline = Instant::now() + wait;
        loop {
            match inbox.recv_timeout(Duration::from_millis(100)) {
                Ok(m) => return Ok(m),
                Err(e) if e.is_timeout() => {}
                Err(e) => return Err(e).context("receiving from the coordinator"),
            }
            if getppid() != parent {
                bail!("the coordinator (pid {parent}) is gone");
            }
            if Instant::now() >= deadline {
                bail!(
                    "nothing from the coordinator within {} s (--wait)",
                    wait.as_secs()
                );
            }
        }
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closed_form_matches_the_loop() {
        for n in [0u64, 1, 2, 3, 10, 1000] {
            let lp = (0..n).fold(0u64, |s, i| s.wrapping_add(i * i));
            assert_eq!(sum_squares_below(n), lp, "n = {n}");
        }
        let (lo, hi) = share(1, 1000);
        let lp = (lo..hi).fold(0u64, |s, i| s.wrapping_add(i * i));
        assert_eq!(
            sum_squares_below(hi).wrapping_sub(sum_squares_below(lo)),
            lp
        );
    }

    #[test]
    fn work_result_round_trips_strictly() {
        let r = WorkResult {
            sum: 1 << 60,
            nanos: 12345,
            cpu: 1,
        };
        assert_eq!(WorkResult::decode(&r.encode()).unwrap(), r);
        assert!(WorkResult::decode(&[0; 19]).is_err());
    }
}
