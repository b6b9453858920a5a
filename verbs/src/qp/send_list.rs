//! Send requests converted once and posted many times: a benchmark's hot loop.
//!
//! [`Qp::post_send`] checks and converts every request into an `ibv_send_wr` on each call. A
//! loop that posts the same requests millions of times, changing only the request id, the
//! signaled flag and perhaps the buffers, pays that conversion per message: measured with
//! callgrind in the SoftRoCE guest, about 150 instructions of the roughly 560 a 2-byte RDMA
//! WRITE costs in user space (docs/benchmarks-deterministic.md). A [`SendList`] is checked and
//! converted once ([`Qp::send_list`]); between posts only what changes is written, and a post
//! is one call of the provider — what perftest does with the `ibv_send_wr` array it builds at
//! start-up.

use std::sync::Arc;

use rdma_sys::{ibv_send_flags, ibv_send_wr, ibv_sge};

use super::{op_fields, refused, Qp};
use crate::ah::AhInner;
use crate::error::{Result, VerbsError};
use crate::mr::Mr;
use crate::wr::{Payload, RemoteBuf, SendOp, SendWr, Sge};

/// The provider's `post_send` (`ibv_context_ops::post_send`).
type PostSend = unsafe extern "C" fn(
    *mut rdma_sys::ibv_qp,
    *mut ibv_send_wr,
    *mut *mut ibv_send_wr,
) -> std::os::raw::c_int;

/// Send requests of one QP in the provider's form, linked into one list, ready to post again
/// and again ([`SendList::post`]). Made by [`Qp::send_list`].
///
/// The list borrows the QP (`'q`) and everything its requests name (`'a`: the memory regions
/// of their SGEs, inline bytes, the `inline_from` region), so none of it can go while the list
/// exists. Its requests and their SGEs live in buffers of its own that are never reallocated:
/// the links and SGE pointers the provider follows stay valid however the list is moved.
pub struct SendList<'q, 'a> {
    qp: &'q Qp,
    /// The requests, linked in order (`raw[i].next` is `&raw[i + 1]`, the last one null).
    raw: Box<[ibv_send_wr]>,
    /// Every request's SGEs, one after the other (`raw[i].sg_list` points into this).
    sges: Box<[ibv_sge]>,
    /// The requests as they were given: their opcodes (for [`SendList::retarget`] and errors).
    ops: Box<[SendOp]>,
    /// A UD request's address handle, held by the QP from each post until the send is done.
    ahs: Box<[Option<Arc<AhInner>>]>,
    /// The region inline SGEs must lie in (`Qp::post_send_inline`'s `from`), if inline.
    inline_from: Option<&'a Mr>,
    /// The provider's post function (`ibv_post_send` reads it from the context's operations on
    /// every call), read once: the context outlives the QP the list borrows.
    post_send: PostSend,
    /// Whether posts need nothing but the call: no UD address handle to hold.
    plain: bool,
    _borrows: std::marker::PhantomData<&'a Mr>,
}

