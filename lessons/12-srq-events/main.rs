//! Lesson 12 — a shared receive queue (SRQ) and the asynchronous events of a device.
//!
//! Server: `lesson12_srq_events -d rxe0`        Client: `lesson12_srq_events -d rxe1 192.168.77.1`
//!
//! Until now every QP had its own receive queue, so receive buffers grew with the number of
//! connections. An **SRQ** is one pool of receives that many QPs draw from: here `--num-qp`
//! RC QPs (16) share `-r` receives (500). The SRQ has a **limit**: when fewer receives than
//! that remain, the device raises `IBV_EVENT_SRQ_LIMIT_REACHED` — not a completion, an
//! **asynchronous event**, read from the context's event queue with `ibv_get_async_event` and
//! acknowledged with `ibv_ack_async_event`. A thread of this program reads that queue for the
//! whole run and prints every event: the SRQ limit, and a port going down and up
//! (`IBV_EVENT_PORT_ERR`, `IBV_EVENT_PORT_ACTIVE`) when `--show-port-down` keeps traffic running
//! while someone runs `ip link set veth1 down` (and `up`) in the guest.
//!
//! The ping-pong is wire-compatible with rdma-core's `ibv_srq_pingpong` (same records, same
//! handshake, same algorithm and summary lines), so either side may be that tool.

#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context as _, Result};
use clap::Parser;
use verbs_lab::cli::SizeRange;
use verbs_lab::connect::{bring_up, local_endpoint, random_psn, Endpoint};
use verbs_lab::oob::OobConn;
use verbs_lab::verbs::{
    AccessFlags, AsyncEventKind, Context, Cq, Gid, Mr, Mtu, Payload, Pd, Qp, QpCaps, QpInitAttr,
    QpType, RecvWr, SendOp, SendWr, Sge, Srq, WorkCompletion,
};
use verbs_lab_lessons::{
    connect_opts, decode_rc_pingpong, encode_rc_pingpong, first_mismatch, lesson_main, oob_connect,
    open_device, outln, pattern, print_pingpong_summary, rc_pingpong_handshake, Narrator,
    PingPongArgs, RC_PINGPONG_RECORD_LEN,
};

#[derive(Parser, Debug)]
#[command(
    about = "Lesson 12: one SRQ for many QPs, the SRQ limit and async events; wire-compatible with ibv_srq_pingpong",
    // -n and -r count differently here than in lessons 04 and 11 (`PingPongArgs`' help).
    mut_arg("iters", |a| a.help("Messages each way, over all QPs together")),
    mut_arg("rx_depth", |a| a.help("Receives the SRQ holds, at least --num-qp"))
)]
struct Args {
    #[command(flatten)]
    pp: PingPongArgs,
    /// Size of each message in bytes, 1 to 64K (suffixes K, M, G); both sides the same.
    #[arg(short = 's', long = "size", default_value_t = 4096,
          value_parser = SizeRange::new(1..=65536u32))]
    size: u32,
    /// Path MTU in bytes (256 … 4096), the same on both sides.
    #[arg(short = 'm', long = "mtu", default_value = "1024")]
    mtu: Mtu,
    /// RC QPs sharing the SRQ (ibv_srq_pingpong's -q; -q is --quiet here, as in every lesson).
    #[arg(long = "num-qp", default_value_t = 16,
          value_parser = clap::value_parser!(u32).range(1..=255))]
    num_qp: u32,
    /// SRQ limit: IBV_EVENT_SRQ_LIMIT_REACHED fires when fewer receives remain [default: rx-depth / 2]
    #[arg(long = "srq-limit")]
    srq_limit: Option<u32>,
    /// Keep one QP busy with messages until the port has gone down and come back (run
    /// `ip link set veth1 down; sleep 2; ip link set veth1 up` meanwhile). Both sides.
    #[arg(long = "show-port-down")]
    show_port_down: bool,
}

/// `ibv_srq_pingpong` always exchanges this many endpoint records, used or not.
const MAX_QP: usize = 256;
/// The record we put in the last, unused slot so that two lesson12 peers recognise each other
/// (`ibv_srq_pingpong` ignores records beyond its QPs). Its "GID" spells `lesson12 srq v1`.
const MARKER_GID: [u8; 16] = *b"lesson12 srq v1\0";
/// Receives carry their slot number as wr_id; sends this one.
const SEND_WRID: u64 = u64::MAX;

