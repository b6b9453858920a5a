//! The ring schedules of `verbs_lab::coll::schedule`, executed by a plain simulation of n ranks
//! with the engine's rules (credits, slots, dependencies, a NIC that reads a send's bytes at a
//! time of its choosing), checked against a direct computation of each collective.

use std::collections::VecDeque;

use verbs_lab::coll::kernels::{self, DataType, RedOp};
use verbs_lab::coll::schedule::{chunk, plan, Action, Coll, Plan};

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
    /// Source of sends (the input for sendrecv, else the buffer itself).
    src: Option<Vec<u8>>,
    buf: Vec<u8>,
    posted: usize,
    completed: usize,
    processed: usize,
    credits: usize,
    /// Sends posted but not yet read by the "NIC".
    in_flight: VecDeque<usize>,
    /// Messages delivered from the left, in order.
    incoming: VecDeque<Vec<u8>>,
}

/// Runs the collective on every rank; returns each rank's final buffer.
fn simulate(
    coll: Coll,
    inputs: &[Vec<u8>],
    dtype: DataType,
    op: RedOp,
    slot: usize,
    nslots: usize,
    seed: u64,
) -> Vec<Vec<u8>> {
    let n = inputs.len();
    let count = inputs[0].len() / dtype.size();
    let mut ranks: Vec<Rank> = (0..n)
        .map(|r| {
            let p = plan(coll, r, n, count, dtype.size(), slot).unwrap();
            let (src, buf) = if coll == Coll::SendRecv {
                (Some(inputs[r].clone()), vec![0xee; inputs[r].len()])
            } else {
                (None, inputs[r].clone())
            };
            Rank {
                plan: p,
                src,
                buf,
                posted: 0,
                completed: 0,
                processed: 0,
                credits: nslots,
                in_flight: VecDeque::new(),
                incoming: VecDeque::new(),
            }
        })
        .collect();
    let mut rng = Lcg(seed);
    let done = |rs: &[Rank]| {
        rs.iter()
            .all(|r| r.processed == r.plan.recvs.len() && r.completed == r.plan.sends.len())
    };
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
            // The NIC reads the oldest posted send when it likes (in order, like a send queue).
            if !ranks[r].in_flight.is_empty() && rng.next() % 3 != 0 {
                let me = &mut ranks[r];
                let i = me.in_flight.pop_front().unwrap();
                let range = me.plan.sends[i].piece.range.clone();
                let bytes = me.src.as_ref().unwrap_or(&me.buf)[range].to_vec();
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
                let dst = &mut me.buf[m.piece.range.clone()];
                match m.action {
                    Action::Reduce => kernels::reduce(dtype, op, dst, &data).unwrap(),
                    Action::Copy => dst.copy_from_slice(&data),
                }
                me.processed += 1;
                ranks[(r + n - 1) % n].credits += 1;
                progress = true;
            }
        }
        if progress {
            idle_rounds = 0;
        } else {
            idle_rounds += 1;
            assert!(idle_rounds < 100, "{coll:?} n={n} count={count}: deadlock");
        }
    }
    for r in &ranks {
        assert!(r.incoming.is_empty(), "a rank received more than its plan");
        assert_eq!(r.credits, nslots, "credits all returned");
    }
    ranks.into_iter().map(|r| r.buf).collect()
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
    let (dtype, op) = (DataType::I32, RedOp::Sum);
    let ins = inputs(dtype, op, n, count);
    let outs = simulate(
        coll,
        &ins,
        dtype,
        op,
        slot,
        nslots,
        (n * 1000 + count) as u64,
    );
    let what = format!("{coll:?} n={n} count={count} slot={slot} nslots={nslots}");
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
                let outs = simulate(Coll::AllReduce, &ins, dtype, op, 3 * 8, 2, 7);
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
