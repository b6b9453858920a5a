//! # Lesson 07 — completion events: sleeping instead of spinning
//!
//! Every lesson so far waited for completions by calling `ibv_poll_cq` in a loop: the lowest
//! latency there is, and one CPU core burnt at 100 % for as long as we wait. The alternative is
//! a *completion channel*: a file descriptor tied to the CQ that becomes readable when the CQ,
//! once *armed*, receives a completion. The thread sleeps in `poll(2)` until then.
//!
//! The steps, in the order the hardware needs them:
//!
//! 1. `ibv_create_comp_channel` — the channel (a file descriptor);
//! 2. `ibv_create_cq(.., channel, ..)` — a CQ that reports to it;
//! 3. `ibv_req_notify_cq(cq, 0)` — arm: the *next* completion raises one event;
//! 4. `poll(2)` on the channel's fd — the thread sleeps until it is readable;
//! 5. `ibv_get_cq_event` takes the event (the fd is non-blocking, so an empty channel answers
//!    EAGAIN instead of hanging). The event disarms the CQ: arm again before the next sleep;
//! 6. `ibv_ack_cq_events` acknowledges events — in batches, one call per `ACK_BATCH` events
//!    and one at the end of a run, since each call takes a lock. Every event taken must be
//!    acked before the CQ is destroyed, or `ibv_destroy_cq` blocks for ever;
//! 7. `ibv_poll_cq` — the event says only "something arrived": the completions are still in
//!    the CQ, and must be polled as usual.
//!
//! **The re-arm race.** Arming covers only completions that arrive *after* `ibv_req_notify_cq`.
//! A completion that lands between our last empty poll and the arming raises no event, and a
//! thread that now goes to sleep sleeps until its timeout — with the completion sitting in the
//! CQ. The cure is cheap: arm, then poll once more before sleeping. Whatever slipped in before
//! the arming is found by that poll; whatever comes after it raises the event. `--show-race`
//! makes the race happen on purpose.
//!
//! The lesson runs the same SEND/RECV ping-pong (`-n` round trips) twice — busy polling, then
//! events — and prints, side by side, the round-trip latency and both sides' CPU time
//! (`clock_gettime(CLOCK_PROCESS_CPUTIME_ID)`, exact) and sleeps (`getrusage(2)`'s voluntary
//! context switches).
//!
//! ```text
//! server:  lesson07_events -d rxe0
//! client:  lesson07_events -d rxe1 -n 500 --show-race 192.168.77.1
//! ```

#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context as _, Result};
use clap::Parser;
use nix::sys::resource::{getrusage, UsageWho};
use nix::time::{clock_gettime, ClockId};
use verbs_lab::cli::SizeRange;
use verbs_lab::oob::OobConn;
use verbs_lab::verbs::{
    AccessFlags, CompChannel, Cq, Mr, Payload, Qp, RecvWr, RemoteBuf, SendOp, SendWr, VerbsError,
    WcOpcode, WorkCompletion,
};
use verbs_lab_lessons::{
    check_range, connect_qp, create_rc_qp, exchange_endpoints, first_mismatch, lesson_main, meet,
    open_device, outln, pattern, peer_rts_barrier, recv_params, same_as_client, send_params,
    CommonArgs, Device, Narrator, Summary, Terms,
};

const PROGRAM: &str = "lesson07_events";
/// Largest message: the buffer holds a send slot and a receive slot of this size.
const MAX_SIZE: usize = 64 * 1024;
/// The sizes of a message (`-s`, and the client's when the server adopts it).
const SIZES: SizeRange<usize> = SizeRange::new(1..=MAX_SIZE);
const MAX_ITERS: u32 = 1_000_000;
/// The longest `--think`: a second per round trip.
const MAX_THINK_US: u64 = 1_000_000;
/// Events acknowledged per `ibv_ack_cq_events` call.
const ACK_BATCH: u32 = 16;

