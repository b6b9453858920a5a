//! The bench tooling: what reads the tools' output after a run, never a device.
//!
//! - [`stat`]: the statistics of the benchmark scripts (`vl_benchstat`): medians, ratios and
//!   spreads of alternating rounds, the generated tables of docs/benchmarks.md, and the
//!   regression gate against a stored baseline;
//! - [`jsoncheck`]: what a valid `--json` report is (`vl_jsoncheck`), for every tool of
//!   `perftest/` and `coll/`, read into the writers' own structs.
//!
//! `vl_benchchart` draws a sweep's chart with the point-to-point tools' own plot
//! (`vl_perftest::report::plot`).

#![forbid(unsafe_code)]

pub mod jsoncheck;
pub mod stat;