impl Qp {
    /// Checks and converts `wrs` once into a [`SendList`] for posting many times, with the
    /// checks of [`Qp::post_send`] (or of [`Qp::post_send_inline`] when `inline_from` is
    /// given: registered payloads then go inline, copied out of that region).
    pub fn send_list<'q, 'a>(
        &'q self,
        wrs: &[SendWr<'a>],
        inline_from: Option<&'a Mr>,
    ) -> Result<SendList<'q, 'a>> {
        let total_sges = wrs
            .iter()
            .map(|wr| match wr.payload {
                Payload::None => 0,
                Payload::Sges(s) => s.len(),
                Payload::Inline(_) => 1,
            })
            .sum::<usize>();
        let mut sges: Vec<ibv_sge> = Vec::with_capacity(total_sges);
        let mut raw: Vec<ibv_send_wr> = Vec::with_capacity(wrs.len());
        let mut starts = Vec::with_capacity(wrs.len());
        for (index, wr) in wrs.iter().enumerate() {
            let mut flags = self.send_flags(wr, index, inline_from)?;
            let mut inline_sge = std::mem::MaybeUninit::uninit();
            let (list, num_sge) =
                self.sg_list(wr, index, inline_from, &mut inline_sge, &mut flags)?;
            starts.push(sges.len());
            if num_sge > 0 {
                // SAFETY: sg_list returned `num_sge` initialised SGEs at `list` (the request's
                // own slice, or `inline_sge`, written when it is returned); copied before either
                // goes.
                let given = unsafe { std::slice::from_raw_parts(list, num_sge as usize) };
                sges.extend_from_slice(given);
            }
            let (opcode, imm, wr_u) = op_fields(wr);
            raw.push(ibv_send_wr {
                wr_id: wr.wr_id,
                next: std::ptr::null_mut(),
                sg_list: std::ptr::null_mut(),
                num_sge,
                opcode,
                send_flags: flags,
                imm_data_invalidated_rkey_union: rdma_sys::imm_data_invalidated_rkey_union_t {
                    imm_data: imm.to_be(),
                },
                wr: wr_u,
                // SAFETY: the XRC and bind/TSO unions are unused for our opcodes; zero is valid.
                qp_type: unsafe { std::mem::zeroed() },
                // SAFETY: as above.
                bind_mw_tso_union: unsafe { std::mem::zeroed() },
            });
        }
        // SAFETY: the QP is live (we hold it) and so is its context, which the provider filled in
        // when it was opened.
        let post_send = unsafe { (*(*self.inner.ptr).context).ops.post_send }.ok_or_else(|| {
            VerbsError::InvalidArgument("the provider has no post_send".to_string())
        })?;
        let mut sges = sges.into_boxed_slice();
        let mut raw = raw.into_boxed_slice();
        // The boxes are never reallocated from here on: link the requests and point them at
        // their SGEs.
        let base = raw.as_mut_ptr();
        let n = raw.len();
        for (i, r) in raw.iter_mut().enumerate() {
            r.next = if i + 1 < n {
                base.wrapping_add(i + 1)
            } else {
                std::ptr::null_mut()
            };
            if r.num_sge > 0 {
                r.sg_list = sges[starts[i]..].as_mut_ptr();
            }
        }
        Ok(SendList {
            qp: self,
            raw,
            sges,
            ops: wrs.iter().map(|wr| wr.op).collect(),
            ahs: wrs
                .iter()
                .map(|wr| wr.ud.map(|d| d.ah.inner.clone()))
                .collect(),
            inline_from,
            post_send,
            plain: self.inner.parent.ud_sends.is_none(),
            _borrows: std::marker::PhantomData,
        })
    }
}

impl<'a> SendList<'_, 'a> {
    /// How many requests the list holds.
    pub fn len(&self) -> usize {
        self.raw.len()
    }

    pub fn is_empty(&self) -> bool {
        self.raw.is_empty()
    }

    /// Sets request `i`'s id and whether it asks for a completion (`IBV_SEND_SIGNALED`).
    ///
    /// # Panics
    /// When `i` is not below [`SendList::len`].
    #[inline]
    pub fn set(&mut self, i: usize, wr_id: u64, signaled: bool) {
        let r = &mut self.raw[i];
        r.wr_id = wr_id;
        let bit = ibv_send_flags::IBV_SEND_SIGNALED.0;
        r.send_flags = if signaled {
            r.send_flags | bit
        } else {
            r.send_flags & !bit
        };
    }

    /// Whether request `i` asks for a completion.
    pub fn signaled(&self, i: usize) -> bool {
        self.raw[i].send_flags & ibv_send_flags::IBV_SEND_SIGNALED.0 != 0
    }

    /// Points request `i` at another local range and, for an RDMA or atomic request, another
    /// remote buffer (`None` keeps the remote one; a SEND has none). The request must have one
    /// SGE; an inline one must lie inside the list's `inline_from` region and fit the QP's
    /// `max_inline_data`, as at [`Qp::send_list`].
    ///
    /// # Panics
    /// When `i` is not below [`SendList::len`].
    #[inline]
    pub fn retarget(&mut self, i: usize, sge: Sge<'a>, remote: Option<RemoteBuf>) -> Result<()> {
        let r = &mut self.raw[i];
        if r.num_sge != 1 {
            return Err(VerbsError::InvalidArgument(format!(
                "send request {i} has {} SGEs: only a request with one can be pointed at another \
                 range",
                r.num_sge
            )));
        }
        match self.inline_from {
            Some(mr) => self.qp.check_inline(&[sge], mr, i)?,
            // Inline bytes given as a slice: their length was checked for that slice only.
            None if r.send_flags & ibv_send_flags::IBV_SEND_INLINE.0 != 0 => {
                return Err(VerbsError::InvalidArgument(format!(
                    "send request {i} carries inline bytes: it cannot be pointed at a registered \
                     range (make the list with inline_from for that)"
                )))
            }
            None => {}
        }
        if let Some(rb) = remote {
            match self.ops[i] {
                SendOp::Write(_) | SendOp::WriteWithImm(..) | SendOp::Read(_) => {
                    r.wr.rdma.remote_addr = rb.addr;
                    r.wr.rdma.rkey = rb.rkey;
                }
                SendOp::FetchAdd { .. } | SendOp::CompareSwap { .. } => {
                    r.wr.atomic.remote_addr = rb.addr;
                    r.wr.atomic.rkey = rb.rkey;
                }
                op @ (SendOp::Send | SendOp::SendWithImm(_)) => {
                    return Err(VerbsError::InvalidArgument(format!(
                        "send request {i} ({}) has no remote buffer to point elsewhere",
                        op.name()
                    )))
                }
            }
        }
        // SAFETY: num_sge is 1, so sg_list points at this request's one SGE in `self.sges`.
        // The new SGE borrows its MR for 'a, which the list cannot outlive.
        unsafe { *r.sg_list = sge.0 };
        Ok(())
    }

