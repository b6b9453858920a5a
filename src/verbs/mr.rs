//! Memory regions (`ibv_reg_mr(3)`): memory the NIC may touch, with the keys that name it.
//!
//! An [`Mr`] owns its buffer. The buffer is freed only after `ibv_dereg_mr` has returned, and
//! after that the NIC no longer accesses it, so no work request — even one still in flight
//! when the MR is dropped — can make the NIC touch freed memory; such a request fails with a
//! protection error instead.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ops::Range;
use std::sync::Arc;

use rdma_sys::{ibv_dereg_mr, ibv_mr, ibv_reg_mr, ibv_sge};

use super::attrs::AccessFlags;
use super::error::{Result, VerbsError};
use super::pd::{Pd, PdInner};
use super::wr::{RemoteBuf, Sge};

const ALIGN: usize = 4096;

/// A registered, NIC-accessible buffer.
pub struct Mr {
    ptr: *mut ibv_mr,
    buf: *mut u8,
    len: usize,
    access: AccessFlags,
    _pd: Arc<PdInner>,
}

// SAFETY: the MR handle is thread-safe in libibverbs; the buffer is only reachable through
// &self / &mut self methods, so Rust's aliasing rules govern CPU access to it.
unsafe impl Send for Mr {}
// SAFETY: as above.
unsafe impl Sync for Mr {}

impl Mr {
    pub(crate) fn register(pd: &Pd, len: usize, access: AccessFlags) -> Result<Mr> {
        if len == 0 {
            return Err(VerbsError::InvalidArgument(
                "a memory region needs at least 1 byte".into(),
            ));
        }
        if (access.contains(AccessFlags::REMOTE_WRITE)
            || access.contains(AccessFlags::REMOTE_ATOMIC))
            && !access.contains(AccessFlags::LOCAL_WRITE)
        {
            return Err(VerbsError::InvalidArgument(format!(
                "access {access}: REMOTE_WRITE and REMOTE_ATOMIC require LOCAL_WRITE (ibv_reg_mr(3))"
            )));
        }
        let layout = Layout::from_size_align(len, ALIGN).map_err(|_| {
            VerbsError::InvalidArgument(format!("buffer of {len} bytes is too large"))
        })?;
        // SAFETY: layout has a non-zero size.
        let buf = unsafe { alloc_zeroed(layout) };
        if buf.is_null() {
            return Err(VerbsError::InvalidArgument(format!(
                "cannot allocate {len} bytes"
            )));
        }
        // SAFETY: the PD is live (we hold it); buf..buf+len is a live allocation we own and free
        // only after ibv_dereg_mr.
        let ptr = unsafe { ibv_reg_mr(pd.inner.ptr, buf.cast(), len, access.0 as i32) };
        if ptr.is_null() {
            let err = VerbsError::last("ibv_reg_mr");
            // SAFETY: allocated above with this layout, never registered.
            unsafe { dealloc(buf, layout) };
            return Err(err);
        }
        Ok(Mr {
            ptr,
            buf,
            len,
            access,
            _pd: pd.inner.clone(),
        })
    }

    /// The local key: what this side's work requests use to name the memory.
    pub fn lkey(&self) -> u32 {
        // SAFETY: ptr is a live MR.
        unsafe { (*self.ptr).lkey }
    }
    /// The remote key: what a peer puts in its RDMA requests to reach this memory.
    pub fn rkey(&self) -> u32 {
        // SAFETY: ptr is a live MR.
        unsafe { (*self.ptr).rkey }
    }
    /// The virtual address of the buffer, as the NIC sees it.
    pub fn addr(&self) -> u64 {
        self.buf as u64
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn access(&self) -> AccessFlags {
        self.access
    }

    /// The buffer's bytes. A remote peer may change them at any time through RDMA Write or
    /// Atomics when the MR allows it; read flags that a peer sets with [`Mr::read_volatile`].
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: buf..buf+len is our live allocation.
        unsafe { std::slice::from_raw_parts(self.buf, self.len) }
    }
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: buf..buf+len is our live allocation; &mut self makes this the only CPU view.
        unsafe { std::slice::from_raw_parts_mut(self.buf, self.len) }
    }

    /// Reads a byte the NIC may have written behind the compiler's back (polled flags).
    pub fn read_volatile(&self, offset: usize) -> u8 {
        assert!(
            offset < self.len,
            "offset {offset} outside MR of {} bytes",
            self.len
        );
        // SAFETY: bounds checked above; volatile forces a fresh load on every call.
        unsafe { std::ptr::read_volatile(self.buf.add(offset)) }
    }

    /// Reads an aligned 8-byte word (e.g. an atomic target) written by the NIC, in host order.
    pub fn read_u64_volatile(&self, offset: usize) -> u64 {
        assert!(
            offset % 8 == 0 && offset + 8 <= self.len,
            "bad u64 offset {offset}"
        );
        // SAFETY: in bounds and 8-byte aligned (the buffer is page aligned).
        unsafe { std::ptr::read_volatile(self.buf.add(offset).cast::<u64>()) }
    }

    /// A scatter/gather element naming `range` of this MR, for work requests.
    pub fn sge(&self, range: Range<usize>) -> Result<Sge> {
        self.check(&range)?;
        Ok(Sge(ibv_sge {
            addr: self.addr() + range.start as u64,
            length: (range.end - range.start) as u32,
            lkey: self.lkey(),
        }))
    }

    /// What to tell a peer so it can RDMA into `range` of this MR: address, rkey and length.
    pub fn remote(&self, range: Range<usize>) -> Result<RemoteBuf> {
        self.check(&range)?;
        Ok(RemoteBuf {
            addr: self.addr() + range.start as u64,
            rkey: self.rkey(),
            len: (range.end - range.start) as u32,
        })
    }

    fn check(&self, range: &Range<usize>) -> Result<()> {
        if range.start > range.end
            || range.end > self.len
            || range.end - range.start > u32::MAX as usize
        {
            return Err(VerbsError::InvalidArgument(format!(
                "range {}..{} is outside the registered buffer of {} bytes",
                range.start, range.end, self.len
            )));
        }
        Ok(())
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: ptr is our registration; the PD outlives us through `_pd`.
        let ret = unsafe { ibv_dereg_mr(self.ptr) };
        if ret == 0 {
            // SAFETY: deregistered, so the NIC no longer accesses buf; allocated with this layout.
            unsafe { dealloc(self.buf, Layout::from_size_align_unchecked(self.len, ALIGN)) };
        }
        // If deregistration failed the NIC may still reach the buffer: leak it rather than free
        // memory a device can write to.
    }
}
