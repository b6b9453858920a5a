//! Address vectors (`struct ibv_ah_attr`) and address handles (`ibv_create_ah(3)`): how a packet
//! finds the remote port. Connected QPs take the vector in their RTR transition; UD sends name
//! an address handle per request.

use std::sync::Arc;

use rdma_sys::{ibv_ah, ibv_ah_attr, ibv_create_ah, ibv_destroy_ah, ibv_gid, ibv_global_route};

use super::error::Result;
use super::gid::Gid;
use super::handle::{verbs_object, Handle};
use super::pd::{Pd, PdInner};

/// The Global Route Header fields: required on RoCE, where ports are addressed by GID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GlobalRoute {
    /// The remote port's GID.
    pub dgid: Gid,
    /// Which entry of *our* GID table to send from (it fixes RoCE v1/v2 and the source IP).
    pub sgid_index: u8,
    /// IB hop limit / IP TTL. On InfiniBand the value given is sent. On RoCE the kernel
    /// replaces it, for unicast destinations, with the hop limit of the IP route to the peer
    /// (`ip route get`, usually the system's default TTL, 64) when it resolves the peer's MAC
    /// address, in `ibv_modify_qp(RTR)` and `ibv_create_ah`; read it back with [`Qp::av`].
    ///
    /// [`Qp::av`]: super::qp::Qp::av
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub flow_label: u32,
}

/// An address vector: the path to a remote port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AhAttr {
    /// Remote LID (InfiniBand); 0 on RoCE.
    pub dlid: u16,
    /// Service level (priority lane).
    pub sl: u8,
    /// Our port to send from.
    pub port_num: u8,
    /// Present on RoCE (and for IB traffic between subnets).
    pub grh: Option<GlobalRoute>,
}

impl AhAttr {
    pub(crate) fn to_ibv(self) -> ibv_ah_attr {
        // SAFETY: plain C data; zero is valid for every field.
        let mut a: ibv_ah_attr = unsafe { std::mem::zeroed() };
        a.dlid = self.dlid;
        a.sl = self.sl;
        a.src_path_bits = 0;
        a.port_num = self.port_num;
        if let Some(g) = self.grh {
            a.is_global = 1;
            a.grh = ibv_global_route {
                dgid: ibv_gid { raw: g.dgid.0 },
                flow_label: g.flow_label,
                sgid_index: g.sgid_index,
                hop_limit: g.hop_limit,
                traffic_class: g.traffic_class,
            };
        }
        a
    }

    pub(crate) fn from_ibv(a: &ibv_ah_attr) -> AhAttr {
        AhAttr {
            dlid: a.dlid,
            sl: a.sl,
            port_num: a.port_num,
            grh: (a.is_global != 0).then_some(GlobalRoute {
                // SAFETY: `raw` is the plain 16-byte view of the GID union.
                dgid: Gid(unsafe { a.grh.dgid.raw }),
                sgid_index: a.grh.sgid_index,
                hop_limit: a.grh.hop_limit,
                traffic_class: a.grh.traffic_class,
                flow_label: a.grh.flow_label,
            }),
        }
    }
}

/// An address handle for UD sends. Keeps its PD alive (its `parent`); every UD send posted with
/// it keeps it alive in turn until that send is done, so dropping an `Ah` right after posting is
/// safe (`ud_sends.rs`).
pub struct Ah {
    pub(crate) inner: Arc<AhInner>,
}

/// The owner of a `struct ibv_ah`: held by its [`Ah`] and by the UD sends that name it.
pub(crate) type AhInner = Handle<ibv_ah, Arc<PdInner>>;

// SAFETY: address handles are immutable after creation and thread-safe in libibverbs. Every UD
// send posted with one holds an Arc of it until a completion shows the send done or its QP is
// destroyed (ud_sends.rs), so no request that names it is in flight when it is destroyed.
verbs_object!(unsafe ibv_ah, destroyed by ibv_destroy_ah);

impl Ah {
    /// Creates an address handle (`ibv_create_ah(3)`).
    pub fn create(pd: &Pd, attr: &AhAttr) -> Result<Ah> {
        let mut a = attr.to_ibv();
        // SAFETY: the PD is live; `a` is a fully initialised attribute struct. The new AH is
        // ours alone, and its PD outlives it as its parent.
        let inner = unsafe {
            Handle::created(
                "ibv_create_ah",
                ibv_create_ah(pd.inner.ptr, &mut a),
                pd.inner.clone(),
            )?
        };
        Ok(Ah {
            inner: Arc::new(inner),
        })
    }
}
