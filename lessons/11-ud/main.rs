//! Lesson 11 — Unreliable Datagram: one QP talks to any QP, one message per packet, no retries.
//!
//! Server: `lesson11_ud -d rxe0`        Client: `lesson11_ud -d rxe1 192.168.77.1`
//!
//! A UD QP is never connected: it goes RESET → INIT (port and Q_Key) → RTR → RTS with no
//! peer attributes at all. Each SEND names its destination itself: an **address handle** (the
//! path to the peer's port, made from its GID), the peer's QPN and the peer's **Q_Key**. Every
//! received message lands behind a 40-byte **GRH** area in the receive buffer, a message is at
//! most one MTU, and a lost datagram is simply lost — nobody retransmits it.
//!
//! The ping-pong is wire-compatible with rdma-core's `ibv_ud_pingpong` (same flags, endpoint
//! record, Q_Key, buffer layout and summary lines), so either side may be that tool.
//! `--show-loss` (on both sides) sends a datagram with a wrong Q_Key: it completes successfully
//! on the sender and never arrives.

#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context as _, Result};
use clap::Parser;
use verbs_lab::cli::SizeRange;
use verbs_lab::connect::{local_endpoint, random_psn, Endpoint};
use verbs_lab::oob::OobConn;
use verbs_lab::verbs::{
    AccessFlags, Ah, AhAttr, Cq, GlobalRoute, InitAttr, Mr, Payload, Qp, QpCaps, QpInitAttr,
    QpType, RtsAttr, SendOp, SendWr, Sge, UdDest, WorkCompletion,
};
use verbs_lab_lessons::{
    encode_rc_pingpong, first_mismatch, lesson_main, oob_connect, open_device, outln, pattern,
    pingpong_recvs, rc_pingpong_handshake, read_peer_record, require_peer_gid, Device, Finished,
    Narrator, PingPong, PingPongArgs, RECV_WRID, SEND_WRID,
};

#[derive(Parser, Debug)]
#[command(
    about = "Lesson 11: UD ping-pong, wire-compatible with ibv_ud_pingpong; --show-loss sends a datagram that is dropped"
)]
struct Args {
    #[command(flatten)]
    pp: PingPongArgs,
    /// Size of each message in bytes, 1 to 4K (suffixes K, M, G): at most the port's active
    /// MTU (both sides the same).
    #[arg(short = 's', long = "size", default_value_t = 2048,
          value_parser = SizeRange::new(1..=4096u32))]
    size: u32,
    /// Service level of our address handle.
    #[arg(short = 'l', long = "sl", default_value_t = 0,
          value_parser = clap::value_parser!(u8).range(0..=15))]
    sl: u8,
    /// Show a lost datagram: the client sends one with a wrong Q_Key, the server waits for it
    /// in vain. Give it to both sides.
    #[arg(long = "show-loss")]
    show_loss: bool,
}

/// The Q_Key both sides use (`ibv_ud_pingpong`'s): a receiving UD QP drops every datagram
/// whose Q_Key differs from its own.
const QKEY: u32 = 0x1111_1111;
/// The Global Route Header area at the start of every UD receive buffer.
const GRH_LEN: usize = 40;