#[derive(Parser, Debug)]
#[command(
    about = "Lesson 07: completion channel vs busy polling — latency and CPU time side by side",
    after_help = "Server:  lesson07_events -d rxe0\n\
                  Client:  lesson07_events -d rxe1 -n 500 --show-race 192.168.77.1\n\
                  The client's -s/-n are used by both sides; a server given different ones refuses."
)]
struct Args {
    #[command(flatten)]
    common: CommonArgs,
    /// Bytes per message, 1 to 64K (suffixes K, M, G) [default: 64]
    #[arg(short = 's', long = "size", value_parser = SIZES)]
    size: Option<usize>,
    /// Round trips in each mode [default: 500]
    #[arg(short = 'n', long = "iters")]
    iters: Option<u32>,
    /// Client: first make the re-arm race happen on purpose (arm after a completion arrived)
    #[arg(long = "show-race")]
    show_race: bool,
    /// Microseconds the server sleeps before each reply, as a server busy with other work
    /// would: the client waits that much longer for every pong (0 to 1000000) [default: 0]
    #[arg(long = "think")]
    think_us: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Test {
    size: usize,
    iters: u32,
    show_race: bool,
    /// µs the server sleeps between a ping's arrival and its pong.
    think_us: u64,
}

fn check_flags(args: &Args) -> Result<Test> {
    args.common.check()?;
    let t = Test {
        size: args.size.unwrap_or(64),
        iters: args.iters.unwrap_or(500),
        show_race: args.show_race,
        think_us: args.think_us.unwrap_or(0),
    };
    check_test(&t)?;
    if args.show_race && args.common.role().is_server() {
        bail!("--show-race is a client flag (the client tells the server)");
    }
    Ok(t)
}

impl Test {
    /// What this side tells the peer: both sides their active MTU, the client its test.
    fn offer(&self, server: bool, dev: &Device) -> Terms {
        let mine = Terms::new().with("mtu", dev.active_mtu());
        if server {
            return mine;
        }
        mine.with("size", self.size)
            .with("iters", self.iters)
            .with("show_race", self.show_race as u8)
            .with("think_us", self.think_us)
    }
}

/// `N round trips of S bytes`, as the headings of steps 6 and 7 say it.
impl std::fmt::Display for Test {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} round trips of {} bytes", self.iters, self.size)?;
        if self.think_us > 0 {
            write!(
                f,
                " (the server thinks {} µs before each reply)",
                self.think_us
            )?;
        }
        Ok(())
    }
}

fn check_test(t: &Test) -> Result<()> {
    SIZES
        .check_value("-s", t.size)
        .map_err(anyhow::Error::msg)?;
    check_range("-n", t.iters, 1..=MAX_ITERS, "round trips")?;
    check_range("--think", t.think_us, 0..=MAX_THINK_US, "µs")
}

/// How a side waits for its completions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// `ibv_poll_cq` in a loop.
    Busy,
    /// Arm, re-poll, sleep on the completion channel.
    Event,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Busy => "busy",
            Mode::Event => "event",
        }
    }
    /// How this mode waits, as step 6 and 7's headings say it.
    fn how(self) -> &'static str {
        match self {
            Mode::Busy => "busy polling (ibv_poll_cq in a loop)",
            Mode::Event => "events (arm, re-poll, poll(2) on the fd, ibv_get_cq_event, batched ibv_ack_cq_events, poll)",
        }
    }
}

/// What the event-driven wait did: the numbers that show the race being closed.
#[derive(Debug, Clone, Copy, Default)]
struct EventStats {
    /// `ibv_req_notify_cq` calls.
    arms: u64,
    /// Events taken with `ibv_get_cq_event`.
    events: u64,
    /// `ibv_ack_cq_events` calls that acknowledged them (batched).
    ack_calls: u64,
    /// Times the poll right after arming found a completion: each one would have been a
    /// missed event — a sleep until timeout — without that poll.
    repoll_catches: u64,
    /// Wake-ups after which the CQ was empty (an event for a completion already polled).
    empty_wakeups: u64,
}

/// Waits for completions in one [`Mode`], counting SEND and RECV completions as they come (a
/// side may see its next RECV before the SEND completion it is waiting for).
struct Waiter<'a> {
    cq: &'a Cq,
    channel: &'a CompChannel,
    mode: Mode,
    wait: Duration,
    sends: u64,
    recvs: u64,
    stats: EventStats,
}

