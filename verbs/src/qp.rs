//! Queue pairs (`ibv_create_qp(3)`, `ibv_modify_qp(3)`, `ibv_post_send(3)`, `ibv_post_recv(3)`).
//!
//! A QP starts in RESET and must be walked through INIT → RTR → RTS before it can send. Each
//! transition here takes a struct that spells out every attribute the transition needs, so the
//! reader sees exactly what the hardware is told.

use std::mem::MaybeUninit;
use std::sync::Arc;

use rdma_sys::{
    ibv_create_qp, ibv_destroy_qp, ibv_modify_qp, ibv_qp, ibv_qp_attr, ibv_qp_attr_mask,
    ibv_qp_init_attr, ibv_query_qp, ibv_recv_wr, ibv_send_flags, ibv_send_wr, ibv_sge,
    ibv_wr_opcode, imm_data_invalidated_rkey_union_t, wr_t,
};

use super::ah::AhAttr;
use super::attrs::{AccessFlags, Mtu, QpState, QpType};
use super::cq::{Cq, CqInner};
use super::error::{Result, VerbsError};
use super::handle::{verbs_object, Handle};
use super::mr::Mr;
use super::pd::{Pd, PdInner};
use super::srq::SrqInner;
use super::ud_sends::UdSends;
use super::wr::{Payload, RecvWr, SendOp, SendWr, Sge};

mod send_list;
pub use send_list::SendList;

/// Work-queue sizes of a QP: what is asked for at creation, and what was granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QpCaps {
    /// Outstanding send-queue requests.
    pub max_send_wr: u32,
    /// Outstanding receive-queue requests.
    pub max_recv_wr: u32,
    /// SGEs per send request.
    pub max_send_sge: u32,
    /// SGEs per receive request.
    pub max_recv_sge: u32,
    /// Largest payload that may be sent inline.
    pub max_inline_data: u32,
}

/// What `ibv_create_qp(3)` is asked for.
pub struct QpInitAttr<'a> {
    pub send_cq: &'a Cq,
    pub recv_cq: &'a Cq,
    pub qp_type: QpType,
    pub caps: QpCaps,
    /// Every send request generates a completion, whatever its `signaled` flag.
    pub sq_sig_all: bool,
}

/// RESET → INIT: bind the QP to a port and say what the peer may do to our memory.
#[derive(Debug, Clone, Copy)]
pub struct InitAttr {
    /// Our port (from 1).
    pub port_num: u8,
    /// Partition key table index; 0 is the default partition.
    pub pkey_index: u16,
    /// Remote operations this QP accepts (REMOTE_WRITE/READ/ATOMIC). Ignored for UD.
    pub access: AccessFlags,
    /// UD only: the Q_Key incoming datagrams must carry.
    pub qkey: u32,
}

/// INIT → RTR (ready to receive): where the peer is and how to talk to it. Connected QPs only;
/// UD QPs need no attributes here.
#[derive(Debug, Clone, Copy)]
pub struct RtrAttr {
    /// Largest packet payload on the path; not above either port's active MTU.
    pub path_mtu: Mtu,
    /// The peer's QP number.
    pub dest_qpn: u32,
    /// The first packet sequence number we expect from the peer (its `sq_psn`).
    pub rq_psn: u32,
    /// RC: RDMA Reads and Atomics the peer may have outstanding against us.
    pub max_dest_rd_atomic: u8,
    /// RC: how long the peer should wait before retrying after we answered RNR (code 0–31;
    /// 12 ≈ 0.64 ms).
    pub min_rnr_timer: u8,
    /// The path to the peer's port.
    pub ah: AhAttr,
}

/// RTR → RTS (ready to send): our own sending parameters.
#[derive(Debug, Clone, Copy)]
pub struct RtsAttr {
    /// Our first packet sequence number (the peer's `rq_psn`).
    pub sq_psn: u32,
    /// RC: ack timeout exponent: 4.096 µs × 2^timeout before a retransmit (14 ≈ 67 ms).
    pub timeout: u8,
    /// RC: retransmissions after a timeout before failing with `IBV_WC_RETRY_EXC_ERR` (0–7).
    pub retry_cnt: u8,
    /// RC: retries after receiver-not-ready before `IBV_WC_RNR_RETRY_EXC_ERR` (7 = forever).
    pub rnr_retry: u8,
    /// RC: RDMA Reads and Atomics we may have outstanding towards the peer.
    pub max_rd_atomic: u8,
}

