//! # verbs-lab
//!
//! An RDMA verbs teaching toolkit and benchmark suite. This crate is the tooling the tools and
//! lessons share, on the safe verbs layer:
//!
//! - [`verbs`]: the safe verbs layer over `rdma-sys`, the crate `vl_verbs` (`verbs/`: the only
//!   crate with `unsafe`), re-exported here; so are its helpers [`fdwait`], [`sysfs`] and
//!   [`names`];
//! - [`connect`]: bringing an RC/UC QP pair up from exchanged endpoints;
//! - [`oob`]: the out-of-band TCP channel, with a timeout on every wait;
//! - [`sysfs`] (from `vl_verbs`): GID attributes, NUMA nodes and counters from sysfs;
//! - [`diag`]: what the device says when a wait expires (QP state, port counters);
//! - [`fdwait`] (from `vl_verbs`): the one bounded `poll(2)` until a deadline, and deadlines
//!   that cannot overflow;
//! - [`cli`]: man pages and shell completions of every binary, from its clap definition, the
//!   one size parser (`4096`, `64K`, `1M`) and the one check of `--wait SECS`;
//! - [`affinity`]: CPU lists, the CPUs near a NIC, and pinning a benchmark thread;
//! - [`background`]: a helper thread that stops and is joined when its guard is dropped;
//! - [`mq`]: typed, versioned messages over POSIX message queues, for coordinator and workers;
//! - [`workers`]: the one supervisor of worker processes (spawn, watch, stop, reap; die with the
//!   coordinator);
//! - [`wire`]: the one binary codec (a strict `Writer`/`Reader` pair) the records above use.
//! - [`json`]: the one strict reader of our JSON documents (no key given twice).
//! - [`names`] (from `vl_verbs`): enums printed and parsed by name (`display_by_name!`,
//!   `name_table!`).
//! - [`stdout`]: `outln!`, a line on stdout that ends the program quietly (exit 0) once its
//!   reader has gone (`| head`), destructors run; `stdout::scope` for threads that print.
//! - [`stderr`]: `eprintln_whole!`, a line on stderr in one `write(2)`, so the lines of processes
//!   sharing one stderr never interleave.
//! - [`signals`]: the signals a program takes, blocked and read from one `signalfd(2)` by the
//!   program's own waits (or a signal thread, for programs that block elsewhere), each handed to
//!   the code that registered for it.
//! - [`fail`]: [`fail::Fail`], the one application error of the tools: the error with its
//!   causes and the exit code it ends the program with.
//!
//! The lessons (`lessons/`), the point-to-point benchmarks (`perftest/`), the collectives and the
//! fabric check (`coll/`) and the bench tooling (`bench/`) are built on it.

#![forbid(unsafe_code)]

pub mod affinity;
pub mod background;
pub mod cli;
pub mod connect;
pub mod diag;
pub mod fail;
pub mod json;
pub mod mq;
pub mod oob;
pub mod signals;
pub mod stderr;
pub mod stdout;
pub mod wire;
pub mod workers;

pub use vl_verbs as verbs;
pub use vl_verbs::{display_by_name, fdwait, name_table, names, sysfs};
