//! Bringing a connected QP (RC or UC) up once both sides know each other's endpoint.
//!
//! Lesson 03 walks these transitions one by one with every attribute explained; later lessons,
//! the tools and the collectives call [`bring_up`] to do the same thing in one step (or its two
//! halves, [`to_init`] and [`to_rts`], to post receives in INIT between them), and
//! [`bring_up_ud`] for a UD QP (lesson 11 walks that one). What differs between them is an
//! option of [`ConnectOpts`], not another walk.

use std::fmt;

use crate::verbs::{
    AccessFlags, AhAttr, Context, GidChoice, GidEntry, GlobalRoute, InitAttr, Mtu, Qp, RtrAttr,
    RtsAttr, VerbsError,
};
use crate::verbs::{Gid, QpType, Result};

/// What one side must tell the other to connect a QP: the ibv_rc_pingpong quadruple.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoint {
    /// Local identifier of the port (InfiniBand); 0 on RoCE.
    pub lid: u16,
    /// QP number.
    pub qpn: u32,
    /// First packet sequence number this side will send (24 bits).
    pub psn: u32,
    /// The GID this side sends from.
    pub gid: Gid,
}

impl Endpoint {
    /// Whether the path to this endpoint carries a GRH: when it has a GID (RoCE always;
    /// InfiniBand when the peer sends from one).
    pub fn needs_grh(&self) -> bool {
        !self.gid.is_zero()
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "LID {:#06x}, QPN {:#08x}, PSN {:#08x}, GID {}",
            self.lid, self.qpn, self.psn, self.gid
        )
    }
}

/// The attributes of the transitions that are not part of an [`Endpoint`].
#[derive(Debug, Clone, Copy)]
pub struct ConnectOpts {
    pub port_num: u8,
    /// Index of our GID (what [`Context::choose_gid`] picked, or `-x`).
    pub sgid_index: u8,
    /// Path MTU: at most both ports' active MTU.
    pub path_mtu: Mtu,
    /// Remote operations we accept on this QP. The default is none: a side that lets its peer
    /// write, read or run atomics says so, and grants only that.
    pub access: AccessFlags,
    /// Ack timeout exponent (4.096 µs × 2^timeout). perftest uses 14 (~67 ms); under software
    /// emulation (QEMU TCG) 20 (~4.3 s) avoids spurious retry failures.
    pub timeout: u8,
    /// Retransmissions after an ack timeout before IBV_WC_RETRY_EXC_ERR; [`RETRY_CNT`] by
    /// default.
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
    /// Outstanding reads/atomics we initiate (RTS), and accept from the peer (RTR) unless
    /// `max_dest_rd_atomic` says otherwise.
    pub max_rd_atomic: u8,
    /// RTR's `max_dest_rd_atomic` when it differs from `max_rd_atomic`: how many of the peer's
    /// reads/atomics we answer at once (perftest: what our device allows, `max_qp_rd_atom`).
    pub max_dest_rd_atomic: Option<u8>,
    pub sl: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
    /// The GRH's flow label (20 bits; 0: none), on a path with a GRH. perftest's
    /// `--flow_label`, one per QP.
    pub flow_label: u32,
}

/// The retry count every verbs-lab QP connects with: 6, not the 7 that perftest and the
/// rdma-core examples use. The IB spec makes 7 a plain count (only `rnr_retry` 7 means "for
/// ever"), but rxe (SoftRoCE) never counts 7 down: a request to a peer whose QP is gone is
/// retransmitted for ever and no completion comes (measured in the guest with the peer killed:
/// retry_cnt 7 gave completer_retry_err +11, retry_exceeded_err +0 and no completion in 15 s;
/// retry_cnt 6 gave IBV_WC_RETRY_EXC_ERR after 7 s with retry_exceeded_err +1). With 6 a dead
/// peer ends in an error completion on every device, after 7 ack timeouts.
pub const RETRY_CNT: u8 = 6;

impl ConnectOpts {
    /// The defaults on port `port_num`, sending from `gid` (its index checked to fit the 8-bit
    /// `sgid_index`, [`crate::verbs::GidEntry::sgid_index`]) with `path_mtu` ([`choose_mtu`]).
    pub fn for_gid(port_num: u8, gid: &GidEntry, path_mtu: Mtu) -> Result<ConnectOpts> {
        Ok(ConnectOpts {
            port_num,
            sgid_index: gid.sgid_index()?,
            path_mtu,
            ..Default::default()
        })
    }
}

