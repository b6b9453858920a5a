//! The exchange of endpoints with the peer, and the QPs walked to RTS (RC/UC), or to RTS with
//! an address handle each (UD), or handed to rdma_cm (`-R`); then what both sides' limits
//! allow (path MTU, sizes, inline, read depth) and, with a QoS option, the address vectors
//! read back.

use anyhow::{bail, Context as _, Result};
use verbs_lab::connect::{self, choose_mtu, port_mtu, ConnectOpts, Endpoint};
use verbs_lab::verbs::{Ah, AhAttr, GlobalRoute, LinkLayer, Mtu, QpType};

use super::{Agreed, Link, Resources, QKEY};
use crate::conn::device::LocalDev;
use crate::measure::result::TestKind;
use crate::params::Config;
use crate::proto::{ChanError, Channel, Endpoints, Msg, QpEndpoint};

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
    cm_listen: Option<crate::conn::rdmacm::CmListen>,
) -> Result<Link> {
    let path_mtu = path_mtu(cfg, &dev, &remote)?;
    let sizes = run_sizes(cfg, &dev, &remote, path_mtu)?;
    check_remote_slots(cfg, &remote, *sizes.last().unwrap_or(&0))?;
    let depth = ReadDepth::of(cfg, &dev, &remote);
    let opts = ConnectOpts {
        access: res.rights.qp,
        timeout: cfg.qp_timeout,
        rnr_retry: 7,
        min_rnr_timer: 12,
        max_rd_atomic: if depth.needs_rd {
            depth.outstanding as u8
        } else {
            1
        },
        // What our QPs accept: what the device allows, whatever we initiate.
        max_dest_rd_atomic: Some(depth.ours_accept),
        sl: cfg.qos.sl,
        hop_limit: 64,
        traffic_class: cfg.qos.tclass.unwrap_or(0),
        ..ConnectOpts::for_gid(cfg.device.ib_port, &dev.gid.entry, path_mtu)
            .context("the GID (-x)")?
    };
    let ahs = bring_up(cfg, &dev, &res, &local, &remote, &opts)?;
    let cm = match cfg.rdma_cm {
        None => None,
        Some(_) => {
            let setup = crate::conn::rdmacm::Setup {
                access: res.rights.qp,
                path_mtu,
                accept_rd: depth.ours_accept,
                init_rd: opts.max_rd_atomic,
            };
            let p = crate::conn::rdmacm::Parties {
                cfg,
                dev: &dev,
                qps: &res.qps,
                local: &local,
                remote: &remote,
                setup: &setup,
            };
            Some(match cm_listen {
                Some(l) => crate::conn::rdmacm::accept_all(&p, l)?,
                None if cfg.is_server() => bail!("internal: -R server without its listener"),
                None => crate::conn::rdmacm::connect_client(&p)?,
            })
        }
    };

    let granted_inline = res.qps.first().map_or(0, |qp| qp.caps().max_inline_data);
    let inline_ok = matches!(cfg.tool.kind, TestKind::Write | TestKind::Send);
    // Unasked, what the QP grants goes inline — except on a software device, which grants some
    // (rxe: 16 bytes for none asked) but where inline is one more copy (Config::inline_request).
    let software = dev.attr.software_driver().is_some();
    let inline_limit = match (inline_ok, cfg.asked.inline_size) {
        (false, _) => 0,
        (true, Some(i)) => i.min(granted_inline),
        (true, None) if software => 0,
        (true, None) => granted_inline,
    };
    let link = Link {
        dev,
        res,
        local,
        remote,
        ahs,
        agreed: Agreed {
            path_mtu,
            sizes,
            inline_limit,
            outstanding: if depth.needs_rd { depth.outstanding } else { 0 },
        },
        cm,
    };
    if cfg.qos_given() {
        for line in qos_readback(cfg, &link)? {
            verbs_lab::eprintln_whole!("{}: {line}", cfg.tool.name());
        }
    }
    Ok(link)
}

/// The path MTU: the smaller active MTU of the two ports, or `-m` when it fits (`choose_mtu`).
fn path_mtu(cfg: &Config, dev: &LocalDev, remote: &Endpoints) -> Result<Mtu> {
    let (ours, peers) = (dev.port.active_mtu, Mtu::from_bytes(remote.active_mtu));
    choose_mtu(&[ours, peers], cfg.asked.mtu).map_err(|e| {
        anyhow::anyhow!(
            "-m {}: larger than the active MTU ({} here {}, the peer's {} {})",
            e.asked,
            dev.ctx.name(),
            port_mtu(ours),
            remote.device,
            port_mtu(peers)
        )
    })
}

