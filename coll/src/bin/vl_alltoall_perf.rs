//! vl_alltoall_perf: nccl-tests' alltoall_perf over RDMA verbs. See `vl_alltoall_perf --help` and
//! docs/distributed-training.md.

#![forbid(unsafe_code)]

use vl_coll::Coll;

fn main() -> std::process::ExitCode {
    vl_coll::perf::main(|_| Coll::AllToAll, "vl_alltoall_perf")
}
