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
//! librdmacm opens every RDMA device itself; a `cm_id` bound to a device names that context
//! (`id->verbs`), and librdmacm counts the ids bound to each device: it closes a device's
//! context once the device is removed and no id bound to it is left. [`CmId::context`] lends
//! that context as a *borrowed* [`Context`]: it holds the id (so librdmacm keeps the device
//! open) for as long as it or anything built on it lives, and never closes the context itself.
//! PDs, CQs and QPs for a connection are so created on the very context the CM uses, as
//! `rdma_create_qp(3)` needs; a CmId dropped before them is destroyed after them.

use std::io;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::os::fd::BorrowedFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::libc;
use nix::sys::socket::{SockaddrLike, SockaddrStorage};
use rdma_sys::{
    ibv_context, ibv_modify_qp, ibv_qp_attr, ibv_qp_attr_mask, ibv_qp_state, rdma_accept,
    rdma_ack_cm_event, rdma_bind_addr, rdma_cm_event, rdma_cm_event_type as ev, rdma_cm_id,
    rdma_conn_param, rdma_connect, rdma_create_event_channel, rdma_create_id,
    rdma_destroy_event_channel, rdma_destroy_id, rdma_disconnect, rdma_establish,
    rdma_event_channel, rdma_get_cm_event, rdma_init_qp_attr, rdma_listen, rdma_port_space,
    rdma_reject, rdma_resolve_addr, rdma_resolve_route, rdma_set_option,
};

use super::attrs::{AccessFlags, Mtu, QpState};
use super::context::{device_name, Context, ContextInner};
use super::error::{Result, VerbsError};
use super::fd::{set_nonblocking, wait_readable};
use super::handle::{verbs_object, Handle};
use super::pd::Pd;
use super::qp::{Qp, QpInitAttr};

mod channel;
mod event;

pub use channel::EventChannel;
pub(crate) use channel::EventChannelInner;
pub use event::{CmEvent, CmEventKind, ConnParam};

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

// ---- the id -----------------------------------------------------------------------------------

/// The port space of an id: `RDMA_PS_TCP` gives reliable connected (RC) QPs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortSpace {
    Tcp,
}

/// An `rdma_cm_id`: resolves addresses, connects or listens, and owns the connection's QP.
pub struct CmId {
    inner: Arc<CmIdInner>,
    /// The QP attached to the id (`id->qp`); destroyed before the id.
    qp: Option<Qp>,
}

/// The owner of a `struct rdma_cm_id`: destroyed (`rdma_destroy_id(3)`) when the last holder
/// lets go — its [`CmId`], and every context librdmacm lent through it ([`CmId::context`]),
/// whose device librdmacm keeps open for as long as an id bound to it exists.
pub(crate) struct CmIdInner {
    ptr: *mut rdma_cm_id,
    _channel: Arc<EventChannelInner>,
}

// SAFETY: librdmacm ids may be used from any thread; we hold no other shared state.
unsafe impl Send for CmIdInner {}
// SAFETY: as above.
unsafe impl Sync for CmIdInner {}

impl Drop for CmIdInner {
    fn drop(&mut self) {
        // SAFETY: ptr is our id; every event we took for it was acked in get_event; its QP, if
        // any, was detached and destroyed by its CmId. The channel outlives it through
        // `_channel`.
        unsafe { rdma_destroy_id(self.ptr) };
    }
}

