//! # verbs-lab
//!
//! An RDMA verbs teaching toolkit and benchmark suite. This crate is the core library:
//!
//! - [`verbs`]: the safe verbs layer over `rdma-sys` (the only place with `unsafe`);
//! - [`connect`]: bringing an RC/UC QP pair up from exchanged endpoints;
//! - [`sysfs`]: GID attributes, NUMA nodes and counters from sysfs.
//!
//! The lessons (`lessons/`) and the benchmarks (`perftest/`) are built on it.

pub mod connect;
pub mod sysfs;
pub mod verbs;
