//! The RDMA connection manager (librdmacm, `rdma_cm(7)`): an [`EventChannel`] that delivers
//! connection events, and the [`CmId`] — the socket-like handle that resolves an IP address to
//! a device and a path, connects or listens, and walks its QP through INIT → RTR → RTS itself.
//!
//! What lessons 03–06 did by hand (exchange QPN, PSN, GID and rkey over TCP, then
//! `ibv_modify_qp` three times) the CM does over the RDMA fabric: its REQ/REP/RTU messages
//! carry the QP numbers, the path and up to 56 (REQ) / 196 (REP) bytes of *private data*.
//!
//! Ownership follows the rest of the layer: a [`CmId`] holds an `Arc` of its event channel and
//! owns its QP; dropping it destroys the QP (detached from the id first), then the id
//! (`rdma_destroy_id(3)`), and the channel goes only after its last id. Every wait for an
//! event is bounded ([`EventChannel::get_event`] takes a timeout).
//!
//! librdmacm opens every RDMA device itself and keeps it open for the life of the process; a
//! `cm_id` bound to a device names that context (`id->verbs`). [`CmId::context`] wraps it in a
//! [`Context`] that is never closed by us (librdmacm closes it at exit), so PDs, CQs and QPs
//! for a connection are created on the very context the CM uses, as `rdma_create_qp(3)` needs.

use std::ffi::CStr;
use std::net::SocketAddr;
use std::os::fd::BorrowedFd;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::libc;
use nix::sys::socket::{SockaddrLike, SockaddrStorage};
use rdma_sys::{
    ibv_context, ibv_get_device_name, ibv_modify_qp, ibv_qp_attr, ibv_qp_attr_mask, ibv_qp_state,
    rdma_accept, rdma_ack_cm_event, rdma_bind_addr, rdma_cm_event, rdma_cm_event_type as ev,
    rdma_cm_id, rdma_conn_param, rdma_connect, rdma_create_event_channel, rdma_create_id,
    rdma_destroy_event_channel, rdma_destroy_id, rdma_disconnect, rdma_establish,
    rdma_event_channel, rdma_get_cm_event, rdma_init_qp_attr, rdma_listen, rdma_port_space,
    rdma_reject, rdma_resolve_addr, rdma_resolve_route, rdma_set_option,
};

use super::attrs::{AccessFlags, Mtu, QpState};
use super::context::{Context, ContextInner};
use super::error::{Result, VerbsError};
use super::fd::{set_nonblocking, wait_readable};
use super::pd::Pd;
use super::qp::{Qp, QpInitAttr};

/// Largest private data an RC connect (REQ) may carry over rdma_cm on IB/RoCE: the REQ has 92
/// bytes, of which rdma_cm's own header (IP addresses and ports) takes 36.
pub const MAX_CONNECT_PRIVATE_DATA: usize = 56;
/// Largest private data an accept (REP) may carry: the REP's whole 196 bytes.
pub const MAX_ACCEPT_PRIVATE_DATA: usize = 196;

// <rdma/rdma_cma.h>'s option level and name (not in rdma-sys's bindings).
const RDMA_OPTION_ID: i32 = 0;
const RDMA_OPTION_ID_TOS: i32 = 0;

/// What the caller changes in the attributes `rdma_init_qp_attr(3)` computes before
/// [`CmId::modify_qp`] applies them; `None` keeps the CM's value. A field is applied only in
/// the transition whose attributes contain it (access at INIT, the address vector and
/// `max_dest_rd_atomic` at RTR, `timeout` and `max_rd_atomic` at RTS).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CmQpOverrides {
    /// INIT: the remote operations the QP accepts.
    pub access: Option<AccessFlags>,
    /// RTR: the path MTU (the CM's is the smaller active MTU of the route).
    pub path_mtu: Option<Mtu>,
    /// RTR: the address vector's service level.
    pub sl: Option<u8>,
    /// RTR: the GRH's traffic class (the CM's comes from the id's TOS).
    pub traffic_class: Option<u8>,
    /// RTR: the GRH's flow label.
    pub flow_label: Option<u32>,
    /// RTR: RDMA Reads/Atomics the peer may have outstanding against us.
    pub max_dest_rd_atomic: Option<u8>,
    /// RTS: the ack timeout exponent (4.096 us x 2^N).
    pub timeout: Option<u8>,
    /// RTS: RDMA Reads/Atomics we may have outstanding.
    pub max_rd_atomic: Option<u8>,
}

// ---- the event channel ------------------------------------------------------------------------

pub(crate) struct EventChannelInner {
    ptr: *mut rdma_event_channel,
}

// SAFETY: an event channel is a kernel fd wrapper; librdmacm allows use from any thread.
unsafe impl Send for EventChannelInner {}
// SAFETY: as above.
unsafe impl Sync for EventChannelInner {}

impl Drop for EventChannelInner {
    fn drop(&mut self) {
        // SAFETY: every CmId on this channel holds an Arc of us, so none is left.
        unsafe { rdma_destroy_event_channel(self.ptr) };
    }
}

