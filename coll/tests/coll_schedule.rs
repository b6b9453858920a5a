//! The ring schedules of `vl_coll::schedule`, executed by a plain simulation of n ranks
//! with the engine's rules (credits, slots, dependencies, a NIC that reads a send's bytes at a
//! time of its choosing), checked against a direct computation of each collective.

use std::collections::VecDeque;

use vl_coll::kernels::{self, DataType, RedOp};
use vl_coll::schedule::{
    alltoall_direct, block, chunk, plan, plan_channel, plan_in, scratch_bytes, Action, Channel,
    Coll, Plan,
};

/// A small deterministic generator (no rand crate).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

struct Rank {
    plan: Plan,
    /// The rank's memory, as the communicator's: `[input | output | scratch]`.
    mem: Vec<u8>,
    posted: usize,
    completed: usize,
    processed: usize,
    credits: usize,
    /// Sends posted but not yet read by the "NIC".
    in_flight: VecDeque<usize>,
    /// Messages delivered from the left, in order.
    incoming: VecDeque<Vec<u8>>,
}

/// Runs the collective on every rank; returns each rank's final output (for the ring
/// collectives, the buffer they work on).
fn simulate(
    coll: Coll,
    inputs: &[Vec<u8>],
    dtype: DataType,
    op: RedOp,
    slot: usize,
    nslots: usize,
    seed: u64,
) -> Vec<Vec<u8>> {
    simulate_channels(coll, inputs, dtype, op, (slot, nslots), seed, 1)
}

/// [`simulate`] over `channels` channels: each channel's plans run as a ring of their own.
/// Channels share no byte, so running them one after the other ends as running them at once.
fn simulate_channels(
    coll: Coll,
    inputs: &[Vec<u8>],
    dtype: DataType,
    op: RedOp,
    (slot, nslots): (usize, usize),
    seed: u64,
    channels: usize,
) -> Vec<Vec<u8>> {
    let n = inputs.len();
    let len = inputs[0].len();
    let count = len / dtype.size();
    // As the communicator: sendrecv reads the input, the others work on the output, which
    // holds the input (out of place, the communicator copies it there first).
    let src_off = if coll == Coll::SendRecv { 0 } else { len };
    let mems = inputs
        .iter()
        .map(|i| {
            let out = if coll == Coll::SendRecv {
                vec![0xee; len]
            } else {
                i.clone()
            };
            [i.clone(), out].concat()
        })
        .collect();
    let what = format!("{coll:?} n={n} count={count} channels={channels}");
    let ring = Ring {
        dtype,
        op,
        nslots,
        seed,
    };
    let s = dtype.size();
    let mems = (0..channels).fold(mems, |mems, index| {
        let ch = Channel {
            index,
            of: channels,
        };
        let plans = (0..n)
            .map(|r| plan_channel(coll, r, n, count, s, slot, count * s, ch).unwrap())
            .collect();
        ring.run(plans, mems, src_off, len, &what)
    });
    mems.into_iter().map(|m| m[len..2 * len].to_vec()).collect()
}

/// The engine's rules, for every rank of a ring.
struct Ring {
    dtype: DataType,
    op: RedOp,
    nslots: usize,
    seed: u64,
}

impl Ring {
    /// Runs `plans` over the ranks' memories: sends read `src_off + range`, receives land at
    /// `dst_off + range`. Returns the memories.
    fn run(
        &self,
        plans: Vec<Plan>,
        mems: Vec<Vec<u8>>,
        src_off: usize,
        dst_off: usize,
        what: &str,
    ) -> Vec<Vec<u8>> {
        let (dtype, op, nslots) = (self.dtype, self.op, self.nslots);
        let n = plans.len();
        let mut ranks: Vec<Rank> = plans
            .into_iter()
            .zip(mems)
            .map(|(plan, mem)| Rank {
                plan,
                mem,
                posted: 0,
                completed: 0,
                processed: 0,
                credits: nslots,
                in_flight: VecDeque::new(),
                incoming: VecDeque::new(),
            })
            .collect();
        let mut rng = Lcg(self.seed);
        let done = |rs: &[Rank]| {
            rs.iter()
                .all(|r| r.processed == r.plan.recvs.len() && r.completed == r.plan.sends.len())
        };
        let shift = |r: &std::ops::Range<usize>, off: usize| r.start + off..r.end + off;
        let mut idle_rounds = 0;
        while !done(&ranks) {
            let mut progress = false;
            for k in 0..n {
                let r = (k + rng.next() as usize) % n;
                // Post what credits and dependencies allow.
                {
                    let me = &mut ranks[r];
                    while me.posted < me.plan.sends.len() && me.credits > 0 {
                        let m = &me.plan.sends[me.posted];
                        if m.after_recv.is_some_and(|x| x >= me.processed) {
                            break;
                        }
                        me.in_flight.push_back(me.posted);
                        me.posted += 1;
                        me.credits -= 1;
                        progress = true;
                    }
                }
                // The NIC reads the oldest posted send when it likes (in order, like a send
                // queue).
                if !ranks[r].in_flight.is_empty() && rng.next() % 3 != 0 {
                    let me = &mut ranks[r];
                    let i = me.in_flight.pop_front().unwrap();
                    let range = shift(&me.plan.sends[i].piece.range, src_off);
                    let bytes = me.mem[range].to_vec();
                    me.completed += 1;
                    ranks[(r + 1) % n].incoming.push_back(bytes);
                    progress = true;
                }
                // Apply arrived messages, in order, and return credits to the left.
                loop {
                    let me = &mut ranks[r];
                    if me.processed >= me.plan.recvs.len() || me.incoming.is_empty() {
                        break;
                    }
                    let m = me.plan.recvs[me.processed].clone();
                    if m.after_send.is_some_and(|s| s >= me.completed) {
                        break;
                    }
                    let data = me.incoming.pop_front().unwrap();
                    assert_eq!(data.len(), m.piece.range.len(), "message size vs the plan");
                    let dst = &mut me.mem[shift(&m.piece.range, dst_off)];
                    match m.action {
                        Action::Reduce => kernels::reduce(dtype, op, dst, &data).unwrap(),
                        Action::Copy => dst.copy_from_slice(&data),
                    }
                    me.processed += 1;
                    ranks[(r + n - 1) % n].credits += 1;
                    progress = true;
                }
            }
            watch_for_deadlock(progress, &mut idle_rounds, what);
        }
        for r in &ranks {
            assert!(r.incoming.is_empty(), "a rank received more than its plan");
            assert_eq!(r.credits, nslots, "credits all returned");
        }
        ranks.into_iter().map(|r| r.mem).collect()
    }
}

