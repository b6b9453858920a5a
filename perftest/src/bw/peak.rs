//! What a phase measured: the messages over the time from the first post to the last
//! completion, and the peak over windows of completions ([`PeakLog`]).

use super::*;

/// What a phase measured on one side.
#[derive(Debug, Clone, Copy)]
pub struct Measured {
    /// Messages over all QPs.
    pub msgs: u64,
    pub start: Instant,
    pub end: Instant,
    /// Bytes per second of the best window; `None` when the peak is not measured (`-N`, or a
    /// side that only received: its windows could show a rate no link carried).
    pub peak_bps: Option<f64>,
}

impl Measured {
    /// perftest's `-f/--margin` of a `-D` run: only the completions between `margin` after the
    /// start and `margin` before the end of the duration `d` count, read from the log of
    /// completion counts the loop kept anyway (to within one log window). A run too short to
    /// hold two log entries inside the margins keeps its whole span.
    pub fn within_margin(self, log: &PeakLog, d: Duration, margin: Duration) -> Measured {
        let from = self.start + margin;
        let to = self.start + d.saturating_sub(margin);
        match log.between(from, to) {
            Some((msgs, start, end)) => Measured {
                msgs,
                start,
                end,
                ..self
            },
            None => self,
        }
    }

    /// The report row for `size` bytes per message.
    pub fn row(&self, size: u64) -> BwRow {
        let elapsed = self.end.saturating_duration_since(self.start);
        let secs = elapsed.as_secs_f64().max(1e-9);
        let avg = self.msgs as f64 * size as f64 / secs;
        BwRow {
            bytes: size,
            // perftest's #iterations: the messages of all QPs (-n × -q).
            iterations: self.msgs,
            // perftest prints a peak it did not measure as 0.
            peak_bps: self.peak_bps.map_or(0.0, |p| p.max(avg)),
            avg_bps: avg,
            msg_rate_mpps: self.msgs as f64 / secs / 1e6,
            elapsed,
        }
    }
}

/// What a phase did.
#[derive(Debug, Default)]
pub struct PhaseOut {
    /// This side's sending, if it sent.
    pub tx: Option<Measured>,
    /// This side's receiving (send tools), if it received.
    pub rx: Option<Measured>,
    /// Messages this side posted per QP.
    pub sent: Vec<u64>,
    /// The peer's tally (what it posted per QP), if it sent.
    pub peer_sent: Vec<u64>,
}

/// Completion-count boundaries and when they were seen, for the peak. At most [`PeakLog::CAP`]
/// entries are kept: when full, every other one is dropped and the window doubles, so a run of
/// any length is covered without allocating in the loop.
pub struct PeakLog {
    window: u64,
    next: u64,
    counts: Vec<u64>,
    times: Vec<Instant>,
}

impl PeakLog {
    pub const CAP: usize = 1024;

    /// Starts at `t0` with boundaries every `window` completions.
    pub fn new(window: u64, t0: Instant) -> PeakLog {
        let mut counts = Vec::with_capacity(Self::CAP);
        let mut times = Vec::with_capacity(Self::CAP);
        counts.push(0);
        times.push(t0);
        PeakLog {
            window: window.max(1),
            next: window.max(1),
            counts,
            times,
        }
    }

    /// Whether [`PeakLog::record`] of `total` would log a boundary (and so needs the time).
    #[inline]
    pub fn due(&self, total: u64) -> bool {
        total >= self.next
    }

    /// Notes that `total` completions were seen by `now`.
    #[inline]
    pub fn record(&mut self, total: u64, now: Instant) {
        if total < self.next {
            return;
        }
        self.counts.push(total);
        self.times.push(now);
        self.next = total + self.window;
        if self.counts.len() == Self::CAP {
            let mut k = 0;
            for i in (0..Self::CAP).step_by(2) {
                self.counts[k] = self.counts[i];
                self.times[k] = self.times[i];
                k += 1;
            }
            self.counts.truncate(k);
            self.times.truncate(k);
            self.window *= 2;
            self.next = self.counts[k - 1] + self.window;
        }
    }

    /// The completions logged between `from` and `to`: the count between the first entry at or
    /// after `from` and the last at or before `to`, with their times (`None` without two such
    /// entries).
    pub fn between(&self, from: Instant, to: Instant) -> Option<(u64, Instant, Instant)> {
        let i = self.times.iter().position(|t| *t >= from)?;
        let j = self.times.iter().rposition(|t| *t <= to)?;
        (j > i).then(|| {
            (
                self.counts[j] - self.counts[i],
                self.times[i],
                self.times[j],
            )
        })
    }