/// Where the connection manager reports what happened (`rdma_create_event_channel(3)`): a file
/// descriptor that becomes readable when an event is queued. Cheap to clone (an `Arc`).
#[derive(Clone)]
pub struct EventChannel {
    inner: Arc<EventChannelInner>,
}

impl EventChannel {
    /// Opens `/dev/infiniband/rdma_cm` (`rdma_create_event_channel(3)`) and makes its fd
    /// non-blocking, so that every wait is a bounded `poll(2)`.
    pub fn create() -> Result<EventChannel> {
        // SAFETY: no arguments; returns NULL with errno set on failure.
        let ptr = unsafe { rdma_create_event_channel() };
        if ptr.is_null() {
            let e = VerbsError::last("rdma_create_event_channel");
            return Err(match e.errno() {
                Some(Errno::ENODEV | Errno::ENOENT | Errno::ENOSYS) => VerbsError::Call {
                    verb: "rdma_create_event_channel",
                    errno: e.errno().unwrap_or(Errno::ENODEV),
                    hint: Some(
                        "there is no /dev/infiniband/rdma_cm: load the rdma_ucm module \
                         (modprobe rdma_ucm) on a kernel with RDMA, or use scripts/softroce-vm"
                            .into(),
                    ),
                },
                _ => e,
            });
        }
        let inner = Arc::new(EventChannelInner { ptr });
        // SAFETY: the fd belongs to the live channel for the whole borrow.
        let fd = unsafe { BorrowedFd::borrow_raw((*ptr).fd) };
        set_nonblocking(fd, "fcntl(rdma_cm channel, O_NONBLOCK)")?;
        Ok(EventChannel { inner })
    }

    /// The channel's file descriptor (for narration, or to add to an epoll set).
    pub fn fd(&self) -> i32 {
        // SAFETY: ptr is a live channel.
        unsafe { (*self.inner.ptr).fd }
    }

    /// Takes the next event (`rdma_get_cm_event(3)`), copies what it carries and acknowledges
    /// it at once (`rdma_ack_cm_event(3)`: `rdma_destroy_id` waits for every event of its id to
    /// be acked, so holding one would risk a hang). Waits at most `timeout`.
    pub fn get_event(&self, timeout: Duration) -> Result<CmEvent> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(event) = self.try_get_event()? {
                return Ok(event);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || !self.poll_readable(left)? {
                return Err(VerbsError::Timeout {
                    what: "an rdma_cm event".into(),
                    after: timeout,
                });
            }
        }
    }

    /// The next event if one is queued, without waiting (the fd is non-blocking).
    pub fn try_get_event(&self) -> Result<Option<CmEvent>> {
        let mut raw: *mut rdma_cm_event = std::ptr::null_mut();
        // SAFETY: the channel is live; `raw` is a valid out-pointer. The fd is non-blocking,
        // so this returns EAGAIN instead of sleeping when nothing is queued.
        let ret = unsafe { rdma_get_cm_event(self.inner.ptr, &mut raw) };
        if ret != 0 {
            return match Errno::last() {
                Errno::EAGAIN | Errno::EINTR => Ok(None),
                e => Err(VerbsError::call("rdma_get_cm_event", e)),
            };
        }
        // SAFETY: librdmacm handed us a valid event; it stays valid until acked below.
        let event = unsafe { self.copy_event(&*raw) };
        // SAFETY: `raw` came from rdma_get_cm_event and is acked exactly once.
        unsafe { rdma_ack_cm_event(raw) };
        Ok(Some(event))
    }

    fn poll_readable(&self, timeout: Duration) -> Result<bool> {
        // SAFETY: the fd is owned by the live channel for the whole borrow.
        let fd = unsafe { BorrowedFd::borrow_raw(self.fd()) };
        wait_readable(fd, timeout, "poll(rdma_cm channel)")
    }

    /// # Safety
    /// `raw` must be an event from `rdma_get_cm_event` on this channel, not yet acked.
    unsafe fn copy_event(&self, raw: &rdma_cm_event) -> CmEvent {
        let kind = CmEventKind::from_raw(raw.event);
        // SAFETY: for every event of a connected (TCP port space) id, `param.conn` is the
        // member librdmacm filled; its private data is valid until the ack.
        let conn = unsafe { raw.param.conn };
        let private_data = if conn.private_data.is_null() || conn.private_data_len == 0 {
            Vec::new()
        } else {
            // SAFETY: librdmacm says `private_data_len` bytes are readable there until the ack.
            unsafe {
                std::slice::from_raw_parts(
                    conn.private_data as *const u8,
                    conn.private_data_len as usize,
                )
            }
            .to_vec()
        };
        // A connect request creates a new id for the connection; it is ours to destroy.
        let new_id = (kind == CmEventKind::ConnectRequest).then(|| CmId {
            ptr: raw.id,
            qp: None,
            _channel: self.inner.clone(),
        });
        CmEvent {
            kind,
            status: raw.status,
            id: raw.id as usize,
            private_data,
            param: ConnParam {
                private_data: Vec::new(),
                responder_resources: conn.responder_resources,
                initiator_depth: conn.initiator_depth,
                flow_control: conn.flow_control,
                retry_count: conn.retry_count,
                rnr_retry_count: conn.rnr_retry_count,
                srq: conn.srq != 0,
                qp_num: conn.qp_num,
            },
            new_id,
        }
    }
}

