//! What the lessons compatible with rdma-core's ping-pong examples share (04, 11, 12): the
//! `ibv_rc_pingpong` endpoint record and handshake, its wr_id scheme and the bookkeeping of its
//! loop ([`PingPong`]), and the summary lines those programs print.

use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use verbs_lab::connect::Endpoint;
use verbs_lab::oob::OobConn;
use verbs_lab::verbs::{Gid, RecvWr, Sge};

use crate::{Device, Narrator};

/// The wr_id of every receive in `ibv_rc_pingpong`'s scheme (lessons 04, 09, 11): each
/// completion says which queue it came from, and the same bits track what an iteration still
/// waits for ([`PingPong::pending`]).
pub const RECV_WRID: u64 = 1;
/// The wr_id of every SEND in `ibv_rc_pingpong`'s scheme (see [`RECV_WRID`]).
pub const SEND_WRID: u64 = 2;

/// `count` receive requests into `sge`, each with wr_id [`RECV_WRID`], for one
/// `qp.post_recv(..)` (`ibv_post_recv(3)`): the initial ones, or 1 to replace a consumed one.
pub fn pingpong_recvs<'a>(sge: &'a Sge<'a>, count: u32) -> Vec<RecvWr<'a>> {
    (0..count)
        .map(|_| RecvWr {
            wr_id: RECV_WRID,
            sges: std::slice::from_ref(sge),
        })
        .collect()
}

/// The bookkeeping of `ibv_rc_pingpong`'s loop (lesson 04; lesson 11 runs it on UD): the SENDs
/// and receives completed so far, the wr_ids the current iteration still waits for, and on the
/// client, which starts every exchange, the round trip of every iteration. Each side posts its
/// next SEND only when its previous SEND completed and the peer's message arrived.
#[derive(Debug)]
pub struct PingPong {
    iters: u64,
    server: bool,
    /// Our SENDs completed.
    pub sent: u64,
    /// The peer's messages received.
    pub received: u64,
    pending: u64,
    started: Instant,
    posted_at: Instant,
    /// The round trips, in µs (the client's; the server measures none).
    pub rtts_us: Vec<f64>,
}

impl PingPong {
    /// Starts the clock of `iters` exchanges, awaiting the peer's first message.
    pub fn new(iters: u64, server: bool) -> PingPong {
        let now = Instant::now();
        PingPong {
            iters,
            server,
            sent: 0,
            received: 0,
            pending: RECV_WRID,
            started: now,
            posted_at: now,
            rtts_us: Vec::with_capacity(if server { 0 } else { iters as usize }),
        }
    }

    /// Whether SENDs or receives remain.
    pub fn running(&self) -> bool {
        self.sent < self.iters || self.received < self.iters
    }

    /// The iteration under way, for messages.
    pub fn iteration(&self) -> u64 {
        self.sent.min(self.received)
    }

    /// The wr_id bits ([`SEND_WRID`], [`RECV_WRID`]) the iteration still waits for.
    pub fn pending(&self) -> u64 {
        self.pending
    }

    /// The sequence number of our next message: the client's k-th carries 2k, the server's 2k+1
    /// (for [`pattern`](crate::pattern)).
    pub fn our_seq(&self) -> u64 {
        2 * self.sent + u64::from(self.server)
    }

    /// The sequence number of the peer's next message (see [`our_seq`](Self::our_seq)).
    pub fn peer_seq(&self) -> u64 {
        2 * self.received + u64::from(!self.server)
    }

    /// Call just before posting a SEND: the round trip starts before the post (on rxe the post
    /// itself does real work), and the iteration now waits for the SEND and the peer's reply.
    pub fn sending(&mut self) {
        self.posted_at = Instant::now();
        self.pending = RECV_WRID | SEND_WRID;
    }

    /// Accounts a successful completion with wr_id [`SEND_WRID`] or [`RECV_WRID`] once the lesson
    /// has handled it, and records the client's round trip when the iteration is complete.
    /// Returns whether our next SEND is due.
    pub fn completed(&mut self, wr_id: u64) -> bool {
        match wr_id {
            SEND_WRID => self.sent += 1,
            RECV_WRID => self.received += 1,
            _ => {}
        }
        self.pending &= !wr_id;
        if self.pending == 0 && !self.server {
            // The client has the full round trip: its SEND and the reply.
            self.rtts_us
                .push(self.posted_at.elapsed().as_secs_f64() * 1e6);
        }
        self.sent < self.iters && self.pending == 0
    }

    /// Stops the clock: what the ping-pong measured, to print.
    pub fn finish(self) -> Finished {
        Finished {
            elapsed: self.started.elapsed(),
            iters: self.iters,
            sent: self.sent,
            received: self.received,
            rtts_us: self.rtts_us,
        }
    }
}

/// What a finished [`PingPong`] measured.
#[derive(Debug, Clone)]
pub struct Finished {
    /// From the start of the loop to its end.
    pub elapsed: Duration,
    pub iters: u64,
    /// Our SENDs completed.
    pub sent: u64,
    /// The peer's messages received.
    pub received: u64,
    /// The client's round trips in µs (none on the server).
    pub rtts_us: Vec<f64>,
}