impl Default for ConnectOpts {
    fn default() -> Self {
        ConnectOpts {
            port_num: 1,
            sgid_index: 0,
            path_mtu: Mtu::Mtu1024,
            access: AccessFlags::EMPTY,
            timeout: 14,
            retry_cnt: RETRY_CNT,
            rnr_retry: 7,
            min_rnr_timer: 12,
            max_rd_atomic: 16,
            max_dest_rd_atomic: None,
            sl: 0,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
        }
    }
}

/// The INIT attributes `bring_up` uses.
pub fn init_attr(o: &ConnectOpts) -> InitAttr {
    InitAttr {
        port_num: o.port_num,
        pkey_index: 0,
        access: o.access,
        qkey: 0x1111_1111,
    }
}

/// The RTR attributes `bring_up` uses: the peer's QPN and PSN, the path to it (through its GID
/// when it has one, [`Endpoint::needs_grh`]).
pub fn rtr_attr(o: &ConnectOpts, remote: &Endpoint) -> RtrAttr {
    let grh = remote.needs_grh().then_some(GlobalRoute {
        dgid: remote.gid,
        sgid_index: o.sgid_index,
        hop_limit: o.hop_limit,
        traffic_class: o.traffic_class,
        flow_label: o.flow_label,
    });
    RtrAttr {
        path_mtu: o.path_mtu,
        dest_qpn: remote.qpn,
        rq_psn: remote.psn,
        max_dest_rd_atomic: o.max_dest_rd_atomic.unwrap_or(o.max_rd_atomic),
        min_rnr_timer: o.min_rnr_timer,
        ah: AhAttr {
            dlid: remote.lid,
            sl: o.sl,
            port_num: o.port_num,
            grh,
        },
    }
}

/// The RTS attributes `bring_up` uses.
pub fn rts_attr(o: &ConnectOpts, local: &Endpoint) -> RtsAttr {
    rts_from(o, local.psn)
}

/// The RTS attributes with our first PSN `psn`.
fn rts_from(o: &ConnectOpts, psn: u32) -> RtsAttr {
    RtsAttr {
        sq_psn: psn,
        timeout: o.timeout,
        retry_cnt: o.retry_cnt,
        rnr_retry: o.rnr_retry,
        max_rd_atomic: o.max_rd_atomic,
    }
}

/// RESET → INIT → RTR → RTS for an RC or UC QP, given both endpoints: [`to_init`], then
/// [`to_rts`].
pub fn bring_up(qp: &Qp, local: &Endpoint, remote: &Endpoint, o: &ConnectOpts) -> Result<()> {
    to_init(qp, o)?;
    to_rts(qp, local, remote, o)
}

/// RESET → INIT for an RC or UC QP ([`init_attr`]): bound to its port, granting `o.access`.
/// From here on it accepts receive requests, before it is connected.
pub fn to_init(qp: &Qp, o: &ConnectOpts) -> Result<()> {
    connected_only(qp)?;
    qp.modify_to_init(&init_attr(o))
}

/// INIT → RTR → RTS for an RC or UC QP towards `remote` ([`rtr_attr`], [`rts_attr`]).
pub fn to_rts(qp: &Qp, local: &Endpoint, remote: &Endpoint, o: &ConnectOpts) -> Result<()> {
    connected_only(qp)?;
    qp.modify_to_rtr(Some(&rtr_attr(o, remote)))?;
    qp.modify_to_rts(&rts_attr(o, local))
}

/// Refuses a UD QP: [`to_init`] and [`to_rts`] connect it to one peer, which UD has not.
fn connected_only(qp: &Qp) -> Result<()> {
    if qp.qp_type() == QpType::Ud {
        return Err(VerbsError::InvalidArgument(
            "bring_up connects RC/UC QPs; a UD QP needs no peer (bring_up_ud)".into(),
        ));
    }
    Ok(())
}

