//! Memory regions (`ibv_reg_mr(3)`): memory the NIC may touch, with the keys that name it.
//!
//! An [`Mr`] owns its buffer. The buffer is freed only after `ibv_dereg_mr` has returned, and
//! after that the NIC no longer accesses it, so no work request — even one still in flight
//! when the MR is dropped — can make the NIC touch freed memory; such a request fails with a
//! protection error instead.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rdma_sys::{ibv_dereg_mr, ibv_mr, ibv_reg_mr, ibv_sge};

use super::attrs::AccessFlags;
use super::error::{Result, VerbsError};
use super::pd::{Pd, PdInner};
use super::wr::{RemoteBuf, Sge};

const ALIGN: usize = 4096;
/// The unit of every CPU access to an MR's buffer: an aligned 8-byte word.
const WORD: usize = 8;

/// A registered, NIC-accessible buffer.
///
/// The NIC and, with remote rights, the peer may write the buffer at any moment, so the CPU
/// reaches it only through copies made of aligned 8-byte atomic accesses ([`Mr::read`],
/// [`Mr::write`], [`Mr::fill`], [`Mr::read_volatile`], [`Mr::read_u64_volatile`]); there is no
/// `&[u8]` or `&mut [u8]` view:
///
/// ```compile_fail,E0599
/// # fn f(mr: &vl_verbs::Mr) {
/// let bytes: &[u8] = mr.as_slice(); // error: no such method
/// # }
/// ```
///
/// ```compile_fail,E0599
/// # fn f(mr: &mut vl_verbs::Mr) {
/// let bytes: &mut [u8] = mr.as_mut_slice(); // error: no such method
/// # }
/// ```
pub struct Mr {
    pub(crate) ptr: *mut ibv_mr,
    buf: *mut u8,
    /// The registered length: what the NIC may touch.
    len: usize,
    /// The allocation: `len` rounded up to whole words, so that the last word a CPU access
    /// touches lies inside it (the padding is allocated but not registered).
    alloc_len: usize,
    access: AccessFlags,
    _pd: Arc<PdInner>,
}

