//! Lesson 04 — two-sided messaging: SEND consumes a RECEIVE the peer posted beforehand.
//!
//! Server: `lesson04_send_recv -d rxe0`        Client: `lesson04_send_recv -d rxe1 192.168.77.1`
//!
//! A ping-pong, wire-compatible with rdma-core's `ibv_rc_pingpong` (same endpoint record and
//! handshake, same main flags, same data path and summary lines), so either side may be that
//! tool. Receives are posted before anything can arrive; then the client sends, the server
//! answers, `-n` times, and the client measures every round trip. Between two lesson04 peers every
//! message is checked byte for byte.
//!
//! `--show-rnr` (on both sides) shows what happens when the receive is NOT posted: the server
//! posts none, the client sends with `rnr_retry` 0 and gets `IBV_WC_RNR_RETRY_EXC_ERR`.

#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context as _, Result};
use clap::Parser;
use verbs_lab::cli::SizeRange;
use verbs_lab::connect::{local_endpoint, random_psn, to_init, to_rts, ConnectOpts, Endpoint};
use verbs_lab::oob::OobConn;
use verbs_lab::sysfs::PortCounters;
use verbs_lab::verbs::{
    AccessFlags, Cq, Mtu, Payload, Qp, SendOp, SendWr, WcStatus, WorkCompletion,
};
use verbs_lab_lessons::{
    create_rc_qp, encode_rc_pingpong, first_mismatch, lesson_main, oob_connect, open_device, outln,
    pattern, pingpong_recvs, rc_pingpong_handshake, read_peer_record, require_peer_gid, Narrator,
    PingPong, PingPongArgs, RECV_WRID, SEND_WRID,
};

#[derive(Parser, Debug)]
#[command(
    about = "Lesson 04: SEND/RECV ping-pong, wire-compatible with ibv_rc_pingpong; --show-rnr shows a missing receive"
)]
struct Args {
    #[command(flatten)]
    pp: PingPongArgs,
    /// Size of each message in bytes, 1 to 1G (suffixes K, M, G); both sides must use the same.
    #[arg(short = 's', long = "size", default_value_t = 4096,
          value_parser = SizeRange::new(1..=1u32 << 30))]
    size: u32,
    /// Path MTU in bytes (256, 512, 1024, 2048, 4096): at most the port's active MTU, the same
    /// on both sides.
    #[arg(short = 'm', long = "mtu", default_value = "1024")]
    mtu: Mtu,
    /// Show a missing receive: the server posts none, the client sends with rnr_retry 0 and gets
    /// IBV_WC_RNR_RETRY_EXC_ERR. Give it to both sides.
    #[arg(long = "show-rnr")]
    show_rnr: bool,
}

