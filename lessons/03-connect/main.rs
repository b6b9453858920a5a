//! Lesson 03 — connecting two RC queue pairs: the out-of-band exchange and the
//! RESET → INIT → RTR → RTS transitions, every attribute spelled out.
//!
//! Server: `lesson03_connect -d rxe0`        Client: `lesson03_connect -d rxe1 192.168.77.1`
//!
//! A QP cannot talk to anybody until it knows the peer's QP number, first packet sequence number
//! (PSN) and address (LID on InfiniBand, GID on RoCE). Those travel over an ordinary TCP
//! connection first, in exactly the record and order `ibv_rc_pingpong` uses, so lesson 04 can
//! talk to that tool. Then each side walks its QP through the states, reading the state back
//! after every step, and proves the connection with a barrier and one small SEND.

#![forbid(unsafe_code)]

use std::process::ExitCode;

use anyhow::{bail, ensure, Context as _, Result};
use clap::Parser;
use verbs_lab::connect::{local_endpoint, random_psn, Endpoint};
use verbs_lab::verbs::{
    AccessFlags, AhAttr, GlobalRoute, InitAttr, Mtu, Payload, RecvWr, RtrAttr, RtsAttr, SendOp,
    SendWr, WcOpcode,
};
use verbs_lab_lessons::{
    create_rc_qp, decode_rc_pingpong, encode_rc_pingpong, lesson_main, oob_connect, open_device,
    outln, CommonArgs, RC_PINGPONG_DONE, RC_PINGPONG_RECORD_LEN,
};

#[derive(Parser, Debug)]
#[command(
    about = "Lesson 03: exchange QPN/PSN/LID/GID over TCP and walk an RC QP RESET -> INIT -> RTR -> RTS"
)]
struct Args {
    #[command(flatten)]
    common: CommonArgs,
    /// Path MTU in bytes (256, 512, 1024, 2048, 4096); at most the port's active MTU.
    #[arg(short = 'm', long = "mtu", default_value = "1024")]
    mtu: Mtu,
    /// Exercise: give RTR the peer's QPN + 1 as dest_qp_num. RTR accepts it; our first SEND
    /// then fails with IBV_WC_RETRY_EXC_ERR after retry_cnt ACK timeouts (use it on the client).
    #[arg(long = "bad-qpn")]
    bad_qpn: bool,
}

/// Bytes of the proof message (and of the registered buffer).
const MSG_LEN: usize = 64;

