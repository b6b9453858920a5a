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
    /// Where the buffer came from, so that it is given back the same way.
    backing: Backing,
    _pd: Arc<PdInner>,
}

/// How an [`Mr`]'s buffer was allocated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backing {
    /// The global allocator, `alloc_len` bytes aligned to [`ALIGN`].
    Heap,
    /// An anonymous `mmap(2)` of huge pages (`MAP_HUGETLB`), `alloc_len` bytes (whole huge
    /// pages), given back with `munmap(2)`.
    HugePages,
}

impl Backing {
    /// Gives a buffer back the way it was allocated.
    ///
    /// # Safety
    /// `buf` was allocated this way with `alloc_len` bytes, and nothing — the CPU or a NIC (it
    /// was never registered, or its registration is gone) — accesses it any more.
    unsafe fn release(self, buf: *mut u8, alloc_len: usize) {
        match self {
            // SAFETY: allocated with this layout (the caller's promise).
            Backing::Heap => unsafe {
                dealloc(buf, Layout::from_size_align_unchecked(alloc_len, ALIGN))
            },
            // SAFETY: mapped with this length (the caller's promise).
            Backing::HugePages => unsafe {
                nix::libc::munmap(buf.cast(), alloc_len);
            },
        }
    }
}

/// What every registration checks first: a length, and rights that `ibv_reg_mr(3)` accepts.
fn check_request(len: usize, access: AccessFlags) -> Result<()> {
    if len == 0 {
        return Err(VerbsError::InvalidArgument(
            "a memory region needs at least 1 byte".into(),
        ));
    }
    if (access.contains(AccessFlags::REMOTE_WRITE) || access.contains(AccessFlags::REMOTE_ATOMIC))
        && !access.contains(AccessFlags::LOCAL_WRITE)
    {
        return Err(VerbsError::InvalidArgument(format!(
            "access {access}: REMOTE_WRITE and REMOTE_ATOMIC require LOCAL_WRITE (ibv_reg_mr(3))"
        )));
    }
    Ok(())
}

// SAFETY: the MR handle is thread-safe in libibverbs; the CPU reaches the buffer only through
// aligned 8-byte atomic accesses (see `Mr::word`), which may race with each other and with the
// NIC without UB.
unsafe impl Send for Mr {}
// SAFETY: as above.
unsafe impl Sync for Mr {}

impl Mr {
    pub(crate) fn register(pd: &Pd, len: usize, access: AccessFlags) -> Result<Mr> {
        check_request(len, access)?;
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
        // SAFETY: allocated above with alloc_len bytes, ours alone.
        unsafe { Mr::registered(pd, buf, len, alloc_len, access, Backing::Heap) }
    }

    /// Registers `len` bytes at `buf` (`ibv_reg_mr(3)`) as an MR that owns the buffer; when the
    /// registration fails, the buffer is given back.
    ///
    /// # Safety
    /// `buf` is a buffer of `alloc_len >= len` bytes, page-aligned, allocated as `backing` says
    /// and owned by nothing else.
    unsafe fn registered(
        pd: &Pd,
        buf: *mut u8,
        len: usize,
        alloc_len: usize,
        access: AccessFlags,
        backing: Backing,
    ) -> Result<Mr> {
        // SAFETY: the PD is live (we hold it); buf..buf+len lies in a live allocation we own
        // (the caller's promise) and free only after ibv_dereg_mr.
        let ptr = unsafe { ibv_reg_mr(pd.inner.ptr, buf.cast(), len, access.0 as i32) };
        if ptr.is_null() {
            let err = VerbsError::last("ibv_reg_mr");
            // SAFETY: allocated as `backing` says with alloc_len bytes, never registered.
            unsafe { backing.release(buf, alloc_len) };
            return Err(err);
        }
        Ok(Mr {
            ptr,
            buf,
            len,
            alloc_len,
            access,
            backing,
            _pd: pd.inner.clone(),
        })
    }

    /// [`Mr::register`] with the buffer taken from huge pages: an anonymous private
    /// `mmap(2)` with `MAP_HUGETLB` of `len` rounded up to whole huge pages (the system's default
    /// size, `Hugepagesize` in `/proc/meminfo`). Huge pages come only from the pool the
    /// administrator reserved (`vm.nr_hugepages`); when it is empty or too small the error says
    /// how many pages are free and what to run.
    pub(crate) fn register_huge(pd: &Pd, len: usize, access: AccessFlags) -> Result<Mr> {
        check_request(len, access)?;
        let pool = HugePool::read();
        let too_large =
            || VerbsError::InvalidArgument(format!("buffer of {len} bytes is too large"));
        let alloc_len = len
            .checked_next_multiple_of(pool.page)
            .ok_or_else(too_large)?;
        // SAFETY: an anonymous private mapping at an address of the kernel's choice: it
        // aliases no memory of ours; the result is checked against MAP_FAILED below.
        let buf = unsafe {
            nix::libc::mmap(
                std::ptr::null_mut(),
                alloc_len,
                nix::libc::PROT_READ | nix::libc::PROT_WRITE,
                nix::libc::MAP_PRIVATE | nix::libc::MAP_ANONYMOUS | nix::libc::MAP_HUGETLB,
                -1,
                0,
            )
        };
        if buf == nix::libc::MAP_FAILED {
            let errno = nix::errno::Errno::last();
            return Err(VerbsError::Call {
                verb: "mmap(MAP_HUGETLB) of the buffer to register",
                errno,
                hint: Some(pool.advice(alloc_len)),
            });
        }
        // SAFETY: mapped above with alloc_len bytes (page-aligned, zero-filled by the kernel),
        // ours alone.
        unsafe {
            Mr::registered(
                pd,
                buf.cast::<u8>(),
                len,
                alloc_len,
                access,
                Backing::HugePages,
            )
        }
    }