/// Counts the rounds in which no rank moved; a hundred in a row is a deadlock.
fn watch_for_deadlock(progress: bool, idle_rounds: &mut u32, what: &str) {
    if progress {
        *idle_rounds = 0;
    } else {
        *idle_rounds += 1;
        assert!(*idle_rounds < 100, "{what}: deadlock");
    }
}

fn inputs(dtype: DataType, op: RedOp, n: usize, count: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|r| {
            let mut b = vec![0u8; count * dtype.size()];
            kernels::fill_input(dtype, op, r, 0, &mut b);
            b
        })
        .collect()
}

fn value(dtype: DataType, b: &[u8], i: usize) -> Option<i64> {
    let s = dtype.size();
    kernels::load_value(dtype, &b[i * s..(i + 1) * s])
}

fn check(coll: Coll, n: usize, count: usize, slot: usize, nslots: usize) {
    check_channels(coll, n, count, (slot, nslots), 1)
}

fn check_channels(coll: Coll, n: usize, count: usize, slots: (usize, usize), channels: usize) {
    let (dtype, op) = (DataType::I32, RedOp::Sum);
    let ins = inputs(dtype, op, n, count);
    let seed = (n * 1000 + count) as u64;
    let outs = simulate_channels(coll, &ins, dtype, op, slots, seed, channels);
    let what = format!("{coll:?} n={n} count={count} slots={slots:?} channels={channels}");
    for (r, out) in outs.iter().enumerate() {
        for i in 0..count {
            let want = match coll {
                Coll::AllReduce => Some(kernels::expected_value(dtype, op, n, i)),
                Coll::ReduceScatter => chunk(count, n, r)
                    .contains(&i)
                    .then(|| kernels::expected_value(dtype, op, n, i)),
                Coll::AllGather => {
                    let owner = (0..n).find(|&o| chunk(count, n, o).contains(&i)).unwrap();
                    value(dtype, &ins[owner], i)
                }
                Coll::Broadcast { root } => value(dtype, &ins[root], i),
                Coll::SendRecv => value(dtype, &ins[(r + n - 1) % n], i),
                _ => unreachable!("see run_blocks_channels"),
            };
            if let Some(w) = want {
                assert_eq!(
                    value(dtype, out, i),
                    Some(w),
                    "{what}: rank {r} element {i}"
                );
            }
        }
    }
}

const COUNTS: [usize; 9] = [0, 1, 2, 5, 8, 9, 17, 100, 257];

#[test]
fn ring_collectives_match_the_reference_for_2_to_9_ranks() {
    for n in 2..=9 {
        for count in COUNTS.iter().copied().chain([n - 1, n, n + 1, 3 * n + 2]) {
            for (slot, nslots) in [(4, 1), (8, 2), (12, 3), (4096, 8)] {
                for coll in [
                    Coll::AllReduce,
                    Coll::ReduceScatter,
                    Coll::AllGather,
                    Coll::SendRecv,
                ] {
                    check(coll, n, count, slot, nslots);
                }
                for root in [0, n - 1, n / 2] {
                    check(Coll::Broadcast { root }, n, count, slot, nslots);
                }
            }
        }
    }
}

