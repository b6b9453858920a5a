//! The engine that runs a [`Plan`] on the ring: posts each piece while it holds a credit,
//! applies arrivals in order, returns the credits.
//!
//! One turn of the loop in [`Comm::pump`] is four named steps, in this order: post what the
//! credits allow ([`Run::post_ready`]), apply what has arrived ([`Run::apply_arrived`]), reap
//! completions ([`Run::reap`]), and — only when none of them moved — wait, bounded
//! ([`Idle::wait`]). The per-piece work is [`Run::write_piece`] and [`Run::apply_piece`].

use super::*;

/// A neighbour as the errors name it.
struct Peer {
    who: String,
    rank: u32,
}

/// One run of a plan: what it reads and writes, who its neighbours are, and how far it has got.
struct Run<'p> {
    job: Job<'p>,
    left: Peer,
    right: Peer,
    /// Sends posted, sends completed, receives applied.
    posted: usize,
    completed: usize,
    processed: usize,
}

/// The idle side of the loop: spin, then arm the CQ, then sleep; and the clocks of the bounded
/// waits.
struct Idle {
    spins: u32,
    armed: bool,
    last_progress: Instant,
    last_check: Instant,
    peer_timeout: Duration,
}

/// Charges the time since the last lap to `slot`.
#[inline]
fn lap(t: &mut Instant, slot: &mut Duration) {
    let now = Instant::now();
    *slot += now - *t;
    *t = now;
}

impl Comm {
    /// Runs `job` on the ring, or with `via` on the links to that partner.
    pub(super) fn pump(&mut self, job: Job<'_>, via: Option<usize>) -> Result<()> {
        let peer = |k| {
            let r: &RankRecord = match via {
                Some(p) => &self.star.table()[p],
                None => self.neighbour(k),
            };
            Peer {
                who: r.who(),
                rank: r.rank,
            }
        };
        let mut run = Run {
            job,
            left: peer(-1),
            right: peer(1),
            posted: 0,
            completed: 0,
            processed: 0,
        };
        let mut idle = Idle::new(self.peer_timeout);
        let Comm {
            ring,
            partners,
            mem,
            star,
            tracer,
            phases,
            ..
        } = self;
        // A recursive-doubling step is a part of one (counted by `run_rd`).
        if via.is_none() {
            phases.collectives += 1;
        }
        let ring = match via {
            None => ring.as_mut(),
            Some(p) => partners.as_mut().and_then(|l| l.get_mut(&p)),
        }
        .expect("a ring when the world has more than one rank, partner links once connected");
        let Memory::Registered(data) = mem else {
            unreachable!("a ring has registered memory")
        };
        let mut wcs = WorkCompletion::array::<32>();
        let mut t = Instant::now();
        while !run.done() {
            // 1. Post what the credits and the dependencies allow.
            let posted = run.post_ready(ring, data, phases)?;
            lap(&mut t, &mut phases.post);
            // 2. Apply what has arrived, in order, and hand the slots back.
            let applied = run.apply_arrived(ring, data, phases, tracer)?;
            lap(&mut t, &mut phases.apply);
            // 3. Reap completions.
            let n = run.reap(ring, &mut wcs)?;
            lap(&mut t, &mut phases.poll);
            // 4. Bounded waits: no progress for the peer timeout ends in rank 0's verdict on
            // who is gone; the star says at once when a rank exited.
            if n > 0 || posted || applied {
                idle.progressed();
                continue;
            }
            idle.wait(&run, ring, star, phases, &mut t)?;
        }
        Ok(())
    }
}

