//! Where each QP's slots lie and what the regions and QPs allow: the least rights of this side
//! ([`rights`]) and the slot layout ([`Layout`]). See the module page of [`crate::conn`].

use std::ops::Range;

use verbs_lab::verbs::{AccessFlags, QpType};

use crate::measure::result::{Metric, TestKind};
use crate::params::{Config, UD_GRH};

/// With `--validate`, each region of a QP holds at most this many bytes of slots.
pub const VALIDATE_BUDGET: usize = 32 << 20;
/// Buffer slots start on this boundary (a cache line; atomics need 8).
const SLOT_ALIGN: usize = 64;

/// What this side's regions and QPs let the NIC and the peer do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rights {
    /// The source slots (one MR for every QP).
    pub src: AccessFlags,
    /// Each QP's destination slots (one MR per QP: its rkey is what the peer gets).
    pub dst: AccessFlags,
    /// `qp_access_flags` of every QP (at INIT).
    pub qp: AccessFlags,
}

/// The least rights of this side's regions and QPs for `cfg`: the peer's one remote operation
/// on `dst` (and on the QPs) when the peer initiates it; LOCAL_WRITE where our NIC writes (the
/// receive buffers, the landing slots of our reads and atomics); nothing else.
pub fn rights(cfg: &Config) -> Rights {
    let kind = cfg.tool.kind;
    let server = cfg.is_server();
    // Who posts requests: the client (the server with --reversed); both sides with -b, or in
    // a ping-pong (latency of write and send).
    let (we_post, peer_posts) = match cfg.tool.metric {
        Metric::Bw => {
            let req = cfg.is_requester();
            (req || cfg.bidirectional, !req || cfg.bidirectional)
        }
        Metric::Lat if matches!(kind, TestKind::Write | TestKind::Send) => (true, true),
        Metric::Lat => (!server, server),
    };
    let none = AccessFlags::EMPTY;
    let local = AccessFlags::LOCAL_WRITE;
    let remote = match kind {
        TestKind::Write => AccessFlags::REMOTE_WRITE,
        TestKind::Read => AccessFlags::REMOTE_READ,
        TestKind::Atomic => AccessFlags::REMOTE_ATOMIC,
        TestKind::Send => none,
    };
    let exposed = peer_posts && !remote.is_empty();
    let dst = match kind {
        // Receives land here whenever they are posted (both sides post them).
        TestKind::Send => local,
        // REMOTE_WRITE and REMOTE_ATOMIC need LOCAL_WRITE too (ibv_reg_mr(3)).
        TestKind::Write | TestKind::Atomic if exposed => local | remote,
        TestKind::Read if exposed => remote,
        _ => none,
    };
    let src = match kind {
        TestKind::Read | TestKind::Atomic if we_post => local,
        _ => none,
    };
    Rights {
        src,
        dst,
        qp: if exposed && cfg.conn != QpType::Ud {
            remote
        } else {
            none
        },
    }
}

/// Where each QP's slots lie: source slots in the one source MR, destination slots in the QP's
/// own destination MR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Bytes per slot: the largest message (plus the GRH on UD), rounded up to 64.
    pub stride: usize,
    pub src_slots: usize,
    pub dst_slots: usize,
    /// `--mr_per_qp`: each QP's source slots are a region of their own (offsets start at 0 in
    /// each); otherwise one region holds every QP's, one after the other.
    pub src_per_qp: bool,
}

impl Layout {
    /// The layout for `cfg` when messages are at most `max_size` bytes.
    pub fn new(cfg: &Config, max_size: u64) -> Layout {
        let grh = if cfg.conn == QpType::Ud { UD_GRH } else { 0 };
        let stride = ((max_size + grh) as usize)
            .max(8)
            .div_ceil(SLOT_ALIGN)
            .saturating_mul(SLOT_ALIGN);
        let fit = |want: u32| (want as usize).min(VALIDATE_BUDGET / stride).max(1);
        let kind = cfg.tool.kind;
        let bw = cfg.tool.metric == Metric::Bw;
        let (src_slots, dst_slots) = if !cfg.validate {
            (1, 1)
        } else {
            match kind {
                TestKind::Write if bw => (fit(cfg.queues.tx_depth), fit(cfg.queues.tx_depth)),
                TestKind::Send if bw => (fit(cfg.queues.tx_depth), fit(cfg.queues.rx_depth)),
                TestKind::Send => (1, fit(cfg.queues.rx_depth)),
                _ => (1, 1),
            }
        };
        Layout {
            stride,
            src_slots,
            dst_slots,
            src_per_qp: cfg.mr_per_qp,
        }
    }

    /// Bytes of one source MR for `qps` QPs (one QP's slots with `--mr_per_qp`).
    pub fn src_total(&self, qps: usize) -> usize {
        self.src_slots * self.stride * if self.src_per_qp { 1 } else { qps }
    }

    /// How many source MRs `qps` QPs have: one per QP with `--mr_per_qp`, else one.
    pub fn src_mrs(&self, qps: usize) -> usize {
        if self.src_per_qp {
            qps
        } else {
            1
        }
    }

    /// Bytes of one QP's destination MR.
    pub fn dst_total(&self) -> usize {
        self.dst_slots * self.stride
    }

    /// Offset of a source slot in its source MR (QP `qp`'s own with `--mr_per_qp`).
    pub fn src(&self, qp: usize, slot: usize) -> usize {
        let first = if self.src_per_qp {
            0
        } else {
            qp * self.src_slots
        };
        (first + slot % self.src_slots) * self.stride
    }

    /// Offset of a destination slot in QP `qp`'s destination MR (the same for every QP).
    pub fn dst(&self, _qp: usize, slot: usize) -> usize {
        (slot % self.dst_slots) * self.stride
    }

    /// The whole destination region of a QP: all of its destination MR.
    pub fn dst_region(&self, _qp: usize) -> Range<usize> {
        0..self.dst_total()
    }

    /// The whole source region of a QP.
    pub fn src_region(&self, qp: usize) -> Range<usize> {
        let start = self.src(qp, 0);
        start..start + self.src_slots * self.stride
    }
}
