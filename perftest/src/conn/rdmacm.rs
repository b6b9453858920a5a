//! `-R`: the QPs connected through the RDMA connection manager (librdmacm) instead of by hand.
//!
//! The TCP exchange runs as without `-R` (HELLO, endpoints, barriers, results); only the
//! INIT → RTR → RTS of each RC QP changes hands. The server listens on rdma_cm port `-p` + 1
//! ([`listen`], before it sends its endpoints, so the client never connects too early); the
//! client resolves the server's address and route from its own GID's address (or
//! `--bind_source_ip`) and connects one rdma_cm connection per QP ([`connect_client`]); the
//! server accepts them ([`accept_all`]). The QPs stay ours, created on our own device context:
//! the connect and accept name them by QP number, and each side moves its QP with the
//! attributes `rdma_init_qp_attr(3)` computes (the path, the peer's QPN and PSN, the retry
//! count), adjusted by our options (`-u`, `-m`, `-S`, `--tclass`, `--flow_label`, the least
//! access rights, the read depths).
//!
//! Each REQ and REP carries a 30-byte record of its QP (index, QPN, rkey, address, slots) in
//! its private data; the receiver compares it with what the TCP exchange said, so a connection
//! from another peer (or another run) is refused by name, never mixed into this one.
//!
//! perftest's `-R` also moves its control exchange onto rdma_cm; ours keeps TCP, so a perftest
//! `ib_* -R` peer and a `vl_* -R` peer do not meet (see docs/perftest-compat.md).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _, Result};
use verbs_lab::verbs::{
    CmEvent, CmEventKind, CmId, CmQpOverrides, ConnParam, EventChannel, PortSpace, Qp, QpState,
    VerbsError,
};
use verbs_lab::wire::{Reader, Writer};

use crate::conn::device::LocalDev;
use crate::params::{Config, RdmaCm};
use crate::proto::{Endpoints, QpEndpoint};

/// How long address and route resolution may take each.
const RESOLVE: Duration = Duration::from_secs(5);
/// How long any one connection step may wait for the peer's connection manager.
pub const CM_WAIT: Duration = Duration::from_secs(30);
/// The first bytes of our private data record.
const MAGIC: &[u8; 4] = b"vlR1";
/// The record's length.
pub const RECORD_LEN: usize = 30;
// It must fit a REQ's private data.
const _: () = assert!(RECORD_LEN <= verbs_lab::verbs::cm::MAX_CONNECT_PRIVATE_DATA);

/// The rdma_cm side of a `-R` run: the event channel, the server's listener and one id per
/// QP. The connections live as long as this does (dropped after the QPs, see [`crate::conn::Link`]).
pub struct CmLink {
    /// The connection of each QP, in QP order.
    pub ids: Vec<CmId>,
    _listener: Option<CmId>,
    _channel: EventChannel,
}

/// The server's listener, made before its endpoints are sent.
pub struct CmListen {
    channel: EventChannel,
    listener: CmId,
}

fn rdma_cm(cfg: &Config) -> Result<&RdmaCm> {
    cfg.rdma_cm
        .as_ref()
        .ok_or_else(|| anyhow!("internal: rdma_cm step without -R"))
}

/// Server with `-R`: listens on rdma_cm port `-p` + 1 of `--bind` (every IPv4 address by
/// default). `None` without `-R` or on the client.
pub fn listen(cfg: &Config) -> Result<Option<CmListen>> {
    let Some(rc) = cfg.rdma_cm.as_ref() else {
        return Ok(None);
    };
    if !cfg.is_server() {
        return Ok(None);
    }
    let channel = EventChannel::create().context("-R: rdma_create_event_channel")?;
    let listener = CmId::create(&channel, PortSpace::Tcp).context("-R: rdma_create_id")?;
    let ip = match cfg.peer.bind {
        a if a.is_unspecified() => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        a => a,
    };
    let at = SocketAddr::new(ip, rc.port);
    listener
        .bind_addr(at)
        .with_context(|| format!("-R: binding the rdma_cm listener to {at}"))?;
    listener
        .listen(cfg.qps as i32)
        .with_context(|| format!("-R: rdma_listen on {at}"))?;
    Ok(Some(CmListen { channel, listener }))
}

