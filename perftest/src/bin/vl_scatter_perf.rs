//! vl_scatter_perf: nccl-tests' scatter_perf over RDMA verbs. See `vl_scatter_perf --help` and
//! docs/distributed-training.md.

#![forbid(unsafe_code)]

use verbs_lab::coll::Coll;

fn main() -> std::process::ExitCode {
    vl_perftest::coll::main(|root| Coll::Scatter { root }, "vl_scatter_perf")
}
