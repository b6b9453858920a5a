//! Typed, versioned messages over POSIX message queues (`mq_overview(7)`).
//!
//! A coordinator process and its workers (lesson 10, the benchmarks' `--procs N`) talk through
//! kernel message queues: each message arrives whole or not at all, in priority order, and a
//! queue outlives the process that created it until someone calls `mq_unlink(3)`. This module
//! gives them three things:
//!
//! - [`WorkerMsg`]: the messages of the coordinator/worker protocol and a strict binary codec
//!   (a 10-byte header with magic, version, type, sender and length, then the payload). Any
//!   byte string that is not exactly one valid message is refused with the reason, never a
//!   panic; an encoded message is at most [`MAX_MSG_LEN`] bytes, within the default
//!   `msgsize_max` of 8192.
//! - [`Queue`]: an RAII queue. [`Queue::create`] is `mq_open(O_CREAT | O_EXCL)`, mode 0600; the
//!   creator removes the name (`mq_unlink`) when its `Queue` is dropped. Every wait is bounded
//!   ([`Queue::recv_timeout`], [`Queue::send_timeout`]): descriptors are opened with
//!   `O_NONBLOCK`, and waiting is `poll(2)` on the descriptor (on Linux a message queue
//!   descriptor is a file descriptor) against a `CLOCK_MONOTONIC` deadline, so neither a wall
//!   clock step nor a racing reader can stretch a wait. Errors name the limit that refused
//!   (`/proc/sys/fs/mqueue/*`, `ulimit -q`) and say what to do.
//! - Cleanup on Ctrl-C: every name this process creates is registered;
//!   [`install_cleanup_on_signals`] removes them all on SIGINT, SIGTERM or SIGHUP before the
//!   process dies of that signal. A SIGKILL cannot be caught: its queues stay until removed by
//!   hand (`rm /dev/mqueue/NAME` once mqueue is mounted) or the machine reboots.
//! - [`QueueFamily`]: a tool's queue names, `{prefix}{owner pid}` and its members `…-w0`, so
//!   that a worker can check whose queues it was given and the next run can find the orphans.
//!
//! The kernel's limits, measured on the machines of this project (see `Limits`): at most 10

mod cleanup;
mod family;
mod limits;
mod msg;
mod queue;

pub use cleanup::*;
pub use family::*;
pub use limits::*;
pub use msg::*;
pub use queue::*;
