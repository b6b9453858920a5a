//! Resources and connection: the device, one protection domain, one registered buffer, one CQ
//! (and its completion channel with `-e`), `-q` QPs; the exchange of endpoints; the QPs walked to
//! RTS (or address handles made, for UD).
//!
//! ## The buffers
//! Two kinds of memory region hold `stride`-byte slots:
//! - `src` (one MR for all QPs): what this side sends (write, send) or where its reads and
//!   atomics land;
//! - `dst` (one MR per QP): what the peer accesses (the target of its writes, the source of its
//!   reads, the word of its atomics) or where its sends arrive (our receive buffers).
//!
//! Each region is registered with only the rights its traffic needs ([`rights`]): the peer's
//! rkey for QP `q` reaches QP `q`'s `dst` slots and nothing else, and only with the one remote
//! operation of the test, and only when the peer initiates that operation at all; the QPs
//! accept that operation alone. See `docs/oob-protocol.md` for the table.
//!
//! Without `--validate` each region is one slot: every message of a QP reuses the same bytes, as
//! perftest does. With `--validate` the regions hold up to a queue's worth of slots (within
//! [`VALIDATE_BUDGET`]) so that every message in flight has bytes of its own, stamped with its
//! sequence number; see `docs/measurement.md`.

use std::ops::Range;
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use verbs_lab::connect::{init_attr, random_psn, rtr_attr, rts_attr, ConnectOpts, Endpoint};
use verbs_lab::verbs::{
    AccessFlags, Ah, AhAttr, CompChannel, Context, Cq, DeviceAttr, DeviceList, GidChoice,
    GlobalRoute, InitAttr, LinkLayer, Mr, Mtu, Pd, PortAttr, PortState, Qp, QpCaps, QpInitAttr,
    QpType, RtsAttr,
};

use crate::params::{Config, UD_GRH};
use crate::proto::{ChanError, Channel, Endpoints, Msg, QpEndpoint};
use crate::result::{Metric, TestKind};

/// With `--validate`, each region of a QP holds at most this many bytes of slots.
pub const VALIDATE_BUDGET: usize = 32 << 20;
/// The Q_Key of our UD QPs.
pub const QKEY: u32 = 0x1111_1111;
/// Buffer slots start on this boundary (a cache line; atomics need 8).
const SLOT_ALIGN: usize = 64;

/// The opened device and the port we use.
pub struct LocalDev {
    pub ctx: Context,
    pub attr: DeviceAttr,
    pub port: PortAttr,
    pub gid: GidChoice,
}

/// Opens the device (`-d`, or the first), checks the port is ACTIVE and picks the GID.
pub fn open_device(cfg: &Config) -> Result<LocalDev> {
    let ctx = DeviceList::open(cfg.ib_dev.as_deref()).context("opening the RDMA device")?;
    let attr = ctx
        .query_device()
        .with_context(|| format!("querying {}", ctx.name()))?;
    let port = ctx
        .query_port(cfg.ib_port)
        .with_context(|| format!("querying port {} of {}", cfg.ib_port, ctx.name()))?;
    if port.state != PortState::ACTIVE {
        bail!(
            "port {} of {} is {}, not ACTIVE: check the link (rdma link show; for SoftRoCE the \
             netdev must be up)",
            cfg.ib_port,
            ctx.name(),
            port.state
        );
    }
    let gid = ctx
        .choose_gid(cfg.ib_port, cfg.gid_index)
        .context("choosing the GID (-x)")?;
    if let crate::params::Sizes::Single(s) = cfg.sizes {
        if s > u64::from(port.max_msg_sz) {
            bail!(
                "-s {s} is larger than the largest message of {} port {} (max_msg_sz {})",
                ctx.name(),
                cfg.ib_port,
                port.max_msg_sz
            );
        }
    }
    Ok(LocalDev {
        ctx,
        attr,
        port,
        gid,
    })
}

/// What this side's regions and QPs let the NIC and the peer do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rights {
    /// The source slots (one MR for every QP).
    pub src: AccessFlags,
    /// Each QP's destination slots (one MR per QP: its rkey is what the peer gets).
    pub dst: AccessFlags,
    /// `qp_access_flags` of every QP (at INIT).
    pub qp: AccessFlags,
}

