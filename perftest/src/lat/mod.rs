//! The latency tests, with perftest's semantics:
//!
//! - **write** and **send** are a ping-pong and report half the round trip. The client posts a
//!   message and waits for the server's answer; the server waits for the message and answers.
//!   RDMA Write latency spins on the last byte of the receive buffer, which changes with every
//!   message — the peer's CPU sees no completion for a write; send latency waits for the
//!   receive completion.
//! - **read** and **atomic** report the full round trip of one operation: post, then poll until
//!   its completion. The server only serves.
//!
//! Samples are taken between consecutive rounds with one read of the monotonic clock
//! (`Instant`) per round trip — the end of one sample starts the next, as perftest samples
//! between consecutive posts — and kept in nanoseconds in an array made beforehand, for a
//! [`LatRecorder`] after the phase (`Record`). Only the round trip and its own steps (reaping,
//! re-posting the receive, the next poll byte) are inside a sample: when bookkeeping runs
//! between an answer and the next post (a heartbeat, a look at the channel, `--validate`, a
//! full send queue, a full sample array), the next sample starts from a fresh clock read.
//! The waits read no clock in an ordinary round (`wait.rs`), and `-D`'s deadline is compared
//! with the sample's start: one clock read per round trip.
//! Both sides of a ping-pong report: the server answers first and reads the clock after; its
//! samples run from one answer to the next, and every answer after the first ends one, however
//! long the server waited (`-n N` gives it N − 1 samples; with `-n 1` its row prints with none).
//! See `docs/measurement.md`.
//!
//! The loop of a phase is `one_phase` here; a round's steps are in `round.rs`, the posts and
//! completions of the one QP in `post.rs`, the bounded waits in `wait.rs`.

use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};

use crate::conn::Buffers;
use crate::engine::{send_tally, PeerWatch, Session};
use crate::measure::result::{LatRow, TestKind};
use crate::measure::stats::{LatRecorder, LatStats};
use crate::params::RunMode;
use crate::pattern;
use crate::proto::{Channel, Phase};

mod post;
mod round;
mod wait;

use round::{Facts, Rounds};
use wait::Waiter;

/// The send queue of the one latency QP, counted across phases and sizes: a request left
/// unsignaled at the end of one phase is accounted for by a later signaled one.
#[derive(Debug, Default)]
pub struct SendQueue {
    pub posted: u64,
    pub completed: u64,
    /// The post count at which the next signaled request falls (0: not started).
    pub next_signal: u64,
}

/// Measures one size; returns this side's row (none on a read/atomic server, which only
/// serves), and every sample when the report asks for them (`-H`, `-U`).
pub fn run_size(s: &mut Session<'_>, size: u64, sq: &mut SendQueue) -> Result<SizeOut> {
    let cfg = s.cfg;
    prepare(s, size)?;
    s.ch.sync(Phase::Ready, size).map_err(anyhow::Error::new)?;
    let mut warm_count = 0;
    let warmup = cfg.timing.warmup.iters(size);
    if warmup > 0 {
        let w = one_phase(s, Phase::WarmUp, size, RunMode::Iters(warmup), 0, None, sq)
            .with_context(|| format!("warm-up of size {size}"))?;
        warm_count = w.count;
    }
    s.ch.sync(Phase::Measure, size)
        .map_err(anyhow::Error::new)?;
    let expected = match cfg.timing.mode {
        RunMode::Iters(n) => Some(n),
        RunMode::Duration(_) => None,
    };
    let mut rec = Record::new(expected, cfg.keep_samples);
    let m = one_phase(
        s,
        Phase::Measure,
        size,
        cfg.timing.mode,
        warm_count,
        Some(&mut rec),
        sq,
    )
    .with_context(|| format!("measurement of size {size}"))?;
    if cfg.validate && cfg.tool.kind == TestKind::Write && m.count > 0 {
        let layout = s.link.res.bufs.layout;
        let off = layout.dst(0, 0);
        let last = warm_count + m.count - 1;
        let buf = s.link.res.bufs.dst[0].to_vec(off..off + size as usize)?;
        if let Err(e) = pattern::check(&buf, 0, last, true) {
            bail!(
                "--validate: after {} RDMA writes of {size} bytes the buffer should hold \
                 message {last}, but {e}",
                m.count
            );
        }
    }
    s.ch.sync(Phase::Done, size).map_err(anyhow::Error::new)?;
    // A ping-pong server's first answer only starts a sample (its samples run from one answer
    // to the next): with `-n 1` it has none, and its row still prints, saying so.
    let ponger = Facts::of(s, size).pingpong && cfg.is_server();
    let (stats, samples) = rec.finish();
    let stats = match stats.stats() {
        Some(st) => Some(st),
        None if ponger && m.count > 0 => Some(LatStats::none()),
        None => None,
    };
    let row = stats.map(|stats| LatRow {
        bytes: size,
        iterations: m.count,
        stats,
        tps: match cfg.timing.mode {
            RunMode::Duration(_) => Some(m.count as f64 / m.elapsed.as_secs_f64().max(1e-9)),
            RunMode::Iters(_) => None,
        },
    });
    Ok(SizeOut {
        samples: samples.filter(|_| row.is_some()),
        row,
    })
}