/// Our private data for QP `q`: the magic, the index and the QP's endpoint.
pub fn record(q: usize, e: &QpEndpoint) -> Vec<u8> {
    let mut w = Writer::with_capacity(RECORD_LEN);
    w.raw(MAGIC);
    w.u16(q as u16);
    w.u32(e.qpn);
    w.u32(e.rkey);
    w.u64(e.addr);
    w.u32(e.slot_stride);
    w.u32(e.slots);
    w.into_bytes()
}

/// Reads the peer's record (`data` may be zero-padded, as a REQ's always is) and checks it
/// against the endpoints the TCP exchange gave; returns the QP index.
pub fn check_record(data: &[u8], remote: &Endpoints) -> Result<usize> {
    if data.len() < RECORD_LEN || &data[..4] != MAGIC {
        bail!(
            "the peer's rdma_cm private data is not a verbs-lab record ({} bytes{}): is the \
             peer a perftest ib_* tool, or another program on this port?",
            data.len(),
            if data.len() >= 4 {
                format!(", starting {:02x?}", &data[..4])
            } else {
                String::new()
            }
        );
    }
    let mut r = Reader::new(&data[4..RECORD_LEN]);
    let parse = |r: &mut Reader| -> std::result::Result<_, verbs_lab::wire::WireError> {
        Ok((
            r.u16("QP index")? as usize,
            r.u32("QPN")?,
            r.u32("rkey")?,
            r.u64("address")?,
            r.u32("slot stride")?,
            r.u32("slots")?,
        ))
    };
    let (q, qpn, rkey, addr, stride, slots) =
        parse(&mut r).map_err(|e| anyhow!("the peer's rdma_cm record: {e}"))?;
    let Some(t) = remote.qps.get(q) else {
        bail!(
            "the peer's rdma_cm connection is for QP {q}, but the run has {} QP(s) (-q): a \
             connection of another run?",
            remote.qps.len()
        );
    };
    if (qpn, rkey, addr, stride, slots) != (t.qpn, t.rkey, t.addr, t.slot_stride, t.slots) {
        bail!(
            "the rdma_cm connection for QP {q} names QPN {qpn:#x}, rkey {rkey:#x}, address \
             {addr:#x}, but the TCP exchange said QPN {:#x}, rkey {:#x}, address {:#x}: the \
             two connections come from different peers (or runs)",
            t.qpn,
            t.rkey,
            t.addr
        );
    }
    Ok(q)
}

/// What our options change in the CM's attributes of QP `q`.
fn overrides(cfg: &Config, link: &Setup, q: usize) -> CmQpOverrides {
    CmQpOverrides {
        access: Some(link.access),
        path_mtu: Some(link.path_mtu),
        sl: (cfg.qos.sl != 0).then_some(cfg.qos.sl),
        traffic_class: cfg.qos.tclass,
        flow_label: (!cfg.qos.flow_labels.is_empty()).then(|| cfg.qos.flow_label(q)),
        max_dest_rd_atomic: Some(link.accept_rd),
        timeout: Some(cfg.qp_timeout),
        max_rd_atomic: Some(link.init_rd),
    }
}

/// What [`crate::conn::connect()`] worked out for the QPs, for the CM's attributes.
pub struct Setup {
    pub access: verbs_lab::verbs::AccessFlags,
    pub path_mtu: verbs_lab::verbs::Mtu,
    /// RDMA Reads/Atomics the peer may have outstanding against us (responder resources).
    pub accept_rd: u8,
    /// RDMA Reads/Atomics we may have outstanding (initiator depth).
    pub init_rd: u8,
}

fn param(rc: &RdmaCm, s: &Setup, qp: &Qp, private_data: Vec<u8>) -> ConnParam {
    ConnParam {
        private_data,
        responder_resources: s.accept_rd,
        initiator_depth: s.init_rd,
        retry_count: rc.retry_count,
        rnr_retry_count: 7,
        qp_num: qp.qpn(),
        ..ConnParam::default()
    }
}

