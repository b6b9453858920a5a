//! Completion queues (`ibv_create_cq(3)`, `ibv_poll_cq(3)`, `ibv_req_notify_cq(3)`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use std::sync::atomic::{AtomicU32, Ordering};

use rdma_sys::{
    ibv_ack_cq_events, ibv_cq, ibv_cq_attr_mask, ibv_create_cq, ibv_destroy_cq, ibv_moderate_cq,
    ibv_modify_cq, ibv_modify_cq_attr, ibv_poll_cq, ibv_req_notify_cq,
};

use super::channel::{ChannelInner, CompChannel};
use super::context::{Context, ContextInner};
use super::error::{Result, VerbsError};
use super::ud_sends::CqSends;
use super::wc::WorkCompletion;

pub(crate) struct CqInner {
    pub(crate) ptr: *mut ibv_cq,
    /// Completion events taken with `ibv_get_cq_event` and not yet acknowledged.
    unacked: AtomicU32,
    /// The sends of the UD QPs whose send CQ this is, each holding its address handle until its
    /// completion is polled here.
    pub(crate) ud_sends: CqSends,
    _ctx: Arc<ContextInner>,
    _channel: Option<Arc<ChannelInner>>,
}

// SAFETY: CQs are thread-safe in libibverbs (providers lock around polling).
unsafe impl Send for CqInner {}
// SAFETY: as above.
unsafe impl Sync for CqInner {}

impl CqInner {
    pub(crate) fn count_event(&self) {
        self.unacked.fetch_add(1, Ordering::AcqRel);
    }

    fn ack_pending(&self) -> u32 {
        let n = self.unacked.swap(0, Ordering::AcqRel);
        if n > 0 {
            // SAFETY: the CQ is live and n events were taken for it and not yet acked.
            unsafe { ibv_ack_cq_events(self.ptr, n) };
        }
        n
    }
}

impl Drop for CqInner {
    fn drop(&mut self) {
        // ibv_destroy_cq waits until every event taken has been acked: ack what is left.
        self.ack_pending();
        // SAFETY: every QP using this CQ holds an Arc of us, so none is left (ibv_destroy_cq
        // would return EBUSY otherwise); channel and context outlive us through our Arcs.
        unsafe { ibv_destroy_cq(self.ptr) };
    }
}

/// A completion queue. QPs that use it keep it alive.
#[derive(Clone)]
pub struct Cq {
    pub(crate) inner: Arc<CqInner>,
}

impl Cq {
    pub(crate) fn create(ctx: &Context, cqe: u32, channel: Option<&CompChannel>) -> Result<Cq> {
        if cqe == 0 || cqe > i32::MAX as u32 {
            return Err(VerbsError::InvalidArgument(format!(
                "CQ size {cqe} is not usable"
            )));
        }
        let ch = channel.map_or(std::ptr::null_mut(), |c| c.inner.ptr);
        // SAFETY: the context is open; `ch` is NULL or a live channel of the same context.
        let ptr = unsafe { ibv_create_cq(ctx.inner.ptr, cqe as i32, std::ptr::null_mut(), ch, 0) };
        if ptr.is_null() {
            return Err(VerbsError::last("ibv_create_cq"));
        }
        Ok(Cq {
            inner: Arc::new(CqInner {
                ptr,
                unacked: AtomicU32::new(0),
                ud_sends: CqSends::new(),
                _ctx: ctx.inner.clone(),
                _channel: channel.map(|c| c.inner.clone()),
            }),
        })
    }

    /// The number of entries the provider granted (at least what was asked).
    pub fn capacity(&self) -> u32 {
        // SAFETY: ptr is a live CQ.
        unsafe { (*self.inner.ptr).cqe as u32 }
    }

    /// Takes up to `wcs.len()` completions without waiting (`ibv_poll_cq(3)`); returns how many.
    /// Failed completions are returned like successful ones: check [`WorkCompletion::ok`].
    /// A UD send's address handle is let go once a completion here shows the send done.
    #[inline]
    pub fn poll(&self, wcs: &mut [WorkCompletion]) -> Result<usize> {
        let n = wcs.len().min(i32::MAX as usize) as i32;
        // SAFETY: WorkCompletion is repr(transparent) over ibv_wc, so the slice is n valid
        // ibv_wc slots; the CQ is live.
        let ret = unsafe { ibv_poll_cq(self.inner.ptr, n, wcs.as_mut_ptr().cast()) };
        if ret < 0 {
            return Err(VerbsError::from_ret("ibv_poll_cq", -ret));
        }
        let polled = ret as usize;
        self.inner.ud_sends.completed(&wcs[..polled]);
        Ok(polled)
    }

    /// Busy-polls until at least one completion arrives or `timeout` passes; `what` names the
    /// awaited event in the timeout error (e.g. "the SEND completion").
    pub fn poll_timeout(
        &self,
        wcs: &mut [WorkCompletion],
        timeout: Duration,
        what: &str,
    ) -> Result<usize> {
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            let n = self.poll(wcs)?;
            if n > 0 {
                return Ok(n);
            }
            spins = spins.wrapping_add(1);
            // Reading the clock costs more than polling: look at it every 256 empty polls.
            if spins % 256 == 0 && start.elapsed() >= timeout {
                return Err(VerbsError::Timeout {
                    what: what.into(),
                    after: timeout,
                });
            }
            std::hint::spin_loop();
        }
    }

    /// Polls until exactly one completion arrives (within `timeout`) and checks its status.
    pub fn poll_one(&self, timeout: Duration, what: &str) -> Result<WorkCompletion> {
        let mut wc = [WorkCompletion::default()];
        self.poll_timeout(&mut wc, timeout, what)?;
        let [wc] = wc;
        wc.ok()?;
        Ok(wc)
    }

    /// Arms the CQ: the next completion will raise an event on its channel
    /// (`ibv_req_notify_cq(3)`). With `solicited_only`, only solicited or failed ones do.
    pub fn req_notify(&self, solicited_only: bool) -> Result<()> {
        // SAFETY: the CQ is live.
        let ret = unsafe { ibv_req_notify_cq(self.inner.ptr, solicited_only as i32) };
        VerbsError::check_ret("ibv_req_notify_cq", ret)
    }

    /// Sets completion moderation (`ibv_modify_cq(3)` with `IBV_CQ_ATTR_MODERATE`): the device
    /// raises a completion event only after `count` completions or `period_us` microseconds,
    /// whichever comes first. Providers without it (rxe among them) refuse with EOPNOTSUPP.
    pub fn modify_moderation(&self, count: u16, period_us: u16) -> Result<()> {
        let mut attr = ibv_modify_cq_attr {
            attr_mask: ibv_cq_attr_mask::IBV_CQ_ATTR_MODERATE.0,
            moderate: ibv_moderate_cq {
                cq_count: count,
                cq_period: period_us,
            },
        };
        // SAFETY: the CQ is live; `attr` is a valid ibv_modify_cq_attr for the call's duration.
        let ret = unsafe { ibv_modify_cq(self.inner.ptr, &mut attr) };
        VerbsError::check_ret("ibv_modify_cq", ret)
    }

    /// Acknowledges every completion event taken for this CQ since the last call
    /// (`ibv_ack_cq_events(3)` with their count); returns how many. Events must be acked
    /// before the CQ is destroyed; one call for many events saves a mutex per event.
    pub fn ack_events(&self) -> u32 {
        self.inner.ack_pending()
    }

    /// Events taken and not yet acknowledged.
    pub fn unacked_events(&self) -> u32 {
        self.inner.unacked.load(Ordering::Acquire)
    }
}
