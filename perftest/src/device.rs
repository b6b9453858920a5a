//! The opened device and the port a tool uses: `-d` (or the first device), `-i`, the GID of
//! `-x`. What [`crate::conn`] builds on, and what `-R` ([`crate::rdmacm`]) checks its rdma_cm
//! device against.

use anyhow::{bail, Context as _, Result};
use verbs_lab::verbs::{Context, DeviceAttr, DeviceList, GidChoice, PortAttr, PortState};

use crate::params::Config;

/// The opened device and the port we use.
pub struct LocalDev {
    pub ctx: Context,
    pub attr: DeviceAttr,
    pub port: PortAttr,
    pub gid: GidChoice,
}

/// Opens the device (`-d`, or the first), checks the port is ACTIVE and picks the GID.
pub fn open_device(cfg: &Config) -> Result<LocalDev> {
    let ctx = DeviceList::open(cfg.device.ib_dev.as_deref()).context("opening the RDMA device")?;
    let attr = ctx
        .query_device()
        .with_context(|| format!("querying {}", ctx.name()))?;
    let port = ctx
        .query_port(cfg.device.ib_port)
        .with_context(|| format!("querying port {} of {}", cfg.device.ib_port, ctx.name()))?;
    if port.state != PortState::ACTIVE {
        bail!(
            "port {} of {} is {}, not ACTIVE: check the link (rdma link show; for SoftRoCE the \
             netdev must be up)",
            cfg.device.ib_port,
            ctx.name(),
            port.state
        );
    }
    let gid = ctx
        .choose_gid(cfg.device.ib_port, cfg.device.gid_index)
        .context("choosing the GID (-x)")?;
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