impl Finished {
    /// The results of a ping-pong of `size`-byte messages: the C examples' two summary lines
    /// ([`print_pingpong_summary`]), then ours, the round trips ([`print_round_trips`]). Returns
    /// false when there was no round trip to print (on the server).
    pub fn print(&self, size: usize) -> bool {
        print_pingpong_summary(size as u64, self.iters, self.elapsed);
        print_round_trips(size, &self.rtts_us)
    }
}

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

/// Decodes the peer's endpoint record ([`decode_rc_pingpong`]) and narrates it as lessons 04 and
/// 11 do: `remote address: …`, beside the `local address` they said before the handshake.
pub fn read_peer_record(rec: &[u8], n: &Narrator) -> Result<Endpoint> {
    let remote = decode_rc_pingpong(rec)
        .map_err(anyhow::Error::msg)
        .context("the peer's endpoint record")?;
    n.say(format!("remote address: {remote}"));
    Ok(remote)
}

/// On RoCE (Ethernet) every packet carries a GRH, so the peer's record must name its GID: a
/// zero GID is refused with what needs it (`needs`) and how to make `tool`, the C example the
/// peer may be, send one (`-g`). On InfiniBand a zero GID is fine (the LID routes).
pub fn require_peer_gid(dev: &Device, remote: &Endpoint, needs: &str, tool: &str) -> Result<()> {
    if dev.port.link_layer.needs_grh() && remote.gid.is_zero() {
        bail!(
            "the peer sent GID zero, but {} is RoCE (Ethernet): {needs} ({tool}: give it -g, e.g. \
             -g 1)",
            dev.ctx.name()
        );
    }
    Ok(())
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
    crate::outln!(
        "{bytes} bytes in {:.2} seconds = {:.2} Mbit/sec",
        usec / 1e6,
        bytes as f64 * 8.0 / usec
    );
    crate::outln!(
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
    crate::outln!(
        "round trip of {size} bytes (usec): avg {:.1}  min {:.1}  median {:.1}  max {:.1}  ({} samples)",
        s.avg, s.min, s.median, s.max, s.count
    );
    true
}

/// The `q`-quantile (0..=1) of samples sorted ascending: the lessons' one definition of a
/// percentile and of the median (`q` = 0.5). Between two ranks it interpolates linearly (the
/// usual definition, numpy's default), so the median of an even count is the mean of the two
/// middle samples and p99 of 1..=100 is 99.01. (The `vl_*` tools' HdrHistogram takes the
/// nearest rank instead; over the lessons' hundreds of samples the two differ by less than the
/// gap between neighbouring samples.) Panics on no sample.
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    let pos = (sorted.len() - 1) as f64 * q.clamp(0.0, 1.0);
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    if lo == hi {
        return sorted[lo];
    }
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

/// Minimum, median, 99th percentile ([`percentile`]), maximum and mean of a set of samples
/// (e.g. round trips in µs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    pub count: usize,
    pub min: f64,
    pub median: f64,
    pub p99: f64,
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
        Some(Summary {
            count: n,
            min: v[0],
            median: percentile(&v, 0.5),
            p99: percentile(&v, 0.99),
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
    fn pingpong_sends_when_both_completions_are_in() {
        // The client of 2 exchanges: it starts, and measures each round trip.
        let mut c = PingPong::new(2, false);
        assert_eq!((c.our_seq(), c.peer_seq(), c.pending()), (0, 1, RECV_WRID));
        c.sending();
        assert_eq!(c.pending(), RECV_WRID | SEND_WRID);
        assert!(!c.completed(SEND_WRID), "the reply is still awaited");
        assert!(c.completed(RECV_WRID), "both in: the next SEND is due");
        assert_eq!((c.sent, c.received, c.rtts_us.len()), (1, 1, 1));
        assert_eq!((c.our_seq(), c.peer_seq(), c.iteration()), (2, 3, 1));
        c.sending();
        assert!(!c.completed(RECV_WRID));
        assert!(!c.completed(SEND_WRID), "-n SENDs made: no more");
        assert!(!c.running());
        // The server answers: it awaits the first message, measures nothing.
        let mut s = PingPong::new(1, true);
        assert_eq!((s.our_seq(), s.peer_seq()), (1, 0));
        assert!(s.completed(RECV_WRID));
        s.sending();
        assert!(s.running());
        assert!(!s.completed(SEND_WRID));
        assert!(!s.running() && s.rtts_us.is_empty());
    }

    #[test]
    fn summary_of_samples() {
        let s = Summary::of(&[3.0, 1.0, 2.0, 10.0]).unwrap();
        assert_eq!((s.min, s.median, s.max, s.avg), (1.0, 2.5, 10.0, 4.0));
        assert_eq!(Summary::of(&[5.0]).unwrap().median, 5.0);
        assert!(Summary::of(&[]).is_none());
    }

    #[test]
    fn percentiles_interpolate_between_ranks() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.0), 1.0);
        assert_eq!(percentile(&v, 0.5), 50.5);
        assert!((percentile(&v, 0.99) - 99.01).abs() < 1e-9);
        assert_eq!(percentile(&v, 1.0), 100.0);
        assert_eq!(percentile(&[7.0], 0.99), 7.0);
        // An odd count: the middle sample itself.
        assert_eq!(percentile(&[1.0, 2.0, 30.0], 0.5), 2.0);
    }
}
