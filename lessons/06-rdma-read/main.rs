//! # Lesson 06 — RDMA Read: fetching bytes from the peer's memory
//!
//! An RDMA READ is the mirror of lesson 05's write: the reader names the peer's address and
//! rkey, and the peer's NIC sends the bytes back without its CPU taking part. Unlike a write, a
//! read needs an answer, and the answering NIC must keep per-read state until it has sent it.
//! That state is a limited resource, so a connection agrees on two numbers:
//!
//! - `max_rd_atomic` (set at RTS on the reader): how many reads/atomics *we* may have in flight
//!   towards the peer — the "initiator depth"; at most the device's `max_qp_init_rd_atom`.
//! - `max_dest_rd_atomic` (set at RTR on the target): how many the target accepts in flight
//!   from us — its "responder resources"; at most its device's `max_qp_rd_atom`.
//!
//! The reader's depth must not exceed the target's resources. This lesson asks for `-o N`,
//! negotiates `min(N, reader's max_qp_init_rd_atom, target's max_qp_rd_atom)` over the TCP
//! channel, sets it on both QPs, reads back what the device holds, and then posts N reads at
//! once — and, for comparison, the same N one after another. Every byte is checked.
//!
//! ```text
//! server:  lesson06_rdma_read -d rxe0
//! client:  lesson06_rdma_read -d rxe1 -s 4096 -o 4 -n 3 192.168.77.1
//! ```

#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context as _, Result};
use clap::Parser;
use verbs_lab::cli::SizeRange;
use verbs_lab::connect::{init_attr, rtr_attr, rts_attr, Endpoint};
use verbs_lab::oob::OobConn;
use verbs_lab::verbs::{
    AccessFlags, Cq, DeviceAttr, Mr, Payload, Qp, RemoteBuf, SendOp, SendWr, Sge, WcOpcode,
    WorkCompletion,
};
use verbs_lab_lessons::{
    check_range, connect_opts, create_rc_qp, exchange_endpoints, first_mismatch, lesson_main, meet,
    open_device, outln, pattern, peer_rts_barrier, recv_params, same_as_client, say_mr,
    send_params, CommonArgs, Device, Narrator, PeerInfo, Side, Summary, Terms,
};

const PROGRAM: &str = "lesson06_rdma_read";
/// What each side registers: all N reads of a round must fit in it side by side.
const BUF_LEN: usize = 1 << 20;
/// The sizes of one read (`-s`, and the client's when the server adopts it): up to the buffer.
const SIZES: SizeRange<usize> = SizeRange::new(1..=BUF_LEN);
const MAX_ROUNDS: u32 = 10_000;

#[derive(Parser, Debug)]
#[command(
    about = "Lesson 06: one-sided RDMA Read of the peer's buffer, several reads outstanding at \
             once, every byte checked",
    after_help = "Server (the target):  lesson06_rdma_read -d rxe0\n\
                  Client (the reader):  lesson06_rdma_read -d rxe1 -s 4096 -o 4 -n 3 192.168.77.1\n\
                  The client's -s/-o/-n are used by both sides; a server given different ones refuses."
)]
struct Args {
    #[command(flatten)]
    common: CommonArgs,
    /// Bytes per read, 1 to 1M (suffixes K, M, G) [default: 4096]
    #[arg(short = 's', long = "size", value_parser = SIZES)]
    size: Option<usize>,
    /// Reads to have outstanding at once, 1 to 255 (negotiated down to what both devices allow) [default: 4]
    #[arg(short = 'o', long = "outstanding")]
    outstanding: Option<u32>,
    /// Rounds; each refills the server's buffer with a new pattern and reads it back [default: 3]
    #[arg(short = 'n', long = "iters")]
    iters: Option<u32>,
    /// Client: put a wrong rkey in the reads, to watch the target's NIC refuse them
    #[arg(long = "bad-rkey")]
    bad_rkey: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Test {
    size: usize,
    outstanding: u32,
    rounds: u32,
}

impl Test {
    /// The bytes one round reads: N chunks of `size`, side by side.
    fn span(&self) -> usize {
        self.size * self.outstanding as usize
    }

