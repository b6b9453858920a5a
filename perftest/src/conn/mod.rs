//! Resources and connection: one protection domain, the registered buffers, one CQ (and its
//! completion channel with `-e`), `-q` QPs ([`resources`], laid out as [`layout`] says); the
//! exchange of endpoints and the QPs walked to RTS, or address handles made for UD
//! ([`connect`](mod@connect)). The device itself is [`crate::conn::device`].
//!
//! ## The buffers
//! Two kinds of memory region ([`Buffers`]) hold `stride`-byte slots:
//! - `src` (one MR for all QPs; one per QP with `--mr_per_qp`): what this side sends (write,
//!   send) or where its reads and atomics land;
//! - `dst` (one MR per QP): what the peer accesses (the target of its writes, the source of its
//!   reads, the word of its atomics) or where its sends arrive (our receive buffers).
//!
//! Each region is registered with only the rights its traffic needs ([`rights`]): the peer's
//! rkey for QP `q` reaches QP `q`'s `dst` slots and nothing else, and only with the one remote
//! operation of the test, and only when the peer initiates that operation at all; the QPs
//! accept that operation alone. See `docs/oob-protocol.md` for the table.
//!
//! Without `--validate` each region is one slot: every message of a QP reuses the same bytes, as
//! perftest does. With `--validate` the regions hold up to a queue's worth of slots (within
//! [`VALIDATE_BUDGET`]) so that every message in flight has bytes of its own, stamped with its
//! sequence number; see `docs/measurement.md`.

use std::time::Duration;

use verbs_lab::verbs::{Ah, Mtu};

use crate::conn::device::LocalDev;
use crate::params::Config;
use crate::proto::Endpoints;

pub mod connect;
pub mod device;
pub mod layout;
pub mod listen;
pub mod rdmacm;
pub mod resources;

pub use connect::{check_remote_slots, connect, exchange_endpoints, qos_readback};
pub use layout::{rights, Layout, Rights, VALIDATE_BUDGET};
pub use resources::{
    create_resources, local_endpoints, qp_caps, src_mr, Buffers, RecvQueue, Resources,
};

/// The Q_Key of our UD QPs.
pub const QKEY: u32 = 0x1111_1111;

/// A connected run: the device, the resources, the peer and what was agreed.
pub struct Link {
    pub dev: LocalDev,
    pub res: Resources,
    /// What we told the peer.
    pub local: Endpoints,
    /// What the peer told us.
    pub remote: Endpoints,
    /// UD: one address handle per QP, towards the peer's QP of the same index.
    pub ahs: Vec<Ah>,
    /// The path MTU, sizes, inline limit and reads in flight the run uses.
    pub agreed: Agreed,
    /// `-R`: the rdma_cm connections of the QPs (dropped after them: declared last).
    pub cm: Option<crate::conn::rdmacm::CmLink>,
}

/// What the run uses once both ports are known: what was asked (`-m`, `-s`/`-a`, `-I`, `-o`)
/// capped by what this device granted and the peer's endpoints told (`connect`). The header
/// prints it; the measuring loops read the sizes and the inline limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Agreed {
    pub path_mtu: Mtu,
    /// The message sizes of the run (one, or the sweep capped by both ports).
    pub sizes: Vec<u64>,
    /// Messages up to this many bytes are sent inline (0: never).
    pub inline_limit: u32,
    /// RDMA reads/atomics in flight per QP (`-o`, capped by both devices).
    pub outstanding: u32,
}

/// How long any single completion may take: the QP's ack timeout times its retries, doubled,
/// at least 5 s (60 s when the ack timeout is infinite).
pub fn completion_timeout(cfg: &Config) -> Duration {
    const RETRY_CNT: u32 = 7;
    match verbs_lab::verbs::attrs::qp_timeout_duration(cfg.qp_timeout) {
        Some(t) => (t * (RETRY_CNT + 1) * 2).max(Duration::from_secs(5)),
        None => Duration::from_secs(60),
    }
}
