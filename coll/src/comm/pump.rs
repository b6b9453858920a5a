//! The engine that runs a [`Plan`] on the ring: posts each piece while it holds a credit,
//! applies arrivals in order, returns the credits.
//!
//! One turn of the loop in [`Comm::pump`] is four named steps, in this order: post what the
//! credits allow ([`Run::post_ready`]), apply what has arrived ([`Run::apply_arrived`]), reap
//! completions ([`Run::reap`]), and — only when none of them moved — wait, bounded
//! ([`Idle::wait`]). The per-piece work is [`Run::write_piece`] and [`Run::apply_piece`]. Each
//! step serves every channel ([`Lane`]) in turn: each has its own plan, credits and message
//! numbers, and none waits for another.

use super::*;

/// A neighbour as the errors name it.
struct Peer {
    who: String,
    rank: u32,
}

/// One run of a job: what it reads and writes, who each lane's peers are (from the left, to
/// the right), and how far each lane's plan has got.
struct Run<'p> {
    job: Job<'p>,
    peers: Vec<(Peer, Peer)>,
    /// Whether the lanes are the ring's channels (the errors name them when there are several).
    channels: bool,
    lanes: Vec<Progress>,
}

/// How far one channel's plan has got: sends posted, sends completed, receives applied.
#[derive(Debug, Clone, Copy, Default)]
struct Progress {
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
    /// Runs `job` on the links `via`: the ring, a partner's, or the direct all-to-all's.
    pub(super) fn pump(&mut self, job: Job<'_>, via: Links) -> Result<()> {
        let peer = |lane: usize, k: isize| {
            let r: &RankRecord = match via {
                Links::Partner(p) => &self.star.table()[p],
                Links::Ring => self.neighbour(k),
                Links::Mesh => self.neighbour(k * (lane as isize + 1)),
            };
            Peer {
                who: r.who(),
                rank: r.rank,
            }
        };
        let mut run = Run {
            peers: (0..job.plans.len())
                .map(|l| (peer(l, -1), peer(l, 1)))
                .collect(),
            channels: via == Links::Ring,
            lanes: vec![Progress::default(); job.plans.len()],
            job,
        };
        let mut idle = Idle::new(self.peer_timeout);
        let Comm {
            ring,
            partners,
            mesh,
            mem,
            star,
            tracer,
            phases,
            ..
        } = self;
        // A recursive-doubling step is a part of one (counted by `run_rd`).
        if !matches!(via, Links::Partner(_)) {
            phases.collectives += 1;
        }
        let ring = match via {
            Links::Ring => ring.as_mut(),
            Links::Partner(p) => partners.as_mut().and_then(|l| l.get_mut(&p)),
            Links::Mesh => mesh.as_mut(),
        }
        .expect("a ring when the world has more than one rank, other links once connected");
        assert_eq!(run.lanes.len(), ring.lanes.len(), "a plan per lane");
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
    /// Every channel's receives applied and sends completed.
    #[inline]
    fn done(&self) -> bool {
        self.job
            .plans
            .iter()
            .zip(&self.lanes)
            .all(|(plan, p)| p.processed >= plan.recvs.len() && p.completed >= plan.sends.len())
    }

    /// Step 1: posts each channel's next sends while a credit, send-queue room and the plan's
    /// dependencies allow. True if any was posted.
    #[inline]
    fn post_ready(&mut self, ring: &mut Ring, data: &Mr, phases: &mut Phases) -> Result<bool> {
        let mut progress = false;
        let (slot_bytes, nslots, sq_depth) = (ring.slot_bytes, ring.nslots, ring.sq_depth);
        for (k, lane) in ring.lanes.iter_mut().enumerate() {
            let plan = &self.job.plans[k];
            while lane.credits > 0 && lane.sq_right < sq_depth {
                let p = self.lanes[k];
                let Some(m) = plan.sends.get(p.posted) else {
                    break;
                };
                if m.after_recv.is_some_and(|r| r >= p.processed) {
                    break;
                }
                let slot = (lane.tx_seq % nslots as u64) as u32 * slot_bytes as u32;
                self.write_piece(lane, k, slot, data, m.piece.range.clone())?;
                lane.tx_seq += 1;
                lane.credits -= 1;
                lane.sq_right += 1;
                self.lanes[k].posted += 1;
                phases.writes += 1;
                progress = true;
            }
        }
        Ok(progress)
    }

    /// One piece: an RDMA WRITE WITH IMM of `range` of the source into channel `k`'s next slot
    /// of the right neighbour (at byte `slot`), the immediate carrying the message number.
    #[inline]
    fn write_piece(
        &self,
        lane: &Lane,
        k: usize,
        slot: u32,
        data: &Mr,
        range: std::ops::Range<usize>,
    ) -> Result<()> {
        let len = range.len() as u32;
        let remote = lane.peer_slots.slice(slot, len).ok_or_else(|| {
            CollError::Failed(format!("a piece of {len} bytes does not fit a slot"))
        })?;
        let sge = data
            .sge(self.job.src_off + range.start..self.job.src_off + range.end)
            .map_err(verbs("the source of a write"))?;
        let sges = [sge];
        let wr = SendWr::new(
            wr_id(WR_DATA, k),
            SendOp::WriteWithImm(remote, lane.tx_seq as u32),
            Payload::Sges(&sges),
        );
        lane.right.post_send(&[wr]).map_err(verbs(format!(
            "posting the RDMA WRITE WITH IMM to {}{}",
            self.right(k).who,
            self.on_channel(k)
        )))
    }

    /// Lane `k`'s peer on the left (its data arrives, our credits leave).
    fn left(&self, k: usize) -> &Peer {
        &self.peers[k].0
    }

    /// Lane `k`'s peer on the right (our data leaves, its credits arrive).
    fn right(&self, k: usize) -> &Peer {
        &self.peers[k].1
    }

    /// How the errors name channel `k`: nothing when there is only one, or when the lanes
    /// are not the ring's channels (their peers name them).
    fn on_channel(&self, k: usize) -> String {
        match self.lanes.len() {
            of if of > 1 && self.channels => format!(" on channel {k} of {of}"),
            _ => String::new(),
        }
    }

    /// Step 2: applies each channel's arrived messages in order while its plan allows, returning
    /// each slot with a credit. True if any was applied.
    #[inline]
    fn apply_arrived(
        &mut self,
        ring: &mut Ring,
        data: &Mr,
        phases: &mut Phases,
        tracer: &mut Option<Tracer>,
    ) -> Result<bool> {
        let mut progress = false;
        let (slot_bytes, nslots, sq_depth) = (ring.slot_bytes, ring.nslots, ring.sq_depth);
        for (k, lane) in ring.lanes.iter_mut().enumerate() {
            let plan = &self.job.plans[k];
            while self.lanes[k].processed < plan.recvs.len() && lane.sq_left < sq_depth {
                let Some(&(imm, len)) = lane.arrived.front() else {
                    break;
                };
                let p = self.lanes[k];
                let m = &plan.recvs[p.processed];
                if m.after_send.is_some_and(|s| s >= p.completed) {
                    break;
                }
                lane.arrived.pop_front();
                let at = (lane.rx_seq % nslots as u64) as usize * slot_bytes;
                self.apply_piece(lane, k, at, data, m, imm, len)?;
                lane.rx_seq += 1;
                self.lanes[k].processed += 1;
                phases.applied_bytes += u64::from(len);
                let credit = SendWr::new(
                    wr_id(WR_CREDIT, k),
                    SendOp::SendWithImm(lane.rx_seq as u32),
                    Payload::None,
                );
                lane.left.post_send(&[credit]).map_err(verbs(format!(
                    "posting a credit to {}{}",
                    self.left(k).who,
                    self.on_channel(k)
                )))?;
                lane.sq_left += 1;
                progress = true;
                if let Some(t) = tracer.as_mut() {
                    let end = self.job.dst_off + self_len(self.job.plans);
                    t(&TraceEvent {
                        coll: self.job.coll,
                        msg: m,
                        buffer: &data
                            .to_vec(self.job.dst_off..end)
                            .map_err(verbs("reading the destination"))?,
                    });
                }
            }
        }
        Ok(progress)
    }

    /// One arrived message on channel `k`: checks it is the one due, then reduces or copies its
    /// slot (at byte `at` of the channel's slots) into the destination.
    #[inline]
    #[allow(clippy::too_many_arguments)]
    fn apply_piece(
        &self,
        lane: &Lane,
        k: usize,
        at: usize,
        data: &Mr,
        m: &RecvMsg,
        imm: u32,
        len: u32,
    ) -> Result<()> {
        if imm != lane.rx_seq as u32 || len as usize != m.piece.range.len() {
            return Err(CollError::Failed(format!(
                "{} sent message {imm} of {len} bytes{} where message {} of {} bytes was due: \
                 do all ranks run the same collectives with the same sizes?",
                self.left(k).who,
                self.on_channel(k),
                lane.rx_seq as u32,
                m.piece.range.len()
            )));
        }
        let src = lane
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

    /// Step 3: polls the CQ once and accounts each completion to its channel (re-posting
    /// receives). Returns how many it reaped; a failed completion names the neighbour whose QP
    /// it was on, and the channel when there are several.
    #[inline]
    fn reap(&mut self, ring: &mut Ring, wcs: &mut [WorkCompletion]) -> Result<usize> {
        let n = ring.cq.poll(wcs).map_err(verbs("ibv_poll_cq"))?;
        for wc in &wcs[..n] {
            let (kind, k) = wr_kind(wc.wr_id());
            if !wc.is_success() {
                return Err(self.failed(ring, wc));
            }
            let Some(lane) = ring.lanes.get_mut(k) else {
                return Err(CollError::Failed(format!(
                    "a completion of channel {k}, which this ring does not have"
                )));
            };
            match kind {
                WR_DATA => {
                    self.lanes[k].completed += 1;
                    lane.sq_right -= 1;
                }
                WR_CREDIT => lane.sq_left -= 1,
                WR_RECV_DATA => {
                    let imm = wc.imm_data().ok_or_else(|| {
                        CollError::Failed(format!(
                            "{} sent data without an immediate{}",
                            self.left(k).who,
                            self.on_channel(k)
                        ))
                    })?;
                    lane.arrived.push_back((imm, wc.byte_len()));
                    post_recvs(&lane.left, wr_id(WR_RECV_DATA, k), 1)?;
                }
                WR_RECV_CREDIT => {
                    lane.credits += 1;
                    post_recvs(&lane.right, wr_id(WR_RECV_CREDIT, k), 1)?;
                }
                other => return Err(CollError::Failed(format!("unknown completion {other}"))),
            }
        }
        Ok(n)
    }

    /// The error of a failed completion: our own port down, or the neighbour whose QP (of any
    /// channel) it was on.
    fn failed(&self, ring: &Ring, wc: &WorkCompletion) -> CollError {
        let from_left = ring.lanes.iter().position(|l| l.left.qpn() == wc.qp_num());
        let k = from_left.unwrap_or_else(|| {
            let to_right = ring.lanes.iter().position(|l| l.right.qpn() == wc.qp_num());
            to_right.unwrap_or(0)
        });
        let peer = if from_left.is_some() {
            self.left(k)
        } else {
            self.right(k)
        };
        let channel = self.on_channel(k);
        if let Some(down) = ring.port_down_settled() {
            // Only the status: its usual explanation (a malformed request, for rxe's
            // IBV_WC_LOC_QP_OP_ERR) does not hold for a request that met a dead link.
            return CollError::Failed(format!(
                "{down} (work request {} on the QP to {}{channel} completed with {})",
                wr_kind(wc.wr_id()).0,
                peer.who,
                wc.status().name()
            ));
        }
        let err = wc.ok().expect_err("a failed completion");
        CollError::RankGone {
            rank: peer.rank,
            who: peer.who.clone(),
            detail: format!("a work request on the QP to it{channel} failed: {err}"),
        }
    }

    /// Who we wait for when nothing moves: the left peer of the first lane whose data is due
    /// and none has arrived, else the right peer of the first lane with sends outstanding
    /// (credits or acknowledgements).
    fn waiting_for(&self, ring: &Ring) -> (&Peer, &'static str) {
        let lanes = || self.job.plans.iter().zip(&self.lanes).zip(&ring.lanes);
        let starved = lanes().position(|((plan, p), lane)| {
            p.processed < plan.recvs.len() && lane.arrived.is_empty()
        });
        if let Some(k) = starved {
            return (self.left(k), "data");
        }
        let owing = lanes()
            .position(|((plan, p), _)| p.completed < plan.sends.len())
            .unwrap_or(0);
        (self.right(owing), "credits or acknowledgements")
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