    /// What this side tells the peer: its active MTU; the target how many reads it answers at
    /// once, the reader its test and how many reads it may issue at once.
    fn offer(&self, server: bool, dev: &Device, attr: &DeviceAttr) -> Terms {
        let mine = Terms::new().with("mtu", dev.active_mtu());
        if server {
            return mine.with("max_qp_rd_atom", attr.max_qp_rd_atom);
        }
        mine.with("size", self.size)
            .with("outstanding", self.outstanding)
            .with("rounds", self.rounds)
            .with("max_qp_init_rd_atom", attr.max_qp_init_rd_atom)
    }
}

/// `R rounds of N reads x S bytes`, as step 6's heading says it.
impl std::fmt::Display for Test {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (r, o, s) = (self.rounds, self.outstanding, self.size);
        write!(f, "{r} rounds of {o} reads x {s} bytes")
    }
}

/// Refuses nonsense before any verbs call: this needs no device.
fn check_flags(args: &Args) -> Result<Test> {
    args.common.check()?;
    let t = Test {
        size: args.size.unwrap_or(4096),
        outstanding: args.outstanding.unwrap_or(4),
        rounds: args.iters.unwrap_or(3),
    };
    check_test(&t)?;
    if args.bad_rkey && args.common.role().is_server() {
        bail!("--bad-rkey is a client flag: the reader is the one that names the rkey");
    }
    Ok(t)
}

fn check_test(t: &Test) -> Result<()> {
    SIZES
        .check_value("-s", t.size)
        .map_err(anyhow::Error::msg)?;
    if t.outstanding == 0 || t.outstanding > 255 {
        bail!(
            "-o {}: between 1 and 255 reads can be outstanding (max_rd_atomic is 8 bits)",
            t.outstanding
        );
    }
    if t.span() > BUF_LEN {
        bail!(
            "-s {} x -o {} = {} bytes: larger than the {BUF_LEN}-byte buffer this lesson \
             registers, where the {} reads of a round sit side by side; lower -s or -o",
            t.size,
            t.outstanding,
            t.span(),
            t.outstanding
        );
    }
    check_range("-n", t.rounds, 1..=MAX_ROUNDS, "rounds")
}

fn run(args: &Args, asked: Test) -> Result<()> {
    let role = args.common.role();
    let n = args.common.narrator();
    let server = role.is_server();

    n.step(
        1,
        "Open the device (lesson 01) and read its read/atomic limits",
    );
    let dev = open_device(&args.common, &n)?;
    let attr = dev.ctx.query_device().context("ibv_query_device")?;
    n.say(format!(
        "ibv_query_device: max_qp_rd_atom {} (reads a QP answers at once), \
         max_qp_init_rd_atom {} (reads a QP may issue at once)",
        attr.max_qp_rd_atom, attr.max_qp_init_rd_atom
    ));

    n.step(2, "Register the buffer (ibv_reg_mr)");
    let pd = dev.ctx.alloc_pd().context("ibv_alloc_pd")?;
    // The target's NIC only reads its memory for the peer: REMOTE_READ is all it needs. The
    // reader's NIC *writes* the answers into its own buffer: LOCAL_WRITE, or every read
    // completes with a local protection error.
    let mr_access = if server {
        AccessFlags::REMOTE_READ
    } else {
        AccessFlags::LOCAL_WRITE
    };
    let mr = pd
        .reg_mr(BUF_LEN, mr_access)
        .context("ibv_reg_mr (the read buffer)")?;
    say_mr(&n, &mr, mr_access);

    n.step(
        3,
        "Create the CQ and the RC QP (lesson 02), deep enough for N reads",
    );
    let queue_depth = asked.outstanding.max(16);
    let cq = dev
        .ctx
        .create_cq(queue_depth, None)
        .context("ibv_create_cq")?;
    let qp = create_rc_qp(&pd, &cq, queue_depth, 1)?;
    n.say(format!(
        "CQ of {} entries; RC QP {:#x} with {} send-queue slots",
        cq.capacity(),
        qp.qpn(),
        qp.caps().max_send_wr
    ));

    n.step(
        4,
        "Agree on the test and negotiate the read depth; exchange endpoints (lesson 03)",
    );
    let (mut conn, theirs) = meet(&args.common, &asked.offer(server, &dev, &attr), &n)?;
    let test = if server { adopt(args, &theirs)? } else { asked };
    let depth = read_depth(&test, server, &attr, &theirs, &n)?;
    let buf = if server {
        mr.remote(0..BUF_LEN)?
    } else {
        RemoteBuf::default()
    };
    let (ep, peer) = exchange_endpoints(&mut conn, &role, &dev, args.common.ib_port, &qp, buf, &n)?;

    n.step(
        5,
        "Connect the QP, setting the read depths at RTR and RTS (ibv_modify_qp)",
    );
    connect_with_depths(args, &dev, &qp, &ep, &peer, &theirs, depth)?;
    peer_rts_barrier(&mut conn)?;

    if server {
        n.step(6, &format!("Be the target of {test}"));
        target(&mr, &mut conn, &test, &n)
    } else {
        n.step(6, &format!("Read: {test}"));
        let side = Side::new(&mr, &qp, &cq, &mut conn, args.common.wait(), &n);
        reader(side, &test, &peer, args.bad_rkey)
    }
}

