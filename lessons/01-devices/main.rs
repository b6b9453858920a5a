//! # Lesson 01 — devices, ports and GIDs
//!
//! Before any data moves, a program has to find an RDMA device, open it, and learn three
//! things about it: what it can do (its capabilities), whether its ports are up and how they
//! are addressed (LID or GID), and which GID to put in packets. This lesson does exactly that,
//! in the order the hardware needs it:
//!
//! 1. list the devices            `ibv_get_device_list(3)`
//! 2. open one                    `ibv_open_device(3)`
//! 3. ask what it can do          `ibv_query_device(3)`
//! 4. ask about each port         `ibv_query_port(3)`
//! 5. read each port's GID table  `ibv_query_gid(3)` — and pick the GID to use
//! 6. close it                    `ibv_close_device(3)`
//! 7. read it all again through the safe layer and compare
//! 8. free the list               `ibv_free_device_list(3)`
//!
//! Steps 2 to 7 run once per device. This is the one place in verbs-lab that calls the C API
//! (`rdma-sys`) directly, so you see what every later lesson does underneath; each `unsafe`
//! block says why it is sound. Step 7 reads the same facts through the safe layer
//! (`verbs_lab::verbs`), which the other lessons use, and checks that both answers agree.
//! See README.md beside this file.

// The one exception to `#![forbid(unsafe_code)]` in the lessons and tools, on purpose: this
// lesson shows the raw C API once (each block says why it holds).
#![allow(unsafe_code)]

use std::ffi::CStr;
use std::io;
use std::net::Ipv6Addr;
use std::os::raw::c_int;
use std::process::ExitCode;
use std::ptr;

use anyhow::{bail, Context as _, Result};
use clap::Parser;
use rdma_sys::{
    ___ibv_query_port, ibv_close_device, ibv_context, ibv_device, ibv_device_attr,
    ibv_free_device_list, ibv_get_device_guid, ibv_get_device_list, ibv_get_device_name, ibv_gid,
    ibv_open_device, ibv_port_attr, ibv_port_state, ibv_query_device, ibv_query_gid,
};

use verbs_lab::cli::DevicePortFilter;
use verbs_lab::cli::HOW_TO_GET_A_DEVICE;
use verbs_lab::sysfs;
use verbs_lab::verbs::device::format_guid;
use verbs_lab::verbs::{DeviceList, VerbsError};
use verbs_lab_lessons::{lesson_main, outln, Narrator};

/// Lesson 01: list the RDMA devices, open them, query device, ports and GID tables.
#[derive(Parser, Debug)]
struct Args {
    /// `-d DEV` and `-i N`, as `vl_devinfo` takes them: which devices and ports to look at.
    #[command(flatten)]
    only: DevicePortFilter,

    /// No narration: one summary line per device
    #[arg(short, long)]
    quiet: bool,
}

// `ibv_port_attr.link_layer` values; rdma-sys does not bind these two constants.
const IBV_LINK_LAYER_INFINIBAND: u8 = 1;
const IBV_LINK_LAYER_ETHERNET: u8 = 2;

fn main() -> ExitCode {
    lesson_main("lesson01_devices", |_: &Args| Ok(()), |a: &Args, ()| run(a))
}

