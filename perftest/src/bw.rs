//! The bandwidth tests: RDMA Write, RDMA Read, Send and the atomics, one size at a time, every
//! size of a sweep through the same code.
//!
//! One loop serves every role. A side that sends keeps every QP's send queue full (post lists of
//! `-l`, one signaled request every `-Q`), drains the shared CQ 32 completions at a time and
//! takes a timestamp only when completions arrived; a side that receives re-posts each consumed
//! receive as it goes. Nothing in the loop allocates: the requests are built once per size and
//! only their `wr_id`, signaled flag and (with `--validate`) slot are rewritten before a post.
//! Every so often (a clock read per 64 turns of the loop, or when idle) the loop watches the
//! clock (`-D`, stalls) and the peer (its tally, heartbeats, an ERROR).
//!
//! The measurement (see `docs/measurement.md`): bytes of the measured phase over the time from
//! the first post to the last completion; the peak is the best bandwidth over windows of
//! `max(tx depth × QPs, messages / 100)` completions.

use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use verbs_lab::verbs::{
    Ah, Mr, Payload, Qp, RemoteBuf, SendOp, SendWr, Sge, UdDest, WcOpcode, WorkCompletion,
};

use crate::conn::{Layout, Link, Resources};
use crate::engine::{
    backoff, check_tally, completed_through, poll_or_sleep, remote_op, send_tally, wc_error, wr_id,
    PeerWatch, Session, LOSSY_GRACE, POLL_BATCH, QP_SHIFT, SEQ_MASK,
};
use crate::params::{Config, RunMode};
use crate::pattern;
use crate::proto::Endpoints;
use crate::proto::{Msg, Phase, WireRow};
use crate::result::{BwRow, TestKind};
use verbs_lab::diag::{device_report, PortCounters};

mod peak;
mod send;
mod validate;

use peak::measured;
pub use peak::{Measured, PeakLog, PhaseOut};
use send::{post_some, senders, source_sges, tx_cfg};
use validate::{check_received, prepare, validate};

/// Measures one message size; returns the row this side reports (none on a server that only
/// serves a one-way test).
pub fn run_size(s: &mut Session<'_>, size: u64) -> Result<Option<BwRow>> {
    let cfg = s.cfg;
    prepare(s, size)?;
    s.ch.sync(Phase::Ready, size).map_err(anyhow::Error::new)?;

    let warm = if cfg.warmup > 0 {
        phase(s, Phase::WarmUp, size, RunMode::Iters(cfg.warmup), &[], &[])
            .with_context(|| format!("warm-up of size {size}"))?
    } else {
        PhaseOut::default()
    };
    s.enter_measure(size)?;
    let out = phase(
        s,
        Phase::Measure,
        size,
        cfg.mode,
        &warm.sent,
        &warm.peer_sent,
    )
    .with_context(|| format!("measurement of size {size}"))?;

    if cfg.validate {
        validate(s, size, &warm, &out)?;
    }

    let measured = out.tx.as_ref().or(out.rx.as_ref());
    if let Some(m) = measured {
        s.measured(size, m.start, m.end);
    }
    let mine = measured.map(|m| m.row(size, cfg.no_peak));
    let row = exchange_rows(s, size, mine)?;
    s.ch.sync(Phase::Done, size).map_err(anyhow::Error::new)?;
    Ok(row)
}

