//! What the lessons compatible with rdma-core's ping-pong examples share (04, 11, 12): the
//! `ibv_rc_pingpong` endpoint record and handshake, and the summary lines those programs print.

use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use verbs_lab::connect::Endpoint;
use verbs_lab::oob::OobConn;
use verbs_lab::verbs::Gid;

/// Size of `ibv_rc_pingpong`'s endpoint record on the wire: the text
/// `LLLL:QQQQQQ:PPPPPP:GGGG…` (LID, QPN, PSN in hex, then the GID as 32 hex digits in byte
/// order) in a fixed buffer of `sizeof "0000:000000:000000:00000000000000000000000000000000"`
/// bytes, the terminating NUL included.
pub const RC_PINGPONG_RECORD_LEN: usize = 52;

/// What the `ibv_rc_pingpong` client sends last, NUL included (`sizeof "done"`).
pub const RC_PINGPONG_DONE: &[u8; 5] = b"done\0";

/// Encodes an endpoint the way `ibv_rc_pingpong` does (`"%04x:%06x:%06x:%s"` plus the NUL).
pub fn encode_rc_pingpong(ep: &Endpoint) -> [u8; RC_PINGPONG_RECORD_LEN] {
    let text = format!(
        "{:04x}:{:06x}:{:06x}:{}",
        ep.lid,
        ep.qpn & 0xff_ffff,
        ep.psn & 0xff_ffff,
        ep.gid.to_hex()
    );
    let mut rec = [0u8; RC_PINGPONG_RECORD_LEN];
    rec[..text.len()].copy_from_slice(text.as_bytes());
    rec
}

/// Decodes an `ibv_rc_pingpong` endpoint record (the text up to the first NUL).
pub fn decode_rc_pingpong(rec: &[u8]) -> std::result::Result<Endpoint, String> {
    let end = rec.iter().position(|&b| b == 0).unwrap_or(rec.len());
    let text = std::str::from_utf8(&rec[..end]).map_err(|_| "not ASCII text".to_string())?;
    let f: Vec<&str> = text.split(':').collect();
    if f.len() != 4 || f[..3].iter().any(|x| x.is_empty() || x.len() > 8) {
        return Err(format!("'{text}' does not have the LID:QPN:PSN:GID layout"));
    }
    let hex = |x: &str, name: &str| {
        u32::from_str_radix(x, 16).map_err(|_| format!("{name} '{x}' is not hexadecimal"))
    };
    let lid = hex(f[0], "LID")?;
    let lid = u16::try_from(lid).map_err(|_| format!("LID {lid:#x} does not fit 16 bits"))?;
    Ok(Endpoint {
        lid,
        qpn: hex(f[1], "QPN")? & 0xff_ffff,
        psn: hex(f[2], "PSN")? & 0xff_ffff,
        gid: Gid::from_hex(f[3]).ok_or_else(|| format!("GID '{}' is not 32 hex digits", f[3]))?,
    })
}

/// The handshake of `ibv_rc_pingpong` and its siblings (`ibv_ud_pingpong`, and
/// `ibv_srq_pingpong` with 256 records), taught in lesson 04: the client writes its records, the
/// server reads them, connects, replies with its own, and reads the client's `"done"`; the client
/// connects after the exchange. `connect` gets the peer's records (as many bytes as `mine`) at
/// the point where the C programs connect, and its result is returned.
pub fn rc_pingpong_handshake<T>(
    conn: &mut OobConn,
    server: bool,
    mine: &[u8],
    connect: impl FnOnce(&[u8]) -> Result<T>,
) -> Result<T> {
    let mut theirs = vec![0u8; mine.len()];
    if server {
        conn.recv_raw(&mut theirs, "the client's endpoint record")
            .context("the handshake")?;
        let t = connect(&theirs)?;
        conn.send_raw(mine, "our endpoint record")
            .context("the handshake")?;
        let mut done = [0u8; RC_PINGPONG_DONE.len()];
        conn.recv_raw(&mut done, "the client's \"done\"")
            .context("the handshake")?;
        if &done != RC_PINGPONG_DONE {
            bail!(
                "handshake: expected \"done\", got {:?}",
                String::from_utf8_lossy(&done)
            );
        }
        Ok(t)
    } else {
        conn.send_raw(mine, "our endpoint record")
            .context("the handshake")?;
        conn.recv_raw(&mut theirs, "the server's endpoint record")
            .context("the handshake")?;
        conn.send_raw(RC_PINGPONG_DONE, "\"done\"")
            .context("the handshake")?;
        connect(&theirs)
    }
}

