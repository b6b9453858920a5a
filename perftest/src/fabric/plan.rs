//! Which hosts meet when: the round-robin tournament of the pair check (every pair of hosts
//! exactly once, no host in two pairs of a round), and the rounds of a re-test (the slow pairs
//! again, packed into as few rounds of disjoint pairs as a greedy pass finds).

/// A pair of hosts (by rank), the lower rank first.
pub type Pair = (usize, usize);

/// The tournament on `n` hosts by the circle method: n − 1 rounds for n even, n for n odd (each
/// host sits one round out), every pair exactly once, no host twice in a round. Host n − 1 (or,
/// for n odd, the bye) stays put while the others turn around it.
pub fn tournament(n: usize) -> Vec<Vec<Pair>> {
    if n < 2 {
        return Vec::new();
    }
    // m players, m even: for n odd the last "player" is the bye.
    let m = n + n % 2;
    let turning = m - 1;
    (0..turning)
        .map(|r| {
            let mut round = vec![(r, m - 1)];
            for k in 1..m / 2 {
                round.push(((r + k) % turning, (r + turning - k) % turning));
            }
            round
                .into_iter()
                .filter(|&(a, b)| a < n && b < n)
                .map(|(a, b)| (a.min(b), a.max(b)))
                .collect()
        })
        .collect()
}

/// `pairs` in rounds of disjoint pairs, in their order: each round takes every pair left whose
/// hosts are both still free in it. (The slow pairs of a check share hosts — a bad host is in
/// all of its pairs — so they need as many rounds as the busiest host has pairs.)
pub fn disjoint_rounds(pairs: &[Pair]) -> Vec<Vec<Pair>> {
    let mut left: Vec<Pair> = pairs.to_vec();
    let mut rounds = Vec::new();
    while !left.is_empty() {
        let mut busy = std::collections::HashSet::new();
        let mut round = Vec::new();
        left.retain(|&(a, b)| {
            if busy.contains(&a) || busy.contains(&b) {
                return true;
            }
            busy.insert(a);
            busy.insert(b);
            round.push((a, b));
            false
        });
        rounds.push(round);
    }
    rounds
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn every_pair_once_no_host_twice_a_round_for_2_to_64_hosts() {
        for n in 2..=64 {
            let rounds = tournament(n);
            let want_rounds = if n % 2 == 0 { n - 1 } else { n };
            assert_eq!(rounds.len(), want_rounds, "n = {n}");
            let mut seen = HashSet::new();
            for (i, round) in rounds.iter().enumerate() {
                let mut hosts = HashSet::new();
                for &(a, b) in round {
                    assert!(a < b && b < n, "n = {n}, round {i}: ({a}, {b})");
                    assert!(hosts.insert(a) && hosts.insert(b), "n = {n}, round {i}");
                    assert!(seen.insert((a, b)), "n = {n}: ({a}, {b}) twice");
                }
                // Every host plays, but for the one bye of an odd n.
                assert_eq!(hosts.len(), n - n % 2, "n = {n}, round {i}");
            }
            assert_eq!(seen.len(), n * (n - 1) / 2, "n = {n}: every pair");
        }
        assert!(tournament(1).is_empty());
        assert!(tournament(0).is_empty());
    }

    #[test]
    fn a_retest_packs_disjoint_pairs_and_keeps_every_pair() {
        // Host 3 is in three slow pairs: three rounds, the others fill in beside it.
        let slow = [(0, 3), (1, 3), (2, 3), (0, 1), (2, 4)];
        let rounds = disjoint_rounds(&slow);
        assert_eq!(
            rounds,
            vec![vec![(0, 3), (2, 4)], vec![(1, 3)], vec![(2, 3), (0, 1)]]
        );
        for round in &rounds {
            let hosts: Vec<usize> = round.iter().flat_map(|&(a, b)| [a, b]).collect();
            let set: HashSet<usize> = hosts.iter().copied().collect();
            assert_eq!(set.len(), hosts.len());
        }
        assert!(disjoint_rounds(&[]).is_empty());
    }
}
