//! The one owner of a verbs object's C handle: the pointer a creating verb returned, destroyed
//! by the object's own destroy verb when the last user lets go, and — beside it — the parent's
//! handle, which therefore outlives it.
//!
//! A PD, completion channel, SRQ, memory window, QP, address handle and rdma_cm event channel
//! are each a [`Handle`] of their C type; the file of each object says which verb creates and
//! which destroys it ([`verbs_object!`]), and why its C object may be shared between threads.
//! A context (closed only if we opened it: librdmacm's are borrowed), a CQ (which acks its
//! pending events first), an MR (which frees its buffer only after a successful deregistration)
//! and a cm id (which detaches its QP first) destroy themselves.

use super::error::{Result, VerbsError};

/// A C verbs object that libibverbs or librdmacm lets any thread use and destroy, and the verb
/// that destroys it.
///
/// # Safety
///
/// Implement it only for an object the library documents as thread-safe: a [`Handle`] of it is
/// `Send` and `Sync`.
pub(crate) unsafe trait VerbsObject {
    /// Destroys the object (`ibv_dealloc_pd`, `ibv_destroy_srq`, …).
    ///
    /// # Safety
    ///
    /// `ptr` is a live object that nothing uses any more and that is destroyed only here.
    unsafe fn destroy(ptr: *mut Self);
}

/// Makes the C type `$t` a [`VerbsObject`] destroyed by the verb `$destroy` — the one
/// `unsafe impl` every handle-owned object shares:
///
/// ```ignore
/// // SAFETY: PDs are thread-safe in libibverbs; every MR, QP and AH of this PD holds an Arc
/// // of it, so none is left when it is deallocated.
/// verbs_object!(unsafe ibv_pd, destroyed by ibv_dealloc_pd);
/// ```
///
/// The `unsafe` in the invocation marks what the caller asserts, in a `// SAFETY:` comment
/// written at the object (not here, where it could only be generic): that the library lets any
/// thread use and destroy a `$t`, and why nothing still uses one when its last handle drops.
macro_rules! verbs_object {
    (unsafe $t:ty, destroyed by $destroy:path) => {
        // SAFETY: the invocation's `// SAFETY:` comment says why `$t` is thread-safe.
        unsafe impl $crate::handle::VerbsObject for $t {
            unsafe fn destroy(ptr: *mut $t) {
                // SAFETY: the caller's contract (a live object, used by nothing, destroyed only
                // here); the invocation says why no child is left.
                unsafe { $destroy(ptr) };
            }
        }
    };
}
pub(crate) use verbs_object;

/// A live C object of type `T`, destroyed when dropped; `parent` is dropped after it.
pub(crate) struct Handle<T: VerbsObject, P> {
    pub(crate) ptr: *mut T,
    /// What must outlive the object: its parent's handle.
    pub(crate) parent: P,
}

// SAFETY: `T` is a thread-safe C object (the contract of `VerbsObject`), and `P` is shared only
// as far as it allows itself.
unsafe impl<T: VerbsObject, P: Send> Send for Handle<T, P> {}
// SAFETY: as above.
unsafe impl<T: VerbsObject, P: Sync> Sync for Handle<T, P> {}

impl<T: VerbsObject, P> Handle<T, P> {
    /// Takes what a creating verb returned: NULL means `verb` failed, and `errno` says why.
    ///
    /// # Safety
    ///
    /// `ptr` is NULL or a live object that only this handle destroys, and `parent` keeps alive
    /// whatever the object needs until it is destroyed.
    pub(crate) unsafe fn created(verb: &'static str, ptr: *mut T, parent: P) -> Result<Self> {
        if ptr.is_null() {
            return Err(VerbsError::last(verb));
        }
        Ok(Handle { ptr, parent })
    }
}

impl<T: VerbsObject, P> Drop for Handle<T, P> {
    fn drop(&mut self) {
        // SAFETY: `ptr` is live and ours (the contract of `created`); every child holds an `Arc`
        // of its parent's handle, so none is left. `parent` is dropped only after this body.
        unsafe { T::destroy(self.ptr) };
    }
}

#[cfg(test)]
mod tests {
    use crate::{Ah, CmId, CompChannel, Context, Cq, EventChannel, Mw, Pd, Qp, Srq};

    /// Every object may be moved to, and shared with, another thread (the benchmarks' workers
    /// and the collectives' helper threads do): the handles carry that from `VerbsObject`.
    #[test]
    fn verbs_objects_are_send_and_sync() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<Context>();
        send_sync::<Pd>();
        send_sync::<CompChannel>();
        send_sync::<Cq>();
        send_sync::<Srq>();
        send_sync::<Mw>();
        send_sync::<Qp>();
        send_sync::<Ah>();
        send_sync::<EventChannel>();
        send_sync::<CmId>();
    }
}
