//! The bytes the lessons send: a pattern both sides can compute, and where a message differs
//! from it.

/// A byte pattern both sides can compute: a message's bytes depend on its iteration number, so
/// a stale or misplaced message is caught, not just a missing one.
pub fn pattern(iteration: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| {
            (i as u64)
                .wrapping_mul(131)
                .wrapping_add(iteration.wrapping_mul(7)) as u8
        })
        .collect()
}

/// The first offset where `got` differs from `want`, if any.
pub fn first_mismatch(got: &[u8], want: &[u8]) -> Option<usize> {
    got.iter()
        .zip(want)
        .position(|(a, b)| a != b)
        .or((got.len() != want.len()).then(|| got.len().min(want.len())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_depend_on_iteration() {
        assert_ne!(pattern(1, 64), pattern(2, 64));
        assert_eq!(first_mismatch(&pattern(1, 8), &pattern(1, 8)), None);
        assert_eq!(first_mismatch(b"abc", b"abd"), Some(2));
        assert_eq!(first_mismatch(b"ab", b"abc"), Some(2));
    }
}
