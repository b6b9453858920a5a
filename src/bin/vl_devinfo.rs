//! `vl_devinfo`: what a benchmarker needs to know about the RDMA devices of this machine.
//!
//! Like `ibv_devinfo -v`, but it also prints the GID table with each entry's type, netdev and IP
//! address, and which GID verbs-lab's tools would use on each port and why. `--json` prints the
//! same facts (and all of them, whatever `-v` says) as one JSON document.

use std::process::ExitCode;

use anyhow::{Context as _, Result};
use clap::Parser;
use comfy_table::{presets, Table};
use serde::Serialize;

use verbs_lab::cli::DevicePortFilter;
use verbs_lab::verbs::attrs::{atomic_cap_name, link_rate};
use verbs_lab::verbs::device::format_guid;
use verbs_lab::verbs::gid::choose_gid;
use verbs_lab::verbs::{
    Context, DeviceAttr, DeviceList, GidChoice, GidEntry, LinkLayer, PortAttr, VerbsError,
};

/// Show RDMA devices, ports, GID tables and capabilities (like `ibv_devinfo -v`).
#[derive(Parser, Debug)]
#[command(
    name = "vl_devinfo",
    version,
    after_help = "Exit codes:\n  0  devices listed\n  1  no device, or a query failed (the \
                  message says what to do)\n  2  bad command line"
)]
struct Args {
    #[command(flatten)]
    only: DevicePortFilter,

    /// Print every capability, not just the ones a benchmark usually needs
    #[arg(short, long)]
    verbose: bool,

    /// Print one JSON document with everything instead of tables
    #[arg(long)]
    json: bool,
}

/// Everything we learned about one port.
struct PortInfo {
    attr: PortAttr,
    gids: Vec<GidEntry>,
    /// The GID verbs-lab's tools would use, or why there is none.
    choice: std::result::Result<GidChoice, String>,
}

/// Everything we learned about one device.
struct DeviceInfo {
    name: String,
    attr: DeviceAttr,
    numa_node: Option<u32>,
    ports: Vec<PortInfo>,
}

fn main() -> ExitCode {
    let args: Args = verbs_lab::cli::parse();
    verbs_lab::cli::exit_code("vl_devinfo", run(&args))
}

fn run(args: &Args) -> Result<()> {
    let list = DeviceList::new().context("listing RDMA devices")?;
    if list.is_empty() {
        return Err(VerbsError::NoDevices).context("listing RDMA devices");
    }
    let devices = match &args.only.ib_dev {
        Some(name) => vec![list.find(name)?],
        None => list.iter().collect(),
    };

    let mut infos = Vec::new();
    for dev in devices {
        let name = dev.name();
        let ctx = dev
            .open()
            .with_context(|| format!("opening {name} (ibv_open_device)"))?;
        infos.push(describe(&ctx, &args.only)?);
    }

    if args.json {
        println!("{}", to_json(&infos)?);
    } else {
        for (i, info) in infos.iter().enumerate() {
            if i > 0 {
                println!();
            }
            print_human(info, args.verbose);
        }
    }
    Ok(())
}

/// Queries a device, its ports (all, or just `-i`'s) and their GID tables.
fn describe(ctx: &Context, only: &DevicePortFilter) -> Result<DeviceInfo> {
    let name = ctx.name().to_string();
    let attr = ctx
        .query_device()
        .with_context(|| format!("querying {name} (ibv_query_device)"))?;
    let mut port_infos = Vec::new();
    for port in only.ports(&name, attr.phys_port_cnt)? {
        let pattr = ctx
            .query_port(port)
            .with_context(|| format!("querying {name} port {port} (ibv_query_port)"))?;
        let gids = ctx
            .gid_table(port)
            .with_context(|| format!("reading the GID table of {name} port {port}"))?;
        // The same rule as `ctx.choose_gid(port, None)`, applied to the table already read.
        let choice = choose_gid(&gids, None);
        port_infos.push(PortInfo {
            attr: pattr,
            gids,
            choice,
        });
    }
    Ok(DeviceInfo {
        name,
        numa_node: ctx.numa_node(),
        attr,
        ports: port_infos,
    })
}

/// `struct ibv_port_attr.phys_state` by name (IBTA values, as `ibv_devinfo` prints them).
fn phys_state_name(v: u8) -> &'static str {
    match v {
        1 => "SLEEP",
        2 => "POLLING",
        3 => "DISABLED",
        4 => "PORT_CONFIGURATION_TRAINING",
        5 => "LINK_UP",
        6 => "LINK_ERROR_RECOVERY",
        7 => "PHY_TEST",
        _ => "UNKNOWN",
    }
}

fn numa_text(n: Option<u32>) -> String {
    n.map_or_else(
        || "unknown (no PCI device behind it, e.g. SoftRoCE)".into(),
        |n| n.to_string(),
    )
}

fn mtu_text(m: Option<verbs_lab::verbs::Mtu>) -> String {
    m.map_or_else(|| "unknown".into(), |m| m.to_string())
}

fn rate_text(p: &PortAttr) -> String {
    link_rate(p.active_width, p.active_speed).unwrap_or_else(|| {
        format!(
            "unknown (width {}, speed {})",
            p.active_width, p.active_speed
        )
    })
}

fn lid_text(p: &PortAttr) -> String {
    if p.link_layer == LinkLayer::Ethernet {
        format!("{} (unused on RoCE: addressed by GID)", p.lid)
    } else {
        p.lid.to_string()
    }
}

fn new_table() -> Table {
    let mut t = Table::new();
    t.load_style(presets::ASCII_FULL_CONDENSED);
    t
}

