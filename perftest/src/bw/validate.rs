//! `--validate`: the buffers prepared before a size, each received message checked as it
//! arrives, the targets checked after the measured phase.

use super::*;

/// Buffers for `--validate`: the RDMA Write target is cleared (so a message that never landed
/// shows); the RDMA Read source holds message 0 of each QP and the read destination is cleared.
pub(super) fn prepare(s: &Session<'_>, size: u64) -> Result<()> {
    if !s.cfg.validate {
        return Ok(());
    }
    let n = size as usize;
    let Buffers { src, dst, layout } = &s.link.res.bufs;
    for (q, rx) in dst.iter().enumerate() {
        match s.cfg.tool.kind {
            TestKind::Write => rx.fill(layout.dst_region(q), 0)?,
            TestKind::Read => {
                let d = layout.dst(q, 0);
                pattern::fill_body_mr(rx, d..d + n, q)?;
                pattern::stamp_mr(rx, d, n, 0, false)?;
                src_mr(src, q).fill(layout.src_region(q), 0)?;
            }
            TestKind::Send | TestKind::Atomic => {}
        }
    }
    Ok(())
}

/// Checks one received message against the next expected sequence number of its QP. On a
/// lossy transport a message may be missing: the body is checked and the stamp must not go
/// backwards.
pub(super) fn check_received(
    msg: &[u8],
    q: usize,
    next: &mut u64,
    lossy: bool,
    ph: Phase,
    size: u64,
) -> Result<()> {
    if !lossy {
        if let Err(m) = pattern::check(msg, q, *next, false) {
            bail!(
                "--validate: received message {} on QP {q} (size {size}, {ph}) is wrong: {m}",
                *next
            );
        }
        *next += 1;
        return Ok(());
    }
    match pattern::check_body(msg, q) {
        Err(m) => {
            bail!("--validate: a received message on QP {q} (size {size}, {ph}) is wrong: {m}")
        }
        Ok(Some(seq)) if seq < *next => bail!(
            "--validate: QP {q} received message {seq} after message {} (size {size})",
            *next - 1
        ),
        Ok(Some(seq)) => *next = seq + 1,
        Ok(None) => *next += 1,
    }
    Ok(())
}

/// The owner's checks after the measured phase: RDMA Write targets hold the last message
/// written to each slot; RDMA Read destinations hold the peer's message 0.
pub(super) fn validate(
    s: &mut Session<'_>,
    size: u64,
    warm: &PhaseOut,
    out: &PhaseOut,
) -> Result<()> {
    let n = size as usize;
    let Buffers { src, dst, layout } = &s.link.res.bufs;
    match s.cfg.tool.kind {
        TestKind::Write if s.bw_peer_sends() => {
            for (q, rx) in dst.iter().enumerate() {
                let total = warm
                    .peer_sent
                    .get(q)
                    .copied()
                    .unwrap_or(0)
                    .checked_add(out.peer_sent.get(q).copied().unwrap_or(0))
                    .context("--validate: the peer's message counts overflow (protocol error)")?;
                let slots = layout.dst_slots as u64;
                for slot in 0..slots {
                    let Some(seq) = pattern::last_seq_in_slot(total, slots, slot) else {
                        continue;
                    };
                    let off = layout.dst(q, slot as usize);
                    if let Err(m) = pattern::check(&rx.to_vec(off..off + n)?, q, seq, false) {
                        bail!(
                            "--validate: after {total} RDMA writes of {size} bytes, QP {q}'s \
                             slot {slot} should hold message {seq}, but {m}"
                        );
                    }
                }
            }
        }
        TestKind::Read if s.bw_sends() => {
            for q in 0..s.cfg.qps as usize {
                let off = layout.src(q, 0);
                let got = src_mr(src, q).to_vec(off..off + n)?;
                if let Err(m) = pattern::check(&got, q, 0, false) {
                    bail!(
                        "--validate: what QP {q} read ({size} bytes) differs from the peer's \
                         buffer: {m}"
                    );
                }
            }
        }
        _ => {}
    }
    Ok(())
}