impl Drop for CmId {
    fn drop(&mut self) {
        if let Some(qp) = self.qp.take() {
            // SAFETY: the id is live; detach the QP so librdmacm never touches it again.
            unsafe { (*self.inner.ptr).qp = std::ptr::null_mut() };
            drop(qp);
        }
        // `inner` goes next: the id is destroyed now, or when the last context lent through
        // it (and whatever was built on that) is gone.
    }
}

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
    /// Takes the id `ptr` on `channel`, which only it destroys.
    pub(crate) fn own(ptr: *mut rdma_cm_id, channel: Arc<EventChannelInner>) -> CmId {
        CmId {
            inner: Arc::new(CmIdInner {
                ptr,
                _channel: channel,
            }),
            qp: None,
        }
    }

    /// A new id on `channel` (`rdma_create_id(3)`); its events arrive there.
    pub fn create(channel: &EventChannel, ps: PortSpace) -> Result<CmId> {
        let ps = match ps {
            PortSpace::Tcp => rdma_port_space::RDMA_PS_TCP,
        };
        let mut ptr: *mut rdma_cm_id = std::ptr::null_mut();
        // SAFETY: the channel is live; `ptr` is a valid out-pointer; no user context.
        let ret = unsafe { rdma_create_id(channel.inner.ptr, &mut ptr, std::ptr::null_mut(), ps) };
        VerbsError::check_ret("rdma_create_id", ret)?;
        Ok(CmId::own(ptr, channel.inner.clone()))
    }

    /// An opaque value that identifies this id in events ([`CmEvent::id`]).
    pub fn handle(&self) -> usize {
        self.inner.ptr as usize
    }

    /// Binds to a local address and port (`rdma_bind_addr(3)`); `0.0.0.0` binds to no device
    /// yet, a device's address binds to that device.
    pub fn bind_addr(&self, addr: SocketAddr) -> Result<()> {
        let sa = to_sockaddr(addr);
        // SAFETY: the id is live; librdmacm copies the address.
        let ret = unsafe { rdma_bind_addr(self.inner.ptr, sa.as_ptr() as *mut _) };
        if ret != 0 {
            let e = VerbsError::last("rdma_bind_addr");
            return Err(match e.errno().and_then(|errno| bind_hint(addr, errno)) {
                Some(hint) => VerbsError::Call {
                    verb: "rdma_bind_addr",
                    errno: e.errno().unwrap_or(Errno::EIO),
                    hint: Some(hint),
                },
                None => e,
            });
        }
        Ok(())
    }

    /// Starts listening (`rdma_listen(3)`); CONNECT_REQUEST events follow on the channel.
    pub fn listen(&self, backlog: i32) -> Result<()> {
        // SAFETY: the id is live and bound.
        let ret = unsafe { rdma_listen(self.inner.ptr, backlog) };
        VerbsError::check_last("rdma_listen", ret)
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
        let ret = unsafe { rdma_resolve_addr(self.inner.ptr, src_ptr, dst.as_ptr() as *mut _, ms) };
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
        let ret = unsafe { rdma_resolve_route(self.inner.ptr, ms) };
        VerbsError::check_last("rdma_resolve_route", ret)
    }

    /// The device context the id is bound to (`id->verbs`), once an address is resolved or
    /// bound to a device (always, for an id from a CONNECT_REQUEST).
    ///
    /// librdmacm opened that context and closes it itself, so it is *borrowed*: it keeps this
    /// id alive — and with it librdmacm's hold on the device — for as long as the context or
    /// anything built on it (a PD, CQ, MR, QP) lives, and is never closed by us. Dropping the
    /// [`CmId`] first only delays `rdma_destroy_id` until then.
    pub fn context(&self) -> Option<Context> {
        let verbs = self.verbs()?;
        // SAFETY: `verbs` is this id's `id->verbs`, not NULL, and the new context holds the id.
        let inner = unsafe { ContextInner::borrowed(verbs, self.inner.clone()) };
        Some(Context {
            inner: Arc::new(inner),
        })
    }

    /// `id->verbs`: the device context librdmacm bound the id to, if any yet. Once set, it stays
    /// the same for the life of the id.
    fn verbs(&self) -> Option<*mut ibv_context> {
        // SAFETY: the id is live.
        let verbs: *mut ibv_context = unsafe { (*self.inner.ptr).verbs };
        (!verbs.is_null()).then_some(verbs)
    }

    /// The device port the id is bound to (`id->port_num`, from 1; 0 before binding).
    pub fn port_num(&self) -> u8 {
        // SAFETY: the id is live.
        unsafe { (*self.inner.ptr).port_num }
    }

    /// Our address (`rdma_get_local_addr(3)`), once bound or resolved.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        // SAFETY: the id is live; the union starts with a sockaddr for either family.
        from_sockaddr(unsafe { &(*self.inner.ptr).route.addr.src_addr_union.src_addr })
    }

    /// The peer's address (`rdma_get_peer_addr(3)`), once resolved or connected.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        // SAFETY: as above.
        from_sockaddr(unsafe { &(*self.inner.ptr).route.addr.dst_addr_union.dst_addr })
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
        if self.verbs() != Some(pd.inner.parent.ptr) {
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
        let ret = unsafe { rdma_init_qp_attr(self.inner.ptr, &mut qattr, &mut mask) };
        VerbsError::check_last("rdma_init_qp_attr(INIT)", ret)?;
        // SAFETY: the QP is live; rdma_init_qp_attr filled every attribute named in mask.
        let ret = unsafe { ibv_modify_qp(qp.as_ptr(), &mut qattr, mask) };
        VerbsError::check_ret("ibv_modify_qp(INIT)", ret)?;
        // SAFETY: the id is live; the QP outlives the attachment (Drop detaches it first).
        unsafe { (*self.inner.ptr).qp = qp.as_ptr() };
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
        let ret = unsafe { rdma_init_qp_attr(self.inner.ptr, &mut attr, &mut mask) };
        VerbsError::check_last(init_verb, ret)?;
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
        VerbsError::check_ret(verb, ret)
    }

    /// Completes an active connection whose QP the id does not own (`rdma_establish(3)`):
    /// sends the RTU after the QP was moved to RTR and RTS on CONNECT_RESPONSE; the passive
    /// side then sees ESTABLISHED.
    pub fn establish(&self) -> Result<()> {
        // SAFETY: the id is live and got CONNECT_RESPONSE.
        let ret = unsafe { rdma_establish(self.inner.ptr) };
        VerbsError::check_last("rdma_establish", ret)
    }

    /// Sets the type of service of the connection (`rdma_set_option(3)`,
    /// `RDMA_OPTION_ID_TOS`), before the route is resolved: on RoCE it becomes the GRH's
    /// traffic class.
    pub fn set_tos(&self, tos: u8) -> Result<()> {
        let mut v = tos;
        // SAFETY: the id is live; the option value is one byte that lives across the call.
        let ret = unsafe {
            rdma_set_option(
                self.inner.ptr,
                RDMA_OPTION_ID,
                RDMA_OPTION_ID_TOS,
                (&mut v as *mut u8).cast(),
                1,
            )
        };
        VerbsError::check_last("rdma_set_option(RDMA_OPTION_ID_TOS)", ret)
    }

    /// The name of the device the id is bound to, once an address is resolved or bound to a
    /// device (or the id came from a CONNECT_REQUEST).
    pub fn device_name(&self) -> Option<String> {
        // SAFETY: `id->verbs` is open while the id exists.
        self.verbs().map(|verbs| unsafe { device_name(verbs) })
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
        let ret = unsafe { rdma_connect(self.inner.ptr, &mut raw) };
        VerbsError::check_last("rdma_connect", ret)
    }

    /// Accepts a connect request on an id from a CONNECT_REQUEST (`rdma_accept(3)`): moves the
    /// QP to RTR and RTS and sends the REP; ESTABLISHED follows when the client's RTU arrives.
    /// Private data: at most [`MAX_ACCEPT_PRIVATE_DATA`] bytes.
    pub fn accept(&self, param: &ConnParam) -> Result<()> {
        let mut raw = param.to_raw(MAX_ACCEPT_PRIVATE_DATA)?;
        // SAFETY: the id is live; `raw` and its private data live across the call.
        let ret = unsafe { rdma_accept(self.inner.ptr, &mut raw) };
        VerbsError::check_last("rdma_accept", ret)
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
                self.inner.ptr,
                private_data.as_ptr().cast(),
                private_data.len() as u8,
            )
        };
        VerbsError::check_last("rdma_reject", ret)
    }

    /// Disconnects (`rdma_disconnect(3)`): the QP goes to the error state (outstanding work
    /// is flushed) and both sides get DISCONNECTED.
    pub fn disconnect(&self) -> Result<()> {
        // SAFETY: the id is live.
        let ret = unsafe { rdma_disconnect(self.inner.ptr) };
        VerbsError::check_last("rdma_disconnect", ret)
    }
}

