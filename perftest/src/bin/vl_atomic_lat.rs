//! vl_atomic_lat: drop-in for perftest's ib_atomic_lat. See `vl_atomic_lat --help` and docs/measurement.md.

#![forbid(unsafe_code)]

use vl_perftest::measure::result::{Metric, TestKind};
use vl_perftest::params::Tool;

fn main() -> std::process::ExitCode {
    vl_perftest::entry::main(Tool::new(TestKind::Atomic, Metric::Lat))
}