impl<'a> Waiter<'a> {
    fn new(cq: &'a Cq, channel: &'a CompChannel, wait: Duration) -> Waiter<'a> {
        Waiter {
            cq,
            channel,
            mode: Mode::Busy,
            wait,
            sends: 0,
            recvs: 0,
            stats: EventStats::default(),
        }
    }

    /// Takes every completion the CQ holds now (`ibv_poll_cq`); returns how many.
    fn drain(&mut self) -> Result<usize> {
        let mut wcs = WorkCompletion::array::<8>();
        let n = self.cq.poll(&mut wcs)?;
        for wc in &wcs[..n] {
            wc.ok()?;
            match wc.opcode() {
                WcOpcode::SEND => self.sends += 1,
                WcOpcode::RECV => self.recvs += 1,
                other => bail!("unexpected completion {other}"),
            }
        }
        Ok(n)
    }

    /// Returns once at least one more completion has been taken.
    fn next(&mut self, what: &str) -> Result<()> {
        match self.mode {
            Mode::Busy => {
                let start = Instant::now();
                let mut spins = 0u32;
                loop {
                    if self.drain()? > 0 {
                        return Ok(());
                    }
                    spins = spins.wrapping_add(1);
                    if spins % 1024 == 0 && start.elapsed() >= self.wait {
                        return Err(VerbsError::Timeout {
                            what: what.into(),
                            after: self.wait,
                        }
                        .into());
                    }
                    std::hint::spin_loop();
                }
            }
            Mode::Event => {
                let mut woke = false;
                loop {
                    if self.drain()? > 0 {
                        return Ok(());
                    }
                    if woke {
                        self.stats.empty_wakeups += 1;
                    }
                    // Arm: the next completion raises an event on the channel.
                    self.cq.req_notify(false)?;
                    self.stats.arms += 1;
                    // Poll again *after* arming. A completion that arrived between the empty
                    // poll above and the arming raised no event; without this poll we would
                    // sleep with it sitting in the CQ.
                    if self.drain()? > 0 {
                        self.stats.repoll_catches += 1;
                        return Ok(());
                    }
                    // Sleep in poll(2) on the channel's fd until an armed CQ has an event.
                    if !self.channel.poll_readable(self.wait)? {
                        return Err(anyhow::Error::new(VerbsError::Timeout {
                            what: "a completion event (poll(2) on the completion channel's fd)"
                                .into(),
                            after: self.wait,
                        })
                        .context(format!("sleeping until {what}")));
                    }
                    // ibv_get_cq_event: take the event. It disarms the CQ; the loop re-arms
                    // before it sleeps again.
                    if self.channel.get_cq_event(self.cq)? {
                        self.stats.events += 1;
                    }
                    // ibv_ack_cq_events: not per event, but once per ACK_BATCH of them.
                    if self.cq.unacked_events() >= ACK_BATCH {
                        self.ack();
                    }
                    // The event only says "look": loop and poll.
                    woke = true;
                }
            }
        }
    }

    /// Acknowledges every event taken and not yet acked, in one `ibv_ack_cq_events` call.
    fn ack(&mut self) {
        if self.cq.ack_events() > 0 {
            self.stats.ack_calls += 1;
        }
    }

    fn until(&mut self, sends: u64, recvs: u64, what: &str) -> Result<()> {
        while self.sends < sends || self.recvs < recvs {
            self.next(what)?;
        }
        Ok(())
    }
}

/// What this process has used so far.
#[derive(Debug, Clone, Copy)]
struct Usage {
    /// CPU time, exactly as the scheduler counted it (`clock_gettime(CLOCK_PROCESS_CPUTIME_ID)`).
    cpu: Duration,
    /// `getrusage(2)`'s user and system time. Their sum is the same CPU time, but the split is
    /// sampled at timer ticks, so over a short run it is only a rough guide.
    user: Duration,
    sys: Duration,
    /// `getrusage(2)`'s voluntary context switches: the times we went to sleep.
    sleeps: u64,
}

