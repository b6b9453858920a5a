//! # Lesson 14 — Performance tuning: each knob of the data path, measured
//!
//! Lessons 02–09 built a correct data path. This one turns its knobs one at a time and measures
//! what each is worth, on the verbs it teaches, with its own loops:
//!
//! 1. Two RC QPs in this one process, one per device (`--dev-a` sends, `--dev-b` receives),
//!    connected to each other (lessons 02–05). One process holds both ends, so every knob runs
//!    against the same peer in the same boot, in alternating rounds, and a table can compare them.
//! 2. A stream of RDMA WRITEs (`-n` of `-s` bytes, at most 64 in flight) under five settings:
//!    - **signaling**: `IBV_SEND_SIGNALED` on every request, or on every 16th. A send-queue slot
//!      is free again only once the application has *polled* a completion at or after it: the
//!      unsignaled requests before a signaled one are retired by that one completion.
//!    - **inline**: `IBV_SEND_INLINE` copies the payload into the work queue entry at post time.
//!    - **post lists**: one `ibv_post_send` per request, or one call with a chain of 16 (`next`).
//!    - **batched polling**: `ibv_poll_cq` asking for 1 completion per call, or for 16.
//! 3. A SEND/RECV ping-pong between two threads (the client on `--dev-a`, the server on
//!    `--dev-b`) under two more:
//!    - **busy polling vs events**: spin on `ibv_poll_cq`, or arm the CQ (`ibv_req_notify_cq`),
//!      sleep in `poll(2)` on the completion channel and take the event (`ibv_get_cq_event`).
//!    - **CPU placement**: both threads pinned to one core, or to two (`core_affinity`).
//! 4. CQ moderation: `ibv_modify_cq` with `IBV_CQ_ATTR_MODERATE` — accepted, or the refusal.
//! 5. Send-queue slots: fill a small send queue with unsignaled writes, let them all execute,
//!    and post one more — does the provider take it?
//! 6. A memory window: a type 2 window bound to a fresh region (`IBV_WR_BIND_MW`), the peer
//!    writes through its rkey, the owner invalidates it (`IBV_WR_LOCAL_INV`), and the peer's next
//!    write fails with a remote access error, the region unchanged.
//! 7. The table: the median of the rounds for each setting and its ratio to the first setting
//!    of its knob.
//!
//! ```text
//! lesson14_tuning                          # rxe0 -> rxe1 in the guest, 2000 writes, 200 round trips
//! lesson14_tuning -n 4000 --pp-iters 400 -r 5
//! lesson14_tuning -s 256                   # above max_inline_data: the inline row says so
//! ```

#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context as _, Result};
use clap::Parser;
use nix::sys::resource::{getrusage, UsageWho};
use verbs_lab::cli::SizeRange;
use verbs_lab::connect::{bring_up, local_endpoint, path_mtu, random_psn, ConnectOpts, Endpoint};
use verbs_lab::verbs::{
    AccessFlags, CompChannel, Context, Cq, GidChoice, Mr, Mtu, Payload, Pd, Qp, SendOp, SendWr,
    Sge, WcOpcode, WorkCompletion,
};
use verbs_lab_lessons::steal::{tally, StealWatch};
use verbs_lab_lessons::Summary;
use verbs_lab_lessons::{
    check_range, create_rc_qp, create_rc_qp_inline, first_mismatch, lesson_main, open_named_device,
    outln, pattern, pingpong_recvs, rc_connect_opts, Device, DevicePairArgs, Narrator,
};

const PROGRAM: &str = "lesson14_tuning";
/// Send-queue depth of the measured QPs, and the most writes in flight.
const DEPTH: u32 = 64;
/// Receives kept posted for the ping-pong.
const RX_DEPTH: u32 = 8;
/// The inline payload asked for at QP creation (rxe grants what it is asked, up to its limit).
const INLINE_ASK: u32 = 64;
/// Send-queue depth asked for the slot experiment of step 5.
const PROBE_DEPTH: u32 = 4;

#[derive(Parser, Debug)]
#[command(
    about = "Lesson 14: performance tuning — signaling, inline, post lists, batched polling, events, CPU placement, CQ moderation — each measured",
    after_help = "Examples:\n  lesson14_tuning\n  lesson14_tuning -n 4000 --pp-iters 400 -r 5\n  lesson14_tuning --dev-a rxe0 --dev-b rxe0"
)]
struct Args {
    #[command(flatten)]
    pair: DevicePairArgs,
    /// RDMA WRITEs per stream run (at least 64)
    #[arg(short = 'n', long = "iters", default_value_t = 2000)]
    iters: u32,
    /// Round trips per ping-pong run
    #[arg(long = "pp-iters", default_value_t = 200)]
    pp_iters: u32,
    /// Rounds over all settings, in alternating order; the table shows the median of the rounds
    #[arg(short = 'r', long = "rounds", default_value_t = 3)]
    rounds: u32,
    /// Bytes per message, 8 to 4K (suffixes K, M, G): a sequence number fills the first 8
    #[arg(short = 's', long = "size", default_value_t = 64,
          value_parser = SizeRange::new(8..=4096usize))]
    size: usize,
    /// QP ack timeout exponent: 4.096 µs × 2^N before a retransmit
    #[arg(short = 'u', long = "qp-timeout", default_value_t = 20,
          value_parser = verbs_lab::cli::qp_timeout())]
    qp_timeout: u8,
    /// Seconds any one run may last
    #[arg(long = "wait", default_value_t = 60, value_parser = verbs_lab::cli::WaitSecs)]
    wait_secs: u64,
    /// No narration: print only the rounds and the table
    #[arg(short = 'q', long = "quiet")]
    quiet: bool,
}

