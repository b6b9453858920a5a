//! Opening the device a lesson uses (lesson 01's steps in one call), and a completion wait
//! that says what the device saw when it expires.

use std::time::Duration;

use anyhow::{Context as _, Result};
use verbs_lab::connect::{choose_mtu, port_mtu};
use verbs_lab::diag::{device_report, PortCounters};
use verbs_lab::verbs::{
    ActivePort, Context, Cq, DeviceList, GidChoice, Mtu, PortAttr, Qp, VerbsError, WorkCompletion,
};

use crate::{CommonArgs, Narrator};

/// The device a lesson uses, opened, with its port and chosen GID.
pub struct Device {
    pub ctx: Context,
    pub port: PortAttr,
    pub gid: GidChoice,
}

impl Device {
    /// The MTU this side offers its peer: the port's active MTU, or 1024 when the port does not
    /// say (lesson 03 takes the smaller of both sides' as the path MTU).
    pub fn active_mtu(&self) -> Mtu {
        port_mtu(self.port.active_mtu)
    }

    /// The path MTU `-m` asks for (lessons 04 and 12, as `ibv_rc_pingpong`), refused with an
    /// error naming `-m` when it is larger than the port's active MTU (`connect::choose_mtu`).
    pub fn checked_path_mtu(&self, asked: Mtu) -> Result<Mtu> {
        choose_mtu(&[self.port.active_mtu], Some(asked)).context("-m")
    }
}

/// Opens the device named by `-d` (or the first), queries the port and chooses the GID, as
/// lesson 01 taught. Narrates what it found.
pub fn open_device(args: &CommonArgs, n: &Narrator) -> Result<Device> {
    open_named_device(args.ib_dev.as_deref(), args.ib_port, args.gid_idx, n)
}

/// [`open_device`] for the lessons that hold both ends in one process (09, 14) and so name two
/// devices: `dev` (or the first), its port `ib_port`, which must be ACTIVE, and the GID `-g`
/// names or the automatic choice. Narrates what it found.
pub fn open_named_device(
    dev: Option<&str>,
    ib_port: u8,
    gid_idx: Option<u32>,
    n: &Narrator,
) -> Result<Device> {
    // ibv_open_device, ibv_query_port (refused unless ACTIVE), then the GID: lesson 01's steps.
    let ActivePort { ctx, port, gid } = DeviceList::open_port(dev, ib_port, gid_idx)
        .context("opening the RDMA device, its port and GID")?;
    n.say(format!(
        "opened {} port {} ({}, active MTU {}, {})",
        ctx.name(),
        ib_port,
        port.state,
        port.active_mtu.map_or("?".into(), |m| m.to_string()),
        port.link_layer
    ));
    n.say(format!("using {gid}"));
    Ok(Device { ctx, port, gid })
}

/// Waits up to `wait` for one completion on `cq` and checks its status (`Cq::poll_one`). When
/// the wait expires, the error also says what the device says: `qp`'s state and the counters
/// of our port that moved since `since` (`verbs_lab::diag`), so that "timed out" is never the
/// whole story.
pub fn poll_one_explained(
    cq: &Cq,
    qp: &Qp,
    since: &PortCounters,
    wait: Duration,
    what: &str,
) -> Result<WorkCompletion> {
    match cq.poll_one(wait, what) {
        Err(e @ VerbsError::Timeout { .. }) => {
            Err(anyhow::anyhow!("{e}; {}", device_report(Some(qp), since)))
        }
        r => Ok(r?),
    }
}
