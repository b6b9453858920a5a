//! The ring schedules: which byte range each rank sends to its right neighbour, in which order,
//! which range each message from its left neighbour lands in, and what waits for what.
//!
//! A collective on `count` elements over `n` ranks cuts the buffer into `n` chunks whose sizes
//! differ by at most one element ([`chunk`]); each chunk is cut into *pieces* of at most one
//! receive slot. A [`Plan`] lists, for one rank, its messages to the right in posting order and
//! its messages from the left in arrival order (RC delivers them in order). Pieces that would be
//! empty (fewer elements than ranks) are left out on both sides, which compute the same plan.
//!
//! **Reduce-scatter** (n−1 steps): at step s rank r sends chunk (r−1−s) mod n and reduces the
//! chunk (r−2−s) mod n it receives into its own copy; after the last step it holds chunk r fully
//! reduced. **All-gather** (n−1 steps): at step s rank r sends chunk (r−s) mod n and stores the
//! chunk (r−1−s) it receives. **All-reduce** is the one followed by the other: 2(n−1) steps, and
//! every rank sends 2(n−1)/n of the buffer. In every ring step what is sent is what was received
//! in the step before, piece by piece — so piece j of step s+1 goes out as soon as piece j of
//! step s has been reduced, while later pieces of step s are still arriving: the pipeline.
//!
//! **Broadcast** is a chain from the root along the ring: each rank forwards piece j as soon as
//! it has it. **Sendrecv** sends the whole input to the right and receives the left's into the
//! output, with nothing to wait for.

use std::ops::Range;

/// The collectives a [`Plan`] can describe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coll {
    AllReduce,
    ReduceScatter,
    AllGather,
    Broadcast { root: usize },
    SendRecv,
}

impl Coll {
    pub fn name(self) -> &'static str {
        match self {
            Coll::AllReduce => "all_reduce",
            Coll::ReduceScatter => "reduce_scatter",
            Coll::AllGather => "all_gather",
            Coll::Broadcast { .. } => "broadcast",
            Coll::SendRecv => "sendrecv",
        }
    }

    /// nccl-tests' bus-bandwidth factor: what makes busbw comparable with the link speed
    /// whatever the number of ranks.
    pub fn busbw_factor(self, n: usize) -> f64 {
        let n = n as f64;
        match self {
            Coll::AllReduce => 2.0 * (n - 1.0) / n,
            Coll::ReduceScatter | Coll::AllGather => (n - 1.0) / n,
            Coll::Broadcast { .. } | Coll::SendRecv => 1.0,
        }
    }

    /// Whether received data is reduced (rather than stored).
    pub fn reduces(self) -> bool {
        matches!(self, Coll::AllReduce | Coll::ReduceScatter)
    }
}

/// What a rank does with a message from its left neighbour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// `buf[range] = buf[range] op message`
    Reduce,
    /// `buf[range] = message`
    Copy,
}

/// What travels on one link in one message: the ring step (0-based) and the chunk it belongs
/// to, for narration, and its bytes. A rank's message to its right neighbour is, piece for
/// piece, the message that neighbour's plan expects from its left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Piece {
    pub step: usize,
    pub chunk: usize,
    /// Bytes of the buffer: read from the source by the sender, written to the destination
    /// by the receiver.
    pub range: Range<usize>,
}

/// One message to the right neighbour.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendMsg {
    pub piece: Piece,
    /// Index into [`Plan::recvs`] of the message that must have been processed first.
    pub after_recv: Option<usize>,
}

/// One message from the left neighbour.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecvMsg {
    pub piece: Piece,
    pub action: Action,
    /// Index into [`Plan::sends`] of a send reading this range that must have *completed* (the
    /// NIC has read its bytes) before this message may overwrite it.
    pub after_send: Option<usize>,
}

/// One rank's part of a collective.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Plan {
    pub sends: Vec<SendMsg>,
    pub recvs: Vec<RecvMsg>,
}

impl Plan {
    /// Bytes this rank sends.
    pub fn bytes_sent(&self) -> usize {
        self.sends.iter().map(|m| m.piece.range.len()).sum()
    }
}

/// Chunk `i` of `count` elements cut into `n` (elements): the first `count % n` chunks hold one
/// element more.
pub fn chunk(count: usize, n: usize, i: usize) -> Range<usize> {
    let base = count / n;
    let extra = count % n;
    let start = i * base + i.min(extra);
    start..start + base + usize::from(i < extra)
}

/// The pieces of a byte range: consecutive sub-ranges of at most `piece_bytes` bytes.
fn pieces(r: Range<usize>, piece_bytes: usize) -> impl Iterator<Item = Range<usize>> {
    (r.start..r.end)
        .step_by(piece_bytes.max(1))
        .map(move |s| s..(s + piece_bytes).min(r.end))
}

/// The rank `k` places to the right of `rank` (negative: to the left).
pub fn ring_offset(rank: usize, n: usize, k: isize) -> usize {
    (rank as isize + k).rem_euclid(n as isize) as usize
}

