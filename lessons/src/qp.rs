//! Lesson 02's RC QP and lesson 03's bring-up as the later lessons use them, and [`Side`]: what
//! one side of lessons 05 and 06 works with once connected.

use std::time::Duration;

use anyhow::{Context as _, Result};
use verbs_lab::connect::{path_mtu, ConnectOpts, Endpoint};
use verbs_lab::oob::OobConn;
use verbs_lab::verbs::{AccessFlags, Cq, GidChoice, Mr, Mtu, Pd, Qp, QpCaps, QpInitAttr, QpType};

use crate::{CommonArgs, Device, Narrator, PeerInfo, Terms};

/// Lesson 02's RC QP as the lessons from 03 on use it: both queues on `cq`, one SGE per
/// request, no inline data, every request signaled only if it says so (`sq_sig_all` off).
pub fn create_rc_qp(pd: &Pd, cq: &Cq, max_send_wr: u32, max_recv_wr: u32) -> Result<Qp> {
    create_rc_qp_inline(pd, cq, max_send_wr, max_recv_wr, 0)
}

/// [`create_rc_qp`] asking for room for `max_inline_data` bytes of inline data in each send
/// request (lesson 14; the device may grant more, `qp.caps()` says what it granted).
pub fn create_rc_qp_inline(
    pd: &Pd,
    cq: &Cq,
    max_send_wr: u32,
    max_recv_wr: u32,
    max_inline_data: u32,
) -> Result<Qp> {
    pd.create_qp(&QpInitAttr {
        send_cq: cq,
        recv_cq: cq,
        qp_type: QpType::Rc,
        caps: QpCaps {
            max_send_wr,
            max_recv_wr,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data,
        },
        sq_sig_all: false,
    })
    .context("ibv_create_qp")
}

/// The connection attributes of lesson 03 for this side: our port and GID index, the `-u`
/// timeout, and a path MTU no larger than our active MTU nor the peer's (when it told us).
pub fn connect_opts(args: &CommonArgs, dev: &Device, peer_mtu: Option<Mtu>) -> Result<ConnectOpts> {
    let path_mtu = match peer_mtu {
        Some(theirs) => path_mtu(&[dev.port.active_mtu, Some(theirs)]),
        None => dev.active_mtu(),
    };
    rc_connect_opts(args.ib_port, &dev.gid, path_mtu, args.qp_timeout)
}

/// Lesson 03's connection attributes from their parts: port `ib_port`, the source GID index of
/// `gid` (refused above 255), `path_mtu`, the ack timeout exponent `timeout` (`-u`), no remote
/// access (set `access` for that), the rest as `ConnectOpts::for_gid` — among them a retry
/// count of 6, not 7: on rxe a retry count of 7 never runs out (see `RETRY_CNT`).
/// [`connect_opts`] for the two-sided lessons; the one-process pairs of lessons 09 and 14 call
/// it for each end.
pub fn rc_connect_opts(
    ib_port: u8,
    gid: &GidChoice,
    path_mtu: Mtu,
    timeout: u8,
) -> Result<ConnectOpts> {
    Ok(ConnectOpts {
        timeout,
        ..ConnectOpts::for_gid(ib_port, &gid.entry, path_mtu)?
    })
}

/// Lesson 03's bring-up, INIT -> RTR -> RTS (`bring_up`), with [`connect_opts`]: the path MTU
/// no larger than ours nor the peer's `mtu=` in `theirs`, and `access` as the QP's
/// `qp_access_flags` — what the peer may do to our memory through this QP. Returns the
/// attributes it used, for the lesson to narrate.
pub fn connect_qp(
    args: &CommonArgs,
    dev: &Device,
    qp: &Qp,
    ep: &Endpoint,
    peer: &PeerInfo,
    theirs: &Terms,
    access: AccessFlags,
) -> Result<ConnectOpts> {
    let mut opts = connect_opts(args, dev, Some(theirs.get("mtu")?))?;
    opts.access = access;
    verbs_lab::connect::bring_up(qp, ep, &peer.ep, &opts).context("connecting the QP")?;
    Ok(opts)
}

/// What one side of lessons 05 and 06 works with once connected: its buffer, QP and CQ, the
/// out-of-band connection to the peer, the `--wait` bound of every wait, and the narrator.
pub struct Side<'a> {
    pub mr: &'a Mr,
    pub qp: &'a Qp,
    pub cq: &'a Cq,
    pub conn: &'a mut OobConn,
    pub wait: Duration,
    pub n: &'a Narrator,
}

impl<'a> Side<'a> {
    pub fn new(
        mr: &'a Mr,
        qp: &'a Qp,
        cq: &'a Cq,
        conn: &'a mut OobConn,
        wait: Duration,
        n: &'a Narrator,
    ) -> Side<'a> {
        Side {
            mr,
            qp,
            cq,
            conn,
            wait,
            n,
        }
    }
}
