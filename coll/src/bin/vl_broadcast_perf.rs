//! vl_broadcast_perf: nccl-tests' broadcast_perf over RDMA verbs. See `vl_broadcast_perf --help` and
//! docs/distributed-training.md.

#![forbid(unsafe_code)]

use vl_coll::Coll;

fn main() -> std::process::ExitCode {
    vl_coll::perf::main(|root| Coll::Broadcast { root }, "vl_broadcast_perf")
}