/// The plan of `rank` among `n` for `coll` on `count` elements of `elem` bytes, with pieces of at
/// most `slot_bytes` (rounded down to whole elements). Errors on nonsense input.
pub fn plan(
    coll: Coll,
    rank: usize,
    n: usize,
    count: usize,
    elem: usize,
    slot_bytes: usize,
) -> Result<Plan, String> {
    if n == 0 || rank >= n {
        return Err(format!("rank {rank} of a world of {n}"));
    }
    if elem == 0 || slot_bytes < elem {
        return Err(format!(
            "slots of {slot_bytes} bytes cannot hold one {elem}-byte element"
        ));
    }
    let piece_bytes = slot_bytes / elem * elem;
    let bytes = |c: usize| {
        let r = chunk(count, n, c);
        r.start * elem..r.end * elem
    };
    if n == 1 {
        return Ok(Plan::default());
    }
    let mut p = match coll {
        Coll::ReduceScatter | Coll::AllGather | Coll::AllReduce => {
            ring_plan(&ring_steps(coll, rank, n), bytes, piece_bytes)?
        }
        Coll::Broadcast { root } => chain_plan(root, rank, n, 0..count * elem, piece_bytes)?,
        // Source and destination are different buffers: nothing to order.
        Coll::SendRecv => return Ok(sendrecv_plan(0..count * elem, piece_bytes)),
    };
    link_overwrites(&mut p);
    Ok(p)
}

/// The ring steps of reduce-scatter, all-gather or both (all-reduce), as (chunk sent, chunk
/// received, action).
fn ring_steps(coll: Coll, rank: usize, n: usize) -> Vec<(usize, usize, Action)> {
    let mut steps = Vec::new();
    if coll != Coll::AllGather {
        for s in 0..n - 1 {
            let send = ring_offset(rank, n, -1 - s as isize);
            let recv = ring_offset(rank, n, -2 - s as isize);
            steps.push((send, recv, Action::Reduce));
        }
    }
    if coll != Coll::ReduceScatter {
        for s in 0..n - 1 {
            let send = ring_offset(rank, n, -(s as isize));
            let recv = ring_offset(rank, n, -1 - s as isize);
            steps.push((send, recv, Action::Copy));
        }
    }
    steps
}

/// The pieces of the ring steps: each send after step 0 forwards the piece received at the same
/// place in the step before. `bytes(c)` is chunk c's byte range.
fn ring_plan(
    steps: &[(usize, usize, Action)],
    bytes: impl Fn(usize) -> Range<usize>,
    piece_bytes: usize,
) -> Result<Plan, String> {
    let mut p = Plan::default();
    // Receive index of (step, piece), to link a send to the receive it forwards.
    let mut recv_at = std::collections::HashMap::new();
    for (s, &(send_c, recv_c, action)) in steps.iter().enumerate() {
        for (j, r) in pieces(bytes(send_c), piece_bytes).enumerate() {
            let after_recv =
                if s == 0 {
                    None
                } else {
                    Some(*recv_at.get(&(s - 1, j)).ok_or_else(|| {
                        format!("schedule bug: step {s} piece {j} forwards nothing")
                    })?)
                };
            p.sends.push(SendMsg {
                piece: Piece {
                    step: s,
                    chunk: send_c,
                    range: r,
                },
                after_recv,
            });
        }
        for (j, r) in pieces(bytes(recv_c), piece_bytes).enumerate() {
            recv_at.insert((s, j), p.recvs.len());
            p.recvs.push(RecvMsg {
                piece: Piece {
                    step: s,
                    chunk: recv_c,
                    range: r,
                },
                action,
                after_send: None,
            });
        }
    }
    Ok(p)
}

/// Broadcast: the chain from `root` along the ring over the byte range `all`; each rank but the
/// root receives every piece, each but the last forwards it.
fn chain_plan(
    root: usize,
    rank: usize,
    n: usize,
    all: Range<usize>,
    piece_bytes: usize,
) -> Result<Plan, String> {
    if root >= n {
        return Err(format!("root {root} is not a rank of a world of {n}"));
    }
    let mut p = Plan::default();
    let pos = ring_offset(rank, n, -(root as isize));
    if pos != 0 {
        for r in pieces(all.clone(), piece_bytes) {
            p.recvs.push(RecvMsg {
                piece: Piece {
                    step: pos - 1,
                    chunk: 0,
                    range: r,
                },
                action: Action::Copy,
                after_send: None,
            });
        }
    }
    if pos != n - 1 {
        for (j, r) in pieces(all, piece_bytes).enumerate() {
            p.sends.push(SendMsg {
                piece: Piece {
                    step: pos,
                    chunk: 0,
                    range: r,
                },
                after_recv: (pos != 0).then_some(j),
            });
        }
    }
    Ok(p)
}

/// Sendrecv: every piece of `all` to the right, every piece from the left to the same place.
fn sendrecv_plan(all: Range<usize>, piece_bytes: usize) -> Plan {
    let mut p = Plan::default();
    for r in pieces(all, piece_bytes) {
        let piece = Piece {
            step: 0,
            chunk: 0,
            range: r,
        };
        p.sends.push(SendMsg {
            piece: piece.clone(),
            after_recv: None,
        });
        p.recvs.push(RecvMsg {
            piece,
            action: Action::Copy,
            after_send: None,
        });
    }
    p
}

/// Whether two byte ranges share a byte.
fn overlap(a: &Range<usize>, b: &Range<usize>) -> bool {
    a.start < b.end && b.start < a.end
}

/// Sets [`RecvMsg::after_send`]: a message may overwrite a range only once every earlier send
/// of that range has completed. "Earlier" means before the first send that waits for this
/// message (or any send at all, if none waits for it).
fn link_overwrites(p: &mut Plan) {
    let mut first_dependent = vec![p.sends.len(); p.recvs.len()];
    for (i, s) in p.sends.iter().enumerate() {
        if let Some(r) = s.after_recv {
            first_dependent[r] = first_dependent[r].min(i);
        }
    }
    for (k, m) in p.recvs.iter_mut().enumerate() {
        m.after_send = p.sends[..first_dependent[k]]
            .iter()
            .rposition(|s| overlap(&s.piece.range, &m.piece.range));
    }
}