#[test]
fn every_type_and_op_through_the_ring() {
    for dtype in DataType::ALL {
        for op in RedOp::ALL {
            for n in [2, 3, 5] {
                let count = 37;
                let ins = inputs(dtype, op, n, count);
                let mut outs = simulate(Coll::AllReduce, &ins, dtype, op, 3 * 8, 2, 7);
                // The average: the ring sums, `Comm` divides the result by the ranks.
                if op == RedOp::Avg {
                    outs.iter_mut().for_each(|o| kernels::divide(dtype, o, n));
                }
                for out in &outs {
                    for i in 0..count {
                        assert_eq!(
                            value(dtype, out, i),
                            Some(kernels::expected_value(dtype, op, n, i)),
                            "{dtype}/{op} n={n} element {i}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn chunks_cover_the_buffer_and_differ_by_at_most_one() {
    for n in 1..=9 {
        for count in 0..40 {
            let cs: Vec<_> = (0..n).map(|i| chunk(count, n, i)).collect();
            assert_eq!(cs[0].start, 0);
            assert_eq!(cs[n - 1].end, count);
            for w in cs.windows(2) {
                assert_eq!(w[0].end, w[1].start);
            }
            let (lo, hi) = (
                cs.iter().map(|c| c.len()).min().unwrap(),
                cs.iter().map(|c| c.len()).max().unwrap(),
            );
            assert!(hi - lo <= 1, "n={n} count={count}");
        }
    }
}

#[test]
fn all_reduce_sends_two_n_minus_one_over_n_of_the_buffer() {
    for n in 2..=9 {
        let count = 1000 * n;
        for r in 0..n {
            let p = plan(Coll::AllReduce, r, n, count, 4, 256).unwrap();
            assert_eq!(p.bytes_sent(), 2 * (n - 1) * count * 4 / n);
            assert_eq!(
                p.recvs.iter().map(|m| m.piece.range.len()).sum::<usize>(),
                p.bytes_sent()
            );
            let rs = plan(Coll::ReduceScatter, r, n, count, 4, 256).unwrap();
            assert_eq!(rs.bytes_sent(), (n - 1) * count * 4 / n);
        }
    }
}

#[test]
fn pieces_never_exceed_a_slot_and_are_whole_elements() {
    for coll in [
        Coll::AllReduce,
        Coll::AllGather,
        Coll::Broadcast { root: 1 },
        Coll::SendRecv,
    ] {
        let p = plan(coll, 1, 3, 1001, 8, 100).unwrap();
        for m in &p.sends {
            assert!(
                m.piece.range.len() <= 96
                    && m.piece.range.len() % 8 == 0
                    && !m.piece.range.is_empty()
            );
        }
    }
}

/// Both ends of a link plan the same messages: what rank r sends, piece for piece (step, chunk
/// and bytes), is what rank r+1 expects from its left — also when some chunks are empty.
#[test]
fn each_rank_sends_what_its_right_neighbour_expects() {
    for n in 2..=6 {
        for count in [1, n - 1, n, 7 * n + 3, 1000] {
            for coll in [
                Coll::AllReduce,
                Coll::ReduceScatter,
                Coll::AllGather,
                Coll::Broadcast { root: n - 1 },
                Coll::SendRecv,
            ] {
                let plans: Vec<Plan> = (0..n)
                    .map(|r| plan(coll, r, n, count, 4, 64).unwrap())
                    .collect();
                for r in 0..n {
                    let sent: Vec<_> = plans[r].sends.iter().map(|m| &m.piece).collect();
                    let expected: Vec<_> =
                        plans[(r + 1) % n].recvs.iter().map(|m| &m.piece).collect();
                    assert_eq!(sent, expected, "{coll:?} n={n} count={count} rank {r}");
                }
            }
        }
    }
}

#[test]
fn a_single_rank_has_nothing_to_send() {
    for coll in [
        Coll::AllReduce,
        Coll::ReduceScatter,
        Coll::AllGather,
        Coll::Broadcast { root: 0 },
    ] {
        let p = plan(coll, 0, 1, 100, 4, 64).unwrap();
        assert!(p.sends.is_empty() && p.recvs.is_empty());
    }
}

#[test]
fn bad_plans_are_refused() {
    assert!(plan(Coll::AllReduce, 3, 3, 10, 4, 64)
        .unwrap_err()
        .contains("rank 3 of a world of 3"));
    assert!(plan(Coll::AllReduce, 0, 0, 10, 4, 64).is_err());
    assert!(plan(Coll::AllReduce, 0, 2, 10, 8, 4)
        .unwrap_err()
        .contains("cannot hold one 8-byte element"));
    assert!(plan(Coll::Broadcast { root: 5 }, 0, 4, 10, 4, 64)
        .unwrap_err()
        .contains("root 5"));
}

#[test]
fn busbw_factors_are_nccl_tests() {
    assert_eq!(Coll::AllReduce.busbw_factor(4), 1.5);
    assert_eq!(Coll::AllReduce.busbw_factor(2), 1.0);
    assert_eq!(Coll::ReduceScatter.busbw_factor(4), 0.75);
    assert_eq!(Coll::AllGather.busbw_factor(8), 0.875);
    assert_eq!(Coll::Broadcast { root: 0 }.busbw_factor(4), 1.0);
    assert_eq!(Coll::SendRecv.busbw_factor(4), 1.0);
    assert_eq!(Coll::AllReduce.busbw_factor(1), 0.0);
}

// ---------------------------------------------------------------------------------------------
// All-to-all and the rooted collectives, in the communicator's memory `[input | output |
// scratch]`, prepared as `Comm` prepares them, against a direct computation.

/// Rank `r`'s checked value at element `i` as an int32 holds it.
fn val(r: usize, i: usize) -> i64 {
    kernels::expected_value_of(DataType::I32, kernels::input_value(RedOp::Sum, r, i))
}

/// Runs `coll` on `n` ranks, out of place or in place, with `count` int32 elements of input
/// (and `op` for reduce), over `channels` channels one after the other (as
/// [`simulate_channels`]); returns every rank's output.
fn run_blocks_channels(
    coll: Coll,
    n: usize,
    count: usize,
    op: RedOp,
    in_place: bool,
    (slot, nslots): (usize, usize),
    channels: usize,
) -> Vec<Vec<u8>> {
    let (dtype, s) = (DataType::I32, 4);
    let stride = count * s;
    let input = |r: usize| {
        let mut b = vec![0u8; stride];
        kernels::fill_input(dtype, op, r, 0, &mut b);
        b
    };
    let mems: Vec<Vec<u8>> = (0..n)
        .map(|r| {
            let (mut inp, mut out) = (vec![0xdd; stride], vec![0xee; stride]);
            let mine = input(r);
            // Where the rank's data is before the call, as the tools put it.
            let at = match coll {
                Coll::Gather { .. } => {
                    let b = block(count, n, r);
                    let bytes = mine[b.start * s..b.end * s].to_vec();
                    if in_place {
                        out[b.start * s..b.end * s].copy_from_slice(&bytes);
                    } else {
                        inp[..bytes.len()].copy_from_slice(&bytes);
                    }
                    None
                }
                Coll::Scatter { root } if r != root => None,
                _ => Some(mine),
            };
            if let Some(v) = at {
                if in_place { &mut out } else { &mut inp }.copy_from_slice(&v);
            }
            // What `Comm` does before the ring runs.
            let copy_in = |inp: &[u8], out: &mut [u8], from: std::ops::Range<usize>, to: usize| {
                out[to..to + from.len()].copy_from_slice(&inp[from]);
            };
            match coll {
                Coll::Reduce { .. } if !in_place => copy_in(&inp, &mut out, 0..stride, 0),
                Coll::Gather { .. } if !in_place => {
                    let b = block(count, n, r);
                    copy_in(&inp, &mut out, 0..b.len() * s, b.start * s)
                }
                Coll::Scatter { root } if !in_place && r == root => {
                    copy_in(&inp, &mut out, 0..stride, 0)
                }
                Coll::AllToAll => {
                    if in_place {
                        inp.copy_from_slice(&out);
                    }
                    let b = block(count, n, r);
                    copy_in(&inp, &mut out, b.start * s..b.end * s, b.start * s)
                }
                _ => {}
            }
            let scratch = vec![0xcc; scratch_bytes(n, count, s)];
            [inp, out, scratch].concat()
        })
        .collect();
    let off = if coll == Coll::AllToAll { 0 } else { stride };
    let ring = Ring {
        dtype,
        op,
        nslots,
        seed: (n * 7919 + count) as u64,
    };
    let what = format!("{coll:?} n={n} count={count} in_place={in_place} slot={slot} x{channels}");
    let mems = (0..channels).fold(mems, |mems, index| {
        let ch = Channel {
            index,
            of: channels,
        };
        let plans: Vec<Plan> = (0..n)
            .map(|r| plan_channel(coll, r, n, count, s, slot, stride, ch).unwrap())
            .collect();
        ring.run(plans, mems, off, off, &what)
    });
    mems.into_iter()
        .map(|m| {
            let mut out = m[stride..2 * stride].to_vec();
            // The average: the ring sums, `Comm` divides the result by the ranks.
            if op == RedOp::Avg {
                kernels::divide(dtype, &mut out, n);
            }
            out
        })
        .collect()
}

/// What rank `r`'s output must hold at element `i` after `coll` (`None`: anything).
fn reference(coll: Coll, n: usize, count: usize, op: RedOp, r: usize, i: usize) -> Option<i64> {
    let b = count / n;
    let in_block = |j: usize| block(count, n, j).contains(&i);
    match coll {
        Coll::Reduce { root } => {
            (r == root).then(|| kernels::expected_value(DataType::I32, op, n, i))
        }
        Coll::Gather { root } => (r == root && i < b * n).then(|| val(i / b, i)),
        Coll::Scatter { root } => in_block(r).then(|| val(root, i)),
        // Block j of rank r's output is block r of rank j's input.
        Coll::AllToAll => (i < b * n).then(|| val(i / b, r * b + i % b)),
        _ => unreachable!("not a blocked or rooted collective"),
    }
}

fn check_blocks(coll: Coll, n: usize, count: usize, op: RedOp, slots: (usize, usize)) {
    check_blocks_channels(coll, n, count, op, slots, 1)
}

fn check_blocks_channels(
    coll: Coll,
    n: usize,
    count: usize,
    op: RedOp,
    slots: (usize, usize),
    channels: usize,
) {
    for in_place in [false, true] {
        let outs = run_blocks_channels(coll, n, count, op, in_place, slots, channels);
        for (r, out) in outs.iter().enumerate() {
            for i in 0..count {
                if let Some(want) = reference(coll, n, count, op, r, i) {
                    assert_eq!(
                        value(DataType::I32, out, i),
                        Some(want),
                        "{coll:?} n={n} count={count} in_place={in_place} slots={slots:?} \
                         channels={channels}: rank {r} element {i}"
                    );
                }
            }
        }
    }
}

#[test]
fn all_to_all_and_the_rooted_collectives_match_the_reference_for_1_to_17_ranks() {
    for n in 1usize..=17 {
        let counts = [0, 1, n.saturating_sub(1), n, n + 1, 3 * n + 2, 5 * n, 101];
        for count in counts {
            for slots in [(4, 1), (12, 3), (4096, 8)] {
                check_blocks(Coll::AllToAll, n, count, RedOp::Sum, slots);
                for root in [0, n - 1, n / 2] {
                    for coll in [
                        Coll::Reduce { root },
                        Coll::Gather { root },
                        Coll::Scatter { root },
                    ] {
                        check_blocks(coll, n, count, RedOp::Sum, slots);
                    }
                }
            }
        }
    }
}

/// The direct all-to-all's plans run on a mesh: lane d−1 of rank r sends to lane d−1 of rank
/// r + d, in order; pieces of the lanes interleave at random (no plan waits for another). Every
/// piece fits a slot and matches its receive in length; every byte of the other ranks' blocks
/// in the output is written exactly once, and the output is the reference's.
fn check_direct(n: usize, count: usize, slot: usize, seed: u64) {
    let s = 4;
    let stride = count * s;
    let what = format!("direct n={n} count={count} slot={slot}");
    let plans: Vec<Vec<Plan>> = (0..n)
        .map(|r| alltoall_direct(r, n, count, s, slot, stride).unwrap())
        .collect();
    let mut mems: Vec<Vec<u8>> = (0..n)
        .map(|r| {
            let mut input = vec![0u8; stride];
            kernels::fill_input(DataType::I32, RedOp::Sum, r, 0, &mut input);
            let mut out = vec![0xee; stride];
            // Our own block, as the communicator copies it before the exchange.
            let b = block(count, n, r);
            out[b.start * s..b.end * s].copy_from_slice(&input[b.start * s..b.end * s]);
            [input, out].concat()
        })
        .collect();
    let mut written = vec![vec![0u8; stride]; n];
    // Per (sender, lane): the next send; the receiver's next receive on the same lane.
    let mut next = vec![vec![0usize; n.saturating_sub(1)]; n];
    let mut rng = Lcg(seed);
    loop {
        let open: Vec<(usize, usize)> = (0..n)
            .flat_map(|r| (0..n - 1).map(move |l| (r, l)))
            .filter(|&(r, l)| next[r][l] < plans[r][l].sends.len())
            .collect();
        let Some(&(r, l)) = open.get(rng.next() as usize % open.len().max(1)) else {
            break;
        };
        let to = (r + l + 1) % n;
        let i = next[r][l];
        let send = &plans[r][l].sends[i];
        let recv = &plans[to][l].recvs[i];
        assert!(
            send.after_recv.is_none() && recv.after_send.is_none(),
            "{what}"
        );
        assert!(
            send.piece.range.len() <= slot,
            "{what}: a piece larger than a slot"
        );
        assert_eq!(
            send.piece.range.len(),
            recv.piece.range.len(),
            "{what}: {r}->{to}"
        );
        assert_eq!(recv.action, Action::Copy, "{what}");
        assert!(send.piece.range.end <= stride && recv.piece.range.start >= stride);
        let bytes = mems[r][send.piece.range.clone()].to_vec();
        mems[to][recv.piece.range.clone()].copy_from_slice(&bytes);
        for b in recv.piece.range.clone() {
            written[to][b - stride] += 1;
        }
        next[r][l] += 1;
    }
    let b = count / n * s;
    for r in 0..n {
        for (l, mine) in plans[r].iter().enumerate() {
            let to = (r + l + 1) % n;
            assert_eq!(plans[to][l].recvs.len(), mine.sends.len(), "{what}");
        }
        for (j, w) in written[r][..b * n].chunks(b.max(1)).enumerate() {
            let want = u8::from(j != r);
            assert!(w.iter().all(|&x| x == want), "{what}: rank {r} block {j}");
        }
        let out = &mems[r][stride..];
        for i in 0..count {
            if let Some(want) = reference(Coll::AllToAll, n, count, RedOp::Sum, r, i) {
                assert_eq!(
                    value(DataType::I32, out, i),
                    Some(want),
                    "{what}: rank {r} element {i}"
                );
            }
        }
    }
}

#[test]
fn direct_all_to_all_matches_the_reference_for_1_to_17_ranks() {
    for n in 1usize..=17 {
        let counts = [0, 1, n.saturating_sub(1), n, n + 1, 3 * n + 2, 5 * n, 101];
        for count in counts {
            for slot in [4, 12, 4096] {
                check_direct(n, count, slot, (n * 131 + count * 7 + slot) as u64);
            }
        }
    }
    // Each rank sends (n−1)/n of the blocks, once: n/2 times less than the ring for n even.
    let plans = alltoall_direct(2, 8, 80, 4, 1 << 20, 320).unwrap();
    assert_eq!(plans.len(), 7);
    assert!(plans.iter().all(|p| p.bytes_sent() == 40));
    assert!(alltoall_direct(0, 4, 80, 4, 2, 320).is_err());
    assert!(alltoall_direct(0, 4, 80, 4, 64, 100).is_err());
}

#[test]
fn reduce_applies_every_operator() {
    for op in RedOp::ALL {
        for n in [2, 3, 6] {
            check_blocks(Coll::Reduce { root: 1 }, n, 37, op, (8, 2));
        }
    }
}

/// The pieces on each link agree at both ends (step, block, length), and a ring all-to-all
/// puts n(n−1)/2 blocks on every link, gather n−1 on the root's incoming one.
#[test]
fn blocked_plans_agree_on_both_ends_of_each_link_and_load_the_ring_as_documented() {
    for n in 2..=8 {
        for count in [1, n - 1, n, 7 * n + 3] {
            for coll in [
                Coll::AllToAll,
                Coll::Reduce { root: n / 2 },
                Coll::Gather { root: n - 1 },
                Coll::Scatter { root: 1 },
            ] {
                let plans: Vec<Plan> = (0..n)
                    .map(|r| plan(coll, r, n, count, 4, 16).unwrap())
                    .collect();
                for r in 0..n {
                    let key = |p: &vl_coll::schedule::Piece| (p.step, p.chunk, p.range.len());
                    let sent: Vec<_> = plans[r].sends.iter().map(|m| key(&m.piece)).collect();
                    let due: Vec<_> = plans[(r + 1) % n]
                        .recvs
                        .iter()
                        .map(|m| key(&m.piece))
                        .collect();
                    assert_eq!(sent, due, "{coll:?} n={n} count={count} rank {r}");
                }
                let b = count / n * 4;
                let sent = |r: usize| plans[r].bytes_sent();
                match coll {
                    Coll::AllToAll => (0..n).for_each(|r| assert_eq!(sent(r), b * n * (n - 1) / 2)),
                    Coll::Gather { root } => assert_eq!(sent((root + n - 1) % n), (n - 1) * b),
                    Coll::Scatter { root } => assert_eq!(sent(root), (n - 1) * b),
                    _ => {}
                }
            }
        }
    }
}

#[test]
fn a_root_outside_the_world_and_a_short_stride_are_refused() {
    for coll in [
        Coll::Reduce { root: 4 },
        Coll::Gather { root: 4 },
        Coll::Scatter { root: 4 },
    ] {
        assert!(plan(coll, 0, 4, 10, 4, 64).unwrap_err().contains("root 4"));
    }
    assert!(plan_in(Coll::AllToAll, 0, 4, 10, 4, 64, 39)
        .unwrap_err()
        .contains("39 bytes apart"));
}

#[test]
fn new_busbw_factors_are_nccl_tests() {
    assert_eq!(Coll::AllToAll.busbw_factor(4), 0.75);
    assert_eq!(Coll::Gather { root: 0 }.busbw_factor(8), 0.875);
    assert_eq!(Coll::Scatter { root: 0 }.busbw_factor(2), 0.5);
    assert_eq!(Coll::Reduce { root: 0 }.busbw_factor(4), 1.0);
}

// ---- Recursive doubling (`vl_coll::algo`) ----

use vl_coll::algo::{rd_latency_steps, rd_partners, rd_steps, Algo, AlphaBeta, RdStep};

/// One rank running its recursive-doubling steps in order, each on the link to its partner.
struct RdRank {
    steps: Vec<RdStep>,
    /// The step being run, and within it: sends posted, read by the NIC, receives applied.
    step: usize,
    posted: usize,
    completed: usize,
    processed: usize,
    in_flight: VecDeque<usize>,
    buf: Vec<u8>,
}

/// Runs every rank's steps with the engine's rules on per-partner links: a directed link has
/// `nslots` credits and delivers in order; messages from a partner that is a step ahead wait in
/// the link until the receiver runs the step that expects them; a send's bytes are read when
/// the "NIC" likes, and a receive that overwrites a range waits for the completion its plan
/// names. Returns the buffers; panics on a deadlock or a message the plan did not expect.
fn simulate_rd(
    ins: &[Vec<u8>],
    (dtype, op): (DataType, RedOp),
    (slot, nslots): (usize, usize),
) -> Vec<Vec<u8>> {
    let n = ins.len();
    let count = ins[0].len() / dtype.size();
    let inputs = ins;
    let what = format!("rd n={n} count={count} slot={slot} nslots={nslots}");
    let mut ranks: Vec<RdRank> = inputs
        .iter()
        .enumerate()
        .map(|(r, input)| RdRank {
            steps: rd_steps(r, n, count, dtype.size(), slot).unwrap(),
            step: 0,
            posted: 0,
            completed: 0,
            processed: 0,
            in_flight: VecDeque::new(),
            buf: input.clone(),
        })
        .collect();
    // Per directed link (from, to): messages in flight, and the sender's credits.
    let mut wire: std::collections::HashMap<(usize, usize), VecDeque<Vec<u8>>> = Default::default();
    let mut credits: std::collections::HashMap<(usize, usize), usize> = Default::default();
    let mut rng = Lcg((n * 7919 + count) as u64);
    let mut idle_rounds = 0;
    loop {
        if ranks.iter().all(|r| r.step == r.steps.len()) {
            break;
        }
        let mut progress = false;
        for k in 0..n {
            let r = (k + rng.next() as usize) % n;
            let Some(st) = ranks[r].steps.get(ranks[r].step).cloned() else {
                continue;
            };
            let p = st.partner;
            assert_ne!(p, r, "{what}: rank {r} partners itself");
            // Post.
            loop {
                let me = &mut ranks[r];
                let c = credits.entry((r, p)).or_insert(nslots);
                if me.posted >= st.plan.sends.len() || *c == 0 {
                    break;
                }
                assert!(
                    st.plan.sends[me.posted].after_recv.is_none(),
                    "{what}: no forwarding within a step"
                );
                *c -= 1;
                me.in_flight.push_back(me.posted);
                me.posted += 1;
                progress = true;
            }
            // The NIC reads a posted send.
            if !ranks[r].in_flight.is_empty() && rng.next() % 3 != 0 {
                let me = &mut ranks[r];
                let i = me.in_flight.pop_front().unwrap();
                let range = st.plan.sends[i].piece.range.clone();
                assert!(range.len() <= slot, "{what}: a piece larger than a slot");
                let bytes = me.buf[range].to_vec();
                me.completed += 1;
                wire.entry((r, p)).or_default().push_back(bytes);
                progress = true;
            }
            // Apply arrivals from the partner.
            loop {
                let me = &mut ranks[r];
                if me.processed >= st.plan.recvs.len() {
                    break;
                }
                let m = &st.plan.recvs[me.processed];
                if m.after_send.is_some_and(|s| s >= me.completed) {
                    break;
                }
                let Some(data) = wire.get_mut(&(p, r)).and_then(VecDeque::pop_front) else {
                    break;
                };
                assert_eq!(
                    data.len(),
                    m.piece.range.len(),
                    "{what}: rank {r} step {}: size vs the plan",
                    me.step
                );
                let dst = &mut me.buf[m.piece.range.clone()];
                match m.action {
                    Action::Reduce => kernels::reduce(dtype, op, dst, &data).unwrap(),
                    Action::Copy => dst.copy_from_slice(&data),
                }
                me.processed += 1;
                *credits.entry((p, r)).or_insert(nslots) += 1;
                progress = true;
            }
            // Next step once this one is done.
            let me = &mut ranks[r];
            if me.processed == st.plan.recvs.len() && me.completed == st.plan.sends.len() {
                me.step += 1;
                (me.posted, me.completed, me.processed) = (0, 0, 0);
                progress = true;
            }
        }
        watch_for_deadlock(progress, &mut idle_rounds, &what);
    }
    for (link, q) in &wire {
        assert!(
            q.is_empty(),
            "{what}: link {link:?} holds messages nobody expected"
        );
    }
    for (link, c) in &credits {
        assert_eq!(*c, nslots, "{what}: link {link:?}: credits all returned");
    }
    ranks.into_iter().map(|r| r.buf).collect()
}

fn check_rd(n: usize, count: usize, dtype: DataType, op: RedOp, slot: usize, nslots: usize) {
    let ins = inputs(dtype, op, n, count);
    let outs = simulate_rd(&ins, (dtype, op), (slot, nslots));
    let what = format!("rd n={n} count={count} {dtype} {op} slot={slot} nslots={nslots}");
    // The reference: the plain reduction of every rank's input, element by element. Avg is the
    // sum here (the communicator divides after the algorithm).
    let red = if op == RedOp::Avg { RedOp::Sum } else { op };
    let mut want = ins[0].clone();
    for i in &ins[1..] {
        kernels::reduce(dtype, red, &mut want, i).unwrap();
    }
    for (r, out) in outs.iter().enumerate() {
        assert_eq!(out, &want, "{what}: rank {r}");
    }
}

#[test]
fn recursive_doubling_matches_the_reference_for_1_to_17_ranks() {
    for n in 1..=17 {
        for count in [0, 1, 2, 3, 5, 7, 16, 17, 100, 257] {
            // One piece per step, several, and pieces of one element.
            for (slot, nslots) in [(4096, 8), (12, 2), (4, 1)] {
                check_rd(n, count, DataType::I32, RedOp::Sum, slot, nslots);
            }
        }
    }
}

#[test]
fn every_type_and_op_through_recursive_doubling() {
    for &dtype in &DataType::ALL {
        for &op in &RedOp::ALL {
            for n in [3, 4, 6] {
                check_rd(n, 11, dtype, op, 3 * dtype.size(), 2);
            }
        }
    }
}

#[test]
fn recursive_doubling_takes_log2_steps_plus_the_fold() {
    for n in 1..=17usize {
        let p = if n == 0 {
            0
        } else {
            1usize << (usize::BITS - 1 - n.leading_zeros())
        };
        let want = if n == 1 {
            0
        } else {
            p.trailing_zeros() as usize + 2 * usize::from(p != n)
        };
        assert_eq!(rd_latency_steps(n), want, "n={n}");
        for r in 0..n {
            let steps = rd_steps(r, n, 10, 4, 4096).unwrap();
            // The steps a rank runs: at most the critical path, each one piece here.
            assert!(steps.len() <= want, "n={n} rank {r}: {} steps", steps.len());
            let partners = rd_partners(r, n);
            for s in &steps {
                assert!(partners.contains(&s.partner), "n={n} rank {r}");
                // Partnership is mutual.
                assert!(
                    rd_partners(s.partner, n).contains(&r),
                    "n={n} rank {r} -> {}",
                    s.partner
                );
            }
            // The ring's neighbours are not all a doubling rank needs: partners beyond them.
            if n >= 8 && r >= 2 * (n - p) {
                assert!(partners
                    .iter()
                    .any(|&q| q.abs_diff(r) > 1 && q.abs_diff(r) != n - 1));
            }
        }
    }
}

#[test]
fn recursive_doubling_refuses_nonsense() {
    assert!(rd_steps(3, 3, 10, 4, 4096).is_err());
    assert!(rd_steps(0, 0, 10, 4, 4096).is_err());
    assert!(rd_steps(0, 2, 10, 8, 4)
        .unwrap_err()
        .contains("cannot hold"));
}

#[test]
fn auto_picks_doubling_for_small_messages_and_the_ring_for_large() {
    let m = AlphaBeta::SOFTROCE;
    for n in 2..=17 {
        let x = m.crossover(n);
        assert!(x > 0, "n={n}");
        // The crossover is where the model's two times meet: just below it doubling wins,
        // just above it the ring.
        assert!(m.rd(n, x / 2) < m.ring(n, x / 2), "n={n}");
        assert!(m.rd(n, x * 2) > m.ring(n, x * 2), "n={n}");
        assert_eq!(Algo::Auto.resolve(n, 8), Algo::Rd, "n={n}");
        assert_eq!(Algo::Auto.resolve(n, 64 << 20), Algo::Ring, "n={n}");
    }
    assert_eq!(Algo::Auto.resolve(1, 8), Algo::Ring);
    assert_eq!(Algo::Rd.resolve(4, 1 << 30), Algo::Rd);
    assert_eq!(Algo::Ring.resolve(4, 8), Algo::Ring);
}

#[test]
fn algorithm_names_and_nccls() {
    assert_eq!("RING".parse::<Algo>(), Ok(Algo::Ring));
    assert_eq!("recursive-doubling".parse::<Algo>(), Ok(Algo::Rd));
    assert!("tree"
        .parse::<Algo>()
        .unwrap_err()
        .contains("ring, rd, direct or auto"));
    assert_eq!(Algo::from_nccl("Ring"), Ok(Algo::Ring));
    assert_eq!(Algo::from_nccl("Tree"), Ok(Algo::Rd));
    assert_eq!(Algo::from_nccl("Tree,Ring"), Ok(Algo::Auto));
    assert_eq!(Algo::from_nccl("^Tree"), Ok(Algo::Ring));
    assert!(Algo::from_nccl("NVLS")
        .unwrap_err()
        .contains("'NVLS' has no counterpart"));
    assert!(Algo::from_nccl("^Ring,Tree")
        .unwrap_err()
        .contains("leaves no algorithm"));
}

#[test]
fn the_crossover_table_in_algos_documentation_is_the_models() {
    // KiB, rounded down, as coll/src/algo.rs and lesson 15's README print them.
    let table = [
        (2, 78),
        (3, 6),
        (4, 69),
        (5, 19),
        (6, 29),
        (8, 92),
        (12, 63),
        (16, 138),
        (17, 76),
    ];
    for (n, kib) in table {
        assert_eq!(AlphaBeta::SOFTROCE.crossover(n) / 1024, kib, "n={n}");
        assert_eq!(
            rd_latency_steps(n),
            [0, 0, 1, 3, 2, 4, 4, 4, 3, 5, 5, 5, 5, 5, 5, 5, 4, 6][n],
            "n={n}"
        );
    }
    // The header's figure for 4 ranks.
    assert_eq!(AlphaBeta::SOFTROCE.crossover(4), 71111);
}

// ---------------------------------------------------------------------------------------------
// Channels: every chunk split over K QPs per neighbour.

/// A channel's share of a range: the shares of all K channels are consecutive whole elements
/// that cover the range once, for sizes not divisible by K and fewer elements than channels.
#[test]
fn channel_shares_cover_every_byte_once() {
    for elem in [1, 4, 8] {
        for len in 0..40 {
            for of in 1..=17 {
                let r = 3 * elem..(3 + len) * elem;
                let shares: Vec<_> = (0..of)
                    .map(|index| Channel { index, of }.share(r.clone(), elem))
                    .collect();
                let mut seen = vec![0u8; r.end];
                for s in &shares {
                    assert_eq!(s.len() % elem, 0, "whole elements");
                    s.clone().for_each(|b| seen[b] += 1);
                }
                assert!(seen[..r.start].iter().all(|&c| c == 0));
                assert!(
                    seen[r.clone()].iter().all(|&c| c == 1),
                    "elem {elem} len {len} of {of}: {shares:?}"
                );
                let sizes: Vec<_> = shares.iter().map(|s| s.len() / elem).collect();
                let (lo, hi) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
                assert!(hi - lo <= 1, "elem {elem} len {len} of {of}: {sizes:?}");
            }
        }
    }
}

/// Per byte of a rank's memory, how many of `plans`' receives (or sends) cover it.
fn coverage(plans: &[Plan], len: usize, sends: bool) -> Vec<u32> {
    let mut c = vec![0u32; len];
    for p in plans {
        let ranges: Vec<_> = if sends {
            p.sends.iter().map(|m| m.piece.range.clone()).collect()
        } else {
            p.recvs.iter().map(|m| m.piece.range.clone()).collect()
        };
        for r in ranges {
            r.for_each(|b| c[b] += 1);
        }
    }
    c
}

/// The K channels' plans of a rank move, together, every byte the one-channel plan moves, as
/// often as it moves it (once per ring step), and no byte is on two channels.
#[test]
fn channel_plans_together_move_each_byte_as_one_channel_does_and_share_none() {
    let every = |n: usize| {
        let mut c = vec![
            Coll::AllReduce,
            Coll::ReduceScatter,
            Coll::AllGather,
            Coll::SendRecv,
            Coll::AllToAll,
        ];
        for root in [0, n - 1] {
            c.extend([
                Coll::Broadcast { root },
                Coll::Reduce { root },
                Coll::Gather { root },
                Coll::Scatter { root },
            ]);
        }
        c
    };
    for n in 1..=6 {
        for coll in every(n) {
            for of in [1, 2, 3, 4, 5, 16] {
                for count in [0, 1, 2, of - 1, n + 1, 3 * n + 2, 37, 100] {
                    let stride = count * 4;
                    let len = 2 * stride + scratch_bytes(n, count, 4);
                    for r in 0..n {
                        let one = plan_in(coll, r, n, count, 4, 12, stride).unwrap();
                        let ch: Vec<Plan> = (0..of)
                            .map(|index| {
                                let c = Channel { index, of };
                                plan_channel(coll, r, n, count, 4, 12, stride, c).unwrap()
                            })
                            .collect();
                        let what = format!("{coll:?} n={n} count={count} of={of} rank {r}");
                        for sends in [false, true] {
                            let whole = coverage(std::slice::from_ref(&one), len, sends);
                            assert_eq!(coverage(&ch, len, sends), whole, "{what}");
                            // A byte is on one channel only.
                            let each: Vec<_> = ch
                                .iter()
                                .map(|p| coverage(std::slice::from_ref(p), len, sends))
                                .collect();
                            for b in 0..len {
                                let on = each.iter().filter(|c| c[b] > 0).count();
                                assert!(on <= 1, "{what}: byte {b} on {on} channels");
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Every collective, run over K channels, ends as the reference says: sizes not divisible by
/// K, fewer elements than channels, and K larger than the ranks.
#[test]
fn every_collective_over_channels_matches_the_reference() {
    for n in [2, 3, 4, 5] {
        for of in [2, 3, 4, 7] {
            for count in [1, 2, of - 1, of + 1, 3 * n + 2, 37] {
                let slots = (8, 2);
                for coll in [
                    Coll::AllReduce,
                    Coll::ReduceScatter,
                    Coll::AllGather,
                    Coll::SendRecv,
                    Coll::Broadcast { root: n - 1 },
                ] {
                    check_channels(coll, n, count, slots, of);
                }
                check_blocks_channels(Coll::AllToAll, n, count, RedOp::Sum, slots, of);
                for coll in [
                    Coll::Reduce { root: 1 },
                    Coll::Gather { root: 0 },
                    Coll::Scatter { root: n - 1 },
                ] {
                    check_blocks_channels(coll, n, count, RedOp::Sum, slots, of);
                }
            }
        }
    }
}

#[test]
fn a_channel_outside_its_count_is_refused() {
    let bad = |index, of| plan_channel(Coll::AllReduce, 0, 2, 10, 4, 64, 40, Channel { index, of });
    assert!(bad(0, 0).unwrap_err().contains("channel 0 of 0"));
    assert!(bad(3, 3).is_err());
    assert!(bad(2, 3).is_ok());
}
