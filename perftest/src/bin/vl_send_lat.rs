//! vl_send_lat: drop-in for perftest's ib_send_lat. See `vl_send_lat --help` and docs/measurement.md.

#![forbid(unsafe_code)]

use vl_perftest::params::Tool;
use vl_perftest::result::{Metric, TestKind};

fn main() -> std::process::ExitCode {
    vl_perftest::entry::main(Tool::new(TestKind::Send, Metric::Lat))
}