fn usage() -> Result<Usage> {
    let cpu = clock_gettime(ClockId::CLOCK_PROCESS_CPUTIME_ID)
        .context("clock_gettime(CLOCK_PROCESS_CPUTIME_ID)")?;
    let ru = getrusage(UsageWho::RUSAGE_SELF).context("getrusage")?;
    let d = |tv: nix::sys::time::TimeVal| {
        Duration::from_secs(tv.tv_sec() as u64) + Duration::from_micros(tv.tv_usec() as u64)
    };
    Ok(Usage {
        cpu: Duration::new(cpu.tv_sec() as u64, cpu.tv_nsec() as u32),
        user: d(ru.user_time()),
        sys: d(ru.system_time()),
        sleeps: ru.voluntary_context_switches().max(0) as u64,
    })
}

/// One side's measurement of one mode.
#[derive(Debug, Clone, Copy, Default)]
struct Measured {
    wall: Duration,
    cpu: Duration,
    user: Duration,
    sys: Duration,
    sleeps: u64,
    stats: EventStats,
}

impl Measured {
    /// One run's numbers: wall time since `t0`, and what this process used since `u0` — the
    /// usage is read first, so the CPU interval lies within the wall interval.
    fn since(t0: Instant, u0: &Usage, stats: EventStats) -> Result<Measured> {
        let u1 = usage()?;
        Ok(Measured {
            wall: t0.elapsed(),
            cpu: u1.cpu - u0.cpu,
            user: u1.user.saturating_sub(u0.user),
            sys: u1.sys.saturating_sub(u0.sys),
            sleeps: u1.sleeps - u0.sleeps,
            stats,
        })
    }
    fn describe(&self, mode: Mode) -> String {
        format!(
            "{} run: {} ms wall; CPU {} ms (CLOCK_PROCESS_CPUTIME_ID), getrusage: user {} ms + \
             system {} ms, {} voluntary context switches",
            mode.name(),
            self.wall.as_millis(),
            self.cpu.as_millis(),
            self.user.as_millis(),
            self.sys.as_millis(),
            self.sleeps
        )
    }
    fn cpu(&self) -> Duration {
        self.cpu
    }
    fn cpu_pct(&self) -> f64 {
        100.0 * self.cpu().as_secs_f64() / self.wall.as_secs_f64().max(1e-9)
    }
    fn add_to(&self, p: Terms, m: Mode) -> Terms {
        let k = |s: &str| format!("{}_{s}", m.name());
        p.with(&k("wall_us"), self.wall.as_micros())
            .with(&k("cpu_us"), self.cpu.as_micros())
            .with(&k("user_us"), self.user.as_micros())
            .with(&k("sys_us"), self.sys.as_micros())
            .with(&k("sleeps"), self.sleeps)
            .with(&k("arms"), self.stats.arms)
            .with(&k("events"), self.stats.events)
            .with(&k("acks"), self.stats.ack_calls)
            .with(&k("repoll"), self.stats.repoll_catches)
            .with(&k("empty"), self.stats.empty_wakeups)
    }
    fn from_params(p: &Terms, m: Mode) -> Result<Measured> {
        let k = |s: &str| format!("{}_{s}", m.name());
        let us = |s: &str| -> Result<Duration> { Ok(Duration::from_micros(p.get(&k(s))?)) };
        Ok(Measured {
            wall: us("wall_us")?,
            cpu: us("cpu_us")?,
            user: us("user_us")?,
            sys: us("sys_us")?,
            sleeps: p.get(&k("sleeps"))?,
            stats: EventStats {
                arms: p.get(&k("arms"))?,
                events: p.get(&k("events"))?,
                ack_calls: p.get(&k("acks"))?,
                repoll_catches: p.get(&k("repoll"))?,
                empty_wakeups: p.get(&k("empty"))?,
            },
        })
    }
}

/// The registered buffer: a send slot, then a receive slot.
struct Slots {
    size: usize,
}

