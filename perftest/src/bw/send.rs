//! The sending side of a phase: one [`TxQp`] per QP with its post list built once, and the
//! posting that keeps each send queue full.

use super::*;

/// One QP's sending state within a phase.
pub(super) struct TxQp<'a> {
    pub(super) qp: &'a Qp,
    pub(super) batch: Vec<SendWr<'a>>,
    pub(super) sges: &'a [Sge<'a>],
    pub(super) remote: RemoteBuf,
    pub(super) remote_slots: u64,
    pub(super) remote_stride: u64,
    pub(super) posted: u64,
    pub(super) completed: u64,
    pub(super) target: u64,
    pub(super) signaled_upto: u64,
    /// The request count at which the next signaled request falls.
    pub(super) next_signal: u64,
}

/// A phase's sender settings.
pub(super) struct TxCfg {
    pub(super) window: u64,
    pub(super) cq_mod: u64,
    pub(super) post_list: u64,
    pub(super) size: usize,
    /// Messages of the earlier phases of this size (sequence numbers continue).
    pub(super) seq_base: Vec<u64>,
    /// Stamp each message's sequence number into its slot before posting it (`--validate`).
    pub(super) stamp: bool,
    /// Choose the slots (local and remote) per message.
    pub(super) per_post: bool,
    pub(super) inline: bool,
}

const RUNNING: u64 = u64::MAX / 2;

/// Fills `tx`'s window with post lists (the last list of a run may be shorter). Returns how
/// many requests were posted.
#[inline]
pub(super) fn post_some(
    tx: &mut TxQp<'_>,
    q: usize,
    c: &TxCfg,
    mr: &Mr,
    layout: &Layout,
) -> Result<u64> {
    let mut total = 0;
    loop {
        let room = c.window - (tx.posted - tx.completed);
        let n = c.post_list.min(tx.target - tx.posted);
        if n == 0 || room < n {
            return Ok(total);
        }
        post_list(tx, q, n, c, mr, layout)?;
        total += n;
    }
}

/// Posts the next `n` requests of `tx` as one list.
#[inline]
fn post_list(
    tx: &mut TxQp<'_>,
    q: usize,
    n: u64,
    c: &TxCfg,
    mr: &Mr,
    layout: &Layout,
) -> Result<()> {
    for k in 0..n {
        let count = tx.posted + k;
        let wr = &mut tx.batch[k as usize];
        wr.wr_id = wr_id(q, count);
        // One signaled request every `cq_mod` (a countdown, not a division per request), and
        // the last one always.
        wr.signaled = count + 1 == tx.next_signal || count + 1 == tx.target;
        if count + 1 == tx.next_signal {
            tx.next_signal += c.cq_mod;
        }
        if c.per_post {
            let seq = c.seq_base[q] + count;
            let slot = (seq % tx.sges.len() as u64) as usize;
            wr.payload = Payload::Sges(&tx.sges[slot..slot + 1]);
            let rslot = seq % tx.remote_slots;
            let remote = RemoteBuf {
                addr: tx.remote.addr + rslot * tx.remote_stride,
                ..tx.remote
            };
            wr.op = match wr.op {
                SendOp::Write(_) => SendOp::Write(remote),
                SendOp::WriteWithImm(_, imm) => SendOp::WriteWithImm(remote, imm),
                SendOp::Read(_) => SendOp::Read(remote),
                other => other,
            };
            if c.stamp {
                let off = layout.src(q, slot);
                pattern::stamp_mr(mr, off, c.size, seq, false)?;
            }
        }
    }
    let list = &tx.batch[..n as usize];
    let r = if c.inline {
        tx.qp.post_send_inline(list, mr)
    } else {
        tx.qp.post_send(list)
    };
    r.with_context(|| format!("ibv_post_send on QP {q}"))?;
    tx.posted += n;
    if tx.batch[n as usize - 1].signaled {
        tx.signaled_upto = tx.posted;
    }
    Ok(())
}

/// The source SGEs of every QP's slots (an atomic reads or writes 8 bytes).
pub(super) fn source_sges<'m>(
    cfg: &Config,
    src: &'m [Mr],
    layout: &Layout,
    n: usize,
) -> Result<Vec<Vec<Sge<'m>>>> {
    let nq = cfg.qps as usize;
    (0..nq)
        .map(|q| {
            (0..layout.src_slots)
                .map(|slot| {
                    let off = layout.src(q, slot);
                    let len = if cfg.tool.kind == TestKind::Atomic {
                        8
                    } else {
                        n
                    };
                    src_mr(src, q).sge(off..off + len)
                })
                .collect::<std::result::Result<Vec<_>, _>>()
        })
        .collect::<std::result::Result<Vec<_>, _>>()
        .context("building the SGEs")
}

/// A phase's sender settings: the window (with stamping, no more requests in flight than
/// source slots), the post list, the signaling interval and whether requests go inline.
pub(super) fn tx_cfg(
    cfg: &Config,
    layout: &Layout,
    n: usize,
    remote: &Endpoints,
    inline_limit: u32,
    seq_base: Vec<u64>,
) -> TxCfg {
    let stamp = cfg.validate && matches!(cfg.tool.kind, TestKind::Write | TestKind::Send);
    // Stamping rewrites a source slot before each post: no more requests in flight than slots.
    let window = if stamp {
        u64::from(cfg.queues.tx_depth).min(layout.src_slots as u64)
    } else {
        u64::from(cfg.queues.tx_depth)
    };
    let post_list = u64::from(cfg.queues.post_list).min(window);
    TxCfg {
        window,
        // Every full window must hold a signaled request (see QueueShape::effective_cq_mod).
        cq_mod: u64::from(cfg.queues.effective_cq_mod()).min(window - post_list + 1),
        post_list,
        size: n,
        seq_base,
        stamp,
        per_post: stamp || layout.src_slots > 1 || remote.qps.iter().any(|r| r.slots > 1),
        inline: n as u64 <= u64::from(inline_limit) && inline_limit > 0,
    }
}

/// One sender per QP: its post list of requests aimed at the peer's buffer, built once per phase
/// (only `wr_id`, the signaled flag and the slots change before a post).
pub(super) fn senders<'a>(
    cfg: &Config,
    qps: &'a [Qp],
    remote: &Endpoints,
    ahs: &'a [Ah],
    src_sges: &'a [Vec<Sge<'a>>],
    c: &TxCfg,
    mode: RunMode,
) -> Vec<TxQp<'a>> {
    let (nq, n) = (cfg.qps as usize, c.size);
    let mut txs: Vec<TxQp<'a>> = Vec::with_capacity(nq);
    for q in 0..nq {
        let r = &remote.qps[q];
        let (rb, op) = remote_op(cfg, r, n);
        let sges = &src_sges[q][..];
        let mut wr = SendWr::new(0, op, Payload::Sges(&sges[..1]));
        if let Some(ah) = ahs.get(q) {
            wr = wr.to(UdDest {
                ah,
                remote_qpn: r.qpn,
                remote_qkey: remote.qkey,
            });
        }
        txs.push(TxQp {
            qp: &qps[q],
            batch: vec![wr; cfg.queues.post_list as usize],
            sges,
            remote: rb,
            remote_slots: u64::from(r.slots),
            remote_stride: u64::from(r.slot_stride),
            posted: 0,
            completed: 0,
            target: match mode {
                RunMode::Iters(k) => k,
                RunMode::Duration(_) => RUNNING,
            },
            signaled_upto: 0,
            next_signal: c.cq_mod,
        });
    }
    txs
}