fn check_flags(a: &Args) -> Result<()> {
    check_range(
        "-n",
        a.iters,
        DEPTH..=10_000_000,
        &format!("writes (every one of the {DEPTH} slots is written and checked)"),
    )?;
    check_range("--pp-iters", a.pp_iters, 1..=1_000_000, "round trips")?;
    check_range("-r", a.rounds, 1..=100, "rounds")?;
    a.pair.check()?;
    Ok(())
}

fn main() -> ExitCode {
    lesson_main(PROGRAM, check_flags, |a: &Args, ()| run(a))
}

/// One end: its device, a PD, one MR (the stream's 64 slots, then the ping-pong's receive and
/// send halves), a CQ with a completion channel, and an RC QP.
struct Side {
    ctx: Context,
    pd: Pd,
    channel: CompChannel,
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
        // Lesson 01's steps: open the device, check the port is ACTIVE, choose the GID.
        let Device { ctx, port, gid } =
            open_named_device(Some(dev), args.pair.ib_port, args.pair.gid_idx, n)?;
        let size = args.size;
        let pd = ctx.alloc_pd().context("ibv_alloc_pd")?;
        let mr = pd
            .reg_mr(
                stream_len(size) + 2 * size,
                AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
            )
            .context("ibv_reg_mr")?;
        let channel = ctx
            .create_comp_channel()
            .context("ibv_create_comp_channel")?;
        let cq = ctx
            .create_cq(DEPTH + RX_DEPTH + 8, Some(&channel))
            .context("ibv_create_cq")?;
        let qp = create_rc_qp_inline(&pd, &cq, DEPTH, RX_DEPTH, INLINE_ASK)?;
        let ep = local_endpoint(&ctx, args.pair.ib_port, &qp, &gid, random_psn())?;
        n.say(format!(
            "{dev}: QP {:#x}, send queue {} (granted), max_inline_data {} (granted), CQ of {} \
             with completion channel fd {}",
            qp.qpn(),
            qp.caps().max_send_wr,
            qp.caps().max_inline_data,
            cq.capacity(),
            channel.fd()
        ));
        Ok(Side {
            mtu: port.active_mtu,
            ctx,
            pd,
            channel,
            cq,
            qp,
            mr,
            ep,
            gid,
            size,
        })
    }

    fn opts(&self, args: &Args, mtu: Mtu) -> Result<ConnectOpts> {
        Ok(ConnectOpts {
            access: AccessFlags::REMOTE_WRITE,
            ..rc_connect_opts(args.pair.ib_port, &self.gid, mtu, args.qp_timeout)?
        })
    }

    /// The ping-pong's receive half and send half of the MR.
    fn recv_sge(&self) -> Result<Sge<'_>> {
        let base = stream_len(self.size);
        Ok(self.mr.sge(base..base + self.size)?)
    }
    fn send_range(&self) -> std::ops::Range<usize> {
        let base = stream_len(self.size) + self.size;
        base..base + self.size
    }

    fn post_recvs(&self, count: u32) -> Result<()> {
        let sge = self.recv_sge()?;
        self.qp
            .post_recv(&pingpong_recvs(&sge, count))
            .context("ibv_post_recv")
    }
}

/// Bytes of the stream's slots: one message per send-queue slot.
fn stream_len(size: usize) -> usize {
    DEPTH as usize * size
}