fn run(args: &Args) -> Result<()> {
    let a = &args.pp.common;
    let n = a.narrator();
    let server = a.role().is_server();
    let size = args.size as usize;
    let wait = a.wait();

    // 1. Device, port, GID (lesson 01). A UD message is one packet: at most the path MTU.
    n.step(1, "Open the device; a UD message must fit one MTU");
    let dev = open_device(a, &n)?;
    let mtu = dev.port.active_mtu.map_or(256, |m| m.bytes());
    ensure!(
        args.size <= mtu,
        "-s {}: a UD message is one packet, and the port's active MTU is {mtu} bytes; use -s {mtu} or less",
        args.size
    );
    n.say(format!(
        "active MTU {mtu}: the largest UD message; we send {size} bytes"
    ));

    // 2. Resources (lesson 02). One MR: a receive slot of 40 + size bytes (the GRH area, then
    //    the payload), then a send slot of size bytes. Only UD receives carry the GRH area.
    n.step(2, "Create PD, MR, CQ and a UD QP");
    let pd = dev.ctx.alloc_pd().context("ibv_alloc_pd")?;
    let mr = pd
        .reg_mr(GRH_LEN + 2 * size, AccessFlags::LOCAL_WRITE)
        .context("ibv_reg_mr")?;
    let recv_sge = mr.sge(0..GRH_LEN + size)?;
    let send_sge = mr.sge(GRH_LEN + size..GRH_LEN + 2 * size)?;
    let cq = dev
        .ctx
        .create_cq(args.pp.rx_depth + 1, None)
        .context("ibv_create_cq")?;
    let qp = pd
        .create_qp(&QpInitAttr {
            send_cq: &cq,
            recv_cq: &cq,
            qp_type: QpType::Ud,
            caps: QpCaps {
                max_send_wr: 1,
                max_recv_wr: args.pp.rx_depth,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: false,
        })
        .context("ibv_create_qp(IBV_QPT_UD)")?;
    n.say(format!(
        "MR of {} bytes (lkey {:#x}): receive slot {:#x} = {GRH_LEN}-byte GRH area + {size}, send slot {:#x}; UD QP {:#08x}",
        mr.len(),
        mr.lkey(),
        recv_sge.addr(),
        send_sge.addr(),
        qp.qpn()
    ));

    // 3. RESET -> INIT -> RTR -> RTS without a peer: INIT takes the port and our Q_Key (no
    //    access flags: UD has no RDMA), RTR nothing, RTS only our first PSN.
    n.step(
        3,
        "RESET -> INIT (port, Q_Key) -> RTR -> RTS (sq_psn): no peer named anywhere",
    );
    let local = ready_ud_qp(&qp, &dev, a.ib_port, &recv_sge, args.pp.rx_depth, &n)?;

    // 4. The handshake of ibv_ud_pingpong, which is ibv_rc_pingpong's (lesson 04): the
    //    endpoint records cross; each side then builds an address handle to the other.
    n.step(
        4,
        "Exchange endpoints (ibv_ud_pingpong's record), create the address handle",
    );
    n.say(format!("local address:  {local}"));
    let mut conn = oob_connect(a, &n)?;
    let mine = encode_rc_pingpong(&local);
    // The server makes its AH before it replies; the client after the exchange.
    let (remote, ah) = rc_pingpong_handshake(&mut conn, server, &mine, |rec| {
        // UD on RoCE needs the peer's GID to build the address handle: create_ah checks it.
        let remote = read_peer_record(rec, &n)?;
        let ah = create_ah(&pd, &dev, a.ib_port, args.sl, &remote, &n)?;
        Ok((remote, ah))
    })?;
    let dest = UdDest {
        ah: &ah,
        remote_qpn: remote.qpn,
        remote_qkey: QKEY,
    };
    let ctx = Ping {
        qp: &qp,
        cq: &cq,
        send_sge,
        size,
        wait,
    };

    if args.show_loss {
        return show_loss(&ctx, &mr, dest, conn, server, &n);
    }
    // ibv_ud_pingpong closes the TCP connection here.
    drop(conn);

    // 5. The ping-pong of lesson 04, each SEND carrying its destination.
    n.step(
        5,
        "Ping-pong: ibv_post_send (AH, remote QPN, Q_Key), ibv_poll_cq, ibv_post_recv",
    );
    let (done, check) = ping_pong(&ctx, &mr, dest, &recv_sge, args, &n)?;

    // 6. Results: ibv_ud_pingpong's two lines, then ours.
    n.step(6, "Results");
    done.print(size);
    outln!("{}", check.verdict(done.received, size));
    Ok(())
}

/// Step 3: RESET -> INIT -> RTR -> RTS without a peer. INIT takes the port and our Q_Key (no
/// access flags: UD has no RDMA), RTR nothing, RTS only our first PSN; `rx_depth` receives
/// into `recv_sge` are posted before RTR. Returns our endpoint (its PSN is the one set at RTS).
fn ready_ud_qp(
    qp: &Qp,
    dev: &Device,
    ib_port: u8,
    recv_sge: &Sge,
    rx_depth: u32,
    n: &Narrator,
) -> Result<Endpoint> {
    let size = recv_sge.len() as usize - GRH_LEN;
    qp.modify_to_init(&InitAttr {
        port_num: ib_port,
        pkey_index: 0,
        access: AccessFlags::EMPTY,
        qkey: QKEY,
    })
    .context("ibv_modify_qp(INIT)")?;
    // Receives first: a datagram that finds no receive is dropped, not retried (no RNR on UD).
    qp.post_recv(&pingpong_recvs(recv_sge, rx_depth))
        .context("posting the receives")?;
    qp.modify_to_rtr(None).context("ibv_modify_qp(RTR)")?;
    let local = local_endpoint(&dev.ctx, ib_port, qp, &dev.gid, random_psn())?;
    qp.modify_to_rts(&RtsAttr {
        sq_psn: local.psn,
        timeout: 0,
        retry_cnt: 0,
        rnr_retry: 0,
        max_rd_atomic: 0,
    })
    .context("ibv_modify_qp(RTS)")?;
    n.say(format!(
        "Q_Key {QKEY:#x}; {} receives of {} bytes posted; qp.state() = {}",
        rx_depth,
        GRH_LEN + size,
        qp.state()?
    ));
    Ok(local)
}

/// Step 5, the ping-pong of lesson 04, each SEND carrying its destination `dest`: the client
/// posts the first SEND; each side posts its next only when its previous SEND completed and
/// the peer's datagram arrived; every consumed receive is re-posted at once. Returns what it
/// measured, and how it checked the datagrams.
fn ping_pong(
    ctx: &Ping,
    mr: &Mr,
    dest: UdDest<'_>,
    recv_sge: &Sge,
    args: &Args,
    n: &Narrator,
) -> Result<(Finished, Check)> {
    let size = ctx.size;
    let server = args.pp.common.role().is_server();
    let mut check = Check::Undecided;
    let mut pp = PingPong::new(u64::from(args.pp.iters), server);
    if !server {
        pp.sending();
        ctx.send(mr, dest, pattern(pp.our_seq(), size), n, true)?;
    }
    let mut wcs: [WorkCompletion; 2] = WorkCompletion::array();
    while pp.running() {
        let ne = ctx.poll(&mut wcs).with_context(|| {
            let first = if pp.received == 0 && pp.pending() & RECV_WRID != 0 {
                NONE_YET
            } else {
                ""
            };
            format!(
                "iteration {}: {}{first}",
                pp.iteration(),
                awaited(pp.pending())
            )
        })?;
        for wc in &wcs[..ne] {
            wc.ok().with_context(|| {
                format!("iteration {}: {}", pp.iteration(), awaited(pp.pending()))
            })?;
            match wc.wr_id() {
                // Our SEND left: `pp.completed` below counts it.
                SEND_WRID => {}
                RECV_WRID => {
                    let rcnt = pp.received;
                    let payload = ctx.received(wc, mr, rcnt == 0, n)?;
                    // A copy: the NIC may write the MR again once receives are re-posted.
                    let sent = mr.to_vec(GRH_LEN + size..GRH_LEN + 2 * size)?;
                    let want = pattern(pp.peer_seq(), size);
                    check.message(rcnt, &payload, &want, &sent, n)?;
                    ctx.qp
                        .post_recv(&pingpong_recvs(recv_sge, 1))
                        .context("re-posting a receive")?;
                    // ibv_ud_pingpong sends what its buffer holds, i.e. echoes; so do we when
                    // the peer is that tool, and send our pattern otherwise.
                    if let Check::Echo = check {
                        mr.write(GRH_LEN + size, &payload)?;
                    }
                }
                other => bail!("completion for unknown wr_id {other} ({})", wc.opcode()),
            }
            if pp.completed(wc.wr_id()) {
                pp.sending();
                let msg = match check {
                    Check::Echo => mr.to_vec(GRH_LEN + size..GRH_LEN + 2 * size)?,
                    _ => pattern(pp.our_seq(), size),
                };
                ctx.send(mr, dest, msg, n, false)?;
            }
        }
    }
    Ok((pp.finish(), check))
}

/// `ibv_create_ah`: the path to the peer's port, used by every SEND we post.
fn create_ah(
    pd: &verbs_lab::verbs::Pd,
    dev: &verbs_lab_lessons::Device,
    port: u8,
    sl: u8,
    remote: &Endpoint,
    n: &Narrator,
) -> Result<Ah> {
    require_peer_gid(
        dev,
        remote,
        "an address handle needs the peer's GID",
        "ibv_ud_pingpong",
    )?;
    let attr = AhAttr {
        dlid: remote.lid,
        sl,
        port_num: port,
        // As ibv_ud_pingpong: a GRH whenever the peer sent a GID; hop limit 1. rxe creates the
        // AH in the kernel, which replaces it with the IP route's (lesson 03) — the received
        // GRH below shows it; mlx5, mlx4 and hns build the AH in user space and send the 1.
        grh: (!remote.gid.is_zero()).then_some(GlobalRoute {
            dgid: remote.gid,
            sgid_index: dev.gid.entry.sgid_index()?,
            hop_limit: 1,
            traffic_class: 0,
            flow_label: 0,
        }),
    };
    let ah = Ah::create(pd, &attr).context("ibv_create_ah")?;
    n.say(format!(
        "ibv_create_ah: dlid {:#x}, sl {sl}, port {port}, {}",
        attr.dlid,
        match attr.grh {
            Some(g) => format!(
                "is_global 1: dgid {}, sgid_index {}, hop_limit {}",
                g.dgid, g.sgid_index, g.hop_limit
            ),
            None => "is_global 0".into(),
        }
    ));
    Ok(ah)
}

/// What the ping-pong needs at every step.
struct Ping<'a> {
    qp: &'a Qp,
    cq: &'a Cq,
    send_sge: Sge<'a>,
    size: usize,
    wait: Duration,
}

