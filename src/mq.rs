//! Typed, versioned messages over POSIX message queues (`mq_overview(7)`).
//!
//! A coordinator process and its workers (lesson 10, the benchmarks' `--procs N`) talk through
//! kernel message queues: each message arrives whole or not at all, in priority order, and a
//! queue outlives the process that created it until someone calls `mq_unlink(3)`. This module
//! gives them three things:
//!
//! - [`Msg`]: the messages of the coordinator/worker protocol and a strict binary codec
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
//!
//! The kernel's limits, measured on the machines of this project (see `Limits`): at most 10
//! messages of at most 8192 bytes per queue, 256 queues, and 819200 bytes of queues per user
//! (`RLIMIT_MSGQUEUE`); root without `CAP_SYS_RESOURCE` is bound by them too.

use std::fmt;
use std::fs;
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::mqueue::{
    mq_attr_member_t, mq_close, mq_getattr, mq_open, mq_receive, mq_send, mq_unlink, MQ_OFlag,
    MqAttr, MqdT,
};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::resource::{getrlimit, Resource};
use nix::sys::signal::{raise, SigSet, Signal};
use nix::sys::stat::Mode;

// ---------------------------------------------------------------------------------------------
// The wire format

/// The first two bytes of every message.
pub const MAGIC: [u8; 2] = *b"VL";
/// The codec version this build writes and the only one it reads.
pub const VERSION: u8 = 1;
/// Header: magic (2), version (1), type (1), sender (u32), payload length (u16); big-endian.
pub const HEADER_LEN: usize = 10;
/// The largest opaque payload of a [`Msg::Result`] (7 KiB).
pub const MAX_RESULT: usize = 7 * 1024;
/// The largest text (UTF-8 bytes) of [`Msg::Error`], [`Msg::Text`] and [`Msg::Abort`].
pub const MAX_TEXT: usize = 2048;
/// The largest encoded message: a full [`Msg::Result`]. Fits the default `msgsize_max` (8192)
/// with room for a later header to grow.
pub const MAX_MSG_LEN: usize = HEADER_LEN + MAX_RESULT;
const _: () = assert!(
    MAX_MSG_LEN <= 8192,
    "a message must fit the default msgsize_max"
);
/// The sender id of the coordinator (workers are numbered from 0).
pub const COORDINATOR: u32 = u32::MAX;
/// Priorities run from 0 to `MQ_PRIO_MAX - 1` (32768 on Linux); higher is received first.
pub const MQ_PRIO_MAX: u32 = 32768;

/// One message of the coordinator/worker protocol.
///
/// A run goes: each worker sends `Hello` (and `Ready` when it has set itself up), the
/// coordinator sends each a `Go`, each worker sends its `Result` and `Done` — or an `Error`.
/// The coordinator may send `Abort` instead of `Go`, or at any time. `Text` is free text for
/// demonstrations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Msg {
    /// A worker introduces itself: its process id and the CPU it is pinned to, if any.
    Hello {
        worker: u32,
        pid: u32,
        cpu: Option<u32>,
    },
    /// A worker is set up and waits for `Go`.
    Ready { worker: u32 },
    /// Start (coordinator → worker). `start_at_ns`: a `CLOCK_MONOTONIC` instant (the clock is
    /// the same in every process of the machine, see [`monotonic_ns`]) at which all workers
    /// should start; 0 means now.
    Go { start_at_ns: u64 },
    /// A worker's results: opaque bytes whose layout the caller defines (at most
    /// [`MAX_RESULT`]).
    Result { worker: u32, payload: Vec<u8> },
    /// A worker failed; `message` says why (at most [`MAX_TEXT`] bytes: see [`Msg::error`]).
    Error { worker: u32, message: String },
    /// A worker has sent everything and is about to exit.
    Done { worker: u32 },
    /// Free text from anyone (at most [`MAX_TEXT`] bytes).
    Text { from: u32, text: String },
    /// Stop now (coordinator → worker), with the reason.
    Abort { reason: String },
}

const T_HELLO: u8 = 1;
const T_READY: u8 = 2;
const T_GO: u8 = 3;
const T_RESULT: u8 = 4;
const T_ERROR: u8 = 5;
const T_DONE: u8 = 6;
const T_TEXT: u8 = 7;
const T_ABORT: u8 = 8;

/// "Not pinned" in the `cpu` field of a `Hello` on the wire.
const NO_CPU: u32 = u32::MAX;

fn type_name(t: u8) -> &'static str {
    match t {
        T_HELLO => "Hello",
        T_READY => "Ready",
        T_GO => "Go",
        T_RESULT => "Result",
        T_ERROR => "Error",
        T_DONE => "Done",
        T_TEXT => "Text",
        T_ABORT => "Abort",
        _ => "unknown",
    }
}

