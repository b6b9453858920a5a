//! vl_fabric_check: tests every pair of hosts (RDMA bandwidth both ways, latency) and names
//! what is slow. See `vl_fabric_check --help` and docs/fabric-check.md.

#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    vl_coll::fabric::main()
}