/// The least rights of this side's regions and QPs for `cfg`: the peer's one remote operation
/// on `dst` (and on the QPs) when the peer initiates it; LOCAL_WRITE where our NIC writes (the
/// receive buffers, the landing slots of our reads and atomics); nothing else.
pub fn rights(cfg: &Config) -> Rights {
    let kind = cfg.tool.kind;
    let server = cfg.is_server();
    // Who posts requests: the client; the server too with -b, or in a ping-pong (latency of
    // write and send).
    let (we_post, peer_posts) = match cfg.tool.metric {
        Metric::Bw => (!server || cfg.bidirectional, server || cfg.bidirectional),
        Metric::Lat if matches!(kind, TestKind::Write | TestKind::Send) => (true, true),
        Metric::Lat => (!server, server),
    };
    let none = AccessFlags::EMPTY;
    let local = AccessFlags::LOCAL_WRITE;
    let remote = match kind {
        TestKind::Write => AccessFlags::REMOTE_WRITE,
        TestKind::Read => AccessFlags::REMOTE_READ,
        TestKind::Atomic => AccessFlags::REMOTE_ATOMIC,
        TestKind::Send => none,
    };
    let exposed = peer_posts && !remote.is_empty();
    let dst = match kind {
        // Receives land here whenever they are posted (both sides post them).
        TestKind::Send => local,
        // REMOTE_WRITE and REMOTE_ATOMIC need LOCAL_WRITE too (ibv_reg_mr(3)).
        TestKind::Write | TestKind::Atomic if exposed => local | remote,
        TestKind::Read if exposed => remote,
        _ => none,
    };
    let src = match kind {
        TestKind::Read | TestKind::Atomic if we_post => local,
        _ => none,
    };
    Rights {
        src,
        dst,
        qp: if exposed && cfg.conn != QpType::Ud {
            remote
        } else {
            none
        },
    }
}

/// Where each QP's slots lie: source slots in the one source MR, destination slots in the QP's
/// own destination MR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Bytes per slot: the largest message (plus the GRH on UD), rounded up to 64.
    pub stride: usize,
    pub src_slots: usize,
    pub dst_slots: usize,
}

impl Layout {
    /// The layout for `cfg` when messages are at most `max_size` bytes.
    pub fn new(cfg: &Config, max_size: u64) -> Layout {
        let grh = if cfg.conn == QpType::Ud { UD_GRH } else { 0 };
        let stride = ((max_size + grh) as usize)
            .max(8)
            .div_ceil(SLOT_ALIGN)
            .saturating_mul(SLOT_ALIGN);
        let fit = |want: u32| (want as usize).min(VALIDATE_BUDGET / stride).max(1);
        let kind = cfg.tool.kind;
        let bw = cfg.tool.metric == Metric::Bw;
        let (src_slots, dst_slots) = if !cfg.validate {
            (1, 1)
        } else {
            match kind {
                TestKind::Write if bw => (fit(cfg.tx_depth), fit(cfg.tx_depth)),
                TestKind::Send if bw => (fit(cfg.tx_depth), fit(cfg.rx_depth)),
                TestKind::Send => (1, fit(cfg.rx_depth)),
                _ => (1, 1),
            }
        };
        Layout {
            stride,
            src_slots,
            dst_slots,
        }
    }

    /// Bytes of the source MR for `qps` QPs.
    pub fn src_total(&self, qps: usize) -> usize {
        self.src_slots * self.stride * qps
    }

    /// Bytes of one QP's destination MR.
    pub fn dst_total(&self) -> usize {
        self.dst_slots * self.stride
    }

    /// Offset of a source slot in the source MR.
    pub fn src(&self, qp: usize, slot: usize) -> usize {
        (qp * self.src_slots + slot % self.src_slots) * self.stride
    }

    /// Offset of a destination slot in QP `qp`'s destination MR (the same for every QP).
    pub fn dst(&self, _qp: usize, slot: usize) -> usize {
        (slot % self.dst_slots) * self.stride
    }

