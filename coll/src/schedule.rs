//! The schedules: which byte range each rank sends to its right neighbour, in which order,
//! which range each message from its left neighbour lands in, and what waits for what — on the
//! ring, and for all-to-all's direct exchange on links to every rank ([`alltoall_direct`]).
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
//!
//! The rooted collectives and all-to-all cut the buffer into `n` equal *blocks* of
//! `count / n` elements ([`block`]); the last `count % n` elements take no part (nccl-tests
//! rounds its count down the same way). **Reduce** is a chain that ends at the root: it starts
//! at the rank after the root, and each rank reduces piece j into its own copy and forwards it.
//! **Gather** is a chain towards the root too: each rank sends its own block, then forwards the
//! blocks of the ranks before it as they arrive; the root's left neighbour sends n−1 blocks, the
//! load of the root's incoming link, (n−1)/n of the buffer. **Scatter** is the reverse: the root
//! sends the block of the farthest rank first, and each rank forwards what is not its own.
//!
//! **All-to-all** on a ring (with QPs to its two neighbours only, `--algo ring`): at step 0
//! every rank sends its blocks for the ranks 1..n−1 places to its right, farthest first; at
//! step s each rank keeps the block that has arrived at its destination and forwards the others
//! at step s+1. A block travels as many hops as its destination is far, so each link carries
//! (n−1)/2 of the buffer — n/2 times what a direct exchange would put on a rank's link. The
//! blocks in transit wait in a *scratch* area in two halves: step s receives into half s mod 2,
//! which step s−1's sends must have finished reading (the overwrite rule below says so).
//! Unlike the others, its ranges are absolute in the memory `[input | output | scratch]`
//! laid out `stride` bytes apart (see [`plan_in`]). The **direct** all-to-all
//! ([`alltoall_direct`]) needs links beyond the ring — to every rank at distance d, and from
//! every rank at distance −d, d = 1..n−1 — and then sends each block once, straight to its
//! owner, all n−1 exchanges at once: what [`crate::algo::Algo::Auto`] takes beyond two ranks
//! (the tools' default).
//!
//! **Channels** ([`plan_channel`]): with K channels (K QPs per neighbour), channel k runs the
//! same plan on its share of every chunk, block or range ([`Channel::share`]: the k-th of K
//! consecutive parts of its elements); the K plans together move every byte the one-channel
//! plan moves, as often, and no byte is on two channels.

use std::ops::Range;

/// The collectives a [`Plan`] can describe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coll {
    AllReduce,
    ReduceScatter,
    AllGather,
    Broadcast {
        root: usize,
    },
    SendRecv,
    /// Equal blocks: block j of rank i's input ends as block i of rank j's output.
    AllToAll,
    Reduce {
        root: usize,
    },
    Gather {
        root: usize,
    },
    Scatter {
        root: usize,
    },
}