    /// The best bandwidth over any stretch of at least `min_window` completions, in bytes per
    /// second (0 when the run was too short to hold one such stretch).
    pub fn peak(&self, size: u64, min_window: u64) -> f64 {
        let mut best = 0.0f64;
        let mut j = 0;
        for i in 0..self.counts.len() {
            if j <= i {
                j = i + 1;
            }
            while j < self.counts.len() && self.counts[j] - self.counts[i] < min_window {
                j += 1;
            }
            if j >= self.counts.len() {
                break;
            }
            let dt = self.times[j].saturating_duration_since(self.times[i]);
            if dt > Duration::ZERO {
                let bps = (self.counts[j] - self.counts[i]) as f64 * size as f64 / dt.as_secs_f64();
                best = best.max(bps);
            }
        }
        best
    }
}

/// One side's measurement of a phase: `msgs` over `span`, the peak over windows of at least
/// `k.win0` completions (or a hundredth of the messages), cut to the margin of a `-D` run.
///
/// Only a sending side (`sends`) measures a peak. A receiver's windows could be a rate no link
/// carried: the receives that arrived while it was descheduled (up to rx depth × QPs of them)
/// are polled at once, microseconds apart, so a window of completions can span next to no
/// time (8.8 GB/s was seen on a 20 MiB/s link). perftest's send_bw server prints no peak
/// either. A sender's window, at least tx depth × QPs completions, always holds requests posted
/// within it.
pub(super) fn measured(
    k: &PhaseCtx<'_>,
    msgs: u64,
    span: (Instant, Instant),
    log: &PeakLog,
    sends: bool,
) -> Measured {
    let (cfg, size) = (k.cfg, k.size);
    let min_win = k.win0.max(msgs / 100);
    let m = Measured {
        msgs,
        start: span.0,
        end: span.1,
        peak_bps: (sends && !cfg.no_peak).then(|| log.peak(size, min_win)),
    };
    match (k.mode, cfg.timing.margin) {
        (RunMode::Duration(d), Some(margin)) => m.within_margin(log, d, margin),
        _ => m,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peak_over_windows() {
        let t0 = Instant::now();
        let mut log = PeakLog::new(10, t0);
        // 100 completions per ms, except a fast stretch: 100 in 0.5 ms.
        let mut t = t0;
        let mut total = 0;
        for i in 0..50 {
            t += if i == 20 {
                Duration::from_micros(500)
            } else {
                Duration::from_millis(1)
            };
            total += 100;
            log.record(total, t);
        }
        let steady = 100.0 * 8.0 / 1e-3;
        let p = log.peak(8, 100);
        assert!((p - 2.0 * steady).abs() < 1.0, "{p} vs {}", 2.0 * steady);
        // Windows of 1000 completions dilute the fast stretch.
        let p = log.peak(8, 1000);
        assert!(p > steady && p < 1.1 * steady, "{p}");
    }

    #[test]
    fn peak_log_decimates_without_growing() {
        let t0 = Instant::now();
        let mut log = PeakLog::new(1, t0);
        for i in 1..=100_000u64 {
            log.record(i, t0 + Duration::from_micros(i));
        }
        assert!(log.counts.len() <= PeakLog::CAP);
        assert_eq!(log.counts.capacity(), PeakLog::CAP);
        // 1 completion per µs of 8 bytes = 8e6 B/s, whatever the window.
        let p = log.peak(8, 1000);
        assert!((p - 8e6).abs() < 1e3, "{p}");
    }

    #[test]
    fn margins_cut_the_ramp_and_the_drain() {
        let t0 = Instant::now();
        let mut log = PeakLog::new(10, t0);
        // 100 completions a second for 4 s, logged every 10.
        for k in 1..=40u64 {
            log.record(k * 10, t0 + Duration::from_millis(100 * k));
        }
        let whole = Measured {
            msgs: 400,
            start: t0,
            end: t0 + Duration::from_secs(4),
            peak_bps: None,
        };
        let m = whole.within_margin(&log, Duration::from_secs(4), Duration::from_secs(1));
        assert_eq!(m.msgs, 200, "1 s .. 3 s");
        assert_eq!(m.end.duration_since(m.start), Duration::from_secs(2));
        let m = whole.within_margin(&log, Duration::from_secs(4), Duration::from_secs(2));
        assert_eq!(m.msgs, 400, "no room inside the margins: the whole run");
    }

    #[test]
    fn rows_from_measurements() {
        let t0 = Instant::now();
        let m = Measured {
            msgs: 2000,
            start: t0,
            end: t0 + Duration::from_secs(2),
            peak_bps: Some(0.0),
        };
        let r = m.row(65536);
        assert_eq!(
            r.iterations, 2000,
            "perftest's #iterations: every QP's messages"
        );
        assert_eq!(r.avg_bps, 65536.0 * 1000.0);
        assert_eq!(r.peak_bps, r.avg_bps, "the peak is never below the average");
        assert!((r.msg_rate_mpps - 0.001).abs() < 1e-12);
        let unmeasured = Measured {
            peak_bps: None,
            ..m
        };
        assert_eq!(
            unmeasured.row(65536).peak_bps,
            0.0,
            "printed as perftest's 0"
        );
        let sum = sum_rows(&r, &r);
        assert_eq!(sum.avg_bps, 2.0 * r.avg_bps);
    }
}
