//! What a run measured, before any format: the result of one size ([`result`]: rows,
//! intervals, units), the statistics of a latency sample ([`stats`]: median, percentiles), and
//! the `--procs` aggregate over one common interval ([`aggregate`], docs/measurement.md).

pub mod aggregate;
pub mod result;
pub mod stats;