    /// The whole destination region of a QP: all of its destination MR.
    pub fn dst_region(&self, _qp: usize) -> Range<usize> {
        0..self.dst_total()
    }

    /// The whole source region of a QP.
    pub fn src_region(&self, qp: usize) -> Range<usize> {
        let start = self.src(qp, 0);
        start..start + self.src_slots * self.stride
    }
}

/// Everything this side created.
pub struct Resources {
    pub pd: Pd,
    pub cq: Cq,
    pub channel: Option<CompChannel>,
    /// Every QP's source slots.
    pub src: Mr,
    /// Each QP's destination slots, one MR per QP.
    pub dst: Vec<Mr>,
    pub rights: Rights,
    pub qps: Vec<Qp>,
    pub psns: Vec<u32>,
    pub layout: Layout,
    /// Receives posted per QP (send tools): `-r`, or fewer with `--validate` (one slot each).
    pub rx_posted: u32,
}

impl Drop for Resources {
    /// Teardown in the order the hardware needs, spelled out rather than left to field order:
    /// the QPs first (no request of theirs, nor of the peer, can touch our memory any more),
    /// then — as the fields drop — the MR, the CQ and its channel, and the PD last (the `Arc`s
    /// of the safe layer keep each parent alive until its last child is gone anyway).
    fn drop(&mut self) {
        self.qps.clear();
    }
}

/// A connected run: the device, the resources, the peer and what was agreed.
pub struct Link {
    pub dev: LocalDev,
    pub res: Resources,
    /// What we told the peer.
    pub local: Endpoints,
    /// What the peer told us.
    pub remote: Endpoints,
    /// UD: one address handle per QP, towards the peer's QP of the same index.
    pub ahs: Vec<Ah>,
    pub path_mtu: Mtu,
    /// The message sizes of the run (one, or the sweep capped by both ports).
    pub sizes: Vec<u64>,
    /// Messages up to this many bytes are sent inline (0: never).
    pub inline_limit: u32,
    /// What the QP reports it may inline (`max_inline_data`, read back).
    pub granted_inline: u32,
    /// RDMA reads/atomics in flight per QP (`-o`, capped by both devices).
    pub outstanding: u32,
    /// `-R`: the rdma_cm connections of the QPs (dropped after them: declared last).
    pub cm: Option<crate::rdmacm::CmLink>,
}

/// How long any single completion may take: the QP's ack timeout times its retries, doubled,
/// at least 5 s (60 s when the ack timeout is infinite).
pub fn completion_timeout(cfg: &Config) -> Duration {
    const RETRY_CNT: u32 = 7;
    match verbs_lab::verbs::attrs::qp_timeout_duration(cfg.qp_timeout) {
        Some(t) => (t * (RETRY_CNT + 1) * 2).max(Duration::from_secs(5)),
        None => Duration::from_secs(60),
    }
}