fn run(args: &Args) -> Result<()> {
    let a = &args.pp.common;
    let n = a.narrator();
    let server = a.role().is_server();
    let size = args.size as usize;
    let wait = a.wait();

    // 1. Device, port, GID (lesson 01). Requests the device cannot serve are refused here,
    //    before any resource is created.
    n.step(1, "Open the device and check the request against it");
    let dev = open_device(a, &n)?;
    if a.gid_idx.is_none() {
        n.say("(no -g given: the GID was chosen automatically; ibv_rc_pingpong needs -g on RoCE)");
    }
    let mtu = dev.checked_path_mtu(args.mtu)?;
    let max_msg_sz = dev.port.max_msg_sz;
    ensure!(
        args.size <= max_msg_sz,
        "-s {}: larger than the port's max_msg_sz of {max_msg_sz} bytes; give at most \
         -s {max_msg_sz}, on both sides",
        args.size
    );
    let max_qp_wr = dev
        .ctx
        .query_device()
        .context("ibv_query_device")?
        .max_qp_wr;
    ensure!(
        i64::from(args.pp.rx_depth) <= i64::from(max_qp_wr),
        "-r {}: deeper than the device's max_qp_wr of {max_qp_wr}; give at most -r {max_qp_wr}",
        args.pp.rx_depth
    );

    // 2. Resources (lesson 02). One MR with two halves: received messages land in the first,
    //    what we send is gathered from the second. Receives need LOCAL_WRITE: the NIC writes them.
    n.step(2, "Create PD, MR, CQ and QP (lesson 02)");
    let pd = dev.ctx.alloc_pd().context("ibv_alloc_pd")?;
    let mr = pd
        .reg_mr(2 * size, AccessFlags::LOCAL_WRITE)
        .context("ibv_reg_mr")?;
    let recv_sge = mr.sge(0..size)?;
    let send_sge = mr.sge(size..2 * size)?;
    // Room for every posted receive plus our one outstanding send.
    let cq = dev
        .ctx
        .create_cq(args.pp.rx_depth + 1, None)
        .context("ibv_create_cq")?;
    let qp = create_rc_qp(&pd, &cq, 1, args.pp.rx_depth)?;
    n.say(format!(
        "MR of {} bytes (lkey {:#x}): receive half at {:#x}, send half at {:#x}; CQ of {} entries; QP {:#08x}",
        mr.len(),
        mr.lkey(),
        recv_sge.addr(),
        send_sge.addr(),
        cq.capacity(),
        qp.qpn()
    ));

    // 3. INIT, then post the receives: from INIT on a QP accepts receive requests, and they must
    //    be there before the peer can send, because a SEND that finds no receive is answered with
    //    an RNR NAK ("receiver not ready") — see --show-rnr.
    n.step(
        3,
        "RESET -> INIT, then post receives BEFORE connecting (ibv_post_recv)",
    );
    let opts = ConnectOpts {
        port_num: a.ib_port,
        sgid_index: dev.gid.entry.sgid_index()?,
        path_mtu: mtu,
        // SEND/RECV needs no remote access rights (ibv_rc_pingpong uses none either).
        access: AccessFlags::EMPTY,
        timeout: a.qp_timeout,
        // 6, as in lesson 03: on rxe a retry count of 7 never runs out.
        retry_cnt: verbs_lab::connect::RETRY_CNT,
        // With --show-rnr the client gives up at the first RNR NAK instead of retrying forever.
        rnr_retry: if args.show_rnr { 0 } else { 7 },
        min_rnr_timer: 12,
        max_rd_atomic: 1,
        hop_limit: 1,
        ..Default::default()
    };
    // Lesson 03's INIT (our port, partition 0, the access flags); RTR and RTS come later.
    to_init(&qp, &opts).context("ibv_modify_qp(INIT)")?;
    if server && args.show_rnr {
        n.say("--show-rnr: posting NO receive on purpose");
    } else {
        qp.post_recv(&pingpong_recvs(&recv_sge, args.pp.rx_depth))
            .context("posting the initial receives")?;
        n.say(format!(
            "posted {} receives of {size} bytes, all into the receive half (wr_id {RECV_WRID})",
            args.pp.rx_depth
        ));
    }

    // 4. The handshake of ibv_rc_pingpong (lesson 03): the client writes its 52-byte record,
    //    the server reads it, moves its QP to RTR and RTS, replies with its record, and reads
    //    the client's "done"; the client connects its QP after that.
    // --show-rnr reads the port's counters (rxe's RNR counters are in sysfs hw_counters;
    // absent on other providers) now, before the peer can know our QPN and send.
    let rnr_before = args
        .show_rnr
        .then(|| PortCounters::snapshot(dev.ctx.name(), a.ib_port));
    n.step(
        4,
        "Exchange endpoints (ibv_rc_pingpong's record and order), RTR, RTS",
    );
    let local = local_endpoint(&dev.ctx, a.ib_port, &qp, &dev.gid, random_psn())?;
    n.say(format!("local address:  {local}"));
    let mut conn = oob_connect(a, &n)?;
    let mine = encode_rc_pingpong(&local);
    // The server connects its QP before it replies; the client after the exchange.
    let remote = rc_pingpong_handshake(&mut conn, server, &mine, |rec| {
        let remote = parse_record(rec, &dev, &n)?;
        connect_qp(&qp, &opts, &local, &remote, &n)?;
        Ok(remote)
    })?;

    if let Some(before) = &rnr_before {
        return show_rnr(args, &n, &qp, &cq, &mr, conn, &remote, before);
    }
    // ibv_rc_pingpong closes the TCP connection here; from now on only RDMA is waited for.
    drop(conn);

    // 5. The ping-pong, exactly as ibv_rc_pingpong runs it: the client posts the first SEND;
    //    each side posts its next SEND only when both its previous SEND completed and the
    //    peer's message arrived (`pp.pending()` holds the wr_ids still awaited). Every consumed
    //    receive is replaced at once, so rx_depth receives stay posted.
    n.step(5, "Ping-pong: ibv_post_send, ibv_poll_cq, ibv_post_recv");
    let iters = u64::from(args.pp.iters);
    let mut check = Check::Undecided;
    // Our k-th message carries pattern(2k) from the client, pattern(2k+1) from the server.
    let mut pp = PingPong::new(iters, server);
    if !server {
        pp.sending();
        post_message(&qp, &mr, size, pp.our_seq(), &send_sge, &n)?;
    }
    let mut wcs: [WorkCompletion; 2] = WorkCompletion::array();
    while pp.running() {
        // Busy-poll the CQ, but never longer than --wait without a completion.
        let polled = Instant::now();
        let mut spins = 0u32;
        let ne = loop {
            let ne = cq.poll(&mut wcs).context("ibv_poll_cq")?;
            if ne > 0 {
                break ne;
            }
            spins = spins.wrapping_add(1);
            if spins & 1023 == 0 && polled.elapsed() >= wait {
                bail!(
                    "timed out after {} s waiting for {}; check that the peer still runs, with \
                     the same -n",
                    wait.as_secs(),
                    awaited(pp.pending(), pp.iteration())
                );
            }
        };
        for wc in &wcs[..ne] {
            if !wc.is_success() {
                // Only status, wr_id and qp_num are defined in a failed completion (ibv_poll_cq(3)):
                // the wr_id says which queue it came from.
                let which = if wc.wr_id() == RECV_WRID {
                    "a posted receive (wr_id 1)"
                } else {
                    "our SEND (wr_id 2)"
                };
                let status = wc.status();
                // What these statuses mean *here*: a message that does not fit the receive
                // buffer (rxe fails the receive with LOC_QP_OP_ERR, the SEND with REM_OP_ERR).
                let size_statuses = [
                    WcStatus::LOC_LEN_ERR,
                    WcStatus::LOC_QP_OP_ERR,
                    WcStatus::REM_OP_ERR,
                    WcStatus::REM_INV_REQ_ERR,
                ];
                let size_hint = if size_statuses.contains(&status) {
                    "; in this ping-pong the usual cause is a different -s on the two sides: give \
                     both the same"
                } else {
                    ""
                };
                bail!(
                    "waiting for {}: {which} completed with {status}{}{size_hint}",
                    awaited(pp.pending(), pp.iteration()),
                    status.hint().map(|h| format!(" — {h}")).unwrap_or_default()
                );
            }
            match wc.wr_id() {
                // Our SEND was acknowledged: `pp.completed` below counts it.
                SEND_WRID => {}
                RECV_WRID => {
                    let rcnt = pp.received;
                    ensure!(
                        wc.byte_len() as usize == size,
                        "message {rcnt} from the peer has {} bytes, we expect {size}; give both \
                         sides the same -s",
                        wc.byte_len()
                    );
                    let want = pattern(pp.peer_seq(), size);
                    // A copy: the NIC may write this buffer again as soon as the receive is re-posted.
                    let (got, sent) = (mr.to_vec(0..size)?, mr.to_vec(size..2 * size)?);
                    check.message(rcnt, &got, &want, &sent, &n)?;
                    if rcnt == 0 {
                        n.say(format!(
                            "first RECV completion: {} bytes from QP {:#x} (wr_id {RECV_WRID})",
                            wc.byte_len(),
                            remote.qpn
                        ));
                    }
                    // Replace the consumed receive.
                    qp.post_recv(&pingpong_recvs(&recv_sge, 1))
                        .context("re-posting a receive")?;
                }
                other => bail!(
                    "a completion ({}) for wr_id {other}, which this lesson never posts (receives \
                     are wr_id {RECV_WRID}, SENDs {SEND_WRID}): a bug; report it",
                    wc.opcode()
                ),
            }
            // The wr_id leaves the awaited set; with both gone the next SEND is due (and the
            // client has its round trip).
            if pp.completed(wc.wr_id()) {
                pp.sending();
                post_message(&qp, &mr, size, pp.our_seq(), &send_sge, &n)?;
            }
        }
    }
    let done = pp.finish();
    n.say(format!(
        "{iters} iterations done: {} SEND completions, {} RECV completions",
        done.sent, done.received
    ));

    // 6. Results: ibv_rc_pingpong's two lines (so scripts parse both tools alike), then ours.
    n.step(6, "Results");
    if !done.print(size) {
        n.say("(round trips are measured by the client, which starts every exchange)");
    }
    outln!("{}", check.verdict(done.received, size));
    Ok(())
}