/// Lesson 03's INIT -> RTR -> RTS, written out because this lesson adds to it: the target's QP
/// lets the peer read (`qp_access_flags`) and answers `depth` reads at once (RTR's
/// `max_dest_rd_atomic`); the reader issues `depth` at once (RTS's `max_rd_atomic`). Each
/// direction is set only where it applies, then read back with `ibv_query_qp`.
fn connect_with_depths(
    args: &Args,
    dev: &Device,
    qp: &Qp,
    ep: &Endpoint,
    peer: &PeerInfo,
    theirs: &Terms,
    depth: u8,
) -> Result<()> {
    let (n, server) = (args.common.narrator(), args.common.role().is_server());
    let mut opts = connect_opts(&args.common, dev, Some(theirs.get("mtu")?))?;
    opts.access = if server {
        AccessFlags::REMOTE_READ
    } else {
        AccessFlags::EMPTY
    };
    qp.modify_to_init(&init_attr(&opts))
        .context("ibv_modify_qp RESET->INIT")?;
    n.say(format!(
        "INIT: qp_access_flags {} (the QP, too, must allow remote reads)",
        opts.access
    ));
    // RTR carries what we *answer*: only the target answers reads.
    let mut rtr = rtr_attr(&opts, &peer.ep);
    rtr.max_dest_rd_atomic = if server { depth } else { 0 };
    qp.modify_to_rtr(Some(&rtr))
        .context("ibv_modify_qp INIT->RTR")?;
    n.say(format!(
        "RTR: dest_qp_num {:#x}, max_dest_rd_atomic {}",
        rtr.dest_qpn, rtr.max_dest_rd_atomic
    ));
    // RTS carries what we *issue*: only the reader issues reads.
    let mut rts = rts_attr(&opts, ep);
    rts.max_rd_atomic = if server { 0 } else { depth };
    qp.modify_to_rts(&rts).context("ibv_modify_qp RTR->RTS")?;
    n.say(format!(
        "RTS: sq_psn {:#08x}, timeout {}, max_rd_atomic {}",
        rts.sq_psn, rts.timeout, rts.max_rd_atomic
    ));
    let (held_rd, held_dest) = qp.rd_atomic().context("ibv_query_qp")?;
    outln!(
        "QP {:#x}: set max_rd_atomic {} / max_dest_rd_atomic {}; ibv_query_qp reads back \
         max_rd_atomic {held_rd} / max_dest_rd_atomic {held_dest}",
        qp.qpn(),
        rts.max_rd_atomic,
        rtr.max_dest_rd_atomic
    );
    Ok(())
}

/// The read depth both sides set: `min(-o, reader's max_qp_init_rd_atom, target's
/// max_qp_rd_atom)` — the same formula on both sides, from the same three numbers, gives the
/// same answer. Narrated, with a note when the devices allow fewer than `-o`.
fn read_depth(
    test: &Test,
    server: bool,
    attr: &DeviceAttr,
    theirs: &Terms,
    n: &Narrator,
) -> Result<u8> {
    let (init_rd_atom, rd_atom): (i32, i32) = if server {
        (theirs.get("max_qp_init_rd_atom")?, attr.max_qp_rd_atom)
    } else {
        (attr.max_qp_init_rd_atom, theirs.get("max_qp_rd_atom")?)
    };
    let depth = (test.outstanding as i32)
        .min(init_rd_atom)
        .min(rd_atom)
        .clamp(1, 255) as u8;
    n.say(format!(
        "negotiated read depth {depth} = min(-o {}, reader's max_qp_init_rd_atom {init_rd_atom}, \
         target's max_qp_rd_atom {rd_atom})",
        test.outstanding
    ));
    if (depth as u32) < test.outstanding {
        outln!(
            "note: -o {} is more than the devices allow at once; {depth} reads will be in \
             flight, the rest wait in the send queue",
            test.outstanding
        );
    }
    Ok(depth)
}