fn run(args: &Args) -> Result<()> {
    let n = Narrator { quiet: args.quiet };

    n.step(
        1,
        "Two RC QPs connected to each other in this process (lessons 02–05)",
    );
    let (dev_a, dev_b) = args.pair.names(PROGRAM)?;
    let a = Side::open(args, &dev_a, &n).with_context(|| format!("sending side on {dev_a}"))?;
    let b = Side::open(args, &dev_b, &n).with_context(|| format!("receiving side on {dev_b}"))?;
    // The path MTU: the smaller active MTU of the two ports (1024 for one that does not say).
    let mtu = path_mtu(&[a.mtu, b.mtu]);
    bring_up(&a.qp, &a.ep, &b.ep, &a.opts(args, mtu)?).context("connecting the sending QP")?;
    bring_up(&b.qp, &b.ep, &a.ep, &b.opts(args, mtu)?).context("connecting the receiving QP")?;
    a.post_recvs(RX_DEPTH)?;
    b.post_recvs(RX_DEPTH)?;
    // Each of the 64 source slots holds its own pattern; a write copies slot k to the peer's
    // slot k, so after a run the peer's slots must equal ours byte for byte.
    for k in 0..DEPTH as usize {
        a.mr.write(k * args.size, &pattern(k as u64, args.size))?;
    }
    n.say(format!(
        "QP {:#x} ({dev_a}) -> QP {:#x} ({dev_b}): RTS, path MTU {mtu}, {RX_DEPTH} receives \
         posted on each",
        a.ep.qpn, b.ep.qpn
    ));
    let inline_cap = a.qp.caps().max_inline_data as usize;
    let cores = usable_cores()?;

    n.step(2, "The settings, each a run of its own");
    let cases = cases(args.size <= inline_cap, &cores);
    for c in &cases {
        n.say(format!("{:<12} {}", c.key, c.describe()));
    }
    if args.size > inline_cap {
        n.say(format!(
            "-s {} exceeds the granted max_inline_data {inline_cap}: no inline run",
            args.size
        ));
    }
    if cores.len() < 2 {
        n.say("only one CPU: no 'different cores' run");
    }

    n.step(
        3,
        "Rounds over the settings, in alternating order (A B C .., .. C B A)",
    );
    let wait = Duration::from_secs(args.wait_secs);
    let results = rounds(args, &a, &b, &cases, wait)?;
    n.say(format!(
        "after every stream run, the {DEPTH} slots on {dev_b} equalled the {DEPTH} source slots \
         byte for byte; every ping-pong message carried the expected sequence number"
    ));

    n.step(
        4,
        "CQ moderation: ibv_modify_cq(cq, {IBV_CQ_ATTR_MODERATE, cq_count 16, cq_period 10 µs})",
    );
    let moderation = match a.cq.modify_moderation(16, 10) {
        Ok(()) => "accepted: the CQ raises an event per 16 completions or 10 µs".to_string(),
        Err(e) => format!("refused: {e}"),
    };
    n.say(format!("{dev_a}: {moderation}"));

    n.step(
        5,
        "Send-queue slots: fill a small send queue with unsignaled writes, let them execute, post one more",
    );
    let ends = Ends {
        args,
        a: &a,
        b: &b,
        mtu,
        wait,
    };
    let slots = sq_slot_probe(ends, &n)?;

    n.step(
        6,
        "A memory window: bind, the peer writes through it, invalidate, the peer's next write",
    );
    let window = memory_window(ends, &n)?;

    n.step(
        7,
        "The table: medians of the rounds, ratios within each knob",
    );
    print_table(&cases, &results, &moderation, &slots, &window, args);
    Ok(())
}

/// The CPUs this process may use, for the placement settings.
fn usable_cores() -> Result<Vec<usize>> {
    let cores: Vec<usize> = core_affinity::get_core_ids()
        .unwrap_or_default()
        .iter()
        .map(|c| c.id)
        .collect();
    ensure!(
        !cores.is_empty(),
        "core_affinity::get_core_ids() found no CPU this process may use"
    );
    Ok(cores)
}

/// Step 3: `-r` rounds over every setting, in alternating order (A B C .., .. C B A) so that
/// no setting always runs first or last; one line per round. Returns each setting's results,
/// in the order of `cases`.
fn rounds(
    args: &Args,
    a: &Side,
    b: &Side,
    cases: &[Case],
    wait: Duration,
) -> Result<Vec<Vec<Measured>>> {
    let mut results: Vec<Vec<Measured>> = vec![Vec::new(); cases.len()];
    for r in 0..args.rounds {
        let mut order: Vec<usize> = (0..cases.len()).collect();
        if r % 2 == 1 {
            order.reverse();
        }
        let mut line = Vec::new();
        for i in order {
            let m = match cases[i].kind {
                Kind::Stream(s) => stream(a, b, s, u64::from(args.iters), wait),
                Kind::PingPong(p) => ping_pong(a, b, p, args.pp_iters, wait),
            }
            .with_context(|| format!("round {}, {}", r + 1, cases[i].describe()))?;
            line.push(format!("{} {}", cases[i].key, m.show()));
            results[i].push(m);
        }
        outln!("round {}: {}", r + 1, line.join(", "));
    }
    Ok(results)
}

/// One stream setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stream {
    /// `IBV_SEND_SIGNALED` on every `signal_every`-th request (and the last).
    signal_every: u64,
    /// `IBV_SEND_INLINE`.
    inline: bool,
    /// Requests chained into one `ibv_post_send`.
    list: u64,
    /// Completions asked for per `ibv_poll_cq`.
    poll_batch: usize,
}

/// How a ping-pong thread waits for its completions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    Busy,
    Events,
}

/// One ping-pong setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PingPong {
    wait: Wait,
    /// The CPUs of the client and the server thread; `None`: not pinned.
    cpus: Option<(usize, usize)>,
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Stream(Stream),
    PingPong(PingPong),
}

/// A setting, measured once per round; a table row names it by knob and variant.
struct Case {
    key: &'static str,
    kind: Kind,
}

