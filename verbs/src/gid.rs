//! GIDs: the 128-bit global addresses of RDMA ports, their types, and how we pick one.
//!
//! On RoCE the GID *is* an IP address (IPv4-mapped or IPv6) bound to a netdev; on InfiniBand it
//! is the subnet prefix plus the port GUID. The table entries and their selection are pure data
//! here; reading the table from a device lives in `context.rs`.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// A 128-bit GID in network byte order (`union ibv_gid`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    pub const ZERO: Gid = Gid([0; 16]);

    pub fn is_zero(&self) -> bool {
        self.0 == [0; 16]
    }
    /// An IPv4-mapped address `::ffff:a.b.c.d` — what RoCE v2 uses for an IPv4 netdev address.
    pub fn to_ipv4(&self) -> Option<Ipv4Addr> {
        Ipv6Addr::from(self.0).to_ipv4_mapped()
    }
    pub fn is_ipv4_mapped(&self) -> bool {
        self.to_ipv4().is_some()
    }
    /// The fe80::/64 link-local prefix (GID index 0 on RoCE, from the MAC address).
    pub fn is_link_local(&self) -> bool {
        self.0[0] == 0xfe && self.0[1] & 0xc0 == 0x80
    }
    /// The IP address this GID stands for on RoCE: IPv4 when mapped, otherwise IPv6.
    pub fn to_ip(&self) -> IpAddr {
        match self.to_ipv4() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(Ipv6Addr::from(self.0)),
        }
    }
    /// 32 hex digits without separators, the form `ibv_rc_pingpong` puts on the wire.
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }
    /// Parses the 32-hex-digit wire form.
    pub fn from_hex(s: &str) -> Option<Gid> {
        if s.len() != 32 || !s.is_ascii() {
            return None;
        }
        let mut raw = [0u8; 16];
        for (i, b) in raw.iter_mut().enumerate() {
            *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
        }
        Some(Gid(raw))
    }
}

/// Printed the way `ibv_devinfo -v` and sysfs print GIDs: eight groups of four hex digits.
impl fmt::Display for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, pair) in self.0.chunks(2).enumerate() {
            if i > 0 {
                f.write_str(":")?;
            }
            write!(f, "{:02x}{:02x}", pair[0], pair[1])?;
        }
        Ok(())
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gid({self})")
    }
}

/// Accepts the sysfs form (`0000:...:0001`), any IPv6 text (`fe80::1`, `::ffff:10.0.0.1`), an
/// IPv4 address (mapped), or 32 bare hex digits.
impl FromStr for Gid {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        if let Some(g) = Gid::from_hex(s) {
            return Ok(g);
        }
        if let Ok(v6) = s.parse::<Ipv6Addr>() {
            return Ok(Gid(v6.octets()));
        }
        if let Ok(v4) = s.parse::<Ipv4Addr>() {
            return Ok(Gid(v4.to_ipv6_mapped().octets()));
        }
        Err(format!(
            "'{s}' is not a GID (expected IPv6 notation or 32 hex digits)"
        ))
    }
}

/// Which protocol a GID entry is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GidType {
    /// InfiniBand, or RoCE v1 (the kernel reports these alike: "IB/RoCE v1").
    IbOrRoceV1,
    /// RoCE v2: RDMA over UDP/IP (port 4791), routable.
    RoceV2,
}

impl GidType {
    /// From `ibv_gid_entry.gid_type` (`IBV_GID_TYPE_IB` 0, `ROCE_V1` 1, `ROCE_V2` 2).
    pub fn from_ibv(v: u32) -> GidType {
        if v == rdma_sys::IBV_GID_TYPE_ROCE_V2 {
            GidType::RoceV2
        } else {
            GidType::IbOrRoceV1
        }
    }
    /// From the sysfs text in `gid_attrs/types/N`.
    pub fn from_sysfs(s: &str) -> Option<GidType> {
        match s.trim() {
            "RoCE v2" => Some(GidType::RoceV2),
            "IB/RoCE v1" | "RoCE v1" | "IB" => Some(GidType::IbOrRoceV1),
            _ => None,
        }
    }
}

