//! The opened device and the port a tool uses: `-d` (or the first device), `-i`, the GID of
//! `-x`. What [`crate::conn`] builds on, and what `-R` ([`crate::conn::rdmacm`]) checks its rdma_cm
//! device against.

use anyhow::{bail, Context as _, Result};
use verbs_lab::verbs::{ActivePort, Context, DeviceAttr, DeviceList, GidChoice, PortAttr};

use crate::params::Config;

/// The opened device and the port we use.
pub struct LocalDev {
    pub ctx: Context,
    pub attr: DeviceAttr,
    pub port: PortAttr,
    pub gid: GidChoice,
}

/// Opens the device (`-d`, or the first), checks the port (`-i`) is ACTIVE and picks the GID
/// (`-x`, or the automatic choice): `DeviceList::open_port`. Refuses a single `-s` the port
/// cannot carry.
pub fn open_device(cfg: &Config) -> Result<LocalDev> {
    let ActivePort { ctx, port, gid } = DeviceList::open_port(
        cfg.device.ib_dev.as_deref(),
        cfg.device.ib_port,
        cfg.device.gid_index,
    )
    .map_err(|e| {
        // A device, port or GID index this machine lacks is a usage error (exit 2).
        verbs_lab::cli::CommandLine::context(
            "opening the RDMA device, its port and GID (-d, -i, -x)",
            e,
        )
    })?;
    let attr = ctx
        .query_device()
        .with_context(|| format!("querying {}", ctx.name()))?;
    if let crate::params::Sizes::Single(s) = cfg.sizes {
        if s > u64::from(port.max_msg_sz) {
            bail!(
                "-s {s} is larger than the largest message of {} port {} (max_msg_sz {})",
                ctx.name(),
                cfg.device.ib_port,
                port.max_msg_sz
            );
        }
    }
    Ok(LocalDev {
        ctx,
        attr,
        port,
        gid,
    })
}
