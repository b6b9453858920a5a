//! The second all-reduce algorithm, recursive doubling, all-to-all's direct exchange, and the
//! choice between each and the ring.
//!
//! **Recursive doubling** on p = 2^k ranks: at step s (0..k) rank r exchanges its whole buffer
//! with rank r XOR 2^s and reduces what it receives into its own; after k steps every rank holds
//! the reduction of all p. Both partners compute `a op b` of the same two operands, so every
//! rank ends with the same bits (the operators are commutative).
//!
//! **Other world sizes** are folded onto the largest power of two p ≤ n, with e = n − p extra
//! ranks: of the first 2e ranks each even one gives its buffer to the odd one after it (*fold
//! in*, one step) and waits; the p remaining ranks (the odd ones of the first 2e, then all from
//! 2e on) run recursive doubling among themselves; each odd rank of the first 2e then sends the
//! result back to its even partner (*fold out*, one step). Latency steps: log2 p, plus 2 when
//! n is not a power of two — against the ring's 2(n−1).
//!
//! **All-to-all** has a second algorithm too, the direct exchange ([`Algo::Direct`]): every
//! rank writes each block straight to its owner over a QP to each other rank, all n−1 at once.
//! In the model below, with S the bytes per rank, the ring's relay costs (n−1)·α +
//! (n−1)/2 · S·β (each link carries (n−1)/2 of the buffer, every block waits for the ones
//! before it), the direct exchange α + (n−1)/n · S·β (its n−1 flows share the rank's link): it
//! wins at every size from three ranks on, so `auto` always takes it there. It costs n−1 pairs
//! of QPs and their slots per rank, made the first time an all-to-all runs.
//!
//! **The α–β model** (Hockney; Thakur, Rabenseifner and Gropp, "Optimization of collective
//! communication operations in MPICH", 2005): a message of S bytes costs α + S·β, and reducing
//! S bytes S·γ. For an all-reduce of S bytes per rank on n ranks:
//!
//! | algorithm            | latency        | bandwidth              | reduction          |
//! |----------------------|----------------|------------------------|--------------------|
//! | ring                 | 2(n−1)·α       | 2(n−1)/n · S·β         | (n−1)/n · S·γ      |
//! | recursive doubling   | k·α            | k · S·β                | k · S·γ            |
//!
//! with k = ⌈log2 n⌉ steps when n is a power of two, ⌊log2 n⌋ + 2 otherwise (the fold's two
//! whole-buffer steps). Recursive doubling pays log n latencies but sends the whole buffer at
//! every step; the ring pays n−1 times more latencies but sends each byte about twice. Small
//! messages are latency-bound, so doubling wins below the size where the two costs meet
//! ([`AlphaBeta::crossover`]); the ring wins above it, by a factor that grows with n. Why not
//! a binary tree: a reduce up a tree and a broadcast down it takes 2·log2 n steps of the whole
//! buffer, twice recursive doubling's latency for the same bandwidth; halving-doubling
//! (Rabenseifner) has the ring's bandwidth term at 2·log2 n latencies, but between doubling
//! (best for the smallest sizes) and the ring (best for the largest) its window on this
//! transport is narrow, and it needs scratch for the halves.
//!
//! **The constants** ([`AlphaBeta::SOFTROCE`]) are the model's assumption for SoftRoCE, not a
//! measurement: α = 20 µs per message (a posted WRITE WITH IMM, its completion on the far side,
//! the credit back — rxe runs in the kernel's softirq on the same cores as the ranks),
//! β = 1 ns/B (about 1 GB/s on one flow), γ = 0.5 ns/B (one core's reduction loop). The
//! crossovers they give ([`AlphaBeta::crossover`], bytes per rank):
//!
//! | ranks      | 2      | 3     | 4      | 5      | 6      | 8      | 12     | 16      | 17     |
//! |------------|--------|-------|--------|--------|--------|--------|--------|---------|--------|
//! | rd steps   | 1      | 3     | 2      | 4      | 4      | 3      | 5      | 4       | 6      |
//! | ring steps | 2      | 4     | 6      | 8      | 10     | 14     | 22     | 30      | 32     |
//! | crossover¹ | 78 KiB | 6 KiB | 69 KiB | 19 KiB | 29 KiB | 92 KiB | 63 KiB | 138 KiB | 76 KiB |
//!
//! ¹ Rounded down to whole KiB. Powers of two gain most; three ranks least (the fold's two
//! steps against the ring's four).
//! Issue 40 saw Open MPI, which takes recursive doubling for small all-reduces, win below
//! ~64 KiB. Only the ratios matter: α/β sets the crossover's scale. They are
//! not measured here: a measured crossover needs a quiet host (see lesson 15's README).

use crate::schedule::{self, Action, Piece, Plan, RecvMsg, SendMsg};