/// RESET → INIT → RTR → RTS for a UD QP, which has no peer: INIT takes the port and the Q_Key
/// `qkey` that incoming datagrams must carry, RTR nothing, RTS only our first PSN `psn`; each
/// send names its destination instead (an address handle). Lesson 11 walks these steps.
pub fn bring_up_ud(qp: &Qp, psn: u32, qkey: u32, o: &ConnectOpts) -> Result<()> {
    if qp.qp_type() != QpType::Ud {
        return Err(VerbsError::InvalidArgument(
            "bring_up_ud is for UD QPs; RC/UC QPs connect with bring_up".into(),
        ));
    }
    qp.modify_to_init(&InitAttr {
        qkey,
        ..init_attr(o)
    })?;
    qp.modify_to_rtr(None)?;
    // A UD QP takes only `sq_psn` at RTS: `modify_to_rts` passes no RC field on.
    qp.modify_to_rts(&rts_from(o, psn))
}

/// This side's endpoint for `qp` on `port_num`, sending from the chosen GID.
pub fn local_endpoint(
    ctx: &Context,
    port_num: u8,
    qp: &Qp,
    gid: &GidChoice,
    psn: u32,
) -> Result<Endpoint> {
    let port = ctx.query_port(port_num)?;
    Ok(Endpoint {
        lid: port.lid,
        qpn: qp.qpn(),
        psn: psn & 0xff_ffff,
        gid: gid.entry.gid,
    })
}

/// A random 24-bit packet sequence number (as ibv_rc_pingpong does).
pub fn random_psn() -> u32 {
    (random_u64() as u32) & 0xff_ffff
}

/// 64 random bits without a `rand` crate: the std hasher is randomly seeded per process, and
/// the time and the pid are mixed in.
pub fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    h.finish()
}

/// The MTU a port offers a path: its active MTU, or 1024 when the port does not say (the
/// default of `ibv_rc_pingpong` and perftest).
pub fn port_mtu(active: Option<Mtu>) -> Mtu {
    active.unwrap_or(Mtu::Mtu1024)
}

/// The largest MTU a path allows: the smallest active MTU of its `ports` (ours, and the peer's
/// when it told us), each as [`port_mtu`] counts it — so a port that does not say limits the
/// path to 1024, not to nothing.
pub fn path_mtu(ports: &[Option<Mtu>]) -> Mtu {
    ports
        .iter()
        .map(|p| port_mtu(*p))
        .min()
        .unwrap_or(Mtu::Mtu1024)
}

/// The path MTU to connect with: `asked` (`-m`) when it is given and no larger than
/// [`path_mtu`] of `ports`, that path MTU when it is not given.
pub fn choose_mtu(ports: &[Option<Mtu>], asked: Option<Mtu>) -> std::result::Result<Mtu, MtuError> {
    let limit = path_mtu(ports);
    match asked {
        None => Ok(limit),
        Some(m) if m <= limit => Ok(m),
        Some(asked) => Err(MtuError {
            asked,
            limit,
            ports: ports.len(),
        }),
    }
}

/// An MTU asked for that the path cannot carry ([`choose_mtu`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MtuError {
    /// What was asked for (`-m`).
    pub asked: Mtu,
    /// The largest MTU the path allows.
    pub limit: Mtu,
    /// How many ports the limit came from (1: only ours was known).
    pub ports: usize,
}

impl fmt::Display for MtuError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (asked, limit) = (self.asked, self.limit);
        if self.ports > 1 {
            write!(
                f,
                "MTU {asked} is larger than the smaller active MTU of the two ports, {limit}"
            )
        } else {
            write!(
                f,
                "MTU {asked} is larger than the port's active MTU {limit}"
            )
        }
    }
}

