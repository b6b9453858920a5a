//! # Lesson 09 — CPU affinity: where a benchmark thread runs, and what it costs to get it wrong
//!
//! A latency benchmark busy-polls its completion queue: the polling thread never sleeps. Put
//! two such threads on one CPU and each waits for the scheduler to take the CPU away from the
//! other before it can answer — round trips grow from microseconds to scheduler time slices.
//! Put a thread on the far socket from the NIC and every completion crosses the interconnect.
//! Pinning (`sched_setaffinity(2)`) fixes both; this lesson shows the calls and measures the
//! effect.
//!
//! 1. The process's CPU mask: `sched_getaffinity(2)` into a `cpu_set_t` (`CPU_ZERO`,
//!    `CPU_SET`, `CPU_ISSET` — `nix::sched::CpuSet`), `sched_getcpu(3)`, and the
//!    `core_affinity` crate's view of the same thing.
//! 2. Thread affinity is per thread: a thread that pins itself changes its own mask only;
//!    the process (its main thread) keeps the full one, and threads created later inherit
//!    their creator's mask.
//! 3. Where the NIC is: its NUMA node and local CPU list in sysfs — and why rxe has none.
//! 4. Two RC QPs, one per device (`--dev-a`, `--dev-b`), connected to each other in this one
//!    process (lessons 02–04).
//! 5. A SEND/RECV ping-pong between a client thread and a server thread under four
//!    placements: both pinned to the same CPU, the same again with pollers that yield the CPU
//!    (`sched_yield(2)`) when nothing came for a while, pinned to two different CPUs, and not
//!    pinned — in `-r` rounds of alternating order (so a burst of other load hits all alike).
//!    Then the table. Every thread also watches its own poll loop for time its vCPU did not
//!    execute (steal time, [`verbs_lab_lessons::steal`]): in a virtual machine the host's
//!    scheduler, not the placement, can be what a round trip waited for.
//!
//! ```text
//! lesson09_affinity                            # rxe0 <-> rxe1 in the guest, 300 round trips each
//! lesson09_affinity --dev-a rxe0 --dev-b rxe0  # both QPs on one device
//! lesson09_affinity -n 100 -s 4096 --cpus 1,0  # the pinned placements use CPUs 1 and 0
//! ```

#![forbid(unsafe_code)]

use std::fs;
use std::process::ExitCode;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context as _, Result};
use clap::Parser;
use nix::sched::{sched_getaffinity, sched_getcpu, sched_setaffinity, CpuSet};
use nix::sys::resource::{getrusage, UsageWho};
use nix::unistd::{getpid, gettid, Pid};
use verbs_lab::affinity::{allowed_cpus, cpu_choice, CpuChoice, CpuList};
use verbs_lab::cli::SizeRange;
use verbs_lab::connect::{bring_up, local_endpoint, path_mtu, random_psn, Endpoint};
use verbs_lab::sysfs;
use verbs_lab::verbs::{
    AccessFlags, Context, Cq, GidChoice, Mr, Mtu, Payload, Qp, SendOp, SendWr, WorkCompletion,
};
use verbs_lab_lessons::steal::{tally, StallTally, StealWatch, STALL};
use verbs_lab_lessons::Summary;
use verbs_lab_lessons::{
    check_range, create_rc_qp, first_mismatch, lesson_main, open_named_device, outln, pattern,
    pingpong_recvs, rc_connect_opts, Device, DevicePairArgs, Narrator, RECV_WRID, SEND_WRID,
};

const PROGRAM: &str = "lesson09_affinity";
const MAX_SIZE: usize = 64 * 1024;
/// Receives kept posted on each QP.
const RX_DEPTH: u32 = 4;
/// How long step 2's threads wait for each other: a thread's report, the main thread's "go".
const THREAD_WAIT: Duration = Duration::from_secs(10);
/// The yielding placement: a poller that saw nothing for this long calls `sched_yield(2)` after
/// every empty poll. A round trip on rxe under emulation takes ~50 µs when both sides run.
const YIELD_AFTER: Duration = Duration::from_micros(50);