/// Reads the peer's record, narrated, and checks that it names a GID where one is needed.
fn parse_record(rec: &[u8], dev: &verbs_lab_lessons::Device, n: &Narrator) -> Result<Endpoint> {
    let remote = read_peer_record(rec, n)?;
    require_peer_gid(dev, &remote, "it must send from a GID", "ibv_rc_pingpong")?;
    Ok(remote)
}

/// INIT -> RTR -> RTS with the attributes lesson 03 explained (`connect::to_rts`), narrated.
fn connect_qp(
    qp: &Qp,
    opts: &ConnectOpts,
    local: &Endpoint,
    remote: &Endpoint,
    n: &Narrator,
) -> Result<()> {
    to_rts(qp, local, remote, opts).context("connecting the QP")?;
    n.say(format!(
        "QP {:#x} -> RTR -> RTS (path MTU {}, timeout {}, rnr_retry {}); qp.state() = {}",
        qp.qpn(),
        opts.path_mtu,
        opts.timeout,
        opts.rnr_retry,
        qp.state()?
    ));
    Ok(())
}

/// Writes message `seq` into the send half and posts it as one signaled SEND.
fn post_message(
    qp: &Qp,
    mr: &verbs_lab::verbs::Mr,
    size: usize,
    seq: u64,
    send_sge: &verbs_lab::verbs::Sge,
    n: &Narrator,
) -> Result<()> {
    mr.write(size, &pattern(seq, size))?;
    qp.post_send(&[SendWr::new(
        SEND_WRID,
        SendOp::Send,
        Payload::Sges(std::slice::from_ref(send_sge)),
    )])
    .with_context(|| format!("ibv_post_send of message {}", seq / 2))?;
    if seq < 2 {
        n.say(format!(
            "first ibv_post_send: IBV_WR_SEND of {size} bytes from {:#x} (lkey {:#x}, wr_id {SEND_WRID}, signaled)",
            send_sge.addr(),
            send_sge.lkey()
        ));
    }
    Ok(())
}