/// How long one slice of a wait for an rdma_cm event lasts (see [`next_event`]): how late a
/// signal that comes while connecting may be taken.
const CM_SLICE: Duration = Duration::from_millis(100);

/// The next event within `wait`, named in the error if none comes. Waits in slices of
/// [`CM_SLICE`], taking the signals that arrive between them (the tool is one thread: nothing
/// else would take them while it waits here).
fn next_event(ch: &EventChannel, wait: Duration, step: &str) -> Result<CmEvent> {
    let deadline = verbs_lab::fdwait::deadline_after(wait);
    loop {
        verbs_lab::signals::take_pending();
        let left = deadline.saturating_duration_since(Instant::now());
        let got = match ch.get_event(left.min(CM_SLICE)) {
            Err(VerbsError::Timeout { .. }) if !left.is_zero() => continue,
            Err(VerbsError::Timeout { what, .. }) => Err(VerbsError::Timeout { what, after: wait }),
            got => got,
        };
        return got
            .with_context(|| format!("-R: waiting for the peer's connection manager ({step})"));
    }
}

/// The peer's reason in a REJECTED's private data, if it is text.
fn rejected_reason(ev: &CmEvent) -> Option<String> {
    if ev.kind != CmEventKind::Rejected {
        return None;
    }
    let text = String::from_utf8_lossy(&ev.private_data);
    let text = text.trim_end_matches('\0').trim();
    (!text.is_empty() && !text.starts_with(std::str::from_utf8(MAGIC).unwrap_or("")))
        .then(|| text.to_string())
}

/// The address the client connects from: `--bind_source_ip`, else its GID's IP address (so
/// that `-d` and `-x` choose the device, as without `-R`).
fn source_ip(rc: &RdmaCm, dev: &LocalDev) -> Option<IpAddr> {
    rc.source_ip.or_else(|| {
        let g = dev.gid.entry.gid;
        if let Some(v4) = g.to_ipv4() {
            Some(IpAddr::V4(v4))
        } else if !g.is_zero() && !g.is_link_local() {
            Some(g.to_ip())
        } else {
            None
        }
    })
}

/// Checks that an id landed on our device and port.
fn check_device(id: &CmId, dev: &LocalDev, cfg: &Config, what: &str) -> Result<()> {
    let name = id.device_name().unwrap_or_else(|| "no device".into());
    if name != dev.ctx.name() || id.port_num() != cfg.device.ib_port {
        bail!(
            "-R: {what} goes through {name} port {}, but this side runs on {} port {} (-d, -i); \
             give the address of that device{}",
            id.port_num(),
            dev.ctx.name(),
            cfg.device.ib_port,
            if cfg.is_server() {
                " to the client"
            } else {
                " (--bind_source_ip, or the server's address on that network)"
            }
        );
    }
    Ok(())
}

/// What both sides connect: the run, our device, our QPs and both sides' endpoints.
pub struct Parties<'a> {
    pub cfg: &'a Config,
    pub dev: &'a LocalDev,
    pub qps: &'a [Qp],
    pub local: &'a Endpoints,
    pub remote: &'a Endpoints,
    pub setup: &'a Setup,
}