impl fmt::Display for GidType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            GidType::IbOrRoceV1 => "IB/RoCE v1",
            GidType::RoceV2 => "RoCE v2",
        })
    }
}

/// One populated entry of a port's GID table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GidEntry {
    pub index: u32,
    pub gid: Gid,
    pub gid_type: GidType,
    /// The netdev the GID is bound to (RoCE), from sysfs `gid_attrs/ndevs/N`.
    pub netdev: Option<String>,
}

impl GidEntry {
    /// The IP address behind a RoCE GID (none for InfiniBand-style GIDs without a netdev).
    pub fn ip(&self) -> Option<IpAddr> {
        self.netdev.as_ref().map(|_| self.gid.to_ip())
    }

    /// The index as the 8-bit `sgid_index` of an address vector's global route
    /// (`struct ibv_global_route`); an index above 255 cannot be sent from, and is refused
    /// rather than cut to another GID's index.
    pub fn sgid_index(&self) -> super::Result<u8> {
        u8::try_from(self.index).map_err(|_| {
            super::VerbsError::InvalidArgument(format!(
                "GID index {} does not fit the 8-bit sgid_index of an address vector: choose a \
                 GID index from 0 to 255",
                self.index
            ))
        })
    }
}

/// The GID a tool will use and why it was chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GidChoice {
    pub entry: GidEntry,
    pub reason: String,
}

impl fmt::Display for GidChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "GID index {} ({}, {}): {}",
            self.entry.index, self.entry.gid, self.entry.gid_type, self.reason
        )
    }
}

/// Picks the GID to use from a port's table.
///
/// With `requested` set, that index must be populated. Otherwise the rule, which both sides of a
/// connection apply on their own and so agree on without flags, is: the first RoCE v2 GID holding
/// an IPv4-mapped address (routable, stable across reboots, what RoCE deployments use), else the
/// first non-zero GID.
pub fn choose_gid(table: &[GidEntry], requested: Option<u32>) -> Result<GidChoice, String> {
    if let Some(idx) = requested {
        return match table.iter().find(|e| e.index == idx) {
            Some(e) if !e.gid.is_zero() => Ok(GidChoice {
                entry: e.clone(),
                reason: "the requested index".into(),
            }),
            _ => Err(format!(
                "GID index {idx} is empty or out of range on this port; populated indexes: {}",
                populated(table)
            )),
        };
    }
    if let Some(e) = table
        .iter()
        .find(|e| e.gid_type == GidType::RoceV2 && e.gid.is_ipv4_mapped())
    {
        return Ok(GidChoice {
            entry: e.clone(),
            reason: "the first RoCE v2 GID with an IPv4 address".into(),
        });
    }
    if let Some(e) = table.iter().find(|e| !e.gid.is_zero()) {
        return Ok(GidChoice {
            entry: e.clone(),
            reason: "no RoCE v2 IPv4 GID on this port; the first non-zero GID".into(),
        });
    }
    Err(
        "the port's GID table is empty: give the netdev an IP address, or check the port state"
            .into(),
    )
}

