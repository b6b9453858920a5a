//! `vl_devinfo`: what a benchmarker needs to know about the RDMA devices of this machine.
//!
//! Like `ibv_devinfo -v`, but it also prints the GID table with each entry's type, netdev and IP
//! address, and which GID verbs-lab's tools would use on each port and why. `--json` prints the
//! same facts (and all of them, whatever `-v` says) as one JSON document.

#![forbid(unsafe_code)]

use std::process::ExitCode;

use anyhow::{Context as _, Result};
use clap::Parser;
use comfy_table::{presets, Table};

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

mod json;

fn main() -> ExitCode {
    let args: Args = verbs_lab::cli::parse();
    verbs_lab::stdout::until_stdout_closes(|| verbs_lab::cli::exit_code("vl_devinfo", run(&args)))
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
        verbs_lab::outln!("{}", json::to_json(&infos)?);
    } else {
        for (i, info) in infos.iter().enumerate() {
            if i > 0 {
                verbs_lab::outln!();
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
    verbs_lab::outln!("Device {}", d.name);
    verbs_lab::outln!("{}", caps_table(d, verbose));
    verbs_lab::outln!("{}", ports_table(&d.ports, verbose));
    verbs_lab::outln!("{}", gids_table(&d.ports));
    for p in &d.ports {
        match &p.choice {
            Ok(c) => verbs_lab::outln!(
                "verbs-lab uses GID index {} on {} port {}: {}",
                c.entry.index,
                d.name,
                p.attr.port_num,
                c.reason
            ),
            Err(e) => verbs_lab::outln!(
                "verbs-lab has no GID to use on {} port {}: {e}",
                d.name,
                p.attr.port_num
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
