//! The connection manager's events (`rdma_get_cm_event(3)`) and the connection parameters of
//! `rdma_connect(3)` / `rdma_accept(3)`.

use super::*;

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
    pub(super) fn from_raw(t: ev::Type) -> CmEventKind {
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

crate::display_by_name!(CmEventKind);

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
    pub(super) fn to_raw(&self, max: usize) -> Result<rdma_conn_param> {
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