/// The server takes the client's test, but refuses if it was told something else explicitly.
fn adopt(args: &Args, theirs: &Terms) -> Result<Test> {
    let t = Test {
        size: theirs.get("size")?,
        outstanding: theirs.get("outstanding")?,
        rounds: theirs.get("rounds")?,
    };
    check_test(&t).context("the client's parameters")?;
    same_as_client("-s", args.size, t.size)?;
    same_as_client("-o", args.outstanding, t.outstanding)?;
    same_as_client("-n", args.iters, t.rounds)?;
    Ok(t)
}

/// The server: each round, fill the buffer with a new pattern and let the client read it.
/// Our CPU takes no part in the reads themselves — it only waits for the client's report.
fn target(mr: &Mr, conn: &mut OobConn, t: &Test, n: &Narrator) -> Result<()> {
    for r in 0..t.rounds {
        mr.write(0, &pattern(r as u64, t.span()))?;
        n.say(format!(
            "round {r}: filled bytes 0..{} with pattern({r}); the client may read",
            t.span()
        ));
        conn.barrier(&format!("the client to start round {r}"))?;
        let report = recv_params(conn, &format!("the client's report on round {r}"))
            .with_context(|| format!("round {r}: waiting while the client reads"))?;
        ensure!(
            report.raw("verified") == Some("yes"),
            "round {r}: the client reports {report}"
        );
        outln!(
            "round {r}: the client read and verified {} x {} bytes of pattern({r}) ({report})",
            t.outstanding,
            t.size
        );
    }
    outln!(
        "all {} rounds served; our CPU did not touch a single read",
        t.rounds
    );
    Ok(())
}

/// The client: per round, read the N chunks one at a time, then all N at once; check each.
fn reader(s: Side, t: &Test, peer: &PeerInfo, bad_rkey: bool) -> Result<()> {
    let mut from = peer.buf;
    ensure!(
        from.len as usize >= t.span(),
        "the server advertised {} bytes: too small for {} reads of {} bytes",
        from.len,
        t.outstanding,
        t.size
    );
    if bad_rkey {
        from.rkey ^= 0x5a5a_0000;
        s.n.say(format!(
            "--bad-rkey: using rkey {:#x} instead of the advertised {:#x}",
            from.rkey, peer.buf.rkey
        ));
    }
    let reads = Reads::new(s.mr, t, from)?;
    let chunks = reads.sges.len();
    let (mut serial_us, mut parallel_us) = (Vec::new(), Vec::new());
    for r in 0..t.rounds {
        s.conn
            .barrier(&format!("the server to fill its buffer for round {r}"))?;
        if r == 0 {
            // The first operation on a new connection costs far more than the next ones (first
            // packets, first touch of the MRs): one untimed read, so no pass pays for it.
            s.qp.post_send(&[reads.wr(0)])
                .context("posting the warm-up read")?;
            collect(s.cq, 1, s.wait, "the warm-up read", from.rkey)?;
        }
        let (serial, parallel) = read_round(&s, &reads, r)?;
        serial_us.push(serial.as_secs_f64() * 1e6);
        parallel_us.push(parallel.as_secs_f64() * 1e6);
        outln!(
            "round {r}: verified {chunks} reads x {} bytes == pattern({r}); one at a time {} µs, \
             {chunks} outstanding {} µs",
            t.size,
            serial.as_micros(),
            parallel.as_micros()
        );
        send_params(
            s.conn,
            &Terms::new()
                .with("round", r)
                .with("verified", "yes")
                .with("serial_us", serial.as_micros())
                .with("outstanding_us", parallel.as_micros()),
            "our report",
        )?;
    }
    let (ms, mp) = (median(&serial_us), median(&parallel_us));
    outln!(
        "all {} rounds verified: {chunks} reads of {} bytes each; median round: one at a time \
         {ms:.0} µs, {chunks} outstanding {mp:.0} µs ({:.2}x)",
        t.rounds,
        t.size,
        ms / mp.max(1e-9)
    );
    Ok(())
}

/// The N reads of a round: chunk k of the server's buffer (`from`) lands in chunk k of ours.
struct Reads<'a> {
    sges: Vec<Sge<'a>>,
    from: RemoteBuf,
    size: usize,
}