impl Slots {
    fn send(&self) -> std::ops::Range<usize> {
        0..self.size
    }
    fn recv(&self) -> std::ops::Range<usize> {
        MAX_SIZE..MAX_SIZE + self.size
    }
}

fn run(args: &Args, asked: Test) -> Result<()> {
    let role = args.common.role();
    let n = args.common.narrator();
    let wait = args.common.wait();
    let server = role.is_server();

    n.step(1, "Open the device (lesson 01)");
    let dev = open_device(&args.common, &n)?;

    n.step(
        2,
        "Create the completion channel, then the CQ that reports to it",
    );
    let channel = dev
        .ctx
        .create_comp_channel()
        .context("ibv_create_comp_channel")?;
    n.say(format!(
        "ibv_create_comp_channel: fd {} (readable when an armed CQ gets a completion)",
        channel.fd()
    ));
    let cq = dev
        .ctx
        .create_cq(16, Some(&channel))
        .context("ibv_create_cq with the channel")?;
    n.say(format!(
        "ibv_create_cq: {} entries, comp_channel fd {}",
        cq.capacity(),
        channel.fd()
    ));

    n.step(3, "Register the buffer and create the RC QP (lesson 02)");
    let pd = dev.ctx.alloc_pd().context("ibv_alloc_pd")?;
    let mr = pd
        .reg_mr(2 * MAX_SIZE, AccessFlags::LOCAL_WRITE)
        .context("ibv_reg_mr")?;
    let qp = create_rc_qp(&pd, &cq, 4, 4)?;
    n.say(format!(
        "MR of {} bytes (lkey {:#x}): send slot at 0, receive slot at {MAX_SIZE}; RC QP {:#x}",
        2 * MAX_SIZE,
        mr.lkey(),
        qp.qpn()
    ));

    n.step(
        4,
        "Agree on the test, exchange endpoints and connect (lesson 03)",
    );
    let (mut conn, test) = connect(args, asked, &dev, &qp, &n)?;
    let slots = Slots { size: test.size };
    if server {
        // The first ping (or the race demonstration's message) needs a receive waiting.
        post_recv_slot(&qp, &mr, &slots).context("posting the first receive")?;
    }
    peer_rts_barrier(&mut conn)?;

    let mut waiter = Waiter::new(&cq, &channel, wait);

    if test.show_race {
        n.step(5, "The re-arm race, on purpose");
        if server {
            // The client's demonstration sends us one message; take it and re-post.
            waiter.until(0, waiter.recvs + 1, "the race demonstration's message")?;
            post_recv_slot(&qp, &mr, &slots)?;
            n.say("took the client's demonstration message");
        } else {
            show_race(&qp, &cq, &channel, &mr, &slots, &mut waiter, &n)?;
        }
        conn.barrier("the end of the race demonstration")?;
    }

    let mut measured = [Measured::default(); 2];
    let mut rtts: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for (m, mode) in [Mode::Busy, Mode::Event].into_iter().enumerate() {
        n.step(6 + m as u32, &format!("{test}, waiting by {}", mode.how()));
        waiter.mode = mode;
        (measured[m], rtts[m]) = measure(&qp, &mr, &slots, &mut waiter, &mut conn, server, &test)?;
        n.say(measured[m].describe(mode));
    }
    compare(&mut conn, server, &test, &measured, &rtts)
}

/// Posts the receive of the message slot (wr_id 0), where the next message lands (lesson 04).
fn post_recv_slot(qp: &Qp, mr: &Mr, slots: &Slots) -> Result<()> {
    let sge = mr.sge(slots.recv())?;
    qp.post_recv(&[RecvWr {
        wr_id: 0,
        sges: &[sge],
    }])?;
    Ok(())
}

