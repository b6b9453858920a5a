//! The sending side of a phase: one [`TxQp`] per QP with its post list checked and converted
//! once (a [`SendList`]: between posts only the request id, the signaled flag and, where slots
//! rotate, the addresses are written), and the posting that keeps each send queue full.

use super::*;

/// One QP's sending state within a phase.
pub(super) struct TxQp<'a> {
    /// The post list, converted once; the last post of a run may use a prefix of it.
    pub(super) list: SendList<'a, 'a>,
    pub(super) sges: &'a [Sge<'a>],
    pub(super) remote: RemoteBuf,
    /// Whether the requests name a remote buffer whose slot rotates (RDMA WRITE and READ; not
    /// a SEND, not an atomic, which always hits the same word).
    pub(super) remote_slots_rotate: bool,
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
    if c.post_list == 1 && !c.per_post {
        return post_singles(tx, q, c);
    }
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

/// [`post_some`] for a post list of one request whose buffers stay put (every run without
/// `--post_list`, `--validate` or slots that rotate): the one request is rewritten and posted,
/// the counters kept in registers. Not inlined: in its own frame the loop is about 20
/// instructions a message shorter than inlined into the phase, whose many live values spill.
#[inline(never)]
fn post_singles(tx: &mut TxQp<'_>, q: usize, c: &TxCfg) -> Result<u64> {
    let start = tx.posted;
    let limit = tx.target.min(tx.completed + c.window);
    let (target, cq_mod) = (tx.target, c.cq_mod);
    let (mut posted, mut next_signal) = (start, tx.next_signal);
    let mut signaled_upto = tx.signaled_upto;
    let mut result = Ok(());
    while posted < limit {
        let at_signal = posted + 1 == next_signal;
        let signaled = at_signal || posted + 1 == target;
        if at_signal {
            next_signal += cq_mod;
        }
        tx.list.set(0, wr_id(q, posted), signaled);
        if let Err(e) = tx.list.post(1) {
            result = Err(anyhow::Error::new(e).context(format!("ibv_post_send on QP {q}")));
            break;
        }
        posted += 1;
        if signaled {
            signaled_upto = posted;
        }
    }
    tx.posted = posted;
    tx.next_signal = next_signal;
    tx.signaled_upto = signaled_upto;
    result.map(|()| posted - start)
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
    let mut last_signaled = false;
    for k in 0..n {
        let count = tx.posted + k;
        // One signaled request every `cq_mod` (a countdown, not a division per request), and
        // the last one always.
        let signaled = count + 1 == tx.next_signal || count + 1 == tx.target;
        if count + 1 == tx.next_signal {
            tx.next_signal += c.cq_mod;
        }
        tx.list.set(k as usize, wr_id(q, count), signaled);
        last_signaled = signaled;
        if c.per_post {
            let seq = c.seq_base[q] + count;
            let slot = (seq % tx.sges.len() as u64) as usize;
            // A SEND has no remote buffer: only its local slot rotates.
            let remote = tx.remote_slots_rotate.then(|| RemoteBuf {
                addr: tx.remote.addr + (seq % tx.remote_slots) * tx.remote_stride,
                ..tx.remote
            });
            tx.list
                .retarget(k as usize, tx.sges[slot], remote)
                .with_context(|| format!("pointing request {k} of QP {q} at slot {slot}"))?;
            if c.stamp {
                let off = layout.src(q, slot);
                pattern::stamp_mr(mr, off, c.size, seq, false)?;
            }
        }
    }
    tx.list
        .post(n as usize)
        .with_context(|| format!("ibv_post_send on QP {q}"))?;
    tx.posted += n;
    if last_signaled {
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

/// One sender per QP: its post list of requests aimed at the peer's buffer, checked and
/// converted once per phase (only `wr_id`, the signaled flag and the slots change before a
/// post). Inline requests copy out of the QP's source region (`src`).
#[allow(clippy::too_many_arguments)]
pub(super) fn senders<'a>(
    cfg: &Config,
    qps: &'a [Qp],
    remote: &Endpoints,
    ahs: &'a [Ah],
    src: &'a [Mr],
    src_sges: &'a [Vec<Sge<'a>>],
    c: &TxCfg,
    mode: RunMode,
) -> Result<Vec<TxQp<'a>>> {
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
        let inline_from = c.inline.then(|| src_mr(src, q));
        let list = qps[q]
            .send_list(&vec![wr; c.post_list as usize], inline_from)
            .with_context(|| format!("building the send requests of QP {q}"))?;
        txs.push(TxQp {
            list,
            sges,
            remote: rb,
            remote_slots_rotate: matches!(
                op,
                SendOp::Write(_) | SendOp::WriteWithImm(..) | SendOp::Read(_)
            ),
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
    Ok(txs)
}