#[derive(Parser, Debug)]
#[command(
    about = "Lesson 09: CPU affinity — process vs thread masks, NIC locality, and ping-pong latency on the same core, on different cores, unpinned",
    after_help = "Examples:\n  lesson09_affinity\n  lesson09_affinity --dev-a rxe0 --dev-b rxe0 -n 100\n  lesson09_affinity --cpus 1,0"
)]
struct Args {
    #[command(flatten)]
    pair: DevicePairArgs,
    /// Measured round trips per placement
    #[arg(short = 'n', long = "iters", default_value_t = 300)]
    iters: u32,
    /// Round trips before measuring, at each start of a placement (first operations are slow)
    #[arg(long = "warmup", default_value_t = 10)]
    warmup: u32,
    /// Rounds over the placements, in alternating order; -n is split between them
    #[arg(short = 'r', long = "rounds", default_value_t = 3)]
    rounds: u32,
    /// Bytes per message, 1 to 64K (suffixes K, M, G)
    #[arg(short = 's', long = "size", default_value_t = 64,
          value_parser = SizeRange::new(1..=MAX_SIZE))]
    size: usize,
    /// The two CPUs of the pinned placements, "A,B" (default: the first two this process may use)
    #[arg(long = "cpus")]
    cpus: Option<CpuPair>,
    /// QP ack timeout exponent: 4.096 µs × 2^N before a retransmit
    #[arg(short = 'u', long = "qp-timeout", default_value_t = 18,
          value_parser = verbs_lab::cli::qp_timeout())]
    qp_timeout: u8,
    /// Seconds any one wait for a completion may last
    #[arg(long = "wait", default_value_t = 30, value_parser = verbs_lab::cli::WaitSecs)]
    wait_secs: u64,
    /// No narration: print only results
    #[arg(short = 'q', long = "quiet")]
    quiet: bool,
}

/// Two CPU numbers, `A,B` (they may be equal).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CpuPair(usize, usize);

impl std::str::FromStr for CpuPair {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<CpuPair, String> {
        let (a, b) = s
            .split_once(',')
            .ok_or_else(|| format!("'{s}' is not two CPUs 'A,B' (e.g. 0,1)"))?;
        let cpu = |t: &str| {
            t.trim()
                .parse::<usize>()
                .map_err(|_| format!("'{t}' in '{s}' is not a CPU number"))
        };
        Ok(CpuPair(cpu(a)?, cpu(b)?))
    }
}

/// Refuses bad flags before the lesson starts; returns the two CPUs of the pinned placements
/// (a `--cpus` outside this process's mask is a bad flag too).
fn check_flags(a: &Args) -> Result<(usize, usize)> {
    check_range("-n", a.iters, 1..=1_000_000, "round trips")?;
    check_range("--warmup", a.warmup, 0..=100_000, "round trips")?;
    check_range("-r", a.rounds, 1..=100, "rounds")?;
    a.pair.check()?;
    let allowed = allowed_cpus().context("sched_getaffinity(0)")?;
    ensure!(
        !allowed.is_empty(),
        "sched_getaffinity returned an empty mask"
    );
    chosen_cpus(a, &allowed)
}

fn main() -> ExitCode {
    lesson_main(PROGRAM, check_flags, run)
}

/// The CPUs in a `CpuSet`: the CPU_ISSET loop, over every slot the set has.
fn cpus_in(set: &CpuSet) -> CpuList {
    CpuList::from_cpus((0..CpuSet::count()).filter(|&c| set.is_set(c).unwrap_or(false)))
}

/// The mask of one thread (or of the process: its main thread's id is the pid).
fn mask_of(tid: Pid) -> Result<CpuList> {
    Ok(cpus_in(
        &sched_getaffinity(tid).with_context(|| format!("sched_getaffinity({tid})"))?,
    ))
}

/// Pins the calling thread to one CPU: CPU_ZERO (a new, empty set), CPU_SET, then
/// `sched_setaffinity` with pid 0 — which means *the calling thread*, not the process.
fn pin_self(cpu: usize) -> Result<()> {
    let mut set = CpuSet::new();
    set.set(cpu).with_context(|| {
        format!(
            "CPU_SET({cpu}): beyond the {} CPUs a set holds",
            CpuSet::count()
        )
    })?;
    sched_setaffinity(Pid::from_raw(0), &set).with_context(|| {
        format!(
            "sched_setaffinity(0, {{{cpu}}}): is CPU {cpu} among the allowed CPUs ({})?",
            allowed_cpus().map_or("unknown".into(), |l| l.to_string())
        )
    })
}

/// `Cpus_allowed_list` of a thread, from /proc.
fn proc_cpus_allowed(path: &str) -> String {
    fs::read_to_string(path)
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                .map(|v| v.trim().to_string())
        })
        .unwrap_or_else(|| "?".into())
}