fn run(args: &Args) -> Result<()> {
    let a = &args.pp.common;
    let n = a.narrator();
    let size = args.size as usize;
    let num_qp = args.num_qp as usize;
    let depth = args.pp.rx_depth as usize;
    let limit = args.srq_limit.unwrap_or(args.pp.rx_depth / 2);

    n.step(1, "Open the device (lesson 01)");
    let dev = open_device(a, &n)?;

    // 2. One SRQ, many QPs. The QPs are created with init_attr.srq: they have no receive queue
    //    of their own, and every SEND that reaches any of them consumes the SRQ's next receive.
    n.step(2, "Create PD, MR, CQ, the SRQ and the QPs that share it");
    let pd = dev.ctx.alloc_pd().context("ibv_alloc_pd")?;
    let mr = pd
        .reg_mr((depth + 1) * size, AccessFlags::LOCAL_WRITE)
        .context("ibv_reg_mr")?;
    let cq = dev
        .ctx
        .create_cq(args.pp.rx_depth + args.num_qp, None)
        .context("ibv_create_cq")?;
    let srq = pd
        .create_srq(args.pp.rx_depth, 1)
        .context("ibv_create_srq")?;
    let granted = srq.query().context("ibv_query_srq")?;
    n.say(format!(
        "ibv_create_srq: max_wr {} (asked {}), max_sge {}, srq_limit {} (disarmed)",
        granted.max_wr, args.pp.rx_depth, granted.max_sge, granted.srq_limit
    ));
    let qps = create_srq_qps(&pd, &cq, &srq, num_qp)?;
    n.say(format!(
        "{num_qp} RC QPs ({:#x} … {:#x}) with init_attr.srq set: no receive queues of their own",
        qps[0].qpn(),
        qps[num_qp - 1].qpn()
    ));

    // 3. Fill the SRQ, one receive per slot of the MR, then arm its limit.
    n.step(
        3,
        "Post the receives to the SRQ, arm its limit (ibv_modify_srq)",
    );
    let slots: Vec<Sge> = (0..depth)
        .map(|i| mr.sge(i * size..(i + 1) * size))
        .collect::<verbs_lab::verbs::Result<_>>()?;
    let send_sge = mr.sge(depth * size..(depth + 1) * size)?;
    let recvs: Vec<RecvWr> = (0..depth)
        .map(|i| RecvWr {
            wr_id: i as u64,
            sges: std::slice::from_ref(&slots[i]),
        })
        .collect();
    srq.post_recv(&recvs).context("ibv_post_srq_recv")?;
    srq.arm_limit(limit).context("ibv_modify_srq")?;
    n.say(format!(
        "ibv_post_srq_recv: {depth} receives of {size} bytes; ibv_modify_srq(IBV_SRQ_LIMIT): \
         srq_limit {} (read back) — fewer receives left raises IBV_EVENT_SRQ_LIMIT_REACHED",
        srq.query()?.srq_limit
    ));

    // 4. The async event loop: a thread reads the device's event queue for the whole run.
    n.step(
        4,
        "Start the async event thread (poll on async_fd, ibv_get_async_event, ibv_ack_async_event)",
    );
    n.say(format!(
        "async_fd {} of {}: port, QP, CQ and SRQ events arrive here, not in a CQ",
        dev.ctx.async_fd(),
        dev.ctx.name()
    ));
    let events = Events::default();
    // The thread prints, so it runs in verbs_lab's scope: a closed stdout (`| head`) that stops
    // it ends the lesson as quietly as a line of the main thread would (at the join).
    verbs_lab::stdout::scope(|scope| {
        let watcher = scope.spawn(|| events.watch(&dev.ctx, &srq, limit));
        // Stops the thread however this closure ends (a panic too), so the scope can join it.
        let stop = StopOnDrop(&events.stop);
        let result = traffic(
            args, &dev, &qps, &cq, &srq, &mr, &slots, send_sge, &events, &n,
        );
        // Give the thread a moment to print events raised at the very end, then stop it.
        std::thread::sleep(Duration::from_millis(300));
        drop(stop);
        let watched = watcher.join().expect("the async event thread panicked");
        result.and(watched)
    })?;
    report_events(&events, limit, args.show_port_down)
}

