//! vl_sendrecv_perf: nccl-tests' sendrecv_perf over RDMA verbs. See `vl_sendrecv_perf --help` and
//! docs/distributed-training.md.

#![forbid(unsafe_code)]

use vl_coll::Coll;

fn main() -> std::process::ExitCode {
    vl_coll::perf::main(|_| Coll::SendRecv, "vl_sendrecv_perf")
}
