//! Completion channels (`ibv_create_comp_channel(3)`): a file descriptor that becomes readable
//! when an armed CQ gets a completion, so a thread can sleep instead of spinning.

use std::os::fd::BorrowedFd;
use std::sync::Arc;
use std::time::Duration;

use rdma_sys::{
    ibv_ack_cq_events, ibv_comp_channel, ibv_cq, ibv_create_comp_channel, ibv_destroy_comp_channel,
    ibv_get_cq_event,
};

use super::context::{Context, ContextInner};
use super::cq::Cq;
use super::error::{Result, VerbsError};
use super::fd::{set_nonblocking, wait_readable};
use super::handle::{verbs_object, Handle};

/// The owner of a `struct ibv_comp_channel`; its `parent` is the context.
pub(crate) type ChannelInner = Handle<ibv_comp_channel, Arc<ContextInner>>;

// SAFETY: a completion channel is a kernel fd wrapper; libibverbs allows use from any thread.
// Every CQ bound to this channel holds an Arc of it, so none is left when it is destroyed.
verbs_object!(unsafe ibv_comp_channel, destroyed by ibv_destroy_comp_channel);

/// A completion channel; CQs created with it keep it alive.
#[derive(Clone)]
pub struct CompChannel {
    pub(crate) inner: Arc<ChannelInner>,
}

impl CompChannel {
    pub(crate) fn create(ctx: &Context) -> Result<CompChannel> {
        // SAFETY: the context is open; the new channel is ours alone, and its context outlives
        // it as its parent.
        let inner = unsafe {
            Handle::created(
                "ibv_create_comp_channel",
                ibv_create_comp_channel(ctx.inner.ptr),
                ctx.inner.clone(),
            )?
        };
        // SAFETY: the channel is live; its fd stays open until ibv_destroy_comp_channel.
        let fd = unsafe { BorrowedFd::borrow_raw((*inner.ptr).fd) };
        // Non-blocking, so that ibv_get_cq_event returns EAGAIN instead of hanging when no
        // event is pending (rdma-core's man page shows the same fcntl). On failure, dropping
        // `inner` destroys the channel, which no CQ uses yet.
        set_nonblocking(fd, "fcntl(comp_channel, O_NONBLOCK)")?;
        Ok(CompChannel {
            inner: Arc::new(inner),
        })
    }

    /// The channel's file descriptor (for narration, or to add to an epoll set).
    pub fn fd(&self) -> i32 {
        // SAFETY: ptr is a live channel.
        unsafe { (*self.inner.ptr).fd }
    }

    /// Sleeps in `poll(2)` until the channel's fd is readable — an armed CQ of this channel got a
    /// completion — or `timeout` passes. Returns whether it became readable. Takes nothing: call
    /// [`CompChannel::get_cq_event`] next.
    pub fn poll_readable(&self, timeout: Duration) -> Result<bool> {
        // SAFETY: the fd is owned by the live channel for the whole borrow.
        let fd = unsafe { BorrowedFd::borrow_raw(self.fd()) };
        wait_readable(fd, timeout, "poll(comp_channel)")
    }

    /// Takes one completion event for `cq` off the channel (`ibv_get_cq_event(3)`), without
    /// blocking: `Ok(false)` when none is pending (the fd is non-blocking).
    ///
    /// The event is *not* acknowledged here: it is counted on the CQ, and
    /// [`Cq::ack_events`] acknowledges all counted events in one `ibv_ack_cq_events(3)` call
    /// (acking takes a mutex, so programs batch it). Dropping the CQ acks whatever is left, as
    /// `ibv_destroy_cq` waits for every event to be acked. The CQ is disarmed by the event:
    /// re-arm it with [`Cq::req_notify`] before sleeping again. An event for a different CQ of
    /// this channel is acked at once and reported as an error.
    pub fn get_cq_event(&self, cq: &Cq) -> Result<bool> {
        let mut ev_cq: *mut ibv_cq = std::ptr::null_mut();
        let mut ev_ctx: *mut std::ffi::c_void = std::ptr::null_mut();
        // SAFETY: the channel is live and its fd non-blocking (set at creation), so this returns
        // at once; both out-pointers are valid.
        let ret = unsafe { ibv_get_cq_event(self.inner.ptr, &mut ev_cq, &mut ev_ctx) };
        if ret != 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::WouldBlock {
                return Ok(false);
            }
            return Err(VerbsError::last("ibv_get_cq_event"));
        }
        if ev_cq != cq.inner.ptr {
            // SAFETY: ev_cq is a CQ of this channel with this event unacked, so ibv_destroy_cq
            // cannot have freed it (it waits for its events to be acked).
            unsafe { ibv_ack_cq_events(ev_cq, 1) };
            return Err(VerbsError::InvalidArgument(
                "a completion event arrived for a different CQ of this channel".into(),
            ));
        }
        cq.inner.count_event();
        Ok(true)
    }

    /// Sleeps until an armed CQ of this channel has a completion event, at most `timeout`;
    /// takes the event (`ibv_get_cq_event(3)`) and acknowledges it (`ibv_ack_cq_events(3)`):
    /// [`CompChannel::poll_readable`], [`CompChannel::get_cq_event`] and [`Cq::ack_events`]
    /// in one call, for code that has no use for the steps.
    ///
    /// The CQ must have been armed with [`Cq::req_notify`] before, and must be re-armed before
    /// the next wait. Returns an error if the event belongs to a CQ other than `cq`.
    pub fn wait(&self, cq: &Cq, timeout: Duration) -> Result<()> {
        let deadline = crate::fdwait::deadline_after(timeout);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if !self.poll_readable(left)? {
                return Err(VerbsError::Timeout {
                    what: "a completion event (ibv_get_cq_event)".into(),
                    after: timeout,
                });
            }
            // Readable but already taken (another thread): poll again until the deadline.
            if self.get_cq_event(cq)? {
                cq.ack_events();
                return Ok(());
            }
        }
    }
}
