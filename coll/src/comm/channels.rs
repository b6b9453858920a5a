//! The ring's channels after the first: their bound, the term every rank must share, and their
//! connection after the rendezvous.
//!
//! Channel 0's QPNs, PSNs and slots travel in the bootstrap record, as with one channel. With K
//! channels every rank then sends rank 0 the endpoints of its channels 1..K (the
//! [`PairInfo`] list of the recursive-doubling partners, the channel's index in the partner's
//! place); rank 0 broadcasts every rank's list, and each rank brings channel k's left QP up to
//! its left neighbour's channel-k right QP and its right QP to its right neighbour's channel-k
//! left QP. The barrier after it is the ring's.

use super::partners::{exchange_lists, PairInfo};
use super::*;

/// The most channels (QPs per ring neighbour). Each costs a pair of QPs and `--slots` ×
/// `--slot-size` of registered memory per rank (1 MiB by default), and takes its share of every
/// chunk, so more channels mean smaller messages and more of them. What channels buy is paths:
/// on an ECMP fabric of m equal paths, K flows hashed independently leave some path unused with
/// probability at most m × (1 − 1/m)^K — with 2 paths 1 in 8 for 4 channels, 3 in 100,000 for
/// 16 — so beyond 16 a rank pays memory and smaller pieces for next to nothing.
pub const MAX_CHANNELS: usize = 16;

/// The term every rank must share when there is more than one channel (rank 0 refuses a rank
/// whose terms differ, naming the option and both values).
const TERM: &str = "--channels";

/// `channels` must be 1..=[`MAX_CHANNELS`].
pub(super) fn check(channels: usize) -> Result<()> {
    if (1..=MAX_CHANNELS).contains(&channels) {
        return Ok(());
    }
    Err(CollError::Usage(format!(
        "{channels} channels: give 1 to {MAX_CHANNELS} QPs per ring neighbour"
    )))
}

/// The queue depths of a [`Pair`] of `lanes` channels of `nslots` slots each, as
/// [`Pair::open`] asks the device for them. Each QP's send queue holds a piece per credit (or a
/// credit per slot, to the left) twice over with room to spare, its receive queue a message per
/// slot; every QP of every channel completes into the one CQ, which is therefore as deep as
/// all of their queues together: `lanes × 2 × (sq + rq)`, 6 × `nslots` + 40 per channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Depths {
    /// Work requests of each QP's send queue.
    pub(super) sq: usize,
    /// Work requests of each QP's receive queue.
    pub(super) rq: usize,
    /// Entries of the CQ.
    pub(super) cqe: usize,
}

impl Depths {
    pub(super) fn of(nslots: usize, lanes: usize) -> Depths {
        let sq = nslots.saturating_mul(2).saturating_add(16);
        let rq = nslots.saturating_add(4);
        Depths {
            sq,
            rq,
            cqe: lanes
                .saturating_mul(2)
                .saturating_mul(sq.saturating_add(rq)),
        }
    }
}

/// What the lanes of a [`Pair`] are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LaneKind {
    /// The ring's channels (`--channels`), or a recursive-doubling partner's one lane.
    Channel,
    /// The direct all-to-all's: one per rank it writes to, as many as the world has others.
    Peer,
}