impl Run<'_> {
    /// Every receive applied and every send completed.
    #[inline]
    fn done(&self) -> bool {
        self.processed >= self.job.plan.recvs.len() && self.completed >= self.job.plan.sends.len()
    }

    /// Step 1: posts the next sends while a credit, send-queue room and the plan's dependencies
    /// allow. True if any was posted.
    #[inline]
    fn post_ready(&mut self, ring: &mut Ring, data: &Mr, phases: &mut Phases) -> Result<bool> {
        let plan = self.job.plan;
        let mut progress = false;
        while self.posted < plan.sends.len() && ring.credits > 0 && ring.sq_right < ring.sq_depth {
            let m = &plan.sends[self.posted];
            if m.after_recv.is_some_and(|r| r >= self.processed) {
                break;
            }
            self.write_piece(ring, data, m.piece.range.clone())?;
            ring.tx_seq += 1;
            ring.credits -= 1;
            ring.sq_right += 1;
            self.posted += 1;
            phases.writes += 1;
            progress = true;
        }
        Ok(progress)
    }

    /// One piece: an RDMA WRITE WITH IMM of `range` of the source into the right neighbour's
    /// next slot, the immediate carrying the message number.
    #[inline]
    fn write_piece(&self, ring: &Ring, data: &Mr, range: std::ops::Range<usize>) -> Result<()> {
        let slot = (ring.tx_seq % ring.nslots as u64) as u32;
        let len = range.len() as u32;
        let remote = ring
            .peer_slots
            .slice(slot * ring.slot_bytes as u32, len)
            .ok_or_else(|| {
                CollError::Failed(format!("a piece of {len} bytes does not fit a slot"))
            })?;
        let sge = data
            .sge(self.job.src_off + range.start..self.job.src_off + range.end)
            .map_err(verbs("the source of a write"))?;
        let sges = [sge];
        let wr = SendWr::new(
            WR_DATA,
            SendOp::WriteWithImm(remote, ring.tx_seq as u32),
            Payload::Sges(&sges),
        );
        ring.right.post_send(&[wr]).map_err(verbs(format!(
            "posting the RDMA WRITE WITH IMM to {}",
            self.right.who
        )))
    }

    /// Step 2: applies the arrived messages in order while the plan allows, returning each slot
    /// with a credit. True if any was applied.
    #[inline]
    fn apply_arrived(
        &mut self,
        ring: &mut Ring,
        data: &Mr,
        phases: &mut Phases,
        tracer: &mut Option<Tracer>,
    ) -> Result<bool> {
        let plan = self.job.plan;
        let mut progress = false;
        while self.processed < plan.recvs.len() && ring.sq_left < ring.sq_depth {
            let Some(&(imm, len)) = ring.arrived.front() else {
                break;
            };
            let m = &plan.recvs[self.processed];
            if m.after_send.is_some_and(|s| s >= self.completed) {
                break;
            }
            ring.arrived.pop_front();
            self.apply_piece(ring, data, m, imm, len)?;
            ring.rx_seq += 1;
            self.processed += 1;
            phases.applied_bytes += u64::from(len);
            let credit = SendWr::new(
                WR_CREDIT,
                SendOp::SendWithImm(ring.rx_seq as u32),
                Payload::None,
            );
            ring.left
                .post_send(&[credit])
                .map_err(verbs(format!("posting a credit to {}", self.left.who)))?;
            ring.sq_left += 1;
            progress = true;
            if let Some(t) = tracer.as_mut() {
                t(&TraceEvent {
                    coll: self.job.coll,
                    msg: m,
                    buffer: &data
                        .to_vec(self.job.dst_off..self.job.dst_off + self_len(plan))
                        .map_err(verbs("reading the destination"))?,
                });
            }
        }
        Ok(progress)
    }

    /// One arrived message: checks it is the one due, then reduces or copies its slot into the
    /// destination.
    #[inline]
    fn apply_piece(&self, ring: &Ring, data: &Mr, m: &RecvMsg, imm: u32, len: u32) -> Result<()> {
        if imm != ring.rx_seq as u32 || len as usize != m.piece.range.len() {
            return Err(CollError::Failed(format!(
                "{} sent message {imm} of {len} bytes where message {} of {} bytes was due: do \
                 all ranks run the same collectives with the same sizes?",
                self.left.who,
                ring.rx_seq as u32,
                m.piece.range.len()
            )));
        }
        let at = (ring.rx_seq % ring.nslots as u64) as usize * ring.slot_bytes;
        let src = ring
            .slots
            .to_vec(at..at + len as usize)
            .map_err(verbs("reading a slot"))?;
        let out = self.job.dst_off + m.piece.range.start;
        match m.action {
            Action::Reduce => {
                let mut dst = data
                    .to_vec(out..self.job.dst_off + m.piece.range.end)
                    .map_err(verbs("reading the destination"))?;
                kernels::reduce(self.job.dtype, self.job.op, &mut dst, &src)
                    .map_err(CollError::Failed)?;
                data.write(out, &dst)
                    .map_err(verbs("writing the destination"))
            }
            Action::Copy => data
                .write(out, &src)
                .map_err(verbs("writing the destination")),
        }
    }

    /// Step 3: polls the CQ once and accounts each completion (re-posting receives). Returns
    /// how many it reaped; a failed completion names the neighbour whose QP it was on.
    #[inline]
    fn reap(&mut self, ring: &mut Ring, wcs: &mut [WorkCompletion]) -> Result<usize> {
        let n = ring.cq.poll(wcs).map_err(verbs("ibv_poll_cq"))?;
        for wc in &wcs[..n] {
            if !wc.is_success() {
                let peer = if wc.qp_num() == ring.left.qpn() {
                    &self.left
                } else {
                    &self.right
                };
                if let Some(down) = ring.port_down_settled() {
                    // Only the status: its usual explanation (a malformed request, for rxe's
                    // IBV_WC_LOC_QP_OP_ERR) does not hold for a request that met a dead link.
                    return Err(CollError::Failed(format!(
                        "{down} (work request {} on the QP to {} completed with {})",
                        wc.wr_id(),
                        peer.who,
                        wc.status().name()
                    )));
                }
                let err = wc.ok().expect_err("a failed completion");
                return Err(CollError::RankGone {
                    rank: peer.rank,
                    who: peer.who.clone(),
                    detail: format!("a work request on the QP to it failed: {err}"),
                });
            }
            match wc.wr_id() {
                WR_DATA => {
                    self.completed += 1;
                    ring.sq_right -= 1;
                }
                WR_CREDIT => ring.sq_left -= 1,
                WR_RECV_DATA => {
                    let imm = wc.imm_data().ok_or_else(|| {
                        CollError::Failed(format!(
                            "{} sent data without an immediate",
                            self.left.who
                        ))
                    })?;
                    ring.arrived.push_back((imm, wc.byte_len()));
                    post_recvs(&ring.left, WR_RECV_DATA, 1)?;
                }
                WR_RECV_CREDIT => {
                    ring.credits += 1;
                    post_recvs(&ring.right, WR_RECV_CREDIT, 1)?;
                }
                other => return Err(CollError::Failed(format!("unknown completion {other}"))),
            }
        }
        Ok(n)
    }

    /// Who we wait for when nothing moves: the left neighbour if data is due and none has
    /// arrived, else the right one (credits or acknowledgements).
    fn waiting_for(&self, ring: &Ring) -> (&Peer, &'static str) {
        if self.processed < self.job.plan.recvs.len() && ring.arrived.is_empty() {
            (&self.left, "data")
        } else {
            (&self.right, "credits or acknowledgements")
        }
    }
}