/// Clears the destination (write: so the poll byte starts at 0) and stamps nothing yet.
fn prepare(s: &Session<'_>, size: u64) -> Result<()> {
    let Buffers { dst, layout, .. } = &s.link.res.bufs;
    if s.cfg.tool.kind == TestKind::Write {
        let d = layout.dst(0, 0);
        dst[0].fill(d..d + size as usize, 0)?;
    }
    Ok(())
}

/// How many samples the timed loop holds before they go into the statistics: a fold of this
/// many takes a few milliseconds, which the pinger keeps out of its samples (it reads the clock
/// afresh) and which lands in one of a ponger's (as a look at the channel does).
const HELD: usize = 1 << 16;

/// The measured phase's record: the statistics, and with `-H`/`-U` every sample in the order
/// taken (nanoseconds; half the round trip in a ping-pong, as the statistics).
///
/// The timed loop only appends a sample to an array made beforehand, as perftest stores its
/// cycle counts: the statistics (a histogram, Welford's floating-point mean) are computed
/// from the array between rounds of [`HELD`] samples and at the end ([`Record::finish`]), not
/// once per round trip (about 110 instructions a sample, several of them floating-point, which
/// under QEMU's TCG are calls into its software FPU).
pub(crate) struct Record {
    stats: LatRecorder,
    /// The samples not yet in `stats`, or with `keep` every sample of the phase.
    held: Vec<u64>,
    /// How many of `held` are already in `stats` (with `keep`).
    folded: usize,
    keep: bool,
}

impl Record {
    /// A record of a phase of `expected` samples (`None`: `-D`), keeping every sample too
    /// when `keep` (`-H`/`-U` with `-n`): room for them made now so that the timed loop does
    /// not allocate.
    fn new(expected: Option<u64>, keep: bool) -> Record {
        let keep = keep && expected.is_some();
        let room = match expected {
            Some(n) if keep => n as usize,
            Some(n) => (n as usize).min(HELD),
            None => HELD,
        };
        Record {
            stats: LatRecorder::new(),
            held: Vec::with_capacity(room),
            folded: 0,
            keep,
        }
    }

    /// Adds one sample. Returns true when the samples held went into the statistics just now
    /// (the array was full): work the pinger keeps out of its next sample.
    #[inline]
    pub(super) fn record(&mut self, ns: u64) -> bool {
        self.held.push(ns);
        if !self.keep && self.held.len() == self.held.capacity() {
            self.fold();
            return true;
        }
        false
    }

    /// Puts the samples held into the statistics.
    fn fold(&mut self) {
        for &ns in &self.held[self.folded..] {
            self.stats.record(ns);
        }
        if self.keep {
            self.folded = self.held.len();
        } else {
            self.held.clear();
        }
    }

    /// The phase's statistics, and with `keep` every sample in order.
    fn finish(mut self) -> (LatRecorder, Option<Vec<u64>>) {
        self.fold();
        let samples = self.keep.then_some(self.held);
        (self.stats, samples)
    }
}

/// What one size gives this side to report.
pub struct SizeOut {
    /// This side's row (none on a read/atomic server, which only serves).
    pub row: Option<LatRow>,
    /// With `-H`/`-U` (not `-D`): every sample of the measurement, in the order taken, ns.
    pub samples: Option<Vec<u64>>,
}