    /// Whether the buffer lies in huge pages ([`Pd::reg_mr_huge`]).
    pub fn is_huge(&self) -> bool {
        self.backing == Backing::HugePages
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

    /// Writes one byte at `offset` (as [`Mr::write`] of one byte, without its general split): a
    /// latency loop's poll byte, once per round.
    #[inline]
    pub fn write_byte(&self, offset: usize, value: u8) -> Result<()> {
        self.span(offset, 1)?;
        let b = offset % WORD;
        self.write_part(
            Part {
                word: offset / WORD,
                bytes: b..b + 1,
            },
            |_| value,
        );
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

/// The size of a huge page, as [`Pd::reg_mr_huge`] rounds buffers up to: the system's default
/// (`Hugepagesize` in `/proc/meminfo`), 2 MiB when that cannot be read.
pub fn huge_page_size() -> usize {
    HugePool::read().page
}

/// The huge-page pool as `/proc/meminfo` tells it: the page size and the pages reserved and free.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct HugePool {
    /// Bytes per huge page (2 MiB when `/proc/meminfo` cannot be read).
    page: usize,
    total: Option<u64>,
    free: Option<u64>,
}

impl HugePool {
    fn read() -> HugePool {
        HugePool::parse(&std::fs::read_to_string("/proc/meminfo").unwrap_or_default())
    }

    fn parse(meminfo: &str) -> HugePool {
        let field = |name: &str| {
            meminfo.lines().find_map(|l| {
                let rest = l.strip_prefix(name)?.strip_prefix(':')?;
                rest.split_whitespace().next()?.parse::<u64>().ok()
            })
        };
        HugePool {
            page: field("Hugepagesize")
                .and_then(|kib| usize::try_from(kib * 1024).ok())
                .filter(|&b| b > 0)
                .unwrap_or(2 << 20),
            total: field("HugePages_Total"),
            free: field("HugePages_Free"),
        }
    }

    /// What to do when `bytes` of huge pages could not be mapped.
    fn advice(&self, bytes: usize) -> String {
        let need = bytes.div_ceil(self.page);
        let kib = self.page / 1024;
        let pool = match (self.total, self.free) {
            (Some(0), _) => "no huge pages are reserved (HugePages_Total: 0)".to_string(),
            (Some(t), Some(f)) => format!("{f} of the {t} huge pages reserved are free"),
            _ => "/proc/meminfo does not say how many huge pages are reserved".to_string(),
        };
        let want = self
            .total
            .unwrap_or(0)
            .saturating_sub(self.free.unwrap_or(0))
            + need as u64;
        format!(
            "this buffer needs {need} huge page(s) of {kib} KiB and {pool}; reserve them as root \
             with `sysctl vm.nr_hugepages=N`, N at least {want} (more for the process's other \
             huge-page buffers), or run without huge pages"
        )
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
            // SAFETY: deregistered, so the NIC no longer accesses buf, and no reference into it
            // outlives &mut self; allocated as `backing` says with alloc_len bytes.
            unsafe { self.backing.release(self.buf, self.alloc_len) };
        }
        // If deregistration failed the NIC may still reach the buffer: leak it rather than free
        // memory a device can write to.
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_huge_page_pool_is_read_from_meminfo_and_the_advice_names_the_sysctl() {
        let p = HugePool::parse(
            "MemTotal:  2000000 kB\nHugePages_Total:       0\nHugePages_Free:        0\n\
             Hugepagesize:       2048 kB\n",
        );
        assert_eq!((p.page, p.total, p.free), (2 << 20, Some(0), Some(0)));
        let a = p.advice(3 << 20);
        assert!(a.contains("2 huge page(s) of 2048 KiB"), "{a}");
        assert!(a.contains("no huge pages are reserved"), "{a}");
        assert!(a.contains("sysctl vm.nr_hugepages=N`, N at least 2"), "{a}");
        let p =
            HugePool::parse("HugePages_Total: 8\nHugePages_Free: 1\nHugepagesize: 1048576 kB\n");
        assert_eq!(p.page, 1 << 30);
        let a = p.advice(1);
        assert!(a.contains("1 of the 8 huge pages reserved are free"), "{a}");
        assert!(a.contains("N at least 8"), "{a}");
        assert_eq!(HugePool::parse("").page, 2 << 20);
    }

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
