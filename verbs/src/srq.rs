//! Shared receive queues (`ibv_create_srq(3)`, `ibv_modify_srq(3)`, `ibv_query_srq(3)`,
//! `ibv_post_srq_recv(3)`): one pool of receive buffers that any number of QPs draw from, so
//! receive memory grows with the traffic, not with the number of connections.

use std::mem::MaybeUninit;
use std::sync::Arc;

use rdma_sys::{
    ibv_create_srq, ibv_destroy_srq, ibv_modify_srq, ibv_query_srq, ibv_recv_wr, ibv_sge, ibv_srq,
    ibv_srq_attr, ibv_srq_attr_mask, ibv_srq_init_attr,
};

use super::error::{Result, VerbsError};
use super::handle::{verbs_object, Handle};
use super::pd::{Pd, PdInner};
use super::qp::{Qp, QpInitAttr};
use super::wr::RecvWr;

/// The owner of a `struct ibv_srq`; its `parent` is the PD.
pub(crate) type SrqInner = Handle<ibv_srq, Arc<PdInner>>;

// SAFETY: SRQs are thread-safe in libibverbs (providers lock the queue); no state of our own.
// Every QP attached to this SRQ holds an Arc of it (the kernel refuses to destroy an SRQ in use).
verbs_object!(unsafe ibv_srq, destroyed by ibv_destroy_srq);

/// The sizes of an SRQ and its limit (`struct ibv_srq_attr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SrqAttr {
    /// Receive requests the SRQ holds at most.
    pub max_wr: u32,
    /// SGEs per receive request.
    pub max_sge: u32,
    /// The limit: when fewer receives than this remain posted, the device raises
    /// `IBV_EVENT_SRQ_LIMIT_REACHED` once and disarms it (0 = disarmed).
    pub srq_limit: u32,
}

/// A shared receive queue. QPs attached to it keep it alive.
#[derive(Clone)]
pub struct Srq {
    pub(crate) inner: Arc<SrqInner>,
}

impl Srq {
    /// The provider's handle for this SRQ, as async events name it ([`super::AsyncEvent::srq`]).
    pub fn id(&self) -> usize {
        self.inner.ptr as usize
    }

    /// The sizes granted and the current limit (`ibv_query_srq(3)`). The limit reads 0 again
    /// once its event has fired.
    pub fn query(&self) -> Result<SrqAttr> {
        let mut a = MaybeUninit::<ibv_srq_attr>::zeroed();
        // SAFETY: the SRQ is live; `a` is a valid out-pointer.
        let ret = unsafe { ibv_query_srq(self.inner.ptr, a.as_mut_ptr()) };
        VerbsError::check_ret("ibv_query_srq", ret)?;
        // SAFETY: zero-initialised and filled by the call.
        let a = unsafe { a.assume_init() };
        Ok(SrqAttr {
            max_wr: a.max_wr,
            max_sge: a.max_sge,
            srq_limit: a.srq_limit,
        })
    }

    /// Arms the limit (`ibv_modify_srq(3)` with `IBV_SRQ_LIMIT`): once fewer than `limit`
    /// receives remain posted, one `IBV_EVENT_SRQ_LIMIT_REACHED` arrives on the context's async
    /// event queue and the limit disarms itself; arm again for the next one.
    pub fn arm_limit(&self, limit: u32) -> Result<()> {
        let mut a = ibv_srq_attr {
            max_wr: 0,
            max_sge: 0,
            srq_limit: limit,
        };
        // SAFETY: the SRQ is live; only srq_limit is read, as the mask says.
        let ret = unsafe {
            ibv_modify_srq(
                self.inner.ptr,
                &mut a,
                ibv_srq_attr_mask::IBV_SRQ_LIMIT.0 as i32,
            )
        };
        VerbsError::check_ret("ibv_modify_srq(IBV_SRQ_LIMIT)", ret)
    }

    /// Posts receive requests to the shared queue (`ibv_post_srq_recv(3)`): whichever QP gets
    /// the next SEND consumes the next one.
    pub fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<()> {
        for (i, wr) in wrs.iter().enumerate() {
            let mut raw = ibv_recv_wr {
                wr_id: wr.wr_id,
                next: std::ptr::null_mut(),
                sg_list: wr.sges.as_ptr() as *mut ibv_sge,
                num_sge: wr.sges.len() as i32,
            };
            let mut bad: *mut ibv_recv_wr = std::ptr::null_mut();
            // SAFETY: `raw` is a single initialised request whose SGEs name registered memory
            // (an Sge can only come from an MR), which stays allocated while registered; the
            // SRQ is live. The provider copies the request before returning.
            let ret = unsafe { rdma_sys::ibv_post_srq_recv(self.inner.ptr, &mut raw, &mut bad) };
            if ret != 0 {
                return Err(match VerbsError::from_ret("ibv_post_srq_recv", ret) {
                    VerbsError::Call { verb, errno, hint } => VerbsError::Call {
                        verb,
                        errno,
                        hint: Some(format!(
                            "request {i} of {} refused{}",
                            wrs.len(),
                            hint.map(|h| format!("; {h}")).unwrap_or_default()
                        )),
                    },
                    other => other,
                });
            }
        }
        Ok(())
    }
}

impl Pd {
    /// Creates a shared receive queue (`ibv_create_srq(3)`) of `max_wr` receives of `max_sge`
    /// SGEs each; the limit starts disarmed.
    pub fn create_srq(&self, max_wr: u32, max_sge: u32) -> Result<Srq> {
        // SAFETY: plain C data; zero is valid for every field.
        let mut init: ibv_srq_init_attr = unsafe { std::mem::zeroed() };
        init.attr.max_wr = max_wr;
        init.attr.max_sge = max_sge;
        // SAFETY: the PD is live; `init` is fully initialised; the new SRQ is ours alone, and
        // the PD outlives it as its parent.
        let inner = unsafe {
            Handle::created(
                "ibv_create_srq",
                ibv_create_srq(self.inner.ptr, &mut init),
                self.inner.clone(),
            )?
        };
        Ok(Srq {
            inner: Arc::new(inner),
        })
    }

    /// Creates a QP whose receives come from `srq` (`ibv_create_qp(3)` with `init_attr.srq`):
    /// its own receive queue is unused, `caps.max_recv_wr`/`max_recv_sge` are ignored, and
    /// [`Qp::post_recv`] on it fails. The QP keeps the SRQ alive.
    pub fn create_qp_with_srq(&self, attr: &QpInitAttr<'_>, srq: &Srq) -> Result<Qp> {
        Qp::create_with_srq(self, attr, Some(srq.inner.clone()))
    }
}
