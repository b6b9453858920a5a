//! Lesson 13 — the RDMA connection manager: what lessons 03–06 did by hand, done by rdma_cm.
//!
//! Server: `lesson13_rdma_cm`        Client: `lesson13_rdma_cm 192.168.77.1`
//!
//! Lessons 03–06 opened a TCP socket, swapped QPN, PSN, GID and rkey over it, and walked each
//! QP through INIT → RTR → RTS with `ibv_modify_qp`. The connection manager (librdmacm, the
//! `rdma_ucm` kernel module) does all of that from an **IP address and a port**: the client
//! *resolves* the address to a local device and the path to the peer, *connects*; the server
//! *listens* and *accepts*. Their REQ and REP messages carry the QP numbers, the read/atomic
//! depths (`initiator_depth`, `responder_resources`) and a few bytes of **private data** —
//! here the address and rkey of a buffer, so the first RDMA READ needs no extra message.
//! Events (ADDR_RESOLVED, ROUTE_RESOLVED, CONNECT_REQUEST, ESTABLISHED, DISCONNECTED, or
//! REJECTED when nobody listens) arrive on an **event channel**.
//!
//! After connecting, the two sides play librdmacm's `rping` (wire-compatible: either side may
//! be `rping`): the client advertises a source buffer, the server RDMA-READs the ping from it,
//! the client advertises a sink, the server RDMA-WRITEs the ping back, each step acknowledged
//! by a SEND. Every ping is checked byte for byte on both sides.

#![forbid(unsafe_code)]

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context as _, Result};
use clap::Parser;
use verbs_lab::cli::SizeRange;
use verbs_lab::verbs::{
    AccessFlags, CmEvent, CmEventKind, CmId, ConnParam, Cq, EventChannel, Mr, Payload, PortSpace,
    Qp, QpCaps, QpInitAttr, QpType, RecvWr, RemoteBuf, SendOp, SendWr, WcOpcode, WorkCompletion,
};
use verbs_lab_lessons::{outln, parse_args, report_error, until_stdout_closes, Narrator};

/// rping's default port.
const RPING_PORT: u16 = 7174;
/// rping's smallest and largest ping (`-S`): room for "rdma-ping-2147483647: ", and 64 KiB - 1.
const MIN_SIZE: u32 = 26;
const MAX_SIZE: u32 = 65535;

#[derive(Parser, Debug)]
#[command(
    about = "Lesson 13: rdma_cm — resolve, connect/accept, private data, disconnect; rping-compatible"
)]
struct Args {
    /// Server to connect to (its IP address on an RDMA device); without it this is the server.
    #[arg(value_parser = clap::builder::NonEmptyStringValueParser::new())]
    host: Option<String>,
    /// rdma_cm port (rping's default).
    #[arg(short = 'p', long = "port", default_value_t = RPING_PORT,
          value_parser = verbs_lab::cli::tcp_port())]
    port: u16,
    /// Server: the address to listen on (default: every address, 0.0.0.0).
    /// Client: the source address to connect from (rping's -I).
    #[arg(short = 'a', long = "addr")]
    addr: Option<IpAddr>,
    /// Pings (client).
    #[arg(short = 'C', long = "count", default_value_t = 10,
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    count: u32,
    /// Bytes per ping, 26 to 65535 (suffixes K, M, G), as rping's -S (the server's must be at
    /// least the client's).
    #[arg(short = 'S', long = "size", default_value_t = 64,
          value_parser = SizeRange::new(MIN_SIZE..=MAX_SIZE))]
    size: u32,
    /// RDMA Reads we may have outstanding towards the peer (`rdma_conn_param.initiator_depth`).
    #[arg(long = "initiator-depth", default_value_t = 1,
          value_parser = clap::value_parser!(u8).range(0..=16))]
    initiator_depth: u8,
    /// RDMA Reads the peer may have outstanding against us (`responder_resources`).
    #[arg(long = "responder-resources", default_value_t = 1,
          value_parser = clap::value_parser!(u8).range(0..=16))]
    responder_resources: u8,
    /// Print every ping's data, as rping -v does.
    #[arg(short = 'v', long = "verbose")]
    verbose: bool,
    /// Seconds to wait for any one event (the peer, a completion) before giving up.
    #[arg(long = "wait", default_value_t = 30, value_parser = verbs_lab::cli::WaitSecs)]
    wait_secs: u64,
    /// No narration: print only results.
    #[arg(short = 'q', long = "quiet")]
    quiet: bool,
}