fn run(args: &Args, (cpu_a, cpu_b): (usize, usize)) -> Result<()> {
    let n = Narrator { quiet: args.quiet };

    // 1. The process's mask. sched_getaffinity fills a cpu_set_t: a bitmap of CPU_SETSIZE
    //    (1024) bits; CPU_ISSET tests one. taskset, cgroup cpusets and containers shrink it.
    n.step(
        1,
        "The CPUs this process may run on: sched_getaffinity(2), sched_getcpu(3)",
    );
    let set = sched_getaffinity(Pid::from_raw(0)).context("sched_getaffinity(0)")?;
    let allowed = cpus_in(&set);
    ensure!(
        !allowed.is_empty(),
        "sched_getaffinity returned an empty mask"
    );
    n.say(format!(
        "sched_getaffinity(0) -> cpu_set_t of {} slots; CPU_ISSET is true for {allowed} \
         ({} CPU{})",
        CpuSet::count(),
        allowed.len(),
        if allowed.len() == 1 { "" } else { "s" }
    ));
    n.say(format!(
        "/proc/self/status Cpus_allowed_list: {} (the same mask, as the kernel prints it)",
        proc_cpus_allowed("/proc/self/status")
    ));
    n.say(format!(
        "sched_getcpu() = {}: the CPU this thread is on right now (it may move at any moment)",
        sched_getcpu().map_or("?".into(), |c| c.to_string())
    ));
    let ids = core_affinity::get_core_ids().unwrap_or_default();
    n.say(format!(
        "core_affinity::get_core_ids() = {:?} — the calling thread's mask again, not the \
         machine's CPUs (call it after pinning and it returns one)",
        ids.iter().map(|c| c.id).collect::<Vec<_>>()
    ));

    // 2. Affinity belongs to a thread. sched_setaffinity(0, ..) pins the *calling thread*; the
    //    "process affinity" that taskset -p shows is its main thread's (tid = pid). A thread
    //    starts with its creator's mask.
    n.step(2, "Thread affinity vs process affinity");
    thread_vs_process(&n, cpu_a, cpu_b)?;

    // 3. NIC locality. A PCIe NIC hangs off one socket's root complex: sysfs says which NUMA
    //    node and which CPUs are local. Memory and threads there avoid the socket interconnect.
    n.step(3, "Where the NIC is: NUMA node and local CPUs from sysfs");
    let (dev_a, dev_b) = args.pair.names(PROGRAM)?;
    for dev in dedup([&dev_a, &dev_b]) {
        nic_locality(&n, dev);
    }

    // 4. Two QPs, one per device, connected to each other inside this process. (Lessons 02–04
    //    taught each call; here they are steps of the setup.)
    n.step(
        4,
        "Two RC QPs connected to each other (client on --dev-a, server on --dev-b)",
    );
    let mut a = Side::open(args, &dev_a, &n).with_context(|| format!("client side on {dev_a}"))?;
    let mut b = Side::open(args, &dev_b, &n).with_context(|| format!("server side on {dev_b}"))?;
    // The path MTU: the smaller active MTU of the two ports (1024 for one that does not say).
    let mtu = path_mtu(&[a.mtu, b.mtu]);
    a.connect(args, &b.ep, mtu)?;
    b.connect(args, &a.ep, mtu)?;
    n.say(format!(
        "QP {:#x} ({dev_a}) <-> QP {:#x} ({dev_b}): RTS, path MTU {mtu}, {} receives posted on each",
        a.ep.qpn, b.ep.qpn, RX_DEPTH
    ));

    // 5. The measurement: the same ping-pong under three placements.
    n.step(5, "Ping-pong under four placements, in alternating rounds");
    let mut placements = vec![Placement::Same(cpu_a), Placement::SameYield(cpu_a)];
    if cpu_a != cpu_b {
        placements.push(Placement::Different(cpu_a, cpu_b));
    } else {
        n.say(format!(
            "only CPU {cpu_a} is available: the 'different cores' placement is skipped"
        ));
    }
    placements.push(Placement::Unpinned);
    let rows = rounds(args, &n, &placements, &mut a, &mut b)?;
    print_table(args, &rows);
    Ok(())
}

/// The two CPUs of the pinned placements: `--cpus`, which must be among `allowed`, or the first
/// two allowed CPUs (the first twice when there is only one).
fn chosen_cpus(args: &Args, allowed: &CpuList) -> Result<(usize, usize)> {
    Ok(match args.cpus {
        Some(CpuPair(a, b)) => {
            for c in [a, b] {
                ensure!(
                    allowed.contains(c),
                    "--cpus: CPU {c} is not among the CPUs this process may use ({allowed})"
                );
            }
            (a, b)
        }
        None => (
            allowed.cpus()[0],
            *allowed.cpus().get(1).unwrap_or(&allowed.cpus()[0]),
        ),
    })
}

/// Step 5's rounds: the ping-pong under every placement, `-n` round trips split over `-r`
/// rounds. Returns a row per placement, every round merged into it.
fn rounds(
    args: &Args,
    n: &Narrator,
    placements: &[Placement],
    a: &mut Side,
    b: &mut Side,
) -> Result<Vec<Row>> {
    // Rounds in alternating order (A B C, C B A, ...): a burst of other load on the machine
    // then hits every placement, not only the one that happened to run at that moment.
    let rounds = args.rounds.min(args.iters);
    let mut rows: Vec<Row> = placements
        .iter()
        .map(|&p| Row {
            placement: p,
            client: ThreadReport::default(),
            server: ThreadReport::default(),
            rtt_us: Vec::new(),
            starts: Vec::new(),
        })
        .collect();
    for r in 0..rounds {
        let count = args.iters / rounds + u32::from(r < args.iters % rounds);
        let mut order = placements.to_vec();
        if r % 2 == 1 {
            order.reverse();
        }
        let mut medians = Vec::new();
        for p in order {
            n.say(format!(
                "round {}: {}: {} + {count} round trips of {} bytes",
                r + 1,
                p.describe(),
                args.warmup,
                args.size
            ));
            let part = measure(args, n, p, count, a, b).with_context(|| p.describe())?;
            let median = Summary::of(&part.rtt_us).map_or(0.0, |s| s.median);
            medians.push(format!("{} {median:.1}", p.key()));
            let row = rows
                .iter_mut()
                .find(|row| row.placement == p)
                .expect("a row per placement");
            row.merge(part);
        }
        outln!("round {} medians (µs): {}", r + 1, medians.join(", "));
    }
    Ok(rows)
}

