//! The small vocabulary of verbs attributes: MTU, port state, link layer, speed and width,
//! access flags, QP types and states. Pure values, testable without a device.

use std::fmt;
use std::str::FromStr;

use rdma_sys::{ibv_access_flags, ibv_mtu, ibv_port_state, ibv_qp_state, ibv_qp_type};

/// A path MTU (`enum ibv_mtu`): the largest RDMA payload in one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mtu {
    Mtu256,
    Mtu512,
    Mtu1024,
    Mtu2048,
    Mtu4096,
}

impl Mtu {
    pub const ALL: [Mtu; 5] = [
        Mtu::Mtu256,
        Mtu::Mtu512,
        Mtu::Mtu1024,
        Mtu::Mtu2048,
        Mtu::Mtu4096,
    ];

    /// The MTU in bytes.
    pub fn bytes(self) -> u32 {
        256 << (self.to_ibv() - 1)
    }
    /// From a size in bytes; only the five IB MTUs are valid.
    pub fn from_bytes(bytes: u32) -> Option<Mtu> {
        Mtu::ALL.into_iter().find(|m| m.bytes() == bytes)
    }
    pub fn to_ibv(self) -> ibv_mtu::Type {
        match self {
            Mtu::Mtu256 => ibv_mtu::IBV_MTU_256,
            Mtu::Mtu512 => ibv_mtu::IBV_MTU_512,
            Mtu::Mtu1024 => ibv_mtu::IBV_MTU_1024,
            Mtu::Mtu2048 => ibv_mtu::IBV_MTU_2048,
            Mtu::Mtu4096 => ibv_mtu::IBV_MTU_4096,
        }
    }
    pub fn from_ibv(v: ibv_mtu::Type) -> Option<Mtu> {
        Mtu::ALL.into_iter().find(|m| m.to_ibv() == v)
    }
}

impl fmt::Display for Mtu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.bytes())
    }
}

impl FromStr for Mtu {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.trim()
            .parse::<u32>()
            .ok()
            .and_then(Mtu::from_bytes)
            .ok_or_else(|| format!("'{s}' is not an MTU: use 256, 512, 1024, 2048 or 4096"))
    }
}

/// The logical state of a port (`enum ibv_port_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortState(pub u32);

impl PortState {
    pub const DOWN: PortState = PortState(ibv_port_state::IBV_PORT_DOWN);
    pub const ACTIVE: PortState = PortState(ibv_port_state::IBV_PORT_ACTIVE);

    pub fn name(self) -> &'static str {
        match self.0 {
            ibv_port_state::IBV_PORT_NOP => "NOP",
            ibv_port_state::IBV_PORT_DOWN => "DOWN",
            ibv_port_state::IBV_PORT_INIT => "INIT",
            ibv_port_state::IBV_PORT_ARMED => "ARMED",
            ibv_port_state::IBV_PORT_ACTIVE => "ACTIVE",
            ibv_port_state::IBV_PORT_ACTIVE_DEFER => "ACTIVE_DEFER",
            _ => "UNKNOWN",
        }
    }
}

crate::display_by_name!(PortState);

/// What a port speaks on the wire: InfiniBand (addressed by LID) or Ethernet (RoCE, by GID).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkLayer {
    InfiniBand,
    Ethernet,
    Unspecified,
}

impl LinkLayer {
    /// From `ibv_port_attr.link_layer` (rdma-sys lacks the constants: 1 = IB, 2 = Ethernet;
    /// 0 = unspecified, which means InfiniBand on old kernels).
    pub fn from_ibv(v: u8) -> LinkLayer {
        match v {
            1 => LinkLayer::InfiniBand,
            2 => LinkLayer::Ethernet,
            _ => LinkLayer::Unspecified,
        }
    }
    /// Whether packets need a GRH (and so a GID) to be routed: always on Ethernet.
    pub fn needs_grh(self) -> bool {
        self == LinkLayer::Ethernet
    }
}

impl fmt::Display for LinkLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LinkLayer::InfiniBand => "InfiniBand",
            LinkLayer::Ethernet => "Ethernet",
            LinkLayer::Unspecified => "Unspecified",
        })
    }
}

/// Lane count of a port (`active_width`): `None` when the value is unknown.
pub fn width_lanes(active_width: u8) -> Option<u32> {
    match active_width {
        1 => Some(1),
        2 => Some(4),
        4 => Some(8),
        8 => Some(12),
        16 => Some(2),
        _ => None,
    }
}

/// Per-lane signalling rate in Gb/s and the IB name of an `active_speed` value.
pub fn speed_per_lane(active_speed: u8) -> Option<(f64, &'static str)> {
    match active_speed {
        1 => Some((2.5, "SDR")),
        2 => Some((5.0, "DDR")),
        4 | 8 => Some((10.0, "QDR")),
        16 => Some((14.0, "FDR")),
        32 => Some((25.0, "EDR")),
        64 => Some((50.0, "HDR")),
        128 => Some((100.0, "NDR")),
        _ => None,
    }
}