verbs_lab::name_table! {
    /// A collective's algorithm, or the choice by size and world ([`Algo::Auto`]): all-reduce
    /// chooses between the ring and recursive doubling, all-to-all between the ring and the
    /// direct exchange.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Algo {
        /// Reduce-scatter then all-gather around the ring (see [`schedule`]).
        Ring => "ring",
        /// Recursive doubling with the fold for other world sizes (the module documentation).
        Rd => "rd" | "recursive-doubling" | "recursive_doubling",
        /// All-to-all only: each block straight to its owner over a QP to every other rank,
        /// all at once ([`schedule::alltoall_direct`]) — one latency step and each byte sent
        /// once, against the ring's n−1 steps and (n−1)/2 of the buffer on every link.
        Direct => "direct",
        /// [`Algo::resolve`]: recursive doubling below the model's crossover, else the ring.
        Auto => "auto",
    }
    unknown: "unknown algorithm '{}'";
    ignore_case: true;
}

impl Algo {
    /// The algorithm an all-reduce of `bytes` per rank on `n` ranks runs: `self`, or for
    /// [`Algo::Auto`] the cheaper of the two in the model [`AlphaBeta::SOFTROCE`] (ties go to the
    /// ring). Never returns `Auto`.
    pub fn resolve(self, n: usize, bytes: usize) -> Algo {
        match self {
            Algo::Auto if AlphaBeta::SOFTROCE.rd_wins(n, bytes) => Algo::Rd,
            Algo::Auto => Algo::Ring,
            fixed => fixed,
        }
    }

    /// The algorithm an all-to-all on `n` ranks runs: `self`, or for [`Algo::Auto`] the direct
    /// exchange from three ranks on (at every size: it sends each byte once, in one step; with
    /// two the ring is the same exchange on the ring's own QPs). Never returns `Auto`.
    pub fn resolve_alltoall(self, n: usize) -> Algo {
        match self {
            Algo::Auto if n > 2 => Algo::Direct,
            Algo::Auto => Algo::Ring,
            fixed => fixed,
        }
    }

    /// NCCL's `NCCL_ALGO` in our terms, where the meaning matches: `Ring` is the ring, `Tree`
    /// (NCCL's latency algorithm, a double binary tree) is ours, recursive doubling; a list of
    /// both, or NCCL's `^` exclusion of one, leaves the choice to [`Algo::Auto`] or the other.
    /// Other NCCL algorithms (CollNet, NVLS, PAT) have no counterpart here: an error says so.
    pub fn from_nccl(value: &str) -> Result<Algo, String> {
        let (exclude, list) = match value.trim().strip_prefix('^') {
            Some(rest) => (true, rest),
            None => (false, value.trim()),
        };
        let (mut ring, mut tree) = (false, false);
        for name in list.split(',').map(str::trim) {
            if name.eq_ignore_ascii_case("ring") {
                ring = true;
            } else if name.eq_ignore_ascii_case("tree") {
                tree = true;
            } else {
                return Err(format!(
                    "NCCL_ALGO={value}: '{name}' has no counterpart here; NCCL_ALGO may name \
                     Ring (the ring) and Tree (recursive doubling, this suite's latency \
                     algorithm), or use --algo ring|rd|auto"
                ));
            }
        }
        // `^X` allows every algorithm but X.
        let (ring, tree) = if exclude {
            (!ring, !tree)
        } else {
            (ring, tree)
        };
        match (ring, tree) {
            (true, true) => Ok(Algo::Auto),
            (true, false) => Ok(Algo::Ring),
            (false, true) => Ok(Algo::Rd),
            (false, false) => Err(format!(
                "NCCL_ALGO={value} leaves no algorithm; give Ring, Tree or both"
            )),
        }
    }
}

/// The α–β(–γ) model's constants (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AlphaBeta {
    /// Seconds per message.
    pub alpha: f64,
    /// Seconds per byte sent.
    pub beta: f64,
    /// Seconds per byte reduced.
    pub gamma: f64,
}

impl AlphaBeta {
    /// The assumption for SoftRoCE (see the module documentation): 20 µs, 1 ns/B, 0.5 ns/B.
    pub const SOFTROCE: AlphaBeta = AlphaBeta {
        alpha: 20e-6,
        beta: 1e-9,
        gamma: 0.5e-9,
    };

    /// The ring's all-reduce time for `bytes` per rank on `n` ranks.
    pub fn ring(&self, n: usize, bytes: usize) -> f64 {
        if n < 2 {
            return 0.0;
        }
        let (n, s) = (n as f64, bytes as f64);
        2.0 * (n - 1.0) * self.alpha + (n - 1.0) / n * s * (2.0 * self.beta + self.gamma)
    }

    /// Recursive doubling's time.
    pub fn rd(&self, n: usize, bytes: usize) -> f64 {
        let k = rd_latency_steps(n) as f64;
        k * (self.alpha + bytes as f64 * (self.beta + self.gamma))
    }

    /// Whether recursive doubling is faster than the ring.
    pub fn rd_wins(&self, n: usize, bytes: usize) -> bool {
        n > 1 && self.rd(n, bytes) < self.ring(n, bytes)
    }

