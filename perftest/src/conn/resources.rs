//! What this side creates for a run: the protection domain, the CQ (and its channel with
//! `-e`), the source and destination regions, the QPs; and the endpoints that tell the peer
//! about them.

use anyhow::{bail, Context as _, Result};
use verbs_lab::connect::{port_mtu, random_psn};
use verbs_lab::verbs::{AccessFlags, CompChannel, Cq, Mr, Pd, Qp, QpCaps, QpInitAttr, RecvWr, Srq};

use super::layout::{rights, Layout, Rights};
use super::QKEY;
use crate::conn::device::LocalDev;
use crate::params::Config;
use crate::proto::{Endpoints, QpEndpoint};

/// Everything this side created.
pub struct Resources {
    pub pd: Pd,
    pub cq: Cq,
    pub channel: Option<CompChannel>,
    /// The registered slots the run's messages come from and land in.
    pub bufs: Buffers,
    pub rights: Rights,
    pub qps: Vec<Qp>,
    /// `--use-srq`: the shared receive queue every QP's receives come from.
    pub srq: Option<Srq>,
    /// Receives posted per QP (send tools, and write tools with `--write_with_imm`): `-r`, or
    /// fewer with `--validate` (one slot each). With `--use-srq` the shared queue holds this
    /// many per QP, each naming that QP's slots.
    pub rx_posted: u32,
}

impl Resources {
    /// Where QP `q`'s receives are posted: its own receive queue, or the shared one.
    pub fn recv_queue(&self, q: usize) -> RecvQueue<'_> {
        RecvQueue::of(&self.qps[q], self.srq.as_ref())
    }
}