// ---- the two formats on the wire --------------------------------------------------------------

/// rping's message (`struct rping_rdma_info`): a buffer the peer may access, big-endian.
///   __be64 buf; __be32 rkey; __be32 size;            16 bytes
const INFO_LEN: usize = 16;

fn encode_info(b: RemoteBuf) -> [u8; INFO_LEN] {
    let mut m = [0u8; INFO_LEN];
    m[0..8].copy_from_slice(&b.addr.to_be_bytes());
    m[8..12].copy_from_slice(&b.rkey.to_be_bytes());
    m[12..16].copy_from_slice(&b.len.to_be_bytes());
    m
}

fn decode_info(m: &[u8]) -> RemoteBuf {
    RemoteBuf {
        addr: u64::from_be_bytes(m[0..8].try_into().expect("8 bytes")),
        rkey: u32::from_be_bytes(m[8..12].try_into().expect("4 bytes")),
        len: u32::from_be_bytes(m[12..16].try_into().expect("4 bytes")),
    }
}

/// Our private data (REQ and REP): "VLCM", version 1, 3 reserved bytes, then an rping info.
/// rping sends none; the CM zero-fills the REQ's 56 bytes, so the magic tells them apart.
const PD_MAGIC: &[u8; 4] = b"VLCM";
const PD_LEN: usize = 8 + INFO_LEN;

fn encode_private(b: RemoteBuf) -> Vec<u8> {
    let mut v = Vec::with_capacity(PD_LEN);
    v.extend_from_slice(PD_MAGIC);
    v.extend_from_slice(&[1, 0, 0, 0]);
    v.extend_from_slice(&encode_info(b));
    v
}

fn decode_private(data: &[u8]) -> Option<RemoteBuf> {
    (data.len() >= PD_LEN && &data[..4] == PD_MAGIC && data[4] == 1)
        .then(|| decode_info(&data[8..PD_LEN]))
}

/// The ping rping's client builds: "rdma-ping-N: " then letters 'A'..='z' cycling from a start
/// that moves one letter per ping, then a NUL in the last byte.
fn rping_ping(ping: u32, size: usize) -> Vec<u8> {
    let mut v = format!("rdma-ping-{ping}: ").into_bytes();
    v.truncate(size);
    let mut c = b'A' + (ping % 58) as u8;
    while v.len() < size {
        v.push(c);
        c = if c >= b'z' { b'A' } else { c + 1 };
    }
    v[size - 1] = 0;
    v
}