/// Why bytes are not a message (decoding), or a message cannot be sent (encoding).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CodecError {
    /// Fewer bytes than a header.
    Short { len: usize },
    /// The first two bytes are not [`MAGIC`]: not one of our messages at all.
    Magic { got: [u8; 2] },
    /// A version this build does not speak.
    Version { got: u8 },
    /// A type byte no version-1 message has.
    UnknownType { got: u8 },
    /// The header's length field disagrees with the bytes that follow it.
    Length { declared: usize, actual: usize },
    /// The payload does not have the layout of its type.
    Payload { kind: &'static str, reason: String },
    /// A payload larger than its type allows.
    TooLarge {
        kind: &'static str,
        len: usize,
        max: usize,
    },
    /// A sender that cannot send this type (only the coordinator sends `Go` and `Abort`, and a
    /// worker cannot use the coordinator's id).
    Sender { kind: &'static str, sender: u32 },
}

impl fmt::Display for CodecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CodecError::Short { len } => write!(
                f,
                "{len} bytes are shorter than the {HEADER_LEN}-byte message header"
            ),
            CodecError::Magic { got } => write!(
                f,
                "bad magic {:#04x} {:#04x} (expected 'VL'): not a verbs-lab message",
                got[0], got[1]
            ),
            CodecError::Version { got } => write!(
                f,
                "message version {got} is not understood by this build (it speaks version \
                 {VERSION}): are both sides built from the same source?"
            ),
            CodecError::UnknownType { got } => {
                write!(f, "unknown message type {got} for version {VERSION}")
            }
            CodecError::Length { declared, actual } => write!(
                f,
                "the header declares a {declared}-byte payload but {actual} bytes follow \
                 (truncated or padded)"
            ),
            CodecError::Payload { kind, reason } => write!(f, "malformed {kind}: {reason}"),
            CodecError::TooLarge { kind, len, max } => {
                write!(
                    f,
                    "{kind} payload of {len} bytes exceeds its limit of {max}"
                )
            }
            CodecError::Sender { kind, sender } => {
                if *sender == COORDINATOR {
                    write!(f, "{kind} claims the coordinator's id as its sender")
                } else {
                    write!(
                        f,
                        "{kind} from worker {sender}: only the coordinator sends it"
                    )
                }
            }
        }
    }
}

impl std::error::Error for CodecError {}

impl Msg {
    /// An `Error` message; a text longer than [`MAX_TEXT`] is cut at a character boundary and
    /// marked with "…".
    pub fn error(worker: u32, message: impl Into<String>) -> Msg {
        Msg::Error {
            worker,
            message: bounded_text(message.into()),
        }
    }

    /// A `Text` message, cut to [`MAX_TEXT`] like [`Msg::error`].
    pub fn text(from: u32, text: impl Into<String>) -> Msg {
        Msg::Text {
            from,
            text: bounded_text(text.into()),
        }
    }

    /// The type's name, as in error messages: "Hello", "Result", ...
    pub fn kind(&self) -> &'static str {
        type_name(self.type_byte())
    }

    /// Who sent it: a worker number, or [`COORDINATOR`].
    pub fn sender(&self) -> u32 {
        match self {
            Msg::Hello { worker, .. }
            | Msg::Ready { worker }
            | Msg::Result { worker, .. }
            | Msg::Error { worker, .. }
            | Msg::Done { worker } => *worker,
            Msg::Text { from, .. } => *from,
            Msg::Go { .. } | Msg::Abort { .. } => COORDINATOR,
        }
    }

    fn type_byte(&self) -> u8 {
        match self {
            Msg::Hello { .. } => T_HELLO,
            Msg::Ready { .. } => T_READY,
            Msg::Go { .. } => T_GO,
            Msg::Result { .. } => T_RESULT,
            Msg::Error { .. } => T_ERROR,
            Msg::Done { .. } => T_DONE,
            Msg::Text { .. } => T_TEXT,
            Msg::Abort { .. } => T_ABORT,
        }
    }

    /// The wire form: header, then payload. Refuses payloads over their limit, a worker using
    /// the coordinator's id, and `Hello { cpu: Some(u32::MAX) }` (that value means "none").
    pub fn encode(&self) -> Result<Vec<u8>, CodecError> {
        let kind = self.kind();
        let mut payload = Vec::new();
        match self {
            Msg::Hello { pid, cpu, .. } => {
                if *cpu == Some(NO_CPU) {
                    return Err(CodecError::Payload {
                        kind,
                        reason: format!("CPU {NO_CPU} is reserved for 'not pinned'"),
                    });
                }
                payload.extend_from_slice(&pid.to_be_bytes());
                payload.extend_from_slice(&cpu.unwrap_or(NO_CPU).to_be_bytes());
            }
            Msg::Ready { .. } | Msg::Done { .. } => {}
            Msg::Go { start_at_ns } => payload.extend_from_slice(&start_at_ns.to_be_bytes()),
            Msg::Result { payload: p, .. } => {
                if p.len() > MAX_RESULT {
                    return Err(CodecError::TooLarge {
                        kind,
                        len: p.len(),
                        max: MAX_RESULT,
                    });
                }
                payload.extend_from_slice(p);
            }
            Msg::Error { message: t, .. }
            | Msg::Text { text: t, .. }
            | Msg::Abort { reason: t } => {
                if t.len() > MAX_TEXT {
                    return Err(CodecError::TooLarge {
                        kind,
                        len: t.len(),
                        max: MAX_TEXT,
                    });
                }
                payload.extend_from_slice(t.as_bytes());
            }
        }
        let sender = self.sender();
        let worker_sent = !matches!(self, Msg::Go { .. } | Msg::Abort { .. } | Msg::Text { .. });
        if worker_sent && sender == COORDINATOR {
            return Err(CodecError::Sender { kind, sender });
        }
        let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
        out.extend_from_slice(&MAGIC);
        out.push(VERSION);
        out.push(self.type_byte());
        out.extend_from_slice(&sender.to_be_bytes());
        // Every payload limit is below u16::MAX.
        out.extend_from_slice(&(payload.len() as u16).to_be_bytes());
        out.extend_from_slice(&payload);
        Ok(out)
    }

    /// Parses exactly one message. Strict: wrong magic, version, type, length, payload layout,
    /// sender or UTF-8 is refused with the reason. The encoding is canonical: whatever decodes
    /// encodes back to the same bytes.
    pub fn decode(bytes: &[u8]) -> Result<Msg, CodecError> {
        if bytes.len() < HEADER_LEN {
            return Err(CodecError::Short { len: bytes.len() });
        }
        if bytes[0..2] != MAGIC {
            return Err(CodecError::Magic {
                got: [bytes[0], bytes[1]],
            });
        }
        if bytes[2] != VERSION {
            return Err(CodecError::Version { got: bytes[2] });
        }
        let t = bytes[3];
        let kind = type_name(t);
        if kind == "unknown" {
            return Err(CodecError::UnknownType { got: t });
        }
        let sender = u32::from_be_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
        let declared = u16::from_be_bytes([bytes[8], bytes[9]]) as usize;
        let p = &bytes[HEADER_LEN..];
        if declared != p.len() {
            return Err(CodecError::Length {
                declared,
                actual: p.len(),
            });
        }
        let exact = |n: usize| -> Result<(), CodecError> {
            if p.len() == n {
                Ok(())
            } else {
                Err(CodecError::Payload {
                    kind,
                    reason: format!("{} payload bytes, expected {n}", p.len()),
                })
            }
        };
        let text = |max: usize| -> Result<String, CodecError> {
            if p.len() > max {
                return Err(CodecError::TooLarge {
                    kind,
                    len: p.len(),
                    max,
                });
            }
            String::from_utf8(p.to_vec()).map_err(|e| CodecError::Payload {
                kind,
                reason: format!(
                    "text is not UTF-8 (invalid byte at {})",
                    e.utf8_error().valid_up_to()
                ),
            })
        };
        let from_coordinator = matches!(t, T_GO | T_ABORT);
        if from_coordinator != (sender == COORDINATOR) && t != T_TEXT {
            return Err(CodecError::Sender { kind, sender });
        }
        let worker = sender;
        let msg = match t {
            T_HELLO => {
                exact(8)?;
                let pid = u32::from_be_bytes([p[0], p[1], p[2], p[3]]);
                let cpu = u32::from_be_bytes([p[4], p[5], p[6], p[7]]);
                Msg::Hello {
                    worker,
                    pid,
                    cpu: (cpu != NO_CPU).then_some(cpu),
                }
            }
            T_READY => {
                exact(0)?;
                Msg::Ready { worker }
            }
            T_GO => {
                exact(8)?;
                let mut b = [0u8; 8];
                b.copy_from_slice(p);
                Msg::Go {
                    start_at_ns: u64::from_be_bytes(b),
                }
            }
            T_RESULT => {
                if p.len() > MAX_RESULT {
                    return Err(CodecError::TooLarge {
                        kind,
                        len: p.len(),
                        max: MAX_RESULT,
                    });
                }
                Msg::Result {
                    worker,
                    payload: p.to_vec(),
                }
            }
            T_ERROR => Msg::Error {
                worker,
                message: text(MAX_TEXT)?,
            },
            T_DONE => {
                exact(0)?;
                Msg::Done { worker }
            }
            T_TEXT => Msg::Text {
                from: sender,
                text: text(MAX_TEXT)?,
            },
            T_ABORT => Msg::Abort {
                reason: text(MAX_TEXT)?,
            },
            _ => unreachable!("type_name() knows every type matched here"),
        };
        Ok(msg)
    }
}