impl Idle {
    fn new(peer_timeout: Duration) -> Idle {
        let now = Instant::now();
        Idle {
            spins: 0,
            armed: false,
            last_progress: now,
            last_check: now,
            peer_timeout,
        }
    }

    /// Something moved: the peer-timeout clock starts afresh, spinning starts over.
    #[inline]
    fn progressed(&mut self) {
        self.last_progress = Instant::now();
        self.armed = false;
        self.spins = 0;
    }

    /// Step 4, nothing to do: after a short spin, sleep until the CQ has a completion. A
    /// spinning rank would hold a CPU that another rank, or SoftRoCE's kernel work, needs — with
    /// 4 ranks on 2 cores every hop of the ring would wait for a scheduler time slice. Arm, poll
    /// once more (a completion may have come before the arming: the caller's next turn), then
    /// wait. Between sleeps, the star's liveness and the peer timeout are looked at; when the
    /// peer timeout passes, rank 0's verdict ([`Star::verdict`]) names the rank that is gone.
    fn wait(
        &mut self,
        run: &Run<'_>,
        ring: &Ring,
        star: &mut Star,
        phases: &mut Phases,
        t: &mut Instant,
    ) -> Result<()> {
        self.spins = self.spins.wrapping_add(1);
        if self.spins < SPINS_BEFORE_SLEEP {
            std::hint::spin_loop();
            lap(t, &mut phases.idle);
            return Ok(());
        }
        if !self.armed {
            ring.cq
                .req_notify(false)
                .map_err(verbs("ibv_req_notify_cq"))?;
            self.armed = true;
            return Ok(());
        }
        phases.sleeps += 1;
        let slept = ring.channel.wait(&ring.cq, SLEEP_SLICE);
        lap(t, &mut phases.idle);
        match slept {
            Ok(()) | Err(VerbsError::Timeout { .. }) => {}
            Err(e) => return Err(verbs("waiting for a completion event")(e)),
        }
        self.armed = false;
        let now = Instant::now();
        if now.duration_since(self.last_check) >= Duration::from_millis(20) {
            self.last_check = now;
            star.check_alive()?;
        }
        if now.duration_since(self.last_progress) >= self.peer_timeout {
            let (peer, waiting) = run.waiting_for(ring);
            if let Some(down) = ring.port_down() {
                return Err(CollError::Failed(format!(
                    "{down} (no {waiting} from {} for {:.0} s)",
                    peer.who,
                    self.peer_timeout.as_secs_f64()
                )));
            }
            // In a ring, a neighbour may be silent only because a rank further up is gone:
            // rank 0 tells which (see the star's module documentation).
            let detail = format!(
                "no {waiting} from it for {:.0} s (the peer timeout)",
                self.peer_timeout.as_secs_f64()
            );
            return Err(star.verdict(peer.rank, &detail));
        }
        Ok(())
    }
}