fn text(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

// ---- waiting for "the next thing": a completion, or a CM event --------------------------------

enum Next {
    Wc(WorkCompletion),
    Cm(CmEvent),
}

/// Polls the CQ and the event channel until either has something (the peer may disconnect
/// while we wait for a completion). Lesson 07 shows how to sleep on a channel instead.
fn next(cq: &Cq, cm: &EventChannel, wait: Duration, what: &str) -> Result<Next> {
    let deadline = Instant::now() + wait;
    let mut wcs = WorkCompletion::array::<1>();
    loop {
        if cq.poll(&mut wcs)? == 1 {
            let [wc] = wcs;
            return Ok(Next::Wc(wc));
        }
        if let Some(ev) = cm.try_get_event()? {
            return Ok(Next::Cm(ev));
        }
        ensure!(
            Instant::now() < deadline,
            "timed out after {}s waiting for {what}",
            wait.as_secs()
        );
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// The buffers of one side, as rping has them: a receive slot and a send slot for the 16-byte
/// messages, and the RDMA buffer (the client also has the source of its pings).
struct Buffers {
    recv: Mr,
    send: Mr,
    rdma: Mr,
    start: Option<Mr>,
}

/// What one call of [`Conn::reap`] took.
enum Reaped {
    Wanted,
    Other,
    Disconnected,
}

/// One side's data path after ESTABLISHED. Send and receive completions share one CQ and come
/// in either order (a SEND completes when the peer's ACK is back; the peer's answer may arrive
/// first), so receives are decoded and queued whenever they show up, as rping's CQ thread does.
struct Conn<'a> {
    id: &'a CmId,
    cq: &'a Cq,
    cm: &'a EventChannel,
    bufs: &'a Buffers,
    wait: Duration,
    sends_in_flight: u32,
    received: VecDeque<RemoteBuf>,
}

impl<'a> Conn<'a> {
    /// Wraps a connection whose QP exists, and posts its first receive: rping's peer may SEND
    /// as soon as the connection is established, before we get to look.
    fn new(
        id: &'a CmId,
        cq: &'a Cq,
        cm: &'a EventChannel,
        bufs: &'a Buffers,
        wait: Duration,
    ) -> Result<Conn<'a>> {
        let conn = Conn {
            id,
            cq,
            cm,
            bufs,
            wait,
            sends_in_flight: 0,
            received: VecDeque::new(),
        };
        conn.post_recv()?;
        Ok(conn)
    }

    fn qp(&self) -> &Qp {
        self.id.qp().expect("the QP was created")
    }

    fn post_recv(&self) -> Result<()> {
        Ok(self.qp().post_recv(&[RecvWr {
            wr_id: 1,
            sges: &[self.bufs.recv.sge(0..INFO_LEN)?],
        }])?)
    }

    /// SENDs a buffer info. The send slot is reused, so the previous SEND must have completed
    /// first: until its completion the NIC may still be reading the slot.
    fn send_info(&mut self, info: RemoteBuf) -> Result<()> {
        self.drain_sends()?;
        self.bufs.send.write(0, &encode_info(info))?;
        self.qp().post_send(&[SendWr::new(
            2,
            SendOp::Send,
            Payload::Sges(&[self.bufs.send.sge(0..INFO_LEN)?]),
        )
        .signaled(true)])?;
        self.sends_in_flight += 1;
        Ok(())
    }

    fn drain_sends(&mut self) -> Result<()> {
        while self.sends_in_flight > 0 {
            if let Reaped::Disconnected = self.reap(None, "a SEND's completion")? {
                bail!("the peer disconnected before our SEND completed");
            }
        }
        Ok(())
    }

    /// The next buffer info the peer sent, or `None` if it disconnected instead.
    fn recv_info(&mut self, what: &str) -> Result<Option<RemoteBuf>> {
        loop {
            if let Some(info) = self.received.pop_front() {
                return Ok(Some(info));
            }
            if let Reaped::Disconnected = self.reap(None, what)? {
                return Ok(None);
            }
        }
    }

    /// Posts an RDMA READ or WRITE from/to our RDMA buffer and waits for its completion.
    fn rdma(&mut self, op: SendOp, len: usize, want: WcOpcode, what: &str) -> Result<()> {
        self.rdma_into(&self.bufs.rdma, op, len, want, what)
    }

    fn rdma_into(
        &mut self,
        mr: &Mr,
        op: SendOp,
        len: usize,
        want: WcOpcode,
        what: &str,
    ) -> Result<()> {
        self.qp()
            .post_send(&[SendWr::new(3, op, Payload::Sges(&[mr.sge(0..len)?])).signaled(true)])?;
        loop {
            match self.reap(Some(want), what)? {
                Reaped::Wanted => return Ok(()),
                Reaped::Other => {}
                Reaped::Disconnected => bail!("the peer disconnected while waiting for {what}"),
            }
        }
    }

    /// Takes one completion or CM event: SEND completions are counted, receives decoded,
    /// queued and replaced by a fresh receive at once.
    fn reap(&mut self, want: Option<WcOpcode>, what: &str) -> Result<Reaped> {
        let wc = match next(self.cq, self.cm, self.wait, what)? {
            Next::Cm(ev) if ev.kind == CmEventKind::Disconnected => {
                return Ok(Reaped::Disconnected)
            }
            Next::Cm(ev) => bail!("waiting for {what}: unexpected {}", ev.kind),
            Next::Wc(wc) => wc,
        };
        wc.ok().with_context(|| format!("waiting for {what}"))?;
        match wc.opcode() {
            op if Some(op) == want => return Ok(Reaped::Wanted),
            WcOpcode::SEND => self.sends_in_flight = self.sends_in_flight.saturating_sub(1),
            WcOpcode::RECV => {
                ensure!(
                    wc.byte_len() as usize == INFO_LEN,
                    "expected a {INFO_LEN}-byte SEND (rping's buffer info), got {} bytes",
                    wc.byte_len()
                );
                self.received
                    .push_back(decode_info(&self.bufs.recv.to_vec(0..INFO_LEN)?));
                self.post_recv()?;
            }
            op => bail!("waiting for {what}: an unexpected {op} completion"),
        }
        Ok(Reaped::Other)
    }
}

// ---- the server -------------------------------------------------------------------------------

fn server(args: &Args, n: &Narrator) -> Result<()> {
    let wait = Duration::from_secs(args.wait_secs);
    let size = args.size as usize;

    // 1. An event channel (a file descriptor for CM events) and an id in the TCP port space
    //    (reliable connected QPs). bind + listen, as with a socket — no device named yet.
    n.step(
        1,
        "rdma_create_event_channel, rdma_create_id(RDMA_PS_TCP), rdma_bind_addr, rdma_listen",
    );
    let cm = EventChannel::create().context("opening the connection manager")?;
    let listen_id = CmId::create(&cm, PortSpace::Tcp).context("creating an rdma_cm id")?;
    let bind = SocketAddr::new(args.addr.unwrap_or(IpAddr::from([0, 0, 0, 0])), args.port);
    listen_id
        .bind_addr(bind)
        .with_context(|| format!("binding {bind}"))?;
    listen_id.listen(1).context("listening")?;
    n.say(format!(
        "event channel fd {}; listening on {bind} (no TCP socket: the rdma_cm port space)",
        cm.fd()
    ));

    // 2. A client's REQ arrives as CONNECT_REQUEST with a *new* id for this connection, already
    //    bound to the device the request came in on.
    n.step(
        2,
        "rdma_get_cm_event: wait for RDMA_CM_EVENT_CONNECT_REQUEST",
    );
    let req = cm
        .get_event(wait)
        .context("waiting for a client (no CONNECT_REQUEST)")?
        .expect(CmEventKind::ConnectRequest, "rdma_listen")?;
    let mut id = req.new_id.context("a CONNECT_REQUEST without a new id")?;
    let ctx = id.context().context("the new id has no device")?;
    n.say(format!(
        "{} from {} on {} port {}",
        req.kind,
        id.peer_addr().map_or("?".into(), |a| a.to_string()),
        ctx.name(),
        id.port_num()
    ));
    n.say(format!(
        "the client asks: initiator_depth {} (reads it may issue; our responder_resources), \
         responder_resources {} (reads it accepts; our initiator_depth), retry_count {}, rnr_retry_count {}",
        req.param.responder_resources,
        req.param.initiator_depth,
        req.param.retry_count,
        req.param.rnr_retry_count
    ));
    let client_sink = decode_private(&req.private_data);
    match client_sink {
        Some(b) => n.say(format!(
            "private data: {} bytes, ours: the client's sink is addr {:#x} rkey {:#x} len {}",
            req.private_data.len(),
            b.addr,
            b.rkey,
            b.len
        )),
        None => n.say(format!(
            "private data: {} bytes, {} (an rping client sends none; the CM pads the REQ's)",
            req.private_data.len(),
            if req.private_data.iter().all(|&b| b == 0) {
                "all zero"
            } else {
                "not ours"
            }
        )),
    }

    // 3. Resources on the *id's* device context (librdmacm opened it), and a QP attached to the
    //    id: the CM will move it to RTR and RTS itself. A receive is posted before accepting.
    n.step(
        3,
        "PD, CQ, MRs and rdma_create_qp on the new id's device; post a receive",
    );
    let pd = ctx.alloc_pd().context("ibv_alloc_pd")?;
    let bufs = Buffers {
        recv: pd.reg_mr(INFO_LEN, AccessFlags::LOCAL_WRITE)?,
        send: pd.reg_mr(INFO_LEN, AccessFlags::EMPTY)?,
        rdma: pd.reg_mr(
            size,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE,
        )?,
        start: None,
    };
    let banner_text = format!("hello from lesson13's server on {}\0", ctx.name());
    let banner = pd.reg_mr(banner_text.len(), AccessFlags::REMOTE_READ)?;
    banner.write(0, banner_text.as_bytes())?;
    let cq = ctx.create_cq(32, None).context("ibv_create_cq")?;
    let qp = id.create_qp(&pd, &qp_attr(&cq)).context("rdma_create_qp")?;
    n.say(format!(
        "QP {:#x} in {} (attached to the id); RDMA buffer {size} bytes rkey {:#x}",
        qp.qpn(),
        qp.state()?,
        bufs.rdma.rkey()
    ));
    let mut conn = Conn::new(&id, &cq, &cm, &bufs, wait)?;

    // 4. Accept: our depths and private data go back in the REP. The REP carries up to 196
    //    bytes: we advertise a banner the client may RDMA-READ at once.
    n.step(
        4,
        "rdma_accept (REP with our private data) and wait for RDMA_CM_EVENT_ESTABLISHED",
    );
    let banner_buf = banner.remote(0..banner_text.len())?;
    id.accept(&ConnParam {
        private_data: encode_private(banner_buf),
        responder_resources: args.responder_resources,
        initiator_depth: args.initiator_depth,
        retry_count: 7,
        rnr_retry_count: 7,
        ..ConnParam::default()
    })
    .context("accepting the connection")?;
    n.say(format!(
        "accepted: responder_resources {}, initiator_depth {}, private data {PD_LEN} bytes: banner addr {:#x} rkey {:#x} len {}",
        args.responder_resources, args.initiator_depth, banner_buf.addr, banner_buf.rkey, banner_buf.len
    ));
    let est = cm
        .get_event(wait)
        .context("waiting for ESTABLISHED")?
        .expect(CmEventKind::Established, "rdma_accept")?;
    let qp = id.qp().expect("created above");
    let (rd, dest_rd) = qp.rd_atomic()?;
    n.say(format!(
        "{}: QP {:#x} is {} — the CM did INIT -> RTR -> RTS (max_rd_atomic {rd}, max_dest_rd_atomic {dest_rd})",
        est.kind,
        qp.qpn(),
        qp.state()?
    ));

    // 5. rping's loop, server side, until the client disconnects.
    n.step(
        5,
        "rping: RDMA_READ the client's ping, SEND go-ahead, RDMA_WRITE it back, SEND go-ahead",
    );
    let mut pings = 0u32;
    while let Some(info) = conn.recv_info("the client's source buffer (a SEND)")? {
        ensure!(
            info.len as usize <= size,
            "the client's pings are {} bytes, our buffer is {size}: start the server with -S {}",
            info.len,
            info.len
        );
        // RDMA READ the ping from the client's source buffer, check it, say "go ahead".
        let len = info.len as usize;
        conn.rdma(
            SendOp::Read(info),
            len,
            WcOpcode::RDMA_READ,
            "the RDMA READ of the ping",
        )?;
        let got = bufs.rdma.to_vec(0..len)?;
        let want = rping_ping(pings, len);
        ensure!(
            got == want,
            "ping {pings} arrived corrupt: '{}', expected '{}'",
            text(&got),
            text(&want)
        );
        if pings == 0 {
            n.say(format!(
                "ping 0: RDMA_READ {len} bytes from addr {:#x} rkey {:#x}: '{}' (checked)",
                info.addr,
                info.rkey,
                text(&got)
            ));
        }
        if args.verbose {
            outln!("server ping data: {}", text(&got));
        }
        conn.send_info(RemoteBuf::default())?;
        // The client's sink, then RDMA WRITE the ping back (up to its NUL, as rping does).
        let sink = conn
            .recv_info("the client's sink buffer (a SEND)")?
            .context("the client disconnected before sending its sink")?;
        if let (0, Some(pd_sink)) = (pings, client_sink) {
            ensure!(
                pd_sink == sink,
                "the sink in the connect request's private data ({pd_sink:?}) differs from the one the client sent ({sink:?})"
            );
            n.say("ping 0: the client's sink is the one its private data announced");
        }
        let echo = text(&got).len() + 1;
        ensure!(
            echo <= sink.len as usize,
            "the client's sink is {} bytes, the ping {echo}",
            sink.len
        );
        let to = RemoteBuf {
            len: echo as u32,
            ..sink
        };
        conn.rdma(
            SendOp::Write(to),
            echo,
            WcOpcode::RDMA_WRITE,
            "the RDMA WRITE of the echo",
        )?;
        conn.send_info(RemoteBuf::default())?;
        pings += 1;
    }
    n.say("RDMA_CM_EVENT_DISCONNECTED: the client is done");

    // 6. The client disconnected: disconnect our side too (answers its DREQ), then drop:
    //    QP, id, CQ, MRs, PD, listening id, channel.
    n.step(
        6,
        "rdma_disconnect, then destroy the QP, the ids and the channel",
    );
    id.disconnect().context("disconnecting")?;
    outln!("server: {pings} pings of up to {size} bytes read, checked and written back; the client disconnected");
    Ok(())
}

fn qp_attr(cq: &Cq) -> QpInitAttr<'_> {
    // rping's: 16 sends, 2 receives, one SGE each, RC.
    QpInitAttr {
        send_cq: cq,
        recv_cq: cq,
        qp_type: QpType::Rc,
        caps: QpCaps {
            max_send_wr: 16,
            max_recv_wr: 2,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        sq_sig_all: false,
    }
}

// ---- the client -------------------------------------------------------------------------------

fn client(args: &Args, host: &str, n: &Narrator) -> Result<()> {
    let wait = Duration::from_secs(args.wait_secs);
    let size = args.size as usize;
    // The server's address, in the family of our -a address when one is given (a name such as
    // localhost may list ::1 first, which an IPv4-only device cannot reach).
    let dst = verbs_lab::verbs::cm::resolve(host, args.port, args.addr)
        .with_context(|| format!("'{host}' is not an address or a known host name"))?;
    let src = args.addr.map(|a| SocketAddr::new(a, 0));

    // 1. Address resolution: which local device and port reach this IP address (the routing
    //    table and ARP/ND, as for TCP), and the peer's hardware address.
    n.step(1, "rdma_create_event_channel, rdma_create_id, rdma_resolve_addr -> RDMA_CM_EVENT_ADDR_RESOLVED");
    let cm = EventChannel::create().context("opening the connection manager")?;
    let mut id = CmId::create(&cm, PortSpace::Tcp).context("creating an rdma_cm id")?;
    let resolving = || format!("resolving {dst} to a local RDMA device");
    id.resolve_addr(src, dst, Duration::from_millis(2000))
        .with_context(resolving)?;
    let ev = cm
        .get_event(wait)
        .with_context(resolving)?
        .expect(CmEventKind::AddrResolved, "rdma_resolve_addr")
        .with_context(resolving)?;
    let ctx = id.context().context("the resolved id has no device")?;
    n.say(format!(
        "{}: {} -> {dst} goes through {} port {}",
        ev.kind,
        id.local_addr().map_or("?".into(), |a| a.ip().to_string()),
        ctx.name(),
        id.port_num()
    ));

    // 2. Route resolution: the path (on RoCE: GIDs, hop limit, traffic class from the IP route).
    n.step(2, "rdma_resolve_route -> RDMA_CM_EVENT_ROUTE_RESOLVED");
    id.resolve_route(Duration::from_millis(2000))
        .with_context(|| format!("resolving the route to {dst}"))?;
    let ev = cm
        .get_event(wait)
        .context("waiting for route resolution")?
        .expect(CmEventKind::RouteResolved, "rdma_resolve_route")?;
    n.say(format!("{}: the path to {dst} is known", ev.kind));

    // 3. Resources on the id's device; the QP is attached to the id (INIT); a receive posted.
    n.step(
        3,
        "PD, CQ, MRs and rdma_create_qp on the id's device; post a receive",
    );
    let pd = ctx.alloc_pd().context("ibv_alloc_pd")?;
    let remote = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE;
    let bufs = Buffers {
        recv: pd.reg_mr(INFO_LEN, AccessFlags::LOCAL_WRITE)?,
        send: pd.reg_mr(INFO_LEN, AccessFlags::EMPTY)?,
        rdma: pd.reg_mr(size, remote)?,
        start: Some(pd.reg_mr(size, remote)?),
    };
    let banner_mr = pd.reg_mr(256, AccessFlags::LOCAL_WRITE)?;
    let cq = ctx.create_cq(32, None).context("ibv_create_cq")?;
    let qp = id.create_qp(&pd, &qp_attr(&cq)).context("rdma_create_qp")?;
    n.say(format!(
        "QP {:#x} in {} (attached to the id)",
        qp.qpn(),
        qp.state()?
    ));
    let mut conn = Conn::new(&id, &cq, &cm, &bufs, wait)?;

    // 4. Connect: the REQ carries our depths and 24 bytes of private data (our sink buffer);
    //    the server's REP comes back as ESTABLISHED with *its* private data — or REJECTED.
    n.step(
        4,
        "rdma_connect (REQ with our private data) -> RDMA_CM_EVENT_ESTABLISHED",
    );
    let sink = bufs.rdma.remote(0..size)?;
    id.connect(&ConnParam {
        private_data: encode_private(sink),
        responder_resources: args.responder_resources,
        initiator_depth: args.initiator_depth,
        retry_count: 7,
        rnr_retry_count: 7,
        ..ConnParam::default()
    })
    .with_context(|| format!("connecting to {dst}"))?;
    n.say(format!(
        "REQ sent: responder_resources {}, initiator_depth {}, retry_count 7, rnr_retry_count 7, \
         private data {PD_LEN} bytes: our sink addr {:#x} rkey {:#x} len {}",
        args.responder_resources, args.initiator_depth, sink.addr, sink.rkey, sink.len
    ));
    let est = cm
        .get_event(wait)
        .with_context(|| format!("connecting to {dst}"))?
        .expect(CmEventKind::Established, "rdma_connect")
        .with_context(|| format!("connecting to {dst}"))?;
    let qp = id.qp().expect("created above");
    let (rd, dest_rd) = qp.rd_atomic()?;
    n.say(format!(
        "{}: QP {:#x} is {} (max_rd_atomic {rd}, max_dest_rd_atomic {dest_rd}); the server granted \
         responder_resources {}, initiator_depth {}",
        est.kind,
        qp.qpn(),
        qp.state()?,
        est.param.responder_resources,
        est.param.initiator_depth
    ));
    match decode_private(&est.private_data) {
        Some(banner) => {
            // Lesson 06's RDMA READ, with the address and rkey from the REP: no extra message.
            let len = banner.len as usize;
            ensure!(len <= banner_mr.len(), "the server's banner is {len} bytes");
            let what = "the RDMA READ of the banner";
            conn.rdma_into(
                &banner_mr,
                SendOp::Read(banner),
                len,
                WcOpcode::RDMA_READ,
                what,
            )?;
            let b = banner_mr.to_vec(0..banner.len as usize)?;
            n.say(format!(
                "the REP's private data names a banner (addr {:#x} rkey {:#x} len {}); RDMA_READ it: '{}'",
                banner.addr,
                banner.rkey,
                banner.len,
                text(&b)
            ));
        }
        None => n.say(format!(
            "the REP's private data ({} bytes) is not ours: an rping server sends none",
            est.private_data.len()
        )),
    }

    // 5. rping's loop, client side.
    n.step(
        5,
        "rping: SEND our source, wait go-ahead, SEND our sink, wait go-ahead, compare",
    );
    let start = bufs.start.as_ref().expect("the client has a source buffer");
    for ping in 0..args.count {
        let data = rping_ping(ping, size);
        start.write(0, &data)?;
        bufs.rdma.fill(0..size, 0)?;
        conn.send_info(start.remote(0..size)?)?;
        conn.recv_info("the go-ahead after the server's RDMA READ")?
            .context("the server disconnected")?;
        conn.send_info(sink)?;
        conn.recv_info("the go-ahead after the server's RDMA WRITE")?
            .context("the server disconnected")?;
        let echo = bufs.rdma.to_vec(0..size)?;
        ensure!(
            echo == data,
            "ping {ping}: the echo differs: '{}', sent '{}'",
            text(&echo),
            text(&data)
        );
        if ping == 0 {
            n.say(format!("ping 0: '{}' came back intact", text(&echo)));
        }
        if args.verbose {
            outln!("ping data: {}", text(&echo));
        }
    }

    // 6. Disconnect: our QP goes to ERROR at once (the receive still posted comes back
    //    flushed) and the server gets DISCONNECTED.
    n.step(
        6,
        "rdma_disconnect -> RDMA_CM_EVENT_DISCONNECTED; the posted receive is flushed",
    );
    conn.drain_sends()?;
    id.disconnect().context("disconnecting")?;
    let ev = cm
        .get_event(wait)
        .context("waiting for DISCONNECTED")?
        .expect(CmEventKind::Disconnected, "rdma_disconnect")?;
    let flushed = match next(&cq, &cm, wait, "the flushed receive")? {
        Next::Wc(wc) => wc.status(),
        Next::Cm(ev) => bail!("unexpected {} after disconnecting", ev.kind),
    };
    n.say(format!(
        "{}; QP {:#x} is {}; our posted receive completed with {flushed}",
        ev.kind,
        conn.qp().qpn(),
        conn.qp().state()?
    ));
    outln!(
        "client: {} pings of {size} bytes to {dst}, each RDMA-read by the server and written back, all verified",
        args.count
    );
    Ok(())
}

fn main() -> ExitCode {
    let args: Args = parse_args("lesson13_rdma_cm");
    let n = Narrator { quiet: args.quiet };
    until_stdout_closes(|| {
        let r = match &args.host {
            None => server(&args, &n),
            Some(h) => client(&args, h, &n),
        };
        match r {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => report_error("lesson13_rdma_cm", &e),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pings_are_rpings() {
        let p = rping_ping(0, 64);
        assert_eq!(p.len(), 64);
        assert!(p.starts_with(b"rdma-ping-0: ABCDEFG"));
        assert_eq!(p[63], 0);
        assert!(rping_ping(1, 64).starts_with(b"rdma-ping-1: BCD"));
        // The letters run 'A'..='z' (ASCII 65..=122) and wrap.
        let long = rping_ping(0, 100);
        assert_eq!(long[13 + 57], b'z');
        assert_eq!(long[13 + 58], b'A');
    }

    #[test]
    fn info_and_private_data_round_trip() {
        let b = RemoteBuf {
            addr: 0x1122_3344_5566_7788,
            rkey: 0xabcd,
            len: 64,
        };
        let m = encode_info(b);
        assert_eq!(&m[..8], &[0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88]);
        assert_eq!(decode_info(&m), b);
        let mut pd = encode_private(b);
        assert_eq!(pd.len(), PD_LEN);
        pd.resize(56, 0); // what the server receives: the REQ's 56 bytes
        assert_eq!(decode_private(&pd), Some(b));
        assert_eq!(decode_private(&[0; 56]), None);
    }
}