fn run(args: &Args) -> Result<()> {
    let n = Narrator { quiet: args.quiet };

    // ── Step 1: list the devices ─────────────────────────────────────────────────────────────
    // libibverbs scans /sys/class/infiniband_verbs and returns a NULL-terminated array of
    // `struct ibv_device *`, one per device, and their number in `num`. Nothing is opened yet.
    n.step(1, "List the RDMA devices — ibv_get_device_list(&num)");
    let mut num: c_int = 0;
    // SAFETY: `num` is a valid out-pointer. The array returned is ours until we hand it back
    // with ibv_free_device_list, which the guard below does exactly once.
    let raw_list = unsafe { ibv_get_device_list(&mut num) };
    if raw_list.is_null() {
        // NULL means failure, and errno says why. ENOSYS ("Function not implemented") is what a
        // kernel without RDMA support gives: there is nothing to open on this machine.
        let errno = io::Error::last_os_error();
        bail!(
            "no RDMA devices: ibv_get_device_list returned NULL: {errno}; this kernel has no \
             RDMA support or no RDMA driver is loaded; {HOW_TO_GET_A_DEVICE}"
        );
    }
    let list = RawDeviceList {
        ptr: raw_list,
        len: num.max(0) as usize,
        n,
    };
    if list.len == 0 {
        // A non-NULL but empty list: RDMA is in the kernel, but no device is registered.
        return Err(VerbsError::NoDevices.into());
    }
    n.say(format!("returned {} device(s):", list.len));
    for (i, &dev) in list.devices().iter().enumerate() {
        n.say(format!(
            "  [{i}] {}  node GUID {}   (ibv_get_device_name, ibv_get_device_guid)",
            device_name(dev),
            format_guid(device_guid(dev))
        ));
    }

    // Pick the devices to look at: the one named with -d, or all of them.
    let chosen: Vec<*mut ibv_device> = match &args.only.ib_dev {
        Some(want) => match list.devices().iter().find(|&&d| device_name(d) == *want) {
            Some(&d) => vec![d],
            None => {
                return Err(VerbsError::DeviceNotFound {
                    name: want.clone(),
                    available: list.devices().iter().map(|&d| device_name(d)).collect(),
                }
                .into())
            }
        },
        None => list.devices().to_vec(),
    };

    for dev in chosen {
        let name = device_name(dev);
        let summary = explore(dev, &name, &args.only, &n)?;
        if args.quiet {
            outln!("{summary}");
        }
        cross_check(&name, &summary, &n)
            .with_context(|| format!("cross-checking {name} against the safe layer"))?;
    }

    // ── Step 8: free the list ────────────────────────────────────────────────────────────────
    // Device pointers from the list are valid only until the list is freed; contexts opened
    // from them would stay valid, but we have closed ours already.
    n.step(8, "Free the device list — ibv_free_device_list(list)");
    list.free();
    n.say("done: the device pointers are gone now");
    if !n.quiet {
        outln!();
    }
    n.say("Next: the later lessons and every tool use the safe layer instead of these raw calls:");
    n.say("verbs_lab::verbs::DeviceList::new()?.find(\"rxe0\")?.open()? gives a Context with");
    n.say("ctx.query_device(), ctx.query_port(1), ctx.gid_table(1) and ctx.choose_gid(1, None);");
    n.say("the list is freed and the device closed when those values are dropped.");
    Ok(())
}

/// What the raw calls found about one device, kept to compare with the safe layer.
struct Summary {
    name: String,
    fw_ver: String,
    node_guid: u64,
    max_qp: i32,
    ports: Vec<PortSummary>,
}

struct PortSummary {
    port: u8,
    state: u32,
    active_mtu: u32,
    link_layer: u8,
    lid: u16,
    populated_gids: usize,
    chosen: Option<RawGid>,
}

#[derive(Clone)]
struct RawGid {
    index: u32,
    gid: [u8; 16],
    gid_type: Option<String>,
    netdev: Option<String>,
}

impl std::fmt::Display for Summary {
    /// The `--quiet` line: one device, each port's state, MTU, link layer, LID and chosen GID.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: fw {}, node GUID {}, max_qp {}",
            self.name,
            self.fw_ver,
            format_guid(self.node_guid),
            self.max_qp
        )?;
        for p in &self.ports {
            write!(
                f,
                "; port {} {} MTU {} {} LID {}",
                p.port,
                port_state_name(p.state),
                p.active_mtu,
                link_layer_name(p.link_layer),
                p.lid
            )?;
            match &p.chosen {
                Some(g) => write!(
                    f,
                    " GID[{}] {} ({}, {}, {})",
                    g.index,
                    gid_text(&g.gid),
                    g.gid_type.as_deref().unwrap_or("type unknown"),
                    g.netdev.as_deref().unwrap_or("no netdev"),
                    Ipv6Addr::from(g.gid).to_canonical()
                )?,
                None => write!(f, " no GID")?,
            }
        }
        Ok(())
    }
}