/// A queue pair. Holds its PD and CQs (its handle's `parent`), so they can never be freed
/// before it.
pub struct Qp {
    pub(crate) inner: Handle<ibv_qp, QpParents>,
    qp_type: QpType,
    caps: QpCaps,
    /// Every send request gets a completion (`sq_sig_all`).
    sq_sig_all: bool,
}

/// What a QP needs alive until it is destroyed.
pub(crate) struct QpParents {
    _pd: Arc<PdInner>,
    _send_cq: Arc<CqInner>,
    _recv_cq: Arc<CqInner>,
    /// The shared receive queue the QP draws its receives from, if any.
    _srq: Option<Arc<SrqInner>>,
    /// A UD QP's posted sends, each holding its address handle until it is done (dropped after
    /// the QP is destroyed, like every parent: then the handles left go too).
    ud_sends: Option<UdSends>,
}

// SAFETY: QPs are thread-safe in libibverbs (providers lock their queues); we hold no other
// state. Nothing is created from a QP: PD, CQs and SRQ outlive it as its parents.
verbs_object!(unsafe ibv_qp, destroyed by ibv_destroy_qp);

/// Requests converted per `ibv_post_send` call; longer lists are posted in chunks.
const POST_CHUNK: usize = 32;

impl Qp {
    pub(crate) fn create(pd: &Pd, attr: &QpInitAttr<'_>) -> Result<Qp> {
        Qp::create_with_srq(pd, attr, None)
    }

    pub(crate) fn create_with_srq(
        pd: &Pd,
        attr: &QpInitAttr<'_>,
        srq: Option<Arc<SrqInner>>,
    ) -> Result<Qp> {
        // SAFETY: plain C data; zero is valid for every field.
        let mut init: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        init.send_cq = attr.send_cq.inner.ptr;
        init.recv_cq = attr.recv_cq.inner.ptr;
        init.qp_type = attr.qp_type.to_ibv();
        init.sq_sig_all = attr.sq_sig_all as i32;
        init.cap.max_send_wr = attr.caps.max_send_wr;
        init.cap.max_recv_wr = attr.caps.max_recv_wr;
        init.cap.max_send_sge = attr.caps.max_send_sge;
        init.cap.max_recv_sge = attr.caps.max_recv_sge;
        init.cap.max_inline_data = attr.caps.max_inline_data;
        if let Some(s) = &srq {
            init.srq = s.ptr;
        }
        let parents = QpParents {
            _pd: pd.inner.clone(),
            _send_cq: attr.send_cq.inner.clone(),
            _recv_cq: attr.recv_cq.inner.clone(),
            _srq: srq,
            ud_sends: None,
        };
        // SAFETY: the PD, both CQs and the SRQ (if any) are live and of the same context. The
        // new QP is ours alone, and its parents outlive it.
        let inner = unsafe {
            Handle::created(
                "ibv_create_qp",
                ibv_create_qp(pd.inner.ptr, &mut init),
                parents,
            )?
        };
        let mut qp = Qp {
            inner,
            qp_type: attr.qp_type,
            caps: QpCaps::default(),
            sq_sig_all: attr.sq_sig_all,
        };
        if attr.qp_type == QpType::Ud {
            qp.inner.parent.ud_sends =
                Some(UdSends::register(qp.qpn(), attr.send_cq.inner.clone()));
        }
        // What the provider granted may exceed what was asked; read it back rather than trust
        // either the request or a vendor table.
        qp.caps = qp.query()?.1;
        Ok(qp)
    }

    /// The raw handle, for the connection manager (`cm.rs`), which attaches the QP to its
    /// `rdma_cm_id` so that librdmacm walks it through INIT → RTR → RTS.
    pub(crate) fn as_ptr(&self) -> *mut ibv_qp {
        self.inner.ptr
    }