/// What an iteration still waits for, for timeout and error messages.
fn awaited(pending: u64, iteration: u64) -> String {
    match (pending & SEND_WRID != 0, pending & RECV_WRID != 0) {
        (true, true) => format!(
            "iteration {iteration}: the completion of our SEND and the peer's message (a RECV completion)"
        ),
        (true, false) => format!("iteration {iteration}: the completion (ACK) of our SEND"),
        (false, true) => format!(
            "iteration {iteration}: the peer's message (a RECV completion)"
        ),
        (false, false) => format!("iteration {iteration}: nothing"),
    }
}

/// Whether received payloads are checked. Decided on the first message: a lesson04 peer sends
/// pattern(seq); ibv_rc_pingpong sends whatever its single buffer holds (its protocol does not
/// define the content), so with it the check is skipped, and said so.
enum Check {
    Undecided,
    On,
    Skipped(String),
}

impl Check {
    /// `sent` is our last message (still in the send half), to recognise an echo.
    fn message(
        &mut self,
        k: u64,
        got: &[u8],
        want: &[u8],
        sent: &[u8],
        n: &Narrator,
    ) -> Result<()> {
        match self {
            Check::Skipped(_) => Ok(()),
            Check::On => match first_mismatch(got, want) {
                None => Ok(()),
                Some(at) => bail!(
                    "message {k} from the peer is corrupt: byte {at} is {:#04x}, expected \
                     {:#04x}; a lesson04 peer sends exactly pattern(seq): report it",
                    got[at],
                    want[at]
                ),
            },
            Check::Undecided => {
                if first_mismatch(got, want).is_none() {
                    n.say("message 0 carries the lesson04 pattern: checking every message byte for byte");
                    *self = Check::On;
                } else {
                    let looks = if got.iter().all(|&b| b == got[0]) {
                        format!("all {} bytes are {:#04x}", got.len(), got[0])
                    } else if got == sent {
                        "an echo of our message 0".to_string()
                    } else {
                        "not our pattern".to_string()
                    };
                    n.say(format!(
                        "message 0 is not the lesson04 pattern ({looks}): the peer is another program \
                         such as ibv_rc_pingpong, whose payload is undefined; content checks skipped"
                    ));
                    *self = Check::Skipped(looks);
                }
                Ok(())
            }
        }
    }

    fn verdict(&self, messages: u64, size: usize) -> String {
        match self {
            Check::On => {
                format!("payload check: {messages} messages of {size} bytes verified, all intact")
            }
            Check::Skipped(looks) => format!(
                "payload check: skipped, the peer is not lesson04 (its first message: {looks})"
            ),
            Check::Undecided => "payload check: no message received".into(),
        }
    }
}

/// The rxe port counters (`hw_counters`) that show an RNR NAK on each side, with their meaning.
fn rnr_counters(server: bool) -> &'static [(&'static str, &'static str)] {
    if server {
        &[("send_rnr_err", "RNR NAKs our NIC sent")]
    } else {
        &[
            ("rcvd_rnr_err", "RNR NAKs our NIC received"),
            (
                "retry_rnr_exceeded_err",
                "sends failed for running out of RNR retries",
            ),
        ]
    }
}