// ---- events -----------------------------------------------------------------------------------

/// The kind of an rdma_cm event (`enum rdma_cm_event_type`), printed as the C name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmEventKind {
    AddrResolved,
    AddrError,
    RouteResolved,
    RouteError,
    ConnectRequest,
    ConnectResponse,
    ConnectError,
    Unreachable,
    Rejected,
    Established,
    Disconnected,
    DeviceRemoval,
    MulticastJoin,
    MulticastError,
    AddrChange,
    TimewaitExit,
    Other(u32),
}

impl CmEventKind {
    fn from_raw(t: ev::Type) -> CmEventKind {
        match t {
            ev::RDMA_CM_EVENT_ADDR_RESOLVED => CmEventKind::AddrResolved,
            ev::RDMA_CM_EVENT_ADDR_ERROR => CmEventKind::AddrError,
            ev::RDMA_CM_EVENT_ROUTE_RESOLVED => CmEventKind::RouteResolved,
            ev::RDMA_CM_EVENT_ROUTE_ERROR => CmEventKind::RouteError,
            ev::RDMA_CM_EVENT_CONNECT_REQUEST => CmEventKind::ConnectRequest,
            ev::RDMA_CM_EVENT_CONNECT_RESPONSE => CmEventKind::ConnectResponse,
            ev::RDMA_CM_EVENT_CONNECT_ERROR => CmEventKind::ConnectError,
            ev::RDMA_CM_EVENT_UNREACHABLE => CmEventKind::Unreachable,
            ev::RDMA_CM_EVENT_REJECTED => CmEventKind::Rejected,
            ev::RDMA_CM_EVENT_ESTABLISHED => CmEventKind::Established,
            ev::RDMA_CM_EVENT_DISCONNECTED => CmEventKind::Disconnected,
            ev::RDMA_CM_EVENT_DEVICE_REMOVAL => CmEventKind::DeviceRemoval,
            ev::RDMA_CM_EVENT_MULTICAST_JOIN => CmEventKind::MulticastJoin,
            ev::RDMA_CM_EVENT_MULTICAST_ERROR => CmEventKind::MulticastError,
            ev::RDMA_CM_EVENT_ADDR_CHANGE => CmEventKind::AddrChange,
            ev::RDMA_CM_EVENT_TIMEWAIT_EXIT => CmEventKind::TimewaitExit,
            other => CmEventKind::Other(other),
        }
    }

    /// The C name, e.g. `RDMA_CM_EVENT_ESTABLISHED`.
    pub fn name(self) -> String {
        let s = match self {
            CmEventKind::AddrResolved => "ADDR_RESOLVED",
            CmEventKind::AddrError => "ADDR_ERROR",
            CmEventKind::RouteResolved => "ROUTE_RESOLVED",
            CmEventKind::RouteError => "ROUTE_ERROR",
            CmEventKind::ConnectRequest => "CONNECT_REQUEST",
            CmEventKind::ConnectResponse => "CONNECT_RESPONSE",
            CmEventKind::ConnectError => "CONNECT_ERROR",
            CmEventKind::Unreachable => "UNREACHABLE",
            CmEventKind::Rejected => "REJECTED",
            CmEventKind::Established => "ESTABLISHED",
            CmEventKind::Disconnected => "DISCONNECTED",
            CmEventKind::DeviceRemoval => "DEVICE_REMOVAL",
            CmEventKind::MulticastJoin => "MULTICAST_JOIN",
            CmEventKind::MulticastError => "MULTICAST_ERROR",
            CmEventKind::AddrChange => "ADDR_CHANGE",
            CmEventKind::TimewaitExit => "TIMEWAIT_EXIT",
            CmEventKind::Other(n) => return format!("RDMA_CM_EVENT_{n} (unknown)"),
        };
        format!("RDMA_CM_EVENT_{s}")
    }