/// Steps 2 to 6 for one device: open, query the device, its ports and GID tables, close.
fn explore(
    dev: *mut ibv_device,
    name: &str,
    only: &DevicePortFilter,
    n: &Narrator,
) -> Result<Summary> {
    // ── Step 2: open the device ──────────────────────────────────────────────────────────────
    // Opening gives a context: the handle every later object (PD, CQ, QP, MR) is created from.
    // It opens /dev/infiniband/uverbsN and loads the provider library (librxe for SoftRoCE).
    n.step(2, &format!("Open {name} — ibv_open_device(dev)"));
    // SAFETY: `dev` is an entry of a device list that `run` keeps alive until after we return.
    let raw_ctx = unsafe { ibv_open_device(dev) };
    if raw_ctx.is_null() {
        let errno = io::Error::last_os_error();
        bail!(
            "ibv_open_device({name}) returned NULL: {errno} (permission denied means: run as \
             root or join the rdma group)"
        );
    }
    let ctx = RawContext {
        ptr: raw_ctx,
        name: name.to_string(),
        n: *n,
    };
    n.say(format!("returned context {raw_ctx:p}"));
    n.say(format!(
        "every later verb on {name} goes through this handle; nothing is allocated on the NIC yet"
    ));

    // ── Step 3: what can the device do? ──────────────────────────────────────────────────────
    n.step(
        3,
        &format!("Ask {name} what it can do — ibv_query_device(ctx, &attr)"),
    );
    // SAFETY: plain C data; all-zero is a valid value, and it guarantees fw_ver ends in a NUL.
    let mut dattr: ibv_device_attr = unsafe { std::mem::zeroed() };
    // SAFETY: the context is open and `dattr` is a valid, full-size out-pointer.
    let ret = unsafe { ibv_query_device(ctx.ptr, &mut dattr) };
    if ret != 0 {
        bail!("ibv_query_device({name}) failed: {}", verb_error(ret));
    }
    // SAFETY: fw_ver is a NUL-terminated char array (zeroed above, then filled by the provider).
    let fw_ver = unsafe { CStr::from_ptr(dattr.fw_ver.as_ptr()) }
        .to_string_lossy()
        .into_owned();
    let node_guid = u64::from_be(dattr.node_guid); // the GUIDs are big-endian (__be64)
    n.say("returned 0");
    n.say(format!(
        "fw_ver {fw_ver:?}, node_guid {}, phys_port_cnt {}",
        format_guid(node_guid),
        dattr.phys_port_cnt
    ));
    n.say(format!(
        "max_qp {} queue pairs, max_qp_wr {} work requests per queue, max_sge {} per request",
        dattr.max_qp, dattr.max_qp_wr, dattr.max_sge
    ));
    n.say(format!(
        "max_cqe {} per completion queue, max_mr_size {}",
        dattr.max_cqe,
        if dattr.max_mr_size == u64::MAX {
            "2^64-1 bytes (no limit)".to_string()
        } else {
            format!("{} bytes", dattr.max_mr_size)
        },
    ));
    // Two limits on RDMA Reads and Atomics in flight per QP, one for each end: a QP's
    // max_dest_rd_atomic (the peer's reads it serves) is capped by max_qp_rd_atom, its
    // max_rd_atomic (the reads it issues) by max_qp_init_rd_atom.
    n.say(format!(
        "max_qp_rd_atom {} reads/atomics a QP serves at once as responder, \
         max_qp_init_rd_atom {} it may issue at once as initiator",
        dattr.max_qp_rd_atom, dattr.max_qp_init_rd_atom
    ));
    n.say(format!(
        "atomic_cap {} — {}",
        atomic_cap_name(dattr.atomic_cap),
        if dattr.atomic_cap == 0 {
            "no RDMA atomics on this device"
        } else {
            "fetch-and-add and compare-and-swap work"
        }
    ));

    // ── Step 4 and 5: each port, and its GID table ───────────────────────────────────────────
    // The port named with -i, or all of them (phys_port_cnt of them, numbered from 1).
    let ports = only.ports(name, dattr.phys_port_cnt)?;
    let mut port_summaries = Vec::new();
    for port in ports {
        port_summaries.push(query_port_and_gids(&ctx, name, port, n)?);
    }

    // ── Step 6: close the device ─────────────────────────────────────────────────────────────
    // Everything created from the context (none here) must be destroyed first.
    n.step(6, &format!("Close {name} — ibv_close_device(ctx)"));
    let ret = ctx.close();
    if ret != 0 {
        bail!("ibv_close_device({name}) failed: {}", verb_error(ret));
    }
    n.say("returned 0");

    Ok(Summary {
        name: name.to_string(),
        fw_ver,
        node_guid,
        max_qp: dattr.max_qp,
        ports: port_summaries,
    })
}

