//! `vl_devinfo --json`: the document's schema, written once. Each struct below is one JSON
//! object, its fields are the keys in the order printed, and `None` prints as `null`. Every device
//! fact is in it, whatever `-v` says; numbers are the raw verbs values, text is what the tables
//! show.

use anyhow::{Context as _, Result};
use serde::Serialize;

use verbs_lab::verbs::attrs::{atomic_cap_name, link_rate};
use verbs_lab::verbs::device::format_guid;
use verbs_lab::verbs::{DeviceAttr, GidEntry};

use super::{phys_state_name, DeviceInfo, PortInfo};

/// The whole `--json` document.
#[derive(Serialize)]
struct JsonDoc<'a> {
    /// Always `"vl_devinfo"`.
    tool: &'static str,
    /// verbs-lab's version.
    version: &'static str,
    /// In libibverbs' order (just `-d`'s with `-d`).
    devices: Vec<JsonDevice<'a>>,
}

/// One device: `ibv_query_device(3)` facts, then its capabilities and its ports.
#[derive(Serialize)]
struct JsonDevice<'a> {
    name: &'a str,
    /// `format_guid`'s `xxxx:xxxx:xxxx:xxxx`.
    node_guid: String,
    sys_image_guid: String,
    fw_ver: &'a str,
    vendor_id: u32,
    vendor_part_id: u32,
    hw_ver: u32,
    /// `null` without a PCI device behind it (SoftRoCE).
    numa_node: Option<u32>,
    phys_port_cnt: u8,
    #[serde(with = "JsonCaps")]
    caps: &'a DeviceAttr,
    /// Every port, or just `-i`'s.
    ports: Vec<JsonPort<'a>>,
}

/// `caps`: the limits and capabilities of `struct ibv_device_attr`, read straight from
/// [`DeviceAttr`]'s fields of the same names (serde's remote derive: this list is the schema).
#[derive(Serialize)]
#[serde(remote = "DeviceAttr")]
struct JsonCaps {
    max_qp: i32,
    max_qp_wr: i32,
    max_sge: i32,
    max_sge_rd: i32,
    max_cq: i32,
    max_cqe: i32,
    max_mr: i32,
    max_mr_size: u64,
    max_pd: i32,
    max_qp_rd_atom: i32,
    max_qp_init_rd_atom: i32,
    max_res_rd_atom: i32,
    max_srq: i32,
    max_ah: i32,
    /// `NONE`, `HCA` or `GLOB`.
    #[serde(serialize_with = "atomic_cap_json")]
    atomic_cap: u32,
    /// The bits, as a number...
    #[serde(getter = "cap_flag_bits")]
    device_cap_flags: u32,
    /// ...and by name, without `IBV_DEVICE_` (unnamed bits last, as one hex value).
    #[serde(getter = "cap_flag_names")]
    device_cap_flag_names: Vec<String>,
    page_size_cap: u64,
}

fn atomic_cap_json<S: serde::Serializer>(v: &u32, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(atomic_cap_name(*v))
}
fn cap_flag_bits(a: &DeviceAttr) -> u32 {
    a.device_cap_flags.bits()
}
fn cap_flag_names(a: &DeviceAttr) -> Vec<String> {
    a.device_cap_flags.names()
}

/// One port: `struct ibv_port_attr`, its GID table and the GID verbs-lab's tools would use.
#[derive(Serialize)]
struct JsonPort<'a> {
    port: u8,
    /// `ACTIVE`, `DOWN`, ...
    state: String,
    /// `LINK_UP`, `POLLING`, ...
    phys_state: &'static str,
    /// In bytes; `null` when the device reports no valid MTU.
    active_mtu: Option<u32>,
    max_mtu: Option<u32>,
    /// `InfiniBand`, `Ethernet` or `Unspecified`.
    link_layer: String,
    lid: u16,
    sm_lid: u16,
    active_width: u8,
    active_speed: u8,
    /// e.g. `"100 Gb/sec (4X EDR)"`; `null` for a width/speed pair without a name.
    rate: Option<String>,
    max_msg_sz: u32,
    gid_tbl_len: u32,
    /// The populated entries only.
    gids: Vec<JsonGid<'a>>,
    /// Exactly one of these two is `null`: the GID chosen, or why there is none.
    chosen_gid: Option<JsonChosenGid<'a>>,
    chosen_gid_error: Option<&'a str>,
}

/// One GID table entry.
#[derive(Serialize)]
struct JsonGid<'a> {
    index: u32,
    gid: String,
    /// `RoCE v2` or `IB/RoCE v1`.
    #[serde(rename = "type")]
    gid_type: String,
    /// The netdev and IP address of a RoCE GID; `null` otherwise.
    netdev: Option<&'a str>,
    ip: Option<String>,
}