/// `lanes` channels of `nslots` slots fit the queues device `dev` grants (its `max_cqe` and
/// `max_qp_wr`, from `ibv_query_device`, as `ibv_devinfo -v` lists them): checked before the CQ and the QPs
/// are created, so that a deep pipeline over many channels is refused naming the numbers and
/// the largest --slots (and --channels) that fit, rather than failing in `ibv_create_cq`.
/// rxe grants 32767 CQ entries: 16 channels fit 334 slots, one channel 5454. The lanes are
/// the ring's channels, or the direct all-to-all's peers ([`LaneKind`]), which the refusal
/// names as what they are.
pub(super) fn check_depths(
    dev: &str,
    (lanes, nslots, kind): (usize, usize, LaneKind),
    (max_cqe, max_qp_wr): (i32, i32),
) -> Result<()> {
    let d = Depths::of(nslots, lanes);
    let max_cqe = usize::try_from(max_cqe).unwrap_or(0);
    let max_wr = usize::try_from(max_qp_wr).unwrap_or(0);
    if d.cqe <= max_cqe && d.sq <= max_wr {
        return Ok(());
    }
    let devinfo = verbs_lab::verbs::error::advice().devinfo;
    // What fits: the most slots with these channels (6 n + 40 entries per channel, a send
    // queue of 2 n + 16), and the most channels of these slots.
    let most_slots =
        ((max_cqe / lanes.max(1)).saturating_sub(40) / 6).min(max_wr.saturating_sub(16) / 2);
    let most_channels = max_cqe / Depths::of(nslots, 1).cqe.max(1);
    let mut fixes = Vec::new();
    if most_slots > 0 {
        fixes.push(format!("give --slots {most_slots} or fewer"));
    }
    if kind == LaneKind::Channel && lanes > 1 && most_channels > 0 && d.sq <= max_wr {
        fixes.push(format!("--channels {most_channels} or fewer"));
    }
    let fix = if fixes.is_empty() {
        "its queues cannot hold one slot".to_string()
    } else {
        fixes.join(", or ")
    };
    let asked = match (kind, lanes) {
        (LaneKind::Channel, 1) => format!("--slots {nslots}"),
        (LaneKind::Channel, k) => format!("--channels {k} x --slots {nslots}"),
        (LaneKind::Peer, k) => format!("{k} peer(s) x --slots {nslots}"),
    };
    let what = match kind {
        LaneKind::Channel => "channel(s)",
        LaneKind::Peer => "peer(s)",
    };
    Err(CollError::Usage(if d.cqe > max_cqe {
        format!(
            "{asked}: the completion queue would need {} entries ({lanes} {what} x 2 QPs x \
             (send queue 2 x {nslots} + 16 + receive queue {nslots} + 4)), more than {dev}'s \
             max_cqe of {max_cqe} ({devinfo}): {fix}",
            d.cqe
        )
    } else {
        format!(
            "{asked}: each QP's send queue would hold 2 x {nslots} + 16 = {} work requests, \
             more than {dev}'s max_qp_wr of {max_wr} ({devinfo}): {fix}",
            d.sq
        )
    }))
}

/// `terms` with the channel count when there is more than one (one channel adds nothing, so
/// a record is what it was before channels).
pub(super) fn with_term(terms: &[(String, String)], channels: usize) -> Vec<(String, String)> {
    let mut t = terms.to_vec();
    if channels > 1 && !t.iter().any(|(o, _)| o == TERM) {
        t.push((TERM.into(), channels.to_string()));
    }
    t
}