// SAFETY: the MR handle is thread-safe in libibverbs; the CPU reaches the buffer only through
// aligned 8-byte atomic accesses (see `Mr::word`), which may race with each other and with the
// NIC without UB.
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
        let too_large =
            || VerbsError::InvalidArgument(format!("buffer of {len} bytes is too large"));
        let alloc_len = len.checked_next_multiple_of(WORD).ok_or_else(too_large)?;
        let layout = Layout::from_size_align(alloc_len, ALIGN).map_err(|_| too_large())?;
        // SAFETY: layout has a non-zero size.
        let buf = unsafe { alloc_zeroed(layout) };
        if buf.is_null() {
            // Out of memory, not a bad argument: a run that failed (exit 1), not a usage error.
            return Err(VerbsError::Call {
                verb: "allocating the buffer to register",
                errno: nix::errno::Errno::ENOMEM,
                hint: Some(format!(
                    "{len} bytes are more than this process can get (free memory, ulimit -v); \
                     ask for a smaller buffer"
                )),
            });
        }
        // SAFETY: the PD is live (we hold it); buf..buf+len lies in a live allocation we own and
        // free only after ibv_dereg_mr.
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
            alloc_len,
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
    /// relaxed atomic loads of the aligned 8-byte words that hold the range (a word that the
    /// range covers only partly is loaded whole and the wanted bytes taken from it). The
    /// compiler may neither elide these loads nor assume the memory stable, and they cannot race
    /// with another thread using these accessors. What a copy holds while the NIC is still
    /// writing is unspecified bytes, never undefined behaviour; read after the completion that
    /// announced the data, it holds that data.
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        let start = self.span(offset, dst.len())?;
        let Split { head, words, tail } = split(start, dst.len());
        let mut out = 0;
        if let Some(p) = head {
            let n = p.bytes.len();
            out += self.read_part(p, &mut dst[..n]);
        }
        let body = words.len() * WORD;
        for (w, d) in words.zip(dst[out..out + body].chunks_exact_mut(WORD)) {
            d.copy_from_slice(&self.word(w).load(Ordering::Relaxed).to_ne_bytes());
        }
        out += body;
        if let Some(p) = tail {
            self.read_part(p, &mut dst[out..]);
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

    /// Copies `src` into the region at `offset`: relaxed atomic stores of whole words, and for
    /// a word the range covers only partly an atomic read-modify-write that replaces just the
    /// bytes of the range, so a byte next to the range that the NIC writes at the same moment
    /// is never overwritten with a stale value. Bytes a posted request is still sending may go
    /// out old or new.
    pub fn write(&self, offset: usize, src: &[u8]) -> Result<()> {
        let start = self.span(offset, src.len())?;
        let Split { head, words, tail } = split(start, src.len());
        let mut at = 0;
        if let Some(p) = head {
            at += self.write_part(p, |i| src[i]);
        }
        let body = words.len() * WORD;
        for (w, s) in words.zip(src[at..at + body].chunks_exact(WORD)) {
            let v = u64::from_ne_bytes(s.try_into().expect("chunks of one word"));
            self.word(w).store(v, Ordering::Relaxed);
        }
        at += body;
        if let Some(p) = tail {
            self.write_part(p, |i| src[at + i]);
        }
        Ok(())
    }

    /// Sets every byte of `range` to `value` (stores as in [`Mr::write`]).
    pub fn fill(&self, range: Range<usize>, value: u8) -> Result<()> {
        self.bounds(&range)?;
        let Split { head, words, tail } = split(range.start, range.end - range.start);
        if let Some(p) = head {
            self.write_part(p, |_| value);
        }
        let v = u64::from_ne_bytes([value; WORD]);
        for w in words {
            self.word(w).store(v, Ordering::Relaxed);
        }
        if let Some(p) = tail {
            self.write_part(p, |_| value);
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
        self.word(offset / WORD)
            .load(Ordering::Relaxed)
            .to_ne_bytes()[offset % WORD]
    }

    /// Reads an 8-byte word (e.g. an atomic target) written by the NIC, in host order: one
    /// atomic load, so another thread's [`Mr::write`] of the word is seen whole or not at all.
    /// Read it after the completion that wrote it to see the NIC's value.
    ///
    /// # Panics
    /// When `offset` is not 8-byte aligned or the word is not inside the region (the bound is
    /// checked without overflow, whatever `offset` is).
    pub fn read_u64_volatile(&self, offset: usize) -> u64 {
        let fits = offset.checked_add(WORD).is_some_and(|end| end <= self.len);
        assert!(
            offset % WORD == 0 && fits,
            "bad u64 offset {offset} in an MR of {} bytes",
            self.len
        );
        self.word(offset / WORD).load(Ordering::Relaxed)
    }

    /// Copies the bytes `p` names out of its word into `dst` (`p.bytes.len()` long); returns
    /// how many.
    fn read_part(&self, p: Part, dst: &mut [u8]) -> usize {
        let v = self.word(p.word).load(Ordering::Relaxed).to_ne_bytes();
        dst.copy_from_slice(&v[p.bytes.clone()]);
        p.bytes.len()
    }

    /// Replaces the bytes `p` names in its word with `byte(0)`, `byte(1)`, …, leaving the other
    /// bytes of the word as they are at that instant (a compare-and-swap loop, so a concurrent
    /// write to a neighbouring byte is not undone); returns how many bytes.
    fn write_part(&self, p: Part, byte: impl Fn(usize) -> u8) -> usize {
        let (mut mask, mut val) = ([0u8; WORD], [0u8; WORD]);
        for (i, b) in p.bytes.clone().enumerate() {
            mask[b] = 0xff;
            val[b] = byte(i);
        }
        let (mask, val) = (u64::from_ne_bytes(mask), u64::from_ne_bytes(val));
        // The closure always returns Some, so fetch_update cannot fail.
        let _ = self
            .word(p.word)
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| {
                Some(old & !mask | val)
            });
        p.bytes.len()
    }

    /// Word `w` (bytes `8w..8w+8`) of the buffer as an atomic. Callers pass only words that
    /// hold a byte of the region (`8w < len`).
    fn word(&self, w: usize) -> &AtomicU64 {
        debug_assert!(w * WORD < self.len);
        // SAFETY: 8w < len, and the allocation is len rounded up to whole words, so the word
        // lies inside our live allocation, which outlives &self; it is 8-byte aligned because
        // the buffer is ALIGN-aligned. On the CPU side the buffer is only ever reached through
        // these same-size, same-alignment atomics (no &[u8] is handed out, no byte-sized or
        // non-atomic access exists), so no mixed-size or non-atomic race is possible between
        // threads. The NIC's DMA is outside Rust's memory model: its writes show up as new
        // values of these words, and every bit pattern is a valid u64.
        unsafe { AtomicU64::from_ptr(self.buf.add(w * WORD).cast::<u64>()) }
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
    /// # fn f(pd: &vl_verbs::Pd) -> vl_verbs::Result<()> {
    /// use vl_verbs::AccessFlags;
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
    /// # fn f(pd: &vl_verbs::Pd) -> vl_verbs::Result<()> {
    /// use vl_verbs::{AccessFlags, Sge};
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
    /// # fn f(pd: &vl_verbs::Pd) -> vl_verbs::Result<()> {
    /// use vl_verbs::{AccessFlags, RecvWr};
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

/// The bytes `bytes` (within 0..8) of word `word`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Part {
    word: usize,
    bytes: Range<usize>,
}

/// A byte range cut at word boundaries: a partial first word, whole words, a partial last word.
#[derive(Debug, PartialEq, Eq)]
struct Split {
    head: Option<Part>,
    words: Range<usize>,
    tail: Option<Part>,
}

/// Cuts `start..start+len` into the words that hold it (pure arithmetic; the caller checked the
/// range). A range inside one word that touches neither of its ends is a single `head`.
fn split(start: usize, len: usize) -> Split {
    let end = start + len;
    let mut first = start / WORD;
    let mut head = None;
    if len > 0 && start % WORD != 0 {
        let stop = (first * WORD + WORD).min(end);
        head = Some(Part {
            word: first,
            bytes: start % WORD..stop - first * WORD,
        });
        first += 1;
    }
    let last = end / WORD; // words first..last are whole
    let words = first..last.max(first);
    let tail = (len > 0 && end % WORD != 0 && last >= first).then_some(Part {
        word: last,
        bytes: 0..end % WORD,
    });
    Split { head, words, tail }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: ptr is our registration; the PD outlives us through `_pd`.
        let ret = unsafe { ibv_dereg_mr(self.ptr) };
        if ret == 0 {
            // SAFETY: deregistered, so the NIC no longer accesses buf; allocated with this layout.
            unsafe {
                dealloc(
                    self.buf,
                    Layout::from_size_align_unchecked(self.alloc_len, ALIGN),
                )
            };
        }
        // If deregistration failed the NIC may still reach the buffer: leak it rather than free
        // memory a device can write to.
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every byte of every range over three words is named exactly once, in order, and every
    /// part stays inside its word.
    #[test]
    fn split_covers_each_byte_once_in_order() {
        for start in 0..24 {
            for len in 0..=(24 - start) {
                let Split { head, words, tail } = split(start, len);
                let mut bytes = Vec::new();
                let push = |bytes: &mut Vec<usize>, p: &Part| {
                    assert!(p.bytes.start < p.bytes.end && p.bytes.end <= WORD, "{p:?}");
                    bytes.extend(p.bytes.clone().map(|b| p.word * WORD + b));
                };
                if let Some(p) = &head {
                    push(&mut bytes, p);
                }
                for w in words {
                    bytes.extend(w * WORD..w * WORD + WORD);
                }
                if let Some(p) = &tail {
                    push(&mut bytes, p);
                }
                assert_eq!(
                    bytes,
                    (start..start + len).collect::<Vec<_>>(),
                    "{start}+{len}"
                );
            }
        }
    }
}