/// The GID verbs-lab's tools would use: its entry's keys, then why it was chosen.
#[derive(Serialize)]
struct JsonChosenGid<'a> {
    #[serde(flatten)]
    entry: JsonGid<'a>,
    reason: &'a str,
}

impl<'a> JsonDoc<'a> {
    fn new(devices: &'a [DeviceInfo]) -> JsonDoc<'a> {
        JsonDoc {
            tool: "vl_devinfo",
            version: env!("CARGO_PKG_VERSION"),
            devices: devices.iter().map(JsonDevice::new).collect(),
        }
    }
}

impl<'a> JsonDevice<'a> {
    fn new(d: &'a DeviceInfo) -> JsonDevice<'a> {
        let a = &d.attr;
        JsonDevice {
            name: &d.name,
            node_guid: format_guid(a.node_guid),
            sys_image_guid: format_guid(a.sys_image_guid),
            fw_ver: &a.fw_ver,
            vendor_id: a.vendor_id,
            vendor_part_id: a.vendor_part_id,
            hw_ver: a.hw_ver,
            numa_node: d.numa_node,
            phys_port_cnt: a.phys_port_cnt,
            caps: a,
            ports: d.ports.iter().map(JsonPort::new).collect(),
        }
    }
}

impl<'a> JsonPort<'a> {
    fn new(p: &'a PortInfo) -> JsonPort<'a> {
        let pa = &p.attr;
        let (chosen_gid, chosen_gid_error) = match &p.choice {
            Ok(c) => (
                Some(JsonChosenGid {
                    entry: JsonGid::new(&c.entry),
                    reason: &c.reason,
                }),
                None,
            ),
            Err(e) => (None, Some(e.as_str())),
        };
        JsonPort {
            port: pa.port_num,
            state: pa.state.to_string(),
            phys_state: phys_state_name(pa.phys_state),
            active_mtu: pa.active_mtu.map(|m| m.bytes()),
            max_mtu: pa.max_mtu.map(|m| m.bytes()),
            link_layer: pa.link_layer.to_string(),
            lid: pa.lid,
            sm_lid: pa.sm_lid,
            active_width: pa.active_width,
            active_speed: pa.active_speed,
            rate: link_rate(pa.active_width, pa.active_speed),
            max_msg_sz: pa.max_msg_sz,
            gid_tbl_len: pa.gid_tbl_len,
            gids: p.gids.iter().map(JsonGid::new).collect(),
            chosen_gid,
            chosen_gid_error,
        }
    }
}

impl<'a> JsonGid<'a> {
    fn new(e: &'a GidEntry) -> JsonGid<'a> {
        JsonGid {
            index: e.index,
            gid: e.gid.to_string(),
            gid_type: e.gid_type.to_string(),
            netdev: e.netdev.as_deref(),
            ip: e.ip().map(|ip| ip.to_string()),
        }
    }
}

/// The `--json` document of `devices`, indented by two spaces.
pub(super) fn to_json(devices: &[DeviceInfo]) -> Result<String> {
    serde_json::to_string_pretty(&JsonDoc::new(devices)).context("writing the JSON document")
}

#[cfg(test)]
mod tests {
    use super::*;
    use verbs_lab::verbs::{
        DeviceCapFlags, Gid, GidChoice, GidType, LinkLayer, Mtu, PortAttr, PortState,
    };

    /// A device with both kinds of port: one whose GID verbs-lab chose (a RoCE v2 entry with an
    /// IPv4 address beside an IB-style one without a netdev), one without GIDs; unknown NUMA
    /// node, MTU and rate print as null.
    fn sample() -> Vec<DeviceInfo> {
        let port = |num: u8, gids: Vec<GidEntry>, choice| PortInfo {
            attr: PortAttr {
                port_num: num,
                state: PortState::ACTIVE,
                max_mtu: Some(Mtu::Mtu4096),
                active_mtu: if num == 1 { Some(Mtu::Mtu1024) } else { None },
                link_layer: LinkLayer::Ethernet,
                lid: 0,
                sm_lid: 0,
                gid_tbl_len: 1024,
                max_msg_sz: 1 << 31,
                active_width: 1,
                active_speed: if num == 1 { 1 } else { 99 },
                phys_state: 5,
            },
            gids,
            choice,
        };
        let mut v2 = [0u8; 16];
        v2[10] = 0xff;
        v2[11] = 0xff;
        v2[12..].copy_from_slice(&[192, 168, 77, 1]);
        let mut link_local = [0u8; 16];
        link_local[..2].copy_from_slice(&[0xfe, 0x80]);
        link_local[15] = 1;
        let gids = vec![
            GidEntry {
                index: 0,
                gid: Gid(link_local),
                gid_type: GidType::IbOrRoceV1,
                netdev: None,
            },
            GidEntry {
                index: 1,
                gid: Gid(v2),
                gid_type: GidType::RoceV2,
                netdev: Some("veth0".into()),
            },
        ];
        let chosen = GidChoice {
            entry: gids[1].clone(),
            reason: "the first RoCE v2 GID with an IPv4 address".into(),
        };
        vec![DeviceInfo {
            name: "rxe0".into(),
            attr: DeviceAttr {
                fw_ver: "\"quoted\" \\ fw\t1".into(),
                node_guid: 0x0011_2233_4455_6677,
                sys_image_guid: 0x8899_aabb_ccdd_eeff,
                vendor_id: 0x1234,
                vendor_part_id: 0,
                hw_ver: 0,
                phys_port_cnt: 2,
                max_qp: 1 << 17,
                max_qp_wr: 1 << 20,
                max_sge: 32,
                max_sge_rd: 32,
                max_cq: 1 << 16,
                max_cqe: (1 << 15) - 1,
                max_mr: 1 << 18,
                max_mr_size: u64::MAX,
                max_pd: 1 << 16,
                max_qp_rd_atom: 128,
                max_qp_init_rd_atom: 128,
                max_res_rd_atom: 258048,
                max_srq: 1 << 18,
                max_ah: 1 << 15,
                atomic_cap: 1,
                device_cap_flags: DeviceCapFlags(0x8000_0001),
                page_size_cap: 0xffff_f000,
            },
            numa_node: None,
            ports: vec![
                port(1, gids, Ok(chosen)),
                port(2, vec![], Err("port 2 has no GID".into())),
            ],
        }]
    }