    /// What usually causes this event when it ends a connection attempt, and what to do.
    fn hint(self, status: i32) -> String {
        match self {
            CmEventKind::Rejected => match status {
                // IB CM reject reasons (IBTA 12.6.7.2), which rdma_cm passes on for IB and RoCE.
                8 => "the peer's connection manager answered 'invalid service ID' (IB CM reject \
                      reason 8): nothing listens on that port; start the server first, or check \
                      the port (-p)"
                    .into(),
                28 => "the server's program refused the connection (rdma_reject, IB CM reject \
                       reason 28, consumer-defined); its private data may say why"
                    .into(),
                _ => format!(
                    "the peer rejected the connection (IB CM reject reason {status}); check that \
                     the server runs and listens on that port"
                ),
            },
            CmEventKind::Unreachable => format!(
                "no answer from the peer's connection manager (status {status}): the address \
                 is not an RDMA device's, or the peer is down"
            ),
            CmEventKind::AddrError if status == -(Errno::ETIMEDOUT as i32) => format!(
                "no neighbour answered for the address (status {status}: ARP/ND timed out): \
                 nothing has that address, or it is down; check the server's address"
            ),
            CmEventKind::AddrError => format!(
                "the address could not be resolved to a local RDMA device (status {status}: {}): \
                 check that the address is on an interface with an RDMA device (rdma link)",
                Errno::from_raw(-status).desc()
            ),
            CmEventKind::RouteError => format!(
                "no route to the peer (status {status}: {})",
                Errno::from_raw(-status).desc()
            ),
            CmEventKind::ConnectError => {
                format!("the connection failed while being set up (status {status})")
            }
            CmEventKind::DeviceRemoval => "the RDMA device was removed".into(),
            CmEventKind::Disconnected => "the peer disconnected".into(),
            _ => format!("status {status}"),
        }
    }
}

impl std::fmt::Display for CmEventKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name())
    }
}

/// One event, copied out of the `struct rdma_cm_event` before it was acknowledged.
pub struct CmEvent {
    pub kind: CmEventKind,
    /// 0, or a negative errno, or (for REJECTED) the IB CM reject reason.
    pub status: i32,
    /// Which id the event is for (compare with [`CmId::handle`]).
    pub id: usize,
    /// The peer's private data (REQ, REP or REJ). On IB/RoCE a REQ's always has
    /// [`MAX_CONNECT_PRIVATE_DATA`] bytes, zero-filled past what the peer sent.
    pub private_data: Vec<u8>,
    /// The connection parameters the event carries (`event->param.conn`), from *our* side:
    /// on a CONNECT_REQUEST, `responder_resources` is the client's initiator depth.
    pub param: ConnParam,
    /// On a CONNECT_REQUEST: the new id of the connection, which the listener must accept or
    /// reject.
    pub new_id: Option<CmId>,
}

impl CmEvent {
    /// Ok if this is the `want`ed event; otherwise an error naming the event that came and
    /// what usually causes it (`verb` is the call whose answer this was).
    pub fn expect(self, want: CmEventKind, verb: &'static str) -> Result<CmEvent> {
        if self.kind == want {
            return Ok(self);
        }
        let errno = match self.kind {
            CmEventKind::Rejected => Errno::ECONNREFUSED,
            CmEventKind::Unreachable => Errno::EHOSTUNREACH,
            CmEventKind::AddrError | CmEventKind::RouteError if self.status < 0 => {
                Errno::from_raw(-self.status)
            }
            CmEventKind::Disconnected => Errno::ECONNRESET,
            _ => Errno::EPROTO,
        };
        Err(VerbsError::Call {
            verb,
            errno,
            hint: Some(format!(
                "expected {want}, got {}: {}",
                self.kind,
                self.kind.hint(self.status)
            )),
        })
    }
}

// ---- connection parameters --------------------------------------------------------------------

/// `struct rdma_conn_param`: what `rdma_connect(3)` and `rdma_accept(3)` send, and what a
/// CONNECT_REQUEST or ESTABLISHED event reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConnParam {
    /// Sent in the REQ (≤ 56 bytes) or REP (≤ 196 bytes).
    pub private_data: Vec<u8>,
    /// RDMA Reads/Atomics the peer may have outstanding against us (our responder side;
    /// becomes the QP's `max_dest_rd_atomic`).
    pub responder_resources: u8,
    /// RDMA Reads/Atomics we may have outstanding towards the peer (becomes `max_rd_atomic`).
    pub initiator_depth: u8,
    pub flow_control: u8,
    /// Transport retries after an ack timeout (0–7).
    pub retry_count: u8,
    /// Retries after receiver-not-ready (7 = forever).
    pub rnr_retry_count: u8,
    pub srq: bool,
    /// Filled by librdmacm from the id's QP; set it only for a QP the id does not own.
    pub qp_num: u32,
}

impl ConnParam {
    fn to_raw(&self, max: usize) -> Result<rdma_conn_param> {
        if self.private_data.len() > max {
            return Err(VerbsError::InvalidArgument(format!(
                "{} bytes of private data; at most {max} fit",
                self.private_data.len()
            )));
        }
        Ok(rdma_conn_param {
            private_data: if self.private_data.is_empty() {
                std::ptr::null()
            } else {
                self.private_data.as_ptr().cast()
            },
            private_data_len: self.private_data.len() as u8,
            responder_resources: self.responder_resources,
            initiator_depth: self.initiator_depth,
            flow_control: self.flow_control,
            retry_count: self.retry_count,
            rnr_retry_count: self.rnr_retry_count,
            srq: self.srq as u8,
            qp_num: self.qp_num,
        })
    }
}

// ---- the id -----------------------------------------------------------------------------------

/// The port space of an id: `RDMA_PS_TCP` gives reliable connected (RC) QPs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortSpace {
    Tcp,
}