impl Case {
    fn describe(&self) -> String {
        match self.kind {
            Kind::Stream(s) => format!(
                "RDMA WRITE stream: signal every {}, inline {}, {} WR{} per ibv_post_send, \
                 ibv_poll_cq(n={})",
                s.signal_every,
                if s.inline { "on" } else { "off" },
                s.list,
                if s.list == 1 { "" } else { "s" },
                s.poll_batch
            ),
            Kind::PingPong(p) => format!(
                "SEND ping-pong: {}, {}",
                match p.wait {
                    Wait::Busy => "busy polling",
                    Wait::Events => "completion events",
                },
                match p.cpus {
                    None => "threads not pinned".to_string(),
                    Some((x, y)) => format!("client on CPU {x}, server on CPU {y}"),
                }
            ),
        }
    }
}

/// Every setting the table compares, each once (a setting shared by two knobs runs once).
fn cases(inline: bool, cores: &[usize]) -> Vec<Case> {
    let s = |key, signal_every, inline, list, poll_batch| Case {
        key,
        kind: Kind::Stream(Stream {
            signal_every,
            inline,
            list,
            poll_batch,
        }),
    };
    let p = |key, wait, cpus| Case {
        key,
        kind: Kind::PingPong(PingPong { wait, cpus }),
    };
    let mut v = vec![
        s("sig1", 1, false, 1, 16),
        s("sig16", 16, false, 1, 16),
        s("list16", 16, false, 16, 16),
        s("poll1", 1, false, 1, 1),
        p("busy", Wait::Busy, None),
        p("events", Wait::Events, None),
        p("same-core", Wait::Busy, Some((cores[0], cores[0]))),
    ];
    if inline {
        v.insert(2, s("inline", 16, true, 1, 16));
    }
    if cores.len() > 1 {
        v.push(p("diff-cores", Wait::Busy, Some((cores[0], cores[1]))));
    }
    v
}

/// What one run measured.
#[derive(Debug, Clone, Copy)]
enum Measured {
    Stream {
        secs: f64,
        msgs: u64,
        post_calls: u64,
        /// Work completions taken, and the `ibv_poll_cq` calls that returned at least one.
        wcs: u64,
        fruitful_polls: u64,
    },
    PingPong {
        /// Median round trip.
        rtt_us: f64,
        /// The client thread's CPU time (user + system) as a share of its run's wall time.
        cpu_share: f64,
        /// Round trips during which a polling thread's vCPU stopped executing it (steal time,
        /// [`verbs_lab_lessons::steal`]), of `count`; the median of the others.
        host_hit: usize,
        count: usize,
        clean_rtt_us: Option<f64>,
    },
}

impl Measured {
    /// The number the table compares: thousands of writes per second, or the median round trip.
    fn value(&self) -> f64 {
        match *self {
            Measured::Stream { secs, msgs, .. } => msgs as f64 / secs / 1000.0,
            Measured::PingPong { rtt_us, .. } => rtt_us,
        }
    }
    fn show(&self) -> String {
        match self {
            Measured::Stream { .. } => format!("{:.1} kmsg/s", self.value()),
            Measured::PingPong {
                rtt_us, host_hit, ..
            } if *host_hit > 0 => format!("{rtt_us:.0} µs ({host_hit} hit by a vCPU stall)"),
            Measured::PingPong { rtt_us, .. } => format!("{rtt_us:.0} µs"),
        }
    }
}

