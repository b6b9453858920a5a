//! The event channel (`rdma_create_event_channel(3)`): where the connection manager reports
//! what happened, waited on with a bounded `poll(2)`.

use super::*;
use crate::error::advice;

// ---- the event channel ------------------------------------------------------------------------

/// The owner of a `struct rdma_event_channel`; it has no parent.
pub(crate) type EventChannelInner = Handle<rdma_event_channel, ()>;

// SAFETY: an event channel is a kernel fd wrapper; librdmacm allows use from any thread. Every
// CmId on this channel holds an Arc of it, so none is left when it is destroyed.
verbs_object!(unsafe rdma_event_channel, destroyed by rdma_destroy_event_channel);

/// Where the connection manager reports what happened (`rdma_create_event_channel(3)`): a file
/// descriptor that becomes readable when an event is queued. Cheap to clone (an `Arc`).
#[derive(Clone)]
pub struct EventChannel {
    pub(super) inner: Arc<EventChannelInner>,
}

impl EventChannel {
    /// Opens `/dev/infiniband/rdma_cm` (`rdma_create_event_channel(3)`) and makes its fd
    /// non-blocking, so that every wait is a bounded `poll(2)`.
    pub fn create() -> Result<EventChannel> {
        // SAFETY: no arguments; returns NULL with errno set on failure, else a channel that is
        // ours alone.
        let created = unsafe {
            Handle::created("rdma_create_event_channel", rdma_create_event_channel(), ())
        };
        let inner = Arc::new(created.map_err(|e| match e.errno() {
            Some(Errno::ENODEV | Errno::ENOENT | Errno::ENOSYS) => VerbsError::Call {
                verb: "rdma_create_event_channel",
                errno: e.errno().unwrap_or(Errno::ENODEV),
                hint: Some(format!(
                        "there is no /dev/infiniband/rdma_cm: load the rdma_ucm module \
                         (modprobe rdma_ucm) on a kernel with RDMA{}",
                        advice().elsewhere.map(|e| format!(", or use {e}")).unwrap_or_default()
                    )),
            },
            _ => e,
        })?);
        // SAFETY: the fd belongs to the live channel for the whole borrow.
        let fd = unsafe { BorrowedFd::borrow_raw((*inner.ptr).fd) };
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
        let deadline = crate::fdwait::deadline_after(timeout);
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
        let new_id =
            (kind == CmEventKind::ConnectRequest).then(|| CmId::own(raw.id, self.inner.clone()));
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