/// Creates the resources for `cfg` on `dev`: buffers sized for messages of `max_size` bytes.
pub fn create_resources(cfg: &Config, dev: &LocalDev, max_size: u64) -> Result<Resources> {
    let ctx = &dev.ctx;
    let layout = Layout::new(cfg, max_size);
    let qps = cfg.qps as usize;
    let is_send = cfg.tool.kind == TestKind::Send;
    let rx_posted = if !is_send {
        0
    } else if cfg.validate {
        cfg.rx_depth.min(layout.dst_slots as u32)
    } else {
        cfg.rx_depth
    };

    let pd = ctx.alloc_pd().context("ibv_alloc_pd")?;
    let channel = if cfg.events {
        Some(
            ctx.create_comp_channel()
                .context("ibv_create_comp_channel (-e)")?,
        )
    } else {
        None
    };
    let cqe = (cfg.qps as usize) * (cfg.tx_depth as usize + rx_posted as usize) + 16;
    let max_cqe = dev.attr.max_cqe.max(1) as usize;
    if cqe > max_cqe {
        bail!(
            "{} completions in flight (-q {} x (tx depth {} + rx depth {})) exceed the {} a CQ \
             of {} holds; lower -q, -t or -r",
            cqe - 16,
            cfg.qps,
            cfg.tx_depth,
            rx_posted,
            max_cqe,
            ctx.name()
        );
    }
    let cq = ctx
        .create_cq(cqe as u32, channel.as_ref())
        .with_context(|| format!("ibv_create_cq with {cqe} entries"))?;
    let rights = rights(cfg);
    let bytes = layout.src_total(qps);
    let src = pd.reg_mr(bytes, rights.src).with_context(|| {
        format!(
            "ibv_reg_mr of the source slots, {bytes} bytes ({qps} QP(s) x {} slot(s) of {} \
             bytes), access {}",
            layout.src_slots, layout.stride, rights.src
        )
    })?;
    let dst = (0..qps)
        .map(|q| {
            pd.reg_mr(layout.dst_total(), rights.dst).with_context(|| {
                format!(
                    "ibv_reg_mr of QP {q}'s destination slots, {} bytes ({} slot(s) of {} \
                     bytes), access {}",
                    layout.dst_total(),
                    layout.dst_slots,
                    layout.stride,
                    rights.dst
                )
            })
        })
        .collect::<Result<Vec<Mr>>>()?;
    // Payload bytes that are not all zero, so a NIC that moved nothing is not mistaken for one
    // that moved zeros; --validate rewrites them per message.
    for q in 0..qps {
        for s in 0..layout.src_slots {
            let off = layout.src(q, s);
            crate::pattern::fill_body_mr(&src, off..off + layout.stride, q)
                .context("filling the send buffers")?;
        }
    }

    let inline_req = cfg.inline_request();
    let mut qp_list = Vec::with_capacity(qps);
    for q in 0..qps {
        let caps = |inline: u32| QpCaps {
            max_send_wr: cfg.tx_depth,
            max_recv_wr: if is_send { rx_posted.max(1) } else { 1 },
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: inline,
        };
        let attr = |inline| QpInitAttr {
            send_cq: &cq,
            recv_cq: &cq,
            qp_type: cfg.conn,
            caps: caps(inline),
            sq_sig_all: false,
        };
        let qp = match pd.create_qp(&attr(inline_req)) {
            Ok(qp) => qp,
            // The default inline request is a wish, not a requirement: a device that cannot
            // inline that much still runs the test, without inline.
            Err(e) if cfg.inline_size.is_none() && inline_req > 0 => pd
                .create_qp(&attr(0))
                .with_context(|| format!("ibv_create_qp (QP {q}; first attempt: {e})"))?,
            Err(e) => {
                return Err(e).with_context(|| {
                    format!(
                        "ibv_create_qp (QP {q}: {} tx {}, rx {}, inline {inline_req})",
                        cfg.conn, cfg.tx_depth, rx_posted
                    )
                })
            }
        };
        qp_list.push(qp);
    }
    let psns = (0..qps).map(|_| random_psn()).collect();
    Ok(Resources {
        pd,
        cq,
        channel,
        src,
        dst,
        rights,
        qps: qp_list,
        psns,
        layout,
        rx_posted,
    })
}

/// What we tell the peer about `res`.
pub fn local_endpoints(dev: &LocalDev, res: &Resources) -> Endpoints {
    let l = &res.layout;
    Endpoints {
        device: dev.ctx.name().to_string(),
        active_mtu: dev.port.active_mtu.unwrap_or(Mtu::Mtu1024).bytes(),
        max_msg_sz: dev.port.max_msg_sz,
        max_dest_rd_atomic: dev.attr.max_qp_rd_atom.clamp(0, 255) as u8,
        qkey: QKEY,
        qps: res
            .qps
            .iter()
            .enumerate()
            .map(|(q, qp)| QpEndpoint {
                qpn: qp.qpn(),
                psn: res.psns[q],
                lid: dev.port.lid,
                gid: dev.gid.entry.gid,
                rkey: res.dst[q].rkey(),
                addr: res.dst[q].addr() + l.dst(q, 0) as u64,
                slot_stride: l.stride as u32,
                slots: l.dst_slots as u32,
            })
            .collect(),
    }
}

fn chan<T>(r: std::result::Result<T, ChanError>) -> Result<T> {
    r.map_err(anyhow::Error::new)
}