fn run(args: &Args) -> Result<()> {
    let a = &args.common;
    let n = a.narrator();
    let server = a.role().is_server();
    let mut states = Vec::new();

    // 1. Device, port and GID, as lesson 01 taught.
    n.step(1, "Open the device and choose our GID");
    let dev = open_device(a, &n)?;
    let mtu = dev.checked_path_mtu(args.mtu)?;

    // 2. PD, MR, CQ and QP, as lesson 02 taught. A new QP is in RESET: it can do nothing.
    n.step(2, "Create PD, MR, CQ and an RC QP (lesson 02)");
    let pd = dev.ctx.alloc_pd().context("ibv_alloc_pd")?;
    let mr = pd
        .reg_mr(MSG_LEN, AccessFlags::LOCAL_WRITE)
        .context("ibv_reg_mr")?;
    let cq = dev.ctx.create_cq(16, None).context("ibv_create_cq")?;
    let qp = create_rc_qp(&pd, &cq, 4, 4)?;
    let state = qp.state().context("ibv_query_qp")?;
    states.push(state);
    n.say(format!(
        "QP {:#08x} created; qp.state() = {state}",
        qp.qpn()
    ));

    // 3. RESET -> INIT: bind the QP to our port and partition, and say which remote operations
    //    it will accept. Nothing about the peer yet.
    n.step(
        3,
        "RESET -> INIT (ibv_modify_qp with IBV_QP_STATE|PKEY_INDEX|PORT|ACCESS_FLAGS)",
    );
    let init = InitAttr {
        // The port packets leave and arrive on.
        port_num: a.ib_port,
        // Index into the port's partition-key table; 0 holds the default partition 0xffff.
        pkey_index: 0,
        // What a peer may do to our memory through this QP without a receive: RDMA WRITE, READ,
        // atomics. Lesson 03 only SENDs, which needs none of these.
        access: AccessFlags::EMPTY,
        // Used by UD QPs only.
        qkey: 0,
    };
    n.say(format!(
        "port_num {}, pkey_index {}, qp_access_flags {}",
        init.port_num, init.pkey_index, init.access
    ));
    qp.modify_to_init(&init).context("ibv_modify_qp(INIT)")?;
    let state = qp.state()?;
    states.push(state);
    n.say(format!("qp.state() = {state}"));
    if server {
        // From INIT on, receives may be posted. The client's proof SEND needs one waiting here:
        // post it now, long before the client can send (lesson 04 shows what happens otherwise).
        let sge = mr.sge(0..MSG_LEN)?;
        qp.post_recv(&[RecvWr {
            wr_id: 1,
            sges: &[sge],
        }])
        .context("ibv_post_recv")?;
        n.say(format!(
            "posted one receive of {MSG_LEN} bytes (lkey {:#x}) for the client's proof message",
            mr.lkey()
        ));
    }

    // 4. The out-of-band exchange. Our endpoint: LID (0 on RoCE), QPN, a random 24-bit PSN and
    //    our GID. The record is ibv_rc_pingpong's: "%04x:%06x:%06x:<32 hex GID>" in a fixed
    //    52-byte buffer, NUL included. The client writes first; the server reads, connects its QP
    //    (steps 5-6) and only then replies; the client answers "done".
    n.step(
        4,
        "Exchange endpoints over TCP (the ibv_rc_pingpong record)",
    );
    let local: Endpoint = local_endpoint(&dev.ctx, a.ib_port, &qp, &dev.gid, random_psn())?;
    n.say(format!("our endpoint:   {local}"));
    let mut conn = oob_connect(a, &n)?;
    let record = encode_rc_pingpong(&local);
    let mut theirs = [0u8; RC_PINGPONG_RECORD_LEN];
    if !server {
        conn.send_raw(&record, "our endpoint record")
            .context("sending our endpoint")?;
        n.say(format!("sent     {}", show_record(&record)));
    }
    conn.recv_raw(&mut theirs, "the peer's endpoint record (LID:QPN:PSN:GID)")
        .context("receiving the peer's endpoint")?;
    n.say(format!("received {}", show_record(&theirs)));
    let remote = decode_rc_pingpong(&theirs)
        .map_err(anyhow::Error::msg)
        .context("the peer's endpoint record")?;
    n.say(format!("peer endpoint:  {remote}"));
    if !server {
        conn.send_raw(RC_PINGPONG_DONE, "\"done\"")
            .context("sending \"done\"")?;
        n.say("sent     \"done\"");
    }

    // 5. INIT -> RTR (ready to receive): now the QP learns who the peer is.
    n.step(5, "INIT -> RTR (ibv_modify_qp with IBV_QP_STATE|AV|PATH_MTU|DEST_QPN|RQ_PSN|MAX_DEST_RD_ATOMIC|MIN_RNR_TIMER)");
    // On RoCE (Ethernet link layer) packets are routed by IP: the address vector must carry a
    // Global Route Header with the peer's GID, and the peer must have sent one.
    let needs_grh = dev.port.link_layer.needs_grh();
    if needs_grh && remote.gid.is_zero() {
        bail!(
            "the peer sent GID zero, but {} port {} is RoCE (Ethernet): the peer must send from \
             a GID (ibv_rc_pingpong needs -g, e.g. -g 1)",
            dev.ctx.name(),
            a.ib_port
        );
    }
    let grh = (needs_grh || !remote.gid.is_zero()).then_some(GlobalRoute {
        // Where to: the peer's GID (on RoCE v2 an IPv4-mapped address).
        dgid: remote.gid,
        // Where from: the index of OUR GID; it fixes the source IP and RoCE v1/v2.
        // (An index above 255 does not fit the 8-bit field: refused, not cut.)
        sgid_index: dev.gid.entry.sgid_index()?,
        // Hop limit (the IP TTL on RoCE v2). ibv_rc_pingpong asks for 1; on InfiniBand that
        // is what is sent, but on RoCE the kernel replaces it with the hop limit of the IP
        // route to the peer when it resolves the peer's MAC address (read back below).
        hop_limit: 1,
        traffic_class: 0,
        flow_label: 0,
    });
    // The peer's QP: every packet we send carries this number. With --bad-qpn (an exercise)
    // we name the next one, a QP that does not exist or is not ours: see what fails, and when.
    let dest_qpn = if args.bad_qpn {
        let wrong = (remote.qpn + 1) & 0xff_ffff;
        n.say(format!(
            "--bad-qpn: dest_qp_num {wrong:#08x} instead of the peer's {:#08x}",
            remote.qpn
        ));
        wrong
    } else {
        remote.qpn
    };
    let rtr = RtrAttr {
        // Largest payload per packet; both sides should use the same value, at or below both
        // ports' active MTU (-m; ibv_rc_pingpong's default is 1024 too).
        path_mtu: mtu,
        dest_qpn,
        // The PSN we expect first: the peer's starting sq_psn. A mismatch makes every packet
        // look out of sequence and nothing ever completes.
        rq_psn: remote.psn,
        // RDMA READs/atomics the peer may have outstanding against us (responder resources).
        max_dest_rd_atomic: 1,
        // If a SEND arrives and no receive is posted we answer RNR NAK ("receiver not ready")
        // telling the sender to wait this long: code 12 = 0.64 ms.
        min_rnr_timer: 12,
        ah: AhAttr {
            // The peer port's LID: the InfiniBand address; 0 and unused on RoCE.
            dlid: remote.lid,
            // Service level: the priority lane (0 = default).
            sl: 0,
            port_num: a.ib_port,
            grh,
        },
    };
    n.say(format!(
        "path_mtu {} (port active MTU {}), dest_qp_num {:#08x}, rq_psn {:#08x}",
        rtr.path_mtu,
        dev.port.active_mtu.map_or("?".into(), |m| m.to_string()),
        rtr.dest_qpn,
        rtr.rq_psn
    ));
    n.say(format!(
        "max_dest_rd_atomic {}, min_rnr_timer {} (0.64 ms)",
        rtr.max_dest_rd_atomic, rtr.min_rnr_timer
    ));
    match &rtr.ah.grh {
        Some(g) => n.say(format!(
            "ah_attr: dlid {:#x}, sl {}, port {}, is_global 1: dgid {}, sgid_index {}, hop_limit {}",
            rtr.ah.dlid, rtr.ah.sl, rtr.ah.port_num, g.dgid, g.sgid_index, g.hop_limit
        )),
        None => n.say(format!(
            "ah_attr: dlid {:#x}, sl {}, port {}, is_global 0 (InfiniBand, same subnet)",
            rtr.ah.dlid, rtr.ah.sl, rtr.ah.port_num
        )),
    }
    qp.modify_to_rtr(Some(&rtr)).context("ibv_modify_qp(RTR)")?;
    let state = qp.state()?;
    states.push(state);
    // RTR: the QP receives from now on. What it will send goes to the dest_qp_num we just gave
    // it — the peer's QPN, or with --bad-qpn the wrong one (the device cannot tell).
    n.say(format!(
        "qp.state() = {state}: it receives now — packets for our QP {:#x}, the first with PSN \
         {:#08x}; what it sends will go to QP {:#x}",
        qp.qpn(),
        rtr.rq_psn,
        rtr.dest_qpn
    ));
    // What the device holds may differ from what we gave: on RoCE the kernel resolved the
    // peer's MAC address and, with it, the hop limit of the IP route (ibv_query_qp, IBV_QP_AV).
    if let (Some(asked), Some(held)) = (rtr.ah.grh, qp.av().context("ibv_query_qp(AV)")?.grh) {
        n.say(format!(
            "ibv_query_qp(IBV_QP_AV): hop_limit {} held by the device ({} asked{})",
            held.hop_limit,
            asked.hop_limit,
            if held.hop_limit != asked.hop_limit {
                "; on RoCE the kernel takes the IP route's hop limit"
            } else {
                ""
            }
        ));
    }

    // 6. RTR -> RTS (ready to send): our own sending parameters.
    n.step(6, "RTR -> RTS (ibv_modify_qp with IBV_QP_STATE|SQ_PSN|TIMEOUT|RETRY_CNT|RNR_RETRY|MAX_QP_RD_ATOMIC)");
    let rts = RtsAttr {
        // Our first PSN: what we told the peer (its rq_psn).
        sq_psn: local.psn,
        // Wait 4.096 us x 2^timeout for an ACK before retransmitting (-u; 18 = 1.07 s, for
        // slow emulation; 14 = 67 ms is usual on hardware).
        timeout: a.qp_timeout,
        // Retransmissions before giving up with IBV_WC_RETRY_EXC_ERR (at most 7). We use 6:
        // rxe (SoftRoCE) never counts 7 down, so a dead peer would be retried for ever
        // (verbs_lab::connect::RETRY_CNT has the measurement).
        retry_cnt: verbs_lab::connect::RETRY_CNT,
        // Retries after an RNR NAK before IBV_WC_RNR_RETRY_EXC_ERR; 7 means forever.
        rnr_retry: 7,
        // RDMA READs/atomics we may have outstanding towards the peer (initiator depth).
        max_rd_atomic: 1,
    };
    n.say(format!(
        "sq_psn {:#08x}, timeout {} ({}), retry_cnt {}, rnr_retry {} (7 = retry forever), max_rd_atomic {}",
        rts.sq_psn,
        rts.timeout,
        verbs_lab::verbs::attrs::qp_timeout_duration(rts.timeout)
            .map_or("infinite".into(), |d| format!("{:.2} ms", d.as_secs_f64() * 1e3)),
        rts.retry_cnt,
        rts.rnr_retry,
        rts.max_rd_atomic
    ));
    qp.modify_to_rts(&rts).context("ibv_modify_qp(RTS)")?;
    let state = qp.state()?;
    states.push(state);
    n.say(format!("qp.state() = {state}"));

    if server {
        // The server replies only now, with its QP already able to receive: by the time the
        // client knows our QPN, we are ready for its packets.
        conn.send_raw(&record, "our endpoint record")
            .context("sending our endpoint")?;
        n.say(format!("sent     {}", show_record(&record)));
        let mut done = [0u8; RC_PINGPONG_DONE.len()];
        conn.recv_raw(&mut done, "the client's \"done\"")
            .context("receiving \"done\"")?;
        ensure!(
            &done == RC_PINGPONG_DONE,
            "expected \"done\" from the client, got {:?}",
            String::from_utf8_lossy(&done)
        );
        n.say("received \"done\"");
    }

    // 7. Proof: a barrier over TCP (both sides have reached RTS), then one SEND client ->
    //    server into the receive the server posted in step 3.
    n.step(7, "Prove it: TCP barrier, then one SEND");
    conn.barrier("the peer to reach RTS (barrier)")
        .context("barrier after RTS")?;
    n.say("barrier passed: both QPs are in RTS");
    let wait = a.wait();
    if server {
        let wc = cq
            .poll_one(wait, "the client's proof SEND (our posted receive)")
            .context("waiting for the proof message")?;
        ensure!(
            wc.opcode() == WcOpcode::RECV,
            "expected a RECV completion, got {}",
            wc.opcode()
        );
        let len = wc.byte_len() as usize;
        let text = String::from_utf8_lossy(&mr.to_vec(0..len.min(MSG_LEN))?).into_owned();
        n.say(format!(
            "RECV completion: {len} bytes from QP {:#x}: \"{text}\"",
            remote.qpn
        ));
        conn.send_msg(text.as_bytes(), "the echo of the proof message")
            .context("echoing the proof message")?;
    } else {
        let text = format!("hello from QP {:#x}", qp.qpn());
        mr.write(0, text.as_bytes())?;
        let sge = mr.sge(0..text.len())?;
        qp.post_send(&[SendWr::new(2, SendOp::Send, Payload::Sges(&[sge]))])
            .context("ibv_post_send")?;
        n.say(format!(
            "ibv_post_send: IBV_WR_SEND of {} bytes (\"{text}\") to QP {:#x}",
            text.len(),
            rtr.dest_qpn
        ));
        let wc = cq
            .poll_one(wait, "the completion of our proof SEND")
            .context("waiting for our SEND")?;
        n.say(format!(
            "SEND completion: {} (the server's NIC acknowledged it)",
            wc.status()
        ));
        let echo = conn
            .recv_msg(MSG_LEN, "the server's report of what it received")
            .context("the server's report")?;
        ensure!(
            echo == text.as_bytes(),
            "the server received {:?}, we sent {text:?}",
            String::from_utf8_lossy(&echo)
        );
        n.say(format!(
            "the server reports it received \"{}\": identical",
            String::from_utf8_lossy(&echo)
        ));
    }

    let walk: Vec<String> = states.iter().map(|s| s.to_string()).collect();
    outln!(
        "{}: QP {:#x} connected to QP {:#x}; states {}",
        if server { "server" } else { "client" },
        qp.qpn(),
        remote.qpn,
        walk.join(" -> ")
    );
    Ok(())
}

/// The printable part of a record (up to its NUL) and its size on the wire.
fn show_record(rec: &[u8]) -> String {
    let end = rec.iter().position(|&b| b == 0).unwrap_or(rec.len());
    format!(
        "\"{}\" ({} bytes with the NUL)",
        String::from_utf8_lossy(&rec[..end]),
        rec.len()
    )
}

fn main() -> ExitCode {
    lesson_main(
        "lesson03_connect",
        |a: &Args| a.common.check(),
        |a: &Args, ()| run(a),
    )
}