/// "4X EDR (100 Gb/s)" from a port's width and speed, or `None` when either is unknown.
pub fn link_rate(active_width: u8, active_speed: u8) -> Option<String> {
    let lanes = width_lanes(active_width)?;
    let (gbps, name) = speed_per_lane(active_speed)?;
    Some(format!("{lanes}X {name} ({} Gb/s)", gbps * lanes as f64))
}

/// Memory-region and QP access flags (`enum ibv_access_flags`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AccessFlags(pub u32);

impl AccessFlags {
    /// The NIC may write into this memory locally (needed for receives and RDMA Read results).
    pub const LOCAL_WRITE: AccessFlags = AccessFlags(ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0);
    /// A remote peer may RDMA Write into this memory.
    pub const REMOTE_WRITE: AccessFlags = AccessFlags(ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0);
    /// A remote peer may RDMA Read this memory.
    pub const REMOTE_READ: AccessFlags = AccessFlags(ibv_access_flags::IBV_ACCESS_REMOTE_READ.0);
    /// A remote peer may run atomics on this memory.
    pub const REMOTE_ATOMIC: AccessFlags =
        AccessFlags(ibv_access_flags::IBV_ACCESS_REMOTE_ATOMIC.0);
    /// Memory windows may be bound to this region (`IBV_ACCESS_MW_BIND`).
    pub const MW_BIND: AccessFlags = AccessFlags(ibv_access_flags::IBV_ACCESS_MW_BIND.0);
    pub const EMPTY: AccessFlags = AccessFlags(0);
    /// Everything a benchmark or lesson buffer may need.
    pub const ALL_REMOTE: AccessFlags = AccessFlags(
        Self::LOCAL_WRITE.0 | Self::REMOTE_WRITE.0 | Self::REMOTE_READ.0 | Self::REMOTE_ATOMIC.0,
    );

    const NAMES: [(AccessFlags, &'static str); 5] = [
        (Self::LOCAL_WRITE, "LOCAL_WRITE"),
        (Self::REMOTE_WRITE, "REMOTE_WRITE"),
        (Self::REMOTE_READ, "REMOTE_READ"),
        (Self::REMOTE_ATOMIC, "REMOTE_ATOMIC"),
        (Self::MW_BIND, "MW_BIND"),
    ];

    pub fn contains(self, other: AccessFlags) -> bool {
        self.0 & other.0 == other.0
    }
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
}

impl std::ops::BitOr for AccessFlags {
    type Output = AccessFlags;
    fn bitor(self, rhs: AccessFlags) -> AccessFlags {
        AccessFlags(self.0 | rhs.0)
    }
}

impl std::ops::BitOrAssign for AccessFlags {
    fn bitor_assign(&mut self, rhs: AccessFlags) {
        self.0 |= rhs.0;
    }
}

impl fmt::Display for AccessFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("(none)");
        }
        let mut rest = self.0;
        let mut first = true;
        for (flag, name) in Self::NAMES {
            if self.contains(flag) {
                if !first {
                    f.write_str("|")?;
                }
                f.write_str(name)?;
                first = false;
                rest &= !flag.0;
            }
        }
        if rest != 0 {
            if !first {
                f.write_str("|")?;
            }
            write!(f, "{rest:#x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for AccessFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AccessFlags({self})")
    }
}

crate::name_table! {
    /// Transport service of a QP; parsed in any case (`rc` or `RC`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum QpType {
        /// Reliable Connected: acknowledged, in order, all operations.
        Rc => "RC",
        /// Unreliable Connected: no acknowledgements; Send and RDMA Write only.
        Uc => "UC",
        /// Unreliable Datagram: one QP talks to many; Send only, messages up to one MTU.
        Ud => "UD",
    }
    unknown: "'{}' is not a connection type";
    ignore_case: true;
}

impl QpType {
    pub fn to_ibv(self) -> ibv_qp_type::Type {
        match self {
            QpType::Rc => ibv_qp_type::IBV_QPT_RC,
            QpType::Uc => ibv_qp_type::IBV_QPT_UC,
            QpType::Ud => ibv_qp_type::IBV_QPT_UD,
        }
    }
}

/// The state of a QP (`enum ibv_qp_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpState {
    Reset,
    Init,
    Rtr,
    Rts,
    Sqd,
    Sqe,
    Err,
    Unknown,
}