impl Ping<'_> {
    /// Writes `msg` into the send slot and posts one signaled SEND to `dest`.
    fn send(
        &self,
        mr: &Mr,
        dest: UdDest<'_>,
        msg: Vec<u8>,
        n: &Narrator,
        first: bool,
    ) -> Result<()> {
        mr.write(GRH_LEN + self.size, &msg)?;
        let mut wr = SendWr::new(
            SEND_WRID,
            SendOp::Send,
            Payload::Sges(std::slice::from_ref(&self.send_sge)),
        );
        wr.ud = Some(dest);
        self.qp.post_send(&[wr]).context("ibv_post_send")?;
        if first {
            n.say(format!(
                "first ibv_post_send: IBV_WR_SEND of {} bytes, wr.ud = {{ ah, remote_qpn {:#x}, remote_qkey {:#x} }}",
                self.size, dest.remote_qpn, dest.remote_qkey
            ));
        }
        Ok(())
    }

    /// Busy-polls for up to two completions, at most `wait`.
    fn poll(&self, wcs: &mut [WorkCompletion; 2]) -> Result<usize> {
        self.cq
            .poll_timeout(
                wcs,
                self.wait,
                "a completion; check that the peer still runs, with the same -n",
            )
            .map_err(anyhow::Error::from)
    }

    /// A RECV completion: checks its length, shows the GRH area the first time, returns a copy
    /// of the payload (the bytes after the GRH area).
    fn received(&self, wc: &WorkCompletion, mr: &Mr, first: bool, n: &Narrator) -> Result<Vec<u8>> {
        let len = wc.byte_len() as usize;
        ensure!(
            len == GRH_LEN + self.size,
            "a datagram of {len} bytes arrived ({GRH_LEN} bytes of GRH + {}); we expect {GRH_LEN} + \
             {}: start both sides with the same -s (against ibv_ud_pingpong, -s 1024 on both: \
             it sends 1024-byte datagrams even at its default -s 2048)",
            len.saturating_sub(GRH_LEN),
            self.size
        );
        // A copy: the NIC may write the receive slot again once the receive is re-posted.
        let buf = mr.to_vec(0..GRH_LEN + self.size)?;
        if first {
            n.say(format!(
                "first RECV completion: byte_len {} = {GRH_LEN} (GRH area) + {}, src_qp {:#x}, \
                 IBV_WC_GRH {}",
                wc.byte_len(),
                self.size,
                wc.src_qp(),
                if wc.has_grh() { "set" } else { "clear" }
            ));
            n.say(describe_grh(&buf[..GRH_LEN]));
        }
        Ok(buf[GRH_LEN..].to_vec())
    }
}