fn dedup(v: [&String; 2]) -> Vec<&String> {
    if v[0] == v[1] {
        vec![v[0]]
    } else {
        v.to_vec()
    }
}

/// Step 2: one thread pins itself; the main thread and the process keep their masks; a thread
/// it creates inherits its mask; core_affinity does the same through another API.
fn thread_vs_process(n: &Narrator, cpu_a: usize, cpu_b: usize) -> Result<()> {
    let main_tid = gettid();
    let pid = getpid();
    n.say(format!(
        "main thread: tid {main_tid} = pid {pid} (the main thread's id is the process id)"
    ));
    // The threads report their ids, then wait until we have looked at their masks.
    // The "go" senders live inside the scope: any early exit from it (an error, a panic)
    // drops them, which wakes the threads, so the scope can always join them; their waits are
    // bounded too.
    let (tx, rx) = mpsc::channel::<(&'static str, Pid, Result<String>)>();
    std::thread::scope(|s| -> Result<()> {
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let (go2_tx, go2_rx) = mpsc::channel::<()>();
        let tx1 = tx.clone();
        s.spawn(move || {
            let r = pin_self(cpu_b).map(|()| {
                format!(
                    "sched_setaffinity(0, {{{cpu_b}}}) done; now on CPU {}",
                    sched_getcpu().map_or("?".into(), |c| c.to_string())
                )
            });
            let _ = tx1.send(("pinned thread", gettid(), r));
            // A thread created now inherits our mask.
            let tx2 = tx1.clone();
            std::thread::scope(|s2| {
                s2.spawn(move || {
                    let _ = tx2.send((
                        "its child thread",
                        gettid(),
                        Ok("created after the pin, never called sched_setaffinity".into()),
                    ));
                    let _ = go2_rx.recv_timeout(THREAD_WAIT);
                });
                let _ = go_rx.recv_timeout(THREAD_WAIT);
            });
        });
        let tx3 = tx.clone();
        let (go3_tx, go3_rx) = mpsc::channel::<()>();
        s.spawn(move || {
            let ok = core_affinity::set_for_current(core_affinity::CoreId { id: cpu_a });
            let r = if ok {
                Ok(format!(
                    "core_affinity::set_for_current(CoreId {{ id: {cpu_a} }}) = true"
                ))
            } else {
                Err(anyhow::anyhow!(
                    "core_affinity::set_for_current({cpu_a}) returned false"
                ))
            };
            let _ = tx3.send(("core_affinity thread", gettid(), r));
            let _ = go3_rx.recv_timeout(THREAD_WAIT);
        });
        drop(tx);
        let mut seen = Vec::new();
        for _ in 0..3 {
            let (who, tid, r) = rx
                .recv_timeout(THREAD_WAIT)
                .context("a demonstration thread did not report")?;
            let what = r?;
            let mask = mask_of(tid)?;
            n.say(format!(
                "{who}: tid {tid}: {what}; sched_getaffinity({tid}) = {mask}; \
                 /proc/self/task/{tid}/status: {}",
                proc_cpus_allowed(&format!("/proc/self/task/{tid}/status"))
            ));
            seen.push((who, mask));
        }
        let main_mask = mask_of(Pid::from_raw(0))?;
        let process_mask = mask_of(pid)?;
        n.say(format!(
            "main thread: sched_getaffinity(0) = {main_mask}; the process, \
             sched_getaffinity({pid}) = {process_mask} — unchanged by the threads' pins"
        ));
        let _ = go_tx.send(());
        let _ = go2_tx.send(());
        let _ = go3_tx.send(());
        let get = |w: &str| {
            seen.iter()
                .find(|(who, _)| *who == w)
                .map(|(_, m)| m.clone())
        };
        ensure!(
            get("pinned thread") == Some(CpuList::from_cpus([cpu_b]))
                && get("its child thread") == Some(CpuList::from_cpus([cpu_b]))
                && get("core_affinity thread") == Some(CpuList::from_cpus([cpu_a])),
            "the threads' masks are not what they set: {seen:?}"
        );
        outln!(
            "thread masks: pinned thread {cpu_b}, its child {cpu_b} (inherited), core_affinity \
             thread {cpu_a}; main thread and process still {process_mask}"
        );
        Ok(())
    })
}

/// Step 3 for one device.
fn nic_locality(n: &Narrator, dev: &str) {
    let dir = sysfs::device_dir(dev);
    let link = fs::read_link(dir.join("device"))
        .ok()
        .map(|p| p.display().to_string());
    n.say(format!(
        "{dev}: {}/device -> {}",
        dir.display(),
        link.as_deref().unwrap_or("(no such link)")
    ));
    n.say(format!(
        "{dev}: device/numa_node = {}, device/local_cpulist = {}",
        sysfs::numa_node(dev).map_or("none (-1 or missing)".into(), |v| v.to_string()),
        sysfs::local_cpulist(dev).unwrap_or_else(|| "none".into())
    ));
    match cpu_choice(dev, None, 0) {
        Ok(CpuChoice::Pin { cpu, why }) => {
            n.say(format!("{dev}: a benchmark would pin to CPU {cpu} ({why})"));
            outln!("{dev}: NIC-local CPU {cpu}");
        }
        Ok(CpuChoice::DontPin { why }) => {
            n.say(format!("{dev}: no NIC-local CPU: {why}"));
            n.say(
                "    rxe is software: its 'NIC' is the kernel on whatever CPU handles the packet. \
                 A PCIe NIC (e.g. mlx5_0) shows device -> ../../../0000:3b:00.0, numa_node 0 and \
                 local_cpulist 0-17,36-53: pin benchmark threads there, and allocate their \
                 buffers there (numactl --cpunodebind=0 --membind=0).",
            );
            outln!("{dev}: no NUMA locality (virtual device)");
        }
        Err(e) => n.say(format!("{dev}: {e}")),
    }
}

/// One end of the ping-pong: device, QP and buffer.
struct Side {
    ctx: Context,
    cq: Cq,
    qp: Qp,
    mr: Mr,
    ep: Endpoint,
    gid: GidChoice,
    /// The port's active MTU (`None`: the port does not say).
    mtu: Option<Mtu>,
    size: usize,
}

impl Side {
    fn open(args: &Args, dev: &str, n: &Narrator) -> Result<Side> {
        // Lesson 01's steps, told only in lesson 01 and 14: this lesson's narration is placement.
        let quiet = Narrator { quiet: true };
        let Device { ctx, port, gid } =
            open_named_device(Some(dev), args.pair.ib_port, args.pair.gid_idx, &quiet)?;
        let size = args.size;
        let pd = ctx.alloc_pd().context("ibv_alloc_pd")?;
        let mr = pd
            .reg_mr(2 * size, AccessFlags::LOCAL_WRITE)
            .context("ibv_reg_mr")?;
        let cq = ctx.create_cq(RX_DEPTH + 2, None).context("ibv_create_cq")?;
        let qp = create_rc_qp(&pd, &cq, 2, RX_DEPTH)?;
        let ep = local_endpoint(&ctx, args.pair.ib_port, &qp, &gid, random_psn())?;
        n.say(format!("{dev}: QP {:#x}, {gid}", qp.qpn()));
        Ok(Side {
            mtu: port.active_mtu,
            ctx,
            cq,
            qp,
            mr,
            ep,
            gid,
            size,
        })
    }

    fn connect(&mut self, args: &Args, remote: &Endpoint, mtu: Mtu) -> Result<()> {
        // SEND/RECV only: no remote access.
        let opts = rc_connect_opts(args.pair.ib_port, &self.gid, mtu, args.qp_timeout)?;
        bring_up(&self.qp, &self.ep, remote, &opts).with_context(|| {
            format!("connecting QP {:#x} on {}", self.qp.qpn(), self.ctx.name())
        })?;
        // The receive half: bytes 0..size (the send half follows it).
        let recv = self.mr.sge(0..self.size)?;
        self.qp
            .post_recv(&pingpong_recvs(&recv, RX_DEPTH))
            .context("ibv_post_recv")?;
        Ok(())
    }
}

/// Where the two threads run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Placement {
    /// Both threads pinned to this CPU.
    Same(usize),
    /// Both threads pinned to this CPU, and each gives it away (`sched_yield(2)`) while it waits.
    SameYield(usize),
    /// Client on the first CPU, server on the second.
    Different(usize, usize),
    /// Neither pinned: the scheduler decides, and may move them.
    Unpinned,
}