/// One measured run, waiting the way `w.mode` says: both sides start together, the client
/// pings and the server pongs `test.iters` times (sleeping `test.think_us` before each pong);
/// the wall clock is read outside, the CPU clock inside, so that the CPU interval lies within
/// the wall interval.
/// Returns what was measured and, on the client, the round trips in µs.
fn measure(
    qp: &Qp,
    mr: &Mr,
    slots: &Slots,
    w: &mut Waiter,
    conn: &mut OobConn,
    server: bool,
    test: &Test,
) -> Result<(Measured, Vec<f64>)> {
    let (iters, think) = (test.iters, Duration::from_micros(test.think_us));
    let name = w.mode.name();
    w.stats = EventStats::default();
    conn.barrier(&format!("the peer to start the {name} run"))?;
    let t0 = Instant::now();
    let u0 = usage()?;
    let rtts = if server {
        pong(qp, mr, slots, w, iters, think)?;
        Vec::new()
    } else {
        // The run's number (0 busy, 1 events) goes into every payload's pattern.
        ping(qp, mr, slots, w, iters, (w.mode == Mode::Event) as u64)?
    };
    // The last, partial batch of events.
    w.ack();
    let measured = Measured::since(t0, &u0, w.stats)?;
    conn.barrier(&format!("the peer to finish the {name} run"))?;
    Ok((measured, rtts))
}

/// The server sends its numbers; the client prints both sides together.
fn compare(
    conn: &mut OobConn,
    server: bool,
    test: &Test,
    measured: &[Measured; 2],
    rtts: &[Vec<f64>; 2],
) -> Result<()> {
    if server {
        let p = measured[0].add_to(Terms::new(), Mode::Busy);
        let p = measured[1].add_to(p, Mode::Event);
        send_params(conn, &p, "our measurements")?;
        print_table(test, measured, None, None);
    } else {
        let p = recv_params(conn, "the server's measurements")?;
        let theirs = [
            Measured::from_params(&p, Mode::Busy)?,
            Measured::from_params(&p, Mode::Event)?,
        ];
        print_table(test, measured, Some(&theirs), Some(rtts));
    }
    Ok(())
}

/// Step 4, as lesson 03 taught it: agree on the test (the server adopts the client's), swap
/// endpoints and bring the QP to RTS. Returns the out-of-band connection and the test.
fn connect(
    args: &Args,
    asked: Test,
    dev: &Device,
    qp: &Qp,
    n: &Narrator,
) -> Result<(OobConn, Test)> {
    let role = args.common.role();
    let server = role.is_server();
    let (mut conn, theirs) = meet(&args.common, &asked.offer(server, dev), n)?;
    let test = if server { adopt(args, &theirs)? } else { asked };
    // SEND/RECV only: we expose no memory and let the peer touch none.
    let (no_buf, access) = (RemoteBuf::default(), AccessFlags::EMPTY);
    let (ep, peer) = exchange_endpoints(&mut conn, &role, dev, args.common.ib_port, qp, no_buf, n)?;
    connect_qp(&args.common, dev, qp, &ep, &peer, &theirs, access)?;
    n.say(format!(
        "QP {:#x} -> peer QP {:#x}: RTS",
        qp.qpn(),
        peer.ep.qpn
    ));
    Ok((conn, test))
}

/// The server takes the client's test, but refuses if it was told something else explicitly.
fn adopt(args: &Args, theirs: &Terms) -> Result<Test> {
    let t = Test {
        size: theirs.get("size")?,
        iters: theirs.get("iters")?,
        show_race: theirs.get::<u8>("show_race")? != 0,
        think_us: theirs.get("think_us")?,
    };
    check_test(&t).context("the client's parameters")?;
    same_as_client("-s", args.size, t.size)?;
    same_as_client("-n", args.iters, t.iters)?;
    same_as_client("--think", args.think_us, t.think_us)?;
    Ok(t)
}