/// Step 4 (`ibv_query_port`) and step 5 (`ibv_query_gid` over the whole table) for one port.
fn query_port_and_gids(
    ctx: &RawContext,
    name: &str,
    port: u8,
    n: &Narrator,
) -> Result<PortSummary> {
    // ── Step 4: the port ─────────────────────────────────────────────────────────────────────
    // ibv_query_port(3) is a static inline in verbs.h; rdma-sys binds the exported function
    // behind it, ___ibv_query_port. Zero the struct first: an old-ABI fallback fills only part.
    n.step(
        4,
        &format!("Ask about {name} port {port} — ibv_query_port(ctx, {port}, &port_attr)"),
    );
    // SAFETY: plain C data; all-zero is a valid value.
    let mut pattr: ibv_port_attr = unsafe { std::mem::zeroed() };
    // SAFETY: the context is open and `pattr` is a valid, full-size out-pointer.
    let ret = unsafe { ___ibv_query_port(ctx.ptr, port, &mut pattr) };
    if ret != 0 {
        bail!("ibv_query_port({name}, {port}) failed: {}", verb_error(ret));
    }
    let active_mtu = mtu_bytes(pattr.active_mtu);
    n.say("returned 0");
    let state_meaning = if pattr.state == ibv_port_state::IBV_PORT_ACTIVE {
        "the link is up and the port can carry traffic"
    } else {
        "the port cannot carry traffic yet (is the netdev up? on InfiniBand, is an SM running?)"
    };
    n.say(format!(
        "state {} — {state_meaning}",
        port_state_name(pattr.state)
    ));
    n.say(format!(
        "active_mtu {active_mtu} bytes (max_mtu {}) — the largest payload of one RDMA packet; \
         a longer message is cut into packets of this size",
        mtu_bytes(pattr.max_mtu)
    ));
    n.say(format!(
        "link_layer {} — {}",
        link_layer_name(pattr.link_layer),
        match pattr.link_layer {
            IBV_LINK_LAYER_ETHERNET => "RoCE: RDMA carried in Ethernet frames (v2: in UDP/IP)",
            IBV_LINK_LAYER_INFINIBAND => "an InfiniBand fabric",
            _ => "unspecified (old kernels: InfiniBand)",
        }
    ));
    if pattr.link_layer == IBV_LINK_LAYER_ETHERNET {
        n.say(format!(
            "lid {} — a LID is the 16-bit address an InfiniBand subnet manager hands out; \
             Ethernet has none, so on RoCE it is 0 and peers are addressed by GID",
            pattr.lid
        ));
    } else {
        n.say(format!(
            "lid {} — this port's address on the InfiniBand subnet, given by the subnet \
             manager (sm_lid {})",
            pattr.lid, pattr.sm_lid
        ));
    }

    // ── Step 5: the GID table ────────────────────────────────────────────────────────────────
    // A GID is a 128-bit port address in IPv6 format. On RoCE each IP address of the netdev
    // becomes one GID per RoCE version; unused indexes read as all zeros.
    let title = format!(
        "Read the GID table of {name} port {port} — ibv_query_gid(ctx, {port}, i, &gid), \
         i = 0..{}",
        pattr.gid_tbl_len
    );
    n.step(5, &title);
    let mut table: Vec<RawGid> = Vec::new();
    for index in 0..pattr.gid_tbl_len.max(0) {
        let mut gid = ibv_gid { raw: [0; 16] };
        // SAFETY: the context is open, `index` < gid_tbl_len, `gid` is a valid out-pointer.
        let ret = unsafe { ibv_query_gid(ctx.ptr, port, index, &mut gid) };
        if ret != 0 {
            bail!(
                "ibv_query_gid({name}, {port}, {index}) failed: {}",
                verb_error(ret)
            );
        }
        // SAFETY: every bit pattern of the 16-byte union is a valid [u8; 16].
        let raw = unsafe { gid.raw };
        if raw == [0; 16] {
            continue; // an empty slot
        }
        // ibv_query_gid gives only the 16 bytes. The entry's type (RoCE v1 or v2) and the
        // netdev it belongs to are in sysfs (ibv_query_gid_ex(3) returns them too).
        let index = index as u32;
        table.push(RawGid {
            index,
            gid: raw,
            gid_type: sysfs::gid_type(name, port, index),
            netdev: sysfs::gid_netdev(name, port, index),
        });
    }
    n.say(format!(
        "{} of {} entries are populated (type and netdev read from {}/ports/{port}/gid_attrs/):",
        table.len(),
        pattr.gid_tbl_len,
        sysfs::device_dir(name).display()
    ));
    for g in &table {
        n.say(format!(
            "  [{}] {}  {}  on {}  = {}",
            g.index,
            gid_text(&g.gid),
            g.gid_type.as_deref().unwrap_or("type unknown"),
            g.netdev.as_deref().unwrap_or("no netdev"),
            ip_text(&g.gid)
        ));
    }

    let link_local = |g: &RawGid| g.gid[0] == 0xfe && g.gid[1] & 0xc0 == 0x80;
    if pattr.link_layer == IBV_LINK_LAYER_ETHERNET && table.iter().any(link_local) {
        n.say(
            "(fe80:: GIDs are made from the netdev's MAC address: a veth gets a new random MAC \
             at every boot, so never hard-code one)",
        );
    }

    // Which GID to use? Both sides of a connection must choose without talking, so the rule is
    // fixed: the first RoCE v2 GID holding an IPv4-mapped address (RoCE v2 is routable UDP/IP,
    // and the IPv4 entry is stable across reboots, unlike fe80:: which follows the MAC);
    // otherwise the first populated GID (an InfiniBand port has just its fe80:: GID).
    let is_v2_ipv4 = |g: &&RawGid| {
        let ipv4_mapped = Ipv6Addr::from(g.gid).to_ipv4_mapped().is_some();
        g.gid_type.as_deref() == Some("RoCE v2") && ipv4_mapped
    };
    let chosen = match table.iter().find(is_v2_ipv4) {
        Some(g) => {
            n.say(format!(
                "→ use GID index {}: the first RoCE v2 GID with an IPv4 address ({}); a peer \
                 puts this GID in the destination of every packet it sends here (the GRH; on \
                 RoCE v2, the IP header)",
                g.index,
                Ipv6Addr::from(g.gid).to_canonical()
            ));
            Some(g.clone())
        }
        None => match table.first() {
            Some(g) => {
                n.say(format!(
                    "→ use GID index {}: no RoCE v2 IPv4 GID here, so the first populated one",
                    g.index
                ));
                Some(g.clone())
            }
            None => {
                n.say("→ no GID to use: the table is empty (give the netdev an IP address)");
                None
            }
        },
    };

    Ok(PortSummary {
        port,
        state: pattr.state,
        active_mtu,
        link_layer: pattr.link_layer,
        lid: pattr.lid,
        populated_gids: table.len(),
        chosen,
    })
}

