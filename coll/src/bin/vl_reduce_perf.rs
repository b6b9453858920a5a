//! vl_reduce_perf: nccl-tests' reduce_perf over RDMA verbs. See `vl_reduce_perf --help` and
//! docs/distributed-training.md.

#![forbid(unsafe_code)]

use vl_coll::Coll;

fn main() -> std::process::ExitCode {
    vl_coll::perf::main(|root| Coll::Reduce { root }, "vl_reduce_perf")
}