/// Connects channels 1.. of `pair` (see the module documentation); `ends` are our record and
/// the left and right neighbours'. Returns the right neighbour's slots of each, in order.
pub(super) fn connect_more(
    star: &mut Star,
    pair: &Pair,
    cfg: &PortCfg,
    (me, lrec, rrec): (&RankRecord, &RankRecord, &RankRecord),
) -> Result<Vec<RemoteBuf>> {
    let k = pair.lanes.len();
    if k == 1 {
        return Ok(Vec::new());
    }
    let mine = pair.lanes[1..]
        .iter()
        .enumerate()
        .map(|(i, lane)| PairInfo::of(lane, i + 1))
        .collect::<Result<Vec<_>>>()?;
    let lists = exchange_lists(star, &mine, "channel lists")?;
    let lane_of = |rec: &RankRecord, c: usize| {
        lists[rec.rank as usize]
            .iter()
            .find(|i| i.partner as usize == c)
            .copied()
            .ok_or_else(|| {
                CollError::Bootstrap(format!(
                    "{} has no channel {c} of {k}: give every rank the same --channels",
                    rec.who()
                ))
            })
    };
    let mut peer_slots = Vec::with_capacity(k - 1);
    for (c, ours) in (1..k).zip(&mine) {
        let (left, right) = (lane_of(lrec, c)?, lane_of(rrec, c)?);
        pair.connect(
            c,
            cfg,
            me,
            (ours.left_psn, ours.right_psn),
            (lrec, left.right_qpn, left.right_psn),
            (rrec, right.left_qpn, right.left_psn),
        )?;
        peer_slots.push(right.slots);
    }
    Ok(peer_slots)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// rxe's limits (`ibv_devinfo -v` in the guest).
    const RXE: (i32, i32) = (32767, 1 << 20);

    #[test]
    fn the_direct_all_to_alls_lanes_are_named_as_peers_without_a_channels_fix() {
        let e = check_depths("rxe0", (2, 3000, LaneKind::Peer), RXE)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(
                "2 peer(s) x --slots 3000: the completion queue would need 36080 entries (2 \
                 peer(s) x 2 QPs"
            ),
            "{e}"
        );
        assert!(e.ends_with(": give --slots 2723 or fewer"), "{e}");
    }

    #[test]
    fn the_depths_are_what_pair_open_asked_for_before_they_had_a_name() {
        // 2 × (2 n + 16) + 2 n + 8 per channel, the CQ's size before `Depths`.
        for (n, k) in [(1, 1), (8, 1), (8, 16), (334, 16), (5454, 1)] {
            let d = Depths::of(n, k);
            assert_eq!(
                d.cqe,
                k * (2 * (2 * n + 16) + 2 * n + 8),
                "{n} slots, {k} channels"
            );
            assert_eq!((d.sq, d.rq), (2 * n + 16, n + 4));
        }
    }

    #[test]
    fn queues_deeper_than_the_device_grants_are_refused_naming_what_fits() {
        // The largest that fit, and one slot more.
        assert!(check_depths("rxe0", (16, 334, LaneKind::Channel), RXE).is_ok());
        assert!(check_depths("rxe0", (1, 5454, LaneKind::Channel), RXE).is_ok());
        let e = check_depths("rxe0", (16, 335, LaneKind::Channel), RXE).unwrap_err();
        assert!(matches!(e, CollError::Usage(_)), "{e:?}");
        let devinfo = verbs_lab::verbs::error::advice().devinfo;
        assert_eq!(
            e.to_string(),
            format!(
                "--channels 16 x --slots 335: the completion queue would need 32800 entries (16 \
                 channel(s) x 2 QPs x (send queue 2 x 335 + 16 + receive queue 335 + 4)), more \
                 than rxe0's max_cqe of 32767 ({devinfo}): give --slots 334 or fewer, or \
                 --channels 15 or fewer"
            )
        );
        let e = check_depths("rxe0", (1, 5455, LaneKind::Channel), RXE)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("--slots 5455: the completion queue would need 32770 entries"),
            "{e}"
        );
        assert!(e.ends_with(": give --slots 5454 or fewer"), "{e}");
        // A device whose work requests run out first.
        let e = check_depths("mlx5_0", (2, 600, LaneKind::Channel), (1 << 22, 1024))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(
                "each QP's send queue would hold 2 x 600 + 16 = 1216 work requests, more \
                        than mlx5_0's max_qp_wr of 1024"
            ),
            "{e}"
        );
        assert!(e.ends_with(": give --slots 504 or fewer"), "{e}");
        // A device that cannot hold one slot.
        let e = check_depths("tiny", (1, 1, LaneKind::Channel), (40, 1024))
            .unwrap_err()
            .to_string();
        assert!(e.ends_with(": its queues cannot hold one slot"), "{e}");
    }

    #[test]
    fn the_bound_is_said_and_one_channel_adds_no_term() {
        assert!(check(1).is_ok() && check(MAX_CHANNELS).is_ok());
        for bad in [0, MAX_CHANNELS + 1] {
            let e = check(bad).unwrap_err().to_string();
            assert!(e.contains("give 1 to 16 QPs per ring neighbour"), "{e}");
        }
        let t = vec![("-e".to_string(), "64".to_string())];
        assert_eq!(with_term(&t, 1), t);
        assert_eq!(
            with_term(&t, 4).last().unwrap(),
            &("--channels".to_string(), "4".to_string())
        );
    }
}
