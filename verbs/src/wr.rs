//! Work requests: what `ibv_post_send(3)` and `ibv_post_recv(3)` take, in a form that can only
//! name registered memory.

use std::marker::PhantomData;

use rdma_sys::ibv_sge;

use super::ah::Ah;
use super::mr::Mr;

/// One scatter/gather element: a range of a registered buffer (`struct ibv_sge`).
///
/// Only [`Mr::sge`](super::mr::Mr::sge) makes one, after checking the range against the MR, so a
/// work request built from `Sge`s can only name registered memory. It borrows its MR (the
/// lifetime `'mr`), so the MR cannot be deregistered while an `Sge` — or a request holding one —
/// exists. Nothing outside this crate can make one from raw parts:
///
/// ```compile_fail,E0423
/// # use vl_verbs::Sge;
/// let forged = Sge(rdma_sys::ibv_sge { addr: 0x1000, length: 64, lkey: 1 }); // private field
/// ```
#[derive(Clone, Copy)]
#[repr(transparent)]
pub struct Sge<'mr>(pub(crate) ibv_sge, PhantomData<&'mr Mr>);

impl<'mr> Sge<'mr> {
    pub(crate) fn new(raw: ibv_sge) -> Sge<'mr> {
        Sge(raw, PhantomData)
    }

    pub fn addr(&self) -> u64 {
        self.0.addr
    }
    pub fn len(&self) -> u32 {
        self.0.length
    }
    pub fn is_empty(&self) -> bool {
        self.0.length == 0
    }
    pub fn lkey(&self) -> u32 {
        self.0.lkey
    }
    /// The first `len` bytes of this element (never longer than it).
    pub fn prefix(self, len: u32) -> Sge<'mr> {
        let mut s = self;
        s.0.length = len.min(self.0.length);
        s
    }
}

impl std::fmt::Debug for Sge<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Sge {{ addr: {:#x}, len: {}, lkey: {:#x} }}",
            self.0.addr, self.0.length, self.0.lkey
        )
    }
}

/// A peer's buffer as it advertises it: virtual address, rkey, length. The remote NIC checks
/// every access against its MR, so a wrong value fails with `IBV_WC_REM_ACCESS_ERR`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RemoteBuf {
    pub addr: u64,
    pub rkey: u32,
    pub len: u32,
}

impl RemoteBuf {
    /// A sub-range `offset..offset+len`, or `None` if it does not fit the advertised length.
    pub fn slice(&self, offset: u32, len: u32) -> Option<RemoteBuf> {
        (offset.checked_add(len)? <= self.len).then_some(RemoteBuf {
            addr: self.addr.checked_add(u64::from(offset))?,
            rkey: self.rkey,
            len,
        })
    }
}

/// The operation of a send-queue work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendOp {
    /// Two-sided: consumes a receive posted by the peer.
    Send,
    /// Send carrying 32 bits of immediate data (host order here; converted on posting).
    SendWithImm(u32),
    /// One-sided write into the peer's buffer; the peer's CPU sees no completion.
    Write(RemoteBuf),
    /// Write that also consumes a receive on the peer, delivering the immediate data.
    WriteWithImm(RemoteBuf, u32),
    /// One-sided read of the peer's buffer into the local SGEs.
    Read(RemoteBuf),
    /// 64-bit fetch-and-add on an 8-byte aligned remote word; the old value lands locally.
    FetchAdd { remote: RemoteBuf, add: u64 },
    /// 64-bit compare-and-swap; the old value lands locally.
    CompareSwap {
        remote: RemoteBuf,
        compare: u64,
        swap: u64,
    },
}

impl SendOp {
    /// The verbs name of the opcode, for narration and errors.
    pub fn name(&self) -> &'static str {
        match self {
            SendOp::Send => "IBV_WR_SEND",
            SendOp::SendWithImm(_) => "IBV_WR_SEND_WITH_IMM",
            SendOp::Write(_) => "IBV_WR_RDMA_WRITE",
            SendOp::WriteWithImm(..) => "IBV_WR_RDMA_WRITE_WITH_IMM",
            SendOp::Read(_) => "IBV_WR_RDMA_READ",
            SendOp::FetchAdd { .. } => "IBV_WR_ATOMIC_FETCH_AND_ADD",
            SendOp::CompareSwap { .. } => "IBV_WR_ATOMIC_CMP_AND_SWP",
        }
    }

    /// Whether the payload of this operation may be sent inline (`IBV_SEND_INLINE`): only
    /// for data this side sends (SEND, RDMA WRITE). A READ or an atomic has no outgoing
    /// payload; its local SGE is where the NIC *writes* the answer, which inline would drop.
    pub fn may_inline(&self) -> bool {
        matches!(
            self,
            SendOp::Send | SendOp::SendWithImm(_) | SendOp::Write(_) | SendOp::WriteWithImm(..)
        )
    }
}