/// The message sizes of the run: the sweep stops at the smaller port limit (and one packet on
/// UD); a single `-s` beyond it is refused; UD without `-s` runs the path MTU (with a note).
fn run_sizes(cfg: &Config, dev: &LocalDev, remote: &Endpoints, path_mtu: Mtu) -> Result<Vec<u64>> {
    let mut cap = u64::from(dev.port.max_msg_sz.min(remote.max_msg_sz));
    if cfg.conn == QpType::Ud {
        cap = cap.min(u64::from(path_mtu.bytes()));
    }
    let sizes = cfg.sizes.list(cap);
    if sizes.is_empty() {
        bail!("no message size fits the ports' limit of {cap} bytes");
    }
    // Said once per run: by the process, or by worker 0 of --procs.
    let first = cfg.procs.worker.as_ref().map_or(true, |w| w.index == 0);
    if cfg.sizes == crate::params::Sizes::PathMtu && first {
        verbs_lab::eprintln_whole!(
            "{}: note: -c UD without -s: the message size is the path MTU, {} bytes (a UD \
             message fits one packet; perftest does the same)",
            cfg.tool.name(),
            sizes[0]
        );
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
    Ok(sizes)
}

/// RDMA reads and atomics in flight: what our QPs accept, and what they initiate (`-o`, capped
/// by our device and by what the peer accepts).
struct ReadDepth {
    needs_rd: bool,
    ours_accept: u8,
    outstanding: u32,
}

impl ReadDepth {
    fn of(cfg: &Config, dev: &LocalDev, remote: &Endpoints) -> ReadDepth {
        let init_max = dev.attr.max_qp_init_rd_atom.clamp(1, 255) as u32;
        ReadDepth {
            needs_rd: matches!(cfg.tool.kind, TestKind::Read | TestKind::Atomic),
            ours_accept: dev.attr.max_qp_rd_atom.clamp(1, 255) as u8,
            outstanding: cfg
                .asked
                .outstanding
                .unwrap_or(init_max)
                .min(init_max)
                .min(u32::from(remote.max_dest_rd_atomic.max(1)))
                .max(1),
        }
    }
}

/// Walks every QP to RTS towards its peer QP of the same index with the one bring-up,
/// `--flow_label` set per QP (UD: `bring_up_ud`, and makes its address handle, returned); with
/// `-R` leaves the QPs to rdma_cm.
fn bring_up(
    cfg: &Config,
    dev: &LocalDev,
    res: &Resources,
    local: &Endpoints,
    remote: &Endpoints,
    opts: &ConnectOpts,
) -> Result<Vec<Ah>> {
    let mut ahs = Vec::new();
    for (q, qp) in res.qps.iter().enumerate() {
        let (l, r) = (&local.qps[q], &remote.qps[q]);
        let what = || format!("connecting QP {q} ({:#x} → peer QP {:#x})", l.qpn, r.qpn);
        let opts = ConnectOpts {
            flow_label: cfg.qos.flow_label(q),
            ..*opts
        };
        if cfg.conn == QpType::Ud {
            connect::bring_up_ud(qp, l.psn, QKEY, &opts).with_context(what)?;
            ahs.push(ud_address(cfg, dev, res, &opts, r)?);
        } else if cfg.rdma_cm.is_some() {
            // -R: the connection manager moves the QPs below, after this loop.
            check_grh(cfg, true)?;
        } else {
            let (l, r) = (endpoint(l), endpoint(r));
            check_grh(cfg, r.needs_grh())?;
            connect::bring_up(qp, &l, &r, &opts).with_context(what)?;
        }
    }
    Ok(ahs)
}

/// UD: the address handle towards the peer's QP `r` (with a GRH on Ethernet, or when the peer
/// has a GID).
fn ud_address(
    cfg: &Config,
    dev: &LocalDev,
    res: &Resources,
    opts: &ConnectOpts,
    r: &QpEndpoint,
) -> Result<Ah> {
    let grh =
        (dev.port.link_layer == LinkLayer::Ethernet || !r.gid.is_zero()).then_some(GlobalRoute {
            dgid: r.gid,
            sgid_index: opts.sgid_index,
            hop_limit: opts.hop_limit,
            traffic_class: opts.traffic_class,
            flow_label: opts.flow_label,
        });
    check_grh(cfg, grh.is_some())?;
    Ah::create(
        &res.pd,
        &AhAttr {
            dlid: r.lid,
            sl: opts.sl,
            port_num: cfg.device.ib_port,
            grh,
        },
    )
    .with_context(|| format!("ibv_create_ah towards the peer's QP {:#x}", r.qpn))
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

/// `--tclass` and `--flow_label` live in the GRH: refused on a path without one (InfiniBand
/// without a GID, `-x`).
fn check_grh(cfg: &Config, has_grh: bool) -> Result<()> {
    if !has_grh && cfg.qos.grh_given() {
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
                    cfg.qos.sl,
                    cfg.qos.tclass.unwrap_or(0),
                    cfg.qos.flow_label(q)
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
            if av.sl != cfg.qos.sl {
                lost.push(format!("-S {}", cfg.qos.sl));
            }
            if let Some(t) = cfg.qos.tclass.filter(|t| *t != tc) {
                lost.push(format!("--tclass {t}"));
            }
            if !cfg.qos.flow_labels.is_empty() && cfg.qos.flow_label(q) != fl {
                lost.push(format!("--flow_label {:#x}", cfg.qos.flow_label(q)));
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
