//! vl_all_reduce_perf: nccl-tests' all_reduce_perf over RDMA verbs. See `vl_all_reduce_perf --help` and
//! docs/distributed-training.md.

#![forbid(unsafe_code)]

use vl_coll::Coll;

fn main() -> std::process::ExitCode {
    vl_coll::perf::main(|_| Coll::AllReduce, "vl_all_reduce_perf")
}
