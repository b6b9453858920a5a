//! `--cpu_util`, with perftest's meaning: the machine's CPU utilisation during each size, from
//! the aggregate `cpu` line of `/proc/stat` — perftest's formula, user time over user + idle
//! time of all CPUs (system time is not counted, as in perftest) — and, for the JSON files, the
//! CPU time this process used (`getrusage(2)`: user + system).
//!
//! The reporter takes a sample when a size starts (its header, or the previous row) and when
//! its row arrives, so the interval holds the size's barriers and warm-up besides the measured
//! run: milliseconds next to a `-D` run's seconds (perftest, too, reports it for `-D` only).

use std::time::Duration;

use nix::sys::resource::{getrusage, UsageWho};

/// One reading of `/proc/stat`'s `cpu` line and of this process's CPU time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuSample {
    /// The `user` field (clock ticks), perftest's `ustat`.
    pub user: u64,
    /// The `idle` field (clock ticks).
    pub idle: u64,
    /// This process's user + system time.
    pub process: Duration,
}

/// What the JSON files get with `--cpu_util`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CpuReport {
    /// Each row's utilisation, in row order.
    pub util_percent: Vec<f64>,
    /// This process's CPU time (user + system) from the header to the end.
    pub process_cpu: Duration,
}

/// Parses the `cpu` line (`cpu  user nice system idle ...`) of `/proc/stat` text.
pub fn parse_proc_stat(text: &str) -> Option<(u64, u64)> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().ok())
        .collect::<Option<Vec<u64>>>()?;
    Some((*f.first()?, *f.get(3)?))
}

/// Reads a sample now (zeros for what cannot be read).
pub fn sample() -> CpuSample {
    let (user, idle) = std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|t| parse_proc_stat(&t))
        .unwrap_or((0, 0));
    let process = getrusage(UsageWho::RUSAGE_SELF)
        .map(|r| {
            let tv = |t: nix::sys::time::TimeVal| {
                Duration::from_secs(t.tv_sec().max(0) as u64)
                    + Duration::from_micros(t.tv_usec().max(0) as u64)
            };
            tv(r.user_time()) + tv(r.system_time())
        })
        .unwrap_or_default();
    CpuSample {
        user,
        idle,
        process,
    }
}

/// perftest's `calc_cpu_util`: `100 × Δuser / (Δuser + Δidle)`, 0 when nothing elapsed.
pub fn utilisation(a: &CpuSample, b: &CpuSample) -> f64 {
    let du = b.user.saturating_sub(a.user) as f64;
    let di = b.idle.saturating_sub(a.idle) as f64;
    if du + di > 0.0 {
        100.0 * du / (du + di)
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perftests_formula() {
        let text = "cpu  100 5 50 900 3 0 0 0 0 0\ncpu0 50 2 25 450 1 0 0 0 0 0\n";
        assert_eq!(parse_proc_stat(text), Some((100, 900)));
        assert_eq!(parse_proc_stat("cpu0 1 2 3 4\n"), None);
        let a = CpuSample {
            user: 100,
            idle: 900,
            process: Duration::ZERO,
        };
        let b = CpuSample {
            user: 130,
            idle: 990,
            ..a
        };
        assert!((utilisation(&a, &b) - 25.0).abs() < 1e-9);
        assert_eq!(utilisation(&a, &a), 0.0);
        assert!(sample().user > 0, "/proc/stat is readable on Linux");
    }
}