/// The tables of one device (capabilities, ports, GIDs), then the GID verbs-lab uses on each
/// port and why.
fn print_human(d: &DeviceInfo, verbose: bool) {
    println!("Device {}", d.name);
    println!("{}", caps_table(d, verbose));
    println!("{}", ports_table(&d.ports, verbose));
    println!("{}", gids_table(&d.ports));
    for p in &d.ports {
        match &p.choice {
            Ok(c) => println!(
                "verbs-lab uses GID index {} on {} port {}: {}",
                c.entry.index, d.name, p.attr.port_num, c.reason
            ),
            Err(e) => println!(
                "verbs-lab has no GID to use on {} port {}: {e}",
                d.name, p.attr.port_num
            ),
        }
    }
}

/// The device's capabilities: the ones a benchmark usually needs, every one with `verbose`.
fn caps_table(d: &DeviceInfo, verbose: bool) -> Table {
    let a = &d.attr;
    let mut caps = new_table();
    caps.set_header(vec!["device", d.name.as_str()]);
    let mut row = |k: &str, v: String| {
        caps.add_row(vec![k.to_string(), v]);
    };
    row("node GUID", format_guid(a.node_guid));
    row("firmware", a.fw_ver.clone());
    row("NUMA node", numa_text(d.numa_node));
    row("ports", a.phys_port_cnt.to_string());
    row("max_qp", a.max_qp.to_string());
    row("max_qp_wr", a.max_qp_wr.to_string());
    row("max_sge", a.max_sge.to_string());
    row("max_cqe", a.max_cqe.to_string());
    row(
        "max_mr_size",
        format!("{} ({:#x})", a.max_mr_size, a.max_mr_size),
    );
    row("max_qp_rd_atom", a.max_qp_rd_atom.to_string());
    row(
        "atomic_cap",
        format!("{} ({})", atomic_cap_name(a.atomic_cap), a.atomic_cap),
    );
    if verbose {
        row("sys_image_guid", format_guid(a.sys_image_guid));
        row("vendor_id", format!("{:#x}", a.vendor_id));
        row("vendor_part_id", a.vendor_part_id.to_string());
        row("hw_ver", format!("{:#x}", a.hw_ver));
        row("max_sge_rd", a.max_sge_rd.to_string());
        row("max_cq", a.max_cq.to_string());
        row("max_mr", a.max_mr.to_string());
        row("max_pd", a.max_pd.to_string());
        row("max_srq", a.max_srq.to_string());
        row("max_ah", a.max_ah.to_string());
        row("max_qp_init_rd_atom", a.max_qp_init_rd_atom.to_string());
        row("max_res_rd_atom", a.max_res_rd_atom.to_string());
        row("page_size_cap", format!("{:#x}", a.page_size_cap));
        row(
            "device_cap_flags",
            std::iter::once(format!("{:#010x}", a.device_cap_flags.bits()))
                .chain(a.device_cap_flags.names())
                .collect::<Vec<_>>()
                .join("\n"),
        );
    }
    caps
}

/// One row per port: state, MTUs, link layer, LID, rate (and more with `verbose`).
fn ports_table(ports: &[PortInfo], verbose: bool) -> Table {
    let mut table = new_table();
    let mut header = vec![
        "port",
        "state",
        "active MTU",
        "max MTU",
        "link layer",
        "LID",
        "rate",
    ];
    if verbose {
        header.extend(["phys state", "SM LID", "max_msg_sz", "gid_tbl_len"]);
    }
    table.set_header(header);
    for p in ports {
        let pa = &p.attr;
        let mut cells = vec![
            pa.port_num.to_string(),
            pa.state.to_string(),
            mtu_text(pa.active_mtu),
            mtu_text(pa.max_mtu),
            pa.link_layer.to_string(),
            lid_text(pa),
            rate_text(pa),
        ];
        if verbose {
            cells.extend([
                format!("{} ({})", phys_state_name(pa.phys_state), pa.phys_state),
                pa.sm_lid.to_string(),
                pa.max_msg_sz.to_string(),
                pa.gid_tbl_len.to_string(),
            ]);
        }
        table.add_row(cells);
    }
    table
}

/// Every port's GID table, the entry verbs-lab chooses marked with `*`.
fn gids_table(ports: &[PortInfo]) -> Table {
    let mut gids = new_table();
    gids.set_header(vec![
        "port", "index", "GID", "type", "netdev", "IP", "chosen",
    ]);
    for p in ports {
        let chosen = p.choice.as_ref().ok().map(|c| c.entry.index);
        for e in &p.gids {
            gids.add_row(vec![
                p.attr.port_num.to_string(),
                e.index.to_string(),
                e.gid.to_string(),
                e.gid_type.to_string(),
                e.netdev.clone().unwrap_or_else(|| "-".into()),
                e.ip().map_or_else(|| "-".into(), |ip| ip.to_string()),
                if chosen == Some(e.index) { "*" } else { "" }.to_string(),
            ]);
        }
    }
    gids
}

// ---- --json -------------------------------------------------------------------------------------
// The document's schema, written once: each struct below is one JSON object, its fields are the
// keys in the order printed, and `None` prints as `null`. Every device fact is in it, whatever
// `-v` says; numbers are the raw verbs values, text is what the tables show.

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
fn to_json(devices: &[DeviceInfo]) -> Result<String> {
    serde_json::to_string_pretty(&JsonDoc::new(devices)).context("writing the JSON document")
}

#[cfg(test)]
mod tests {
    use super::*;
    use verbs_lab::verbs::{DeviceCapFlags, Gid, GidType, Mtu, PortState};

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
