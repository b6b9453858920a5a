//! Lesson 10, the job both sides agree on: the queue names of a run, what a worker computes
//! (a share of a sum of squares, checked against its closed form), and the Result payload that
//! carries the answer back.

use anyhow::{ensure, Result};
use verbs_lab::mq::QueueFamily;

/// The queue names of a run: the coordinator's inbox `/vl10-PID`, and one inbox per worker,
/// `/vl10-PID-wI`.
pub(crate) const QUEUES: QueueFamily = QueueFamily {
    prefix: "/vl10-",
    tag: "w",
    base_is_queue: true,
};

/// What a worker computes: the sum of i² over its share [w·count, (w+1)·count), mod 2⁶⁴.
pub(crate) fn share(w: u32, count: u64) -> (u64, u64) {
    (u64::from(w) * count, u64::from(w + 1) * count)
}

/// Σ i² for 0 ≤ i < n, mod 2⁶⁴, in closed form: n(n−1)(2n−1)/6 (exact in u128 for n < 2⁴⁰).
pub(crate) fn sum_squares_below(n: u64) -> u64 {
    let n = u128::from(n);
    if n == 0 {
        return 0;
    }
    (n * (n - 1) * (2 * n - 1) / 6) as u64
}

/// The Result payload this lesson defines (20 bytes, big-endian): the sum, the nanoseconds the
/// work took, and the CPU the worker finished on. `verbs_lab::mq` carries it as opaque bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WorkResult {
    pub sum: u64,
    pub nanos: u64,
    pub cpu: u32,
}

impl WorkResult {
    const LEN: usize = 20;

    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(Self::LEN);
        v.extend_from_slice(&self.sum.to_be_bytes());
        v.extend_from_slice(&self.nanos.to_be_bytes());
        v.extend_from_slice(&self.cpu.to_be_bytes());
        v
    }

    pub fn decode(b: &[u8]) -> Result<WorkResult> {
        ensure!(
            b.len() == Self::LEN,
            "a result payload of {} bytes, expected {}",
            b.len(),
            Self::LEN
        );
        let u64_at = |i: usize| u64::from_be_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        Ok(WorkResult {
            sum: u64_at(0),
            nanos: u64_at(8),
            cpu: u32::from_be_bytes(b[16..20].try_into().expect("4 bytes")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closed_form_matches_the_loop() {
        for n in [0u64, 1, 2, 3, 10, 1000] {
            let lp = (0..n).fold(0u64, |s, i| s.wrapping_add(i * i));
            assert_eq!(sum_squares_below(n), lp, "n = {n}");
        }
        let (lo, hi) = share(1, 1000);
        let lp = (lo..hi).fold(0u64, |s, i| s.wrapping_add(i * i));
        assert_eq!(
            sum_squares_below(hi).wrapping_sub(sum_squares_below(lo)),
            lp
        );
    }

    #[test]
    fn work_result_round_trips_strictly() {
        let r = WorkResult {
            sum: 1 << 60,
            nanos: 12345,
            cpu: 1,
        };
        assert_eq!(WorkResult::decode(&r.encode()).unwrap(), r);
        assert!(WorkResult::decode(&[0; 19]).is_err());
    }
}
