//! vl_read_lat: drop-in for perftest's ib_read_lat. See `vl_read_lat --help` and docs/measurement.md.

#![forbid(unsafe_code)]

use vl_perftest::measure::result::{Metric, TestKind};
use vl_perftest::params::Tool;

fn main() -> std::process::ExitCode {
    vl_perftest::entry::main(Tool::new(TestKind::Read, Metric::Lat))
}