impl Placement {
    fn key(self) -> &'static str {
        match self {
            Placement::Same(_) => "same-core",
            Placement::SameYield(_) => "same-yield",
            Placement::Different(..) => "diff-cores",
            Placement::Unpinned => "unpinned",
        }
    }
    fn describe(self) -> String {
        match self {
            Placement::Same(c) => format!("same core: client and server pinned to CPU {c}"),
            Placement::SameYield(c) => format!(
                "same core, yielding: client and server pinned to CPU {c}, each calls \
                 sched_yield() after {} µs without a completion",
                YIELD_AFTER.as_micros()
            ),
            Placement::Different(a, b) => {
                format!("different cores: client pinned to CPU {a}, server to CPU {b}")
            }
            Placement::Unpinned => "unpinned: the scheduler places both threads".into(),
        }
    }
    /// How long a poller waits before it yields, if it does.
    fn yield_after(self) -> Option<Duration> {
        match self {
            Placement::SameYield(_) => Some(YIELD_AFTER),
            _ => None,
        }
    }
    fn cpus(self) -> (Option<usize>, Option<usize>) {
        match self {
            Placement::Same(c) | Placement::SameYield(c) => (Some(c), Some(c)),
            Placement::Different(a, b) => (Some(a), Some(b)),
            Placement::Unpinned => (None, None),
        }
    }
}

