//! Which hosts meet when: the round-robin tournament of the pair check (every pair of hosts
//! exactly once, no host in two pairs of a round). The re-test runs each slow pair alone.

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
}