/// Reads the same facts through the safe layer and checks that both answers agree.
fn cross_check(name: &str, raw: &Summary, n: &Narrator) -> Result<()> {
    n.step(
        7,
        &format!("Cross-check {name} with the safe layer — verbs_lab::verbs"),
    );
    let list = DeviceList::new()?;
    let ctx = list.find(name)?.open()?;
    let dev = ctx.query_device()?;
    let same = |what: &str, raw_v: String, safe_v: String| -> Result<()> {
        if raw_v != safe_v {
            bail!("{what}: the raw calls said {raw_v}, the safe layer says {safe_v}");
        }
        Ok(())
    };
    same("fw_ver", raw.fw_ver.clone(), dev.fw_ver.clone())?;
    same(
        "node GUID",
        format_guid(raw.node_guid),
        format_guid(dev.node_guid),
    )?;
    same("max_qp", raw.max_qp.to_string(), dev.max_qp.to_string())?;
    for p in &raw.ports {
        let port = ctx.query_port(p.port)?;
        same(
            "port state",
            port_state_name(p.state).into(),
            format!("IBV_PORT_{}", port.state),
        )?;
        same(
            "active MTU",
            p.active_mtu.to_string(),
            port.active_mtu.map_or(0, |m| m.bytes()).to_string(),
        )?;
        same("LID", p.lid.to_string(), port.lid.to_string())?;
        let table = ctx.gid_table(p.port)?;
        same(
            "populated GIDs",
            p.populated_gids.to_string(),
            table.len().to_string(),
        )?;
        let safe_choice = ctx.choose_gid(p.port, None).ok();
        same(
            "chosen GID",
            format!("{:?}", p.chosen.as_ref().map(|g| (g.index, g.gid))),
            format!(
                "{:?}",
                safe_choice.as_ref().map(|c| (c.entry.index, c.entry.gid.0))
            ),
        )?;
    }
    n.say(
        "DeviceList::new()?.find(name)?.open()?, then query_device(), query_port(p), \
         gid_table(p) and choose_gid(p, None)",
    );
    n.say(format!(
        "they read the same fw_ver, node GUID, max_qp, port state, MTU, LID, number of GIDs \
         and chosen GID for {name}: the raw calls and the safe layer agree"
    ));
    Ok(())
}