/// The rows both sides print, as perftest's `xchg_bw_reports`: with `-b` each side sends its
/// own direction and prints the sum of both; in a one-way RDMA Write, Read or atomic test the
/// server measured nothing and prints the client's row. (The send test's server measures what
/// it received and prints that.)
fn exchange_rows(s: &mut Session<'_>, size: u64, mine: Option<BwRow>) -> Result<Option<BwRow>> {
    let cfg = s.cfg;
    let server_echoes = cfg.is_server() && !cfg.bidirectional && cfg.tool.kind != TestKind::Send;
    let client_reports = !cfg.is_server() && !cfg.bidirectional && cfg.tool.kind != TestKind::Send;
    if cfg.bidirectional || client_reports {
        let mine = mine.context("this side measured nothing")?;
        s.ch.send(&Msg::Result(WireRow::from(&mine)))
            .map_err(anyhow::Error::new)?;
        if client_reports {
            return Ok(Some(mine));
        }
    }
    if !(cfg.bidirectional || server_echoes) {
        return Ok(mine);
    }
    let what = format!("the {}'s result of size {size}", s.ch.peer_name());
    let theirs = match s
        .ch
        .recv_skipping_heartbeats(&what)
        .map_err(anyhow::Error::new)?
    {
        Msg::Result(w) if w.bytes == size => BwRow::from(w),
        Msg::Result(w) => bail!(
            "protocol out of step: the peer sent the result of size {}, expected {size}",
            w.bytes
        ),
        other => bail!(
            "protocol out of step: expected the peer's RESULT, got {}",
            other.name()
        ),
    };
    Ok(Some(match mine {
        Some(m) if cfg.bidirectional => sum_rows(&m, &theirs),
        _ => theirs,
    }))
}

/// Both directions of a bidirectional run: bandwidths and message rates add up; the elapsed
/// time is the longer one. The peak is the sum of each direction's peak, an upper bound when
/// the two peaks did not coincide.
pub fn sum_rows(a: &BwRow, b: &BwRow) -> BwRow {
    BwRow {
        bytes: a.bytes,
        iterations: a.iterations,
        peak_bps: a.peak_bps + b.peak_bps,
        avg_bps: a.avg_bps + b.avg_bps,
        msg_rate_mpps: a.msg_rate_mpps + b.msg_rate_mpps,
        elapsed: a.elapsed.max(b.elapsed),
    }
}

/// Receive-side state of a phase.
struct Rx {
    received: Vec<u64>,
    /// Next expected sequence number per QP (validation).
    next_seq: Vec<u64>,
    /// Slots to re-post per QP.
    pending: Vec<Vec<usize>>,
    total: u64,
    last: Option<Instant>,
}