/// An `rdma_cm_id`: resolves addresses, connects or listens, and owns the connection's QP.
pub struct CmId {
    ptr: *mut rdma_cm_id,
    /// The QP attached to the id (`id->qp`); destroyed before the id.
    qp: Option<Qp>,
    _channel: Arc<EventChannelInner>,
}

// SAFETY: librdmacm ids may be used from any thread; we hold no other shared state.
unsafe impl Send for CmId {}
// SAFETY: as above.
unsafe impl Sync for CmId {}

impl Drop for CmId {
    fn drop(&mut self) {
        if let Some(qp) = self.qp.take() {
            // SAFETY: the id is live; detach the QP so librdmacm never touches it again.
            unsafe { (*self.ptr).qp = std::ptr::null_mut() };
            drop(qp);
        }
        // SAFETY: ptr is our id; every event we took for it was acked in get_event. The channel
        // outlives it through `_channel`.
        unsafe { rdma_destroy_id(self.ptr) };
    }
}

/// librdmacm's device contexts, each wrapped once: they are opened by librdmacm and closed by
/// it at exit, so the wrappers live in a static and are never dropped (never closed by us).
static CM_CONTEXTS: Mutex<Vec<Context>> = Mutex::new(Vec::new());

fn to_sockaddr(addr: SocketAddr) -> SockaddrStorage {
    SockaddrStorage::from(addr)
}

fn from_sockaddr(sa: *const libc::sockaddr) -> Option<SocketAddr> {
    // SAFETY: `sa` points into a live rdma_cm_id's route, a sockaddr_storage-sized union.
    let s = unsafe { SockaddrStorage::from_raw(sa, None) }?;
    if let Some(v4) = s.as_sockaddr_in() {
        return Some(SocketAddr::V4((*v4).into()));
    }
    s.as_sockaddr_in6().map(|v6| SocketAddr::V6((*v6).into()))
}

impl CmId {
    /// A new id on `channel` (`rdma_create_id(3)`); its events arrive there.
    pub fn create(channel: &EventChannel, ps: PortSpace) -> Result<CmId> {
        let ps = match ps {
            PortSpace::Tcp => rdma_port_space::RDMA_PS_TCP,
        };
        let mut ptr: *mut rdma_cm_id = std::ptr::null_mut();
        // SAFETY: the channel is live; `ptr` is a valid out-pointer; no user context.
        let ret = unsafe { rdma_create_id(channel.inner.ptr, &mut ptr, std::ptr::null_mut(), ps) };
        if ret != 0 {
            return Err(VerbsError::from_ret("rdma_create_id", ret));
        }
        Ok(CmId {
            ptr,
            qp: None,
            _channel: channel.inner.clone(),
        })
    }

    /// An opaque value that identifies this id in events ([`CmEvent::id`]).
    pub fn handle(&self) -> usize {
        self.ptr as usize
    }

    /// Binds to a local address and port (`rdma_bind_addr(3)`); `0.0.0.0` binds to no device
    /// yet, a device's address binds to that device.
    pub fn bind_addr(&self, addr: SocketAddr) -> Result<()> {
        let sa = to_sockaddr(addr);
        // SAFETY: the id is live; librdmacm copies the address.
        let ret = unsafe { rdma_bind_addr(self.ptr, sa.as_ptr() as *mut _) };
        if ret != 0 {
            let e = VerbsError::last("rdma_bind_addr");
            if e.errno() == Some(Errno::EADDRINUSE) {
                return Err(VerbsError::Call {
                    verb: "rdma_bind_addr",
                    errno: Errno::EADDRINUSE,
                    hint: Some(format!(
                        "port {} is taken by another rdma_cm listener; pick another with -p",
                        addr.port()
                    )),
                });
            }
            return Err(e);
        }
        Ok(())
    }

    /// Starts listening (`rdma_listen(3)`); CONNECT_REQUEST events follow on the channel.
    pub fn listen(&self, backlog: i32) -> Result<()> {
        // SAFETY: the id is live and bound.
        let ret = unsafe { rdma_listen(self.ptr, backlog) };
        if ret != 0 {
            return Err(VerbsError::last("rdma_listen"));
        }
        Ok(())
    }

    /// Starts resolving `dst` to a local device and the peer's hardware address
    /// (`rdma_resolve_addr(3)`); ADDR_RESOLVED or ADDR_ERROR follows within `timeout`.
    pub fn resolve_addr(
        &self,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout: Duration,
    ) -> Result<()> {
        let src = src.map(to_sockaddr);
        let dst = to_sockaddr(dst);
        let src_ptr = src
            .as_ref()
            .map_or(std::ptr::null_mut(), |s| s.as_ptr() as *mut _);
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: the id is live; both addresses are valid for the call (copied by librdmacm).
        let ret = unsafe { rdma_resolve_addr(self.ptr, src_ptr, dst.as_ptr() as *mut _, ms) };
        if ret != 0 {
            let e = VerbsError::last("rdma_resolve_addr");
            return Err(match e.errno() {
                Some(errno @ (Errno::ENETUNREACH | Errno::EADDRNOTAVAIL | Errno::ENODEV)) => {
                    VerbsError::Call {
                        verb: "rdma_resolve_addr",
                        errno,
                        hint: Some(format!(
                            "{dst} is not reachable through an RDMA device: give the server's \
                             address on a network with one (`rdma link show` lists each device \
                             and its netdev)"
                        )),
                    }
                }
                _ => e,
            });
        }
        Ok(())
    }

