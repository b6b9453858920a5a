//! Memory regions (`ibv_reg_mr(3)`): memory the NIC may touch, with the keys that name it.
//!
//! An [`Mr`] owns its buffer. The buffer is freed only after `ibv_dereg_mr` has returned, and
//! after that the NIC no longer accesses it, so no work request — even one still in flight
//! when the MR is dropped — can make the NIC touch freed memory; such a request fails with a
//! protection error instead.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ops::Range;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use rdma_sys::{ibv_dereg_mr, ibv_mr, ibv_reg_mr, ibv_sge};

use super::attrs::AccessFlags;
use super::error::{Result, VerbsError};
use super::pd::{Pd, PdInner};
use super::wr::{RemoteBuf, Sge};

const ALIGN: usize = 4096;

/// A registered, NIC-accessible buffer.
///
/// The NIC and, with remote rights, the peer may write the buffer at any moment, so the CPU
/// reaches it only through copies and byte-wise atomic accessors ([`Mr::read`], [`Mr::write`],
/// [`Mr::fill`], [`Mr::read_volatile`]); there is no `&[u8]` or `&mut [u8]` view:
///
/// ```compile_fail,E0599
/// # fn f(mr: &verbs_lab::verbs::Mr) {
/// let bytes: &[u8] = mr.as_slice(); // error: no such method
/// # }
/// ```
///
/// ```compile_fail,E0599
/// # fn f(mr: &mut verbs_lab::verbs::Mr) {
/// let bytes: &mut [u8] = mr.as_mut_slice(); // error: no such method
/// # }
/// ```
pub struct Mr {
    pub(crate) ptr: *mut ibv_mr,
    buf: *mut u8,
    len: usize,
    access: AccessFlags,
    _pd: Arc<PdInner>,
}

