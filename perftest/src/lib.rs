//! The benchmark engine behind the `vl_*` tools: parameters, connection, run loop, measurement
//! and report, kept apart so that a new test is a small new file and a new output format touches
//! only the report.

#![forbid(unsafe_code)]

pub mod bw;
pub mod conn;
pub mod counters;
pub mod cpu_util;
pub mod engine;
pub mod entry;
pub mod events;
pub mod input;
pub mod lat;
pub mod measure;
pub mod output;
pub mod params;
pub mod pattern;
pub mod pin;
pub mod procs;
pub mod progress;
pub mod proto;
pub mod report;
pub mod run;
pub mod serve;
pub mod signals;