/// Cuts `s` to at most [`MAX_TEXT`] bytes at a character boundary, ending in "…".
fn bounded_text(mut s: String) -> String {
    if s.len() <= MAX_TEXT {
        return s;
    }
    let ellipsis = "…";
    let mut cut = MAX_TEXT - ellipsis.len();
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    s.truncate(cut);
    s.push_str(ellipsis);
    s
}

impl fmt::Display for Msg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Msg::Hello { worker, pid, cpu } => match cpu {
                Some(c) => write!(
                    f,
                    "Hello from worker {worker} (pid {pid}, pinned to CPU {c})"
                ),
                None => write!(f, "Hello from worker {worker} (pid {pid}, not pinned)"),
            },
            Msg::Ready { worker } => write!(f, "Ready from worker {worker}"),
            Msg::Go { start_at_ns: 0 } => write!(f, "Go (start now)"),
            Msg::Go { start_at_ns } => write!(f, "Go (start at monotonic {start_at_ns} ns)"),
            Msg::Result { worker, payload } => {
                write!(f, "Result from worker {worker} ({} bytes)", payload.len())
            }
            Msg::Error { worker, message } => write!(f, "Error from worker {worker}: {message}"),
            Msg::Done { worker } => write!(f, "Done from worker {worker}"),
            Msg::Text { from, text } if *from == COORDINATOR => {
                write!(f, "Text from the coordinator: {text:?}")
            }
            Msg::Text { from, text } => write!(f, "Text from {from}: {text:?}"),
            Msg::Abort { reason } => write!(f, "Abort: {reason}"),
        }
    }
}

/// Nanoseconds on `CLOCK_MONOTONIC`: one clock for every process of the machine, so a
/// coordinator can name a common start instant in [`Msg::Go`].
pub fn monotonic_ns() -> u64 {
    use nix::time::{clock_gettime, ClockId};
    // CLOCK_MONOTONIC cannot fail on Linux with a valid timespec.
    let t = clock_gettime(ClockId::CLOCK_MONOTONIC).expect("clock_gettime(CLOCK_MONOTONIC)");
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

// ---------------------------------------------------------------------------------------------
// The kernel's limits

/// The directory of the message-queue limits (`mq_overview(7)`, "/proc interfaces").
pub const PROC_DIR: &str = "/proc/sys/fs/mqueue";

/// The limits that decide whether `mq_open` may create a queue; `None` where unreadable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Limits {
    /// Largest `mq_maxmsg` an unprivileged (no `CAP_SYS_RESOURCE`) process may ask for.
    pub msg_max: Option<u64>,
    /// Largest `mq_msgsize` likewise.
    pub msgsize_max: Option<u64>,
    /// Queues that may exist in this IPC namespace (beyond it: ENOSPC).
    pub queues_max: Option<u64>,
    /// `mq_maxmsg` of a queue created without attributes.
    pub msg_default: Option<u64>,
    /// `mq_msgsize` of a queue created without attributes.
    pub msgsize_default: Option<u64>,
    /// `RLIMIT_MSGQUEUE` (`ulimit -q`): bytes of queues one user may own (beyond it: EMFILE).
    pub rlimit_bytes: Option<u64>,
}