impl QpState {
    pub fn from_ibv(v: ibv_qp_state::Type) -> QpState {
        match v {
            ibv_qp_state::IBV_QPS_RESET => QpState::Reset,
            ibv_qp_state::IBV_QPS_INIT => QpState::Init,
            ibv_qp_state::IBV_QPS_RTR => QpState::Rtr,
            ibv_qp_state::IBV_QPS_RTS => QpState::Rts,
            ibv_qp_state::IBV_QPS_SQD => QpState::Sqd,
            ibv_qp_state::IBV_QPS_SQE => QpState::Sqe,
            ibv_qp_state::IBV_QPS_ERR => QpState::Err,
            _ => QpState::Unknown,
        }
    }
    pub fn to_ibv(self) -> ibv_qp_state::Type {
        match self {
            QpState::Reset => ibv_qp_state::IBV_QPS_RESET,
            QpState::Init => ibv_qp_state::IBV_QPS_INIT,
            QpState::Rtr => ibv_qp_state::IBV_QPS_RTR,
            QpState::Rts => ibv_qp_state::IBV_QPS_RTS,
            QpState::Sqd => ibv_qp_state::IBV_QPS_SQD,
            QpState::Sqe => ibv_qp_state::IBV_QPS_SQE,
            QpState::Err => ibv_qp_state::IBV_QPS_ERR,
            QpState::Unknown => ibv_qp_state::IBV_QPS_UNKNOWN,
        }
    }
}

impl fmt::Display for QpState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            QpState::Reset => "RESET",
            QpState::Init => "INIT",
            QpState::Rtr => "RTR",
            QpState::Rts => "RTS",
            QpState::Sqd => "SQD",
            QpState::Sqe => "SQE",
            QpState::Err => "ERR",
            QpState::Unknown => "UNKNOWN",
        })
    }
}

/// Atomic capability of a device (`enum ibv_atomic_cap`).
pub fn atomic_cap_name(v: u32) -> &'static str {
    match v {
        0 => "NONE",
        1 => "HCA",
        2 => "GLOB",
        _ => "UNKNOWN",
    }
}

/// The QP ack timeout exponent as a duration: 4.096 µs × 2^timeout (0 means infinite).
pub fn qp_timeout_duration(timeout: u8) -> Option<std::time::Duration> {
    if timeout == 0 || timeout > 31 {
        return None;
    }
    Some(std::time::Duration::from_nanos(4096u64 << timeout))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mtu_round_trips() {
        for m in Mtu::ALL {
            assert_eq!(Mtu::from_bytes(m.bytes()), Some(m));
            assert_eq!(Mtu::from_ibv(m.to_ibv()), Some(m));
            assert_eq!(m.to_string().parse::<Mtu>().unwrap(), m);
        }
        assert_eq!(Mtu::Mtu4096.bytes(), 4096);
        assert_eq!(Mtu::Mtu256.bytes(), 256);
        assert_eq!(Mtu::from_ibv(5), Some(Mtu::Mtu4096));
        assert!("1500".parse::<Mtu>().unwrap_err().contains("256, 512"));
        assert_eq!(Mtu::from_ibv(0), None);
    }

    #[test]
    fn rates_and_widths() {
        assert_eq!(link_rate(2, 32).as_deref(), Some("4X EDR (100 Gb/s)"));
        assert_eq!(link_rate(1, 1).as_deref(), Some("1X SDR (2.5 Gb/s)"));
        assert_eq!(link_rate(0, 32), None);
        assert_eq!(width_lanes(8), Some(12));
    }

    #[test]
    fn access_flags_print_their_names() {
        let f = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ;
        assert_eq!(f.to_string(), "LOCAL_WRITE|REMOTE_READ");
        assert!(f.contains(AccessFlags::LOCAL_WRITE));
        assert!(!f.contains(AccessFlags::REMOTE_WRITE));
        assert_eq!(AccessFlags::EMPTY.to_string(), "(none)");
        assert_eq!(
            AccessFlags::ALL_REMOTE.to_string(),
            "LOCAL_WRITE|REMOTE_WRITE|REMOTE_READ|REMOTE_ATOMIC"
        );
        assert_eq!(
            (AccessFlags(0x1) | AccessFlags(0x4000)).to_string(),
            "LOCAL_WRITE|0x4000"
        );
    }

    #[test]
    fn qp_types_and_states() {
        assert_eq!("rc".parse::<QpType>().unwrap(), QpType::Rc);
        assert_eq!("UD".parse::<QpType>().unwrap(), QpType::Ud);
        assert!("XRC".parse::<QpType>().is_err());
        for s in [
            QpState::Reset,
            QpState::Init,
            QpState::Rtr,
            QpState::Rts,
            QpState::Err,
        ] {
            assert_eq!(QpState::from_ibv(s.to_ibv()), s);
        }
        assert_eq!(QpState::Rtr.to_string(), "RTR");
    }

    #[test]
    fn timeout_exponent() {
        assert_eq!(qp_timeout_duration(0), None);
        assert_eq!(qp_timeout_duration(14).unwrap().as_micros(), 67_108);
        assert_eq!(qp_timeout_duration(20).unwrap().as_millis(), 4294);
    }
}