    /// The size per rank (bytes) below which recursive doubling wins on `n` ranks: where the
    /// two times meet. 0 if it never wins (one rank).
    pub fn crossover(&self, n: usize) -> usize {
        if n < 2 {
            return 0;
        }
        let (nf, k) = (n as f64, rd_latency_steps(n) as f64);
        let latency_saved = (2.0 * (nf - 1.0) - k) * self.alpha;
        let per_byte_lost =
            k * (self.beta + self.gamma) - (nf - 1.0) / nf * (2.0 * self.beta + self.gamma);
        if per_byte_lost <= 0.0 {
            return usize::MAX;
        }
        (latency_saved / per_byte_lost).max(0.0) as usize
    }
}

/// Steps on recursive doubling's critical path among `n` ranks: log2 of the largest power of
/// two p ≤ n, plus the fold's two when n ≠ p.
pub fn rd_latency_steps(n: usize) -> usize {
    if n < 2 {
        return 0;
    }
    let p = pow2_below(n);
    p.trailing_zeros() as usize + if p == n { 0 } else { 2 }
}

/// The largest power of two ≤ n (n ≥ 1).
fn pow2_below(n: usize) -> usize {
    1 << (usize::BITS - 1 - n.leading_zeros())
}

/// One step of a rank's recursive doubling: the partner and the plan run on the link to it
/// (its sends go to the partner, its receives come from the partner).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdStep {
    pub partner: usize,
    pub plan: Plan,
}

/// The ranks `rank` exchanges with at some step of recursive doubling among `n`, in step order
/// (no duplicates: the fold's partner is met twice, in and out).
pub fn rd_partners(rank: usize, n: usize) -> Vec<usize> {
    let mut v = Vec::new();
    for p in rd_order(rank, n).into_iter().map(|(p, _)| p) {
        if !v.contains(&p) {
            v.push(p);
        }
    }
    v
}

/// What a step does with the buffer: send it, receive into it, or both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dir {
    Send,
    Recv(Action),
    Exchange,
}

/// The steps of `rank` among `n` as (partner, direction) — the structure of the module
/// documentation, without the bytes.
fn rd_order(rank: usize, n: usize) -> Vec<(usize, Dir)> {
    if n < 2 {
        return Vec::new();
    }
    let p = pow2_below(n);
    let extra = n - p;
    // The rank's number among the p that double, and back.
    let real = |v: usize| if v < extra { 2 * v + 1 } else { v + extra };
    let mut steps = Vec::new();
    if rank < 2 * extra && rank % 2 == 0 {
        // Folded out: give the buffer, get the result.
        steps.push((rank + 1, Dir::Send));
        steps.push((rank + 1, Dir::Recv(Action::Copy)));
        return steps;
    }
    let folds = rank < 2 * extra;
    if folds {
        steps.push((rank - 1, Dir::Recv(Action::Reduce)));
    }
    let v = if folds { rank / 2 } else { rank - extra };
    let mut mask = 1;
    while mask < p {
        steps.push((real(v ^ mask), Dir::Exchange));
        mask <<= 1;
    }
    if folds {
        steps.push((rank - 1, Dir::Send));
    }
    steps
}

/// The recursive-doubling all-reduce of `rank` among `n` on `count` elements of `elem` bytes,
/// in pieces of at most `slot_bytes` (rounded down to whole elements): one [`RdStep`] per step,
/// each a [`Plan`] on the whole buffer whose receives reduce (or, folding out, copy). An
/// exchange's receive of a range waits for the completion of its own send of that range
/// ([`schedule::RecvMsg::after_send`]): the partner must get the operand from before the step.
/// Steps with nothing to move (no elements) are left out on both sides.
pub fn rd_steps(
    rank: usize,
    n: usize,
    count: usize,
    elem: usize,
    slot_bytes: usize,
) -> Result<Vec<RdStep>, String> {
    let piece_bytes = schedule::piece_bytes(rank, n, elem, slot_bytes)?;
    if count == 0 {
        return Ok(Vec::new());
    }
    let all = 0..count * elem;
    let steps = rd_order(rank, n)
        .into_iter()
        .enumerate()
        .map(|(s, (partner, dir))| {
            let piece = |range| Piece {
                step: s,
                chunk: partner,
                range,
            };
            let mut plan = Plan::default();
            if matches!(dir, Dir::Send | Dir::Exchange) {
                plan.sends = schedule::pieces(all.clone(), piece_bytes)
                    .map(|r| SendMsg {
                        piece: piece(r),
                        after_recv: None,
                    })
                    .collect();
            }
            if let Dir::Recv(_) | Dir::Exchange = dir {
                let action = match dir {
                    Dir::Recv(a) => a,
                    _ => Action::Reduce,
                };
                plan.recvs = schedule::pieces(all.clone(), piece_bytes)
                    .map(|r| RecvMsg {
                        piece: piece(r),
                        action,
                        after_send: None,
                    })
                    .collect();
            }
            schedule::link_overwrites(&mut plan);
            RdStep { partner, plan }
        })
        .collect();
    Ok(steps)
}
