//! Protection domains (`ibv_alloc_pd(3)`): the scope that ties MRs, QPs and AHs together.

use std::sync::Arc;

use rdma_sys::{ibv_alloc_pd, ibv_dealloc_pd, ibv_pd};

use super::attrs::AccessFlags;
use super::context::{Context, ContextInner};
use super::error::Result;
use super::handle::{verbs_object, Handle};
use super::mr::Mr;
use super::qp::{Qp, QpInitAttr};

/// The owner of a `struct ibv_pd`; its `parent` is the context.
pub(crate) type PdInner = Handle<ibv_pd, Arc<ContextInner>>;

// SAFETY: PDs are thread-safe in libibverbs. Every MR, QP and AH of this PD holds an Arc of it,
// so none is left when it is deallocated.
verbs_object!(unsafe ibv_pd, destroyed by ibv_dealloc_pd);

/// A protection domain. MRs and QPs created from it keep it alive.
#[derive(Clone)]
pub struct Pd {
    pub(crate) inner: Arc<PdInner>,
}

impl Pd {
    pub(crate) fn alloc(ctx: &Context) -> Result<Pd> {
        // SAFETY: the context is open (we hold it); the new PD is ours alone, and its context
        // outlives it as its parent.
        let inner = unsafe {
            Handle::created(
                "ibv_alloc_pd",
                ibv_alloc_pd(ctx.inner.ptr),
                ctx.inner.clone(),
            )?
        };
        Ok(Pd {
            inner: Arc::new(inner),
        })
    }

    /// The PD handle number the kernel assigned (for narration).
    pub fn handle(&self) -> u32 {
        // SAFETY: ptr is a live PD.
        unsafe { (*self.inner.ptr).handle }
    }

    /// The name of the device this PD belongs to.
    pub fn device_name(&self) -> &str {
        self.inner.parent.name()
    }

    /// Allocates `len` zeroed, page-aligned bytes and registers them (`ibv_reg_mr(3)`).
    pub fn reg_mr(&self, len: usize, access: AccessFlags) -> Result<Mr> {
        Mr::register(self, len, access)
    }

    /// [`Pd::reg_mr`] with the buffer in huge pages (`mmap(2)` with `MAP_HUGETLB`), from the
    /// pool reserved with `vm.nr_hugepages`. An empty or too small pool fails with `ENOMEM`
    /// and a hint that says how many pages to reserve.
    pub fn reg_mr_huge(&self, len: usize, access: AccessFlags) -> Result<Mr> {
        Mr::register_huge(self, len, access)
    }

    /// A queue pair (`ibv_create_qp(3)`); the granted capabilities are read back.
    /// Allocates a type 2 memory window (`ibv_alloc_mw(3)`); bind it with
    /// [`Qp::post_bind_mw`](super::qp::Qp::post_bind_mw).
    pub fn alloc_mw_type2(&self) -> Result<super::mw::Mw> {
        super::mw::Mw::alloc_type2(self)
    }

    pub fn create_qp(&self, attr: &QpInitAttr<'_>) -> Result<Qp> {
        Qp::create(self, attr)
    }
}