impl std::error::Error for MtuError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn psn_is_24_bits_and_varies() {
        let a: Vec<u32> = (0..8).map(|_| random_psn()).collect();
        assert!(a.iter().all(|p| *p <= 0xff_ffff));
        assert!(a.windows(2).any(|w| w[0] != w[1]));
    }

    #[test]
    fn mtu_choice() {
        use Mtu::*;
        assert_eq!(choose_mtu(&[Some(Mtu4096)], None), Ok(Mtu4096));
        assert_eq!(choose_mtu(&[Some(Mtu4096)], Some(Mtu1024)), Ok(Mtu1024));
        let e = choose_mtu(&[Some(Mtu1024)], Some(Mtu4096)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "MTU 4096 is larger than the port's active MTU 1024"
        );
        // Both ports: the smaller one limits the path, and -m may not exceed it.
        assert_eq!(path_mtu(&[Some(Mtu4096), Some(Mtu2048)]), Mtu2048);
        assert_eq!(
            choose_mtu(&[Some(Mtu4096), Some(Mtu2048)], Some(Mtu2048)),
            Ok(Mtu2048)
        );
        let e = choose_mtu(&[Some(Mtu4096), Some(Mtu2048)], Some(Mtu4096)).unwrap_err();
        assert_eq!((e.asked, e.limit), (Mtu4096, Mtu2048));
        assert!(e.to_string().contains("the two ports, 2048"), "{e}");
    }

    #[test]
    fn a_port_that_does_not_say_counts_as_1024() {
        use Mtu::*;
        assert_eq!(port_mtu(None), Mtu1024);
        assert_eq!(path_mtu(&[None]), Mtu1024);
        assert_eq!(path_mtu(&[None, Some(Mtu4096)]), Mtu1024);
        // Not `Option::min` first: that takes None as the smaller, and the default then gave
        // 1024 — above the 512 the other port can carry (vl_selftest's old rule).
        assert_eq!(path_mtu(&[None, Some(Mtu512)]), Mtu512);
        assert_eq!(path_mtu(&[Some(Mtu512), None]), Mtu512);
        assert_eq!(choose_mtu(&[None, Some(Mtu512)], None), Ok(Mtu512));
    }

    #[test]
    fn opts_for_a_gid_check_its_index() {
        let mut gid = GidEntry {
            index: 3,
            gid: "::ffff:10.0.0.1".parse().unwrap(),
            gid_type: crate::verbs::GidType::RoceV2,
            netdev: None,
        };
        let o = ConnectOpts::for_gid(2, &gid, Mtu::Mtu2048).unwrap();
        assert_eq!((o.port_num, o.sgid_index, o.path_mtu), (2, 3, Mtu::Mtu2048));
        assert_eq!(o.retry_cnt, RETRY_CNT);
        gid.index = 259;
        let e = ConnectOpts::for_gid(1, &gid, Mtu::Mtu1024).unwrap_err();
        assert!(e.to_string().contains("GID index 259"), "{e}");
    }

    #[test]
    fn default_grants_no_remote_access() {
        assert!(ConnectOpts::default().access.is_empty());
        assert!(init_attr(&ConnectOpts::default()).access.is_empty());
    }

    /// A RoCE peer: QPN 0x11, first PSN 5, a GID.
    fn roce_peer() -> Endpoint {
        Endpoint {
            lid: 0,
            qpn: 0x11,
            psn: 5,
            gid: "::ffff:10.0.0.2".parse().unwrap(),
        }
    }

    #[test]
    fn rtr_takes_the_responder_depth_and_flow_label_when_given() {
        let remote = roce_peer();
        let o = ConnectOpts {
            max_rd_atomic: 4,
            ..Default::default()
        };
        let a = rtr_attr(&o, &remote);
        assert_eq!(a.max_dest_rd_atomic, 4);
        assert_eq!(a.ah.grh.unwrap().flow_label, 0);
        assert_eq!(rts_attr(&o, &remote).max_rd_atomic, 4);
        let o = ConnectOpts {
            max_dest_rd_atomic: Some(128),
            flow_label: 0x12345,
            ..o
        };
        let a = rtr_attr(&o, &remote);
        assert_eq!(a.max_dest_rd_atomic, 128);
        assert_eq!(a.ah.grh.unwrap().flow_label, 0x12345);
        assert_eq!(
            rts_attr(&o, &remote).max_rd_atomic,
            4,
            "RTS keeps max_rd_atomic"
        );
    }

    #[test]
    fn rtr_uses_grh_only_with_a_gid() {
        let o = ConnectOpts {
            sgid_index: 1,
            ..Default::default()
        };
        let mut remote = roce_peer();
        let a = rtr_attr(&o, &remote);
        assert_eq!(a.dest_qpn, 0x11);
        assert_eq!(a.rq_psn, 5);
        assert_eq!(a.ah.grh.unwrap().sgid_index, 1);
        remote.gid = Gid::ZERO;
        remote.lid = 3;
        let a = rtr_attr(&o, &remote);
        assert!(a.ah.grh.is_none());
        assert_eq!(a.ah.dlid, 3);
    }
}