fn populated(table: &[GidEntry]) -> String {
    let idx: Vec<String> = table
        .iter()
        .filter(|e| !e.gid.is_zero())
        .map(|e| e.index.to_string())
        .collect();
    if idx.is_empty() {
        "none".into()
    } else {
        idx.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(index: u32, gid: &str, t: GidType) -> GidEntry {
        GidEntry {
            index,
            gid: gid.parse().unwrap(),
            gid_type: t,
            netdev: Some("veth0".into()),
        }
    }

    #[test]
    fn parse_and_format() {
        let g: Gid = "0000:0000:0000:0000:0000:ffff:c0a8:4d01".parse().unwrap();
        assert_eq!(g.to_ipv4(), Some(Ipv4Addr::new(192, 168, 77, 1)));
        assert_eq!(g.to_string(), "0000:0000:0000:0000:0000:ffff:c0a8:4d01");
        assert_eq!("::ffff:192.168.77.1".parse::<Gid>().unwrap(), g);
        assert_eq!("192.168.77.1".parse::<Gid>().unwrap(), g);
        assert_eq!(g.to_hex(), "00000000000000000000ffffc0a84d01");
        assert_eq!(Gid::from_hex(&g.to_hex()), Some(g));
        assert_eq!(g.to_ip().to_string(), "192.168.77.1");
        let ll: Gid = "fe80::200:ff:fe00:1".parse().unwrap();
        assert!(ll.is_link_local() && !ll.is_ipv4_mapped());
        assert_eq!(ll.to_ip().to_string(), "fe80::200:ff:fe00:1");
        assert!("nonsense".parse::<Gid>().is_err());
        assert!(Gid::from_hex("zz000000000000000000ffffc0a84d01").is_none());
        assert!(Gid::from_hex("00").is_none());
        assert!(Gid::ZERO.is_zero());
    }

    #[test]
    fn gid_types() {
        assert_eq!(GidType::from_sysfs("RoCE v2\n"), Some(GidType::RoceV2));
        assert_eq!(GidType::from_sysfs("IB/RoCE v1"), Some(GidType::IbOrRoceV1));
        assert_eq!(GidType::from_sysfs("x"), None);
        assert_eq!(GidType::from_ibv(2), GidType::RoceV2);
        assert_eq!(GidType::from_ibv(0), GidType::IbOrRoceV1);
    }

    #[test]
    fn choose_prefers_roce_v2_ipv4() {
        let table = vec![
            entry(0, "fe80::1", GidType::RoceV2),
            entry(1, "fe80::1", GidType::IbOrRoceV1),
            entry(2, "::ffff:10.0.0.1", GidType::IbOrRoceV1),
            entry(3, "::ffff:10.0.0.1", GidType::RoceV2),
        ];
        let c = choose_gid(&table, None).unwrap();
        assert_eq!(c.entry.index, 3);
        assert!(c.reason.contains("RoCE v2"));
        assert!(c.to_string().starts_with("GID index 3 ("));
    }

    #[test]
    fn choose_falls_back_to_first_nonzero() {
        let table = vec![
            entry(0, "::", GidType::IbOrRoceV1),
            entry(1, "fe80::1", GidType::IbOrRoceV1),
        ];
        let c = choose_gid(&table, None).unwrap();
        assert_eq!(c.entry.index, 1);
        assert!(c.reason.contains("first non-zero"));
        assert!(choose_gid(&[], None).unwrap_err().contains("empty"));
    }

    #[test]
    fn requested_index_must_be_populated() {
        let table = vec![
            entry(0, "fe80::1", GidType::RoceV2),
            entry(1, "::ffff:1.2.3.4", GidType::RoceV2),
        ];
        let c = choose_gid(&table, Some(0)).unwrap();
        assert_eq!(c.entry.index, 0);
        // Not a flag's name: lessons spell it -g, perftest -x.
        assert_eq!(c.reason, "the requested index");
        let e = choose_gid(&table, Some(7)).unwrap_err();
        assert!(e.contains("GID index 7") && e.contains("0, 1"), "{e}");
    }

    #[test]
    fn sgid_index_refuses_what_8_bits_cannot_hold() {
        assert_eq!(entry(255, "fe80::1", GidType::RoceV2).sgid_index(), Ok(255));
        // 256 would have been sent as index 0, another GID, without a word.
        let e = entry(256, "fe80::1", GidType::RoceV2)
            .sgid_index()
            .unwrap_err()
            .to_string();
        assert!(e.contains("GID index 256") && e.contains("0 to 255"), "{e}");
    }
}