/// Runs one phase of one size: posts (if this side sends), receives (if it receives), exchanges
/// tallies. `sent_before` / `peer_sent_before` count the messages of the earlier phases of this
/// size per QP, sent by this side and by the peer: sequence numbers continue across phases.
fn phase(
    s: &mut Session<'_>,
    ph: Phase,
    size: u64,
    mode: RunMode,
    sent_before: &[u64],
    peer_sent_before: &[u64],
) -> Result<PhaseOut> {
    let cfg = s.cfg;
    let nq = cfg.qps as usize;
    let sends = s.bw_sends();
    let receives = s.bw_receives();
    let peer_sends = s.bw_peer_sends();
    let lossy = s.lossy();
    let rx_off = s.rx_offset();
    let (cq_timeout, peer_timeout) = (s.cq_timeout, s.peer_timeout);
    let software = s.yields();
    let base =
        |v: &[u64]| -> Vec<u64> { (0..nq).map(|q| v.get(q).copied().unwrap_or(0)).collect() };
    let seq_base = base(sent_before);
    let rx_seq_base = base(peer_sent_before);

    let Session { link, ch, .. } = s;
    let Link {
        res,
        remote,
        ahs,
        inline_limit,
        ..
    } = link;
    let Resources {
        src: mr,
        dst,
        qps,
        cq,
        channel,
        layout,
        ..
    } = res;
    let layout = *layout;
    let n = size as usize;
    // The port's counters as the phase starts, for the stall message (read outside the loop).
    let counters = PortCounters::snapshot(link.dev.ctx.name(), cfg.ib_port);

    // Requests, built once per phase.
    let src_sges = source_sges(cfg, mr, &layout, n)?;
    let c = tx_cfg(cfg, &layout, n, remote, *inline_limit, seq_base);
    let mut txs = if sends {
        senders(cfg, qps, remote, ahs, &src_sges, &c, mode)
    } else {
        Vec::new()
    };
    let mut rx = Rx {
        received: vec![0; nq],
        next_seq: rx_seq_base,
        // Re-posted after every poll, so at most one poll's worth is pending.
        pending: (0..nq).map(|_| Vec::with_capacity(POLL_BATCH)).collect(),
        total: 0,
        last: None,
    };

    let mut wcs = WorkCompletion::array::<POLL_BATCH>();
    let mut watch = PeerWatch::new(ph, size);
    let t_phase = Instant::now();
    let deadline = match mode {
        RunMode::Duration(d) => Some(t_phase + d),
        RunMode::Iters(_) => None,
    };
    let win0 = u64::from(cfg.tx_depth.max(cfg.effective_cq_mod())) * nq as u64;
    let mut tx_log = PeakLog::new(win0, t_phase);
    let mut rx_log = PeakLog::new(win0, t_phase);
    let mut first_post: Option<Instant> = None;
    let mut last_completion = t_phase;
    let mut last_progress = t_phase;
    let mut tx_total = 0u64;
    let mut tx_done = !sends;
    let mut rx_done = !receives;
    let mut posting = sends;
    let mut stopped = false;
    let mut turns = 0u32;
    let mut tx_done_at = t_phase;
    let mut sleep = false;

    loop {
        let mut posted_now = 0;
        if posting {
            if first_post.is_none() {
                first_post = Some(Instant::now());
            }
            for (q, tx) in txs.iter_mut().enumerate() {
                posted_now += post_some(tx, q, &c, mr, &layout)?;
            }
        }
        // With -e, a loop that found nothing to do last time sleeps on the channel.
        let got = poll_or_sleep(cq, channel.as_ref(), &mut wcs, sleep && posted_now == 0)?;
        sleep = false;
        turns = turns.wrapping_add(1);
        if got > 0 {
            let now = Instant::now();
            for wc in &wcs[..got] {
                if !wc.is_success() {
                    return Err(wc_error(wc));
                }
                let q = (wc.wr_id() >> QP_SHIFT) as usize;
                if q >= nq {
                    bail!("a completion with an unknown wr_id {:#x}", wc.wr_id());
                }
                if matches!(wc.opcode(), WcOpcode::RECV | WcOpcode::RECV_RDMA_WITH_IMM) {
                    let slot = (wc.wr_id() & SEQ_MASK) as usize;
                    let want = n + rx_off;
                    if wc.byte_len() as usize != want {
                        bail!(
                            "QP {q} received {} bytes, expected {want}: the peer sent another size",
                            wc.byte_len()
                        );
                    }
                    if cfg.validate {
                        let off = layout.dst(q, slot) + rx_off;
                        let msg = dst[q].to_vec(off..off + n)?;
                        check_received(&msg, q, &mut rx.next_seq[q], lossy, ph, size)?;
                    }
                    rx.received[q] += 1;
                    rx.total += 1;
                    rx.pending[q].push(slot);
                } else {
                    let Some(tx) = txs.get_mut(q) else {
                        bail!(
                            "a send completion ({}) on a side that sends nothing",
                            wc.opcode()
                        );
                    };
                    let done = completed_through(tx.completed, wc.wr_id());
                    if done > tx.completed {
                        tx_total += done - tx.completed;
                        tx.completed = done;
                    }
                }
            }
            if receives {
                for (q, qp) in qps.iter().enumerate().take(nq) {
                    if !rx.pending[q].is_empty() {
                        crate::engine::post_receives(
                            qp,
                            &dst[q],
                            &layout,
                            q,
                            rx.pending[q].drain(..),
                        )?;
                    }
                }
                if rx.total > 0 {
                    rx.last = Some(now);
                    rx_log.record(rx.total, now);
                    watch.last_sign = now;
                }
            }
            if sends {
                last_completion = now;
                tx_log.record(tx_total, now);
            }
            last_progress = now;
        }

        // Housekeeping (clock, peer, deadline, stall): every 64 turns, every 8 when idle, every
        // idle turn with -e (which may then sleep). A clock read is not free everywhere (over a
        // microsecond on the HPET of an emulated guest): an idle spin should mostly poll.
        let idle = got == 0 && posted_now == 0;
        let due = if idle {
            channel.is_some() || turns & 7 == 0
        } else {
            turns & 63 == 0
        };
        if !due {
            continue;
        }
        let now = Instant::now();
        if let Some(dl) = deadline {
            if sends && !stopped && now >= dl {
                // Stop: every QP ends on a signaled request, so its last completion is seen.
                stopped = true;
                for tx in txs.iter_mut() {
                    tx.target = if tx.posted > tx.signaled_upto {
                        tx.posted + 1
                    } else {
                        tx.posted
                    };
                }
            }
        }
        if sends && !tx_done && txs.iter().all(|t| t.completed >= t.target) {
            tx_done = true;
            posting = false;
            tx_done_at = last_completion;
            let per_qp = txs.iter().map(|t| t.posted).collect();
            send_tally(ch, ph, size, per_qp)?;
        }
        if receives && !rx_done {
            if let Some(t) = &watch.tally {
                check_tally(t, nq)?;
                let all = rx.received.iter().zip(&t.per_qp).all(|(r, w)| r >= w);
                // A lossy transport may never deliver them all: done when quiet for a while.
                let quiet = now.duration_since(rx.last.unwrap_or(t_phase).max(watch.last_sign));
                rx_done = all || (lossy && quiet > LOSSY_GRACE);
            }
        }
        if tx_done && rx_done {
            break;
        }
        watch.check(ch, now)?;
        if sends && !tx_done {
            watch.beat(ch, now)?;
            let outstanding = txs.iter().any(|t| t.posted > t.completed);
            if outstanding && now.duration_since(last_progress) > cq_timeout {
                bail!(
                    "no completion for {:.1} s ({} of {} requests completed): the peer stopped \
                     responding, or the QP timeout (-u {}) is too short for this link; {}",
                    now.duration_since(last_progress).as_secs_f64(),
                    tx_total,
                    txs.iter().map(|t| t.posted).sum::<u64>(),
                    cfg.qp_timeout,
                    device_report(qps.first(), &counters)
                );
            }
        }
        if receives && !rx_done {
            watch.alive(now, peer_timeout, "the peer's messages")?;
            watch.within_phase(ch, now, "the peer's messages")?;
        }
        if idle && software && channel.is_none() {
            backoff(now.duration_since(last_progress));
        }
        sleep = idle;
    }

    let mut out = PhaseOut {
        sent: txs.iter().map(|t| t.posted).collect(),
        ..PhaseOut::default()
    };
    if sends {
        let start = first_post.unwrap_or(t_phase);
        let span = (start, tx_done_at);
        out.tx = Some(measured(cfg, mode, size, tx_total, span, win0, &tx_log));
    }
    if receives {
        let span = (t_phase, rx.last.unwrap_or(t_phase));
        out.rx = Some(measured(cfg, mode, size, rx.total, span, win0, &rx_log));
        if !lossy {
            if let Some(t) = &watch.tally {
                for (q, (r, w)) in rx.received.iter().zip(&t.per_qp).enumerate() {
                    if r != w {
                        bail!("QP {q} received {r} messages but the peer sent {w} (size {size})");
                    }
                }
            }
        }
    }
    if peer_sends {
        let t = match watch.tally.take() {
            Some(t) => t,
            None => watch.wait_tally(ch)?,
        };
        check_tally(&t, nq)?;
        out.peer_sent = t.per_qp;
    }
    Ok(out)
}
