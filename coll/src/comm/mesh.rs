//! The direct all-to-all on the communicator: links to every rank, made once, and the n−1
//! exchanges run on them at once ([`schedule::alltoall_direct`]).
//!
//! **The mesh** is one [`Ring`] of n−1 lanes sharing a CQ: lane i (distance d = i+1) has a QP
//! from the rank d places to the left and one to the rank d places to the right, each with the
//! ring's slots, credits and message numbers — the ring's channel 0 is the same thing at d = 1.
//! Each lane is its own RoCE v2 flow; one loop of the engine drives them all, so every block
//! leaves at once and none waits for another.
//!
//! **Connecting it** is collective, like recursive doubling's partners: the first all-to-all
//! that takes the direct exchange runs it on every rank at once (the choice depends only on
//! the world and the algorithm, which every rank shares as a term of the rendezvous). Each rank
//! sends rank 0 its lanes' endpoints (the [`PairInfo`] list, the distance in the partner's
//! place), rank 0 broadcasts every rank's list, each rank brings lane d's left QP up to the
//! right QP of lane d of the rank d to its left and its right QP to the left QP of lane d of
//! the rank d to its right, and a barrier waits for every receive posted.

use super::channels::LaneKind;
use super::init::check_memlock;
use super::partners::{exchange_lists, PairInfo};
use super::*;

impl Comm {
    /// The direct exchange's plans for `count` elements, one per lane of the mesh, which is
    /// connected first if it is not yet ([`Comm::links_for`]).
    pub(super) fn direct_plans(&mut self, dtype: DataType, count: usize) -> Result<Vec<Plan>> {
        self.links_for(Algo::Direct)?;
        let slot = self.ring.as_ref().map_or(usize::MAX, |r| r.slot_bytes);
        let (rank, n, m) = (self.rank(), self.world_size(), self.max_bytes);
        schedule::alltoall_direct(rank, n, count, dtype.size(), slot, m).map_err(CollError::Usage)
    }

    /// Opens, describes, exchanges and connects the mesh's n−1 lanes (see the module
    /// documentation); every rank calls it at the same collective.
    pub(super) fn connect_mesh(&mut self) -> Result<()> {
        let (rank, n) = (self.rank(), self.world_size());
        let (ctx, pd, cfg) = self.link_base();
        let lanes = n - 1;
        // What is registered already (data, the ring's and the partners' slots), and the mesh's.
        let slots = cfg.nslots * cfg.slot_bytes;
        let ring_lanes = self.ring.as_ref().map_or(0, |r| r.lanes.len());
        let rd_lanes = self.partners.as_ref().map_or(0, |p| p.len());
        let mr_bytes = self.max_bytes * (2 + 2 * usize::from(self.scratch));
        // The ring's scratch is 2 x -e, more than the lanes' slots when -e is large: only a
        // refusal of the lanes' queues says the ring would do.
        check_memlock(mr_bytes + (ring_lanes + rd_lanes + lanes) * slots)
            .map_err(|e| direct_needs(n, e, false))?;
        let pair = Pair::open(
            &ctx,
            &pd,
            cfg.slot_bytes,
            cfg.nslots,
            (lanes, LaneKind::Peer),
        )
        .map_err(|e| direct_needs(n, e, true))?;
        let mine = pair
            .lanes
            .iter()
            .enumerate()
            .map(|(i, lane)| PairInfo::of(lane, i + 1))
            .collect::<Result<Vec<_>>>()?;
        let lists = exchange_lists(&mut self.star, &mine, "all-to-all link lists")?;
        let table = self.star.table().to_vec();
        let lane_of = |r: usize, d: usize| {
            lists[r]
                .iter()
                .find(|i| i.partner as usize == d)
                .copied()
                .ok_or_else(|| {
                    CollError::Bootstrap(format!(
                        "{} has no all-to-all link at distance {d}: do all ranks run the same \
                         build and world?",
                        table[r].who()
                    ))
                })
        };
        let mut peer_slots = Vec::with_capacity(lanes);
        for (i, ours) in mine.iter().enumerate() {
            let d = i + 1;
            let (from, to) = (
                schedule::ring_offset(rank, n, -(d as isize)),
                schedule::ring_offset(rank, n, d as isize),
            );
            let (l, r) = (lane_of(from, d)?, lane_of(to, d)?);
            pair.connect(
                i,
                &cfg,
                &table[rank],
                (ours.left_psn, ours.right_psn),
                (&table[from], l.right_qpn, l.right_psn),
                (&table[to], r.left_qpn, r.left_psn),
            )?;
            peer_slots.push(r.slots);
        }
        // Nobody writes before every rank's lanes are ready to receive.
        self.star.barrier()?;
        self.mesh = Some(pair.into_ring(ctx, &cfg, peer_slots));
        Ok(())
    }
}

/// A refusal of the mesh's queues or memory, saying what the direct exchange needs and, when
/// `ring_helps`, that the ring does without it.
fn direct_needs(n: usize, e: CollError, ring_helps: bool) -> CollError {
    let or_ring = if ring_helps {
        "; or give --algo ring (the blocks relayed around the ring)"
    } else {
        ""
    };
    match e {
        CollError::Usage(why) => CollError::Usage(format!(
            "the direct all-to-all needs a pair of QPs and --slots x --slot-size to each of the \
             {} other ranks: {why}{or_ring}",
            n - 1
        )),
        other => other,
    }
}