// ── Guards: free the list and close the device on every path ─────────────────────────────────
// The happy path calls free()/close() explicitly, where the lesson narrates them; if a step
// fails and `?` returns early, Drop still hands the resource back. The safe layer does the same.

/// The array returned by `ibv_get_device_list`.
struct RawDeviceList {
    ptr: *mut *mut ibv_device,
    len: usize,
    n: Narrator,
}

impl RawDeviceList {
    fn devices(&self) -> &[*mut ibv_device] {
        // SAFETY: the array holds `len` valid device pointers (plus a NULL terminator) and lives
        // until ibv_free_device_list, which needs `self` and so cannot run while this borrow does.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    fn free(mut self) {
        let list = std::mem::replace(&mut self.ptr, ptr::null_mut());
        // SAFETY: `list` came from ibv_get_device_list and is freed once: Drop sees NULL now.
        unsafe { ibv_free_device_list(list) };
    }
}

impl Drop for RawDeviceList {
    fn drop(&mut self) {
        if !self.ptr.is_null() {
            // SAFETY: as in free(): from ibv_get_device_list, not freed yet.
            unsafe { ibv_free_device_list(self.ptr) };
            self.n
                .say("(on the way out after an error: ibv_free_device_list(list))");
        }
    }
}

/// An opened device.
struct RawContext {
    ptr: *mut ibv_context,
    name: String,
    n: Narrator,
}