/// What a phase did.
struct PhaseResult {
    /// Round trips (ping-pong) or operations completed.
    count: u64,
    /// From the first post to the last answer.
    elapsed: Duration,
}
/// The end of a phase: the pinger tells the server how many round trips it made; the server
/// checks that it answered as many.
fn settle_count(
    ch: &mut Channel,
    mut watch: PeerWatch,
    pinger: bool,
    ph: Phase,
    size: u64,
    count: u64,
) -> Result<()> {
    if pinger {
        send_tally(ch, ph, size, vec![count])?;
    } else {
        let t = match watch.tally.take() {
            Some(t) => t,
            None => watch.wait_tally(ch)?,
        };
        let theirs = t.per_qp.first().copied().unwrap_or(0);
        if theirs != count {
            bail!(
                "the client counts {theirs} round trips of size {size}, this server {count} \
                 (protocol error)"
            );
        }
    }
    Ok(())
}

/// One phase (warm-up or measurement) of one size: the rounds, then the count settled with the
/// peer. The loop itself is here; each round's steps are [`Rounds::ping`] and [`Rounds::pong`].
#[allow(clippy::too_many_arguments)]
fn one_phase(
    s: &mut Session<'_>,
    ph: Phase,
    size: u64,
    mode: RunMode,
    seq0: u64,
    mut rec: Option<&mut Record>,
    sq: &mut SendQueue,
) -> Result<PhaseResult> {
    let cfg = s.cfg;
    let f = Facts::of(s, size);
    let mut watch = PeerWatch::new(ph, size);
    if !f.pingpong && !f.pinger {
        // Reads and atomics: the server's NIC answers alone; wait for the client's tally.
        let t = watch.wait_tally(s.ch)?;
        return Ok(PhaseResult {
            count: t.per_qp.first().copied().unwrap_or(0),
            elapsed: Duration::ZERO,
        });
    }

    let Session { link, ch, .. } = s;
    let sges = [crate::conn::src_mr(&link.res.bufs.src, 0)
        .sge(f.src..f.src + f.local_len)
        .context("building the SGE")?];
    let mut r = Rounds::new(cfg, f, link, ch, watch, &sges)?;
    let target = match mode {
        RunMode::Iters(k) => k,
        RunMode::Duration(_) => u64::MAX,
    };
    let deadline = match mode {
        RunMode::Duration(d) => Some(Instant::now() + d),
        RunMode::Iters(_) => None,
    };
    let mut count = 0u64;
    while count < target {
        let seq = seq0 + count;
        let more = if f.pinger {
            r.ping(seq, sq, deadline, rec.as_deref_mut())?
        } else {
            r.pong(seq, sq, deadline.map(|_| count), rec.as_deref_mut())?
        };
        if !more {
            break;
        }
        count += 1;
    }

    let Rounds {
        waiter,
        first,
        last,
        ..
    } = r;
    let Waiter { ch, watch, .. } = waiter;
    settle_count(ch, watch, f.pinger, ph, size, count)?;
    Ok(PhaseResult {
        count,
        elapsed: last.saturating_duration_since(first.unwrap_or(last)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_folds_when_its_array_fills_and_loses_no_sample() {
        // -n 3: room for all three, one fold at the end.
        let mut r = Record::new(Some(3), false);
        assert!(!r.record(1000) && !r.record(3000));
        assert!(r.record(2000), "the third sample fills the array");
        assert!(!r.record(4000), "the array was emptied: a fourth fits");
        let (stats, samples) = r.finish();
        let st = stats.stats().unwrap();
        assert_eq!((st.samples, st.min_us, st.max_us), (4, 1.0, 4.0));
        assert_eq!(samples, None);
    }

    #[test]
    fn a_record_that_keeps_samples_never_folds_them_twice() {
        let mut r = Record::new(Some(2), true);
        assert!(!r.record(5000) && !r.record(7000) && !r.record(6000));
        let (stats, samples) = r.finish();
        assert_eq!(stats.stats().unwrap().samples, 3);
        assert_eq!(samples, Some(vec![5000, 7000, 6000]));
        // -D keeps none (its length is not known), and holds at most HELD at a time.
        let r = Record::new(None, true);
        assert!(!r.keep && r.held.capacity() >= HELD);
    }
}