    /// Posts requests `0..n` as one list (`ibv_post_send(3)`); on a UD QP each holds its address
    /// handle from here until it is done. A refusal names the request and its opcode; the
    /// requests before it were posted.
    ///
    /// # Panics
    /// When `n` is 0 or more than [`SendList::len`].
    #[inline(always)]
    pub fn post(&mut self, n: usize) -> Result<()> {
        if self.plain && n != 0 && n == self.raw.len() {
            // The whole list, nothing to hold: one call, no link to cut (a benchmark's loop).
            let mut bad: *mut ibv_send_wr = std::ptr::null_mut();
            // SAFETY: the requests are initialised and linked in order, the last one's link
            // null; their SGE pointers point into `self.sges`, which names registered memory or
            // inline bytes borrowed for 'a (checked at `send_list`/`retarget`); no address
            // handle to hold (not UD); the QP is live (borrowed for 'q).
            let ret =
                unsafe { (self.post_send)(self.qp.inner.ptr, self.raw.as_mut_ptr(), &mut bad) };
            return if ret == 0 {
                Ok(())
            } else {
                Err(self.refused_at(ret, bad))
            };
        }
        self.post_part(n)
    }

    /// [`SendList::post`] of a part of the list, or on a UD QP.
    #[inline(never)]
    fn post_part(&mut self, n: usize) -> Result<()> {
        assert!(
            n > 0 && n <= self.raw.len(),
            "SendList::post({n}) on a list of {}",
            self.raw.len()
        );
        let qp = self.qp;
        let mut held = qp.inner.parent.ud_sends.as_ref().map(|ud| {
            ud.ledger.hold(
                self.ahs[..n]
                    .iter()
                    .zip(&self.raw[..n])
                    .filter_map(|(ah, r)| {
                        let signaled = r.send_flags & ibv_send_flags::IBV_SEND_SIGNALED.0 != 0;
                        Some((ah.clone()?, signaled || qp.sq_sig_all))
                    }),
            )
        });
        // Cut the list after request n - 1 for this post.
        let last = n - 1;
        let saved = self.raw[last].next;
        self.raw[last].next = std::ptr::null_mut();
        let base = self.raw.as_mut_ptr();
        let mut bad: *mut ibv_send_wr = std::ptr::null_mut();
        // SAFETY: raw[0..n] are initialised and linked in order, ending at raw[last]; their SGE
        // pointers point into `self.sges` (never reallocated), which names registered memory or
        // inline bytes borrowed for 'a, checked at `send_list`/`retarget`; a UD request's
        // address handle is held until it is done (above); the QP is live (borrowed for 'q).
        let ret = unsafe { (self.post_send)(qp.inner.ptr, base, &mut bad) };
        self.raw[last].next = saved;
        if ret != 0 {
            // SAFETY: bad points into raw[0..n] when set.
            let bad_idx = (!bad.is_null()).then(|| unsafe { bad.offset_from(base) as usize });
            if let (Some(held), Some(posted)) = (held.as_mut(), bad_idx) {
                held.posted_only(posted);
            }
            return Err(self.refused_at(ret, bad));
        }
        Ok(())
    }

    /// The error of a post the provider refused with `ret`, at request `bad` (the first one
    /// when the provider did not say).
    #[cold]
    fn refused_at(&self, ret: std::os::raw::c_int, bad: *mut ibv_send_wr) -> VerbsError {
        let base = self.raw.as_ptr();
        // SAFETY: the provider sets bad to a request of the list it was given, when it sets it.
        let idx = (!bad.is_null()).then(|| unsafe { bad.cast_const().offset_from(base) as usize });
        let idx = idx.unwrap_or(0);
        let wr = SendWr::new(self.raw[idx].wr_id, self.ops[idx], Payload::None);
        refused(ret, &wr, idx)
    }
}

impl std::fmt::Debug for SendList<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendList")
            .field("requests", &self.raw.len())
            .field("sges", &self.sges.len())
            .field("inline", &self.inline_from.is_some())
            .finish()
    }
}
