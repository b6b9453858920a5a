//! vl_gather_perf: nccl-tests' gather_perf over RDMA verbs. See `vl_gather_perf --help` and
//! docs/distributed-training.md.

#![forbid(unsafe_code)]

use vl_coll::Coll;

fn main() -> std::process::ExitCode {
    vl_coll::perf::main(|root| Coll::Gather { root }, "vl_gather_perf")
}