impl Limits {
    /// Reads [`PROC_DIR`] and `getrlimit(RLIMIT_MSGQUEUE)`.
    pub fn read() -> Limits {
        Limits::read_from(Path::new(PROC_DIR))
    }

    /// As [`Limits::read`], with the five files read from `dir` (for tests).
    pub fn read_from(dir: &Path) -> Limits {
        let read = |f: &str| {
            fs::read_to_string(dir.join(f))
                .ok()
                .and_then(|s| s.trim().parse().ok())
        };
        Limits {
            msg_max: read("msg_max"),
            msgsize_max: read("msgsize_max"),
            queues_max: read("queues_max"),
            msg_default: read("msg_default"),
            msgsize_default: read("msgsize_default"),
            rlimit_bytes: getrlimit(Resource::RLIMIT_MSGQUEUE)
                .ok()
                .map(|(soft, _)| soft),
        }
    }
}

/// True if this process holds `CAP_SYS_RESOURCE` in its effective set (bit 24 of `CapEff` in
/// `/proc/self/status`): then `msg_max` and `msgsize_max` do not bind it, only the kernel's
/// hard ceilings (65536 messages, 16 MiB) do. Root on a VM usually has it; root in a container
/// usually not.
pub fn has_cap_sys_resource() -> bool {
    const CAP_SYS_RESOURCE: u32 = 24;
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .is_some_and(|caps| caps & (1 << CAP_SYS_RESOURCE) != 0)
}

/// Shows a limit, or "unknown".
fn show(v: Option<u64>) -> String {
    v.map_or_else(|| "unknown".into(), |v| v.to_string())
}

/// The bytes a queue costs against `RLIMIT_MSGQUEUE`, as Linux counts them (`ipc/mqueue.c`):
/// the messages' space plus one message header (48 bytes on 64-bit) per message and one
/// priority-tree node (48 bytes) per message up to 32768.
pub fn queue_bytes(maxmsg: usize, msgsize: usize) -> u64 {
    let (m, s) = (maxmsg as u64, msgsize as u64);
    m * s + m * 48 + m.min(u64::from(MQ_PRIO_MAX)) * 48
}

// ---------------------------------------------------------------------------------------------
// Errors

/// What went wrong with a queue; the text says what to do about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MqError {
    /// A call failed.
    Call {
        /// The function: "mq_open", "mq_send", ...
        call: &'static str,
        /// The queue's name.
        name: String,
        errno: Errno,
        /// The whole explanation (what refused, and what to do).
        message: String,
    },
    /// Nothing arrived, or no room appeared, within the wait.
    Timeout {
        name: String,
        /// What was awaited: "a message", "room for a message".
        what: &'static str,
        after: Duration,
    },
    /// A nonblocking attempt ([`Queue::try_recv`], [`Queue::try_send`]) found the queue empty
    /// or full.
    WouldBlock { name: String, what: &'static str },
    /// A message that could not be encoded, or received bytes that are not a message.
    Codec { name: String, err: CodecError },
    /// An argument refused before any call: the name's syntax, a size, a priority.
    Invalid(String),
}

impl MqError {
    /// The errno of a failed call.
    pub fn errno(&self) -> Option<Errno> {
        match self {
            MqError::Call { errno, .. } => Some(*errno),
            _ => None,
        }
    }

    /// True for [`MqError::Timeout`].
    pub fn is_timeout(&self) -> bool {
        matches!(self, MqError::Timeout { .. })
    }
}