/// What the 40-byte GRH area holds. On RoCE v2 over IPv4 the provider puts the packet's IPv4
/// header in its last 20 bytes (the first 20 are unused); otherwise it is an IPv6-format GRH.
fn describe_grh(g: &[u8]) -> String {
    let ip4 = &g[20..40];
    if g[..20].iter().all(|&b| b == 0) && ip4[0] >> 4 == 4 {
        format!(
            "GRH area: bytes 0-19 unused, bytes 20-39 the IPv4 header: TTL {}, protocol {} (UDP), \
             source {}.{}.{}.{}, destination {}.{}.{}.{}",
            ip4[8], ip4[9], ip4[12], ip4[13], ip4[14], ip4[15], ip4[16], ip4[17], ip4[18], ip4[19]
        )
    } else {
        format!(
            "GRH area: IPv6-format GRH, version {}, hop limit {}, source GID {}",
            g[0] >> 4,
            g[7],
            verbs_lab::verbs::Gid(g[8..24].try_into().expect("16 bytes"))
        )
    }
}

/// Why no datagram at all may have come: a receive smaller than the datagram drops it, on
/// either side, and rdma-core's tool does not take the size it is given (measured with
/// rdma-core 44: at its default -s 2048 it sends and receives 1024 bytes).
const NONE_YET: &str = "; none arrived yet: does the peer use the same -s? A datagram larger \
                        than the receiver's buffer is dropped (against ibv_ud_pingpong give both \
                        sides -s 1024)";