/// Client: `iters` round trips; returns each round trip in µs. Every pong is checked.
fn ping(
    qp: &Qp,
    mr: &Mr,
    slots: &Slots,
    w: &mut Waiter,
    iters: u32,
    run_no: u64,
) -> Result<Vec<f64>> {
    let mut rtts = Vec::with_capacity(iters as usize);
    // Completions are counted from here: round trip i is done at base + i + 1 of each kind.
    let (base_s, base_r) = (w.sends, w.recvs);
    for i in 0..iters {
        let seq = run_no * MAX_ITERS as u64 + i as u64;
        let msg = pattern(seq, slots.size);
        mr.write(slots.send().start, &msg)?;
        let (send, recv) = (mr.sge(slots.send())?, mr.sge(slots.recv())?);
        let (sends, recvs) = (base_s + i as u64 + 1, base_r + i as u64 + 1);
        let t0 = Instant::now();
        // The receive for the pong goes first: it must be there before the pong can arrive.
        qp.post_recv(&[RecvWr {
            wr_id: seq,
            sges: &[recv],
        }])?;
        qp.post_send(&[SendWr::new(seq, SendOp::Send, Payload::Sges(&[send]))])?;
        w.until(sends, recvs, &format!("the pong of round trip {i}"))
            .with_context(|| format!("{} run, round trip {i}", w.mode.name()))?;
        rtts.push(t0.elapsed().as_secs_f64() * 1e6);
        if let Some(off) = first_mismatch(&mr.to_vec(slots.recv())?, &msg) {
            bail!("round trip {i}: byte {off} of the pong differs from the ping");
        }
    }
    Ok(rtts)
}

/// Server: `iters` times, wait for a ping, re-post the receive, sleep `think` (a server busy with
/// other work: the client's wait grows, ours costs no CPU), echo the bytes back.
fn pong(
    qp: &Qp,
    mr: &Mr,
    slots: &Slots,
    w: &mut Waiter,
    iters: u32,
    think: Duration,
) -> Result<()> {
    // Absolute targets, not "one more than now": while we wait for the SEND completion of pong
    // i, the RECV of ping i+1 may already be polled (the client answers before our ack comes).
    let (base_s, base_r) = (w.sends, w.recvs);
    for i in 0..iters {
        let recvs = base_r + i as u64 + 1;
        w.until(0, recvs, &format!("the ping of round trip {i}"))
            .with_context(|| format!("{} run, round trip {i}", w.mode.name()))?;
        let ping = mr.to_vec(slots.recv())?;
        mr.write(slots.send().start, &ping)?;
        let (send, recv) = (mr.sge(slots.send())?, mr.sge(slots.recv())?);
        qp.post_recv(&[RecvWr {
            wr_id: i as u64 + 1,
            sges: &[recv],
        }])?;
        if !think.is_zero() {
            std::thread::sleep(think);
        }
        qp.post_send(&[SendWr::new(i as u64, SendOp::Send, Payload::Sges(&[send]))])?;
        w.until(
            base_s + i as u64 + 1,
            0,
            &format!("the SEND completion of pong {i}"),
        )
        .with_context(|| format!("{} run, round trip {i}", w.mode.name()))?;
    }
    Ok(())
}

/// Arms the CQ *after* a completion has already arrived, sleeps, and shows that no event came
/// although the completion sits in the CQ.
fn show_race(
    qp: &Qp,
    cq: &Cq,
    channel: &CompChannel,
    mr: &Mr,
    slots: &Slots,
    w: &mut Waiter,
    n: &Narrator,
) -> Result<()> {
    let send = mr.sge(slots.send())?;
    qp.post_send(&[SendWr::new(u64::MAX, SendOp::Send, Payload::Sges(&[send]))])?;
    n.say("ibv_post_send: one SEND; not polling, we let its completion arrive (200 ms)");
    std::thread::sleep(Duration::from_millis(200));
    cq.req_notify(false).context("ibv_req_notify_cq")?;
    n.say("ibv_req_notify_cq: armed now — after the completion arrived");
    let nap = Duration::from_secs(1);
    let t0 = Instant::now();
    if channel
        .poll_readable(nap)
        .context("poll(2) on the completion channel's fd")?
    {
        bail!(
            "race: an event came although the CQ was armed after the completion; this \
             provider reports completions that were already there"
        );
    }
    outln!(
        "race: armed after the completion arrived -> the channel's fd stayed unreadable for {} \
         ms (a sleeper would sleep until its timeout)",
        t0.elapsed().as_millis()
    );
    let before = w.sends;
    w.drain().context("ibv_poll_cq after the missed event")?;
    ensure!(
        w.sends == before + 1,
        "race: ibv_poll_cq found no SEND completion"
    );
    outln!(
        "race: yet ibv_poll_cq finds the SEND completion at once — hence: arm, then poll again \
         before sleeping"
    );
    Ok(())
}