impl<'a> Reads<'a> {
    fn new(mr: &'a Mr, t: &Test, from: RemoteBuf) -> Result<Reads<'a>> {
        let sges = (0..t.outstanding as usize)
            .map(|k| mr.sge(k * t.size..(k + 1) * t.size))
            .collect::<verbs_lab::verbs::Result<Vec<_>>>()?;
        Ok(Reads {
            sges,
            from,
            size: t.size,
        })
    }

    /// Read k: an RDMA READ of the server's chunk k into our chunk k, wr_id k.
    fn wr(&self, k: usize) -> SendWr<'_> {
        let remote = self
            .from
            .slice((k * self.size) as u32, self.size as u32)
            .expect("checked against the advertised length");
        SendWr::new(
            k as u64,
            SendOp::Read(remote),
            Payload::Sges(std::slice::from_ref(&self.sges[k])),
        )
    }
}

/// One round's two passes over the N chunks, each checked against `pattern(r)`: one read at a
/// time, and all N at once. Returns how long each took (one at a time, all at once).
fn read_round(s: &Side, reads: &Reads, r: u32) -> Result<(Duration, Duration)> {
    let Side {
        mr,
        qp,
        cq,
        wait,
        n,
        ..
    } = s;
    let (from, chunks) = (reads.from, reads.sges.len());
    let (span, round) = (chunks * reads.size, format!("round {r}"));
    let want = pattern(r as u64, span);
    let (mut serial, mut parallel) = (Duration::ZERO, Duration::ZERO);
    // Alternate which pass goes first, so that neither always runs on a warmer path.
    let passes = if r % 2 == 0 {
        [false, true]
    } else {
        [true, false]
    };
    for all_at_once in passes {
        mr.fill(0..span, 0)?;
        if all_at_once {
            // One ibv_post_send with N linked requests: the NIC keeps up to max_rd_atomic
            // of them in flight, the answers come back to back.
            let wrs: Vec<SendWr> = (0..chunks).map(|k| reads.wr(k)).collect();
            n.say(format!(
                "round {r}: ibv_post_send {chunks} x IBV_WR_RDMA_READ of {} bytes from \
                 remote {:#x}.. rkey {:#x} into lkey {:#x}, in one call",
                reads.size,
                from.addr,
                from.rkey,
                mr.lkey()
            ));
            let t0 = Instant::now();
            qp.post_send(&wrs)
                .with_context(|| format!("round {r}: posting {chunks} reads"))?;
            let order = collect(cq, chunks, *wait, &round, from.rkey)?;
            parallel = t0.elapsed();
            n.say(format!(
                "round {r}: ibv_poll_cq -> {chunks} RDMA_READ completions, wr_ids in order \
                 {order:?}"
            ));
            check(mr, &want, r, "all at once")?;
        } else {
            // One at a time: post a read, wait for its completion, post the next.
            let t0 = Instant::now();
            for k in 0..chunks {
                qp.post_send(&[reads.wr(k)])
                    .with_context(|| format!("round {r}: posting read {k}"))?;
                collect(cq, 1, *wait, &round, from.rkey)?;
            }
            serial = t0.elapsed();
            check(mr, &want, r, "one at a time")?;
        }
    }
    Ok((serial, parallel))
}

fn median(v: &[f64]) -> f64 {
    Summary::of(v).map_or(0.0, |s| s.median)
}

/// Polls until `count` read completions arrived; every one must have succeeded. Returns the
/// wr_ids in the order they completed (an RC QP completes in posting order).
fn collect(cq: &Cq, count: usize, wait: Duration, what: &str, rkey: u32) -> Result<Vec<u64>> {
    let mut wcs = WorkCompletion::array::<16>();
    let mut order = Vec::with_capacity(count);
    while order.len() < count {
        let got = cq
            .poll_timeout(&mut wcs, wait, "RDMA READ completions")
            .with_context(|| format!("{what}: reading the server's buffer"))?;
        for wc in &wcs[..got] {
            wc.ok()
                .with_context(|| format!("{what}: RDMA READ from rkey {rkey:#x} failed"))?;
            ensure!(
                wc.opcode() == WcOpcode::RDMA_READ,
                "{what}: expected an RDMA_READ completion, got {}",
                wc.opcode()
            );
            order.push(wc.wr_id());
        }
    }
    Ok(order)
}

fn check(mr: &Mr, want: &[u8], round: u32, how: &str) -> Result<()> {
    let got = mr.to_vec(0..want.len())?;
    if let Some(off) = first_mismatch(&got, want) {
        bail!(
            "round {round} ({how}): byte {off} read back as {:#04x}, expected {:#04x} \
             (pattern({round}))",
            got[off],
            want[off]
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    lesson_main(PROGRAM, check_flags, run)
}