/// What one thread saw: the CPUs it ran on (sampled every round trip), its mask, how often
/// the scheduler took the CPU away from it (involuntary context switches, getrusage
/// RUSAGE_THREAD), and when its vCPU did not execute it while it polled (steal time).
#[derive(Debug, Clone, Default)]
struct ThreadReport {
    ran_on: CpuList,
    mask: CpuList,
    preempted: i64,
    stalls: Vec<(Instant, Instant)>,
}

struct Row {
    placement: Placement,
    client: ThreadReport,
    server: ThreadReport,
    rtt_us: Vec<f64>,
    /// Each measured round trip's start, beside `rtt_us`.
    starts: Vec<Instant>,
}

impl ThreadReport {
    fn merge(&mut self, other: ThreadReport) {
        self.ran_on = CpuList::from_cpus(
            self.ran_on
                .cpus()
                .iter()
                .chain(other.ran_on.cpus())
                .copied(),
        );
        if self.mask.is_empty() {
            self.mask = other.mask;
        }
        self.preempted += other.preempted;
        self.stalls.extend(other.stalls);
    }
}

impl Row {
    /// Adds another round of the same placement.
    fn merge(&mut self, other: Row) {
        self.client.merge(other.client);
        self.server.merge(other.server);
        self.rtt_us.extend(other.rtt_us);
        self.starts.extend(other.starts);
    }

    /// The round trips a stall of either thread's vCPU overlapped, and the tally.
    fn host_stalls(&self) -> (Vec<bool>, StallTally) {
        let ops: Vec<(Instant, Duration)> = self
            .starts
            .iter()
            .zip(&self.rtt_us)
            .map(|(&t, &us)| (t, Duration::from_secs_f64(us / 1e6)))
            .collect();
        let stalls: Vec<(Instant, Instant)> = self
            .client
            .stalls
            .iter()
            .chain(&self.server.stalls)
            .copied()
            .collect();
        tally(&ops, &stalls)
    }
}

/// Counts completions by kind and re-posts every consumed receive; watches its own poll loop for
/// steal time.
struct Poller {
    recvd: u64,
    sent: u64,
    wait: Duration,
    /// Yield the CPU after every empty poll once nothing came for this long.
    yield_after: Option<Duration>,
    wcs: [WorkCompletion; 4],
    watch: StealWatch,
}

impl Poller {
    /// Call it in the thread that polls (the watch reads that thread's counters).
    fn new(wait: Duration, yield_after: Option<Duration>) -> Poller {
        Poller {
            recvd: 0,
            sent: 0,
            wait,
            yield_after,
            wcs: WorkCompletion::array(),
            watch: StealWatch::new(),
        }
    }

    /// Busy-polls until `recvd >= want_recv` and `sent >= want_sent`, never longer than the
    /// wait without progress; with `yield_after`, gives the CPU away (`sched_yield(2)`) after
    /// every empty poll once nothing came for that long.
    fn until(&mut self, side: &Side, want_recv: u64, want_sent: u64) -> Result<()> {
        let mut since = Instant::now();
        let mut spins = 0u32;
        self.watch.skip();
        while self.recvd < want_recv || self.sent < want_sent {
            let got = side.cq.poll(&mut self.wcs).context("ibv_poll_cq")?;
            if got == 0 {
                if let Some(after) = self.yield_after {
                    if since.elapsed() >= after {
                        // The yield is not a poll turn: a thread that gave its CPU away waits
                        // for its turn, and the watch must not count that.
                        std::thread::yield_now();
                        self.watch.skip();
                    }
                }
                self.watch.poll();
                spins = spins.wrapping_add(1);
                if spins % 1024 == 0 && since.elapsed() >= self.wait {
                    bail!(
                        "no completion for {} s on {} (waiting for receive {want_recv} and send \
                         {want_sent}; have {} and {})",
                        self.wait.as_secs(),
                        side.ctx.name(),
                        self.recvd,
                        self.sent
                    );
                }
                std::hint::spin_loop();
                continue;
            }
            // A completion: the stretch since the last look ends here (the vCPU may have been
            // stopped just before it; the work that follows is skipped).
            self.watch.check();
            since = Instant::now();
            for wc in &self.wcs[..got] {
                if let Err(e) = wc.ok() {
                    let status = wc.status();
                    bail!(
                        "{e} on {}{}",
                        side.ctx.name(),
                        status.hint().map(|h| format!(" — {h}")).unwrap_or_default()
                    );
                }
                match wc.wr_id() {
                    RECV_WRID => {
                        ensure!(
                            wc.byte_len() as usize == side.size,
                            "a message of {} bytes, expected {}",
                            wc.byte_len(),
                            side.size
                        );
                        self.recvd += 1;
                        side.qp
                            .post_recv(&pingpong_recvs(&side.mr.sge(0..side.size)?, 1))
                            .context("re-posting a receive")?;
                    }
                    SEND_WRID => self.sent += 1,
                    other => bail!("a completion with unknown wr_id {other}"),
                }
            }
        }
        Ok(())
    }
}

