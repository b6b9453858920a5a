//! Payload patterns for `--validate`: what byte `i` of message `seq` on QP `q` must be.
//!
//! A message is a fixed body (a function of the QP and the offset, with a period of 251 bytes so
//! that a shifted or misplaced copy does not match) with the message's sequence number stamped
//! over it: `seq + 1` little-endian in the first 8 bytes and, for messages of 16 bytes or more,
//! again in the last 8. The body is written once, before the run; a sender rewrites only the
//! stamps before each post, so checking every byte of every message costs the sender 16 bytes
//! of stores per message. Latency tests of RDMA Write end the message with a poll byte instead
//! (see [`poll_byte`]).

use verbs_lab::verbs::{Mr, VerbsError};

/// Byte `i` of the body of QP `q`.
#[inline]
pub fn body_byte(q: usize, i: usize) -> u8 {
    ((i % 251) as u32 * 7 + (q % 251) as u32 * 13 + 0x3b) as u8
}

/// Writes QP `q`'s body over `buf`.
pub fn fill_body(buf: &mut [u8], q: usize) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = body_byte(q, i);
    }
}

/// The last byte of write-latency message `seq`: never 0 (a cleared buffer), never the same
/// for two consecutive messages.
#[inline]
pub fn poll_byte(seq: u64) -> u8 {
    (seq % 255) as u8 + 1
}

/// Stamps message `seq` into `msg` (the whole message, `msg.len()` = size). With `poll_last`
/// the last byte becomes [`poll_byte`] (write latency), and the tail stamp moves before it.
#[inline]
pub fn stamp(msg: &mut [u8], seq: u64, poll_last: bool) {
    let n = msg.len();
    let v = (seq + 1).to_le_bytes();
    let body_end = if poll_last { n.saturating_sub(1) } else { n };
    let head = body_end.min(8);
    msg[..head].copy_from_slice(&v[..head]);
    if body_end >= 16 {
        msg[body_end - 8..body_end].copy_from_slice(&v);
    }
    if poll_last && n > 0 {
        msg[n - 1] = poll_byte(seq);
    }
}

/// Stamps message `seq` into the `n` bytes at `off` of `mr` (as [`stamp`] does to a slice).
///
/// The NIC may read the region at any time, so it is reached only through copies: a stamp
/// touches at most the first 8 and the last 9 bytes, so messages longer than 64 bytes are
/// stamped through a copy of their first and last 32 bytes (stamping that 64-byte excerpt puts
/// every stamp byte where it belongs in the whole message).
pub fn stamp_mr(
    mr: &Mr,
    off: usize,
    n: usize,
    seq: u64,
    poll_last: bool,
) -> Result<(), VerbsError> {
    const EDGE: usize = 32;
    if n <= 2 * EDGE {
        let mut msg = [0u8; 2 * EDGE];
        let msg = &mut msg[..n];
        mr.read(off, msg)?;
        stamp(msg, seq, poll_last);
        return mr.write(off, msg);
    }
    let tail = off
        .checked_add(n - EDGE)
        .ok_or_else(|| VerbsError::InvalidArgument(format!("message at {off} overflows")))?;
    let mut ends = [0u8; 2 * EDGE];
    mr.read(off, &mut ends[..EDGE])?;
    mr.read(tail, &mut ends[EDGE..])?;
    stamp(&mut ends, seq, poll_last);
    mr.write(off, &ends[..EDGE])?;
    mr.write(tail, &ends[EDGE..])
}

/// Writes QP `q`'s body over `range` of `mr` (as [`fill_body`] does to a slice).
pub fn fill_body_mr(mr: &Mr, range: std::ops::Range<usize>, q: usize) -> Result<(), VerbsError> {
    let mut body = vec![0u8; range.len()];
    fill_body(&mut body, q);
    mr.write(range.start, &body)
}

/// What byte `i` of message `seq` (of `n` bytes) on QP `q` must hold.
#[inline]
pub fn expected(q: usize, seq: u64, n: usize, i: usize, poll_last: bool) -> u8 {
    let v = (seq + 1).to_le_bytes();
    if poll_last && i + 1 == n {
        return poll_byte(seq);
    }
    let body_end = if poll_last { n.saturating_sub(1) } else { n };
    if i < body_end.min(8) {
        return v[i];
    }
    if body_end >= 16 && i >= body_end - 8 && i < body_end {
        return v[i - (body_end - 8)];
    }
    body_byte(q, i)
}

/// The first byte of `msg` that differs from message `seq` of QP `q`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mismatch {
    pub offset: usize,
    pub expected: u8,
    pub found: u8,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "byte {} is {:#04x}, expected {:#04x}",
            self.offset, self.found, self.expected
        )
    }
}