/// The address to connect to `host` (an IP address or a host name, looked up with
/// `getaddrinfo(3)`) on rdma_cm port `port`, for a connection leaving from `source` when one is
/// chosen: the first of the host's addresses in the source's family, else its first. A name can
/// list both families, and `localhost` may give `::1` first, which an IPv4-only RDMA device
/// cannot reach. A lookup that fails, or finds no address, is an [`io::Error`].
pub fn resolve(host: &str, port: u16, source: Option<IpAddr>) -> io::Result<SocketAddr> {
    let addrs: Vec<SocketAddr> = (host, port).to_socket_addrs()?.collect();
    prefer_family(&addrs, source).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("'{host}' resolves to no address"),
        )
    })
}

/// Of `addrs`, the first in `source`'s family (any family without a source), else the first.
fn prefer_family(addrs: &[SocketAddr], source: Option<IpAddr>) -> Option<SocketAddr> {
    addrs
        .iter()
        .find(|a| source.map_or(true, |s| s.is_ipv4() == a.is_ipv4()))
        .or(addrs.first())
        .copied()
}

/// What to do about `rdma_bind_addr(addr)` failing with `errno`, where we know. The kernel
/// (`cma_check_port`) refuses a port another id holds with EADDRINUSE when both addresses are
/// the same device address, but with EADDRNOTAVAIL when either is the wildcard — so a second
/// listener on 0.0.0.0 sees "Cannot assign requested address". For a device address,
/// EADDRNOTAVAIL also means that no interface of this host has it (`rdma_translate_ip`).
fn bind_hint(addr: SocketAddr, errno: Errno) -> Option<String> {
    let port = addr.port();
    let taken = format!("port {port} is taken by another rdma_cm listener; pick another with -p");
    match errno {
        Errno::EADDRINUSE => Some(taken),
        Errno::EADDRNOTAVAIL if addr.ip().is_unspecified() => Some(taken),
        Errno::EADDRNOTAVAIL => Some(format!(
            "either {} is not an address of this host (`ip -br addr` lists them), or port {port} \
             is taken by an rdma_cm listener on every address (0.0.0.0); pick another with -p",
            addr.ip()
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_taken_on_the_wildcard_address_is_named_as_taken() {
        let any: SocketAddr = "0.0.0.0:7410".parse().unwrap();
        let any6: SocketAddr = "[::]:7410".parse().unwrap();
        let dev: SocketAddr = "192.168.77.1:7410".parse().unwrap();
        let taken = "port 7410 is taken by another rdma_cm listener; pick another with -p";
        for (addr, errno) in [
            (dev, Errno::EADDRINUSE),
            (any, Errno::EADDRINUSE),
            (any, Errno::EADDRNOTAVAIL),
            (any6, Errno::EADDRNOTAVAIL),
        ] {
            assert_eq!(
                bind_hint(addr, errno).as_deref(),
                Some(taken),
                "{addr} {errno}"
            );
        }
        assert_eq!(
            bind_hint(dev, Errno::EADDRNOTAVAIL).as_deref(),
            Some(
                "either 192.168.77.1 is not an address of this host (`ip -br addr` lists them), \
                 or port 7410 is taken by an rdma_cm listener on every address (0.0.0.0); pick \
                 another with -p"
            )
        );
        assert_eq!(bind_hint(any, Errno::ENODEV), None);
        // As the user reads it.
        let e = VerbsError::Call {
            verb: "rdma_bind_addr",
            errno: Errno::EADDRNOTAVAIL,
            hint: bind_hint(any, Errno::EADDRNOTAVAIL),
        };
        assert_eq!(
            e.to_string(),
            format!(
                "rdma_bind_addr failed: Cannot assign requested address (EADDRNOTAVAIL) — {taken}"
            )
        );
    }

    #[test]
    fn a_host_name_resolves_in_the_sources_family() {
        let both: Vec<SocketAddr> =
            vec!["[::1]:7".parse().unwrap(), "127.0.0.1:7".parse().unwrap()];
        let v4: IpAddr = "10.0.0.1".parse().unwrap();
        let v6: IpAddr = "fe80::1".parse().unwrap();
        assert_eq!(prefer_family(&both, Some(v4)), Some(both[1]));
        assert_eq!(prefer_family(&both, Some(v6)), Some(both[0]));
        assert_eq!(prefer_family(&both, None), Some(both[0]));
        // Only the other family: that address, and rdma_resolve_addr says why it fails.
        assert_eq!(prefer_family(&both[..1], Some(v4)), Some(both[0]));
        assert_eq!(prefer_family(&[], Some(v4)), None);
        assert_eq!(
            resolve("127.0.0.1", 7471, Some(v6)).unwrap(),
            "127.0.0.1:7471".parse::<SocketAddr>().unwrap()
        );
        assert!(resolve("no.such.host.invalid", 1, None).is_err());
    }

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
