//! vl_send_bw: drop-in for perftest's ib_send_bw. See `vl_send_bw --help` and docs/measurement.md.

#![forbid(unsafe_code)]

use vl_perftest::measure::result::{Metric, TestKind};
use vl_perftest::params::Tool;

fn main() -> std::process::ExitCode {
    vl_perftest::entry::main(Tool::new(TestKind::Send, Metric::Bw))
}
