//! Bringing a connected QP (RC or UC) up once both sides know each other's endpoint.
//!
//! Lesson 03 walks these transitions one by one with every attribute explained; later lessons
//! and the benchmarks call [`bring_up`] to do the same thing in one step.

use std::fmt;

use crate::verbs::{
    AccessFlags, AhAttr, Context, GidChoice, GlobalRoute, InitAttr, Mtu, Qp, RtrAttr, RtsAttr,
    VerbsError,
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
    /// Outstanding reads/atomics we initiate, and accept from the peer.
    pub max_rd_atomic: u8,
    pub sl: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

/// The retry count every verbs-lab QP connects with: 6, not the 7 that perftest and the
/// rdma-core examples use. The IB spec makes 7 a plain count (only `rnr_retry` 7 means "for
/// ever"), but rxe (SoftRoCE) never counts 7 down: a request to a peer whose QP is gone is
/// retransmitted for ever and no completion comes (measured in the guest with the peer killed:
/// retry_cnt 7 gave completer_retry_err +11, retry_exceeded_err +0 and no completion in 15 s;
/// retry_cnt 6 gave IBV_WC_RETRY_EXC_ERR after 7 s with retry_exceeded_err +1). With 6 a dead
/// peer ends in an error completion on every device, after 7 ack timeouts.
pub const RETRY_CNT: u8 = 6;

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
            sl: 0,
            hop_limit: 64,
            traffic_class: 0,
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

/// The RTR attributes `bring_up` uses: the peer's QPN and PSN, the path to its GID.
pub fn rtr_attr(o: &ConnectOpts, remote: &Endpoint) -> RtrAttr {
    let grh = (!remote.gid.is_zero()).then_some(GlobalRoute {
        dgid: remote.gid,
        sgid_index: o.sgid_index,
        hop_limit: o.hop_limit,
        traffic_class: o.traffic_class,
        flow_label: 0,
    });
    RtrAttr {
        path_mtu: o.path_mtu,
        dest_qpn: remote.qpn,
        rq_psn: remote.psn,
        max_dest_rd_atomic: o.max_rd_atomic,
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
    RtsAttr {
        sq_psn: local.psn,
        timeout: o.timeout,
        retry_cnt: o.retry_cnt,
        rnr_retry: o.rnr_retry,
        max_rd_atomic: o.max_rd_atomic,
    }
}

/// RESET → INIT → RTR → RTS for an RC or UC QP, given both endpoints.
pub fn bring_up(qp: &Qp, local: &Endpoint, remote: &Endpoint, o: &ConnectOpts) -> Result<()> {
    if qp.qp_type() == QpType::Ud {
        return Err(VerbsError::InvalidArgument(
            "bring_up connects RC/UC QPs; UD needs no peer".into(),
        ));
    }
    qp.modify_to_init(&init_attr(o))?;
    qp.modify_to_rtr(Some(&rtr_attr(o, remote)))?;
    qp.modify_to_rts(&rts_attr(o, local))?;
    Ok(())
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

/// A random 24-bit packet sequence number (as ibv_rc_pingpong does), without a `rand` crate:
/// the std hasher is randomly seeded per process.
pub fn random_psn() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    (h.finish() as u32) & 0xff_ffff
}

/// The path MTU to use: the requested one, or the port's active MTU, and never above it.
pub fn path_mtu(active: Option<Mtu>, requested: Option<Mtu>) -> std::result::Result<Mtu, String> {
    let active = active.unwrap_or(Mtu::Mtu1024);
    match requested {
        None => Ok(active),
        Some(m) if m <= active => Ok(m),
        Some(m) => Err(format!(
            "MTU {m} is larger than the port's active MTU {active}"
        )),
    }
}

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
        assert_eq!(path_mtu(Some(Mtu::Mtu4096), None), Ok(Mtu::Mtu4096));
        assert_eq!(
            path_mtu(Some(Mtu::Mtu4096), Some(Mtu::Mtu1024)),
            Ok(Mtu::Mtu1024)
        );
        assert!(path_mtu(Some(Mtu::Mtu1024), Some(Mtu::Mtu4096))
            .unwrap_err()
            .contains("active MTU 1024"));
    }

    #[test]
    fn default_grants_no_remote_access() {
        assert!(ConnectOpts::default().access.is_empty());
        assert!(init_attr(&ConnectOpts::default()).access.is_empty());
    }

    #[test]
    fn rtr_uses_grh_only_with_a_gid() {
        let o = ConnectOpts {
            sgid_index: 1,
            ..Default::default()
        };
        let mut remote = Endpoint {
            lid: 0,
            qpn: 0x11,
            psn: 5,
            gid: "::ffff:10.0.0.2".parse().unwrap(),
        };
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