/// Client: one rdma_cm connection per QP to the server's listener, each QP moved through
/// INIT → RTR → RTS with the CM's attributes.
pub fn connect_client(p: &Parties<'_>) -> Result<CmLink> {
    let rc = rdma_cm(p.cfg)?;
    let host = p.cfg.peer.host.as_deref().unwrap_or_default();
    let src = source_ip(rc, p.dev);
    let dst = verbs_lab::verbs::cm::resolve(host, rc.port, src)
        .with_context(|| format!("-R: resolving the server's name '{host}'"))?;
    let channel = EventChannel::create().context("-R: rdma_create_event_channel")?;
    let mut ids = Vec::with_capacity(p.qps.len());
    for (q, qp) in p.qps.iter().enumerate() {
        let step = |s: &str| format!("-R: QP {q} to {dst}: {s}");
        let id = CmId::create(&channel, PortSpace::Tcp).context("-R: rdma_create_id")?;
        if let Some(tos) = rc.tos {
            id.set_tos(tos).with_context(|| step("-T"))?;
        }
        id.resolve_addr(src.map(|s| SocketAddr::new(s, 0)), dst, RESOLVE)
            .with_context(|| step("rdma_resolve_addr"))?;
        next_event(&channel, RESOLVE * 2, "address resolution")?
            .expect(CmEventKind::AddrResolved, "rdma_resolve_addr")
            .with_context(|| step("resolving the address"))?;
        let from = src.map_or_else(|| "the routed source".to_string(), |s| s.to_string());
        check_device(&id, p.dev, p.cfg, &format!("{dst} from {from}"))?;
        id.resolve_route(RESOLVE)
            .with_context(|| step("rdma_resolve_route"))?;
        next_event(&channel, RESOLVE * 2, "route resolution")?
            .expect(CmEventKind::RouteResolved, "rdma_resolve_route")
            .with_context(|| step("resolving the route"))?;
        let o = overrides(p.cfg, p.setup, q);
        id.modify_qp(qp, QpState::Init, &o)
            .with_context(|| step("INIT"))?;
        id.connect(&param(rc, p.setup, qp, record(q, &p.local.qps[q])))
            .with_context(|| step("rdma_connect"))?;
        let ev = next_event(&channel, CM_WAIT, "the server's accept")?;
        if let Some(why) = rejected_reason(&ev) {
            bail!("-R: the server refused QP {q}'s rdma_cm connection: {why}");
        }
        let ev = ev
            .expect(CmEventKind::ConnectResponse, "rdma_connect")
            .with_context(|| step("connecting"))?;
        let back = check_record(&ev.private_data, p.remote).with_context(|| step("the REP"))?;
        if back != q {
            bail!("-R: the server accepted QP {q}'s connection for its QP {back} (protocol error)");
        }
        id.modify_qp(qp, QpState::Rtr, &o)
            .with_context(|| step("RTR"))?;
        id.modify_qp(qp, QpState::Rts, &o)
            .with_context(|| step("RTS"))?;
        id.establish().with_context(|| step("rdma_establish"))?;
        ids.push(id);
    }
    Ok(CmLink {
        ids,
        _listener: None,
        _channel: channel,
    })
}

/// Server: accepts one rdma_cm connection per QP (in whatever order they come), each checked
/// against the TCP exchange, and waits until every one is ESTABLISHED, within [`CM_WAIT`] of
/// the last event.
pub fn accept_all(p: &Parties<'_>, cm: CmListen) -> Result<CmLink> {
    let n = p.qps.len();
    let mut ids: Vec<Option<CmId>> = (0..n).map(|_| None).collect();
    let mut established = vec![false; n];
    let start = Instant::now();
    while established.iter().any(|e| !e) {
        let what = if ids.iter().all(Option::is_some) {
            "ESTABLISHED"
        } else {
            "the client's rdma_connect"
        };
        let ev = next_event(&cm.channel, CM_WAIT, what).with_context(|| {
            format!(
                "-R: {} of {n} QP(s) connected after {:.0} s; is the client a vl_* tool with -R?",
                established.iter().filter(|e| **e).count(),
                start.elapsed().as_secs_f64()
            )
        })?;
        match ev.kind {
            CmEventKind::ConnectRequest => {
                let Some(id) = ev.new_id else {
                    bail!("-R: a CONNECT_REQUEST without its id (librdmacm)");
                };
                let q = match accept_one(p, &id, &ev.private_data, &ids) {
                    Ok(q) => q,
                    Err(e) => {
                        let why = format!("{e:#}");
                        let mut data = why.clone().into_bytes();
                        data.truncate(verbs_lab::verbs::cm::MAX_ACCEPT_PRIVATE_DATA);
                        let _ = id.reject(&data);
                        return Err(e);
                    }
                };
                ids[q] = Some(id);
            }
            CmEventKind::Established => {
                match ids
                    .iter()
                    .position(|i| i.as_ref().is_some_and(|i| i.handle() == ev.id))
                {
                    Some(q) => established[q] = true,
                    None => bail!("-R: ESTABLISHED for a connection this server did not accept"),
                }
            }
            kind => {
                return match ev.expect(CmEventKind::Established, "rdma_accept") {
                    Err(e) => Err(anyhow::Error::new(e))
                        .context("-R: accepting the client's rdma_cm connections"),
                    Ok(_) => bail!("-R: unexpected {kind}"),
                };
            }
        }
    }
    Ok(CmLink {
        ids: ids.into_iter().flatten().collect(),
        _listener: Some(cm.listener),
        _channel: cm.channel,
    })
}