/// Exchanges endpoints (the client first) and checks the peer's against our parameters.
pub fn exchange_endpoints(cfg: &Config, ch: &mut Channel, local: &Endpoints) -> Result<Endpoints> {
    let what = format!("the {}'s endpoints", ch.peer_name());
    let recv = |ch: &mut Channel| -> Result<Endpoints> {
        match chan(ch.recv_skipping_heartbeats(&what))? {
            Msg::Endpoints(e) => Ok(e),
            other => Err(anyhow::Error::new(ChanError::Unexpected {
                what: "ENDPOINTS".into(),
                got: other.name().into(),
            })),
        }
    };
    let remote = if cfg.is_server() {
        let r = recv(ch)?;
        chan(ch.send(&Msg::Endpoints(local.clone())))?;
        r
    } else {
        chan(ch.send(&Msg::Endpoints(local.clone())))?;
        recv(ch)?
    };
    if remote.qps.len() != cfg.qps as usize {
        bail!(
            "the {} sent {} QP endpoints, but -q is {} (protocol error)",
            ch.peer_name(),
            remote.qps.len(),
            cfg.qps
        );
    }
    Ok(remote)
}

/// Connects every QP to its peer (RC/UC: INIT → RTR → RTS; UD: INIT → RTR → RTS and an address
/// handle), and works out the path MTU, the sizes, the inline limit and the read depth.
pub fn connect(
    cfg: &Config,
    dev: LocalDev,
    res: Resources,
    local: Endpoints,
    remote: Endpoints,
    cm_listen: Option<crate::rdmacm::CmListen>,
) -> Result<Link> {
    let peer_mtu = Mtu::from_bytes(remote.active_mtu).unwrap_or(Mtu::Mtu1024);
    let our_mtu = dev.port.active_mtu.unwrap_or(Mtu::Mtu1024);
    let active = our_mtu.min(peer_mtu);
    let path_mtu = match cfg.mtu {
        None => active,
        Some(m) if m <= active => m,
        Some(m) => bail!(
            "-m {m}: larger than the active MTU ({} here {our_mtu}, the peer's {} {peer_mtu})",
            dev.ctx.name(),
            remote.device
        ),
    };

    // Sizes: the sweep stops at the smaller port limit (and one packet on UD).
    let mut cap = u64::from(dev.port.max_msg_sz.min(remote.max_msg_sz));
    if cfg.conn == QpType::Ud {
        cap = cap.min(u64::from(path_mtu.bytes()));
    }
    let sizes = cfg.sizes.list(cap);
    if sizes.is_empty() {
        bail!("no message size fits the ports' limit of {cap} bytes");
    }
    if let crate::params::Sizes::Single(s) = cfg.sizes {
        if s > cap {
            if cfg.conn == QpType::Ud && s > u64::from(path_mtu.bytes()) {
                bail!(
                    "-s {s}: a UD message must fit one packet, and the path MTU is {path_mtu}; \
                     use -s {path_mtu} or less (or -c RC)"
                );
            }
            bail!(
                "-s {s} is larger than the largest message of the peer's port ({} max_msg_sz {})",
                remote.device,
                remote.max_msg_sz
            );
        }
    }

    check_remote_slots(cfg, &remote, *sizes.last().unwrap_or(&0))?;

    let needs_rd = matches!(cfg.tool.kind, TestKind::Read | TestKind::Atomic);
    let ours_accept = dev.attr.max_qp_rd_atom.clamp(1, 255) as u8;
    let init_max = dev.attr.max_qp_init_rd_atom.clamp(1, 255) as u32;
    let outstanding = cfg
        .outstanding
        .unwrap_or(init_max)
        .min(init_max)
        .min(u32::from(remote.max_dest_rd_atomic.max(1)))
        .max(1);

    let opts = ConnectOpts {
        port_num: cfg.ib_port,
        sgid_index: dev.gid.entry.index as u8,
        path_mtu,
        access: res.rights.qp,
        timeout: cfg.qp_timeout,
        retry_cnt: verbs_lab::connect::RETRY_CNT,
        rnr_retry: 7,
        min_rnr_timer: 12,
        max_rd_atomic: if needs_rd { outstanding as u8 } else { 1 },
        sl: cfg.sl,
        hop_limit: 64,
        traffic_class: cfg.tclass.unwrap_or(0),
    };
    let mut ahs = Vec::new();
    for (q, qp) in res.qps.iter().enumerate() {
        let r = &remote.qps[q];
        let l = &local.qps[q];
        let what = || format!("connecting QP {q} ({:#x} → peer QP {:#x})", l.qpn, r.qpn);
        if cfg.conn == QpType::Ud {
            qp.modify_to_init(&InitAttr {
                qkey: QKEY,
                ..init_attr(&opts)
            })
            .with_context(what)?;
            qp.modify_to_rtr(None).with_context(what)?;
            qp.modify_to_rts(&RtsAttr {
                sq_psn: l.psn,
                ..rts_attr(&opts, &endpoint(l))
            })
            .with_context(what)?;
            let grh = (dev.port.link_layer == LinkLayer::Ethernet || !r.gid.is_zero()).then_some(
                GlobalRoute {
                    dgid: r.gid,
                    sgid_index: opts.sgid_index,
                    hop_limit: opts.hop_limit,
                    traffic_class: opts.traffic_class,
                    flow_label: flow_label(cfg, q),
                },
            );
            check_grh(cfg, grh.is_some())?;
            let ah = Ah::create(
                &res.pd,
                &AhAttr {
                    dlid: r.lid,
                    sl: opts.sl,
                    port_num: cfg.ib_port,
                    grh,
                },
            )
            .with_context(|| format!("ibv_create_ah towards the peer's QP {:#x}", r.qpn))?;
            ahs.push(ah);
        } else if cfg.rdma_cm.is_some() {
            // -R: the connection manager moves the QPs below, after this loop.
            check_grh(cfg, true)?;
        } else {
            qp.modify_to_init(&init_attr(&opts)).with_context(what)?;
            let mut rtr = rtr_attr(&opts, &endpoint(r));
            rtr.max_dest_rd_atomic = ours_accept;
            check_grh(cfg, rtr.ah.grh.is_some())?;
            if let Some(g) = rtr.ah.grh.as_mut() {
                g.flow_label = flow_label(cfg, q);
            }
            qp.modify_to_rtr(Some(&rtr)).with_context(what)?;
            qp.modify_to_rts(&rts_attr(&opts, &endpoint(l)))
                .with_context(what)?;
        }
    }

    let cm = match cfg.rdma_cm {
        None => None,
        Some(_) => {
            let setup = crate::rdmacm::Setup {
                access: res.rights.qp,
                path_mtu,
                accept_rd: ours_accept,
                init_rd: opts.max_rd_atomic,
            };
            let p = crate::rdmacm::Parties {
                cfg,
                dev: &dev,
                qps: &res.qps,
                local: &local,
                remote: &remote,
                setup: &setup,
            };
            Some(match cm_listen {
                Some(l) => crate::rdmacm::accept_all(&p, l)?,
                None if cfg.is_server() => bail!("internal: -R server without its listener"),
                None => crate::rdmacm::connect_client(&p)?,
            })
        }
    };

    let granted_inline = res.qps.first().map_or(0, |qp| qp.caps().max_inline_data);
    let inline_ok = matches!(cfg.tool.kind, TestKind::Write | TestKind::Send);
    let inline_limit = match (inline_ok, cfg.inline_size) {
        (false, _) => 0,
        (true, Some(i)) => i.min(granted_inline),
        (true, None) => granted_inline,
    };
    let link = Link {
        dev,
        res,
        local,
        remote,
        ahs,
        path_mtu,
        sizes,
        inline_limit,
        granted_inline,
        outstanding: if needs_rd { outstanding } else { 0 },
        cm,
    };
    if cfg.qos_given() {
        for line in qos_readback(cfg, &link)? {
            eprintln!("{}: {line}", cfg.tool.name());
        }
    }
    Ok(link)
}

