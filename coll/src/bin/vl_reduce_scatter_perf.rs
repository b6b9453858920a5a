//! vl_reduce_scatter_perf: nccl-tests' reduce_scatter_perf over RDMA verbs. See `vl_reduce_scatter_perf --help` and
//! docs/distributed-training.md.

#![forbid(unsafe_code)]

use vl_coll::Coll;

fn main() -> std::process::ExitCode {
    vl_coll::perf::main(|_| Coll::ReduceScatter, "vl_reduce_scatter_perf")
}