fn print_table(
    t: &Test,
    ours: &[Measured; 2],
    theirs: Option<&[Measured; 2]>,
    rtts: Option<&[Vec<f64>; 2]>,
) {
    let modes = [Mode::Busy, Mode::Event];
    let us_per_rt = |m: &Measured| m.cpu().as_secs_f64() * 1e6 / t.iters as f64;
    if let Some(rtts) = rtts {
        outln!();
        outln!(
            "round-trip latency, {} round trips of {} bytes (client's clock)",
            t.iters,
            t.size
        );
        outln!(
            "{:<6} {:>10} {:>10} {:>10} {:>10} {:>10}",
            "mode",
            "min µs",
            "median µs",
            "mean µs",
            "p99 µs",
            "wall ms"
        );
        for (m, mode) in modes.into_iter().enumerate() {
            let s = Summary::of(&rtts[m]);
            outln!(
                "{:<6} {:>10.0} {:>10.0} {:>10.0} {:>10.0} {:>10.1}",
                mode.name(),
                s.map_or(0.0, |s| s.min),
                s.map_or(0.0, |s| s.median),
                s.map_or(0.0, |s| s.avg),
                s.map_or(0.0, |s| s.p99),
                ours[m].wall.as_secs_f64() * 1e3
            );
        }
    }
    outln!();
    let me = if theirs.is_some() { "client" } else { "server" };
    outln!(
        "CPU time during each run (CLOCK_PROCESS_CPUTIME_ID); sleeps = voluntary context switches (getrusage)"
    );
    let mut header = format!(
        "{:<6} {:>10} {:>9} {:>7} {:>10}",
        "mode",
        format!("{me} ms"),
        "CPU/wall",
        "sleeps",
        "µs/trip"
    );
    if theirs.is_some() {
        header += &format!(
            " {:>10} {:>9} {:>7} {:>10}",
            "server ms", "CPU/wall", "sleeps", "µs/trip"
        );
    }
    outln!("{header}");
    for (m, mode) in modes.into_iter().enumerate() {
        let side = |x: &Measured| {
            format!(
                " {:>10.1} {:>8.0}% {:>7} {:>10.0}",
                x.cpu().as_secs_f64() * 1e3,
                x.cpu_pct(),
                x.sleeps,
                us_per_rt(x)
            )
        };
        let mut line = format!("{:<6}{}", mode.name(), side(&ours[m]));
        if let Some(th) = theirs {
            line += &side(&th[m]);
        }
        outln!("{line}");
    }
    let ev = |who: &str, x: &Measured| {
        outln!(
            "{who} event run: {} arms (ibv_req_notify_cq), {} events (ibv_get_cq_event) acked \
             in {} ibv_ack_cq_events calls, {} completions caught by the poll right after \
             arming, {} empty wake-ups",
            x.stats.arms,
            x.stats.events,
            x.stats.ack_calls,
            x.stats.repoll_catches,
            x.stats.empty_wakeups
        )
    };
    outln!();
    ev(me, &ours[1]);
    if let Some(th) = theirs {
        ev("server", &th[1]);
    }
    if let Some(rtts) = rtts {
        if let (Some(sb), Some(se)) = (Summary::of(&rtts[0]), Summary::of(&rtts[1])) {
            outln!(
                "event vs busy: median round trip {:.0} vs {:.0} µs ({:.2}x); client CPU per round \
                 trip {:.0} vs {:.0} µs ({:.2}x)",
                se.median,
                sb.median,
                se.median / sb.median.max(1e-9),
                us_per_rt(&ours[1]),
                us_per_rt(&ours[0]),
                us_per_rt(&ours[1]) / us_per_rt(&ours[0]).max(1e-9)
            );
        }
    }
}

fn main() -> ExitCode {
    lesson_main(PROGRAM, check_flags, run)
}