/// Refuses a peer whose advertised slots cannot hold our largest message (RDMA tests: our
/// requests address `slot * stride` of its region, so a stride below the message size would
/// overlap slots), that advertises no slot, or whose region would wrap the address space.
pub fn check_remote_slots(cfg: &Config, remote: &Endpoints, largest: u64) -> Result<()> {
    if cfg.tool.kind == TestKind::Send {
        return Ok(()); // the peer's receive buffers are its own business
    }
    for (q, r) in remote.qps.iter().enumerate() {
        if r.slots == 0 || u64::from(r.slot_stride) < largest {
            bail!(
                "the peer's QP {q} offers {} slot(s) of {} bytes, too small for messages of \
                 {largest} bytes (protocol error: is the peer a verbs-lab tool of this release?)",
                r.slots,
                r.slot_stride
            );
        }
        let span = u64::from(r.slots) * u64::from(r.slot_stride);
        if r.addr.checked_add(span).is_none() {
            bail!(
                "the peer's QP {q} advertises {span} bytes at {:#x}, beyond the end of the \
                 address space (protocol error)",
                r.addr
            );
        }
    }
    Ok(())
}

/// `--flow_label`: QP `q` takes the list's entry `q mod len`, as perftest (0 without the flag).
pub fn flow_label(cfg: &Config, q: usize) -> u32 {
    match cfg.flow_labels.len() {
        0 => 0,
        n => cfg.flow_labels[q % n],
    }
}