impl Coll {
    pub fn name(self) -> &'static str {
        match self {
            Coll::AllReduce => "all_reduce",
            Coll::ReduceScatter => "reduce_scatter",
            Coll::AllGather => "all_gather",
            Coll::Broadcast { .. } => "broadcast",
            Coll::SendRecv => "sendrecv",
            Coll::AllToAll => "alltoall",
            Coll::Reduce { .. } => "reduce",
            Coll::Gather { .. } => "gather",
            Coll::Scatter { .. } => "scatter",
        }
    }

    /// nccl-tests' bus-bandwidth factor: what makes busbw comparable with the link speed
    /// whatever the number of ranks.
    pub fn busbw_factor(self, n: usize) -> f64 {
        let n = n as f64;
        match self {
            Coll::AllReduce => 2.0 * (n - 1.0) / n,
            Coll::ReduceScatter
            | Coll::AllGather
            | Coll::AllToAll
            | Coll::Gather { .. }
            | Coll::Scatter { .. } => (n - 1.0) / n,
            Coll::Broadcast { .. } | Coll::SendRecv | Coll::Reduce { .. } => 1.0,
        }
    }

    /// Whether the collective has a choice of algorithm ([`crate::algo::Algo`]): all-reduce
    /// (ring or recursive doubling) and all-to-all (ring or direct); the others have the ring.
    pub fn chooses_algorithm(self) -> bool {
        matches!(self, Coll::AllReduce | Coll::AllToAll)
    }

    /// Whether received data is reduced (rather than stored).
    pub fn reduces(self) -> bool {
        matches!(
            self,
            Coll::AllReduce | Coll::ReduceScatter | Coll::Reduce { .. }
        )
    }

    /// The root, for the collectives that have one.
    pub fn root(self) -> Option<usize> {
        match self {
            Coll::Broadcast { root }
            | Coll::Reduce { root }
            | Coll::Gather { root }
            | Coll::Scatter { root } => Some(root),
            _ => None,
        }
    }

    /// Whether the collective works on equal blocks of `count / n` elements ([`block`]), the
    /// count rounded down to a multiple of the ranks.
    pub fn blocks(self) -> bool {
        matches!(
            self,
            Coll::AllToAll | Coll::Gather { .. } | Coll::Scatter { .. }
        )
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

/// Block `j` of `count` elements cut into `n` equal blocks of `count / n` (elements); the last
/// `count % n` elements belong to no block.
pub fn block(count: usize, n: usize, j: usize) -> Range<usize> {
    let b = count / n;
    j * b..(j + 1) * b
}

/// Bytes of the scratch area all-to-all needs among `n` ranks for `count` elements of `elem`
/// bytes: two halves of n−2 blocks.
pub fn scratch_bytes(n: usize, count: usize, elem: usize) -> usize {
    2 * n.saturating_sub(2) * (count / n.max(1)) * elem
}

/// The largest piece of whole `elem`-byte elements a slot of `slot_bytes` holds, after checking
/// that `rank` is one of `n` and that a slot holds an element.
pub(crate) fn piece_bytes(
    rank: usize,
    n: usize,
    elem: usize,
    slot_bytes: usize,
) -> Result<usize, String> {
    if n == 0 || rank >= n {
        return Err(format!("rank {rank} of a world of {n}"));
    }
    if elem == 0 || slot_bytes < elem {
        return Err(format!(
            "slots of {slot_bytes} bytes cannot hold one {elem}-byte element"
        ));
    }
    Ok(slot_bytes / elem * elem)
}

/// The pieces of a byte range: consecutive sub-ranges of at most `piece_bytes` bytes.
pub(crate) fn pieces(r: Range<usize>, piece_bytes: usize) -> impl Iterator<Item = Range<usize>> {
    (r.start..r.end)
        .step_by(piece_bytes.max(1))
        .map(move |s| s..(s + piece_bytes).min(r.end))
}

/// The rank `k` places to the right of `rank` (negative: to the left).
pub fn ring_offset(rank: usize, n: usize, k: isize) -> usize {
    (rank as isize + k).rem_euclid(n as isize) as usize
}

/// The plan of `rank` among `n` for `coll` on `count` elements of `elem` bytes, with pieces of at
/// most `slot_bytes` (rounded down to whole elements). Errors on nonsense input. All-to-all's
/// ranges are laid out as [`plan_in`]'s with a stride of `count × elem` bytes.
pub fn plan(
    coll: Coll,
    rank: usize,
    n: usize,
    count: usize,
    elem: usize,
    slot_bytes: usize,
) -> Result<Plan, String> {
    plan_in(coll, rank, n, count, elem, slot_bytes, count * elem)
}

/// [`plan`] for a communicator whose memory is `[input | output | scratch]`, each region
/// `stride` bytes from the last (the scratch [`scratch_bytes`] long). All-to-all's ranges are
/// offsets in that memory; every other collective's are offsets in the one buffer it works on
/// (the output; sendrecv reads the input at the same offsets).
pub fn plan_in(
    coll: Coll,
    rank: usize,
    n: usize,
    count: usize,
    elem: usize,
    slot_bytes: usize,
    stride: usize,
) -> Result<Plan, String> {
    plan_channel(
        coll,
        rank,
        n,
        count,
        elem,
        slot_bytes,
        stride,
        Channel::ONLY,
    )
}

/// One of the channels a collective's bytes are split over (see [`plan_channel`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Channel {
    /// 0-based.
    pub index: usize,
    /// How many channels there are.
    pub of: usize,
}