/// Checks every byte of `msg` against message `seq` of QP `q`.
pub fn check(msg: &[u8], q: usize, seq: u64, poll_last: bool) -> Result<(), Mismatch> {
    let n = msg.len();
    for (i, &found) in msg.iter().enumerate() {
        let want = expected(q, seq, n, i, poll_last);
        if found != want {
            return Err(Mismatch {
                offset: i,
                expected: want,
                found,
            });
        }
    }
    Ok(())
}

/// Checks only the body bytes (not the stamps) — for transports that may drop messages, where
/// the sequence number of the next message is not known in advance. Returns the stamped
/// sequence number when the message holds a whole 8-byte stamp.
pub fn check_body(msg: &[u8], q: usize) -> Result<Option<u64>, Mismatch> {
    let n = msg.len();
    let stamped = |i: usize| i < n.min(8) || (n >= 16 && i >= n - 8);
    for (i, &found) in msg.iter().enumerate() {
        if stamped(i) {
            continue;
        }
        let want = body_byte(q, i);
        if found != want {
            return Err(Mismatch {
                offset: i,
                expected: want,
                found,
            });
        }
    }
    if n >= 8 {
        let mut v = [0u8; 8];
        v.copy_from_slice(&msg[..8]);
        Ok(u64::from_le_bytes(v).checked_sub(1))
    } else {
        Ok(None)
    }
}

/// For RDMA Write with `slots` destination slots: the sequence number whose bytes slot `slot`
/// must hold after messages `0..total` were written round-robin (`seq % slots`), if any.
pub fn last_seq_in_slot(total: u64, slots: u64, slot: u64) -> Option<u64> {
    if slot >= total || slots == 0 {
        return None;
    }
    let last = total - 1;
    // The largest s <= last with s % slots == slot.
    Some(last - ((last % slots + slots - slot) % slots))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamped_messages_check_and_expected_agree() {
        for n in [1usize, 2, 7, 8, 9, 15, 16, 17, 64, 4096] {
            for poll in [false, true] {
                let mut m = vec![0u8; n];
                fill_body(&mut m, 3);
                stamp(&mut m, 1234, poll);
                assert_eq!(check(&m, 3, 1234, poll), Ok(()), "n={n} poll={poll}");
                assert!(check(&m, 3, 1235, poll).is_err() || n == 0);
                if n > 9 {
                    m[9] ^= 0xff;
                    let e = check(&m, 3, 1234, poll).unwrap_err();
                    assert_eq!(e.offset, 9);
                }
            }
        }
    }

    #[test]
    fn excerpt_stamping_matches_whole_message_stamping() {
        // stamp_mr stamps long messages through their first and last 32 bytes; the stamp bytes
        // must land exactly where stamping the whole message puts them.
        for n in [65usize, 100, 4096] {
            for poll in [false, true] {
                let mut whole = vec![0u8; n];
                fill_body(&mut whole, 2);
                let mut ends: Vec<u8> = whole[..32]
                    .iter()
                    .chain(&whole[n - 32..])
                    .copied()
                    .collect();
                stamp(&mut whole, 77, poll);
                stamp(&mut ends, 77, poll);
                assert_eq!(&ends[..32], &whole[..32], "n={n} poll={poll}");
                assert_eq!(&ends[32..], &whole[n - 32..], "n={n} poll={poll}");
            }
        }
    }

    #[test]
    fn poll_byte_never_zero_and_changes() {
        for s in 0..1000u64 {
            assert_ne!(poll_byte(s), 0);
            assert_ne!(poll_byte(s), poll_byte(s + 1));
        }
    }

    #[test]
    fn body_check_reads_the_stamp() {
        let mut m = vec![0u8; 100];
        fill_body(&mut m, 1);
        stamp(&mut m, 41, false);
        assert_eq!(check_body(&m, 1), Ok(Some(41)));
        m[50] = 0;
        assert_eq!(check_body(&m, 1).unwrap_err().offset, 50);
    }

    #[test]
    fn last_seq_per_slot() {
        // 10 messages over 4 slots: slot 0 got 0,4,8; slot 1 got 1,5,9; slot 2 got 2,6.
        assert_eq!(last_seq_in_slot(10, 4, 0), Some(8));
        assert_eq!(last_seq_in_slot(10, 4, 1), Some(9));
        assert_eq!(last_seq_in_slot(10, 4, 3), Some(7));
        assert_eq!(last_seq_in_slot(2, 4, 3), None);
        assert_eq!(last_seq_in_slot(5, 1, 0), Some(4));
    }
}
