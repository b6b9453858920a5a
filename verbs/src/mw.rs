//! Memory windows (`ibv_alloc_mw(3)`, `ibv_dealloc_mw(3)`) and the two send-queue requests that
//! bind and invalidate a type 2 window (`IBV_WR_BIND_MW`, `IBV_WR_LOCAL_INV`).
//!
//! A window is a second, narrower rkey onto part of a registered MR: bound to a range with its
//! own remote rights, handed to a peer, and invalidated when the peer's access should end —
//! without deregistering (and re-pinning) the memory. A type 2 window is bound by a work request
//! on a QP, and only that QP's peer may use it.

use std::ops::Range;
use std::sync::Arc;

use rdma_sys::{
    bind_mw_t, bind_mw_tso_union_t, ibv_alloc_mw, ibv_dealloc_mw, ibv_inc_rkey, ibv_mw,
    ibv_mw_bind_info, ibv_mw_type, ibv_send_flags, ibv_send_wr, ibv_wr_opcode,
    imm_data_invalidated_rkey_union_t, rdma_t, wr_t,
};

use super::attrs::AccessFlags;
use super::error::{Result, VerbsError};
use super::handle::{verbs_object, Handle};
use super::mr::Mr;
use super::pd::{Pd, PdInner};
use super::qp::Qp;

/// A type 2 memory window. Holds its PD.
pub struct Mw {
    inner: Handle<ibv_mw, Arc<PdInner>>,
}

// SAFETY: the MW handle is thread-safe in libibverbs; we hold no other state. A window has no
// children: only its own `Mw` uses it.
verbs_object!(unsafe ibv_mw, destroyed by ibv_dealloc_mw);

impl Mw {
    /// `ibv_alloc_mw(pd, IBV_MW_TYPE_2)`.
    pub(crate) fn alloc_type2(pd: &Pd) -> Result<Mw> {
        // SAFETY: the PD is live; the provider's op is checked for presence by rdma-sys.
        match unsafe { ibv_alloc_mw(pd.inner.ptr, ibv_mw_type::IBV_MW_TYPE_2) } {
            None => Err(VerbsError::call(
                "ibv_alloc_mw",
                nix::errno::Errno::EOPNOTSUPP,
            )),
            // SAFETY: `ptr` is NULL or a new MW, ours alone; its PD outlives it as its parent.
            Some(ptr) => Ok(Mw {
                inner: unsafe { Handle::created("ibv_alloc_mw", ptr, pd.inner.clone())? },
            }),
        }
    }

    /// The window's current rkey as the library knows it (the one it was allocated with; a
    /// bind gives it the rkey returned by [`Qp::post_bind_mw`]).
    pub fn rkey(&self) -> u32 {
        // SAFETY: ptr is a live MW.
        unsafe { (*self.inner.ptr).rkey }
    }
}

impl Qp {
    /// Posts `IBV_WR_BIND_MW` (signaled): binds the type 2 window `mw` to `range` of `mr` with
    /// the remote rights `access`, under a new rkey (`ibv_inc_rkey` of the window's rkey), which
    /// it returns. The window is usable once the request's completion has been polled. The MR
    /// needs `MW_BIND` access; window and QP must share a PD.
    pub fn post_bind_mw(
        &self,
        wr_id: u64,
        mw: &Mw,
        mr: &Mr,
        range: Range<usize>,
        access: AccessFlags,
    ) -> Result<u32> {
        if range.start > range.end || range.end > mr.len() {
            return Err(VerbsError::InvalidArgument(format!(
                "window range {range:?} is outside the {}-byte memory region",
                mr.len()
            )));
        }
        // SAFETY: pure arithmetic on the key.
        let rkey = unsafe { ibv_inc_rkey(mw.rkey()) };
        let bind = bind_mw_t {
            mw: mw.inner.ptr,
            rkey,
            bind_info: ibv_mw_bind_info {
                mr: mr.ptr,
                addr: mr.addr() + range.start as u64,
                length: (range.end - range.start) as u64,
                mw_access_flags: access.0,
            },
        };
        let mut wr = raw_wr(wr_id, ibv_wr_opcode::IBV_WR_BIND_MW, 0);
        wr.bind_mw_tso_union = bind_mw_tso_union_t { bind_mw: bind };
        self.post_raw(&mut wr, "ibv_post_send(IBV_WR_BIND_MW)")?;
        Ok(rkey)
    }

    /// Posts `IBV_WR_LOCAL_INV` (signaled) for `rkey`: once it completes, the window it names
    /// is invalid and a peer's access through it fails with a remote access error.
    pub fn post_local_inv(&self, wr_id: u64, rkey: u32) -> Result<()> {
        let mut wr = raw_wr(wr_id, ibv_wr_opcode::IBV_WR_LOCAL_INV, rkey);
        self.post_raw(&mut wr, "ibv_post_send(IBV_WR_LOCAL_INV)")
    }

    fn post_raw(&self, wr: &mut ibv_send_wr, verb: &'static str) -> Result<()> {
        let mut bad: *mut ibv_send_wr = std::ptr::null_mut();
        // SAFETY: `wr` is one fully initialised request (no SGEs, next NULL); the MW and MR it
        // names are borrowed by the caller for the call and checked by the kernel afterwards.
        let ret = unsafe { rdma_sys::ibv_post_send(self.inner.ptr, wr, &mut bad) };
        VerbsError::check_ret(verb, ret)
    }
}

/// A signaled request without SGEs; `inv` is the rkey to invalidate (LOCAL_INV) or 0.
fn raw_wr(wr_id: u64, opcode: u32, inv: u32) -> ibv_send_wr {
    ibv_send_wr {
        wr_id,
        next: std::ptr::null_mut(),
        sg_list: std::ptr::null_mut(),
        num_sge: 0,
        opcode,
        send_flags: ibv_send_flags::IBV_SEND_SIGNALED.0,
        imm_data_invalidated_rkey_union: imm_data_invalidated_rkey_union_t {
            invalidated_rkey: inv,
        },
        wr: wr_t {
            rdma: rdma_t {
                remote_addr: 0,
                rkey: 0,
            },
        },
        // SAFETY: the XRC union is unused for these opcodes; zero is valid.
        qp_type: unsafe { std::mem::zeroed() },
        // SAFETY: as above; the bind request overwrites it.
        bind_mw_tso_union: unsafe { std::mem::zeroed() },
    }
}
