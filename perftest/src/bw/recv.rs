//! The receiving side of a phase: what arrived on each QP, checked as it arrives, and the
//! receives posted again as they are consumed.

use super::*;

/// Receive-side state of a phase.
pub(super) struct Rx {
    pub(super) received: Vec<u64>,
    /// Next expected sequence number per QP (validation).
    next_seq: Vec<u64>,
    /// Slots to re-post per QP.
    pending: Vec<Vec<usize>>,
    pub(super) total: u64,
    pub(super) last: Option<Instant>,
    pub(super) log: PeakLog,
    pub(super) done: bool,
}

impl Rx {
    pub(super) fn new(k: &PhaseCtx<'_>, next_seq: Vec<u64>) -> Rx {
        Rx {
            received: vec![0; k.nq],
            next_seq,
            // Re-posted after every poll, so at most one poll's worth is pending.
            // (With --recv_post_list N, up to N - 1 more wait for their list.)
            pending: (0..k.nq)
                .map(|_| Vec::with_capacity(POLL_BATCH + k.cfg.queues.recv_post_list as usize))
                .collect(),
            total: 0,
            last: None,
            log: PeakLog::new(k.win0, k.t_phase),
            done: !k.receives,
        }
    }

    /// After a poll that found completions: when anything has arrived, the time and count go
    /// to the peak's log, and the peer counts as alive.
    #[inline]
    pub(super) fn progressed(&mut self, now: Instant, watch: &mut PeerWatch) {
        if self.total > 0 {
            self.last = Some(now);
            self.log.record(self.total, now);
            watch.last_sign = now;
        }
    }

    /// A receive on QP `q`: its length is the size's, its bytes (with `--validate`) the
    /// expected pattern; it is counted and its slot kept for re-posting.
    #[inline]
    pub(super) fn on_receive(
        &mut self,
        wc: &WorkCompletion,
        q: usize,
        k: &PhaseCtx<'_>,
        dst: &[Mr],
    ) -> Result<()> {
        let slot = (wc.wr_id() & SEQ_MASK) as usize;
        // The receive names QP `q`'s slot; with a shared receive queue another QP may have
        // consumed it: the message counts (and is checked) as that QP's.
        let from = match k.srq {
            Some(_) => k.qp_index(wc.qp_num())?,
            None => q,
        };
        let want = k.n + k.rx_off;
        if wc.byte_len() as usize != want {
            bail!(
                "QP {from} received {} bytes, expected {want}: the peer sent another size",
                wc.byte_len()
            );
        }
        if k.cfg.send_with_imm || k.cfg.write_with_imm {
            check_imm(wc.imm_data())?;
        }
        // A write's bytes landed where the writer aimed, not in this receive's slot (and may
        // be overwritten by the time this completion is polled): they are checked after the
        // phase (`validate`).
        if k.cfg.validate && k.cfg.tool.kind == TestKind::Send {
            let off = k.layout.dst(q, slot) + k.rx_off;
            let msg = dst[q].to_vec(off..off + k.n)?;
            check_received(&msg, from, &mut self.next_seq[from], k.lossy, k.ph, k.size)?;
        }
        self.received[from] += 1;
        self.total += 1;
        self.pending[q].push(slot);
        Ok(())
    }

    /// Posts the slots of this poll's receives again: all of them, or with `--recv_post_list
    /// N` whole lists of N, one `ibv_post_recv` call each (the rest wait for their list).
    #[inline]
    pub(super) fn repost(&mut self, k: &PhaseCtx<'_>, dst: &[Mr]) -> Result<()> {
        let list = k.cfg.queues.recv_post_list.max(1) as usize;
        for (q, qp) in k.qps.iter().enumerate().take(self.pending.len()) {
            let ready = self.pending[q].len() / list * list;
            if ready > 0 {
                let slots = self.pending[q].drain(..ready);
                let rq = RecvQueue::of(qp, k.srq);
                post_receive_lists(rq, &dst[q], &k.layout, q, slots, list)?;
            }
        }
        Ok(())
    }

    /// At the end of a phase: the receives still waiting for a list are posted (a shorter list)
    /// so that the next phase finds every receive posted.
    pub(super) fn flush(&mut self, k: &PhaseCtx<'_>, dst: &[Mr]) -> Result<()> {
        for (q, qp) in k.qps.iter().enumerate().take(self.pending.len()) {
            if !self.pending[q].is_empty() {
                let slots = self.pending[q].drain(..);
                let rq = RecvQueue::of(qp, k.srq);
                post_receive_lists(rq, &dst[q], &k.layout, q, slots, MAX_RECV_PER_CALL)?;
            }
        }
        Ok(())
    }
}
