//! vl_all_gather_perf: nccl-tests' all_gather_perf over RDMA verbs. See `vl_all_gather_perf --help` and
//! docs/distributed-training.md.

#![forbid(unsafe_code)]

use vl_coll::Coll;

fn main() -> std::process::ExitCode {
    vl_coll::perf::main(|_| Coll::AllGather, "vl_all_gather_perf")
}