/// `--show-rnr`: the server posted no receive; the client sends once with rnr_retry 0.
#[allow(clippy::too_many_arguments)]
fn show_rnr(
    args: &Args,
    n: &Narrator,
    qp: &Qp,
    cq: &Cq,
    mr: &verbs_lab::verbs::Mr,
    mut conn: OobConn,
    remote: &Endpoint,
    before: &PortCounters,
) -> Result<()> {
    let a = &args.pp.common;
    let size = args.size as usize;
    let names = rnr_counters(a.role().is_server());
    let deltas = |n: &Narrator| {
        // The kernel serves hw_counters from a cache refreshed at most every `lifespan` ms:
        // read_again waits that out, so the NAK just exchanged is counted.
        let now = before.read_again();
        for (name, meaning) in names {
            if let Some(d) = before.increase(&now, name) {
                n.say(format!("hw_counters/{name}: +{d} ({meaning})"));
            }
        }
    };
    n.step(5, "--show-rnr: a SEND that finds no receive");
    // Keep the TCP connection (ibv_rc_pingpong would close it): the client reports the result.
    conn.set_timeout(a.wait())?;
    if a.role().is_server() {
        n.say(format!(
            "our QP {:#x} is in {} with no receive posted; waiting for the client's SEND and its report",
            qp.qpn(),
            qp.state()?
        ));
        let report = conn
            .recv_msg(256, "the client's report of its SEND (--show-rnr)")
            .context("--show-rnr")?;
        let report = String::from_utf8_lossy(&report).into_owned();
        n.say(format!("client reports: {report}"));
        n.say("our NIC answered the SEND with an RNR NAK (receiver not ready) instead of data:");
        deltas(n);
        n.say(format!(
            "our QP is still {}: RNR is the sender's problem; it was told to retry later",
            qp.state()?
        ));
        ensure!(
            report.contains(&WcStatus::RNR_RETRY_EXC_ERR.name()),
            "the client did not see {}; start it with --show-rnr too",
            WcStatus::RNR_RETRY_EXC_ERR.name()
        );
        outln!(
            "server: posted no receive; the client's SEND failed with {}",
            WcStatus::RNR_RETRY_EXC_ERR.name()
        );
        return Ok(());
    }
    mr.write(size, &pattern(0, size))?;
    let sge = mr.sge(size..2 * size)?;
    qp.post_send(&[SendWr::new(SEND_WRID, SendOp::Send, Payload::Sges(&[sge]))])
        .context("ibv_post_send")?;
    n.say(format!(
        "ibv_post_send: IBV_WR_SEND of {size} bytes to QP {:#x}, with rnr_retry 0 on our QP",
        remote.qpn
    ));
    let wc = poll_one_any(cq, a.wait(), "the completion of the SEND (--show-rnr)")
        .context("--show-rnr")?;
    let status = wc.status();
    let report = if status == WcStatus::RNR_RETRY_EXC_ERR {
        n.say(format!(
            "completion: wr_id {} {} — {}",
            wc.wr_id(),
            status,
            status.hint().unwrap_or_default()
        ));
        deltas(n);
        n.say(format!(
            "our QP is now {}: after a failed completion the QP stops; later requests are flushed \
             (IBV_WC_WR_FLUSH_ERR) until it is reset or recreated",
            qp.state()?
        ));
        outln!(
            "client: SEND to a peer without a posted receive completed with {} (status {})",
            status.name(),
            status.0
        );
        format!("SEND completed with {}", status.name())
    } else {
        format!(
            "SEND completed with {}, not {}; start the server with --show-rnr too",
            status.name(),
            WcStatus::RNR_RETRY_EXC_ERR.name()
        )
    };
    conn.send_msg(report.as_bytes(), "our report")
        .context("--show-rnr: reporting to the server")?;
    ensure!(status == WcStatus::RNR_RETRY_EXC_ERR, "{report}");
    Ok(())
}

/// Polls one completion (within `wait`) and returns it whatever its status: here a failed
/// status is the lesson, not an error.
fn poll_one_any(cq: &Cq, wait: Duration, what: &str) -> Result<WorkCompletion> {
    let [wc] = {
        let mut wc = WorkCompletion::array::<1>();
        cq.poll_timeout(&mut wc, wait, what)?;
        wc
    };
    Ok(wc)
}

fn main() -> ExitCode {
    lesson_main(
        "lesson04_send_recv",
        |a: &Args| a.pp.check(1..=1_000_000),
        |a: &Args, ()| run(a),
    )
}
