//! vl_read_bw: drop-in for perftest's ib_read_bw. See `vl_read_bw --help` and docs/measurement.md.

#![forbid(unsafe_code)]

use vl_perftest::measure::result::{Metric, TestKind};
use vl_perftest::params::Tool;

fn main() -> std::process::ExitCode {
    vl_perftest::entry::main(Tool::new(TestKind::Read, Metric::Bw))
}