/// Writes message `seq` into the send half and posts it. The post — a system call on rxe, whose
/// kernel sends the message in it — is watched for a stalled vCPU too.
fn send_message(side: &mut Side, seq: u64, watch: &mut StealWatch) -> Result<()> {
    let size = side.size;
    side.mr.write(size, &pattern(seq, size))?;
    let sge = side.mr.sge(size..2 * size)?;
    watch.skip();
    side.qp
        .post_send(&[SendWr::new(SEND_WRID, SendOp::Send, Payload::Sges(&[sge]))])
        .context("ibv_post_send")?;
    watch.check();
    Ok(())
}

/// Checks that the receive half holds message `seq`.
fn check_message(side: &Side, seq: u64) -> Result<()> {
    let size = side.size;
    let want = pattern(seq, size);
    if let Some(at) = first_mismatch(&side.mr.to_vec(0..size)?, &want) {
        bail!("message {seq} is corrupt at byte {at}");
    }
    Ok(())
}

/// Pins (or not) the calling thread, and reports the mask it ended up with.
fn place(cpu: Option<usize>) -> Result<CpuList> {
    if let Some(c) = cpu {
        pin_self(c)?;
    }
    mask_of(Pid::from_raw(0))
}

fn preemptions() -> i64 {
    getrusage(UsageWho::RUSAGE_THREAD).map_or(0, |u| u.involuntary_context_switches())
}

/// One run of one placement: a client thread and a server thread ping-pong `warmup + count`
/// times; the last `count` round trips are kept.
fn measure(
    args: &Args,
    n: &Narrator,
    p: Placement,
    count: u32,
    a: &mut Side,
    b: &mut Side,
) -> Result<Row> {
    let total = u64::from(args.warmup) + u64::from(count);
    let warmup = u64::from(args.warmup);
    let wait = Duration::from_secs(args.wait_secs);
    let (cpu_client, cpu_server) = p.cpus();
    let yield_after = p.yield_after();
    let (client, server) = std::thread::scope(|s| {
        let server = s.spawn(move || -> Result<ThreadReport> {
            let mask = place(cpu_server)?;
            let pre = preemptions();
            let mut ran = Vec::new();
            let mut poll = Poller::new(wait, yield_after);
            for i in 0..total {
                poll.until(b, i + 1, i)?;
                check_message(b, 2 * i)?;
                ran.push(sched_getcpu().unwrap_or(usize::MAX));
                send_message(b, 2 * i + 1, &mut poll.watch)?;
            }
            poll.until(b, total, total)?;
            Ok(ThreadReport {
                ran_on: CpuList::from_cpus(ran),
                mask,
                preempted: preemptions() - pre,
                stalls: poll.watch.stalls().to_vec(),
            })
        });
        type Timed = (Vec<f64>, Vec<Instant>);
        let client = s.spawn(move || -> Result<(ThreadReport, Timed)> {
            let mask = place(cpu_client)?;
            let pre = preemptions();
            let mut ran = Vec::new();
            let mut rtts = Vec::with_capacity(count as usize);
            let mut starts = Vec::with_capacity(count as usize);
            let mut poll = Poller::new(wait, yield_after);
            for i in 0..total {
                let t0 = Instant::now();
                send_message(a, 2 * i, &mut poll.watch)?;
                poll.until(a, i + 1, i + 1)?;
                let rtt = t0.elapsed();
                check_message(a, 2 * i + 1)?;
                ran.push(sched_getcpu().unwrap_or(usize::MAX));
                if i >= warmup {
                    rtts.push(rtt.as_secs_f64() * 1e6);
                    starts.push(t0);
                }
            }
            Ok((
                ThreadReport {
                    ran_on: CpuList::from_cpus(ran),
                    mask,
                    preempted: preemptions() - pre,
                    stalls: poll.watch.stalls().to_vec(),
                },
                (rtts, starts),
            ))
        });
        (client.join(), server.join())
    });
    let (client, (rtts, starts)) = client
        .map_err(|_| anyhow::anyhow!("the client thread panicked"))?
        .context("client thread")?;
    let server = server
        .map_err(|_| anyhow::anyhow!("the server thread panicked"))?
        .context("server thread")?;
    let lost = |r: &ThreadReport| {
        let ms = r
            .stalls
            .iter()
            .map(|(a, b)| *b - *a)
            .sum::<Duration>()
            .as_secs_f64()
            * 1e3;
        format!("its vCPU stalled {} times ({ms:.1} ms)", r.stalls.len())
    };
    n.say(format!(
        "  client: mask {}, ran on CPU {}, preempted {} times, {}; server: mask {}, ran on CPU \
         {}, preempted {} times, {}",
        client.mask,
        client.ran_on,
        client.preempted,
        lost(&client),
        server.mask,
        server.ran_on,
        server.preempted,
        lost(&server)
    ));
    Ok(Row {
        placement: p,
        client,
        server,
        rtt_us: rtts,
        starts,
    })
}