/// Checks one connect request and accepts it with its QP moved to RTS; returns the QP index.
fn accept_one(
    p: &Parties<'_>,
    id: &CmId,
    private_data: &[u8],
    taken: &[Option<CmId>],
) -> Result<usize> {
    let rc = rdma_cm(p.cfg)?;
    let from = id
        .peer_addr()
        .map_or_else(|| "the client".to_string(), |a| a.to_string());
    check_device(id, p.dev, p.cfg, &format!("the connection from {from}"))?;
    let q = check_record(private_data, p.remote)
        .with_context(|| format!("-R: the connect request from {from}"))?;
    if taken[q].is_some() {
        bail!("-R: a second connect request for QP {q} from {from} (protocol error)");
    }
    let qp = &p.qps[q];
    let o = overrides(p.cfg, p.setup, q);
    let step = |s: &str| format!("-R: accepting QP {q} from {from}: {s}");
    id.modify_qp(qp, QpState::Init, &o)
        .with_context(|| step("INIT"))?;
    id.modify_qp(qp, QpState::Rtr, &o)
        .with_context(|| step("RTR"))?;
    id.modify_qp(qp, QpState::Rts, &o)
        .with_context(|| step("RTS"))?;
    id.accept(&param(rc, p.setup, qp, record(q, &p.local.qps[q])))
        .with_context(|| step("rdma_accept"))?;
    Ok(q)
}

#[cfg(test)]
mod tests {
    use super::*;
    use verbs_lab::verbs::Gid;

    fn endpoints() -> Endpoints {
        let e = |qpn| QpEndpoint {
            qpn,
            psn: 1,
            lid: 0,
            gid: Gid::default(),
            rkey: 0x1234,
            addr: 0x7f00_0000_1000,
            slot_stride: 4096,
            slots: 1,
        };
        Endpoints {
            device: "rxe0".into(),
            active_mtu: 1024,
            max_msg_sz: 1 << 30,
            max_dest_rd_atomic: 16,
            qkey: 0,
            qps: vec![e(0x11), e(0x12)],
        }
    }

    #[test]
    fn a_record_fits_a_req_and_reads_back_padded() {
        let eps = endpoints();
        let mut r = record(1, &eps.qps[1]);
        assert_eq!(r.len(), RECORD_LEN);
        r.resize(56, 0); // a REQ's private data arrives zero-padded to 56 bytes
        assert_eq!(check_record(&r, &eps).unwrap(), 1);
    }

    #[test]
    fn a_record_of_another_peer_or_program_is_refused_by_name() {
        let eps = endpoints();
        let mut other = eps.clone();
        other.qps[0].rkey = 0x9999;
        let e = check_record(&record(0, &other.qps[0]), &eps)
            .unwrap_err()
            .to_string();
        assert!(e.contains("different peers"), "{e}");
        let e = check_record(&[0u8; 56], &eps).unwrap_err().to_string();
        assert!(e.contains("not a verbs-lab record"), "{e}");
        let e = check_record(&record(5, &eps.qps[0]), &eps)
            .unwrap_err()
            .to_string();
        assert!(e.contains("QP 5"), "{e}");
    }
}