impl fmt::Display for MqError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MqError::Call { message, .. } => f.write_str(message),
            MqError::Timeout { name, what, after } => {
                write!(f, "{name}: no {what} within {:.1} s", after.as_secs_f64())
            }
            MqError::WouldBlock { name, what } => write!(f, "{name}: {what}"),
            MqError::Codec { name, err } => write!(f, "{name}: {err}"),
            MqError::Invalid(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for MqError {}

/// The result of this module's calls: [`MqError`] unless said otherwise.
pub type Result<T, E = MqError> = std::result::Result<T, E>;

/// The errno's name and text, e.g. "EINVAL, Invalid argument".
fn errno_text(e: Errno) -> String {
    format!("{e:?}, {}", e.desc())
}

/// The error of a failed `mq_open(O_CREAT | O_EXCL)`: which limit refused, and what to do.
fn create_error(name: &str, maxmsg: usize, msgsize: usize, e: Errno) -> MqError {
    let l = Limits::read();
    let head = format!("mq_open({name}) refused maxmsg={maxmsg} msgsize={msgsize}");
    let message = match e {
        Errno::EINVAL => {
            let mut over = Vec::new();
            if l.msg_max.is_some_and(|m| maxmsg as u64 > m) {
                over.push(format!("maxmsg {maxmsg} is above msg_max"));
            }
            if l.msgsize_max.is_some_and(|m| msgsize as u64 > m) {
                over.push(format!("msgsize {msgsize} is above msgsize_max"));
            }
            let over = if over.is_empty() {
                String::new()
            } else {
                format!(" — {}", over.join(", "))
            };
            if has_cap_sys_resource() {
                format!(
                    "{head} (EINVAL): this process holds CAP_SYS_RESOURCE, so only the kernel's \
                     hard ceilings bind it (65536 messages, 16 MiB per message); \
                     {PROC_DIR}/msg_max is {} and msgsize_max is {} for everyone else",
                    show(l.msg_max),
                    show(l.msgsize_max)
                )
            } else {
                format!(
                    "{head} (EINVAL): {PROC_DIR}/msg_max is {} and msgsize_max is {} (root \
                     without CAP_SYS_RESOURCE is bound too){over}; ask for less, or raise the \
                     limit with sysctl fs.mqueue.msg_max=N / fs.mqueue.msgsize_max=N",
                    show(l.msg_max),
                    show(l.msgsize_max)
                )
            }
        }
        Errno::EMFILE => format!(
            "{head} (EMFILE): the per-user RLIMIT_MSGQUEUE (ulimit -q, {} bytes) is exhausted — \
             this queue counts {} bytes against it, and queues of this user that were never \
             unlinked count too — or the process ran out of file descriptors (ulimit -n); remove \
             stale queues (mount -t mqueue none /dev/mqueue; ls /dev/mqueue) or ask for smaller \
             queues",
            show(l.rlimit_bytes),
            queue_bytes(maxmsg, msgsize)
        ),
        Errno::ENOSPC => format!(
            "{head} (ENOSPC): {PROC_DIR}/queues_max ({}) queues already exist in this IPC \
             namespace; remove stale ones (ls /dev/mqueue once mounted) or raise \
             fs.mqueue.queues_max",
            show(l.queues_max)
        ),
        Errno::EEXIST => format!(
            "{head} (EEXIST): a queue of that name exists: a previous run crashed? remove \
             /dev/mqueue{name} (mount -t mqueue none /dev/mqueue first if needed) or pick \
             another name"
        ),
        Errno::EACCES => format!(
            "{head} (EACCES): permission denied — the name may contain a second '/' (only the \
             leading one is allowed), or the caller may not create queues here"
        ),
        Errno::ENAMETOOLONG => format!("{head} (ENAMETOOLONG): the name is longer than 255 bytes"),
        Errno::ENOMEM | Errno::ENFILE => format!(
            "{head} ({}): the system is out of memory or file descriptors",
            errno_text(e)
        ),
        other => format!("{head}: {}", errno_text(other)),
    };
    MqError::Call {
        call: "mq_open",
        name: name.into(),
        errno: e,
        message,
    }
}

/// The error of a failed `mq_open` of an existing queue.
fn open_error(name: &str, e: Errno) -> MqError {
    let message = match e {
        Errno::ENOENT => format!(
            "mq_open({name}) (ENOENT): no queue of that name — its creator has not created it \
             yet, or has already removed it (mq_unlink) or exited"
        ),
        Errno::EACCES => format!(
            "mq_open({name}) (EACCES): the queue's permissions deny this user (queues are \
             created mode 0600: owner only), or the name has a second '/'"
        ),
        other => format!("mq_open({name}): {}", errno_text(other)),
    };
    MqError::Call {
        call: "mq_open",
        name: name.into(),
        errno: e,
        message,
    }
}

fn call_error(call: &'static str, name: &str, e: Errno, hint: &str) -> MqError {
    let hint = if hint.is_empty() {
        String::new()
    } else {
        format!(" — {hint}")
    };
    MqError::Call {
        call,
        name: name.into(),
        errno: e,
        message: format!("{call}({name}): {}{hint}", errno_text(e)),
    }
}

/// Checks a queue name (`mq_overview(7)`): a leading '/', then 1 to 254 bytes with no other
/// '/' and no NUL.
pub fn check_name(name: &str) -> Result<()> {
    let rest = name.strip_prefix('/').ok_or_else(|| {
        MqError::Invalid(format!(
            "queue name '{name}' must start with '/' (e.g. /vl-demo)"
        ))
    })?;
    if rest.is_empty() || rest.len() > 254 {
        return Err(MqError::Invalid(format!(
            "queue name '{name}': 1 to 254 bytes must follow the '/'"
        )));
    }
    if rest.contains('/') || rest.contains('\0') {
        return Err(MqError::Invalid(format!(
            "queue name '{name}': no '/' (beyond the leading one) or NUL allowed"
        )));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The registry of names this process created, and cleanup on signals

static REGISTRY: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn registry() -> MutexGuard<'static, Vec<String>> {
    // A panic while holding the lock leaves a usable Vec: keep going.
    REGISTRY.lock().unwrap_or_else(|p| p.into_inner())
}

/// Registers a queue name created outside [`Queue::create`] (e.g. with a raw `mq_open` in a
/// lesson), so [`unlink_all_registered`] and the signal cleanup remove it too.
pub fn register_for_cleanup(name: &str) {
    let mut r = registry();
    if !r.iter().any(|n| n == name) {
        r.push(name.to_string());
    }
}

/// Forgets a registered name (after the caller unlinked it).
pub fn forget_registered(name: &str) {
    registry().retain(|n| n != name);
}

/// The names this process created and has not removed yet.
pub fn registered_names() -> Vec<String> {
    registry().clone()
}

/// Removes (`mq_unlink`) every registered name and forgets them; returns how many were still
/// there. Open descriptors stay usable; the names disappear at once.
pub fn unlink_all_registered() -> usize {
    let mut r = registry();
    let n = r
        .iter()
        .filter(|name| mq_unlink(name.as_str()).is_ok())
        .count();
    r.clear();
    n
}

static SIGNALS_INSTALLED: AtomicBool = AtomicBool::new(false);

/// The signals [`install_cleanup_on_signals`] handles.
pub const CLEANUP_SIGNALS: [Signal; 3] = [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP];

/// On SIGINT, SIGTERM or SIGHUP: remove every registered queue, then die of that signal (the
/// shell sees 130 for Ctrl-C, as without the cleanup).
///
/// **Call it first in `main`, before any thread starts.** It works without a signal handler:
/// it blocks the three signals in the calling thread (`pthread_sigmask(2)`), which every thread
/// created afterwards inherits, and starts one thread that takes them with `sigwait(3)`. That
/// thread runs ordinary code — it may lock the registry and format a message — so there is no
/// async-signal-safety to get wrong and no `unsafe`. (A thread started *before* this call keeps
/// its mask; a signal delivered to it would kill the process without cleanup.) After the
/// cleanup the thread unblocks the signal for itself and raises it: the default action ends the
/// process, so a parent sees "killed by SIGINT". Child processes started with
/// `std::process::Command` get an empty signal mask (the standard library resets it), so
/// workers still die of Ctrl-C normally.
///
/// A signal the process inherited as ignored (`SIG_IGN`, e.g. SIGINT in a shell's background
/// job) is left alone. Idempotent: later calls do nothing.
pub fn install_cleanup_on_signals() -> Result<()> {
    if SIGNALS_INSTALLED.swap(true, Ordering::SeqCst) {
        return Ok(());
    }
    // A signal this process inherited as ignored (a shell's background job ignores SIGINT) stays
    // ignored: Linux queues even an ignored signal while it is blocked, so taking it with
    // sigwait would change what the parent asked for.
    let ignored = ignored_signals();
    let mut set = SigSet::empty();
    for s in CLEANUP_SIGNALS {
        if ignored & (1u64 << (s as i32 - 1)) == 0 {
            set.add(s);
        }
    }
    if set.iter().next().is_none() {
        return Ok(()); // every one of them is ignored: nothing to take
    }
    set.thread_block().map_err(|e| {
        SIGNALS_INSTALLED.store(false, Ordering::SeqCst);
        call_error("pthread_sigmask", "(signals)", e, "")
    })?;
    std::thread::Builder::new()
        .name("vl-mq-signals".into())
        .spawn(move || loop {
            let Ok(sig) = set.wait() else { continue };
            let n = unlink_all_registered();
            eprintln!(
                "{sig}: removed {n} message queue{} this process created; exiting",
                if n == 1 { "" } else { "s" }
            );
            let mut one = SigSet::empty();
            one.add(sig);
            let _ = one.thread_unblock();
            let _ = raise(sig);
            // Reached only if someone installed a handler that returned.
            std::process::exit(128 + sig as i32);
        })
        .map_err(|e| {
            MqError::Invalid(format!(
                "cannot start the signal-cleanup thread: {e} (the signals stay blocked)"
            ))
        })?;
    Ok(())
}

/// The `SigIgn` mask of `/proc/self/status`: bit N-1 set when signal N is ignored.
fn ignored_signals() -> u64 {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("SigIgn:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .unwrap_or(0)
}

// ---------------------------------------------------------------------------------------------
// Queue

/// A queue's attributes (`mq_getattr(3)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueAttr {
    /// Capacity in messages.
    pub maxmsg: usize,
    /// Largest message in bytes (a receive buffer must be at least this large).
    pub msgsize: usize,
    /// Messages in the queue now.
    pub curmsgs: usize,
    /// `O_NONBLOCK` is set on this descriptor (always, for a [`Queue`]).
    pub nonblocking: bool,
}

impl From<MqAttr> for QueueAttr {
    fn from(a: MqAttr) -> QueueAttr {
        QueueAttr {
            maxmsg: a.maxmsg().max(0) as usize,
            msgsize: a.msgsize().max(0) as usize,
            curmsgs: a.curmsgs().max(0) as usize,
            nonblocking: a.flags() & mq_attr_member_t::from(MQ_OFlag::O_NONBLOCK.bits()) != 0,
        }
    }
}

/// An open message queue carrying [`Msg`]s. The process that created it (the *owner*) removes
/// its name when the `Queue` is dropped; every `Queue` closes its descriptor on drop.
///
/// The descriptor is always `O_NONBLOCK`: every wait is a `poll(2)` with a deadline, so it is
/// bounded whatever other readers and writers do. [`Queue::try_recv`] / [`Queue::try_send`]
/// give the nonblocking behaviour (EAGAIN → [`MqError::WouldBlock`]).
#[derive(Debug)]
pub struct Queue {
    name: String,
    mqd: Option<MqdT>,
    owner: bool,
    maxmsg: usize,
    msgsize: usize,
    send_wait: Duration,
}

impl Queue {
    /// How long [`Queue::send`] waits for room in a full queue, unless changed with
    /// [`Queue::set_send_wait`].
    pub const DEFAULT_SEND_WAIT: Duration = Duration::from_secs(10);

    /// Creates a new queue (`mq_open(3)` with `O_CREAT | O_EXCL | O_RDWR`, mode 0600, the given
    /// `mq_maxmsg` and `mq_msgsize`) and registers its name for cleanup. Fails if the name
    /// exists. The error names the limit that refused: `maxmsg` above `msg_max` or `msgsize`
    /// above `msgsize_max` (EINVAL), the per-user bytes (EMFILE), `queues_max` (ENOSPC).
    ///
    /// To carry every [`Msg`], `msgsize` must be at least [`MAX_MSG_LEN`]; a queue that only
    /// carries small messages (`Go`, `Abort`) may be smaller — [`Queue::send`] refuses what
    /// does not fit.
    pub fn create(name: &str, maxmsg: usize, msgsize: usize) -> Result<Queue> {
        check_name(name)?;
        if maxmsg == 0 || msgsize == 0 {
            return Err(MqError::Invalid(format!(
                "queue {name}: maxmsg ({maxmsg}) and msgsize ({msgsize}) must be at least 1"
            )));
        }
        let too_big = |v: usize| mq_attr_member_t::try_from(v).is_err();
        if too_big(maxmsg) || too_big(msgsize) {
            return Err(MqError::Invalid(format!(
                "queue {name}: maxmsg {maxmsg} / msgsize {msgsize} out of range"
            )));
        }
        let attr = MqAttr::new(
            0,
            maxmsg as mq_attr_member_t,
            msgsize as mq_attr_member_t,
            0,
        );
        // Hold the registry while creating: the signal thread then sees either no queue or a
        // registered one, never a created but unregistered one.
        let mut reg = registry();
        let mqd = mq_open(
            name,
            MQ_OFlag::O_CREAT | MQ_OFlag::O_EXCL | MQ_OFlag::O_RDWR | MQ_OFlag::O_NONBLOCK,
            Mode::S_IRUSR | Mode::S_IWUSR,
            Some(&attr),
        )
        .map_err(|e| create_error(name, maxmsg, msgsize, e))?;
        reg.push(name.to_string());
        drop(reg);
        Ok(Queue {
            name: name.to_string(),
            mqd: Some(mqd),
            owner: true,
            maxmsg,
            msgsize,
            send_wait: Queue::DEFAULT_SEND_WAIT,
        })
    }

    /// Opens an existing queue for reading and writing (`mq_open(3)` with `O_RDWR`); dropping
    /// it closes the descriptor but leaves the queue to its owner.
    pub fn open(name: &str) -> Result<Queue> {
        check_name(name)?;
        let mqd = mq_open(
            name,
            MQ_OFlag::O_RDWR | MQ_OFlag::O_NONBLOCK,
            Mode::empty(),
            None,
        )
        .map_err(|e| open_error(name, e))?;
        let a: QueueAttr = mq_getattr(&mqd)
            .map_err(|e| call_error("mq_getattr", name, e, ""))?
            .into();
        Ok(Queue {
            name: name.to_string(),
            mqd: Some(mqd),
            owner: false,
            maxmsg: a.maxmsg,
            msgsize: a.msgsize,
            send_wait: Queue::DEFAULT_SEND_WAIT,
        })
    }

    /// True if a queue of this name exists: `mq_open(O_RDONLY)` succeeds (and is closed
    /// again) or fails with anything but ENOENT.
    pub fn exists(name: &str) -> Result<bool> {
        check_name(name)?;
        match mq_open(name, MQ_OFlag::O_RDONLY, Mode::empty(), None) {
            Ok(mqd) => {
                let _ = mq_close(mqd);
                Ok(true)
            }
            Err(Errno::ENOENT) => Ok(false),
            Err(Errno::EACCES) => Ok(true),
            Err(e) => Err(open_error(name, e)),
        }
    }

    /// The queue's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// True if this process created the queue and will remove it on drop.
    pub fn is_owner(&self) -> bool {
        self.owner
    }

    /// Capacity in messages and the largest message, as created.
    pub fn capacity(&self) -> (usize, usize) {
        (self.maxmsg, self.msgsize)
    }

    /// Changes how long [`Queue::send`] waits for room.
    pub fn set_send_wait(&mut self, wait: Duration) {
        self.send_wait = wait;
    }

    fn mqd(&self) -> &MqdT {
        self.mqd.as_ref().expect("the descriptor lives until drop")
    }

    /// The attributes now (`mq_getattr(3)`), with the number of queued messages.
    pub fn attr(&self) -> Result<QueueAttr> {
        mq_getattr(self.mqd())
            .map(QueueAttr::from)
            .map_err(|e| call_error("mq_getattr", &self.name, e, ""))
    }

    /// Sends `msg` with `priority` (0 to 32767; higher is received first), waiting up to the
    /// send wait (10 s by default) for room if the queue is full.
    pub fn send(&self, msg: &Msg, priority: u32) -> Result<()> {
        self.send_timeout(msg, priority, self.send_wait)
    }

    /// Sends `msg` (`mq_send(3)`), waiting up to `timeout` for room.
    pub fn send_timeout(&self, msg: &Msg, priority: u32, timeout: Duration) -> Result<()> {
        let bytes = self.encode(msg, priority)?;
        let deadline = Instant::now() + timeout;
        loop {
            match mq_send(self.mqd(), &bytes, priority) {
                Ok(()) => return Ok(()),
                Err(Errno::EAGAIN) => {
                    if !self.wait_for(PollFlags::POLLOUT, deadline)? {
                        return Err(MqError::Timeout {
                            name: self.name.clone(),
                            what:
                                "room for a message (the queue stayed full: is its reader alive?)",
                            after: timeout,
                        });
                    }
                }
                Err(Errno::EINTR) => {}
                Err(e) => return Err(self.send_error(e, bytes.len())),
            }
        }
    }

    /// Sends without waiting: a full queue is [`MqError::WouldBlock`].
    pub fn try_send(&self, msg: &Msg, priority: u32) -> Result<()> {
        let bytes = self.encode(msg, priority)?;
        match mq_send(self.mqd(), &bytes, priority) {
            Ok(()) => Ok(()),
            Err(Errno::EAGAIN) => Err(MqError::WouldBlock {
                name: self.name.clone(),
                what: "the queue is full (mq_send: EAGAIN)",
            }),
            Err(e) => Err(self.send_error(e, bytes.len())),
        }
    }

    fn encode(&self, msg: &Msg, priority: u32) -> Result<Vec<u8>> {
        if priority >= MQ_PRIO_MAX {
            return Err(MqError::Invalid(format!(
                "priority {priority} on {}: priorities run from 0 to {}",
                self.name,
                MQ_PRIO_MAX - 1
            )));
        }
        let bytes = msg.encode().map_err(|err| MqError::Codec {
            name: self.name.clone(),
            err,
        })?;
        if bytes.len() > self.msgsize {
            return Err(MqError::Invalid(format!(
                "{}: a {} message of {} bytes does not fit the queue's msgsize of {} bytes",
                self.name,
                msg.kind(),
                bytes.len(),
                self.msgsize
            )));
        }
        Ok(bytes)
    }

    fn send_error(&self, e: Errno, len: usize) -> MqError {
        let hint = match e {
            Errno::EMSGSIZE => format!(
                "the {len}-byte message is longer than the queue's msgsize of {}",
                self.msgsize
            ),
            Errno::EBADF => "the descriptor is not open for writing".into(),
            _ => String::new(),
        };
        call_error("mq_send", &self.name, e, &hint)
    }

    /// Receives the oldest message of the highest priority, waiting up to `timeout`.
    pub fn recv_timeout(&self, timeout: Duration) -> Result<Msg> {
        self.recv_with_priority(timeout).map(|(m, _)| m)
    }

    /// As [`Queue::recv_timeout`], with the message's priority (`mq_receive(3)`).
    pub fn recv_with_priority(&self, timeout: Duration) -> Result<(Msg, u32)> {
        let deadline = Instant::now() + timeout;
        loop {
            match self.receive_once()? {
                Some(got) => return Ok(got),
                None => {
                    if !self.wait_for(PollFlags::POLLIN, deadline)? {
                        return Err(MqError::Timeout {
                            name: self.name.clone(),
                            what: "message",
                            after: timeout,
                        });
                    }
                }
            }
        }
    }

    /// Receives without waiting: an empty queue is [`MqError::WouldBlock`].
    pub fn try_recv(&self) -> Result<(Msg, u32)> {
        self.receive_once()?.ok_or_else(|| MqError::WouldBlock {
            name: self.name.clone(),
            what: "the queue is empty (mq_receive: EAGAIN)",
        })
    }

    /// One `mq_receive`: `Ok(None)` when the queue is empty.
    fn receive_once(&self) -> Result<Option<(Msg, u32)>> {
        let mut buf = vec![0u8; self.msgsize];
        let mut prio = 0u32;
        loop {
            match mq_receive(self.mqd(), &mut buf, &mut prio) {
                Ok(n) => {
                    let msg = Msg::decode(&buf[..n]).map_err(|err| MqError::Codec {
                        name: self.name.clone(),
                        err,
                    })?;
                    return Ok(Some((msg, prio)));
                }
                Err(Errno::EAGAIN) => return Ok(None),
                Err(Errno::EINTR) => {}
                Err(e) => {
                    let hint = if e == Errno::EMSGSIZE {
                        format!(
                            "the receive buffer ({} bytes) is smaller than the queue's msgsize",
                            buf.len()
                        )
                    } else {
                        String::new()
                    };
                    return Err(call_error("mq_receive", &self.name, e, &hint));
                }
            }
        }
    }

    /// Waits (`poll(2)`) until the descriptor is ready for `events` or `deadline` passes;
    /// false on the deadline.
    fn wait_for(&self, events: PollFlags, deadline: Instant) -> Result<bool> {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(false);
            }
            // Round up so that a sub-millisecond rest does not spin with timeout 0.
            let ms = left.as_millis().saturating_add(1).min(i32::MAX as u128) as i32;
            let timeout = PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX);
            let mut fds = [PollFd::new(self.mqd().as_fd(), events)];
            match poll(&mut fds, timeout) {
                Ok(0) => {}
                Ok(_) => return Ok(true),
                Err(Errno::EINTR) => {}
                Err(e) => return Err(call_error("poll", &self.name, e, "")),
            }
        }
    }
}