impl RawContext {
    /// `ibv_close_device`; returns its result (0, or -1 with errno set).
    fn close(mut self) -> c_int {
        let ctx = std::mem::replace(&mut self.ptr, ptr::null_mut());
        // SAFETY: `ctx` came from ibv_open_device, nothing was created from it, and it is
        // closed once: Drop sees NULL now.
        unsafe { ibv_close_device(ctx) }
    }
}

impl Drop for RawContext {
    fn drop(&mut self) {
        if !self.ptr.is_null() {
            // SAFETY: as in close(): opened, nothing created from it, not closed yet.
            unsafe { ibv_close_device(self.ptr) };
            self.n.say(format!(
                "(on the way out after an error: ibv_close_device({}))",
                self.name
            ));
        }
    }
}

// ── Small helpers: names and formats ─────────────────────────────────────────────────────────

fn device_name(dev: *mut ibv_device) -> String {
    // SAFETY: `dev` is an entry of a live device list; the name is a NUL-terminated string
    // inside the device, copied here before the list can be freed.
    unsafe { CStr::from_ptr(ibv_get_device_name(dev)) }
        .to_string_lossy()
        .into_owned()
}

fn device_guid(dev: *mut ibv_device) -> u64 {
    // SAFETY: `dev` is an entry of a live device list.
    u64::from_be(unsafe { ibv_get_device_guid(dev) })
}

/// A failed verb's error: verbs return an errno value, or -1 with `errno` set.
fn verb_error(ret: c_int) -> io::Error {
    if ret > 0 {
        io::Error::from_raw_os_error(ret)
    } else {
        io::Error::last_os_error()
    }
}

fn port_state_name(state: u32) -> &'static str {
    match state {
        ibv_port_state::IBV_PORT_DOWN => "IBV_PORT_DOWN",
        ibv_port_state::IBV_PORT_INIT => "IBV_PORT_INIT",
        ibv_port_state::IBV_PORT_ARMED => "IBV_PORT_ARMED",
        ibv_port_state::IBV_PORT_ACTIVE => "IBV_PORT_ACTIVE",
        ibv_port_state::IBV_PORT_ACTIVE_DEFER => "IBV_PORT_ACTIVE_DEFER",
        _ => "IBV_PORT_NOP",
    }
}

fn link_layer_name(ll: u8) -> &'static str {
    match ll {
        IBV_LINK_LAYER_INFINIBAND => "InfiniBand",
        IBV_LINK_LAYER_ETHERNET => "Ethernet",
        _ => "Unspecified",
    }
}

/// `enum ibv_mtu` (1 = 256 … 5 = 4096) in bytes; 0 when unknown.
fn mtu_bytes(mtu: u32) -> u32 {
    if (1..=5).contains(&mtu) {
        128 << mtu
    } else {
        0
    }
}

fn atomic_cap_name(cap: u32) -> &'static str {
    match cap {
        0 => "IBV_ATOMIC_NONE",
        1 => "IBV_ATOMIC_HCA",
        2 => "IBV_ATOMIC_GLOB",
        _ => "unknown",
    }
}

/// The sysfs / ibv_devinfo form: eight groups of four hex digits.
fn gid_text(gid: &[u8; 16]) -> String {
    gid.chunks(2)
        .map(|p| format!("{:02x}{:02x}", p[0], p[1]))
        .collect::<Vec<_>>()
        .join(":")
}

/// The IP address a RoCE GID stands for: `::ffff:a.b.c.d` is IPv4 a.b.c.d.
fn ip_text(gid: &[u8; 16]) -> String {
    let v6 = Ipv6Addr::from(*gid);
    match v6.to_ipv4_mapped() {
        Some(v4) => format!("::ffff:{v4}, the IPv4 address {v4}"),
        None if v6.segments()[0] & 0xffc0 == 0xfe80 => format!("{v6}, an IPv6 link-local address"),
        None => format!("{v6}, an IPv6 address"),
    }
}