/// Sets its flag when dropped: the async event thread's stop, raised on every way out.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// `num_qp` RC QPs created with `init_attr.srq` = `srq` (`ibv_create_qp`): no receive queue
/// of their own (`max_recv_wr` 0), every SEND that reaches any of them consumes the SRQ's next
/// receive.
fn create_srq_qps(pd: &Pd, cq: &Cq, srq: &Srq, num_qp: usize) -> Result<Vec<Qp>> {
    (0..num_qp)
        .map(|_| {
            pd.create_qp_with_srq(
                &QpInitAttr {
                    send_cq: cq,
                    recv_cq: cq,
                    qp_type: QpType::Rc,
                    caps: QpCaps {
                        max_send_wr: 1,
                        max_recv_wr: 0,
                        max_send_sge: 1,
                        max_recv_sge: 0,
                        max_inline_data: 0,
                    },
                    sq_sig_all: false,
                },
                srq,
            )
        })
        .collect::<verbs_lab::verbs::Result<Vec<Qp>>>()
        .context("ibv_create_qp with init_attr.srq")
}

/// The async events the thread saw, summed up; with `--show-port-down` there must have been a
/// PORT_ERR and, after it, a PORT_ACTIVE.
fn report_events(events: &Events, limit: u32, show_port_down: bool) -> Result<()> {
    let seen = events.seen.lock().expect("event list").clone();
    outln!(
        "async events: {} in all; IBV_EVENT_SRQ_LIMIT_REACHED {} times (limit {limit}, re-armed \
         after each refill)",
        seen.len(),
        events.srq_limit.load(Ordering::Acquire)
    );
    if show_port_down {
        let down = seen.iter().position(|k| *k == AsyncEventKind::PORT_ERR);
        let up = seen.iter().rposition(|k| *k == AsyncEventKind::PORT_ACTIVE);
        ensure!(
            matches!((down, up), (Some(d), Some(u)) if d < u),
            "--show-port-down: expected IBV_EVENT_PORT_ERR and then IBV_EVENT_PORT_ACTIVE, saw {:?}",
            seen.iter().map(|k| k.name()).collect::<Vec<_>>()
        );
    }
    Ok(())
}

/// What the async event thread saw, shared with the main thread.
#[derive(Default)]
struct Events {
    stop: AtomicBool,
    srq_limit: AtomicU32,
    /// Set once PORT_ACTIVE follows a PORT_ERR.
    port_back: AtomicBool,
    port_down: AtomicBool,
    seen: Mutex<Vec<AsyncEventKind>>,
}

impl Events {
    /// The event loop: wait (bounded) for the next event, print it, react; until told to stop.
    fn watch(&self, ctx: &Context, srq: &Srq, limit: u32) -> Result<()> {
        let start = Instant::now();
        while !self.stop.load(Ordering::Acquire) {
            // Bounded: the thread looks at `stop` at least every 100 ms.
            let Some(ev) = ctx
                .get_async_event(Duration::from_millis(100))
                .context("ibv_get_async_event")?
            else {
                continue;
            };
            let at = start.elapsed().as_millis();
            self.seen.lock().expect("event list").push(ev.kind);
            match ev.kind {
                AsyncEventKind::SRQ_LIMIT_REACHED if ev.srq == Some(srq.id()) => {
                    self.srq_limit.fetch_add(1, Ordering::AcqRel);
                    // The limit disarmed itself when it fired (ibv_query_srq reads 0 until it is
                    // armed again). Arming it while fewer receives are posted would fire it at
                    // once, so the main thread re-arms after its next refill.
                    outln!(
                        "async event +{at} ms: {ev} — fewer than {limit} receives left; the \
                         device disarmed the limit"
                    );
                }
                AsyncEventKind::PORT_ERR => {
                    self.port_down.store(true, Ordering::Release);
                    outln!("async event +{at} ms: {ev} — the link is down");
                }
                AsyncEventKind::PORT_ACTIVE => {
                    if self.port_down.load(Ordering::Acquire) {
                        self.port_back.store(true, Ordering::Release);
                    }
                    outln!("async event +{at} ms: {ev} — the link is up again");
                }
                _ => outln!("async event +{at} ms: {ev}"),
            }
        }
        Ok(())
    }
}

