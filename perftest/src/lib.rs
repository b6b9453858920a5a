//! The benchmark engine behind the `vl_*` tools: parameters, connection, run loop, measurement
//! and report, kept apart so that a new test is a small new file and a new output format touches
//! only the report.

pub mod gates;
pub mod output;
pub mod report;
pub mod result;
pub mod stats;
