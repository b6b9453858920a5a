//! The requests and completions of the one latency QP: room in the send queue, one post,
//! completions taken.

use anyhow::{bail, Context as _, Result};
use verbs_lab::verbs::{CompChannel, Cq, SendList, WcOpcode, WorkCompletion};

use super::wait::{Waited, Waiter};
use super::SendQueue;
use crate::engine::{completed_through, poll_or_sleep, wc_error, SEQ_MASK};

/// A receive completion: the slot and the bytes received.
pub(super) type Recv = Option<(usize, u32, Option<u32>)>;

/// Takes completions: send completions advance the send queue, a receive is kept in `recv`.
#[inline]
pub(super) fn take(
    wcs: &[WorkCompletion],
    sq: &mut SendQueue,
    recv: &mut Recv,
    size: u64,
) -> Result<()> {
    for wc in wcs {
        if !wc.is_success() {
            return Err(wc_error(wc));
        }
        if matches!(wc.opcode(), WcOpcode::RECV | WcOpcode::RECV_RDMA_WITH_IMM) {
            if recv.is_some() {
                bail!("two messages arrived for one ping-pong round (size {size})");
            }
            *recv = Some((
                (wc.wr_id() & SEQ_MASK) as usize,
                wc.byte_len(),
                wc.imm_data(),
            ));
        } else {
            sq.completed = completed_through(sq.completed, wc.wr_id());
        }
    }
    Ok(())
}

/// Polls without waiting, taking send completions (and remembering a receive).
#[inline]
pub(super) fn reap(
    cq: &Cq,
    wcs: &mut [WorkCompletion],
    sq: &mut SendQueue,
    recv: &mut Recv,
    size: u64,
) -> Result<usize> {
    let n = cq.poll(wcs).context("ibv_poll_cq")?;
    take(&wcs[..n], sq, recv, size)?;
    Ok(n)
}

/// The requests of the one QP, built once per phase.
pub(super) struct Post<'a> {
    pub(super) cq: &'a Cq,
    pub(super) channel: Option<&'a CompChannel>,
    /// The message size (for errors).
    pub(super) size: u64,
    /// The one request, checked and converted once (inline or not): a post rewrites only its
    /// id and signaled flag.
    pub(super) list: SendList<'a, 'a>,
    /// One request in this many is signaled ([`QueueShape::signal_period`]: every SEND at the
    /// default depth of 1, every write, read and atomic): never more than `depth`, so a full
    /// send queue always holds a signaled request whose completion frees it.
    ///
    /// [`QueueShape::signal_period`]: crate::params::QueueShape::signal_period
    pub(super) cq_mod: u64,
    /// The QP's `max_send_wr` (`-t`): requests posted and not yet retired by a completion
    /// taken here. An answer from the peer proves our message arrived, not that its slot is
    /// free: only a completion frees it, so [`Post::make_room`] polls for one when full.
    pub(super) depth: u64,
}

impl Post<'_> {
    /// Waits (polling) until the send queue has room for one more request; returns whether it
    /// had to wait.
    #[inline]
    pub(super) fn make_room(
        &mut self,
        sq: &mut SendQueue,
        waiter: &mut Waiter<'_>,
        wcs: &mut [WorkCompletion],
        recv: &mut Recv,
    ) -> Result<bool> {
        let size = self.size;
        let (cq, ch) = (self.cq, self.channel);
        if sq.posted - sq.completed >= self.depth {
            waiter.what = "a send completion (send queue full)";
            // Bookkeeping, not a round: its own clock read starts the wait.
            let r = waiter.wait(std::time::Instant::now(), || {
                let n = poll_or_sleep(cq, ch, wcs, true)?;
                take(&wcs[..n], sq, recv, size)?;
                Ok(sq.posted - sq.completed < self.depth)
            })?;
            if let Waited::PeerDone = r {
                bail!("the peer finished while this side still had requests to post");
            }
            return Ok(true);
        }
        Ok(false)
    }

    /// Posts one request (the caller made room).
    #[inline]
    pub(super) fn post(&mut self, sq: &mut SendQueue) -> Result<()> {
        // One signaled request every `cq_mod` (a countdown, no division per post).
        if sq.next_signal == 0 {
            sq.next_signal = self.cq_mod;
        }
        let every = sq.posted + 1 == sq.next_signal;
        if every {
            sq.next_signal += self.cq_mod;
        }
        self.list.set(0, sq.posted & SEQ_MASK, every);
        self.list.post(1).context("ibv_post_send")?;
        sq.posted += 1;
        Ok(())
    }
}