    /// Starts resolving the path to the peer (`rdma_resolve_route(3)`); ROUTE_RESOLVED or
    /// ROUTE_ERROR follows within `timeout`.
    pub fn resolve_route(&self, timeout: Duration) -> Result<()> {
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: the id is live and its address resolved.
        let ret = unsafe { rdma_resolve_route(self.ptr, ms) };
        if ret != 0 {
            return Err(VerbsError::last("rdma_resolve_route"));
        }
        Ok(())
    }

    /// The device context the id is bound to (`id->verbs`), once an address is resolved or
    /// bound to a device (always, for an id from a CONNECT_REQUEST).
    pub fn context(&self) -> Option<Context> {
        // SAFETY: the id is live.
        let verbs: *mut ibv_context = unsafe { (*self.ptr).verbs };
        if verbs.is_null() {
            return None;
        }
        let mut all = CM_CONTEXTS.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = all.iter().find(|c| c.inner.ptr == verbs) {
            return Some(c.clone());
        }
        // SAFETY: `verbs` is an open context of librdmacm's; its device pointer is valid and
        // the name is a NUL-terminated string owned by libibverbs.
        let name = unsafe { CStr::from_ptr(ibv_get_device_name((*verbs).device)) }
            .to_string_lossy()
            .into_owned();
        let ctx = Context {
            inner: Arc::new(ContextInner { ptr: verbs, name }),
        };
        all.push(ctx.clone());
        Some(ctx)
    }

    /// The device port the id is bound to (`id->port_num`, from 1; 0 before binding).
    pub fn port_num(&self) -> u8 {
        // SAFETY: the id is live.
        unsafe { (*self.ptr).port_num }
    }