fn awaited(pending: u64) -> &'static str {
    match (pending & SEND_WRID != 0, pending & RECV_WRID != 0) {
        (true, true) => "waiting for our SEND's completion and the peer's datagram",
        (true, false) => "waiting for our SEND's completion",
        (false, true) => "waiting for the peer's datagram (lost datagrams are not resent)",
        (false, false) => "waiting for nothing",
    }
}

/// What the received payloads are checked against, decided on the first datagram. A lesson11
/// peer sends pattern(seq). `ibv_ud_pingpong` receives into and sends from one buffer, which
/// starts filled with 0x7b bytes: as a client it sends those first, and from then on each side
/// sends back what it received — so against it we echo too, and check that every datagram
/// equals the one we sent before it.
enum Check {
    Undecided,
    /// Every datagram k is pattern(2k) (client's) or pattern(2k+1) (server's).
    On,
    /// Every datagram equals what we sent last (the peer echoes, and so do we).
    Echo,
}

/// The bytes `ibv_ud_pingpong` fills its buffer with before the first message.
const UD_PINGPONG_FILL: u8 = 0x7b;

impl Check {
    /// `sent` is our last message (still in the send slot).
    fn message(
        &mut self,
        k: u64,
        got: &[u8],
        want: &[u8],
        sent: &[u8],
        n: &Narrator,
    ) -> Result<()> {
        let expected = match self {
            Check::On => want,
            Check::Echo => sent,
            Check::Undecided => {
                if first_mismatch(got, want).is_none() {
                    n.say("datagram 0 carries the lesson11 pattern: checking every datagram byte for byte");
                    *self = Check::On;
                } else if first_mismatch(got, sent).is_none() {
                    n.say(
                        "datagram 0 is our own datagram 0, echoed: the peer is ibv_ud_pingpong; \
                           we echo too and check every datagram against the one we sent",
                    );
                    *self = Check::Echo;
                } else if got.iter().all(|&b| b == UD_PINGPONG_FILL) {
                    n.say(format!(
                        "datagram 0 is all {UD_PINGPONG_FILL:#04x}, ibv_ud_pingpong's initial buffer: \
                         we echo it, and check every later datagram against the one we sent"
                    ));
                    *self = Check::Echo;
                } else {
                    bail!(
                        "datagram 0 is neither the lesson11 pattern, nor an echo of ours, nor \
                         ibv_ud_pingpong's initial {UD_PINGPONG_FILL:#04x} bytes: is the peer \
                         another program?"
                    );
                }
                return Ok(());
            }
        };
        match first_mismatch(got, expected) {
            None => Ok(()),
            Some(at) => bail!(
                "datagram {k} from the peer is corrupt: byte {at} is {:#04x}, expected {:#04x}",
                got[at],
                expected[at]
            ),
        }
    }