/// The two summary lines of the rdma-core ping-pong examples, so that scripts parse ours and
/// theirs alike: `N bytes in X seconds = Y Mbit/sec` (N = size × iters × 2) and
/// `N iters in X seconds = Z usec/iter`.
pub fn print_pingpong_summary(size: u64, iters: u64, elapsed: Duration) {
    let usec = elapsed.as_secs_f64() * 1e6;
    let bytes = size * iters * 2;
    println!(
        "{bytes} bytes in {:.2} seconds = {:.2} Mbit/sec",
        usec / 1e6,
        bytes as f64 * 8.0 / usec
    );
    println!(
        "{iters} iters in {:.2} seconds = {:.2} usec/iter",
        usec / 1e6,
        usec / iters as f64
    );
}

/// The ping-pong lessons' (04, 11) own summary line after the C examples' two: the round trip
/// of `size` bytes in µs as avg, min, median, max. Prints nothing and returns false when there
/// is no sample (only the client, which starts every exchange, measures round trips).
pub fn print_round_trips(size: usize, rtts_us: &[f64]) -> bool {
    let Some(s) = Summary::of(rtts_us) else {
        return false;
    };
    println!(
        "round trip of {size} bytes (usec): avg {:.1}  min {:.1}  median {:.1}  max {:.1}  ({} samples)",
        s.avg, s.min, s.median, s.max, s.count
    );
    true
}

/// Minimum, median, maximum and mean of a set of samples (e.g. round trips in µs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    pub count: usize,
    pub min: f64,
    pub median: f64,
    pub max: f64,
    pub avg: f64,
}

impl Summary {
    /// `None` for an empty set. NaNs sort last.
    pub fn of(samples: &[f64]) -> Option<Summary> {
        if samples.is_empty() {
            return None;
        }
        let mut v = samples.to_vec();
        v.sort_by(|a, b| a.total_cmp(b));
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Summary {
            count: n,
            min: v[0],
            median,
            max: v[n - 1],
            avg: v.iter().sum::<f64>() / n as f64,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rc_pingpong_record_matches_the_c_layout() {
        let ep = Endpoint {
            lid: 0,
            qpn: 0x11,
            psn: 0xabcdef,
            gid: "::ffff:192.168.77.1".parse().unwrap(),
        };
        let rec = encode_rc_pingpong(&ep);
        assert_eq!(rec.len(), RC_PINGPONG_RECORD_LEN);
        assert_eq!(
            &rec[..51],
            b"0000:000011:abcdef:00000000000000000000ffffc0a84d01"
        );
        assert_eq!(rec[51], 0);
        assert_eq!(decode_rc_pingpong(&rec).unwrap(), ep);
        assert!(decode_rc_pingpong(b"0000:11:22\0")
            .unwrap_err()
            .contains("layout"));
        assert!(
            decode_rc_pingpong(b"0000:zz:22:00000000000000000000ffffc0a84d01\0")
                .unwrap_err()
                .contains("QPN")
        );
        assert_eq!(RC_PINGPONG_DONE.len(), 5);
    }

    #[test]
    fn summary_of_samples() {
        let s = Summary::of(&[3.0, 1.0, 2.0, 10.0]).unwrap();
        assert_eq!((s.min, s.median, s.max, s.avg), (1.0, 2.5, 10.0, 4.0));
        assert_eq!(Summary::of(&[5.0]).unwrap().median, 5.0);
        assert!(Summary::of(&[]).is_none());
    }
}