    /// The QP number the peer must be told.
    pub fn qpn(&self) -> u32 {
        // SAFETY: ptr is a live QP.
        unsafe { (*self.inner.ptr).qp_num }
    }
    pub fn qp_type(&self) -> QpType {
        self.qp_type
    }
    /// The capabilities the provider granted (read back with `ibv_query_qp(3)` at creation).
    pub fn caps(&self) -> QpCaps {
        self.caps
    }

    fn query(&self) -> Result<(QpState, QpCaps)> {
        // SAFETY: plain C data.
        let mut attr: ibv_qp_attr = unsafe { std::mem::zeroed() };
        // SAFETY: plain C data.
        let mut init: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        let mask = ibv_qp_attr_mask::IBV_QP_STATE | ibv_qp_attr_mask::IBV_QP_CAP;
        // SAFETY: the QP is live; both out-pointers are valid.
        let ret = unsafe { ibv_query_qp(self.inner.ptr, &mut attr, mask.0 as i32, &mut init) };
        VerbsError::check_ret("ibv_query_qp", ret)?;
        let c = init.cap;
        Ok((
            QpState::from_ibv(attr.qp_state),
            QpCaps {
                max_send_wr: c.max_send_wr,
                max_recv_wr: c.max_recv_wr,
                max_send_sge: c.max_send_sge,
                max_recv_sge: c.max_recv_sge,
                max_inline_data: c.max_inline_data,
            },
        ))
    }

    /// The current state as the device reports it (`ibv_query_qp(3)`).
    pub fn state(&self) -> Result<QpState> {
        Ok(self.query()?.0)
    }

    /// The RDMA Read/Atomic depths the device holds for this QP, read back with
    /// `ibv_query_qp(3)`: `(max_rd_atomic, max_dest_rd_atomic)` — what we may have outstanding
    /// towards the peer, and what the peer may have outstanding against us. A provider may hold
    /// more than was set (rxe rounds both up to a power of two).
    pub fn rd_atomic(&self) -> Result<(u8, u8)> {
        // SAFETY: plain C data.
        let mut attr: ibv_qp_attr = unsafe { std::mem::zeroed() };
        // SAFETY: plain C data.
        let mut init: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        let mask =
            ibv_qp_attr_mask::IBV_QP_MAX_QP_RD_ATOMIC | ibv_qp_attr_mask::IBV_QP_MAX_DEST_RD_ATOMIC;
        // SAFETY: the QP is live; both out-pointers are valid.
        let ret = unsafe { ibv_query_qp(self.inner.ptr, &mut attr, mask.0 as i32, &mut init) };
        VerbsError::check_ret("ibv_query_qp", ret)?;
        Ok((attr.max_rd_atomic, attr.max_dest_rd_atomic))
    }

    /// The address vector the device holds for this connected QP, read back with
    /// `ibv_query_qp(3)` (`IBV_QP_AV`). On RoCE it shows what the kernel resolved, which may
    /// differ from what RTR was given (the hop limit comes from the IP route).
    pub fn av(&self) -> Result<AhAttr> {
        // SAFETY: plain C data.
        let mut attr: ibv_qp_attr = unsafe { std::mem::zeroed() };
        // SAFETY: plain C data.
        let mut init: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        let mask = ibv_qp_attr_mask::IBV_QP_AV;
        // SAFETY: the QP is live; both out-pointers are valid.
        let ret = unsafe { ibv_query_qp(self.inner.ptr, &mut attr, mask.0 as i32, &mut init) };
        VerbsError::check_ret("ibv_query_qp", ret)?;
        Ok(AhAttr::from_ibv(&attr.ah_attr))
    }

    fn modify(
        &self,
        verb: &'static str,
        attr: &mut ibv_qp_attr,
        mask: ibv_qp_attr_mask,
    ) -> Result<()> {
        // SAFETY: the QP is live; attr is fully initialised for every bit in mask.
        let ret = unsafe { ibv_modify_qp(self.inner.ptr, attr, mask.0 as i32) };
        VerbsError::check_ret(verb, ret)
    }