    /// Our address (`rdma_get_local_addr(3)`), once bound or resolved.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        // SAFETY: the id is live; the union starts with a sockaddr for either family.
        from_sockaddr(unsafe { &(*self.ptr).route.addr.src_addr_union.src_addr })
    }

    /// The peer's address (`rdma_get_peer_addr(3)`), once resolved or connected.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        // SAFETY: as above.
        from_sockaddr(unsafe { &(*self.ptr).route.addr.dst_addr_union.dst_addr })
    }

    /// Creates a QP on `pd` and attaches it to the id, in INIT, as `rdma_create_qp(3)` does:
    /// librdmacm then moves it to RTR and RTS during connect/accept, with the path, the peer's
    /// QPN and PSN, and the read/atomic depths of the [`ConnParam`]s. The PD must come from
    /// [`CmId::context`]. The id owns the QP from now on ([`CmId::qp`]).
    pub fn create_qp(&mut self, pd: &Pd, attr: &QpInitAttr<'_>) -> Result<&Qp> {
        if self.qp.is_some() {
            return Err(VerbsError::InvalidArgument(
                "this rdma_cm_id already has a QP".into(),
            ));
        }
        // SAFETY: the id is live.
        let verbs = unsafe { (*self.ptr).verbs };
        if verbs.is_null() || pd.inner.ctx.ptr != verbs {
            return Err(VerbsError::InvalidArgument(
                "the PD must be allocated on the rdma_cm_id's own device context \
                 (CmId::context), after the address is resolved"
                    .into(),
            ));
        }
        let qp = pd.create_qp(attr)?;
        // SAFETY: plain C data; zero is valid for every field.
        let mut qattr: ibv_qp_attr = unsafe { std::mem::zeroed() };
        qattr.qp_state = ibv_qp_state::IBV_QPS_INIT;
        let mut mask: i32 = 0;
        // SAFETY: the id is live and bound to a device; both out-pointers are valid.
        let ret = unsafe { rdma_init_qp_attr(self.ptr, &mut qattr, &mut mask) };
        if ret != 0 {
            return Err(VerbsError::last("rdma_init_qp_attr(INIT)"));
        }
        // SAFETY: the QP is live; rdma_init_qp_attr filled every attribute named in mask.
        let ret = unsafe { ibv_modify_qp(qp.as_ptr(), &mut qattr, mask) };
        if ret != 0 {
            return Err(VerbsError::from_ret("ibv_modify_qp(INIT)", ret));
        }
        // SAFETY: the id is live; the QP outlives the attachment (Drop detaches it first).
        unsafe { (*self.ptr).qp = qp.as_ptr() };
        Ok(self.qp.insert(qp))
    }

    /// Moves a QP that the id does *not* own to `state` (INIT, RTR or RTS) with the attributes
    /// the connection manager computes for this connection (`rdma_init_qp_attr(3)`: the port,
    /// P_Key, the path and the peer's QPN and PSN from the REQ/REP, the retry counts of the
    /// [`ConnParam`]s), changed by `o`, then `ibv_modify_qp(3)`. This is how a QP created on
    /// the application's own context joins an rdma_cm connection: the connect or accept names
    /// it by [`ConnParam::qp_num`]; the active side calls this for RTR and RTS on
    /// CONNECT_RESPONSE, then [`CmId::establish`]; the passive side before [`CmId::accept`].
    /// The QP must be on the same device as the id (compare [`CmId::device_name`]).
    pub fn modify_qp(&self, qp: &Qp, state: QpState, o: &CmQpOverrides) -> Result<()> {
        let (raw_state, init_verb, verb) = match state {
            QpState::Init => (
                ibv_qp_state::IBV_QPS_INIT,
                "rdma_init_qp_attr(INIT)",
                "ibv_modify_qp(INIT, rdma_cm)",
            ),
            QpState::Rtr => (
                ibv_qp_state::IBV_QPS_RTR,
                "rdma_init_qp_attr(RTR)",
                "ibv_modify_qp(RTR, rdma_cm)",
            ),
            QpState::Rts => (
                ibv_qp_state::IBV_QPS_RTS,
                "rdma_init_qp_attr(RTS)",
                "ibv_modify_qp(RTS, rdma_cm)",
            ),
            other => {
                return Err(VerbsError::InvalidArgument(format!(
                    "rdma_cm computes the attributes of INIT, RTR and RTS, not {other}"
                )))
            }
        };
        // SAFETY: plain C data; zero is valid for every field.
        let mut attr: ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.qp_state = raw_state;
        let mut mask: i32 = 0;
        // SAFETY: the id is live and bound to a device; both out-pointers are valid.
        let ret = unsafe { rdma_init_qp_attr(self.ptr, &mut attr, &mut mask) };
        if ret != 0 {
            return Err(VerbsError::last(init_verb));
        }
        let has = |bit: ibv_qp_attr_mask| mask & bit.0 as i32 != 0;
        if has(ibv_qp_attr_mask::IBV_QP_ACCESS_FLAGS) {
            if let Some(a) = o.access {
                attr.qp_access_flags = a.0;
            }
        }
        if has(ibv_qp_attr_mask::IBV_QP_PATH_MTU) {
            if let Some(m) = o.path_mtu {
                attr.path_mtu = m.to_ibv();
            }
        }
        if has(ibv_qp_attr_mask::IBV_QP_AV) {
            if let Some(sl) = o.sl {
                attr.ah_attr.sl = sl;
            }
            if attr.ah_attr.is_global != 0 {
                if let Some(t) = o.traffic_class {
                    attr.ah_attr.grh.traffic_class = t;
                }
                if let Some(f) = o.flow_label {
                    attr.ah_attr.grh.flow_label = f;
                }
            }
        }
        if has(ibv_qp_attr_mask::IBV_QP_MAX_DEST_RD_ATOMIC) {
            if let Some(n) = o.max_dest_rd_atomic {
                attr.max_dest_rd_atomic = n;
            }
        }
        if has(ibv_qp_attr_mask::IBV_QP_TIMEOUT) {
            if let Some(t) = o.timeout {
                attr.timeout = t;
            }
        }
        if has(ibv_qp_attr_mask::IBV_QP_MAX_QP_RD_ATOMIC) {
            if let Some(n) = o.max_rd_atomic {
                attr.max_rd_atomic = n;
            }
        }
        // SAFETY: the QP is live; rdma_init_qp_attr filled every attribute named in mask.
        let ret = unsafe { ibv_modify_qp(qp.as_ptr(), &mut attr, mask) };
        if ret != 0 {
            return Err(VerbsError::from_ret(verb, ret));
        }
        Ok(())
    }

    /// Completes an active connection whose QP the id does not own (`rdma_establish(3)`):
    /// sends the RTU after the QP was moved to RTR and RTS on CONNECT_RESPONSE; the passive
    /// side then sees ESTABLISHED.
    pub fn establish(&self) -> Result<()> {
        // SAFETY: the id is live and got CONNECT_RESPONSE.
        let ret = unsafe { rdma_establish(self.ptr) };
        if ret != 0 {
            return Err(VerbsError::last("rdma_establish"));
        }
        Ok(())
    }

    /// Sets the type of service of the connection (`rdma_set_option(3)`,
    /// `RDMA_OPTION_ID_TOS`), before the route is resolved: on RoCE it becomes the GRH's
    /// traffic class.
    pub fn set_tos(&self, tos: u8) -> Result<()> {
        let mut v = tos;
        // SAFETY: the id is live; the option value is one byte that lives across the call.
        let ret = unsafe {
            rdma_set_option(
                self.ptr,
                RDMA_OPTION_ID,
                RDMA_OPTION_ID_TOS,
                (&mut v as *mut u8).cast(),
                1,
            )
        };
        if ret != 0 {
            return Err(VerbsError::last("rdma_set_option(RDMA_OPTION_ID_TOS)"));
        }
        Ok(())
    }

    /// The name of the device the id is bound to, once an address is resolved or bound to a
    /// device (or the id came from a CONNECT_REQUEST).
    pub fn device_name(&self) -> Option<String> {
        self.context().map(|c| c.name().to_string())
    }

    /// The QP attached with [`CmId::create_qp`].
    pub fn qp(&self) -> Option<&Qp> {
        self.qp.as_ref()
    }

    /// Sends the connect request (`rdma_connect(3)`); ESTABLISHED (or REJECTED, UNREACHABLE,
    /// CONNECT_ERROR) follows. Private data: at most [`MAX_CONNECT_PRIVATE_DATA`] bytes.
    pub fn connect(&self, param: &ConnParam) -> Result<()> {
        let mut raw = param.to_raw(MAX_CONNECT_PRIVATE_DATA)?;
        // SAFETY: the id is live with its route resolved; `raw` and its private data live
        // across the call (librdmacm copies them).
        let ret = unsafe { rdma_connect(self.ptr, &mut raw) };
        if ret != 0 {
            return Err(VerbsError::last("rdma_connect"));
        }
        Ok(())
    }

    /// Accepts a connect request on an id from a CONNECT_REQUEST (`rdma_accept(3)`): moves the
    /// QP to RTR and RTS and sends the REP; ESTABLISHED follows when the client's RTU arrives.
    /// Private data: at most [`MAX_ACCEPT_PRIVATE_DATA`] bytes.
    pub fn accept(&self, param: &ConnParam) -> Result<()> {
        let mut raw = param.to_raw(MAX_ACCEPT_PRIVATE_DATA)?;
        // SAFETY: the id is live; `raw` and its private data live across the call.
        let ret = unsafe { rdma_accept(self.ptr, &mut raw) };
        if ret != 0 {
            return Err(VerbsError::last("rdma_accept"));
        }
        Ok(())
    }

    /// Refuses a connect request (`rdma_reject(3)`); the client sees REJECTED with this data.
    pub fn reject(&self, private_data: &[u8]) -> Result<()> {
        if private_data.len() > MAX_ACCEPT_PRIVATE_DATA {
            return Err(VerbsError::InvalidArgument(format!(
                "{} bytes of reject private data; at most {MAX_ACCEPT_PRIVATE_DATA} fit",
                private_data.len()
            )));
        }
        // SAFETY: the id is live; the data lives across the call.
        let ret = unsafe {
            rdma_reject(
                self.ptr,
                private_data.as_ptr().cast(),
                private_data.len() as u8,
            )
        };
        if ret != 0 {
            return Err(VerbsError::last("rdma_reject"));
        }
        Ok(())
    }

    /// Disconnects (`rdma_disconnect(3)`): the QP goes to the error state (outstanding work
    /// is flushed) and both sides get DISCONNECTED.
    pub fn disconnect(&self) -> Result<()> {
        // SAFETY: the id is live.
        let ret = unsafe { rdma_disconnect(self.ptr) };
        if ret != 0 {
            return Err(VerbsError::last("rdma_disconnect"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_names_match_the_c_enum() {
        assert_eq!(
            CmEventKind::from_raw(ev::RDMA_CM_EVENT_REJECTED).name(),
            "RDMA_CM_EVENT_REJECTED"
        );
        assert_eq!(
            CmEventKind::from_raw(ev::RDMA_CM_EVENT_ESTABLISHED),
            CmEventKind::Established
        );
        assert_eq!(CmEventKind::from_raw(99), CmEventKind::Other(99));
    }

    #[test]
    fn private_data_over_the_limit_is_refused_before_any_call() {
        let p = ConnParam {
            private_data: vec![0; MAX_CONNECT_PRIVATE_DATA + 1],
            ..ConnParam::default()
        };
        let e = p
            .to_raw(MAX_CONNECT_PRIVATE_DATA)
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("57 bytes of private data; at most 56 fit"),
            "{e}"
        );
        assert!(p.to_raw(MAX_ACCEPT_PRIVATE_DATA).is_ok());
    }

    #[test]
    fn an_unexpected_event_names_itself_and_its_cause() {
        let ev = CmEvent {
            kind: CmEventKind::Rejected,
            status: 8,
            id: 0,
            private_data: vec![],
            param: ConnParam::default(),
            new_id: None,
        };
        let e = ev
            .expect(CmEventKind::Established, "rdma_connect")
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("expected RDMA_CM_EVENT_ESTABLISHED, got RDMA_CM_EVENT_REJECTED"));
        assert!(e.contains("invalid service ID"), "{e}");
        assert!(e.contains("nothing listens on that port"), "{e}");
    }

    #[test]
    fn socket_addresses_round_trip_through_sockaddr() {
        for a in ["192.168.77.1:7174", "[fe80::1]:18515"] {
            let a: SocketAddr = a.parse().unwrap();
            let s = to_sockaddr(a);
            assert_eq!(from_sockaddr(s.as_ptr()), Some(a));
        }
    }
}
