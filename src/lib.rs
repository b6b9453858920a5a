//! # verbs-lab
//!
//! An RDMA verbs teaching toolkit and benchmark suite. This crate is the core library:
//!
//! - [`verbs`]: the safe verbs layer over `rdma-sys` (the only place with `unsafe`);
//! - [`connect`]: bringing an RC/UC QP pair up from exchanged endpoints;
//! - [`oob`]: the out-of-band TCP channel, with a timeout on every wait;
//! - [`sysfs`]: GID attributes, NUMA nodes and counters from sysfs;
//! - [`diag`]: what the device says when a wait expires (QP state, port counters);
//! - [`json`]: the one JSON writer (`--json` output) and strict parser (everything reading it);
//! - [`cli`]: man pages and shell completions of every binary, from its clap definition;
//! - [`affinity`]: CPU lists, the CPUs near a NIC, and pinning a benchmark thread;
//! - [`background`]: a helper thread that stops and is joined when its guard is dropped;
//! - [`mq`]: typed, versioned messages over POSIX message queues, for coordinator and workers;
//! - [`workers`]: the one supervisor of worker processes (spawn, watch, stop, reap; die with the
//!   coordinator);
//! - [`wire`]: the one binary codec (a strict `Writer`/`Reader` pair) the records above use.
//! - [`coll`]: collectives over verbs — launcher bootstrap, the ring communicator, reductions.
//!
//! The lessons (`lessons/`) and the benchmarks (`perftest/`) are built on it.

/// Implements `Display` as the type's `name()`, for the enums whose printed form is their
/// name (port states, launchers, element types, reductions, protocol phases, ...): the one
/// `fmt` they share. `name` may take `self` or `&self`, and return a `&str` or a `String`.
#[macro_export]
macro_rules! display_by_name {
    ($($t:ty),+ $(,)?) => {$(
        impl ::std::fmt::Display for $t {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(::std::convert::AsRef::<str>::as_ref(&self.name()))
            }
        }
    )+};
}

pub mod affinity;
pub mod background;
pub mod cli;
pub mod coll;
pub mod connect;
pub mod diag;
pub mod json;
pub mod mq;
pub mod oob;
pub mod sysfs;
pub mod verbs;
pub mod wire;
pub mod workers;