    /// RESET → INIT.
    pub fn modify_to_init(&self, a: &InitAttr) -> Result<()> {
        use ibv_qp_attr_mask as m;
        // SAFETY: plain C data.
        let mut attr: ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.qp_state = QpState::Init.to_ibv();
        attr.port_num = a.port_num;
        attr.pkey_index = a.pkey_index;
        let mut mask = m::IBV_QP_STATE | m::IBV_QP_PKEY_INDEX | m::IBV_QP_PORT;
        if self.qp_type == QpType::Ud {
            attr.qkey = a.qkey;
            mask |= m::IBV_QP_QKEY;
        } else {
            attr.qp_access_flags = a.access.0;
            mask |= m::IBV_QP_ACCESS_FLAGS;
        }
        self.modify("ibv_modify_qp(INIT)", &mut attr, mask)
    }

    /// INIT → RTR. For a UD QP `a` may be `None`; connected QPs need it.
    pub fn modify_to_rtr(&self, a: Option<&RtrAttr>) -> Result<()> {
        use ibv_qp_attr_mask as m;
        // SAFETY: plain C data.
        let mut attr: ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.qp_state = QpState::Rtr.to_ibv();
        let mut mask = m::IBV_QP_STATE;
        if self.qp_type != QpType::Ud {
            let a = a.ok_or_else(|| {
                VerbsError::InvalidArgument("a connected QP needs RTR attributes".into())
            })?;
            attr.path_mtu = a.path_mtu.to_ibv();
            attr.dest_qp_num = a.dest_qpn;
            attr.rq_psn = a.rq_psn & 0xff_ffff;
            attr.ah_attr = a.ah.to_ibv();
            mask |= m::IBV_QP_AV | m::IBV_QP_PATH_MTU | m::IBV_QP_DEST_QPN | m::IBV_QP_RQ_PSN;
            if self.qp_type == QpType::Rc {
                attr.max_dest_rd_atomic = a.max_dest_rd_atomic;
                attr.min_rnr_timer = a.min_rnr_timer;
                mask |= m::IBV_QP_MAX_DEST_RD_ATOMIC | m::IBV_QP_MIN_RNR_TIMER;
            }
        }
        self.modify("ibv_modify_qp(RTR)", &mut attr, mask)
    }

    /// RTR → RTS.
    pub fn modify_to_rts(&self, a: &RtsAttr) -> Result<()> {
        use ibv_qp_attr_mask as m;
        // SAFETY: plain C data.
        let mut attr: ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.qp_state = QpState::Rts.to_ibv();
        attr.sq_psn = a.sq_psn & 0xff_ffff;
        let mut mask = m::IBV_QP_STATE | m::IBV_QP_SQ_PSN;
        if self.qp_type == QpType::Rc {
            attr.timeout = a.timeout;
            attr.retry_cnt = a.retry_cnt;
            attr.rnr_retry = a.rnr_retry;
            attr.max_rd_atomic = a.max_rd_atomic;
            mask |= m::IBV_QP_TIMEOUT
                | m::IBV_QP_RETRY_CNT
                | m::IBV_QP_RNR_RETRY
                | m::IBV_QP_MAX_QP_RD_ATOMIC;
        }
        self.modify("ibv_modify_qp(RTS)", &mut attr, mask)
    }

    /// Any state → ERR: outstanding requests are flushed with `IBV_WC_WR_FLUSH_ERR`.
    pub fn modify_to_error(&self) -> Result<()> {
        // SAFETY: plain C data.
        let mut attr: ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.qp_state = QpState::Err.to_ibv();
        self.modify(
            "ibv_modify_qp(ERR)",
            &mut attr,
            ibv_qp_attr_mask::IBV_QP_STATE,
        )
    }

