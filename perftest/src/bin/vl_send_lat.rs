//! vl_send_lat: drop-in for perftest's ib_send_lat. See `vl_send_lat --help` and docs/measurement.md.

#![forbid(unsafe_code)]

use vl_perftest::measure::result::{Metric, TestKind};
use vl_perftest::params::Tool;

fn main() -> std::process::ExitCode {
    vl_perftest::entry::main(Tool::new(TestKind::Send, Metric::Lat))
}
