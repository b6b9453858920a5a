//! The engine that runs a [`Plan`] on the ring: posts each piece while it holds a credit,
//! applies arrivals in order, returns the credits.

use super::*;

impl Comm {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn pump(
        &mut self,
        coll: Coll,
        plan: &Plan,
        src_off: usize,
        dst_off: usize,
        dtype: DataType,
        op: RedOp,
    ) -> Result<()> {
        let left_who = self.neighbour(-1).who();
        let right_who = self.neighbour(1).who();
        let left_rank = self.neighbour(-1).rank;
        let right_rank = self.neighbour(1).rank;
        let peer_timeout = self.peer_timeout;
        let Comm {
            ring,
            mem,
            star,
            tracer,
            phases,
            ..
        } = self;
        phases.collectives += 1;
        let ring = ring
            .as_mut()
            .expect("a ring when the world has more than one rank");
        let Memory::Registered(data) = mem else {
            unreachable!("a ring has registered memory")
        };
        let (nsend, nrecv) = (plan.sends.len(), plan.recvs.len());
        let (mut posted, mut completed, mut processed) = (0usize, 0usize, 0usize);
        let mut wcs = WorkCompletion::array::<32>();
        let mut last_progress = Instant::now();
        let mut last_check = Instant::now();
        let mut spins = 0u32;
        let mut armed = false;
        let mut t = Instant::now();
        // lap(slot): charge the time since the last lap to `slot`.
        let lap = |t: &mut Instant, slot: &mut Duration| {
            let now = Instant::now();
            *slot += now - *t;
            *t = now;
        };
        while processed < nrecv || completed < nsend {
            let mut progress = false;
            // 1. Post what the credits and the dependencies allow.
            while posted < nsend && ring.credits > 0 && ring.sq_right < ring.sq_depth {
                let m = &plan.sends[posted];
                if m.after_recv.is_some_and(|r| r >= processed) {
                    break;
                }
                let slot = (ring.tx_seq % ring.nslots as u64) as u32;
                let len = m.range.len() as u32;
                let remote = ring
                    .peer_slots
                    .slice(slot * ring.slot_bytes as u32, len)
                    .ok_or_else(|| {
                        CollError::Failed(format!("a piece of {len} bytes does not fit a slot"))
                    })?;
                let sge = data
                    .sge(src_off + m.range.start..src_off + m.range.end)
                    .map_err(verbs("the source of a write"))?;
                let sges = [sge];
                let wr = SendWr::new(
                    WR_DATA,
                    SendOp::WriteWithImm(remote, ring.tx_seq as u32),
                    Payload::Sges(&sges),
                );
                ring.right.post_send(&[wr]).map_err(verbs(format!(
                    "posting the RDMA WRITE WITH IMM to {right_who}"
                )))?;
                ring.tx_seq += 1;
                ring.credits -= 1;
                ring.sq_right += 1;
                posted += 1;
                phases.writes += 1;
                progress = true;
            }
            lap(&mut t, &mut phases.post);
            // 2. Apply what has arrived, in order, and hand the slots back.
            while processed < nrecv && ring.sq_left < ring.sq_depth {
                let Some(&(imm, len)) = ring.arrived.front() else {
                    break;
                };
                let m = &plan.recvs[processed];
                if m.after_send.is_some_and(|s| s >= completed) {
                    break;
                }
                ring.arrived.pop_front();
                if imm != ring.rx_seq as u32 || len as usize != m.range.len() {
                    return Err(CollError::Failed(format!(
                        "{left_who} sent message {imm} of {len} bytes where message {} of {} \
                         bytes was due: do all ranks run the same collectives with the same \
                         sizes?",
                        ring.rx_seq as u32,
                        m.range.len()
                    )));
                }
                let at = (ring.rx_seq % ring.nslots as u64) as usize * ring.slot_bytes;
                let src = ring
                    .slots
                    .to_vec(at..at + len as usize)
                    .map_err(verbs("reading a slot"))?;
                let out = dst_off + m.range.start;
                match m.action {
                    Action::Reduce => {
                        let mut dst = data
                            .to_vec(out..dst_off + m.range.end)
                            .map_err(verbs("reading the destination"))?;
                        kernels::reduce(dtype, op, &mut dst, &src).map_err(CollError::Failed)?;
                        data.write(out, &dst)
                            .map_err(verbs("writing the destination"))?;
                    }
                    Action::Copy => data
                        .write(out, &src)
                        .map_err(verbs("writing the destination"))?,
                }
                ring.rx_seq += 1;
                processed += 1;
                phases.applied_bytes += u64::from(len);
                let credit = SendWr::new(
                    WR_CREDIT,
                    SendOp::SendWithImm(ring.rx_seq as u32),
                    Payload::None,
                );
                ring.left
                    .post_send(&[credit])
                    .map_err(verbs(format!("posting a credit to {left_who}")))?;
                ring.sq_left += 1;
                progress = true;
                if let Some(t) = tracer.as_mut() {
                    t(&TraceEvent {
                        coll,
                        msg: m,
                        buffer: &data
                            .to_vec(dst_off..dst_off + self_len(plan))
                            .map_err(verbs("reading the destination"))?,
                    });
                }
            }
            lap(&mut t, &mut phases.apply);
            // 3. Reap completions.
            let n = ring.cq.poll(&mut wcs).map_err(verbs("ibv_poll_cq"))?;
            for wc in &wcs[..n] {
                if !wc.is_success() {
                    let (who, rank) = if wc.qp_num() == ring.left.qpn() {
                        (&left_who, left_rank)
                    } else {
                        (&right_who, right_rank)
                    };
                    let err = wc.ok().expect_err("a failed completion");
                    return Err(CollError::RankGone {
                        rank,
                        who: who.clone(),
                        detail: format!("a work request on the QP to it failed: {err}"),
                    });
                }
                match wc.wr_id() {
                    WR_DATA => {
                        completed += 1;
                        ring.sq_right -= 1;
                    }
                    WR_CREDIT => ring.sq_left -= 1,
                    WR_RECV_DATA => {
                        let imm = wc.imm_data().ok_or_else(|| {
                            CollError::Failed(format!("{left_who} sent data without an immediate"))
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
            lap(&mut t, &mut phases.poll);
            // 4. Bounded waits: no progress for the peer timeout is a gone neighbour; the star
            // says at once when a rank died.
            if n > 0 || progress {
                last_progress = Instant::now();
                armed = false;
                spins = 0;
                continue;
            }
            spins = spins.wrapping_add(1);
            // Nothing to do: after a short spin, sleep until the CQ has a completion. A spinning
            // rank would hold a CPU that another rank, or SoftRoCE's kernel work, needs — with
            // 4 ranks on 2 cores every hop of the ring would wait for a scheduler time slice.
            // Arm, poll once more (a completion may have come before the arming), then wait.
            if spins >= SPINS_BEFORE_SLEEP {
                if !armed {
                    ring.cq
                        .req_notify(false)
                        .map_err(verbs("ibv_req_notify_cq"))?;
                    armed = true;
                    continue;
                }
                phases.sleeps += 1;
                let slept = ring.channel.wait(&ring.cq, SLEEP_SLICE);
                lap(&mut t, &mut phases.idle);
                match slept {
                    Ok(()) | Err(VerbsError::Timeout { .. }) => {}
                    Err(e) => return Err(verbs("waiting for a completion event")(e)),
                }
                armed = false;
                let now = Instant::now();
                if now.duration_since(last_check) >= Duration::from_millis(20) {
                    last_check = now;
                    star.check_alive()?;
                }
                if now.duration_since(last_progress) >= peer_timeout {
                    let (rank, who, waiting) = if processed < nrecv && ring.arrived.is_empty() {
                        (left_rank, left_who.clone(), "data")
                    } else {
                        (right_rank, right_who.clone(), "credits or acknowledgements")
                    };
                    return Err(CollError::RankGone {
                        rank,
                        who,
                        detail: format!(
                            "no {waiting} from it for {:.0} s (the peer timeout)",
                            peer_timeout.as_secs_f64()
                        ),
                    });
                }
                continue;
            }
            std::hint::spin_loop();
            lap(&mut t, &mut phases.idle);
        }
        Ok(())
    }
}