/// Exchanges the endpoint records, connects every QP, and runs the ping-pong (or the port-down
/// demonstration).
#[allow(clippy::too_many_arguments)]
fn traffic(
    args: &Args,
    dev: &verbs_lab_lessons::Device,
    qps: &[Qp],
    cq: &Cq,
    srq: &Srq,
    mr: &Mr,
    slots: &[Sge],
    send_sge: Sge,
    events: &Events,
    n: &Narrator,
) -> Result<()> {
    let a = &args.pp.common;
    let server = a.role().is_server();
    let num_qp = qps.len();

    // 5. ibv_srq_pingpong's handshake: 256 records each way (unused ones zero), then "done".
    n.step(
        5,
        "Exchange 256 endpoint records (ibv_srq_pingpong's handshake), connect every QP",
    );
    let mut locals = Vec::with_capacity(num_qp);
    for qp in qps {
        locals.push(local_endpoint(
            &dev.ctx,
            a.ib_port,
            qp,
            &dev.gid,
            random_psn(),
        )?);
    }
    let mut mine = Vec::with_capacity(MAX_QP * RC_PINGPONG_RECORD_LEN);
    for i in 0..MAX_QP {
        let ep = match i {
            i if i < num_qp => locals[i],
            i if i == MAX_QP - 1 => Endpoint {
                lid: 0,
                qpn: 0,
                psn: 0,
                gid: Gid(MARKER_GID),
            },
            _ => Endpoint {
                lid: 0,
                qpn: 0,
                psn: 0,
                gid: Gid([0; 16]),
            },
        };
        mine.extend_from_slice(&encode_rc_pingpong(&ep));
    }
    let mut opts = connect_opts(a, dev, None)?;
    opts.path_mtu = dev.checked_path_mtu(args.mtu)?;
    opts.access = AccessFlags::EMPTY;
    opts.max_rd_atomic = 1;
    let mut conn = oob_connect(a, n)?;
    // The server connects its QPs before it replies; the client after the exchange.
    let remotes = rc_pingpong_handshake(&mut conn, server, &mine, |theirs| {
        let remotes = parse_records(theirs, num_qp, n)?;
        connect_all(qps, &locals, &remotes.0, &opts)?;
        Ok(remotes)
    })?;
    let (remotes, lesson12_peer) = remotes;
    for (l, r) in locals.iter().zip(&remotes).take(2) {
        n.say(format!("QP {:#x} -> peer QP {:#x}: RTS", l.qpn, r.qpn));
    }
    n.say(format!(
        "… {num_qp} QPs connected; the peer is {}",
        if lesson12_peer {
            "lesson12 (its marker record is there): every message is checked against its pattern"
        } else {
            "not lesson12 (no marker record), e.g. ibv_srq_pingpong: it sends its one buffer, \
             which only ever holds zeros if we send zeros — so we do, and check for them"
        }
    ));
    let pp = PingPong {
        qps,
        cq,
        srq,
        slots,
        send_sge,
        size: args.size as usize,
        wait: a.wait(),
        check_pattern: lesson12_peer,
        server,
        limit: args.srq_limit.unwrap_or(args.pp.rx_depth / 2),
    };
    if args.show_port_down {
        return pp.port_down(mr, conn, events, n);
    }
    drop(conn);
    pp.run(mr, u64::from(args.pp.iters), n)
}

/// Parses the peer's records: the first `num_qp` must be QPs, and the marker says lesson12.
fn parse_records(all: &[u8], num_qp: usize, n: &Narrator) -> Result<(Vec<Endpoint>, bool)> {
    let mut eps = Vec::with_capacity(num_qp);
    for (i, rec) in all.chunks(RC_PINGPONG_RECORD_LEN).enumerate().take(num_qp) {
        let ep = decode_rc_pingpong(rec)
            .map_err(anyhow::Error::msg)
            .with_context(|| format!("the peer's endpoint record {i}"))?;
        ensure!(
            ep.qpn != 0,
            "the peer's record {i} names no QP: it has fewer QPs than our --num-qp {num_qp} \
             (give both sides the same --num-qp / -q)"
        );
        ensure!(
            !ep.gid.is_zero(),
            "the peer sent GID zero, but RoCE needs one (ibv_srq_pingpong: give it -g 1)"
        );
        eps.push(ep);
    }
    n.say(format!("remote address: {} (record 0 of {num_qp})", eps[0]));
    let last = decode_rc_pingpong(&all[(MAX_QP - 1) * RC_PINGPONG_RECORD_LEN..])
        .map_err(anyhow::Error::msg)
        .context("the peer's last endpoint record")?;
    Ok((eps, last.gid == Gid(MARKER_GID)))
}