    /// The document, key by key: what `tests/guest/10-devinfo.sh` reads (and what scripts may),
    /// escaped strings, `null` for what is unknown, exactly one of `chosen_gid` and
    /// `chosen_gid_error`.
    #[test]
    fn json_document() {
        let expected = r#"{
  "tool": "vl_devinfo",
  "version": "VERSION",
  "devices": [
    {
      "name": "rxe0",
      "node_guid": "0011:2233:4455:6677",
      "sys_image_guid": "8899:aabb:ccdd:eeff",
      "fw_ver": "\"quoted\" \\ fw\t1",
      "vendor_id": 4660,
      "vendor_part_id": 0,
      "hw_ver": 0,
      "numa_node": null,
      "phys_port_cnt": 2,
      "caps": {
        "max_qp": 131072,
        "max_qp_wr": 1048576,
        "max_sge": 32,
        "max_sge_rd": 32,
        "max_cq": 65536,
        "max_cqe": 32767,
        "max_mr": 262144,
        "max_mr_size": 18446744073709551615,
        "max_pd": 65536,
        "max_qp_rd_atom": 128,
        "max_qp_init_rd_atom": 128,
        "max_res_rd_atom": 258048,
        "max_srq": 262144,
        "max_ah": 32768,
        "atomic_cap": "HCA",
        "device_cap_flags": 2147483649,
        "device_cap_flag_names": [
          "RESIZE_MAX_WR",
          "0x80000000"
        ],
        "page_size_cap": 4294963200
      },
      "ports": [
        {
          "port": 1,
          "state": "ACTIVE",
          "phys_state": "LINK_UP",
          "active_mtu": 1024,
          "max_mtu": 4096,
          "link_layer": "Ethernet",
          "lid": 0,
          "sm_lid": 0,
          "active_width": 1,
          "active_speed": 1,
          "rate": "1X SDR (2.5 Gb/s)",
          "max_msg_sz": 2147483648,
          "gid_tbl_len": 1024,
          "gids": [
            {
              "index": 0,
              "gid": "fe80:0000:0000:0000:0000:0000:0000:0001",
              "type": "IB/RoCE v1",
              "netdev": null,
              "ip": null
            },
            {
              "index": 1,
              "gid": "0000:0000:0000:0000:0000:ffff:c0a8:4d01",
              "type": "RoCE v2",
              "netdev": "veth0",
              "ip": "192.168.77.1"
            }
          ],
          "chosen_gid": {
            "index": 1,
            "gid": "0000:0000:0000:0000:0000:ffff:c0a8:4d01",
            "type": "RoCE v2",
            "netdev": "veth0",
            "ip": "192.168.77.1",
            "reason": "the first RoCE v2 GID with an IPv4 address"
          },
          "chosen_gid_error": null
        },
        {
          "port": 2,
          "state": "ACTIVE",
          "phys_state": "LINK_UP",
          "active_mtu": null,
          "max_mtu": 4096,
          "link_layer": "Ethernet",
          "lid": 0,
          "sm_lid": 0,
          "active_width": 1,
          "active_speed": 99,
          "rate": null,
          "max_msg_sz": 2147483648,
          "gid_tbl_len": 1024,
          "gids": [],
          "chosen_gid": null,
          "chosen_gid_error": "port 2 has no GID"
        }
      ]
    }
  ]
}"#;
        assert_eq!(
            to_json(&sample()).unwrap(),
            expected.replace("VERSION", env!("CARGO_PKG_VERSION"))
        );
    }
}