impl Channel {
    /// The one channel of a communicator without more.
    pub const ONLY: Channel = Channel { index: 0, of: 1 };

    /// This channel's share of the byte range `r` of whole `elem`-byte elements: its elements
    /// cut into [`Channel::of`] consecutive parts as [`chunk`] cuts a buffer, the
    /// [`Channel::index`]th. The shares of all channels cover `r` once; a range of fewer
    /// elements than channels leaves the last channels empty shares.
    pub fn share(self, r: Range<usize>, elem: usize) -> Range<usize> {
        let c = chunk(r.len() / elem.max(1), self.of.max(1), self.index);
        r.start + c.start * elem..r.start + c.end * elem
    }
}

/// [`plan_in`] for channel `ch`: the same plan over the channel's share ([`Channel::share`]) of
/// every chunk, block or range the collective moves, so that the channels' plans together move
/// every byte the one-channel plan moves, once, and each channel runs as a ring of its own (its
/// own QPs and slots; RC orders messages per QP only, and no channel's message waits for
/// another channel's). Splitting each chunk rather than the buffer keeps every result where the
/// collective puts it (rank r's reduce-scatter chunk is still [`chunk`] r).
#[allow(clippy::too_many_arguments)]
pub fn plan_channel(
    coll: Coll,
    rank: usize,
    n: usize,
    count: usize,
    elem: usize,
    slot_bytes: usize,
    stride: usize,
    ch: Channel,
) -> Result<Plan, String> {
    if ch.of == 0 || ch.index >= ch.of {
        return Err(format!("channel {} of {}", ch.index, ch.of));
    }
    let piece_bytes = piece_bytes(rank, n, elem, slot_bytes)?;
    if let Some(root) = coll.root().filter(|&r| r >= n) {
        return Err(format!("root {root} is not a rank of a world of {n}"));
    }
    if coll == Coll::AllToAll && stride < count * elem {
        return Err(format!(
            "regions {stride} bytes apart cannot hold {count} elements of {elem} bytes"
        ));
    }
    // This channel's share of a range.
    let cut = |r: Range<usize>| ch.share(r, elem);
    let bytes = |c: usize| {
        let r = chunk(count, n, c);
        cut(r.start * elem..r.end * elem)
    };
    // Block j's bytes (gather, scatter).
    let blk = |j: usize| {
        let r = block(count, n, j);
        cut(r.start * elem..r.end * elem)
    };
    let all = cut(0..count * elem);
    if n == 1 {
        return Ok(Plan::default());
    }
    let mut p = match coll {
        Coll::ReduceScatter | Coll::AllGather | Coll::AllReduce => {
            ring_plan(&ring_steps(coll, rank, n), bytes, piece_bytes)?
        }
        Coll::Broadcast { root } => chain_plan(root, rank, n, all, piece_bytes)?,
        // Source and destination are different buffers: nothing to order.
        Coll::SendRecv => return Ok(sendrecv_plan(all, piece_bytes)),
        Coll::Reduce { root } => {
            // The chain ends at the root: it starts one place to its right.
            let start = ring_offset(root, n, 1);
            let mut p = chain_plan(start, rank, n, all, piece_bytes)?;
            for m in &mut p.recvs {
                m.action = Action::Reduce;
            }
            p
        }
        Coll::Gather { root } => gather_plan(root, rank, n, blk, piece_bytes),
        Coll::Scatter { root } => scatter_plan(root, rank, n, blk, piece_bytes),
        Coll::AllToAll => alltoall_plan(rank, n, (count / n) * elem, stride, piece_bytes, cut),
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

/// Gather: the chain from the rank after the root to the root. The rank `p` places after the
/// root's right neighbour sends its own block, then forwards the blocks of the `p` ranks before
/// it, nearest first, each landing at its owner's block (`blk(owner)`).
fn gather_plan(
    root: usize,
    rank: usize,
    n: usize,
    blk: impl Fn(usize) -> Range<usize>,
    piece_bytes: usize,
) -> Plan {
    let mut p = Plan::default();
    let pos = ring_offset(rank, n, -(root as isize) - 1);
    // What arrives: the blocks of the ranks 1..=pos places to the left, in that order.
    for k in 1..=pos {
        let owner = ring_offset(rank, n, -(k as isize));
        for r in pieces(blk(owner), piece_bytes) {
            p.recvs.push(RecvMsg {
                piece: Piece {
                    step: k - 1,
                    chunk: owner,
                    range: r,
                },
                action: Action::Copy,
                after_send: None,
            });
        }
    }
    if rank != root {
        for r in pieces(blk(rank), piece_bytes) {
            p.sends.push(SendMsg {
                piece: Piece {
                    step: 0,
                    chunk: rank,
                    range: r,
                },
                after_recv: None,
            });
        }
        for (i, m) in p.recvs.iter().enumerate() {
            p.sends.push(SendMsg {
                piece: Piece {
                    step: m.piece.step + 1,
                    ..m.piece.clone()
                },
                after_recv: Some(i),
            });
        }
    }
    p
}

/// Scatter: the root sends the blocks of the ranks n−1, n−2, …, 1 places to its right, in that
/// order; the rank `pos` places to its right receives those for the places n−1..=pos, forwards
/// all but the last, its own. Each lands at its destination's block (`blk(dest)`).
fn scatter_plan(
    root: usize,
    rank: usize,
    n: usize,
    blk: impl Fn(usize) -> Range<usize>,
    piece_bytes: usize,
) -> Plan {
    let mut p = Plan::default();
    let pos = ring_offset(rank, n, -(root as isize));
    let dest = |q: usize| ring_offset(root, n, q as isize);
    if pos != 0 {
        for q in (pos..n).rev() {
            for r in pieces(blk(dest(q)), piece_bytes) {
                p.recvs.push(RecvMsg {
                    piece: Piece {
                        step: pos - 1,
                        chunk: dest(q),
                        range: r,
                    },
                    action: Action::Copy,
                    after_send: None,
                });
            }
        }
    }
    // The root sends from its own blocks; the others forward what is not theirs, as it arrives.
    for q in (pos + 1..n).rev() {
        for (j, r) in pieces(blk(dest(q)), piece_bytes).enumerate() {
            let after_recv = (pos != 0).then(|| {
                p.recvs
                    .iter()
                    .position(|m| m.piece.chunk == dest(q))
                    .expect("a forwarded block arrived")
                    + j
            });
            p.sends.push(SendMsg {
                piece: Piece {
                    step: pos,
                    chunk: dest(q),
                    range: r,
                },
                after_recv,
            });
        }
    }
    p
}

/// All-to-all on the ring (see the module documentation): blocks of `b` bytes in the memory
/// `[input | output | scratch]`, `stride` bytes apart, each cut to the channel's share by `cut`.
fn alltoall_plan(
    rank: usize,
    n: usize,
    b: usize,
    stride: usize,
    piece_bytes: usize,
    cut: impl Fn(Range<usize>) -> Range<usize>,
) -> Plan {
    let input = |j: usize| cut(j * b..(j + 1) * b);
    let output = |j: usize| cut(stride + j * b..stride + (j + 1) * b);
    // Transit block m (1..=n−2, how far it still has to go) received at step s.
    let scratch = |s: usize, m: usize| {
        let at = 2 * stride + ((s % 2) * (n - 2) + m - 1) * b;
        cut(at..at + b)
    };
    let mut p = Plan::default();
    // Receive index of each piece of the transit blocks of the step before, by distance m.
    let mut transit: Vec<(usize, Vec<usize>)> = Vec::new();
    for s in 0..n - 1 {
        // Sends: at step 0 our own blocks for the ranks n−1..1 places away; then what arrived
        // at the step before and is still on its way.
        if s == 0 {
            for k in (1..n).rev() {
                let d = ring_offset(rank, n, k as isize);
                for r in pieces(input(d), piece_bytes) {
                    p.sends.push(SendMsg {
                        piece: Piece {
                            step: 0,
                            chunk: d,
                            range: r,
                        },
                        after_recv: None,
                    });
                }
            }
        } else {
            for (m, idx) in std::mem::take(&mut transit) {
                let d = ring_offset(rank, n, m as isize);
                for (r, i) in pieces(scratch(s - 1, m), piece_bytes).zip(idx) {
                    p.sends.push(SendMsg {
                        piece: Piece {
                            step: s,
                            chunk: d,
                            range: r,
                        },
                        after_recv: Some(i),
                    });
                }
            }
        }
        // Receives: the blocks from the rank s+1 places to the left, for the ranks n−2−s..0
        // places to our right; the last is ours, into the output at its source's block.
        let src = ring_offset(rank, n, -(s as isize) - 1);
        for m in (0..n - 1 - s).rev() {
            let d = ring_offset(rank, n, m as isize);
            let to = if m == 0 { output(src) } else { scratch(s, m) };
            let mut idx = Vec::new();
            for r in pieces(to, piece_bytes) {
                idx.push(p.recvs.len());
                p.recvs.push(RecvMsg {
                    piece: Piece {
                        step: s,
                        chunk: d,
                        range: r,
                    },
                    action: Action::Copy,
                    after_send: None,
                });
            }
            if m > 0 {
                transit.push((m, idx));
            }
        }
    }
    p
}

/// All-to-all straight to each block's owner (the direct algorithm, [`crate::algo::Algo::Direct`]):
/// one plan per distance d = 1..n−1, run on the links from the rank d places to the left and
/// to the rank d places to the right. Plan d−1 sends our block for rank + d, read from the
/// input (`[0, stride)`, blocks of `count / n` elements of `elem` bytes), and receives rank − d's
/// block for us into the output (`stride` bytes on) at rank − d's place, in pieces of at most
/// `slot_bytes` rounded down to whole elements. No byte moves twice and no plan waits for
/// another: the n−1 exchanges run at once. Our own block is not in any plan (the caller copies
/// it).
pub fn alltoall_direct(
    rank: usize,
    n: usize,
    count: usize,
    elem: usize,
    slot_bytes: usize,
    stride: usize,
) -> Result<Vec<Plan>, String> {
    let piece_bytes = piece_bytes(rank, n, elem, slot_bytes)?;
    let b = count / n * elem;
    if stride < count / n * n * elem {
        return Err(format!(
            "the output {stride} bytes after the input overlaps its {n} blocks of {b} bytes"
        ));
    }
    let plans = (1..n)
        .map(|d| {
            let (to, from) = (
                ring_offset(rank, n, d as isize),
                ring_offset(rank, n, -(d as isize)),
            );
            let piece = |chunk, range| Piece {
                step: 0,
                chunk,
                range,
            };
            Plan {
                sends: pieces(to * b..(to + 1) * b, piece_bytes)
                    .map(|r| SendMsg {
                        piece: piece(to, r),
                        after_recv: None,
                    })
                    .collect(),
                recvs: pieces(stride + from * b..stride + (from + 1) * b, piece_bytes)
                    .map(|r| RecvMsg {
                        piece: piece(from, r),
                        action: Action::Copy,
                        after_send: None,
                    })
                    .collect(),
            }
        })
        .collect();
    Ok(plans)
}

/// Whether two byte ranges share a byte.
fn overlap(a: &Range<usize>, b: &Range<usize>) -> bool {
    a.start < b.end && b.start < a.end
}

/// Sets [`RecvMsg::after_send`]: a message may overwrite a range only once every earlier send
/// of that range has completed. "Earlier" means before the first send that waits for this
/// message (or any send at all, if none waits for it).
pub(crate) fn link_overwrites(p: &mut Plan) {
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
