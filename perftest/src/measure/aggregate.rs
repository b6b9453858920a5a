//! The totals of a `--procs N` run, size by size, measured over one interval.
//!
//! Every process measures its own interval (its first post to its last completion) and
//! reports it on `CLOCK_MONOTONIC`, the clock all processes of a machine share ([`Span`]). The
//! aggregate of a size is what the port carried while any of them ran:
//!
//! ```text
//! aggregate average = total bytes of all processes / (latest end - earliest start)
//! aggregate rate    = total messages of all processes / (latest end - earliest start)
//! ```
//!
//! Beside it the report keeps the plain **sum** of the per-process averages, labelled as such:
//! it equals the aggregate only when the intervals coincide, and overstates what was carried
//! whenever they do not (two processes that ran one after the other would show twice the
//! bandwidth). The **overlap** — the time all N ran at once, `earliest end - latest start` — says
//! how far the two may be trusted to agree. The peak of the totals is the sum of the processes'
//! peaks: an upper bound, as their best windows need not coincide.
//!
//! `#iterations` of both rows is the sum of the processes' counts: the messages of all QPs of
//! all processes, as a single process's row counts those of all its QPs (`-n` × `-q`).
//!
//! A process's bytes and messages come from its row (`messages = rate × elapsed`, exact for a
//! one-way test; in a bidirectional run the row holds both directions over this side's
//! interval).

use std::time::Duration;

use crate::measure::result::{BwRow, ProcessResult, RunInfo, Span};

/// One size of a `--procs` run.
#[derive(Debug, Clone, PartialEq)]
pub struct SizeTotal {
    /// The aggregate: total bytes and messages over the union interval (what the gates check
    /// and the result row shows).
    pub row: BwRow,
    /// The sum of the processes' own averages, rates and peaks (labelled "sum" in reports).
    pub sum: BwRow,
    /// Earliest start to latest end.
    pub union: Span,
    /// How long all processes ran at once (zero when some interval ends before another starts).
    pub overlap: Duration,
    /// Bytes moved by all processes.
    pub bytes: u64,
    /// Messages moved by all processes.
    pub messages: u64,
}

impl SizeTotal {
    /// The overlap as a fraction of the union (1.0 when the union has no length).
    pub fn overlap_fraction(&self) -> f64 {
        let u = self.union.len().as_secs_f64();
        if u > 0.0 {
            self.overlap.as_secs_f64() / u
        } else {
            1.0
        }
    }
}

/// The messages a row stands for: its rate times its elapsed time, rounded.
pub fn row_messages(r: &BwRow) -> u64 {
    let secs = r.elapsed.as_secs_f64().max(1e-9);
    (r.msg_rate_mpps * 1e6 * secs).round().max(0.0) as u64
}

/// The totals of the processes, size by size (see the module comment). Every process must have
/// measured the same sizes and report one span per row.
pub fn aggregate(procs: &[ProcessResult]) -> Result<Vec<SizeTotal>, String> {
    let Some(first) = procs.first() else {
        return Ok(Vec::new());
    };
    for p in procs {
        if p.rows.len() != first.rows.len() {
            return Err(format!(
                "process {} measured {} sizes, process {} {}",
                p.process,
                p.rows.len(),
                first.process,
                first.rows.len()
            ));
        }
        if p.spans.len() != p.rows.len() {
            return Err(format!(
                "process {} reported {} intervals for {} sizes",
                p.process,
                p.spans.len(),
                p.rows.len()
            ));
        }
    }
    (0..first.rows.len()).map(|j| one_size(procs, j)).collect()
}

/// [`aggregate`]'s rows alone: what the result rows show and the gates check.
pub fn totals(procs: &[ProcessResult]) -> Result<Vec<BwRow>, String> {
    Ok(aggregate(procs)?.into_iter().map(|t| t.row).collect())
}

fn one_size(procs: &[ProcessResult], j: usize) -> Result<SizeTotal, String> {
    let size = procs[0].rows[j].bytes;
    let mut sum = BwRow {
        bytes: size,
        iterations: 0,
        peak_bps: 0.0,
        avg_bps: 0.0,
        msg_rate_mpps: 0.0,
        elapsed: Duration::ZERO,
    };
    let mut messages = 0u64;
    let (mut earliest_start, mut latest_end) = (u64::MAX, 0u64);
    let (mut latest_start, mut earliest_end) = (0u64, u64::MAX);
    for p in procs {
        let r = &p.rows[j];
        if r.bytes != size {
            return Err(format!(
                "row {j}: process {} measured {} bytes, process {} {size}",
                p.process, r.bytes, procs[0].process
            ));
        }
        let s = p.spans[j];
        if s.end_ns < s.start_ns {
            return Err(format!(
                "process {}, {size} bytes: its interval ends ({} ns) before it starts ({} ns)",
                p.process, s.end_ns, s.start_ns
            ));
        }
        sum.iterations += r.iterations;
        sum.peak_bps += r.peak_bps;
        sum.avg_bps += r.avg_bps;
        sum.msg_rate_mpps += r.msg_rate_mpps;
        sum.elapsed = sum.elapsed.max(r.elapsed);
        messages = messages.saturating_add(row_messages(r));
        earliest_start = earliest_start.min(s.start_ns);
        latest_end = latest_end.max(s.end_ns);
        latest_start = latest_start.max(s.start_ns);
        earliest_end = earliest_end.min(s.end_ns);
    }
    let union = Span {
        start_ns: earliest_start,
        end_ns: latest_end,
    };
    let overlap = Duration::from_nanos(earliest_end.saturating_sub(latest_start));
    let bytes = messages.saturating_mul(size);
    let secs = union.len().as_secs_f64().max(1e-9);
    let avg_bps = bytes as f64 / secs;
    let row = BwRow {
        bytes: size,
        iterations: sum.iterations,
        peak_bps: if sum.peak_bps > 0.0 {
            sum.peak_bps.max(avg_bps)
        } else {
            0.0
        },
        avg_bps,
        msg_rate_mpps: messages as f64 / secs / 1e6,
        elapsed: union.len(),
    };
    Ok(SizeTotal {
        row,
        sum,
        union,
        overlap,
        bytes,
        messages,
    })
}

/// The header of the totals: the first process's, with the QPs of all (their count summed,
/// their endpoints listed in process order) and no single CPU (each process has its own).
pub fn aggregate_info(infos: &[&RunInfo]) -> Option<RunInfo> {
    let mut total = (*infos.first()?).clone();
    total.qp.qps = infos.iter().map(|i| i.qp.qps).sum();
    total.local_endpoints = infos
        .iter()
        .flat_map(|i| i.local_endpoints.clone())
        .collect();
    total.remote_endpoints = infos
        .iter()
        .flat_map(|i| i.remote_endpoints.clone())
        .collect();
    total.cpu = None;
    Some(total)
}