/// Where the local bytes of a send-queue request come from.
#[derive(Debug, Clone, Copy)]
pub enum Payload<'a> {
    /// No local data (a zero-byte send or write).
    None,
    /// Registered memory, gathered by the NIC when it executes the request.
    Sges(&'a [Sge<'a>]),
    /// Bytes copied into the work queue entry at post time (`IBV_SEND_INLINE`): no lkey needed,
    /// the buffer may be reused at once; at most the QP's `max_inline_data` bytes. Only SEND
    /// and RDMA WRITE carry one ([`SendOp::may_inline`]); posting it with another opcode is
    /// refused.
    Inline(&'a [u8]),
}

impl Payload<'_> {
    /// Total bytes of the payload.
    pub fn len(&self) -> usize {
        match self {
            Payload::None => 0,
            Payload::Sges(s) => s.iter().map(|s| s.len() as usize).sum(),
            Payload::Inline(b) => b.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The destination of a UD send: an address handle, the remote QPN and its Q_Key.
///
/// The request borrows the handle only while it is being built and posted; from the post on,
/// the QP holds the handle itself until the send is done (its completion, or a later one of
/// the same QP, is polled; or the QP is destroyed), so the [`Ah`] may be dropped at any time.
#[derive(Clone, Copy)]
pub struct UdDest<'a> {
    pub ah: &'a Ah,
    pub remote_qpn: u32,
    pub remote_qkey: u32,
}

/// A send-queue work request (`struct ibv_send_wr`).
#[derive(Clone, Copy)]
pub struct SendWr<'a> {
    /// Returned in the completion, to tell requests apart.
    pub wr_id: u64,
    pub op: SendOp,
    pub payload: Payload<'a>,
    /// Generate a completion (`IBV_SEND_SIGNALED`); unsignaled requests still use a send-queue
    /// slot until a later signaled one completes.
    pub signaled: bool,
    /// Raise a solicited event on the peer (`IBV_SEND_SOLICITED`).
    pub solicited: bool,
    /// Wait for earlier reads and atomics before this one (`IBV_SEND_FENCE`).
    pub fence: bool,
    /// Required on UD QPs, ignored on connected ones.
    pub ud: Option<UdDest<'a>>,
}

impl<'a> SendWr<'a> {
    /// A signaled request with no flags.
    pub fn new(wr_id: u64, op: SendOp, payload: Payload<'a>) -> SendWr<'a> {
        SendWr {
            wr_id,
            op,
            payload,
            signaled: true,
            solicited: false,
            fence: false,
            ud: None,
        }
    }
    pub fn signaled(mut self, yes: bool) -> Self {
        self.signaled = yes;
        self
    }
    pub fn solicited(mut self, yes: bool) -> Self {
        self.solicited = yes;
        self
    }
    pub fn to(mut self, dest: UdDest<'a>) -> Self {
        self.ud = Some(dest);
        self
    }
}

/// A receive-queue work request (`struct ibv_recv_wr`): where an incoming SEND (or the
/// notification of a WRITE_WITH_IMM) may land.
#[derive(Debug, Clone, Copy)]
pub struct RecvWr<'a> {
    pub wr_id: u64,
    pub sges: &'a [Sge<'a>],
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_slices_stay_inside() {
        let r = RemoteBuf {
            addr: 0x1000,
            rkey: 7,
            len: 100,
        };
        assert_eq!(
            r.slice(10, 90),
            Some(RemoteBuf {
                addr: 0x100a,
                rkey: 7,
                len: 90
            })
        );
        assert_eq!(r.slice(10, 91), None);
        assert_eq!(r.slice(u32::MAX, 2), None);
        // A peer advertising an address at the very top does not wrap around.
        let top = RemoteBuf {
            addr: u64::MAX - 4,
            rkey: 7,
            len: 100,
        };
        assert_eq!(top.slice(10, 1), None);
    }

    #[test]
    fn inline_only_for_outgoing_data() {
        let r = RemoteBuf::default();
        assert!(SendOp::Send.may_inline());
        assert!(SendOp::SendWithImm(1).may_inline());
        assert!(SendOp::Write(r).may_inline());
        assert!(SendOp::WriteWithImm(r, 1).may_inline());
        assert!(!SendOp::Read(r).may_inline());
        assert!(!SendOp::FetchAdd { remote: r, add: 1 }.may_inline());
        assert!(!SendOp::CompareSwap {
            remote: r,
            compare: 0,
            swap: 1
        }
        .may_inline());
    }

    #[test]
    fn payload_lengths() {
        let s = Sge::new(ibv_sge {
            addr: 0,
            length: 10,
            lkey: 1,
        });
        assert_eq!(Payload::Sges(&[s, s.prefix(3)]).len(), 13);
        assert_eq!(s.prefix(99).len(), 10);
        assert_eq!(Payload::Inline(b"abc").len(), 3);
        assert!(Payload::None.is_empty());
        assert_eq!(
            SendOp::Read(RemoteBuf::default()).name(),
            "IBV_WR_RDMA_READ"
        );
    }
}