/// The stream: `count` RDMA WRITEs from `a`'s slot k to `b`'s slot k (k = i mod 64), at most
/// 64 in flight, under one setting. Checks that `b`'s slots equal `a`'s afterwards.
fn stream(a: &Side, b: &Side, s: Stream, count: u64, wait: Duration) -> Result<Measured> {
    let size = a.size;
    let depth = u64::from(DEPTH);
    b.mr.fill(0..stream_len(size), 0)?;
    let remote = b.mr.remote(0..stream_len(size))?;
    let sges: Vec<Sge> = (0..DEPTH as usize)
        .map(|k| a.mr.sge(k * size..(k + 1) * size))
        .collect::<std::result::Result<_, _>>()?;
    let mut wrs: Vec<SendWr> = Vec::with_capacity(s.list as usize);
    let mut wcs = WorkCompletion::array::<16>();
    let (mut posted, mut done) = (0u64, 0u64);
    let (mut post_calls, mut wcs_taken, mut fruitful_polls, mut empty) = (0u64, 0u64, 0u64, 0u32);
    let start = Instant::now();
    while done < count {
        // Post while the send queue has room. `done` moves only when a *signaled* completion
        // is polled: the slots of the unsignaled requests before it are free from then on, not
        // earlier — so `posted - done` is what the send queue holds, as far as we may know.
        while posted < count && posted - done < depth {
            let k = s.list.min(count - posted).min(depth - (posted - done));
            wrs.clear();
            for i in posted..posted + k {
                let slot = (i % depth) as u32;
                let dst = remote
                    .slice(slot * size as u32, size as u32)
                    .expect("slot inside the region");
                let last = i + 1 == count;
                wrs.push(
                    SendWr::new(
                        i,
                        SendOp::Write(dst),
                        Payload::Sges(std::slice::from_ref(&sges[slot as usize])),
                    )
                    .signaled((i + 1) % s.signal_every == 0 || last),
                );
            }
            // One call: the k requests go down as one linked list (wr.next), one doorbell.
            if s.inline {
                a.qp.post_send_inline(&wrs, &a.mr)
            } else {
                a.qp.post_send(&wrs)
            }
            .context("ibv_post_send")?;
            post_calls += 1;
            posted += k;
        }
        let got = a.cq.poll(&mut wcs[..s.poll_batch]).context("ibv_poll_cq")?;
        if got > 0 {
            fruitful_polls += 1;
            wcs_taken += got as u64;
        }
        for wc in &wcs[..got] {
            wc.ok().context("an RDMA WRITE failed")?;
            // A signaled completion retires itself and every unsignaled request before it.
            done = done.max(wc.wr_id() + 1);
        }
        if got == 0 {
            empty = empty.wrapping_add(1);
            if empty % 1024 == 0 && start.elapsed() > wait {
                bail!("{done} of {count} writes completed after {wait:?}");
            }
            std::hint::spin_loop();
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let (got, want) = (
        b.mr.to_vec(0..stream_len(size))?,
        a.mr.to_vec(0..stream_len(size))?,
    );
    if let Some(at) = first_mismatch(&got, &want) {
        bail!(
            "byte {at} of the receiving side's slots (slot {}) differs from what was written",
            at / size
        );
    }
    Ok(Measured::Stream {
        secs,
        msgs: count,
        post_calls,
        wcs: wcs_taken,
        fruitful_polls,
    })
}

/// Completions one ping-pong thread still waits for.
struct Awaited {
    recvs: u32,
    sends: u32,
}

/// Takes completions off `side`'s CQ until `want` is met: spinning on `ibv_poll_cq`, or
/// sleeping on the completion channel between polls (lesson 07's loop). `watch` looks at every
/// turn of the loop for time the vCPU did not execute this thread (lesson 09).
fn await_completions(
    side: &Side,
    mode: Wait,
    mut want: Awaited,
    wait: Duration,
    watch: &mut StealWatch,
) -> Result<()> {
    let deadline = Instant::now() + wait;
    let mut wcs = WorkCompletion::array::<4>();
    let mut spins = 0u32;
    watch.skip();
    while want.recvs > 0 || want.sends > 0 {
        let got = side.cq.poll(&mut wcs).context("ibv_poll_cq")?;
        if got > 0 {
            // The stretch since the last look ends with this completion.
            watch.check();
            take(&wcs[..got], &mut want)?;
            continue;
        }
        watch.poll();
        match mode {
            Wait::Busy => {
                spins = spins.wrapping_add(1);
                if spins % 1024 == 0 && Instant::now() > deadline {
                    bail!("no completion within {wait:?}");
                }
                std::hint::spin_loop();
            }
            Wait::Events => {
                // Arm, then poll once more: a completion that landed before the arm raises no
                // event, and sleeping on it would wait forever.
                side.cq.req_notify(false).context("ibv_req_notify_cq")?;
                let got = side.cq.poll(&mut wcs).context("ibv_poll_cq")?;
                if got > 0 {
                    take(&wcs[..got], &mut want)?;
                    continue;
                }
                let left = deadline.saturating_duration_since(Instant::now());
                if !side.channel.poll_readable(left)? {
                    bail!("no completion event within {wait:?}");
                }
                // Taken here, acknowledged in one ibv_ack_cq_events at the end of the run.
                side.channel
                    .get_cq_event(&side.cq)
                    .context("ibv_get_cq_event")?;
            }
        }
    }
    Ok(())
}

/// Counts polled completions against what a thread waits for.
fn take(wcs: &[WorkCompletion], want: &mut Awaited) -> Result<()> {
    for wc in wcs {
        wc.ok().context("a ping-pong completion failed")?;
        if wc.opcode() == WcOpcode::RECV {
            want.recvs = want.recvs.saturating_sub(1);
        } else {
            want.sends = want.sends.saturating_sub(1);
        }
    }
    Ok(())
}

/// CPU time (user + system) the calling thread has used.
fn thread_cpu() -> Duration {
    getrusage(UsageWho::RUSAGE_THREAD).map_or(Duration::ZERO, |u| {
        let t = |tv: nix::sys::time::TimeVal| {
            Duration::new(tv.tv_sec() as u64, tv.tv_usec() as u32 * 1000)
        };
        t(u.user_time()) + t(u.system_time())
    })
}

fn pin(cpu: Option<usize>) -> Result<()> {
    if let Some(id) = cpu {
        ensure!(
            core_affinity::set_for_current(core_affinity::CoreId { id }),
            "core_affinity::set_for_current(CPU {id}) failed: is CPU {id} among the CPUs this \
             process may use?"
        );
    }
    Ok(())
}

/// One side's sequence number into its send half, then one signaled SEND of it; the post (a
/// system call on rxe) is watched for a stalled vCPU too.
fn send_seq(side: &Side, seq: u64, watch: &mut StealWatch) -> Result<()> {
    let range = side.send_range();
    side.mr.write(range.start, &seq.to_le_bytes())?;
    let sge = side.mr.sge(range)?;
    watch.skip();
    side.qp
        .post_send(&[
            SendWr::new(seq, SendOp::Send, Payload::Sges(std::slice::from_ref(&sge)))
                .signaled(true),
        ])
        .context("ibv_post_send(SEND)")?;
    watch.check();
    Ok(())
}

/// The sequence number a receive brought; checked, and the receive re-posted.
fn recv_seq(side: &Side, want: u64) -> Result<()> {
    let base = stream_len(side.size);
    let got = side.mr.to_vec(base..base + 8)?;
    let seq = u64::from_le_bytes(got.try_into().expect("8 bytes"));
    ensure!(
        seq == want,
        "the message carried sequence number {seq}, expected {want}"
    );
    side.post_recvs(1)
}

/// The ping-pong: the client thread sends, the server thread answers, `count` times.
fn ping_pong(a: &Side, b: &Side, p: PingPong, count: u32, wait: Duration) -> Result<Measured> {
    let (ca, cb) = (p.cpus.map(|c| c.0), p.cpus.map(|c| c.1));
    type Stalls = Vec<(Instant, Instant)>;
    /// Each round trip's start and length, the client's CPU share, its stalls.
    type Client = (Vec<(Instant, Duration)>, f64, Stalls);
    let (client, server) = std::thread::scope(|scope| {
        let server = scope.spawn(|| -> Result<Stalls> {
            pin(cb)?;
            let mut watch = StealWatch::new();
            for i in 0..u64::from(count) {
                // Wait for the request, and for our previous answer's completion: its buffer
                // is rewritten next.
                let sends = u32::from(i > 0);
                await_completions(b, p.wait, Awaited { recvs: 1, sends }, wait, &mut watch)
                    .context("server")?;
                recv_seq(b, i)?;
                send_seq(b, i, &mut watch)?;
            }
            await_completions(b, p.wait, Awaited { recvs: 0, sends: 1 }, wait, &mut watch)?;
            Ok(watch.stalls().to_vec())
        });
        let client = scope.spawn(|| -> Result<Client> {
            pin(ca)?;
            let mut watch = StealWatch::new();
            let (cpu0, wall0) = (thread_cpu(), Instant::now());
            let mut trips = Vec::with_capacity(count as usize);
            for i in 0..u64::from(count) {
                let t0 = Instant::now();
                send_seq(a, i, &mut watch)?;
                await_completions(a, p.wait, Awaited { recvs: 1, sends: 1 }, wait, &mut watch)
                    .context("client")?;
                recv_seq(a, i)?;
                trips.push((t0, t0.elapsed()));
            }
            Ok((
                trips,
                (thread_cpu() - cpu0).as_secs_f64() / wall0.elapsed().as_secs_f64(),
                watch.stalls().to_vec(),
            ))
        });
        (client.join(), server.join())
    });
    a.cq.ack_events();
    b.cq.ack_events();
    let server_stalls = server
        .map_err(|_| anyhow::anyhow!("the server thread panicked"))?
        .context("server thread")?;
    let (trips, cpu_share, mut stalls) = client
        .map_err(|_| anyhow::anyhow!("the client thread panicked"))?
        .context("client thread")?;
    stalls.extend(server_stalls);
    let (hit, t) = tally(&trips, &stalls);
    let us = |d: &Duration| d.as_secs_f64() * 1e6;
    let all: Vec<f64> = trips.iter().map(|(_, d)| us(d)).collect();
    let clean: Vec<f64> = trips
        .iter()
        .zip(&hit)
        .filter(|(_, &h)| !h)
        .map(|((_, d), _)| us(d))
        .collect();
    Ok(Measured::PingPong {
        rtt_us: Summary::of(&all).map_or(0.0, |s| s.median),
        cpu_share,
        host_hit: t.hit,
        count: trips.len(),
        clean_rtt_us: Summary::of(&clean).map(|s| s.median),
    })
}

/// A separate QP pair with a send queue of `PROBE_DEPTH`: post as many unsignaled writes as
/// the queue holds, wait until the last one's bytes arrived (so all have executed), then post
/// one more. Portable code must assume it is refused: the provider may learn that slots are
/// free only from a polled completion, and unsignaled requests produce none.
fn sq_slot_probe(ends: Ends, n: &Narrator) -> Result<String> {
    let Ends { a, b, wait, .. } = ends;
    let size = a.size;
    // The peer QP only has to exist (and stay connected) while the writes land: `_peer` keeps
    // it alive to the end of this function (a `..` would drop it here).
    let Probe { qa, qb: _peer, .. } = probe_pair(ends)?;
    let depth = qa.caps().max_send_wr.min(DEPTH);
    b.mr.fill(0..stream_len(size), 0)?;
    let remote = b.mr.remote(0..stream_len(size))?;
    let write = |k: u32| -> Result<()> {
        let sge = a.mr.sge(k as usize * size..(k as usize + 1) * size)?;
        let dst = remote
            .slice(k * size as u32, size as u32)
            .expect("slot inside the region");
        Ok(qa.post_send(&[SendWr::new(
            u64::from(k),
            SendOp::Write(dst),
            Payload::Sges(std::slice::from_ref(&sge)),
        )
        .signaled(false)])?)
    };
    for k in 0..depth {
        write(k).with_context(|| format!("unsignaled write {k} of {depth}"))?;
    }
    // Every write has executed once the last one's bytes are there (RC executes in order).
    let last = (depth as usize - 1) * size;
    let want = a.mr.to_vec(last..last + size)?;
    let start = Instant::now();
    while b.mr.to_vec(last..last + size)? != want {
        ensure!(
            start.elapsed() < wait,
            "the {depth} unsignaled writes did not arrive within {wait:?}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    n.say(format!(
        "send queue of {depth} (granted for {PROBE_DEPTH} asked): {depth} unsignaled writes \
         posted, all executed (the last one's bytes arrived), no completion to poll"
    ));
    let verdict = match write(depth) {
        Ok(()) => format!(
            "write {} accepted: this provider frees slots of executed unsignaled requests \
             without a polled completion",
            depth + 1
        ),
        Err(e) => format!("write {} refused: {e:#}", depth + 1),
    };
    n.say(&verdict);
    Ok(verdict)
}

/// The measured pair as the experiments of steps 5 and 6 use it: both ends, the flags, the
/// path MTU both QPs were connected with, and the bound of every wait.
#[derive(Clone, Copy)]
struct Ends<'a> {
    args: &'a Args,
    a: &'a Side,
    b: &'a Side,
    mtu: Mtu,
    wait: Duration,
}

/// A second connected QP pair with a send queue of `PROBE_DEPTH`, for experiments that may break
/// it (fill its queue, or end in a remote access error that moves it to the error state).
fn probe_pair(ends: Ends) -> Result<Probe> {
    let Ends {
        args, a, b, mtu, ..
    } = ends;
    // Their own CQs: nothing of these experiments can reach the measured CQs.
    let (cqa, cqb) = (
        a.ctx.create_cq(8, None).context("ibv_create_cq")?,
        b.ctx.create_cq(8, None).context("ibv_create_cq")?,
    );
    let mk = |s: &Side, cq: &Cq| create_rc_qp(&s.pd, cq, PROBE_DEPTH, 1).context("the probe QP");
    let (qa, qb) = (mk(a, &cqa)?, mk(b, &cqb)?);
    let ea = local_endpoint(&a.ctx, args.pair.ib_port, &qa, &a.gid, random_psn())?;
    let eb = local_endpoint(&b.ctx, args.pair.ib_port, &qb, &b.gid, random_psn())?;
    bring_up(&qa, &ea, &eb, &a.opts(args, mtu)?).context("connecting the probe QP")?;
    bring_up(&qb, &eb, &ea, &b.opts(args, mtu)?).context("connecting the probe peer QP")?;
    Ok(Probe { qa, qb, cqa, cqb })
}

/// [`probe_pair`]'s QPs and their own CQs.
struct Probe {
    qa: Qp,
    qb: Qp,
    cqa: Cq,
    cqb: Cq,
}

/// A type 2 memory window on a fresh region of `b`: `b`'s QP binds it (`IBV_WR_BIND_MW`), `a`
/// writes through its rkey, `b` invalidates it (`IBV_WR_LOCAL_INV`), `a` writes again and must
/// get a remote access error, the window's bytes unchanged.
fn memory_window(ends: Ends, n: &Narrator) -> Result<String> {
    let Ends { a, b, wait, .. } = ends;
    let size = a.size;
    // Declared before the QPs, so dropped after them.
    let region =
        b.pd.reg_mr(
            size,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::MW_BIND,
        )
        .context("ibv_reg_mr with IBV_ACCESS_MW_BIND")?;
    let mw =
        b.pd.alloc_mw_type2()
            .context("ibv_alloc_mw(IBV_MW_TYPE_2)")?;
    let Probe { qa, qb, cqa, cqb } = probe_pair(ends)?;
    n.say(format!(
        "{}: region of {size} bytes (rkey {:#x}, access {}), window allocated with rkey {:#x}",
        b.ctx.name(),
        region.rkey(),
        region.access(),
        mw.rkey()
    ));

    let rkey = qb
        .post_bind_mw(1, &mw, &region, 0..size, AccessFlags::REMOTE_WRITE)
        .context("binding the window")?;
    cqb.poll_one(wait, "the IBV_WR_BIND_MW completion")?;
    n.say(format!(
        "IBV_WR_BIND_MW on QP {:#x}: window -> region bytes 0..{size}, REMOTE_WRITE, new rkey \
         {rkey:#x} (ibv_inc_rkey of the old one); completed",
        qb.qpn()
    ));

    let through = |slot: usize| -> Result<WorkCompletion> {
        let sge = a.mr.sge(slot * size..(slot + 1) * size)?;
        let dst = verbs_lab::verbs::RemoteBuf {
            addr: region.addr(),
            rkey,
            len: size as u32,
        };
        qa.post_send(&[SendWr::new(
            slot as u64,
            SendOp::Write(dst),
            Payload::Sges(std::slice::from_ref(&sge)),
        )
        .signaled(true)])
            .context("ibv_post_send(RDMA WRITE through the window)")?;
        let mut wc = WorkCompletion::array::<1>();
        cqa.poll_timeout(&mut wc, wait, "the write through the window")?;
        let [wc] = wc;
        Ok(wc)
    };
    through(0)?
        .ok()
        .context("the write through the bound window")?;
    let want = a.mr.to_vec(0..size)?;
    ensure!(
        region.to_vec(0..size)? == want,
        "the write through the window completed but its bytes are not in the region"
    );
    n.say(format!(
        "{}: RDMA WRITE of {size} bytes to rkey {rkey:#x}: completed, bytes in the region checked",
        a.ctx.name()
    ));

    qb.post_local_inv(2, rkey)
        .context("invalidating the window")?;
    cqb.poll_one(wait, "the IBV_WR_LOCAL_INV completion")?;
    n.say(format!("IBV_WR_LOCAL_INV of rkey {rkey:#x}: completed"));

    let wc = through(1)?;
    ensure!(
        !wc.is_success(),
        "the write through the invalidated window succeeded"
    );
    ensure!(
        region.to_vec(0..size)? == want,
        "the write through the invalidated window changed the region"
    );
    let verdict = format!(
        "write through rkey {rkey:#x} arrived; after IBV_WR_LOCAL_INV the next one: {}, region \
         unchanged",
        wc.status().name()
    );
    n.say(&verdict);
    Ok(verdict)
}

fn print_table(
    cases: &[Case],
    results: &[Vec<Measured>],
    moderation: &str,
    slots: &str,
    window: &str,
    args: &Args,
) {
    let find = |key: &str| cases.iter().position(|c| c.key == key);
    let med = |i: usize| {
        let v: Vec<f64> = results[i].iter().map(Measured::value).collect();
        Summary::of(&v).map_or(0.0, |s| s.median)
    };
    // (knob, its baseline, its variant), each a (setting, case key).
    let knobs: [(&str, [(&str, &str); 2]); 6] = [
        (
            "signaling",
            [
                ("every WR signaled", "sig1"),
                ("every 16th signaled", "sig16"),
            ],
        ),
        (
            "inline",
            [
                ("off (NIC reads the SGE)", "sig16"),
                ("IBV_SEND_INLINE", "inline"),
            ],
        ),
        (
            "post list",
            [
                ("1 WR per ibv_post_send", "sig16"),
                ("16 WRs per ibv_post_send", "list16"),
            ],
        ),
        (
            "poll batch",
            [("ibv_poll_cq n=1", "poll1"), ("ibv_poll_cq n=16", "sig1")],
        ),
        (
            "wait",
            [("busy polling", "busy"), ("events (channel)", "events")],
        ),
        (
            "placement",
            [
                ("same core", "same-core"),
                ("different cores", "diff-cores"),
            ],
        ),
    ];
    outln!(
        "\n{} bytes per message; stream: {} RDMA WRITEs per run, 64 in flight; ping-pong: {} \
         round trips per run; median of {} rounds",
        args.size,
        args.iters,
        args.pp_iters,
        args.rounds
    );
    outln!(
        "{:<11} {:<26} {:>14} {:>8}  detail (last round)",
        "knob",
        "setting",
        "result",
        "ratio"
    );
    for (k, settings) in knobs {
        // The first setting run is the knob's baseline.
        let mut base = f64::NAN;
        for (variant, key) in settings {
            let Some(i) = find(key) else {
                outln!("{k:<11} {variant:<26} {:>14} {:>8}  not run here", "-", "-");
                continue;
            };
            let v = med(i);
            if base.is_nan() {
                base = v;
            }
            let last = results[i].last().expect("at least one round");
            let (result, ratio, detail) = match *last {
                Measured::Stream {
                    msgs,
                    post_calls,
                    wcs,
                    fruitful_polls,
                    ..
                } => (
                    format!("{v:.1} kmsg/s"),
                    v / base,
                    format!(
                        "{msgs} writes: {post_calls} ibv_post_send, {wcs} completions in \
                     {fruitful_polls} ibv_poll_cq"
                    ),
                ),
                Measured::PingPong {
                    cpu_share,
                    host_hit,
                    count,
                    clean_rtt_us,
                    ..
                } => (
                    format!("{v:.0} µs RTT"),
                    base / v,
                    format!(
                        "client thread on a CPU {:.0}% of its run{}",
                        cpu_share * 100.0,
                        match (host_hit, clean_rtt_us) {
                            (0, _) => String::new(),
                            (h, Some(c)) => format!(
                                "; a vCPU stalled in {h} of {count} round trips (the others' \
                                 median {c:.0} µs)"
                            ),
                            (h, None) => format!("; a vCPU stalled in {h} of {count} round trips"),
                        }
                    ),
                ),
            };
            outln!(
                "{k:<11} {variant:<26} {result:>14} {:>7.2}x  {detail}",
                ratio
            );
        }
    }
    outln!("{:<11} {:<26} {moderation}", "moderation", "ibv_modify_cq");
    outln!(
        "{:<11} {:<26} {slots}",
        "SQ slots",
        "unsignaled, queue full"
    );
    outln!("{:<11} {:<26} {window}", "MW", "type 2: bind, invalidate");
    outln!(
        "ratio: speed-up against the knob's first row (writes/s up, or round trip down); \
         above 1 is better"
    );
}