/// INIT → RTR → RTS for each QP with its peer (lesson 03's attributes, `bring_up`).
fn connect_all(
    qps: &[Qp],
    locals: &[Endpoint],
    remotes: &[Endpoint],
    opts: &verbs_lab::connect::ConnectOpts,
) -> Result<()> {
    for (i, qp) in qps.iter().enumerate() {
        bring_up(qp, &locals[i], &remotes[i], opts)
            .with_context(|| format!("connecting QP {i} ({:#x})", qp.qpn()))?;
    }
    Ok(())
}

/// The ping-pong over all QPs, as `ibv_srq_pingpong` runs it.
struct PingPong<'a> {
    qps: &'a [Qp],
    cq: &'a Cq,
    srq: &'a Srq,
    slots: &'a [Sge<'a>],
    send_sge: Sge<'a>,
    size: usize,
    wait: Duration,
    /// true: the peer is lesson12 and message k of QP i is pattern(i, k); false: all zeros.
    check_pattern: bool,
    server: bool,
    /// The SRQ limit, re-armed after every refill.
    limit: u32,
}

impl PingPong<'_> {
    /// The message QP `qp` sends as its `k`-th, or expects as the peer's `k`-th.
    fn message(&self, qp: usize, k: u64, from_server: bool) -> Vec<u8> {
        if self.check_pattern {
            pattern(
                ((qp as u64) << 40) | (2 * k + from_server as u64),
                self.size,
            )
        } else {
            vec![0; self.size]
        }
    }

    fn send(&self, mr: &Mr, qp: usize, k: u64, imm: Option<u32>) -> Result<()> {
        let msg = self.message(qp, k, self.server);
        let at = self.send_sge.addr() - mr.addr();
        mr.write(at as usize, &msg)?;
        let op = imm.map_or(SendOp::Send, SendOp::SendWithImm);
        self.qps[qp]
            .post_send(&[SendWr::new(
                SEND_WRID,
                op,
                Payload::Sges(std::slice::from_ref(&self.send_sge)),
            )])
            .with_context(|| format!("ibv_post_send on QP {qp}"))
    }

    /// Checks the message that completed into `slot` against message `k` of QP `qp`.
    fn check(&self, mr: &Mr, slot: usize, qp: usize, k: u64, len: u32) -> Result<()> {
        ensure!(
            len as usize == self.size,
            "QP {qp}: a message of {len} bytes arrived, we expect {} (same -s on both sides?)",
            self.size
        );
        let got = mr.to_vec(slot * self.size..(slot + 1) * self.size)?;
        let want = self.message(qp, k, !self.server);
        if let Some(at) = first_mismatch(&got, &want) {
            bail!(
                "QP {qp}, message {k}: byte {at} is {:#04x}, expected {:#04x}",
                got[at],
                want[at]
            );
        }
        Ok(())
    }

    /// Posts the receive of `slot` to the SRQ again (`ibv_post_srq_recv`).
    fn repost(&self, slot: usize) -> Result<()> {
        self.srq
            .post_recv(&[RecvWr {
                wr_id: slot as u64,
                sges: std::slice::from_ref(&self.slots[slot]),
            }])
            .context("ibv_post_srq_recv")
    }

    fn qp_index(&self, qpn: u32) -> Result<usize> {
        self.qps
            .iter()
            .position(|q| q.qpn() == qpn)
            .with_context(|| format!("a completion for QP {qpn:#x}, which is not ours"))
    }

    fn run(&self, mr: &Mr, iters: u64, n: &Narrator) -> Result<()> {
        n.step(
            6,
            "Ping-pong on every QP; receives come from the SRQ and are refilled in batches",
        );
        let num_qp = self.qps.len();
        let depth = self.slots.len();
        const RECV: u8 = 1;
        const SEND: u8 = 2;
        let mut pending = vec![RECV; num_qp];
        let mut sent = vec![0u64; num_qp];
        let mut recvd = vec![0u64; num_qp];
        let (mut scnt, mut rcnt) = (0u64, 0u64);
        // Free slots: receives consumed and not yet re-posted. Refilled, as ibv_srq_pingpong
        // does, once at most num_qp receives are left.
        let mut free: Vec<usize> = Vec::new();
        let mut posted = depth;
        let mut refills = 0u32;
        let start = Instant::now();
        if !self.server {
            for (i, p) in pending.iter_mut().enumerate() {
                self.send(mr, i, 0, None)?;
                sent[i] = 1;
                *p = SEND | RECV;
            }
        }
        let mut wcs: [WorkCompletion; 32] = WorkCompletion::array();
        while rcnt < iters || scnt < iters {
            let ne = self
                .cq
                .poll_timeout(
                    &mut wcs,
                    self.wait,
                    "a completion; check that the peer still runs, with the same -n",
                )
                .with_context(|| format!("after {scnt} sends and {rcnt} receives"))?;
            for wc in &wcs[..ne] {
                wc.ok()
                    .with_context(|| format!("after {scnt} sends and {rcnt} receives"))?;
                let qp = self.qp_index(wc.qp_num())?;
                if wc.wr_id() == SEND_WRID {
                    scnt += 1;
                    pending[qp] &= !SEND;
                } else {
                    let slot = wc.wr_id() as usize;
                    self.check(mr, slot, qp, recvd[qp], wc.byte_len())?;
                    if rcnt == 0 {
                        n.say(format!(
                            "first RECV: QP {qp} ({:#x}) consumed SRQ slot {slot} (wr_id {slot}); \
                             any QP may consume any slot",
                            wc.qp_num()
                        ));
                    }
                    recvd[qp] += 1;
                    rcnt += 1;
                    pending[qp] &= !RECV;
                    free.push(slot);
                    posted -= 1;
                    if posted <= num_qp {
                        if refills == 0 {
                            outln!(
                                "first refill, {posted} receives left: ibv_query_srq reads \
                                 srq_limit {} (0: the limit event disarmed it); re-armed at {} \
                                 after posting {} receives",
                                self.srq.query().context("ibv_query_srq")?.srq_limit,
                                self.limit,
                                free.len()
                            );
                        }
                        let wrs: Vec<RecvWr> = free
                            .iter()
                            .map(|&s| RecvWr {
                                wr_id: s as u64,
                                sges: std::slice::from_ref(&self.slots[s]),
                            })
                            .collect();
                        self.srq.post_recv(&wrs).context("refilling the SRQ")?;
                        posted += free.len();
                        free.clear();
                        refills += 1;
                        // Full again: arm the limit for the next time the pool runs low.
                        self.srq.arm_limit(self.limit).context("ibv_modify_srq")?;
                    }
                }
                if scnt < iters && pending[qp] == 0 {
                    self.send(mr, qp, sent[qp], None)?;
                    sent[qp] += 1;
                    pending[qp] = SEND | RECV;
                }
            }
        }
        let elapsed = start.elapsed();
        let end_limit = self.srq.query().context("ibv_query_srq")?.srq_limit;
        outln!(
            "at the end, ibv_query_srq: srq_limit {end_limit} ({})",
            if end_limit == 0 {
                "disarmed: its event fired and no refill re-armed it"
            } else {
                "armed: it has not fired since it was last armed"
            }
        );
        n.say(format!(
            "{scnt} SENDs and {rcnt} RECVs over {num_qp} QPs; the SRQ was refilled {refills} times \
             (each time {num_qp} or fewer receives were left) and its limit re-armed after each"
        ));
        print_pingpong_summary(self.size as u64, iters, elapsed);
        outln!(
            "payload check: {rcnt} messages of {} bytes verified ({}), all intact",
            self.size,
            if self.check_pattern {
                "each QP's own pattern"
            } else {
                "all zeros, as a zero-sending ibv_srq_pingpong peer returns them"
            }
        );
        Ok(())
    }

    /// `--show-port-down`: the client keeps one message at a time in flight on QP 0 until the
    /// async event thread has seen the port go down and come back, then a few more. What
    /// happens to the traffic meanwhile is the provider's: every message is checked, and a
    /// failed one is reported with its status. The client tells the server over TCP how it
    /// ended; the server echoes until then.
    fn port_down(&self, mr: &Mr, mut conn: OobConn, events: &Events, n: &Narrator) -> Result<()> {
        n.step(
            6,
            "--show-port-down: messages on QP 0 while the link goes down and up",
        );
        conn.barrier("the peer to start")?;
        let mut wcs: [WorkCompletion; 1] = WorkCompletion::array();
        let t0 = Instant::now();
        if self.server {
            let mut k = 0u64;
            let mut failed = None;
            loop {
                // Echo whatever arrives; between polls, look for the client's verdict.
                if conn.poll_readable(Duration::ZERO)? {
                    break;
                }
                if self.cq.poll(&mut wcs).context("ibv_poll_cq")? == 0 {
                    ensure!(
                        t0.elapsed() < 2 * self.wait + Duration::from_secs(30),
                        "--show-port-down: the client never reported how its traffic ended"
                    );
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                }
                let wc = &wcs[0];
                if !wc.is_success() {
                    failed.get_or_insert(wc.status().name());
                    continue;
                }
                if wc.wr_id() == SEND_WRID {
                    continue;
                }
                let slot = wc.wr_id() as usize;
                self.check(mr, slot, 0, k, wc.byte_len())?;
                self.repost(slot)?;
                self.send(mr, 0, k, None)?;
                k += 1;
            }
            let verdict = conn.recv_msg(4096, "the client's verdict")?;
            outln!(
                "server: echoed {k} messages on QP 0, every one verified{}; the client reports: {}",
                failed.map_or(String::new(), |f| format!(
                    " (then a completion failed: {f})"
                )),
                String::from_utf8_lossy(&verdict)
            );
        } else {
            outln!(
                "traffic running on QP 0: now run `ip link set veth1 down; sleep 2; ip link set \
                 veth1 up` in the guest (waiting up to {} s)",
                self.wait.as_secs()
            );
            let (mut k, mut during, mut after) = (0u64, 0u64, 0u64);
            let mut failure: Option<String> = None;
            // Until the port is back and five more messages went through — or, if the traffic
            // failed meanwhile, until the port is back.
            while !(events.port_back.load(Ordering::Acquire) && (after >= 5 || failure.is_some())) {
                ensure!(
                    t0.elapsed() < self.wait,
                    "--show-port-down: no IBV_EVENT_PORT_ERR and PORT_ACTIVE within {} s: bring \
                     the link down and up (`ip link set veth1 down; sleep 2; ip link set veth1 up`)",
                    self.wait.as_secs()
                );
                if failure.is_some() {
                    // The QP is in ERR: no more traffic, only wait for the port to come back.
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                }
                let down = events.port_down.load(Ordering::Acquire);
                let back = events.port_back.load(Ordering::Acquire);
                self.send(mr, 0, k, None)?;
                let (mut s, mut r) = (false, false);
                while !(s && r) {
                    self.cq
                        .poll_timeout(&mut wcs, self.wait, "a completion")
                        .with_context(|| format!("message {k} on QP 0"))?;
                    let wc = &wcs[0];
                    if !wc.is_success() {
                        failure = Some(format!(
                            "message {k} failed with {} {}",
                            wc.status().name(),
                            if down && !back {
                                "(posted after IBV_EVENT_PORT_ERR)"
                            } else {
                                "(posted before the port event was read)"
                            }
                        ));
                        break;
                    }
                    if wc.wr_id() == SEND_WRID {
                        s = true;
                    } else {
                        let slot = wc.wr_id() as usize;
                        self.check(mr, slot, 0, k, wc.byte_len())?;
                        self.repost(slot)?;
                        r = true;
                    }
                }
                if failure.is_none() {
                    k += 1;
                    if back {
                        after += 1;
                    } else if down {
                        during += 1;
                    }
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let verdict = match &failure {
                None => format!(
                    "{k} messages verified, {during} of them sent while the port was down and \
                     delivered once it was up (RC retransmitted them), {after} after"
                ),
                Some(f) => format!(
                    "{k} messages verified, then {f}: the QP is in the error state, and traffic \
                     resumes only on a new connection, once IBV_EVENT_PORT_ACTIVE has arrived"
                ),
            };
            outln!("client: {verdict}");
            conn.send_msg(verdict.as_bytes(), "our verdict")?;
        }
        outln!(
            "{}: --show-port-down done in {} ms",
            if self.server { "server" } else { "client" },
            t0.elapsed().as_millis()
        );
        Ok(())
    }
}

/// Refuses flags that cannot work, before any verbs call (a usage error, exit 2).
fn check_flags(args: &Args) -> Result<()> {
    args.pp.check(2..=16384)?;
    if args.num_qp > args.pp.rx_depth {
        bail!(
            "--num-qp {} with -r {}: the SRQ needs at least one receive per QP",
            args.num_qp,
            args.pp.rx_depth
        );
    }
    if let Some(l) = args.srq_limit.filter(|&l| l >= args.pp.rx_depth) {
        bail!(
            "--srq-limit {l}: must be below -r {} (the SRQ never holds more receives)",
            args.pp.rx_depth
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    lesson_main("lesson12_srq_events", check_flags, |a: &Args, ()| run(a))
}