/// `--tclass` and `--flow_label` live in the GRH: refused on a path without one (InfiniBand
/// without a GID, `-x`).
fn check_grh(cfg: &Config, has_grh: bool) -> Result<()> {
    if !has_grh && (cfg.tclass.is_some() || !cfg.flow_labels.is_empty()) {
        bail!(
            "--tclass and --flow_label are fields of the GRH, and this path has none (an \
             InfiniBand port without a GID); give -x GID_INDEX so that the QPs use a GRH"
        );
    }
    Ok(())
}

/// What the device holds in each RC/UC QP's address vector, read back with `ibv_query_qp(3)`:
/// one line per QP, e.g. `QP 0 (0x11) address vector: sl 3, traffic class 32, flow label
/// 0x12345, hop limit 64`. UD QPs have no address vector of their own (their address handles
/// carry it) and are reported as such.
pub fn qos_readback(cfg: &Config, link: &Link) -> Result<Vec<String>> {
    link.res
        .qps
        .iter()
        .enumerate()
        .map(|(q, qp)| {
            if qp.qp_type() == QpType::Ud {
                return Ok(format!(
                    "QP {q} ({:#x}): UD, the address vector is in its address handle (sl {}, \
                     traffic class {}, flow label {:#x} given)",
                    qp.qpn(),
                    cfg.sl,
                    cfg.tclass.unwrap_or(0),
                    flow_label(cfg, q)
                ));
            }
            let av = qp
                .av()
                .with_context(|| format!("reading back QP {q}'s address vector"))?;
            let (tc, fl, hl) = av
                .grh
                .map_or((0, 0, 0), |g| (g.traffic_class, g.flow_label, g.hop_limit));
            // What was set and the device does not hold is said, not hidden (rxe keeps no SL:
            // on RoCE the SL only selects a VLAN priority, and rxe has none).
            let mut lost = Vec::new();
            if av.sl != cfg.sl {
                lost.push(format!("-S {}", cfg.sl));
            }
            if let Some(t) = cfg.tclass.filter(|t| *t != tc) {
                lost.push(format!("--tclass {t}"));
            }
            if !cfg.flow_labels.is_empty() && flow_label(cfg, q) != fl {
                lost.push(format!("--flow_label {:#x}", flow_label(cfg, q)));
            }
            Ok(format!(
                "QP {q} ({:#x}) address vector (ibv_query_qp): sl {}, traffic class {tc}, flow \
                 label {fl:#x}, hop limit {hl}{}{}",
                qp.qpn(),
                av.sl,
                if av.grh.is_none() { ", no GRH" } else { "" },
                if lost.is_empty() {
                    String::new()
                } else {
                    format!(" (set: {}; the device does not hold it)", lost.join(", "))
                }
            ))
        })
        .collect()
}

fn endpoint(e: &QpEndpoint) -> Endpoint {
    Endpoint {
        lid: e.lid,
        qpn: e.qpn,
        psn: e.psn,
        gid: e.gid,
    }
}