impl Drop for Queue {
    /// `mq_close(3)`; the owner also `mq_unlink(3)`s the name and forgets it.
    fn drop(&mut self) {
        if let Some(mqd) = self.mqd.take() {
            let _ = mq_close(mqd);
        }
        if self.owner {
            // Under the registry lock, so the signal thread never unlinks a name that this
            // drop already removed (and someone else may have created again since).
            let mut reg = registry();
            let _ = mq_unlink(self.name.as_str());
            reg.retain(|n| n != &self.name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_layout() {
        let b = Msg::Done {
            worker: 0x0102_0304,
        }
        .encode()
        .unwrap();
        assert_eq!(b, [b'V', b'L', 1, T_DONE, 1, 2, 3, 4, 0, 0]);
    }

    #[test]
    fn bounded_text_cuts_at_a_char_boundary() {
        let s = "é".repeat(MAX_TEXT);
        let t = bounded_text(s);
        assert!(t.len() <= MAX_TEXT && t.ends_with('…'));
    }

    #[test]
    fn budget_errors_name_the_limit() {
        let e = create_error("/q", 10, 8192, Errno::EMFILE).to_string();
        assert!(e.contains("RLIMIT_MSGQUEUE (ulimit -q, "), "{e}");
        assert!(
            e.contains(&format!("counts {} bytes", queue_bytes(10, 8192))),
            "{e}"
        );
        let e = create_error("/q", 1, 1, Errno::ENOSPC).to_string();
        assert!(e.contains("/proc/sys/fs/mqueue/queues_max ("), "{e}");
        let e = create_error("/q", 1, 1, Errno::EACCES).to_string();
        assert!(e.contains("second '/'"), "{e}");
    }

    #[test]
    fn queue_bytes_matches_the_measured_budget() {
        // Nine 10×8192 queues fit 819200 bytes, the tenth does not (measured here).
        let q = queue_bytes(10, 8192);
        assert!(9 * q <= 819_200 && 10 * q > 819_200, "{q}");
    }
}
