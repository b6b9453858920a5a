//! Completion channels (`ibv_create_comp_channel(3)`): a file descriptor that becomes readable
//! when an armed CQ gets a completion, so a thread can sleep instead of spinning.

use std::os::fd::BorrowedFd;
use std::sync::Arc;
use std::time::Duration;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use rdma_sys::{
    ibv_ack_cq_events, ibv_comp_channel, ibv_cq, ibv_create_comp_channel, ibv_destroy_comp_channel,
    ibv_get_cq_event,
};

use super::context::{Context, ContextInner};
use super::cq::Cq;
use super::error::{Result, VerbsError};

pub(crate) struct ChannelInner {
    pub(crate) ptr: *mut ibv_comp_channel,
    _ctx: Arc<ContextInner>,
}

// SAFETY: a completion channel is a kernel fd wrapper; libibverbs allows use from any thread.
unsafe impl Send for ChannelInner {}
// SAFETY: as above.
unsafe impl Sync for ChannelInner {}

impl Drop for ChannelInner {
    fn drop(&mut self) {
        // SAFETY: every CQ bound to this channel holds an Arc of us, so none is left.
        unsafe { ibv_destroy_comp_channel(self.ptr) };
    }
}

/// A completion channel; CQs created with it keep it alive.
#[derive(Clone)]
pub struct CompChannel {
    pub(crate) inner: Arc<ChannelInner>,
}

impl CompChannel {
    pub(crate) fn create(ctx: &Context) -> Result<CompChannel> {
        // SAFETY: the context is open.
        let ptr = unsafe { ibv_create_comp_channel(ctx.inner.ptr) };
        if ptr.is_null() {
            return Err(VerbsError::last("ibv_create_comp_channel"));
        }
        Ok(CompChannel {
            inner: Arc::new(ChannelInner {
                ptr,
                _ctx: ctx.inner.clone(),
            }),
        })
    }

    /// The channel's file descriptor (for narration, or to add to an epoll set).
    pub fn fd(&self) -> i32 {
        // SAFETY: ptr is a live channel.
        unsafe { (*self.inner.ptr).fd }
    }

    /// Sleeps until an armed CQ of this channel has a completion event, at most `timeout`;
    /// takes the event (`ibv_get_cq_event(3)`) and acknowledges it (`ibv_ack_cq_events(3)`).
    ///
    /// The CQ must have been armed with [`Cq::req_notify`] before, and must be re-armed before
    /// the next wait. Returns an error if the event belongs to a CQ other than `cq`.
    pub fn wait(&self, cq: &Cq, timeout: Duration) -> Result<()> {
        // SAFETY: the fd is owned by the live channel for the whole borrow.
        let fd = unsafe { BorrowedFd::borrow_raw(self.fd()) };
        let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
        let ms = PollTimeout::try_from(timeout.as_millis().min(i32::MAX as u128) as i32)
            .unwrap_or(PollTimeout::MAX);
        loop {
            match poll(&mut fds, ms) {
                Ok(0) => {
                    return Err(VerbsError::Timeout {
                        what: "a completion event (ibv_get_cq_event)".into(),
                        after: timeout,
                    })
                }
                Ok(_) => break,
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => return Err(VerbsError::call("poll(comp_channel)", e)),
            }
        }
        let mut ev_cq: *mut ibv_cq = std::ptr::null_mut();
        let mut ev_ctx: *mut std::ffi::c_void = std::ptr::null_mut();
        // SAFETY: the fd is readable, so this does not block; both out-pointers are valid.
        let ret = unsafe { ibv_get_cq_event(self.inner.ptr, &mut ev_cq, &mut ev_ctx) };
        if ret != 0 {
            return Err(VerbsError::last("ibv_get_cq_event"));
        }
        // SAFETY: ev_cq is the CQ the event was for; it is alive because it holds an Arc of this
        // channel only while it exists, and every event must be acked before ibv_destroy_cq.
        unsafe { ibv_ack_cq_events(ev_cq, 1) };
        if ev_cq != cq.inner.ptr {
            return Err(VerbsError::InvalidArgument(
                "a completion event arrived for a different CQ of this channel".into(),
            ));
        }
        Ok(())
    }
}