fn print_table(args: &Args, rows: &[Row]) {
    outln!(
        "\nround trip of {} bytes, {} samples per placement in {} rounds (µs; client thread ↔ \
         server thread)",
        args.size,
        args.iters,
        args.rounds.min(args.iters)
    );
    outln!(
        "{:<11} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>9}",
        "placement",
        "client-CPU",
        "server-CPU",
        "median",
        "avg",
        "min",
        "p99",
        "max",
        "preempted",
        "host-hit"
    );
    // Per placement: the median of all round trips, and of those no vCPU stall touched.
    let mut medians = Vec::new();
    let mut notes = Vec::new();
    for r in rows {
        let Some(s) = Summary::of(&r.rtt_us) else {
            continue;
        };
        let (hit, t) = r.host_stalls();
        let clean: Vec<f64> = r
            .rtt_us
            .iter()
            .zip(&hit)
            .filter(|(_, &h)| !h)
            .map(|(&us, _)| us)
            .collect();
        let clean_median = Summary::of(&clean).map(|c| c.median);
        medians.push((r.placement, s.median, clean_median));
        outln!(
            "{:<11} {:>10} {:>10} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>10} {:>9}",
            r.placement.key(),
            r.client.ran_on.to_string(),
            r.server.ran_on.to_string(),
            s.median,
            s.avg,
            s.min,
            s.p99,
            s.max,
            format!("{}/{}", r.client.preempted, r.server.preempted),
            t.hit
        );
        if t.hit > 0 {
            notes.push(format!(
                "{}: {} of {} round trips met a vCPU that did not run its poller ({:.1} ms lost); \
                 {}",
                r.placement.key(),
                t.hit,
                r.rtt_us.len(),
                t.lost.as_secs_f64() * 1e3,
                match clean_median {
                    Some(m) => format!("the median of the other {} is {m:.1} µs", clean.len()),
                    None => "none was left untouched".into(),
                }
            ));
        }
    }
    outln!(
        "(client-CPU/server-CPU: the CPUs each thread was seen on; preempted: involuntary context \
         switches, client/server; host-hit: round trips during which a polling thread's vCPU \
         stopped executing for {} ms or more while the guest counted it as running — the host \
         ran something else there)",
        STALL.as_millis()
    );
    for note in &notes {
        outln!("host: {note}");
    }
    let med = |k: &str| medians.iter().find(|(p, ..)| p.key() == k).map(|m| m.1);
    if let (Some(same), Some(diff)) = (med("same-core"), med("diff-cores")) {
        outln!(
            "same core vs different cores: median round trip {:.1}x ({same:.1} vs {diff:.1} µs)",
            same / diff
        );
    }
    if let (Some(same), Some(yielding)) = (med("same-core"), med("same-yield")) {
        outln!(
            "same core vs same core, yielding: median round trip {:.1}x ({same:.1} vs \
             {yielding:.1} µs)",
            same / yielding
        );
    }
    if let (Some(unp), Some(diff)) = (med("unpinned"), med("diff-cores")) {
        outln!(
            "unpinned vs different cores: median round trip {:.2}x ({unp:.1} vs {diff:.1} µs)",
            unp / diff
        );
    }
    // The placement's own effect, where the host took vCPUs away: the same comparison on the
    // round trips no stall touched.
    let clean = |k: &str| {
        medians
            .iter()
            .find(|(p, ..)| p.key() == k)
            .and_then(|m| m.2)
    };
    if !notes.is_empty() {
        if let (Some(same), Some(diff)) = (clean("same-core"), clean("diff-cores")) {
            outln!(
                "without the host's stalls, same core vs different cores: {:.1}x ({same:.1} vs \
                 {diff:.1} µs)",
                same / diff
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_pairs_parse() {
        assert_eq!("0,1".parse::<CpuPair>(), Ok(CpuPair(0, 1)));
        assert_eq!(" 3 , 3".parse::<CpuPair>(), Ok(CpuPair(3, 3)));
        assert!("0".parse::<CpuPair>().unwrap_err().contains("A,B"));
        assert!("0,x".parse::<CpuPair>().unwrap_err().contains("'x'"));
    }
}