    /// Posts send-queue requests (`ibv_post_send(3)`), as one linked list per call of up to
    /// 32 requests (the `-l` post list of perftest).
    ///
    /// Every SGE names registered memory (an [`Sge`] can only come from an MR),
    /// and that memory cannot be freed while registered, so the NIC never touches freed memory.
    /// Inline payloads are copied before this returns.
    pub fn post_send(&self, wrs: &[SendWr<'_>]) -> Result<()> {
        for (chunk_no, chunk) in wrs.chunks(POST_CHUNK).enumerate() {
            self.post_send_chunk(chunk, chunk_no * POST_CHUNK, None)?;
        }
        Ok(())
    }

    /// Like [`Qp::post_send`], but the registered payloads ([`Payload::Sges`]) are sent inline
    /// (`IBV_SEND_INLINE`): the provider copies their bytes out of `from` into the work queue
    /// entry before this returns, so the buffer may be rewritten at once.
    ///
    /// Every SGE must lie inside `from` (checked; `from` is borrowed for the call, so the bytes
    /// are alive while they are copied) and each request's payload must fit the QP's
    /// `max_inline_data`. A benchmark keeps its requests prebuilt over SGEs and still rewrites
    /// the buffer (a sequence stamp) between posts, which a `Payload::Inline` borrow would forbid.
    pub fn post_send_inline(&self, wrs: &[SendWr<'_>], from: &Mr) -> Result<()> {
        for (chunk_no, chunk) in wrs.chunks(POST_CHUNK).enumerate() {
            self.post_send_chunk(chunk, chunk_no * POST_CHUNK, Some(from))?;
        }
        Ok(())
    }

    /// Posts up to [`POST_CHUNK`] requests as one linked list: each is checked and translated
    /// ([`Qp::send_flags`], [`Qp::sg_list`]), linked to the next, then the list is posted once.
    fn post_send_chunk(
        &self,
        wrs: &[SendWr<'_>],
        first_index: usize,
        inline_from: Option<&Mr>,
    ) -> Result<()> {
        let mut raw: [MaybeUninit<ibv_send_wr>; POST_CHUNK] =
            [const { MaybeUninit::uninit() }; POST_CHUNK];
        // One SGE per inline payload lives here for the duration of the call.
        let mut inline_sge: [MaybeUninit<ibv_sge>; POST_CHUNK] =
            [const { MaybeUninit::uninit() }; POST_CHUNK];
        let n = wrs.len();
        let base = raw.as_mut_ptr().cast::<ibv_send_wr>();
        for (i, wr) in wrs.iter().enumerate() {
            let index = first_index + i;
            let mut flags = self.send_flags(wr, index, inline_from)?;
            let (sg_list, num_sge) =
                self.sg_list(wr, index, inline_from, &mut inline_sge[i], &mut flags)?;
            let (opcode, imm, wr_u) = op_fields(wr);
            let next = next_in_list(base, i, n);
            raw[i].write(ibv_send_wr {
                wr_id: wr.wr_id,
                next,
                sg_list,
                num_sge,
                opcode,
                send_flags: flags,
                imm_data_invalidated_rkey_union: imm_data_invalidated_rkey_union_t {
                    imm_data: imm.to_be(),
                },
                wr: wr_u,
                // SAFETY: the XRC and bind/TSO unions are unused for our opcodes; zero is valid.
                qp_type: unsafe { std::mem::zeroed() },
                // SAFETY: as above.
                bind_mw_tso_union: unsafe { std::mem::zeroed() },
            });
        }
        if n == 0 {
            return Ok(());
        }
        // On a UD QP each request holds its address handle from here until it is done.
        let mut held = (self.inner.parent.ud_sends.as_ref())
            .map(|ud| ud.ledger.hold_for(wrs, self.sq_sig_all));
        let mut bad: *mut ibv_send_wr = std::ptr::null_mut();
        // SAFETY: raw[0..n] are initialised and linked in order; every SGE points at registered
        // memory, or at inline bytes borrowed for this call (a `Payload::Inline` slice, or a
        // range checked to lie inside `inline_from`, which is borrowed too); every address
        // handle is held until its request is done (above); the QP is live.
        let ret = unsafe { rdma_sys::ibv_post_send(self.inner.ptr, base, &mut bad) };
        if ret != 0 {
            // SAFETY: bad points into raw[0..n] when set.
            let bad_idx = (!bad.is_null()).then(|| unsafe { bad.offset_from(base) as usize });
            // The requests before the refused one were posted; without it, keep every handle.
            if let (Some(held), Some(posted)) = (held.as_mut(), bad_idx) {
                held.posted_only(posted);
            }
            let idx = bad_idx.unwrap_or(0);
            return Err(refused(ret, &wrs[idx], first_index + idx));
        }
        Ok(())
    }

    /// The `send_flags` a request asks for (signaled, solicited, fence), after refusing what
    /// this QP cannot post: a UD request without a destination, an inline READ or atomic.
    /// `IBV_SEND_INLINE` is added by [`Qp::sg_list`].
    #[inline]
    fn send_flags(&self, wr: &SendWr<'_>, index: usize, inline_from: Option<&Mr>) -> Result<u32> {
        if self.qp_type == QpType::Ud && wr.ud.is_none() {
            return Err(VerbsError::InvalidArgument(format!(
                "send request {index} on a UD QP has no destination (address handle)"
            )));
        }
        let mut flags = 0u32;
        if wr.signaled {
            flags |= ibv_send_flags::IBV_SEND_SIGNALED.0;
        }
        if wr.solicited {
            flags |= ibv_send_flags::IBV_SEND_SOLICITED.0;
        }
        if wr.fence {
            flags |= ibv_send_flags::IBV_SEND_FENCE.0;
        }
        let inline = matches!(wr.payload, Payload::Inline(_))
            || (inline_from.is_some() && matches!(wr.payload, Payload::Sges(_)));
        if inline && !wr.op.may_inline() {
            return Err(VerbsError::InvalidArgument(format!(
                "send request {index}: {} cannot be sent inline (only SEND and RDMA WRITE carry \
                 outgoing data; a READ or an atomic writes into its local SGE)",
                wr.op.name()
            )));
        }
        Ok(flags)
    }

    /// The scatter/gather list of a request. Registered SGEs are passed as they are (inline
    /// when `inline_from` is given, after checking they lie inside it); an inline byte slice
    /// gets one SGE written into `inline_sge`, which the caller keeps alive until the post.
    #[inline]
    fn sg_list(
        &self,
        wr: &SendWr<'_>,
        index: usize,
        inline_from: Option<&Mr>,
        inline_sge: &mut MaybeUninit<ibv_sge>,
        flags: &mut u32,
    ) -> Result<(*mut ibv_sge, i32)> {
        Ok(match wr.payload {
            Payload::None => (std::ptr::null_mut(), 0),
            // Sge is repr(transparent) over ibv_sge; the slice outlives this call, and the
            // provider only reads the list during ibv_post_send.
            Payload::Sges(s) => {
                if let Some(mr) = inline_from {
                    self.check_inline(s, mr, index)?;
                    *flags |= ibv_send_flags::IBV_SEND_INLINE.0;
                }
                (s.as_ptr() as *mut ibv_sge, s.len() as i32)
            }
            Payload::Inline(bytes) => {
                *flags |= ibv_send_flags::IBV_SEND_INLINE.0;
                let length = u32::try_from(bytes.len())
                    .ok()
                    .filter(|l| *l <= self.caps.max_inline_data)
                    .ok_or_else(|| {
                        VerbsError::InvalidArgument(format!(
                            "send request {index}: {} bytes inline, but the QP grants \
                             max_inline_data {}",
                            bytes.len(),
                            self.caps.max_inline_data
                        ))
                    })?;
                inline_sge.write(ibv_sge {
                    addr: bytes.as_ptr() as u64,
                    length,
                    lkey: 0,
                });
                (inline_sge.as_mut_ptr(), 1)
            }
        })
    }

    /// Refuses an inline payload that is not inside `mr` or larger than `max_inline_data`.
    fn check_inline(&self, sges: &[Sge], mr: &Mr, index: usize) -> Result<()> {
        let start = mr.addr();
        let end = start + mr.len() as u64;
        let mut total = 0u64;
        for s in sges {
            let (a, len) = (s.addr(), u64::from(s.len()));
            let inside = matches!(a.checked_add(len), Some(e) if a >= start && e <= end);
            if !inside {
                return Err(VerbsError::InvalidArgument(format!(
                    "send request {index}: an inline SGE ({s:?}) lies outside the memory region \
                     it is copied from"
                )));
            }
            total = total.saturating_add(len);
        }
        if total > u64::from(self.caps.max_inline_data) {
            return Err(VerbsError::InvalidArgument(format!(
                "send request {index}: {total} bytes inline, but the QP grants max_inline_data {}",
                self.caps.max_inline_data
            )));
        }
        Ok(())
    }

    /// Posts receive requests (`ibv_post_recv(3)`): buffers for incoming SENDs, consumed in order.
    pub fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<()> {
        for chunk in wrs.chunks(POST_CHUNK) {
            let mut raw: [MaybeUninit<ibv_recv_wr>; POST_CHUNK] =
                [const { MaybeUninit::uninit() }; POST_CHUNK];
            let base = raw.as_mut_ptr().cast::<ibv_recv_wr>();
            let n = chunk.len();
            for (i, wr) in chunk.iter().enumerate() {
                let next = next_in_list(base, i, n);
                raw[i].write(ibv_recv_wr {
                    wr_id: wr.wr_id,
                    next,
                    sg_list: wr.sges.as_ptr() as *mut ibv_sge,
                    num_sge: wr.sges.len() as i32,
                });
            }
            let mut bad: *mut ibv_recv_wr = std::ptr::null_mut();
            // SAFETY: raw[0..n] are initialised and linked; SGEs name registered memory, which
            // stays allocated while registered; the QP is live.
            let ret = unsafe { rdma_sys::ibv_post_recv(self.inner.ptr, base, &mut bad) };
            VerbsError::check_ret("ibv_post_recv", ret)?;
        }
        Ok(())
    }
}

/// The `next` link of request `i` of the `n` in the array at `base`: the entry after it, or null
/// for the last. The address is only computed here (`wrapping_add`), never read.
#[inline]
fn next_in_list<T>(base: *mut T, i: usize, n: usize) -> *mut T {
    if i + 1 < n {
        base.wrapping_add(i + 1)
    } else {
        std::ptr::null_mut()
    }
}

/// The opcode, immediate data and the remote/atomic/UD union of a request.
fn op_fields(wr: &SendWr<'_>) -> (u32, u32, wr_t) {
    use rdma_sys::{atomic_t, rdma_t, ud_t};
    let rdma = |r: &super::wr::RemoteBuf| wr_t {
        rdma: rdma_t {
            remote_addr: r.addr,
            rkey: r.rkey,
        },
    };
    let ud = || match wr.ud {
        Some(d) => wr_t {
            ud: ud_t {
                ah: d.ah.inner.ptr,
                remote_qpn: d.remote_qpn,
                remote_qkey: d.remote_qkey,
            },
        },
        None => wr_t {
            rdma: rdma_t {
                remote_addr: 0,
                rkey: 0,
            },
        },
    };
    match wr.op {
        SendOp::Send => (ibv_wr_opcode::IBV_WR_SEND, 0, ud()),
        SendOp::SendWithImm(imm) => (ibv_wr_opcode::IBV_WR_SEND_WITH_IMM, imm, ud()),
        SendOp::Write(r) => (ibv_wr_opcode::IBV_WR_RDMA_WRITE, 0, rdma(&r)),
        SendOp::WriteWithImm(r, imm) => (ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM, imm, rdma(&r)),
        SendOp::Read(r) => (ibv_wr_opcode::IBV_WR_RDMA_READ, 0, rdma(&r)),
        SendOp::FetchAdd { remote, add } => (
            ibv_wr_opcode::IBV_WR_ATOMIC_FETCH_AND_ADD,
            0,
            wr_t {
                atomic: atomic_t {
                    remote_addr: remote.addr,
                    compare_add: add,
                    swap: 0,
                    rkey: remote.rkey,
                },
            },
        ),
        SendOp::CompareSwap {
            remote,
            compare,
            swap,
        } => (
            ibv_wr_opcode::IBV_WR_ATOMIC_CMP_AND_SWP,
            0,
            wr_t {
                atomic: atomic_t {
                    remote_addr: remote.addr,
                    compare_add: compare,
                    swap,
                    rkey: remote.rkey,
                },
            },
        ),
    }
}

/// The error of an `ibv_post_send` that returned `ret`, naming the request it refused (number
/// `index` of the caller's list).
fn refused(ret: i32, wr: &SendWr<'_>, index: usize) -> VerbsError {
    match VerbsError::from_ret("ibv_post_send", ret) {
        VerbsError::Call { verb, errno, hint } => VerbsError::Call {
            verb,
            errno,
            hint: Some(format!(
                "request {index} ({}) refused{}",
                wr.op.name(),
                hint.map(|h| format!("; {h}")).unwrap_or_default()
            )),
        },
        other => other,
    }
}
