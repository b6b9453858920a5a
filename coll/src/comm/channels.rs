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