/// A queue receives are posted to: a QP's own, or a shared receive queue (`--use-srq`).
#[derive(Clone, Copy)]
pub enum RecvQueue<'a> {
    Qp(&'a Qp),
    Srq(&'a Srq),
}

impl<'a> RecvQueue<'a> {
    /// `qp`'s receive queue, or `srq` when its receives come from there.
    pub fn of(qp: &'a Qp, srq: Option<&'a Srq>) -> RecvQueue<'a> {
        match srq {
            Some(s) => RecvQueue::Srq(s),
            None => RecvQueue::Qp(qp),
        }
    }

    /// `ibv_post_recv(3)` or `ibv_post_srq_recv(3)`.
    pub fn post(&self, wrs: &[RecvWr<'_>]) -> verbs_lab::verbs::Result<()> {
        match self {
            RecvQueue::Qp(qp) => qp.post_recv(wrs),
            RecvQueue::Srq(srq) => srq.post_recv(wrs),
        }
    }
}

impl<'a> From<&'a Qp> for RecvQueue<'a> {
    fn from(qp: &'a Qp) -> RecvQueue<'a> {
        RecvQueue::Qp(qp)
    }
}

/// The run's memory: the source and destination regions and where each QP's slots lie in them
/// (see [the module](super)). The measuring loops read the three together.
pub struct Buffers {
    /// Every QP's source slots: one MR, or one per QP with `--mr_per_qp` (see [`src_mr`]).
    pub src: Vec<Mr>,
    /// Each QP's destination slots, one MR per QP.
    pub dst: Vec<Mr>,
    pub layout: Layout,
}

/// The source MR that holds QP `q`'s slots, of `src` ([`Buffers::src`]).
pub fn src_mr(src: &[Mr], q: usize) -> &Mr {
    &src[if src.len() == 1 { 0 } else { q }]
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

/// Creates the resources for `cfg` on `dev`: buffers sized for messages of `max_size` bytes.
pub fn create_resources(cfg: &Config, dev: &LocalDev, max_size: u64) -> Result<Resources> {
    let ctx = &dev.ctx;
    let layout = Layout::new(cfg, max_size);
    let rx_posted = rx_posted(cfg, &layout);

    let pd = ctx.alloc_pd().context("ibv_alloc_pd")?;
    let channel = if cfg.events {
        Some(
            ctx.create_comp_channel()
                .context("ibv_create_comp_channel (-e)")?,
        )
    } else {
        None
    };
    let cq = create_cq(cfg, dev, rx_posted, channel.as_ref())?;
    let rights = rights(cfg);
    let bufs = register_slots(cfg, &pd, layout, &rights)?;
    let srq = if cfg.use_srq {
        let max_wr = rx_posted.max(1).saturating_mul(cfg.qps);
        Some(pd.create_srq(max_wr, 1).with_context(|| {
            format!(
                "ibv_create_srq (--use-srq) of {max_wr} receives ({} QP(s) x {rx_posted})",
                cfg.qps
            )
        })?)
    } else {
        None
    };
    let software = dev.attr.software_driver().is_some();
    let qps = create_qps(cfg, &pd, &cq, srq.as_ref(), rx_posted, software)?;
    Ok(Resources {
        pd,
        cq,
        channel,
        bufs,
        rights,
        qps,
        srq,
        rx_posted,
    })
}

/// Receives posted per QP: none but for the send tools; `-r`, or with `--validate` no more than
/// the slots (one each).
fn rx_posted(cfg: &Config, layout: &Layout) -> u32 {
    if !cfg.posts_receives() {
        0
    } else if cfg.validate {
        cfg.queues.rx_depth.min(layout.dst_slots as u32)
    } else {
        cfg.queues.rx_depth
    }
}

/// The one CQ of every QP, sized for every request and receive in flight (refused beyond what
/// the device holds).
fn create_cq(
    cfg: &Config,
    dev: &LocalDev,
    rx_posted: u32,
    channel: Option<&CompChannel>,
) -> Result<Cq> {
    let cqe = (cfg.qps as usize) * (cfg.queues.tx_depth as usize + rx_posted as usize) + 16;
    let max_cqe = dev.attr.max_cqe.max(1) as usize;
    if cqe > max_cqe {
        bail!(
            "{} completions in flight (-q {} x (tx depth {} + rx depth {})) exceed the {} a CQ \
             of {} holds; lower -q, -t or -r",
            cqe - 16,
            cfg.qps,
            cfg.queues.tx_depth,
            rx_posted,
            max_cqe,
            dev.ctx.name()
        );
    }
    dev.ctx
        .create_cq(cqe as u32, channel)
        .with_context(|| format!("ibv_create_cq with {cqe} entries"))
}

/// Registers the source slots (one MR, or one per QP with `--mr_per_qp`) and each QP's
/// destination slots (one MR per QP) with their least rights, and fills the source with a
/// payload. With `--use_hugepages` every buffer is mapped from huge pages.
fn register_slots(cfg: &Config, pd: &Pd, layout: Layout, rights: &Rights) -> Result<Buffers> {
    let qps = cfg.qps as usize;
    let huge = cfg.use_hugepages.then(|| huge_pages(&layout, qps));
    let reg = |len: usize, access: AccessFlags| {
        if let Some(h) = &huge {
            pd.reg_mr_huge(len, access).context(h.clone())
        } else {
            pd.reg_mr(len, access).map_err(anyhow::Error::new)
        }
    };
    let bytes = layout.src_total(qps);
    let per = if layout.src_per_qp { 1 } else { qps };
    let src = (0..layout.src_mrs(qps))
        .map(|_| {
            reg(bytes, rights.src).with_context(|| {
                format!(
                    "ibv_reg_mr of the source slots, {bytes} bytes ({per} QP(s) x {} slot(s) \
                     of {} bytes), access {}",
                    layout.src_slots, layout.stride, rights.src
                )
            })
        })
        .collect::<Result<Vec<Mr>>>()?;
    let dst = (0..qps)
        .map(|q| {
            reg(layout.dst_total(), rights.dst).with_context(|| {
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
            crate::pattern::fill_body_mr(src_mr(&src, q), off..off + layout.stride, q)
                .context("filling the send buffers")?;
        }
    }
    Ok(Buffers { src, dst, layout })
}

/// `--use_hugepages`: what this side's buffers take from the pool, for the error that says how
/// many pages to reserve.
fn huge_pages(layout: &Layout, qps: usize) -> String {
    let page = verbs_lab::verbs::mr::huge_page_size();
    let src = layout.src_mrs(qps) * layout.src_total(qps).div_ceil(page);
    let dst = qps * layout.dst_total().div_ceil(page);
    format!(
        "--use_hugepages: this side maps {} buffer(s) from huge pages, {} page(s) of {} KiB in \
         all (a peer on the same host as many again)",
        layout.src_mrs(qps) + qps,
        src + dst,
        page / 1024
    )
}

/// What each QP is created with. The send queue holds the tx depth (`-t`) and no more, as
/// perftest's (`max_send_wr` = its tx depth): the header's TX depth is the QP's send queue. A
/// request posted unsignaled keeps its slot until a later signaled one completes and that
/// completion is polled, so the loops signal at least one request in every tx depth
/// ([`QueueShape::signal_period`](crate::params::QueueShape::signal_period)) and never have
/// more than the depth posted and not yet retired by a completion taken.
pub fn qp_caps(cfg: &Config, rx_posted: u32, inline: u32) -> QpCaps {
    QpCaps {
        max_send_wr: cfg.queues.tx_depth,
        max_recv_wr: if cfg.posts_receives() {
            rx_posted.max(1)
        } else {
            1
        },
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: inline,
    }
}

/// The `-q` QPs on `cq` of a device that is `software` or not. The default inline request of
/// the latency tools is a wish: a device that cannot inline that much gets QPs without inline.
fn create_qps(
    cfg: &Config,
    pd: &Pd,
    cq: &Cq,
    srq: Option<&Srq>,
    rx_posted: u32,
    software: bool,
) -> Result<Vec<Qp>> {
    let inline_req = cfg.inline_request(software);
    let attr = |inline| QpInitAttr {
        send_cq: cq,
        recv_cq: cq,
        qp_type: cfg.conn,
        caps: qp_caps(cfg, rx_posted, inline),
        sq_sig_all: false,
    };
    let create = |a: &QpInitAttr<'_>| match srq {
        Some(s) => pd.create_qp_with_srq(a, s),
        None => pd.create_qp(a),
    };
    let mut qp_list = Vec::with_capacity(cfg.qps as usize);
    for q in 0..cfg.qps as usize {
        let qp = match create(&attr(inline_req)) {
            Ok(qp) => qp,
            // The default inline request is a wish, not a requirement: a device that cannot
            // inline that much still runs the test, without inline.
            Err(e) if cfg.asked.inline_size.is_none() && inline_req > 0 => create(&attr(0))
                .with_context(|| format!("ibv_create_qp (QP {q}; first attempt: {e})"))?,
            Err(e) => {
                return Err(e).with_context(|| {
                    format!(
                        "ibv_create_qp (QP {q}: {} tx {}, rx {}, inline {inline_req})",
                        cfg.conn, cfg.queues.tx_depth, rx_posted
                    )
                })
            }
        };
        qp_list.push(qp);
    }
    Ok(qp_list)
}

/// What we tell the peer about `res`: with each QP's first PSN, drawn here at random.
pub fn local_endpoints(dev: &LocalDev, res: &Resources) -> Endpoints {
    let l = &res.bufs.layout;
    Endpoints {
        device: dev.ctx.name().to_string(),
        active_mtu: port_mtu(dev.port.active_mtu).bytes(),
        max_msg_sz: dev.port.max_msg_sz,
        max_dest_rd_atomic: dev.attr.max_qp_rd_atom.clamp(0, 255) as u8,
        qkey: QKEY,
        qps: res
            .qps
            .iter()
            .enumerate()
            .map(|(q, qp)| QpEndpoint {
                qpn: qp.qpn(),
                psn: random_psn(),
                lid: dev.port.lid,
                gid: dev.gid.entry.gid,
                rkey: res.bufs.dst[q].rkey(),
                addr: res.bufs.dst[q].addr() + l.dst(q, 0) as u64,
                slot_stride: l.stride as u32,
                slots: l.dst_slots as u32,
            })
            .collect(),
    }
}