// SAFETY: the MR handle is thread-safe in libibverbs; the CPU reaches the buffer only through
// byte-wise atomic accessors, which may race with each other and with the NIC without UB.
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

    /// Copies `dst.len()` bytes starting at `offset` out of the region.
    ///
    /// The NIC (a posted receive, a peer's RDMA Write or Atomic) may write these bytes at any
    /// moment, so the region is never lent out as a `&[u8]`: every access is a copy made of
    /// single-byte relaxed atomic loads, which the compiler may neither elide nor assume stable,
    /// and which cannot race with another thread using these accessors. What a copy holds while
    /// the NIC is still writing is unspecified bytes, never undefined behaviour.
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        let start = self.span(offset, dst.len())?;
        for (i, d) in dst.iter_mut().enumerate() {
            *d = self.byte(start + i).load(Ordering::Relaxed);
        }
        Ok(())
    }

    /// A copy of `range` of the region (see [`Mr::read`]).
    pub fn to_vec(&self, range: Range<usize>) -> Result<Vec<u8>> {
        self.bounds(&range)?;
        let mut v = vec![0u8; range.end - range.start];
        self.read(range.start, &mut v)?;
        Ok(v)
    }

    /// Copies `src` into the region at `offset` (single-byte relaxed atomic stores; see
    /// [`Mr::read`]). Bytes a posted request is still sending may go out old or new.
    pub fn write(&self, offset: usize, src: &[u8]) -> Result<()> {
        let start = self.span(offset, src.len())?;
        for (i, s) in src.iter().enumerate() {
            self.byte(start + i).store(*s, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Sets every byte of `range` to `value`.
    pub fn fill(&self, range: Range<usize>, value: u8) -> Result<()> {
        self.bounds(&range)?;
        for i in range {
            self.byte(i).store(value, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Reads a byte the NIC may have written behind the compiler's back (polled flags): a
    /// fresh load on every call.
    ///
    /// # Panics
    /// When `offset` is outside the region.
    pub fn read_volatile(&self, offset: usize) -> u8 {
        assert!(
            offset < self.len,
            "offset {offset} outside MR of {} bytes",
            self.len
        );
        self.byte(offset).load(Ordering::Relaxed)
    }

    /// Reads an 8-byte word (e.g. an atomic target) written by the NIC, in host order. Read
    /// after the completion that wrote it, so byte-wise loads see one value.
    ///
    /// # Panics
    /// When `offset` is not 8-byte aligned or the word is not inside the region (the bound is
    /// checked without overflow, whatever `offset` is).
    pub fn read_u64_volatile(&self, offset: usize) -> u64 {
        let fits = offset.checked_add(8).is_some_and(|end| end <= self.len);
        assert!(
            offset % 8 == 0 && fits,
            "bad u64 offset {offset} in an MR of {} bytes",
            self.len
        );
        let mut b = [0u8; 8];
        for (i, d) in b.iter_mut().enumerate() {
            *d = self.byte(offset + i).load(Ordering::Relaxed);
        }
        u64::from_ne_bytes(b)
    }

    /// Byte `i` of the buffer as an atomic. Callers check `i < len` first.
    fn byte(&self, i: usize) -> &AtomicU8 {
        debug_assert!(i < self.len);
        // SAFETY: i < len (checked by every caller), so the pointer is inside our live
        // allocation, which outlives &self; u8 atomics need no alignment. The buffer is only
        // ever accessed through these atomics on the CPU side (no &[u8] is handed out), and the
        // NIC's DMA is outside Rust's memory model.
        unsafe { AtomicU8::from_ptr(self.buf.add(i)) }
    }

    /// The start of `offset..offset+len` after checking it lies in the region.
    fn span(&self, offset: usize, len: usize) -> Result<usize> {
        match offset.checked_add(len) {
            Some(end) => self.bounds(&(offset..end)).map(|()| offset),
            None => Err(VerbsError::InvalidArgument(format!(
                "{len} bytes at offset {offset} overflow the address space"
            ))),
        }
    }

    /// A scatter/gather element naming `range` of this MR, for work requests.
    ///
    /// The `Sge` borrows this MR, so the MR cannot be deregistered (dropped or moved) while a
    /// request built from it exists:
    ///
    /// ```compile_fail,E0505
    /// # fn f(pd: &verbs_lab::verbs::Pd) -> verbs_lab::verbs::Result<()> {
    /// use verbs_lab::verbs::AccessFlags;
    /// let mr = pd.reg_mr(64, AccessFlags::LOCAL_WRITE)?;
    /// let sge = mr.sge(0..64)?;
    /// drop(mr); // error: `mr` is still borrowed by `sge`
    /// let _ = sge.len();
    /// # Ok(()) }
    /// ```
    ///
    /// and neither an `Sge` nor the work requests built from it can outlive the MR:
    ///
    /// ```compile_fail,E0597
    /// # fn f(pd: &verbs_lab::verbs::Pd) -> verbs_lab::verbs::Result<()> {
    /// use verbs_lab::verbs::{AccessFlags, Sge};
    /// let sge: Sge<'static> = {
    ///     let mr = pd.reg_mr(64, AccessFlags::LOCAL_WRITE)?;
    ///     mr.sge(0..64)? // error: `mr` does not live long enough
    /// };
    /// # Ok(()) }
    /// ```
    ///
    /// The same steps with the MR alive throughout compile:
    ///
    /// ```no_run
    /// # fn f(pd: &verbs_lab::verbs::Pd) -> verbs_lab::verbs::Result<()> {
    /// use verbs_lab::verbs::{AccessFlags, RecvWr};
    /// let mr = pd.reg_mr(64, AccessFlags::LOCAL_WRITE)?;
    /// let sge = mr.sge(0..64)?;
    /// let wr = RecvWr { wr_id: 1, sges: &[sge] };
    /// let _ = (wr.wr_id, sge.len());
    /// drop(mr);
    /// # Ok(()) }
    /// ```
    pub fn sge(&self, range: Range<usize>) -> Result<Sge<'_>> {
        self.check(&range)?;
        Ok(Sge::new(ibv_sge {
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

    /// `range` lies in the buffer and is short enough for one SGE (32-bit length).
    fn check(&self, range: &Range<usize>) -> Result<()> {
        self.bounds(range)?;
        if range.end - range.start > u32::MAX as usize {
            return Err(VerbsError::InvalidArgument(format!(
                "range {}..{} is longer than one work request can name (4 GiB)",
                range.start, range.end
            )));
        }
        Ok(())
    }

    /// `range` lies in the buffer.
    fn bounds(&self, range: &Range<usize>) -> Result<()> {
        if range.start > range.end || range.end > self.len {
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