    fn verdict(&self, messages: u64, size: usize) -> String {
        match self {
            Check::On => {
                format!("payload check: {messages} datagrams of {size} bytes verified, all intact")
            }
            Check::Echo => format!(
                "payload check: {messages} datagrams of {size} bytes verified as echoes of ours, all intact"
            ),
            Check::Undecided => "payload check: no datagram received".into(),
        }
    }
}

/// `--show-loss`: the client sends one datagram with a wrong Q_Key, then one with the right
/// one. The sender's NIC completes both successfully; the receiving QP drops the first
/// silently. The TCP connection stays open so that each side can tell the other what it saw.
fn show_loss(
    ctx: &Ping,
    mr: &Mr,
    dest: UdDest<'_>,
    mut conn: OobConn,
    server: bool,
    n: &Narrator,
) -> Result<()> {
    n.step(5, "--show-loss: a datagram with the wrong Q_Key");
    let wrong = UdDest {
        remote_qkey: QKEY ^ 0xffff,
        ..dest
    };
    let mut wcs: [WorkCompletion; 2] = WorkCompletion::array();
    let settle = Duration::from_secs(2);
    if server {
        conn.barrier("the client's bad datagram")?;
        let t0 = Instant::now();
        let mut got = 0;
        while t0.elapsed() < settle {
            got += ctx.cq.poll(&mut wcs).context("ibv_poll_cq")?;
            std::thread::sleep(Duration::from_millis(10));
        }
        outln!(
            "server: {got} datagrams arrived in {} ms after the client's SEND with Q_Key {:#x} \
             (ours is {QKEY:#x}): dropped by our QP, and nobody is told",
            settle.as_millis(),
            wrong.remote_qkey
        );
        ensure!(got == 0, "the datagram with the wrong Q_Key was delivered");
        conn.barrier("the client's good datagram")?;
        let ne = ctx
            .poll(&mut wcs)
            .context("the datagram with the right Q_Key")?;
        let wc = wcs[..ne].first().expect("poll returned at least one");
        wc.ok()?;
        let payload = ctx.received(wc, mr, true, n)?;
        ensure!(
            first_mismatch(&payload, &pattern(7, ctx.size)).is_none(),
            "the datagram with the right Q_Key arrived corrupt"
        );
        outln!(
            "server: the datagram with the right Q_Key {QKEY:#x} arrived: {} bytes, verified",
            ctx.size
        );
        conn.barrier("the end")?;
    } else {
        ctx.send(mr, wrong, pattern(6, ctx.size), n, true)?;
        let ne = ctx
            .poll(&mut wcs)
            .context("the bad datagram's SEND completion")?;
        let wc = wcs[..ne].first().expect("poll returned at least one");
        wc.ok()?;
        outln!(
            "client: SEND with Q_Key {:#x} completed with {} — UD completes when the datagram \
             leaves; whether it arrives, the sender never learns",
            wrong.remote_qkey,
            wc.status()
        );
        conn.barrier("the client's bad datagram")?;
        conn.barrier("the client's good datagram")?;
        ctx.send(mr, dest, pattern(7, ctx.size), n, false)?;
        let ne = ctx
            .poll(&mut wcs)
            .context("the good datagram's SEND completion")?;
        wcs[..ne]
            .first()
            .expect("poll returned at least one")
            .ok()?;
        conn.barrier("the end")?;
        outln!("client: the datagram with the right Q_Key arrived (the server checked it)");
    }
    Ok(())
}

fn main() -> ExitCode {
    lesson_main(
        "lesson11_ud",
        |a: &Args| a.pp.check(2..=1_000_000),
        |a: &Args, ()| run(a),
    )
}
